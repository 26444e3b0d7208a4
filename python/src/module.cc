// collx._collx: the Python module (see python/README.md). Contexts, every collective on
// buffer-protocol objects and CPU torch tensors, blocking or async (a Work), collx's errors as
// Python exception classes.
//
// Threads: every call that talks to peers or to the store releases the GIL. A custom reduce
// op written in Python takes the GIL back for each piece it reduces.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "buffers.h"
#include "collx/collx.h"

namespace collx::python {

namespace {

using std::chrono::milliseconds;

// ---- exceptions ------------------------------------------------------------------------

// The Python classes of collx's error kinds, created once at import (leaked on purpose:
// they live as long as the interpreter).
struct ErrorClasses {
  PyObject* base = nullptr;
  PyObject* kinds[6] = {};
};
ErrorClasses& errorClasses() {
  static ErrorClasses classes;
  return classes;
}

PyObject* classOf(ErrorKind kind) {
  const int k = static_cast<int>(kind);
  return (k >= 0 && k < 6) ? errorClasses().kinds[k] : errorClasses().base;
}

// Raises `e` as the Python class of its kind, with its message and parts as attributes.
void raiseError(const Error& e) {
  PyObject* cls = classOf(e.kind());
  py::object instance =
      py::reinterpret_steal<py::object>(PyObject_CallFunction(cls, "s", e.what()));
  if (!instance) return;  // the constructor raised: let that propagate
  instance.attr("kind") = errorKindName(e.kind());
  instance.attr("rank") = e.rank() >= 0 ? py::object(py::int_(e.rank())) : py::none();
  instance.attr("peer") = e.peer() >= 0 ? py::object(py::int_(e.peer())) : py::none();
  instance.attr("op") = e.op();
  instance.attr("detail") = e.detail();
  PyErr_SetObject(cls, instance.ptr());
}

void createErrorClasses(py::module_& m) {
  auto make = [&](const char* name, PyObject* bases, const char* doc) {
    std::string qualified = std::string("collx.") + name;
    PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
    if (cls == nullptr) throw py::error_already_set();
    for (const char* attr : {"kind", "rank", "peer", "op", "detail"}) {
      PyObject_SetAttrString(cls, attr, Py_None);
    }
    m.add_object(name, py::handle(cls));
    return cls;
  };
  ErrorClasses& c = errorClasses();
  c.base = make("Error", PyExc_RuntimeError,
                "Base class of every error collx raises. The message reads 'rank R: op (peer "
                "P): detail'; the attributes kind, rank, peer, op and detail hold its parts "
                "(rank and peer are None when there is none).");
  auto sub = [&](const char* name, const char* doc, PyObject* extra = nullptr) {
    py::tuple bases = extra ? py::make_tuple(py::handle(c.base), py::handle(extra))
                            : py::make_tuple(py::handle(c.base));
    return make(name, bases.ptr(), doc);
  };
  c.kinds[static_cast<int>(ErrorKind::kIo)] =
      sub("IoError", "A socket, file or peer failed: a peer died, a connection broke.");
  c.kinds[static_cast<int>(ErrorKind::kTimeout)] =
      sub("TimeoutError", "A deadline passed (the call's timeout, else COLLX_TIMEOUT).");
  c.kinds[static_cast<int>(ErrorKind::kInvalidArgument)] =
      sub("InvalidArgument",
          "The caller passed something wrong: a size, root, dtype, op, URL, a non-contiguous "
          "or read-only buffer. Also a ValueError.",
          PyExc_ValueError);
  c.kinds[static_cast<int>(ErrorKind::kMismatch)] =
      sub("MismatchError",
          "Ranks disagree: a different collective, count, dtype, op or root on another rank, "
          "or two processes with one rank. Raised on both sides.");
  c.kinds[static_cast<int>(ErrorKind::kUnsupported)] =
      sub("Unsupported", "Valid, but this build or transport cannot do it.");
  c.kinds[static_cast<int>(ErrorKind::kAborted)] =
      sub("Aborted", "Context.abort() was called: every call in flight and later fails.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      raiseError(e);
    }
  });
}

// ---- arguments -------------------------------------------------------------------------

std::optional<milliseconds> toDuration(py::handle value, const Where& where) {
  if (value.is_none()) return std::nullopt;
  double seconds = 0;
  if (py::hasattr(value, "total_seconds")) {
    seconds = value.attr("total_seconds")().cast<double>();
  } else {
    seconds = value.cast<double>();
  }
  if (!(seconds > 0)) {
    throw InvalidArgument(where, "timeout must be positive, got " + std::to_string(seconds) + " s");
  }
  return milliseconds(static_cast<std::int64_t>(seconds * 1000 + 0.5));
}

std::optional<DataType> toDataType(py::handle value, const Where& where) {
  if (value.is_none()) return std::nullopt;
  if (py::isinstance<DataType>(value)) return value.cast<DataType>();
  std::string name;
  if (py::isinstance<py::str>(value)) {
    name = value.cast<std::string>();
  } else if (py::hasattr(value, "is_floating_point") || py::hasattr(value, "itemsize")) {
    // torch.bfloat16 (str: "torch.bfloat16"), numpy.dtype('float32')
    name = py::str(value);
    if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  } else {
    name = py::str(py::module_::import("numpy").attr("dtype")(value).attr("name"));
  }
  std::optional<DataType> type = parseDataType(name);
  if (!type) {
    throw InvalidArgument(where, "'" + name +
                                     "' is not a collx type (int8, uint8, int32, int64, float16, "
                                     "bfloat16, float32, float64)");
  }
  return type;
}

// A Python function as a collx reduction: fn(a, b) with numpy arrays over inout and in; it
// either updates a in place (returning None or a) or returns the result, which is copied
// into a. bfloat16 elements arrive as uint16 (numpy has no bfloat16).
struct PyReduceFn {
  py::object fn;
  std::mutex mutex;
  py::object error;  // the first exception the function raised, until a call reports it

  ~PyReduceFn() {
    if (!Py_IsInitialized()) {
      fn.release();
      error.release();
      return;
    }
    py::gil_scoped_acquire gil;
    fn = py::object();
    error = py::object();
  }

  // Called by the engine on any thread, without the GIL.
  void reduce(void* inout, const void* in, std::size_t count, DataType type) {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    try {
      static const char* const kNumpyNames[] = {"int8",    "uint8",  "int32",   "int64",
                                                "float16", "uint16", "float32", "float64"};
      const auto bytes = static_cast<py::ssize_t>(count * dataTypeSize(type));
      py::module_ numpy = py::module_::import("numpy");
      const char* name = kNumpyNames[static_cast<int>(type)];
      py::object a =
          numpy.attr("frombuffer")(py::memoryview::from_memory(inout, bytes, false), name);
      py::object b = numpy.attr("frombuffer")(py::memoryview::from_memory(in, bytes), name);
      py::object result = fn(a, b);
      if (!result.is_none() && !result.is(a)) numpy.attr("copyto")(a, result, "unsafe");
    } catch (py::error_already_set& e) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!error) error = e.value();
    }
  }

  // Raises (with the GIL) what the function raised during the call that just ended.
  void raiseIfFailed() {
    py::object failed;
    {
      std::lock_guard<std::mutex> lock(mutex);
      std::swap(failed, error);
    }
    if (failed) {
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(failed.ptr())), failed.ptr());
      throw py::error_already_set();
    }
  }
};

// The Python ReduceOp: a collx op and, for a custom one, its Python function (whose
// exceptions a call reports when it ends).
struct PyReduceOp {
  ReduceOp op;
  std::shared_ptr<PyReduceFn> fn;
};

