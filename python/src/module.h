// collx._collx, the Python module (see python/README.md), in the files of its sections; this
// header is what they share.
//
//   errors.cc       collx's error kinds as Python exception classes
//   buffers.h/.cc   Python objects as collx buffers (the buffer protocol, CPU torch tensors)
//   conversions.cc  the other arguments: durations, dtypes, reduce ops, per-rank counts
//   work.cc         contexts, Work, the one call path (a collx::Call in, the result or a Work
//                   out) and what keeps a dropped Work's arrays alive
//   collectives.cc  each collective: its Python arguments into a collx::Call
//   module.cc       the module definition: classes, init(), config()
//
// The dtype and op mapping and the keep-alive of dropped calls are shared with the torch
// backend (shared/). Threads: every call that talks to peers or to the store releases the
// GIL; a custom reduce op written in Python takes it back for each piece it reduces.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "buffers.h"
#include "collx/collx.h"
#include "common/in_flight.h"
#include "common/mapping.h"

namespace collx::python {

using std::chrono::milliseconds;

// ---- errors (errors.cc) ------------------------------------------------------------------

// Sets the Python error for `e`: the class of its kind, its message, its parts as attributes.
void raiseError(const Error& e);
// Creates collx.Error and its kinds in `m` and translates collx::Error into them.
void defineErrors(py::module_& m);

// ---- conversions (conversions.cc) --------------------------------------------------------

// Seconds (int, float) or a timedelta; None: unset. Not positive: InvalidArgument.
std::optional<milliseconds> toDuration(py::handle value, const Where& where);
// A DataType, its name, a numpy dtype or a torch dtype; None: unset.
std::optional<DataType> toDataType(py::handle value, const Where& where);
// Non-negative integers, each multiplied by `scale` (the units a moved element takes).
Counts toCounts(py::handle value, std::uint64_t scale, const char* what, const Where& where);

// A Python function as a collx reduction: fn(a, b) with numpy arrays over inout and in; it
// either updates a in place (returning None or a) or returns the result, which is copied
// into a. bfloat16 elements arrive as uint16 (numpy has no bfloat16).
struct PyReduceFn {
  py::object fn;
  std::mutex mutex;
  py::object error;  // the first exception the function raised, until a call reports it

  ~PyReduceFn();
  // Called by the engine on any thread, without the GIL.
  void reduce(void* inout, const void* in, std::size_t count, DataType type);
  // Raises (with the GIL) what the function raised during the call that just ended.
  void raiseIfFailed();
};

// The Python ReduceOp: a collx op and, for a custom one, its Python function (whose
// exceptions a call reports when it ends).
struct PyReduceOp {
  ReduceOp op;
  std::shared_ptr<PyReduceFn> fn;
};

// The op argument: a ReduceOp, its name ("sum", "max", "PRODUCT", "ReduceOp.SUM"), or
// torch.distributed's ReduceOp; None is sum.
PyReduceOp toReduceOp(py::handle value, const Where& where);

// The DataType enum and the ReduceOp class.
void defineTypes(py::module_& m);

// ---- work (work.cc) ----------------------------------------------------------------------

// What a call keeps alive until it ends: its buffers, its result, its reduce function.
struct Held {
  std::vector<Buffer> buffers;
  py::object result = py::none();
  std::shared_ptr<PyReduceFn> fn;
};

// A Python Context's state, shared with its Works: the collx context, and the calls whose
// Work was dropped before they ended (their arrays stay borrowed until they do).
struct State {
  std::shared_ptr<Context> context;
  bindings::InFlight inFlight;

  ~State();
  // The context for a call named `what` (InvalidArgument once closed); releases what the
  // dropped calls that ended held. With the GIL.
  Context& get(const char* what);
  // Waits for the dropped calls, then ends the context. Idempotent; with the GIL.
  void close();
};

class PyWork;

class PyContext {
 public:
  explicit PyContext(std::shared_ptr<Context> context);
  ~PyContext();

  Context& ctx(const char* what) { return state_->get(what); }
  void close() { state_->close(); }
  bool closed() const { return !state_->context; }

  // The one call path: runs `call` (the GIL released while it blocks) and returns
  // held.result, or with `async` starts it and returns a Work that keeps `held` alive until
  // the call ends.
  py::object call(Context& ctx, const Call& call, Held held, bool async);

 private:
  std::shared_ptr<State> state_;
};

// The Work class.
void defineWork(py::module_& m);

// ---- collectives (collectives.cc) --------------------------------------------------------

// The collectives as methods of Context.
void defineCollectives(py::class_<PyContext, std::shared_ptr<PyContext>>& context);

}  // namespace collx::python
