// The collectives as methods of collx.Context. Each one only turns its Python arguments into a
// collx::Call (borrowing the arrays: buffers.h; types and ops: shared/mapping.h, as in the
// torch backend) and hands it to PyContext::call, the one path that runs it or starts it.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "module.h"

namespace collx::python {

namespace {

// One collective's conversion: its context, the Call being filled, what the call will hold.
struct Binding {
  PyContext& self;
  Context& ctx;
  Where where;
  std::optional<DataType> dtype;  // the dtype= argument
  bool async = false;
  Call call;
  Held held;

  // The call borrows `buffer` until it ends.
  void hold(Buffer buffer) { held.buffers.push_back(std::move(buffer)); }

  // The call sends from `in`: its type and count are `t`'s (a call that counts otherwise
  // sets call.count after).
  void sendFrom(Buffer in, const Typed& t) {
    call.sendbuf = in.data();
    call.count = t.count;
    call.dtype = t.dtype;
    hold(std::move(in));
  }

  // The call receives into `out`, and returns it.
  void receiveInto(Buffer out) {
    call.recvbuf = out.data();
    held.result = out.object();
    hold(std::move(out));
  }

  // The reduction: `op` as applied to elements of `type` (bool's rule), and its Python
  // function, whose exceptions the call raises when it ends.
  void reduceWith(const PyReduceOp& op, const Typed& type) {
    call.op = bindings::opFor(op.op, type.type, where);
    held.fn = op.fn;
  }