// The op argument: a ReduceOp or its name ("sum", "max", torch's "ReduceOp.SUM").
PyReduceOp toReduceOp(py::handle value, const Where& where) {
  if (value.is_none()) return {ReduceOpKind::kSum, nullptr};
  if (py::isinstance<PyReduceOp>(value)) return value.cast<PyReduceOp>();
  std::string name = py::str(value);
  std::string lower;
  for (char ch : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower.rfind("reduceop.", 0) == 0) lower = lower.substr(9);
  if (lower == "product") lower = "prod";
  std::optional<ReduceOpKind> kind = parseReduceOpKind(lower);
  if (!kind) {
    throw InvalidArgument(where, "'" + name +
                                     "' is not a reduce op (sum, prod, min, max, "
                                     "avg, band, bor, bxor or ReduceOp.custom)");
  }
  return {*kind, nullptr};
}

// bool arrays reduce as uint8: sum and prod become logical or and and, as in torch and
// numpy (a sum of trues stays a valid bool).
ReduceOp forElements(const ReduceOp& op, const Buffer& buffer) {
  if (buffer.typeName() != "bool") return op;
  if (op.kind() == ReduceOpKind::kSum) return ReduceOpKind::kBor;
  if (op.kind() == ReduceOpKind::kProd) return ReduceOpKind::kBand;
  return op;
}

// ---- contexts and calls ----------------------------------------------------------------

// What a call keeps alive until it ends: its buffers, its result, its reduce function.
struct Held {
  std::vector<Buffer> buffers;
  py::object result = py::none();
  std::shared_ptr<PyReduceFn> fn;
};

// A Python Context: the collx context and the async calls whose Work was dropped before
// they ended (their buffers stay borrowed until they do). Touched with the GIL held.
struct State {
  std::shared_ptr<Context> context;
  std::vector<std::pair<Work, Held>> orphans;

  // Forgets the orphans that have ended.
  void sweep() {
    for (std::size_t i = 0; i < orphans.size();) {
      bool done = false;
      {
        py::gil_scoped_release release;
        done = orphans[i].first.test();
      }
      if (done) {
        orphans.erase(orphans.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }

  Context& get(const char* what) {
    if (!context) throw InvalidArgument(Where{-1, what, -1}, "the context was closed");
    sweep();
    return *context;
  }

  void close() {
    if (!context) return;
    for (auto& [work, held] : orphans) {
      py::gil_scoped_release release;
      try {
        work.wait();
      } catch (const Error&) {
        // The call's error had no one left to receive it.
      }
    }
    orphans.clear();
    std::shared_ptr<Context> last = std::move(context);
    py::gil_scoped_release release;
    last.reset();  // may wait for the other ranks to leave when this rank hosts the store
  }
};

class PyWork {
 public:
  PyWork(std::shared_ptr<State> state, Work work, Held held)
      : state_(std::move(state)), work_(std::move(work)), held_(std::move(held)) {}
  PyWork(const PyWork&) = delete;
  PyWork& operator=(const PyWork&) = delete;

  ~PyWork() {
    if (finished_ || !work_.valid()) return;
    bool done = false;
    {
      py::gil_scoped_release release;
      done = work_.test();
    }
    if (!done) state_->orphans.emplace_back(std::move(work_), std::move(held_));
  }

  bool wait(py::handle timeout) {
    std::optional<milliseconds> limit = toDuration(timeout, Where{-1, "Work.wait", -1});
    bool done = false;
    {
      py::gil_scoped_release release;
      done = work_.wait(limit);
    }
    if (done) end();
    return done;
  }

  bool isCompleted() {
    bool done = false;
    {
      py::gil_scoped_release release;
      done = work_.test();
    }
    return done;
  }

  py::object result() {
    wait(py::none());
    return held_.result;
  }

  py::object exception() {
    if (!isCompleted()) return py::none();
    std::exception_ptr error = work_.error();
    if (!error) return py::none();
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      raiseError(e);
    }
    py::error_already_set raised;
    return raised.value();
  }

 private:
  void end() {
    if (finished_) return;
    finished_ = true;
    if (held_.fn) held_.fn->raiseIfFailed();
  }

  std::shared_ptr<State> state_;
  Work work_;
  Held held_;
  bool finished_ = false;
};

// Options every collective takes.
struct Common {
  std::optional<DataType> dtype;
  CollectiveOptions options;
  bool async = false;
};

Common common(py::handle dtype, py::handle algorithm, py::handle timeout, bool async,
              const Where& where) {
  Common c;
  c.dtype = toDataType(dtype, where);
  if (!algorithm.is_none()) c.options.algorithm = algorithm.cast<std::string>();
  c.options.timeout = toDuration(timeout, where);
  c.async = async;
  return c;
}

Counts toCounts(py::handle value, std::uint64_t scale, const char* what, const Where& where) {
  Counts out;
  for (py::handle item : py::iter(value)) {
    long long v = py::reinterpret_borrow<py::object>(item).cast<long long>();
    if (v < 0) {
      throw InvalidArgument(where,
                            std::string(what) + " holds a negative count " + std::to_string(v));
    }
    out.push_back(static_cast<std::uint64_t>(v) * scale);
  }
  return out;
}

Counts prefix(const Counts& counts) {
  Counts out(counts.size());
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    out[i] = at;
    at += counts[i];
  }
  return out;
}

std::uint64_t sum(const Counts& counts) {
  std::uint64_t total = 0;
  for (auto c : counts) total += c;
  return total;
}

class PyContext {
 public:
  explicit PyContext(std::shared_ptr<Context> context) : state_(std::make_shared<State>()) {
    state_->context = std::move(context);
  }
  ~PyContext() { state_->close(); }

  Context& ctx(const char* what) { return state_->get(what); }
  const std::shared_ptr<State>& state() const { return state_; }
  void close() { state_->close(); }
  bool closed() const { return !state_->context; }

  // Runs `call(async)`: blocking with the GIL released and returns held.result, or starts
  // it and returns a Work that keeps `held` alive until the call ends.
  template <class Call>
  py::object run(Held held, bool async, Call&& call) {
    if (!async) {
      {
        py::gil_scoped_release release;
        call(false);
      }
      if (held.fn) held.fn->raiseIfFailed();
      return held.result;
    }
    Work work;
    {
      py::gil_scoped_release release;
      work = call(true);
    }
    return py::cast(std::make_unique<PyWork>(state_, std::move(work), std::move(held)));
  }

 private:
  std::shared_ptr<State> state_;
};

Where whereOf(Context& ctx, const char* what) { return Where{ctx.rank(), what, -1}; }

std::vector<py::ssize_t> tail(const Buffer& b) {
  if (b.shape().empty()) return {};
  return {b.shape().begin() + 1, b.shape().end()};
}

// ---- the collectives -------------------------------------------------------------------

py::object allreduce(PyContext& self, py::handle array, py::handle out, py::handle op,
                     py::handle dtype, py::handle algorithm, py::handle timeout, bool async) {
  Context& ctx = self.ctx("allreduce");
  Where where = whereOf(ctx, "allreduce");
  Common c = common(dtype, algorithm, timeout, async, where);
  Held held;
  const bool inPlace = out.is_none() || out.is(array);
  Buffer in = Buffer::acquire(array, inPlace, "the input", where);
  Typed t = typeOf(in, c.dtype, true, "the input", where);
  void* dst = in.data();
  if (!inPlace) {
    Buffer o = Buffer::acquire(out, true, "out", where);
    Typed to = typeOf(o, c.dtype, true, "out", where);
    checkSameType(in, t, o, to, "out", where);
    if (to.count != t.count) {
      throw InvalidArgument(where, "out holds " + std::to_string(to.count) +
                                       " elements, the input " + std::to_string(t.count));
    }
    dst = o.data();
    held.result = o.object();
    held.buffers.push_back(std::move(o));
  } else {
    held.result = in.object();
  }
  AllreduceOptions options;
  static_cast<CollectiveOptions&>(options) = c.options;
  PyReduceOp pyOp = toReduceOp(op, where);
  options.op = forElements(pyOp.op, in);
  held.fn = pyOp.fn;
  const void* src = in.data();
  held.buffers.push_back(std::move(in));
  return self.run(std::move(held), c.async, [&](bool a) -> Work {
    if (a) return allreduceAsync(ctx, src, dst, t.count, t.dtype, options);
    allreduce(ctx, src, dst, t.count, t.dtype, options);
    return {};
  });
}

py::object reduceCall(PyContext& self, py::handle array, py::handle out, int root, py::handle op,
                      py::handle dtype, py::handle algorithm, py::handle timeout, bool async) {
  Context& ctx = self.ctx("reduce");
  Where where = whereOf(ctx, "reduce");
  Common c = common(dtype, algorithm, timeout, async, where);
  const bool isRoot = ctx.rank() == root;
  Held held;
  const bool inPlace = !isRoot || out.is_none() || out.is(array);
  Buffer in = Buffer::acquire(array, isRoot && inPlace, "the input", where);
  Typed t = typeOf(in, c.dtype, true, "the input", where);
  void* dst = in.data();
  if (isRoot) held.result = in.object();
  if (!inPlace) {
    Buffer o = Buffer::acquire(out, true, "out", where);
    Typed to = typeOf(o, c.dtype, true, "out", where);
    checkSameType(in, t, o, to, "out", where);
    if (to.count != t.count) {
      throw InvalidArgument(where, "out holds " + std::to_string(to.count) +
                                       " elements, the input " + std::to_string(t.count));
    }
    dst = o.data();
    held.result = o.object();
    held.buffers.push_back(std::move(o));
  }
  ReduceOptions options;
  static_cast<CollectiveOptions&>(options) = c.options;
  PyReduceOp pyOp = toReduceOp(op, where);
  options.op = forElements(pyOp.op, in);
  held.fn = pyOp.fn;
  const void* src = in.data();
  held.buffers.push_back(std::move(in));
  return self.run(std::move(held), c.async, [&](bool a) -> Work {
    if (a) return reduceAsync(ctx, src, dst, t.count, t.dtype, root, options);
    reduce(ctx, src, dst, t.count, t.dtype, root, options);
    return {};
  });
}

py::object broadcastCall(PyContext& self, py::handle array, int root, py::handle dtype,
                         py::handle algorithm, py::handle timeout, bool async) {
  Context& ctx = self.ctx("broadcast");
  Where where = whereOf(ctx, "broadcast");
  Common c = common(dtype, algorithm, timeout, async, where);
  Held held;
  Buffer b = Buffer::acquire(array, ctx.rank() != root, "the array", where);
  Typed t = typeOf(b, c.dtype, false, "the array", where);
  void* data = b.data();
  held.result = b.object();
  held.buffers.push_back(std::move(b));
  return self.run(std::move(held), c.async, [&](bool a) -> Work {
    if (a) return broadcastAsync(ctx, data, t.count, t.dtype, root, c.options);
    broadcast(ctx, data, t.count, t.dtype, root, c.options);
    return {};
  });
}

// Allocates or checks the output of allgather and gather: size * n elements.
Buffer gatherOutput(Context& ctx, const Buffer& in, const Typed& t, py::handle out,
                    std::optional<DataType> override, Held& held, const Where& where,
                    std::uint64_t expected) {
  py::object o = py::reinterpret_borrow<py::object>(out);
  if (o.is_none()) {
    std::vector<py::ssize_t> shape{ctx.size()};
    for (auto d : in.shape()) shape.push_back(d);
    if (in.shape().empty()) shape = {static_cast<py::ssize_t>(expected / t.scale)};
    o = in.allocateLike(shape);
  }
  Buffer ob = Buffer::acquire(o, true, "out", where);
  Typed to = typeOf(ob, override, false, "out", where);
  checkSameType(in, t, ob, to, "out", where);
  if (to.count != expected) {
    throw InvalidArgument(where, "out holds " + std::to_string(to.count / to.scale) +
                                     " elements, the call needs " +
                                     std::to_string(expected / t.scale));
  }
  held.result = o;
  return ob;
}

py::object allgatherCall(PyContext& self, py::handle array, py::handle out, py::handle dtype,
                         py::handle algorithm, py::handle timeout, bool async) {
  Context& ctx = self.ctx("allgather");
  Where where = whereOf(ctx, "allgather");
  Common c = common(dtype, algorithm, timeout, async, where);
  Held held;
  const auto P = static_cast<std::uint64_t>(ctx.size());
  if (array.is_none()) {
    // In place: out's own block already holds this rank's contribution.
    if (out.is_none()) throw InvalidArgument(where, "in place (array=None) needs out");
    Buffer ob = Buffer::acquire(out, true, "out", where);
    Typed to = typeOf(ob, c.dtype, false, "out", where);
    if (to.count % P != 0) {
      throw InvalidArgument(where, "out holds " + std::to_string(to.count / to.scale) +
                                       " elements, not a multiple of the " + std::to_string(P) +
                                       " ranks");
    }
    void* dst = ob.data();
    held.result = ob.object();
    held.buffers.push_back(std::move(ob));
    const std::uint64_t n = to.count / P;
    return self.run(std::move(held), c.async, [&](bool a) -> Work {
      if (a) return allgatherAsync(ctx, nullptr, dst, n, to.dtype, c.options);
      allgather(ctx, nullptr, dst, n, to.dtype, c.options);
      return {};
    });
  }
  Buffer in = Buffer::acquire(array, false, "the input", where);
  Typed t = typeOf(in, c.dtype, false, "the input", where);
  Buffer ob = gatherOutput(ctx, in, t, out, c.dtype, held, where, t.count * P);
  const void* src = in.data();
  void* dst = ob.data();
  held.buffers.push_back(std::move(in));
  held.buffers.push_back(std::move(ob));
  return self.run(std::move(held), c.async, [&](bool a) -> Work {
    if (a) return allgatherAsync(ctx, src, dst, t.count, t.dtype, c.options);
    allgather(ctx, src, dst, t.count, t.dtype, c.options);
    return {};
  });
}

// Per-rank counts and displacements of a v-collective, scaled to the moved type.
struct Layout {
  Counts counts;
  Counts displs;
};

Layout layoutOf(py::handle counts, py::handle displs, std::uint64_t scale, const char* what,
                const Where& where) {
  Layout l;
  l.counts = toCounts(counts, scale, what, where);
  l.displs = displs.is_none() ? prefix(l.counts) : toCounts(displs, scale, "displs", where);
  return l;
}

std::uint64_t extent(const Layout& l) {
  std::uint64_t end = 0;
  for (std::size_t i = 0; i < l.counts.size() && i < l.displs.size(); ++i) {
    if (l.counts[i] > 0) end = std::max(end, l.displs[i] + l.counts[i]);
  }
  return end;
}

// Checks (or allocates, 1-D) a v-collective's output that must span `needed` elements.
Buffer vOutput(const Buffer* like, const Typed& t, py::handle out, std::optional<DataType> override,
               std::uint64_t needed, Held& held, const Where& where) {
  py::object o = py::reinterpret_borrow<py::object>(out);
  if (o.is_none()) {
    if (like == nullptr) throw InvalidArgument(where, "out is required");
    o = like->allocateLike({static_cast<py::ssize_t>(needed / t.scale)});
  }
  Buffer ob = Buffer::acquire(o, true, "out", where);
  Typed to = typeOf(ob, override, false, "out", where);
  if (like != nullptr) checkSameType(*like, t, ob, to, "out", where);
  if (to.count < needed) {
    throw InvalidArgument(where, "out holds " + std::to_string(to.count / to.scale) +
                                     " elements, the counts and displacements need " +
                                     std::to_string(needed / to.scale));
  }
  held.result = o;
  return ob;
}

py::object allgathervCall(PyContext& self, py::handle array, py::handle counts, py::handle out,
                          py::handle displs, py::handle dtype, py::handle algorithm,
                          py::handle timeout, bool async) {
  Context& ctx = self.ctx("allgatherv");
  Where where = whereOf(ctx, "allgatherv");
  Common c = common(dtype, algorithm, timeout, async, where);
  Held held;
  if (array.is_none()) {
    if (out.is_none()) throw InvalidArgument(where, "in place (array=None) needs out");
    Buffer ob = Buffer::acquire(out, true, "out", where);
    Typed to = typeOf(ob, c.dtype, false, "out", where);
    Layout l = layoutOf(counts, displs, to.scale, "counts", where);
    if (to.count < extent(l)) {
      throw InvalidArgument(where, "out holds " + std::to_string(to.count / to.scale) +
                                       " elements, the counts and displacements need " +
                                       std::to_string(extent(l) / to.scale));
    }
    void* dst = ob.data();
    held.result = ob.object();
    held.buffers.push_back(std::move(ob));
    const std::uint64_t mine =
        static_cast<std::size_t>(ctx.rank()) < l.counts.size() ? l.counts[ctx.rank()] : 0;
    return self.run(std::move(held), c.async, [&](bool a) -> Work {
      if (a)
        return allgathervAsync(ctx, nullptr, mine, dst, l.counts, l.displs, to.dtype, c.options);
      allgatherv(ctx, nullptr, mine, dst, l.counts, l.displs, to.dtype, c.options);
      return {};
    });
  }
  Buffer in = Buffer::acquire(array, false, "the input", where);
  Typed t = typeOf(in, c.dtype, false, "the input", where);
  Layout l = layoutOf(counts, displs, t.scale, "counts", where);
  Buffer ob = vOutput(&in, t, out, c.dtype, extent(l), held, where);
  const void* src = in.data();
  void* dst = ob.data();
  held.buffers.push_back(std::move(in));
  held.buffers.push_back(std::move(ob));
  return self.run(std::move(held), c.async, [&](bool a) -> Work {
    if (a) return allgathervAsync(ctx, src, t.count, dst, l.counts, l.displs, t.dtype, c.options);
    allgatherv(ctx, src, t.count, dst, l.counts, l.displs, t.dtype, c.options);
    return {};
  });
}

py::object reduceScatterCall(PyContext& self, py::handle array, py::handle out, py::handle op,
                             py::handle dtype, py::handle algorithm, py::handle timeout,
                             bool async) {
  Context& ctx = self.ctx("reduce_scatter");
  Where where = whereOf(ctx, "reduce_scatter");
  Common c = common(dtype, algorithm, timeout, async, where);
  Held held;
  const auto P = static_cast<std::uint64_t>(ctx.size());
  Buffer in = Buffer::acquire(array, false, "the input", where);
  Typed t = typeOf(in, c.dtype, true, "the input", where);
  if (t.count % P != 0) {
    throw InvalidArgument(where, "the input holds " + std::to_string(t.count) +
                                     " elements, not a multiple of the " + std::to_string(P) +
                                     " ranks");
  }
  const std::uint64_t n = t.count / P;
  py::object o = py::reinterpret_borrow<py::object>(out);
  if (o.is_none()) {
    std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(n)};
    if (!in.shape().empty() && static_cast<std::uint64_t>(in.shape()[0]) == P) shape = tail(in);
    o = in.allocateLike(shape);
  }
  Buffer ob = Buffer::acquire(o, true, "out", where);
  Typed to = typeOf(ob, c.dtype, true, "out", where);
  checkSameType(in, t, ob, to, "out", where);
  if (to.count != n) {
    throw InvalidArgument(where, "out holds " + std::to_string(to.count) +
                                     " elements, one rank's block of the input is " +
                                     std::to_string(n));
  }
  ReduceOptions options;
  static_cast<CollectiveOptions&>(options) = c.options;
  PyReduceOp pyOp = toReduceOp(op, where);
  options.op = forElements(pyOp.op, in);
  held.fn = pyOp.fn;
  held.result = o;
  const void* src = in.data();
  void* dst = ob.data();
  held.buffers.push_back(std::move(in));
  held.buffers.push_back(std::move(ob));
  return self.run(std::move(held), c.async, [&](bool a) -> Work {
    if (a) return reduceScatterAsync(ctx, src, dst, n, t.dtype, options);
    reduceScatter(ctx, src, dst, n, t.dtype, options);
    return {};
  });
}