  py::object run() { return self.call(ctx, call, std::move(held), async); }
};

Binding bind(PyContext& self, CallKind kind, py::handle dtype, py::handle algorithm,
             py::handle timeout, bool async, bool uniform = false) {
  const char* what = callKindName(kind);
  Context& ctx = self.ctx(what);
  Binding b{self, ctx, Where{ctx.rank(), what, -1}, std::nullopt, async, Call{}, Held{}};
  b.dtype = toDataType(dtype, b.where);
  b.call.kind = kind;
  if (!algorithm.is_none()) b.call.options.algorithm = algorithm.cast<std::string>();
  b.call.options.timeout = toDuration(timeout, b.where);
  b.call.options.uniform = uniform;
  return b;
}

std::uint64_t sum(const Counts& counts) {
  std::uint64_t total = 0;
  for (auto c : counts) total += c;
  return total;
}

std::vector<py::ssize_t> tail(const Buffer& b) {
  if (b.shape().empty()) return {};
  return {b.shape().begin() + 1, b.shape().end()};
}

// "out holds 3 elements, the input 4": counts in the caller's elements.
std::string elements(const Typed& t) { return std::to_string(t.count / t.scale); }

// `role` ("the input", "out") splits into one block per rank.
void checkDivisible(const Binding& b, const Typed& t, const char* role) {
  const auto P = static_cast<std::uint64_t>(b.ctx.size());
  if (t.count % P != 0) {
    throw InvalidArgument(b.where, std::string(role) + " holds " + elements(t) +
                                       " elements, not a multiple of the " + std::to_string(P) +
                                       " ranks");
  }
}

// An out of place reduction's output: the input's type and element count.
void reductionOutput(Binding& b, const Buffer& in, const Typed& t, py::handle out,
                     const ReduceOp& op) {
  Buffer o = Buffer::acquire(out, true, "out", b.where);
  Typed to = typeOf(o, b.dtype, &op, "out", b.where);
  checkSameType(in, t, o, to, "out", b.where);
  if (to.count != t.count) {
    throw InvalidArgument(b.where,
                          "out holds " + elements(to) + " elements, the input " + elements(t));
  }
  b.receiveInto(std::move(o));
}

// ---- the collectives -------------------------------------------------------------------

py::object allreduceCall(PyContext& self, py::handle array, py::handle out, py::handle op,
                         py::handle dtype, py::handle algorithm, py::handle timeout, bool async,
                         bool uniform) {
  Binding b = bind(self, CallKind::kAllreduce, dtype, algorithm, timeout, async, uniform);
  const PyReduceOp pyOp = toReduceOp(op, b.where);
  const bool inPlace = out.is_none() || out.is(array);
  Buffer in = Buffer::acquire(array, inPlace, "the input", b.where);
  Typed t = typeOf(in, b.dtype, &pyOp.op, "the input", b.where);
  b.reduceWith(pyOp, t);
  b.call.recvbuf = in.data();
  b.held.result = in.object();
  if (!inPlace) reductionOutput(b, in, t, out, pyOp.op);
  b.sendFrom(std::move(in), t);
  return b.run();
}

py::object reduceCall(PyContext& self, py::handle array, py::handle out, int root, py::handle op,
                      py::handle dtype, py::handle algorithm, py::handle timeout, bool async,
                      bool uniform) {
  Binding b = bind(self, CallKind::kReduce, dtype, algorithm, timeout, async, uniform);
  const PyReduceOp pyOp = toReduceOp(op, b.where);
  const bool isRoot = b.ctx.rank() == root;
  const bool inPlace = !isRoot || out.is_none() || out.is(array);
  Buffer in = Buffer::acquire(array, isRoot && inPlace, "the input", b.where);
  Typed t = typeOf(in, b.dtype, &pyOp.op, "the input", b.where);
  b.reduceWith(pyOp, t);
  b.call.root = root;
  b.call.recvbuf = in.data();
  if (isRoot) b.held.result = in.object();
  if (!inPlace) reductionOutput(b, in, t, out, pyOp.op);
  b.sendFrom(std::move(in), t);
  return b.run();
}

py::object broadcastCall(PyContext& self, py::handle array, int root, py::handle dtype,
                         py::handle algorithm, py::handle timeout, bool async, bool uniform) {
  Binding b = bind(self, CallKind::kBroadcast, dtype, algorithm, timeout, async, uniform);
  Buffer buffer = Buffer::acquire(array, b.ctx.rank() != root, "the array", b.where);
  Typed t = typeOf(buffer, b.dtype, nullptr, "the array", b.where);
  b.call.count = t.count;
  b.call.dtype = t.dtype;
  b.call.root = root;
  b.receiveInto(std::move(buffer));
  return b.run();
}

// Allocates or checks the output of allgather and gather: size * n elements.
void gatherOutput(Binding& b, const Buffer& in, const Typed& t, py::handle out,
                  std::uint64_t expected) {
  py::object o = py::reinterpret_borrow<py::object>(out);
  if (o.is_none()) {
    std::vector<py::ssize_t> shape{b.ctx.size()};
    for (auto d : in.shape()) shape.push_back(d);
    if (in.shape().empty()) shape = {static_cast<py::ssize_t>(expected / t.scale)};
    o = in.allocateLike(shape);
  }
  Buffer ob = Buffer::acquire(o, true, "out", b.where);
  Typed to = typeOf(ob, b.dtype, nullptr, "out", b.where);
  checkSameType(in, t, ob, to, "out", b.where);
  if (to.count != expected) {
    throw InvalidArgument(b.where, "out holds " + elements(to) + " elements, the call needs " +
                                       std::to_string(expected / t.scale));
  }
  b.receiveInto(std::move(ob));
}

py::object allgatherCall(PyContext& self, py::handle array, py::handle out, py::handle dtype,
                         py::handle algorithm, py::handle timeout, bool async, bool uniform) {
  Binding b = bind(self, CallKind::kAllgather, dtype, algorithm, timeout, async, uniform);
  const auto P = static_cast<std::uint64_t>(b.ctx.size());
  if (array.is_none()) {
    // In place: out's own block already holds this rank's contribution.
    if (out.is_none()) throw InvalidArgument(b.where, "in place (array=None) needs out");
    Buffer ob = Buffer::acquire(out, true, "out", b.where);
    Typed to = typeOf(ob, b.dtype, nullptr, "out", b.where);
    checkDivisible(b, to, "out");
    b.call.count = to.count / P;
    b.call.dtype = to.dtype;
    b.receiveInto(std::move(ob));
    return b.run();
  }
  Buffer in = Buffer::acquire(array, false, "the input", b.where);
  Typed t = typeOf(in, b.dtype, nullptr, "the input", b.where);
  gatherOutput(b, in, t, out, t.count * P);
  b.sendFrom(std::move(in), t);
  return b.run();
}

// Per-rank counts and displacements of a v-collective, scaled to the moved type; the Call
// points at them, so they live as long as the call's conversion.
struct Layout {
  Counts counts;
  std::optional<Counts> displs;  // none: the blocks packed in rank order (collx's default)

  const Counts* displacements() const { return displs ? &*displs : nullptr; }
};

Layout layoutOf(py::handle counts, py::handle displs, std::uint64_t scale, const char* what,
                const Where& where) {
  Layout l;
  l.counts = toCounts(counts, scale, what, where);
  if (!displs.is_none()) l.displs = toCounts(displs, scale, "displs", where);
  return l;
}

// Where the last block ends.
std::uint64_t extent(const Layout& l) {
  if (!l.displs) return sum(l.counts);
  std::uint64_t end = 0;
  for (std::size_t i = 0; i < l.counts.size() && i < l.displs->size(); ++i) {
    if (l.counts[i] > 0) end = std::max(end, (*l.displs)[i] + l.counts[i]);
  }
  return end;
}

// Checks (or allocates, 1-D, like `like`) a v-collective's output that must span `needed`
// elements.
void vOutput(Binding& b, const Buffer* like, const Typed& t, py::handle out, std::uint64_t needed) {
  py::object o = py::reinterpret_borrow<py::object>(out);
  if (o.is_none()) {
    if (like == nullptr) throw InvalidArgument(b.where, "out is required");
    o = like->allocateLike({static_cast<py::ssize_t>(needed / t.scale)});
  }
  Buffer ob = Buffer::acquire(o, true, "out", b.where);
  Typed to = typeOf(ob, b.dtype, nullptr, "out", b.where);
  if (like != nullptr) checkSameType(*like, t, ob, to, "out", b.where);
  if (to.count < needed) {
    throw InvalidArgument(b.where, "out holds " + elements(to) +
                                       " elements, the counts and displacements need " +
                                       std::to_string(needed / to.scale));
  }
  b.receiveInto(std::move(ob));
}

py::object allgathervCall(PyContext& self, py::handle array, py::handle counts, py::handle out,
                          py::handle displs, py::handle dtype, py::handle algorithm,
                          py::handle timeout, bool async, bool uniform) {
  Binding b = bind(self, CallKind::kAllgatherv, dtype, algorithm, timeout, async, uniform);
  Layout l;
  if (array.is_none()) {
    // In place: out's block of this rank already holds its contribution.
    if (out.is_none()) throw InvalidArgument(b.where, "in place (array=None) needs out");
    Buffer ob = Buffer::acquire(out, true, "out", b.where);
    Typed to = typeOf(ob, b.dtype, nullptr, "out", b.where);
    l = layoutOf(counts, displs, to.scale, "counts", b.where);
    vOutput(b, nullptr, to, out, extent(l));
    const auto rank = static_cast<std::size_t>(b.ctx.rank());
    b.call.count = rank < l.counts.size() ? l.counts[rank] : 0;
    b.call.dtype = to.dtype;
  } else {
    Buffer in = Buffer::acquire(array, false, "the input", b.where);
    Typed t = typeOf(in, b.dtype, nullptr, "the input", b.where);
    l = layoutOf(counts, displs, t.scale, "counts", b.where);
    vOutput(b, &in, t, out, extent(l));
    b.sendFrom(std::move(in), t);
  }
  b.call.counts = &l.counts;
  b.call.displs = l.displacements();
  return b.run();
}

// reduce_scatter(v)'s output of `mine` elements (allocated like the input's block when None).
void blockOutput(Binding& b, const Buffer& in, const Typed& t, py::handle out,
                 std::vector<py::ssize_t> shape, std::uint64_t mine, const ReduceOp& op,
                 const std::string& which) {
  py::object o = py::reinterpret_borrow<py::object>(out);
  if (o.is_none()) o = in.allocateLike(shape);
  Buffer ob = Buffer::acquire(o, true, "out", b.where);
  Typed to = typeOf(ob, b.dtype, &op, "out", b.where);
  checkSameType(in, t, ob, to, "out", b.where);
  if (to.count != mine) {
    throw InvalidArgument(b.where, "out holds " + elements(to) + " elements, " + which + " is " +
                                       std::to_string(mine / t.scale));
  }
  b.receiveInto(std::move(ob));
}

py::object reduceScatterCall(PyContext& self, py::handle array, py::handle out, py::handle op,
                             py::handle dtype, py::handle algorithm, py::handle timeout, bool async,
                             bool uniform) {
  Binding b = bind(self, CallKind::kReduceScatter, dtype, algorithm, timeout, async, uniform);
  const PyReduceOp pyOp = toReduceOp(op, b.where);
  const auto P = static_cast<std::uint64_t>(b.ctx.size());
  Buffer in = Buffer::acquire(array, false, "the input", b.where);
  Typed t = typeOf(in, b.dtype, &pyOp.op, "the input", b.where);
  checkDivisible(b, t, "the input");
  const std::uint64_t n = t.count / P;
  std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(n / t.scale)};
  if (!in.shape().empty() && static_cast<std::uint64_t>(in.shape()[0]) == P) shape = tail(in);
  blockOutput(b, in, t, out, shape, n, pyOp.op, "one rank's block of the input");
  b.reduceWith(pyOp, t);
  b.sendFrom(std::move(in), t);
  b.call.count = n;
  return b.run();
}

py::object reduceScattervCall(PyContext& self, py::handle array, py::handle counts, py::handle out,
                              py::handle op, py::handle dtype, py::handle algorithm,
                              py::handle timeout, bool async, bool uniform) {
  Binding b = bind(self, CallKind::kReduceScatterv, dtype, algorithm, timeout, async, uniform);
  const PyReduceOp pyOp = toReduceOp(op, b.where);
  Buffer in = Buffer::acquire(array, false, "the input", b.where);
  Typed t = typeOf(in, b.dtype, &pyOp.op, "the input", b.where);
  const Counts cs = toCounts(counts, t.scale, "counts", b.where);
  const int rank = b.ctx.rank();
  if (cs.size() != static_cast<std::size_t>(b.ctx.size())) {
    throw InvalidArgument(b.where, "counts has " + std::to_string(cs.size()) + " entries for " +
                                       std::to_string(b.ctx.size()) + " ranks");
  }
  if (sum(cs) != t.count) {
    throw InvalidArgument(b.where, "the input holds " + elements(t) +
                                       " elements but the counts add up to " +
                                       std::to_string(sum(cs) / t.scale));
  }
  blockOutput(b, in, t, out, {static_cast<py::ssize_t>(cs[rank] / t.scale)}, cs[rank], pyOp.op,
              "counts[" + std::to_string(rank) + "]");
  b.reduceWith(pyOp, t);
  b.sendFrom(std::move(in), t);
  b.call.counts = &cs;
  return b.run();
}

py::object gatherCall(PyContext& self, py::handle array, py::handle out, int root, py::handle dtype,
                      py::handle algorithm, py::handle timeout, bool async, bool uniform) {
  Binding b = bind(self, CallKind::kGather, dtype, algorithm, timeout, async, uniform);
  const auto P = static_cast<std::uint64_t>(b.ctx.size());
  Buffer in = Buffer::acquire(array, false, "the input", b.where);
  Typed t = typeOf(in, b.dtype, nullptr, "the input", b.where);
  if (b.ctx.rank() == root) gatherOutput(b, in, t, out, t.count * P);
  b.sendFrom(std::move(in), t);
  b.call.root = root;
  return b.run();
}

py::object gathervCall(PyContext& self, py::handle array, py::handle counts, py::handle out,
                       py::handle displs, int root, py::handle dtype, py::handle algorithm,
                       py::handle timeout, bool async, bool uniform) {
  Binding b = bind(self, CallKind::kGatherv, dtype, algorithm, timeout, async, uniform);
  Buffer in = Buffer::acquire(array, false, "the input", b.where);
  Typed t = typeOf(in, b.dtype, nullptr, "the input", b.where);
  const Layout l = layoutOf(counts, displs, t.scale, "counts", b.where);
  if (b.ctx.rank() == root) vOutput(b, &in, t, out, extent(l));
  b.sendFrom(std::move(in), t);
  b.call.root = root;
  b.call.counts = &l.counts;
  b.call.displs = l.displacements();
  return b.run();
}

py::object scatterCall(PyContext& self, py::handle array, py::handle out, int root,
                       py::handle dtype, py::handle algorithm, py::handle timeout, bool async,
                       bool uniform) {
  Binding b = bind(self, CallKind::kScatter, dtype, algorithm, timeout, async, uniform);
  const auto P = static_cast<std::uint64_t>(b.ctx.size());
  const bool isRoot = b.ctx.rank() == root;
  std::optional<Buffer> in;
  std::optional<Typed> t;
  if (isRoot) {
    if (array.is_none()) throw InvalidArgument(b.where, "the root needs the array to scatter");
    in.emplace(Buffer::acquire(array, false, "the input", b.where));
    t = typeOf(*in, b.dtype, nullptr, "the input", b.where);
    checkDivisible(b, *t, "the input");
  }
  py::object o = py::reinterpret_borrow<py::object>(out);
  if (o.is_none()) {
    if (!isRoot) {
      throw InvalidArgument(b.where,
                            "out (the array that receives this rank's block) is required "
                            "on every rank but the root");
    }
    std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(t->count / P / t->scale)};
    if (!in->shape().empty() && static_cast<std::uint64_t>(in->shape()[0]) == P) shape = tail(*in);
    o = in->allocateLike(shape);
  }
  Buffer ob = Buffer::acquire(o, true, "out", b.where);
  Typed to = typeOf(ob, b.dtype, nullptr, "out", b.where);
  if (isRoot) {
    checkSameType(*in, *t, ob, to, "out", b.where);
    if (to.count * P != t->count) {
      throw InvalidArgument(b.where, "out holds " + elements(to) +
                                         " elements, one rank's block of the input is " +
                                         std::to_string(t->count / P / t->scale));
    }
    b.sendFrom(std::move(*in), *t);
  }
  b.call.count = to.count;
  b.call.dtype = to.dtype;
  b.call.root = root;
  b.receiveInto(std::move(ob));
  return b.run();
}