py::object reduceScattervCall(PyContext& self, py::handle array, py::handle counts, py::handle out,
                              py::handle op, py::handle dtype, py::handle algorithm,
                              py::handle timeout, bool async) {
  Context& ctx = self.ctx("reduce_scatterv");
  Where where = whereOf(ctx, "reduce_scatterv");
  Common c = common(dtype, algorithm, timeout, async, where);
  Held held;
  Buffer in = Buffer::acquire(array, false, "the input", where);
  Typed t = typeOf(in, c.dtype, true, "the input", where);
  Counts cs = toCounts(counts, 1, "counts", where);
  if (cs.size() != static_cast<std::size_t>(ctx.size())) {
    throw InvalidArgument(where, "counts has " + std::to_string(cs.size()) + " entries for " +
                                     std::to_string(ctx.size()) + " ranks");
  }
  if (sum(cs) != t.count) {
    throw InvalidArgument(where, "the input holds " + std::to_string(t.count) +
                                     " elements but the counts add up to " +
                                     std::to_string(sum(cs)));
  }
  const std::uint64_t mine = cs[ctx.rank()];
  py::object o = py::reinterpret_borrow<py::object>(out);
  if (o.is_none()) o = in.allocateLike({static_cast<py::ssize_t>(mine)});
  Buffer ob = Buffer::acquire(o, true, "out", where);
  Typed to = typeOf(ob, c.dtype, true, "out", where);
  checkSameType(in, t, ob, to, "out", where);
  if (to.count != mine) {
    throw InvalidArgument(where, "out holds " + std::to_string(to.count) + " elements, counts[" +
                                     std::to_string(ctx.rank()) + "] is " + std::to_string(mine));
  }
  ReduceOptions options;
  static_cast<CollectiveOptions&>(options) = c.options;
  PyReduceOp pyOp = toReduceOp(op, where);
  options.op = forElements(pyOp.op, in);
  held.fn = pyOp.fn;
  held.result = o;
  const void* src = in.data();
  void* dst = ob.data();
  held.buffers.push_back(std::move(in));
  held.buffers.push_back(std::move(ob));
  return self.run(std::move(held), c.async, [&](bool a) -> Work {
    if (a) return reduceScattervAsync(ctx, src, dst, cs, t.dtype, options);
    reduceScatterv(ctx, src, dst, cs, t.dtype, options);
    return {};
  });
}

py::object gatherCall(PyContext& self, py::handle array, py::handle out, int root, py::handle dtype,
                      py::handle algorithm, py::handle timeout, bool async) {
  Context& ctx = self.ctx("gather");
  Where where = whereOf(ctx, "gather");
  Common c = common(dtype, algorithm, timeout, async, where);
  Held held;
  const auto P = static_cast<std::uint64_t>(ctx.size());
  Buffer in = Buffer::acquire(array, false, "the input", where);
  Typed t = typeOf(in, c.dtype, false, "the input", where);
  void* dst = nullptr;
  if (ctx.rank() == root) {
    Buffer ob = gatherOutput(ctx, in, t, out, c.dtype, held, where, t.count * P);
    dst = ob.data();
    held.buffers.push_back(std::move(ob));
  }
  const void* src = in.data();
  held.buffers.push_back(std::move(in));
  return self.run(std::move(held), c.async, [&](bool a) -> Work {
    if (a) return gatherAsync(ctx, src, dst, t.count, t.dtype, root, c.options);
    gather(ctx, src, dst, t.count, t.dtype, root, c.options);
    return {};
  });
}