py::object scattervCall(PyContext& self, py::handle array, py::handle counts, py::handle out,
                        py::handle displs, int root, py::handle dtype, py::handle algorithm,
                        py::handle timeout, bool async, bool uniform) {
  Binding b = bind(self, CallKind::kScatterv, dtype, algorithm, timeout, async, uniform);
  if (out.is_none()) throw InvalidArgument(b.where, "out (the array that receives) is required");
  Buffer ob = Buffer::acquire(out, true, "out", b.where);
  Typed to = typeOf(ob, b.dtype, nullptr, "out", b.where);
  const Layout l = layoutOf(counts, displs, to.scale, "counts", b.where);
  if (b.ctx.rank() == root) {
    if (array.is_none()) throw InvalidArgument(b.where, "the root needs the array to scatter");
    Buffer in = Buffer::acquire(array, false, "the input", b.where);
    Typed t = typeOf(in, b.dtype, nullptr, "the input", b.where);
    checkSameType(in, t, ob, to, "out", b.where);
    if (t.count < extent(l)) {
      throw InvalidArgument(b.where, "the input holds " + elements(t) +
                                         " elements, the counts and displacements need " +
                                         std::to_string(extent(l) / t.scale));
    }
    b.sendFrom(std::move(in), t);
  }
  b.call.count = to.count;
  b.call.dtype = to.dtype;
  b.call.root = root;
  b.call.counts = &l.counts;
  b.call.displs = l.displacements();
  b.receiveInto(std::move(ob));
  return b.run();
}

py::object alltoallCall(PyContext& self, py::handle array, py::handle out, py::handle dtype,
                        py::handle algorithm, py::handle timeout, bool async, bool uniform) {
  Binding b = bind(self, CallKind::kAlltoall, dtype, algorithm, timeout, async, uniform);
  const auto P = static_cast<std::uint64_t>(b.ctx.size());
  Buffer in = Buffer::acquire(array, false, "the input", b.where);
  Typed t = typeOf(in, b.dtype, nullptr, "the input", b.where);
  checkDivisible(b, t, "the input");
  py::object o = py::reinterpret_borrow<py::object>(out);
  if (o.is_none()) o = in.allocateLike(in.shape());
  Buffer ob = Buffer::acquire(o, true, "out", b.where);
  Typed to = typeOf(ob, b.dtype, nullptr, "out", b.where);
  checkSameType(in, t, ob, to, "out", b.where);
  if (to.count != t.count) {
    throw InvalidArgument(b.where,
                          "out holds " + elements(to) + " elements, the input " + elements(t));
  }
  b.receiveInto(std::move(ob));
  b.sendFrom(std::move(in), t);
  b.call.count = t.count / P;
  return b.run();
}

py::object alltoallvCall(PyContext& self, py::handle array, py::handle sendCounts, py::handle out,
                         py::handle recvCounts, py::handle sendDispls, py::handle recvDispls,
                         py::handle dtype, py::handle algorithm, py::handle timeout, bool async,
                         bool uniform) {
  Binding b = bind(self, CallKind::kAlltoallv, dtype, algorithm, timeout, async, uniform);
  Buffer in = Buffer::acquire(array, false, "the input", b.where);
  Typed t = typeOf(in, b.dtype, nullptr, "the input", b.where);
  const Layout send = layoutOf(sendCounts, sendDispls, t.scale, "send_counts", b.where);
  const Layout recv = layoutOf(recvCounts, recvDispls, t.scale, "recv_counts", b.where);
  if (t.count < extent(send)) {
    throw InvalidArgument(b.where, "the input holds " + elements(t) +
                                       " elements, send_counts and send_displs need " +
                                       std::to_string(extent(send) / t.scale));
  }
  vOutput(b, &in, t, out, extent(recv));
  b.sendFrom(std::move(in), t);
  b.call.counts = &send.counts;
  b.call.displs = send.displacements();
  b.call.recvCounts = &recv.counts;
  b.call.recvDispls = recv.displacements();
  return b.run();
}