py::object gathervCall(PyContext& self, py::handle array, py::handle counts, py::handle out,
                       py::handle displs, int root, py::handle dtype, py::handle algorithm,
                       py::handle timeout, bool async) {
  Context& ctx = self.ctx("gatherv");
  Where where = whereOf(ctx, "gatherv");
  Common c = common(dtype, algorithm, timeout, async, where);
  Held held;
  Buffer in = Buffer::acquire(array, false, "the input", where);
  Typed t = typeOf(in, c.dtype, false, "the input", where);
  Layout l = layoutOf(counts, displs, t.scale, "counts", where);
  void* dst = nullptr;
  if (ctx.rank() == root) {
    Buffer ob = vOutput(&in, t, out, c.dtype, extent(l), held, where);
    dst = ob.data();
    held.buffers.push_back(std::move(ob));
  }
  const void* src = in.data();
  held.buffers.push_back(std::move(in));
  return self.run(std::move(held), c.async, [&](bool a) -> Work {
    if (a)
      return gathervAsync(ctx, src, t.count, dst, l.counts, l.displs, t.dtype, root, c.options);
    gatherv(ctx, src, t.count, dst, l.counts, l.displs, t.dtype, root, c.options);
    return {};
  });
}

py::object scatterCall(PyContext& self, py::handle array, py::handle out, int root,
                       py::handle dtype, py::handle algorithm, py::handle timeout, bool async) {
  Context& ctx = self.ctx("scatter");
  Where where = whereOf(ctx, "scatter");
  Common c = common(dtype, algorithm, timeout, async, where);
  Held held;
  const auto P = static_cast<std::uint64_t>(ctx.size());
  const bool isRoot = ctx.rank() == root;
  std::optional<Buffer> in;
  std::optional<Typed> t;
  if (isRoot) {
    if (array.is_none()) throw InvalidArgument(where, "the root needs the array to scatter");
    in.emplace(Buffer::acquire(array, false, "the input", where));
    t = typeOf(*in, c.dtype, false, "the input", where);
    if (t->count % P != 0) {
      throw InvalidArgument(where, "the input holds " + std::to_string(t->count / t->scale) +
                                       " elements, not a multiple of the " + std::to_string(P) +
                                       " ranks");
    }
  }
  py::object o = py::reinterpret_borrow<py::object>(out);
  if (o.is_none()) {
    if (!isRoot) {
      throw InvalidArgument(where,
                            "out (the array that receives this rank's block) is required "
                            "on every rank but the root");
    }
    std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(t->count / P / t->scale)};
    if (!in->shape().empty() && static_cast<std::uint64_t>(in->shape()[0]) == P) shape = tail(*in);
    o = in->allocateLike(shape);
  }
  Buffer ob = Buffer::acquire(o, true, "out", where);
  Typed to = typeOf(ob, c.dtype, false, "out", where);
  if (isRoot) {
    checkSameType(*in, *t, ob, to, "out", where);
    if (to.count * P != t->count) {
      throw InvalidArgument(where, "out holds " + std::to_string(to.count / to.scale) +
                                       " elements, one rank's block of the input is " +
                                       std::to_string(t->count / P / t->scale));
    }
  }
  held.result = o;
  const void* src = in ? in->data() : nullptr;
  void* dst = ob.data();
  if (in) held.buffers.push_back(std::move(*in));
  held.buffers.push_back(std::move(ob));
  return self.run(std::move(held), c.async, [&](bool a) -> Work {
    if (a) return scatterAsync(ctx, src, dst, to.count, to.dtype, root, c.options);
    scatter(ctx, src, dst, to.count, to.dtype, root, c.options);
    return {};
  });
}

py::object scattervCall(PyContext& self, py::handle array, py::handle counts, py::handle out,
                        py::handle displs, int root, py::handle dtype, py::handle algorithm,
                        py::handle timeout, bool async) {
  Context& ctx = self.ctx("scatterv");
  Where where = whereOf(ctx, "scatterv");
  Common c = common(dtype, algorithm, timeout, async, where);
  Held held;
  const bool isRoot = ctx.rank() == root;
  if (out.is_none()) throw InvalidArgument(where, "out (the array that receives) is required");
  Buffer ob = Buffer::acquire(out, true, "out", where);
  Typed to = typeOf(ob, c.dtype, false, "out", where);
  Layout l = layoutOf(counts, displs, to.scale, "counts", where);
  const void* src = nullptr;
  if (isRoot) {
    if (array.is_none()) throw InvalidArgument(where, "the root needs the array to scatter");
    Buffer in = Buffer::acquire(array, false, "the input", where);
    Typed t = typeOf(in, c.dtype, false, "the input", where);
    checkSameType(in, t, ob, to, "out", where);
    if (t.count < extent(l)) {
      throw InvalidArgument(where, "the input holds " + std::to_string(t.count / t.scale) +
                                       " elements, the counts and displacements need " +
                                       std::to_string(extent(l) / t.scale));
    }
    src = in.data();
    held.buffers.push_back(std::move(in));
  }
  held.result = ob.object();
  void* dst = ob.data();
  held.buffers.push_back(std::move(ob));
  return self.run(std::move(held), c.async, [&](bool a) -> Work {
    if (a)
      return scattervAsync(ctx, src, l.counts, l.displs, dst, to.count, to.dtype, root, c.options);
    scatterv(ctx, src, l.counts, l.displs, dst, to.count, to.dtype, root, c.options);
    return {};
  });
}

py::object alltoallCall(PyContext& self, py::handle array, py::handle out, py::handle dtype,
                        py::handle algorithm, py::handle timeout, bool async) {
  Context& ctx = self.ctx("alltoall");
  Where where = whereOf(ctx, "alltoall");
  Common c = common(dtype, algorithm, timeout, async, where);
  Held held;
  const auto P = static_cast<std::uint64_t>(ctx.size());
  Buffer in = Buffer::acquire(array, false, "the input", where);
  Typed t = typeOf(in, c.dtype, false, "the input", where);
  if (t.count % P != 0) {
    throw InvalidArgument(where, "the input holds " + std::to_string(t.count / t.scale) +
                                     " elements, not a multiple of the " + std::to_string(P) +
                                     " ranks");
  }
  py::object o = py::reinterpret_borrow<py::object>(out);
  if (o.is_none()) o = in.allocateLike(in.shape());
  Buffer ob = Buffer::acquire(o, true, "out", where);
  Typed to = typeOf(ob, c.dtype, false, "out", where);
  checkSameType(in, t, ob, to, "out", where);
  if (to.count != t.count) {
    throw InvalidArgument(where, "out holds " + std::to_string(to.count / to.scale) +
                                     " elements, the input " + std::to_string(t.count / t.scale));
  }
  held.result = o;
  const void* src = in.data();
  void* dst = ob.data();
  const std::uint64_t n = t.count / P;
  held.buffers.push_back(std::move(in));
  held.buffers.push_back(std::move(ob));
  return self.run(std::move(held), c.async, [&](bool a) -> Work {
    if (a) return alltoallAsync(ctx, src, dst, n, t.dtype, c.options);
    alltoall(ctx, src, dst, n, t.dtype, c.options);
    return {};
  });
}

py::object alltoallvCall(PyContext& self, py::handle array, py::handle sendCounts, py::handle out,
                         py::handle recvCounts, py::handle sendDispls, py::handle recvDispls,
                         py::handle dtype, py::handle algorithm, py::handle timeout, bool async) {
  Context& ctx = self.ctx("alltoallv");
  Where where = whereOf(ctx, "alltoallv");
  Common c = common(dtype, algorithm, timeout, async, where);
  Held held;
  Buffer in = Buffer::acquire(array, false, "the input", where);
  Typed t = typeOf(in, c.dtype, false, "the input", where);
  Layout send = layoutOf(sendCounts, sendDispls, t.scale, "send_counts", where);
  Layout recv = layoutOf(recvCounts, recvDispls, t.scale, "recv_counts", where);
  if (t.count < extent(send)) {
    throw InvalidArgument(where, "the input holds " + std::to_string(t.count / t.scale) +
                                     " elements, send_counts and send_displs need " +
                                     std::to_string(extent(send) / t.scale));
  }
  Buffer ob = vOutput(&in, t, out, c.dtype, extent(recv), held, where);
  const void* src = in.data();
  void* dst = ob.data();
  held.buffers.push_back(std::move(in));
  held.buffers.push_back(std::move(ob));
  return self.run(std::move(held), c.async, [&](bool a) -> Work {
    if (a) {
      return alltoallvAsync(ctx, src, send.counts, send.displs, dst, recv.counts, recv.displs,
                            t.dtype, c.options);
    }
    alltoallv(ctx, src, send.counts, send.displs, dst, recv.counts, recv.displs, t.dtype,
              c.options);
    return {};
  });
}