py::object barrierCall(PyContext& self, py::handle algorithm, py::handle timeout, bool async,
                       bool uniform) {
  return bind(self, CallKind::kBarrier, py::none(), algorithm, timeout, async, uniform).run();
}

py::object sendCall(PyContext& self, py::handle array, int peer, std::uint64_t tag,
                    py::handle dtype, py::handle timeout, bool async) {
  Binding b = bind(self, CallKind::kSend, dtype, py::none(), timeout, async);
  Buffer in = Buffer::acquire(array, false, "the array", b.where);
  const Typed t = typeOf(in, b.dtype, nullptr, "the array", b.where);
  b.sendFrom(std::move(in), t);
  b.call.peer = peer;
  b.call.tag = tag;
  return b.run();
}

py::object recvCall(PyContext& self, py::handle out, int peer, std::uint64_t tag, py::handle dtype,
                    py::handle timeout, bool async) {
  Binding b = bind(self, CallKind::kRecv, dtype, py::none(), timeout, async);
  Buffer ob = Buffer::acquire(out, true, "out", b.where);
  Typed t = typeOf(ob, b.dtype, nullptr, "out", b.where);
  b.call.count = t.count;
  b.call.dtype = t.dtype;
  b.call.peer = peer;
  b.call.tag = tag;
  b.receiveInto(std::move(ob));
  return b.run();
}

// ---- docstrings ------------------------------------------------------------------------

#define COLLX_COMMON_DOC                                                                       \
  "\n\nKeyword arguments of every collective: dtype (a collx.DataType or name: reinterpret "   \
  "the arrays' bytes, e.g. a uint16 array as collx.bfloat16), algorithm (a name, else "        \
  "COLLX_<COLL>_ALGO, else the default table), timeout (seconds or a timedelta, else the "     \
  "context's), async_op (True: return a Work at once instead of waiting), uniform (True: "     \
  "the outcome is the same on every live rank: after the call the ranks agree whether every "  \
  "rank's part succeeded, and every rank returns or every rank raises, a rank whose own part " \
  "completed saying that another's did not; blocking calls only, one agreement through the "   \
  "store per call). Arrays are any C-contiguous buffer-protocol object or CPU torch.Tensor; "  \
  "they must not be changed or freed while an async call is in flight (the Work keeps them "   \
  "alive). The GIL is released while the call communicates."

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
    "barrier(*, algorithm=None, timeout=None, async_op=False, uniform=False)\n\nReturns once "
    "every rank has entered the barrier (or a Work).";
const char* kSendDoc =
    "send(array, peer, tag=0, *, dtype=None, timeout=None, async_op=False)\n\nSends array to "
    "peer; the matching recv on peer has the same tag, count and dtype. Completes once the "
    "bytes are handed to the transport.";
const char* kRecvDoc =
    "recv(out, peer, tag=0, *, dtype=None, timeout=None, async_op=False)\n\nReceives into out "
    "the oldest send from peer with this tag. Returns out (or a Work).";

}  // namespace