py::object barrierCall(PyContext& self, py::handle algorithm, py::handle timeout, bool async) {
  Context& ctx = self.ctx("barrier");
  Where where = whereOf(ctx, "barrier");
  Common c = common(py::none(), algorithm, timeout, async, where);
  return self.run(Held{}, c.async, [&](bool a) -> Work {
    if (a) return barrierAsync(ctx, c.options);
    barrier(ctx, c.options);
    return {};
  });
}

py::object sendCall(PyContext& self, py::handle array, int peer, std::uint64_t tag,
                    py::handle dtype, py::handle timeout, bool async) {
  Context& ctx = self.ctx("send");
  Where where = whereOf(ctx, "send");
  Common c = common(dtype, py::none(), timeout, async, where);
  Held held;
  Buffer in = Buffer::acquire(array, false, "the array", where);
  Typed t = typeOf(in, c.dtype, false, "the array", where);
  const void* src = in.data();
  held.buffers.push_back(std::move(in));
  return self.run(std::move(held), c.async, [&](bool a) -> Work {
    if (a) return sendAsync(ctx, src, t.count, t.dtype, peer, tag, c.options);
    send(ctx, src, t.count, t.dtype, peer, tag, c.options);
    return {};
  });
}

py::object recvCall(PyContext& self, py::handle out, int peer, std::uint64_t tag, py::handle dtype,
                    py::handle timeout, bool async) {
  Context& ctx = self.ctx("recv");
  Where where = whereOf(ctx, "recv");
  Common c = common(dtype, py::none(), timeout, async, where);
  Held held;
  Buffer ob = Buffer::acquire(out, true, "out", where);
  Typed t = typeOf(ob, c.dtype, false, "out", where);
  void* dst = ob.data();
  held.result = ob.object();
  held.buffers.push_back(std::move(ob));
  return self.run(std::move(held), c.async, [&](bool a) -> Work {
    if (a) return recvAsync(ctx, dst, t.count, t.dtype, peer, tag, c.options);
    recv(ctx, dst, t.count, t.dtype, peer, tag, c.options);
    return {};
  });
}

std::shared_ptr<PyContext> initCall(py::handle rank, py::handle size, py::handle store,
                                    py::handle localRank, py::handle jobId, py::handle generation,
                                    py::handle timeout) {
  BootstrapOptions options;
  if (!rank.is_none()) options.rank = rank.cast<int>();
  if (!size.is_none()) options.worldSize = size.cast<int>();
  if (!localRank.is_none()) options.localRank = localRank.cast<int>();
  if (!store.is_none()) options.store = py::str(store).cast<std::string>();
  if (!jobId.is_none()) options.jobId = jobId.cast<std::string>();
  if (!generation.is_none()) options.generation = generation.cast<std::int64_t>();
  options.timeout = toDuration(timeout, Where{-1, "init", -1});
  std::shared_ptr<Context> context;
  {
    py::gil_scoped_release release;
    context = init(options);
  }
  return std::make_shared<PyContext>(std::move(context));
}

// ---- docstrings ------------------------------------------------------------------------

#define COLLX_COMMON_DOC                                                                     \
  "\n\nKeyword arguments of every collective: dtype (a collx.DataType or name: reinterpret " \
  "the arrays' bytes, e.g. a uint16 array as collx.bfloat16), algorithm (a name, else "      \
  "COLLX_<COLL>_ALGO, else the default table), timeout (seconds or a timedelta, else the "   \
  "context's), async_op (True: return a Work at once instead of waiting). Arrays are any "   \
  "C-contiguous buffer-protocol object or CPU torch.Tensor; they must not be changed or "    \
  "freed while an async call is in flight (the Work keeps them alive). The GIL is released " \
  "while the call communicates."

const char* kAllreduceDoc =
    "allreduce(array, out=None, op='sum', *, dtype=None, algorithm=None, timeout=None, "
    "async_op=False)\n\nReduces array over every rank with op into out on every rank; in place "
    "(into array) when out is None. Returns the result array (or a Work)." COLLX_COMMON_DOC;
const char* kReduceDoc =
    "reduce(array, out=None, root=0, op='sum', *, ...)\n\nReduces array over every rank into "
    "the root's out (in place into array at the root when out is None; other ranks' arrays are "
    "not changed). Returns the result at the root and None elsewhere." COLLX_COMMON_DOC;
const char* kBroadcastDoc =
    "broadcast(array, root=0, *, ...)\n\nCopies the root's array into every other rank's array "
    "(in place). Returns array." COLLX_COMMON_DOC;
const char* kAllgatherDoc =
    "allgather(array, out=None, *, ...)\n\nout (size x array's elements; allocated with shape "
    "(size, *array.shape) when None) receives every rank's array in rank order. In place when "
    "array is None or is out's block of this rank (out[rank]). Returns out." COLLX_COMMON_DOC;
const char* kAllgathervDoc =
    "allgatherv(array, counts, out=None, displs=None, *, ...)\n\nLike allgather with per-rank "
    "element counts: rank i's array (counts[i] elements) lands at out[displs[i]:] (displs "
    "default to the prefix sums; out is allocated 1-D when None). In place when array is None. "
    "Returns out." COLLX_COMMON_DOC;
const char* kReduceScatterDoc =
    "reduce_scatter(array, out=None, op='sum', *, ...)\n\nReduces array (size x n elements) "
    "over every rank and leaves block rank of the result (n elements) in out, allocated when "
    "None (shape array.shape[1:] when array.shape[0] == size). Returns out." COLLX_COMMON_DOC;
const char* kReduceScattervDoc =
    "reduce_scatterv(array, counts, out=None, op='sum', *, ...)\n\nreduce_scatter with per-rank "
    "counts: array holds sum(counts) elements, rank i receives counts[i] of the result, the "
    "blocks in rank order. Returns out." COLLX_COMMON_DOC;
const char* kGatherDoc =
    "gather(array, out=None, root=0, *, ...)\n\nThe root's out (size x array's elements; "
    "allocated with shape (size, *array.shape) when None) receives every rank's array in rank "
    "order. Returns out at the root and None elsewhere." COLLX_COMMON_DOC;
const char* kGathervDoc =
    "gatherv(array, counts, out=None, displs=None, root=0, *, ...)\n\ngather with per-rank "
    "counts: rank i's array (counts[i] elements) lands at the root's out[displs[i]:]. Pass the "
    "counts on every rank. Returns out at the root and None elsewhere." COLLX_COMMON_DOC;
const char* kScatterDoc =
    "scatter(array, out=None, root=0, *, ...)\n\nBlock i of the root's array (size x n "
    "elements) lands in rank i's out (n elements). array is ignored except at the root; out is "
    "required except at the root. Returns out." COLLX_COMMON_DOC;
const char* kScattervDoc =
    "scatterv(array, counts, out, displs=None, root=0, *, ...)\n\nscatter with per-rank counts: "
    "counts[i] elements at the root's array[displs[i]:] go to rank i's out. Pass the counts on "
    "every rank. Returns out." COLLX_COMMON_DOC;
const char* kAlltoallDoc =
    "alltoall(array, out=None, *, ...)\n\nBlock j of this rank's array (size x n elements) "
    "lands as block rank of rank j's out (allocated like array when None). Returns "
    "out." COLLX_COMMON_DOC;
const char* kAlltoallvDoc =
    "alltoallv(array, send_counts, out, recv_counts, send_displs=None, recv_displs=None, *, "
    "...)\n\nalltoall with per-peer counts: send_counts[j] elements at array[send_displs[j]:] go "
    "to rank j, which receives them at out[recv_displs[i]:] (its recv_counts[i] must equal "
    "them). out is allocated 1-D when None. Returns out." COLLX_COMMON_DOC;