void defineCollectives(py::class_<PyContext, std::shared_ptr<PyContext>>& context) {
  context
      .def("allreduce", &allreduceCall, py::arg("array"), py::arg("out") = py::none(),
           py::arg("op") = py::none(), py::kw_only(), py::arg("dtype") = py::none(),
           py::arg("algorithm") = py::none(), py::arg("timeout") = py::none(),
           py::arg("async_op") = false, py::arg("uniform") = false, kAllreduceDoc)
      .def("reduce", &reduceCall, py::arg("array"), py::arg("out") = py::none(),
           py::arg("root") = 0, py::arg("op") = py::none(), py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("algorithm") = py::none(),
           py::arg("timeout") = py::none(), py::arg("async_op") = false, py::arg("uniform") = false,
           kReduceDoc)
      .def("broadcast", &broadcastCall, py::arg("array"), py::arg("root") = 0, py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("algorithm") = py::none(),
           py::arg("timeout") = py::none(), py::arg("async_op") = false, py::arg("uniform") = false,
           kBroadcastDoc)
      .def("allgather", &allgatherCall, py::arg("array"), py::arg("out") = py::none(),
           py::kw_only(), py::arg("dtype") = py::none(), py::arg("algorithm") = py::none(),
           py::arg("timeout") = py::none(), py::arg("async_op") = false, py::arg("uniform") = false,
           kAllgatherDoc)
      .def("allgatherv", &allgathervCall, py::arg("array"), py::arg("counts"),
           py::arg("out") = py::none(), py::arg("displs") = py::none(), py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("algorithm") = py::none(),
           py::arg("timeout") = py::none(), py::arg("async_op") = false, py::arg("uniform") = false,
           kAllgathervDoc)
      .def("reduce_scatter", &reduceScatterCall, py::arg("array"), py::arg("out") = py::none(),
           py::arg("op") = py::none(), py::kw_only(), py::arg("dtype") = py::none(),
           py::arg("algorithm") = py::none(), py::arg("timeout") = py::none(),
           py::arg("async_op") = false, py::arg("uniform") = false, kReduceScatterDoc)
      .def("reduce_scatterv", &reduceScattervCall, py::arg("array"), py::arg("counts"),
           py::arg("out") = py::none(), py::arg("op") = py::none(), py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("algorithm") = py::none(),
           py::arg("timeout") = py::none(), py::arg("async_op") = false, py::arg("uniform") = false,
           kReduceScattervDoc)
      .def("gather", &gatherCall, py::arg("array"), py::arg("out") = py::none(),
           py::arg("root") = 0, py::kw_only(), py::arg("dtype") = py::none(),
           py::arg("algorithm") = py::none(), py::arg("timeout") = py::none(),
           py::arg("async_op") = false, py::arg("uniform") = false, kGatherDoc)
      .def("gatherv", &gathervCall, py::arg("array"), py::arg("counts"),
           py::arg("out") = py::none(), py::arg("displs") = py::none(), py::arg("root") = 0,
           py::kw_only(), py::arg("dtype") = py::none(), py::arg("algorithm") = py::none(),
           py::arg("timeout") = py::none(), py::arg("async_op") = false, py::arg("uniform") = false,
           kGathervDoc)
      .def("scatter", &scatterCall, py::arg("array"), py::arg("out") = py::none(),
           py::arg("root") = 0, py::kw_only(), py::arg("dtype") = py::none(),
           py::arg("algorithm") = py::none(), py::arg("timeout") = py::none(),
           py::arg("async_op") = false, py::arg("uniform") = false, kScatterDoc)
      .def("scatterv", &scattervCall, py::arg("array"), py::arg("counts"), py::arg("out"),
           py::arg("displs") = py::none(), py::arg("root") = 0, py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("algorithm") = py::none(),
           py::arg("timeout") = py::none(), py::arg("async_op") = false, py::arg("uniform") = false,
           kScattervDoc)
      .def("alltoall", &alltoallCall, py::arg("array"), py::arg("out") = py::none(), py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("algorithm") = py::none(),
           py::arg("timeout") = py::none(), py::arg("async_op") = false, py::arg("uniform") = false,
           kAlltoallDoc)
      .def("alltoallv", &alltoallvCall, py::arg("array"), py::arg("send_counts"), py::arg("out"),
           py::arg("recv_counts"), py::arg("send_displs") = py::none(),
           py::arg("recv_displs") = py::none(), py::kw_only(), py::arg("dtype") = py::none(),
           py::arg("algorithm") = py::none(), py::arg("timeout") = py::none(),
           py::arg("async_op") = false, py::arg("uniform") = false, kAlltoallvDoc)
      .def("barrier", &barrierCall, py::kw_only(), py::arg("algorithm") = py::none(),
           py::arg("timeout") = py::none(), py::arg("async_op") = false, py::arg("uniform") = false,
           kBarrierDoc)
      .def("send", &sendCall, py::arg("array"), py::arg("peer"), py::arg("tag") = 0, py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("timeout") = py::none(),
           py::arg("async_op") = false, kSendDoc)
      .def("recv", &recvCall, py::arg("out"), py::arg("peer"), py::arg("tag") = 0, py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("timeout") = py::none(),
           py::arg("async_op") = false, kRecvDoc);
}

}  // namespace collx::python