const char* kBarrierDoc =
    "barrier(*, algorithm=None, timeout=None, async_op=False)\n\nReturns once every rank has "
    "entered the barrier (or a Work).";
const char* kSendDoc =
    "send(array, peer, tag=0, *, dtype=None, timeout=None, async_op=False)\n\nSends array to "
    "peer; the matching recv on peer has the same tag, count and dtype. Completes once the "
    "bytes are handed to the transport.";
const char* kRecvDoc =
    "recv(out, peer, tag=0, *, dtype=None, timeout=None, async_op=False)\n\nReceives into out "
    "the oldest send from peer with this tag. Returns out (or a Work).";

}  // namespace

PYBIND11_MODULE(_collx, m) {
  m.doc() =
      "collx: collective communication for CPU processes (the compiled part of the collx "
      "package; import collx).";
  createErrorClasses(m);

  py::enum_<DataType>(m, "DataType", "The element types collx moves and reduces.")
      .value("INT8", DataType::kInt8)
      .value("UINT8", DataType::kUint8)
      .value("INT32", DataType::kInt32)
      .value("INT64", DataType::kInt64)
      .value("FLOAT16", DataType::kFloat16)
      .value("BFLOAT16", DataType::kBfloat16)
      .value("FLOAT32", DataType::kFloat32)
      .value("FLOAT64", DataType::kFloat64)
      .def_property_readonly(
          "itemsize", [](DataType t) { return dataTypeSize(t); }, "Bytes per element.")
      .def_property_readonly(
          "type_name", [](DataType t) { return std::string(dataTypeName(t)); },
          "The type's name: 'float32', 'bfloat16', ...");
  for (DataType t : kAllDataTypes) m.attr(dataTypeName(t)) = py::cast(t);

  py::class_<PyReduceOp> op(m, "ReduceOp",
                            "A reduction: ReduceOp.SUM, PROD, MIN, MAX, AVG (the sum divided by "
                            "the number of ranks), BAND, BOR, BXOR (integers only), or "
                            "ReduceOp.custom(fn). Collectives also take the names ('max').");
  op.def_property_readonly(
        "name", [](const PyReduceOp& o) { return o.op.name(); }, "The op's name.")
      .def_property_readonly(
          "kind", [](const PyReduceOp& o) { return std::string(reduceOpKindName(o.op.kind())); },
          "'sum', 'prod', ..., or 'custom'.")
      .def_property_readonly(
          "commutative", [](const PyReduceOp& o) { return o.op.commutative(); },
          "False when rank order must be kept.")
      .def("__repr__",
           [](const PyReduceOp& o) {
             std::string kind = reduceOpKindName(o.op.kind());
             for (char& ch : kind)
               ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
             return o.op.kind() == ReduceOpKind::kCustom
                        ? "collx.ReduceOp.custom('" + o.op.name() + "')"
                        : "collx.ReduceOp." + kind;
           })
      .def(
          "__eq__",
          [](const PyReduceOp& a, const PyReduceOp& b) {
            return a.op.kind() == b.op.kind() && a.fn == b.fn;
          },
          "The same built-in op, or the same custom op.")
      .def("__hash__",
           [](const PyReduceOp& o) {
             return std::hash<const void*>()(o.fn.get()) ^ static_cast<std::size_t>(o.op.kind());
           })
      .def_static(
          "custom",
          [](py::function fn, const std::string& name, bool commutative) {
            PyReduceOp result{ReduceOpKind::kSum, std::make_shared<PyReduceFn>()};
            result.fn->fn = fn;
            // The std::function holds the PyReduceFn by shared_ptr: copying it on collx's
            // threads never touches a Python reference count.
            result.op = ReduceOp::custom(
                [holder = result.fn](void* inout, const void* in, std::size_t count,
                                     DataType type) { holder->reduce(inout, in, count, type); },
                name, commutative);
            return result;
          },
          py::arg("fn"), py::arg("name") = "custom", py::arg("commutative") = true,
          "A reduction written in Python: fn(a, b) gets two numpy arrays of equal length "
          "and either updates a in place (a = a op b) or returns the result. It runs on "
          "collx's threads with the GIL held; bfloat16 elements arrive as uint16. "
          "commutative=False keeps rank order (only some algorithms can). An exception in fn "
          "is raised on this rank when the call ends (the other ranks' results are then "
          "undefined).");
  for (ReduceOpKind k :
       {ReduceOpKind::kSum, ReduceOpKind::kProd, ReduceOpKind::kMin, ReduceOpKind::kMax,
        ReduceOpKind::kAvg, ReduceOpKind::kBand, ReduceOpKind::kBor, ReduceOpKind::kBxor}) {
    std::string name = reduceOpKindName(k);
    for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    op.attr(name.c_str()) = PyReduceOp{k, nullptr};
  }

  py::class_<PyWork>(m, "Work",
                     "A collective started with async_op=True. Keeps the call's arrays alive "
                     "until it ends; dropping it does not cancel the call.")
      .def("wait", &PyWork::wait, py::arg("timeout") = py::none(),
           "Blocks (GIL released) until the call ends and raises its error; returns True. "
           "With a timeout (seconds or timedelta), returns False if it passes first (the call "
           "goes on, bounded by its own deadline).")
      .def("is_completed", &PyWork::isCompleted,
           "True once the call ended, successfully or not (non-blocking).")
      .def("result", &PyWork::result,
           "Waits for the call and returns what the blocking call would have returned.")
      .def("exception", &PyWork::exception,
           "The call's error (a collx.Error) once it failed, else None (non-blocking).");

  py::class_<PyContext, std::shared_ptr<PyContext>>(
      m, "Context",
      "One rank's membership of a job (collx.init() makes one): its rank, the world size, its "
      "connections, and the collectives as methods. Every rank must call the same collectives "
      "in the same order with matching arguments. close() (or leaving a with block) ends it.")
      .def_property_readonly(
          "rank", [](PyContext& s) { return s.ctx("rank").rank(); }, "This process's rank.")
      .def_property_readonly(
          "size", [](PyContext& s) { return s.ctx("size").size(); }, "The number of ranks.")
      .def_property_readonly(
          "local_rank", [](PyContext& s) { return s.ctx("local_rank").localRank(); },
          "The rank among this host's ranks (-1 when not given).")
      .def_property_readonly(
          "job_id", [](PyContext& s) { return s.ctx("job_id").jobId(); }, "The job's id.")
      .def_property_readonly(
          "generation", [](PyContext& s) { return s.ctx("generation").generation(); },
          "The job's generation (a job forms again under a new one).")
      .def_property_readonly(
          "timeout", [](PyContext& s) { return s.ctx("timeout").timeout().count() / 1000.0; },
          "The deadline of every call, in seconds.")
      .def_property_readonly(
          "transports", [](PyContext& s) { return s.ctx("transports").transports(); },
          "The transport of each peer ('self', 'shm', 'tcp'), indexed by rank.")
      .def_property_readonly(
          "shared_memory", [](PyContext& s) { return s.ctx("shared_memory").sharedMemory(); },
          "Whether every rank shares memory with every other (one host, all pairs over shm): "
          "the 'shm' algorithms can run.")
      .def_property_readonly(
          "peers",
          [](PyContext& s) {
            py::list out;
            for (const PeerInfo& p : s.ctx("peers").peers()) {
              py::dict d;
              d["rank"] = p.rank;
              d["hostname"] = p.hostname;
              d["pid"] = p.pid;
              d["local_rank"] = p.localRank;
              out.append(d);
            }
            return out;
          },
          "Every rank's join record (rank, hostname, pid, local_rank), indexed by rank.")
      .def_property_readonly("closed", &PyContext::closed, "True after close().")
      .def(
          "describe_peer",
          [](PyContext& s, int peer) { return s.ctx("describe_peer").describePeer(peer); },
          py::arg("peer"), "A peer's connection, e.g. 'tcp 10.0.0.2:4321'.")
      .def(
          "abort",
          [](PyContext& s, const std::string& why) {
            Context& c = s.ctx("abort");
            py::gil_scoped_release release;
            c.abort(why);
          },
          py::arg("why") = "abort() was called",
          "Wakes every call in flight, which fails with collx.Aborted, as does every later call "
          "(thread-safe).")
      .def("close", &PyContext::close,
           "Ends the context (waits for async calls whose Work was dropped). Idempotent.")
      .def("__enter__", [](std::shared_ptr<PyContext> s) { return s; })
      .def("__exit__", [](PyContext& s, py::args) { s.close(); })
      .def("__repr__",
           [](PyContext& s) {
             if (s.closed()) return std::string("<collx.Context (closed)>");
             Context& c = s.ctx("repr");
             return "<collx.Context rank " + std::to_string(c.rank()) + " of " +
                    std::to_string(c.size()) + ", job " + c.jobId() + ">";
           })
      .def("allreduce", &allreduce, py::arg("array"), py::arg("out") = py::none(),
           py::arg("op") = py::none(), py::kw_only(), py::arg("dtype") = py::none(),
           py::arg("algorithm") = py::none(), py::arg("timeout") = py::none(),
           py::arg("async_op") = false, kAllreduceDoc)
      .def("reduce", &reduceCall, py::arg("array"), py::arg("out") = py::none(),
           py::arg("root") = 0, py::arg("op") = py::none(), py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("algorithm") = py::none(),
           py::arg("timeout") = py::none(), py::arg("async_op") = false, kReduceDoc)
      .def("broadcast", &broadcastCall, py::arg("array"), py::arg("root") = 0, py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("algorithm") = py::none(),
           py::arg("timeout") = py::none(), py::arg("async_op") = false, kBroadcastDoc)
      .def("allgather", &allgatherCall, py::arg("array"), py::arg("out") = py::none(),
           py::kw_only(), py::arg("dtype") = py::none(), py::arg("algorithm") = py::none(),
           py::arg("timeout") = py::none(), py::arg("async_op") = false, kAllgatherDoc)
      .def("allgatherv", &allgathervCall, py::arg("array"), py::arg("counts"),
           py::arg("out") = py::none(), py::arg("displs") = py::none(), py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("algorithm") = py::none(),
           py::arg("timeout") = py::none(), py::arg("async_op") = false, kAllgathervDoc)
      .def("reduce_scatter", &reduceScatterCall, py::arg("array"), py::arg("out") = py::none(),
           py::arg("op") = py::none(), py::kw_only(), py::arg("dtype") = py::none(),
           py::arg("algorithm") = py::none(), py::arg("timeout") = py::none(),
           py::arg("async_op") = false, kReduceScatterDoc)
      .def("reduce_scatterv", &reduceScattervCall, py::arg("array"), py::arg("counts"),
           py::arg("out") = py::none(), py::arg("op") = py::none(), py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("algorithm") = py::none(),
           py::arg("timeout") = py::none(), py::arg("async_op") = false, kReduceScattervDoc)
      .def("gather", &gatherCall, py::arg("array"), py::arg("out") = py::none(),
           py::arg("root") = 0, py::kw_only(), py::arg("dtype") = py::none(),
           py::arg("algorithm") = py::none(), py::arg("timeout") = py::none(),
           py::arg("async_op") = false, kGatherDoc)
      .def("gatherv", &gathervCall, py::arg("array"), py::arg("counts"),
           py::arg("out") = py::none(), py::arg("displs") = py::none(), py::arg("root") = 0,
           py::kw_only(), py::arg("dtype") = py::none(), py::arg("algorithm") = py::none(),
           py::arg("timeout") = py::none(), py::arg("async_op") = false, kGathervDoc)
      .def("scatter", &scatterCall, py::arg("array"), py::arg("out") = py::none(),
           py::arg("root") = 0, py::kw_only(), py::arg("dtype") = py::none(),
           py::arg("algorithm") = py::none(), py::arg("timeout") = py::none(),
           py::arg("async_op") = false, kScatterDoc)
      .def("scatterv", &scattervCall, py::arg("array"), py::arg("counts"), py::arg("out"),
           py::arg("displs") = py::none(), py::arg("root") = 0, py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("algorithm") = py::none(),
           py::arg("timeout") = py::none(), py::arg("async_op") = false, kScattervDoc)
      .def("alltoall", &alltoallCall, py::arg("array"), py::arg("out") = py::none(), py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("algorithm") = py::none(),
           py::arg("timeout") = py::none(), py::arg("async_op") = false, kAlltoallDoc)
      .def("alltoallv", &alltoallvCall, py::arg("array"), py::arg("send_counts"), py::arg("out"),
           py::arg("recv_counts"), py::arg("send_displs") = py::none(),
           py::arg("recv_displs") = py::none(), py::kw_only(), py::arg("dtype") = py::none(),
           py::arg("algorithm") = py::none(), py::arg("timeout") = py::none(),
           py::arg("async_op") = false, kAlltoallvDoc)
      .def("barrier", &barrierCall, py::kw_only(), py::arg("algorithm") = py::none(),
           py::arg("timeout") = py::none(), py::arg("async_op") = false, kBarrierDoc)
      .def("send", &sendCall, py::arg("array"), py::arg("peer"), py::arg("tag") = 0, py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("timeout") = py::none(),
           py::arg("async_op") = false, kSendDoc)
      .def("recv", &recvCall, py::arg("out"), py::arg("peer"), py::arg("tag") = 0, py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("timeout") = py::none(),
           py::arg("async_op") = false, kRecvDoc);

  m.def("init", &initCall, py::kw_only(), py::arg("rank") = py::none(),
        py::arg("size") = py::none(), py::arg("store") = py::none(),
        py::arg("local_rank") = py::none(), py::arg("job_id") = py::none(),
        py::arg("generation") = py::none(), py::arg("timeout") = py::none(),
        "init(*, rank=None, size=None, store=None, local_rank=None, job_id=None, "
        "generation=None, timeout=None)\n\nJoins a job and connects to every peer (GIL "
        "released; bounded by the timeout). Each value not given is taken from the "
        "environment: COLLX_RANK / COLLX_WORLD_SIZE / COLLX_STORE (collx-run sets them), "
        "torchrun's RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, Open MPI's, Slurm's; with "
        "nothing set, rank 0 of 1. store is a URL: tcp://host:port, file:///shared/dir, "
        "redis://host:port. timeout is in seconds (or a timedelta), else COLLX_TIMEOUT.");
  m.def(
      "config",
      []() {
        py::list out;
        const Config& config = Config::process();
        for (const SettingInfo* setting : settings()) {
          py::dict d;
          d["name"] = setting->name();
          d["component"] = setting->component();
          d["type"] = settingTypeName(setting->type());
          d["range"] = setting->range();
          d["automatic"] = setting->automatic();
          d["default"] = setting->automatic() ? std::string() : setting->defaultText();
          if (setting->automatic()) d["automatic_rule"] = setting->defaultText();
          // The text in effect, as set (an invalid value too: reading it raises), else the
          // default ("" when computed).
          d["value"] = config.env(setting->name()).value_or(d["default"].cast<std::string>());
          d["set"] = setting->isSet(config);
          d["source"] = setting->source(config);
          d["help"] = setting->help();
          out.append(d);
        }
        return out;
      },
      "config()\n\nEvery setting (COLLX_* variable) as a dict, as collx-info prints them: name, "
      "component (who reads it), type, range (accepted values), automatic (unset means "
      "computed; automatic_rule says how), default, value (the text in effect), set, source "
      "('environment', 'default' or 'automatic') and help.");
  m.def(
      "build_features",
      []() {
        py::list out;
        for (const BuildFeature& f : buildFeatures())
          out.append(py::make_tuple(f.name, f.built, f.detail));
        return out;
      },
      "build_features()\n\nWhat this build of collx contains: (name, built, detail) tuples.");
  m.attr("__version__") = versionString();
}

}  // namespace collx::python
