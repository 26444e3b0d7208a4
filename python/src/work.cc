// Contexts and Works: the one path every collective takes (a collx::Call in; the result, or
// a Work, out), and what keeps a call's arrays alive while it runs, also after its Work was
// dropped (shared/in_flight.h, as in the torch backend).
#include <pybind11/pybind11.h>

#include <exception>
#include <utility>

#include "module.h"

namespace collx::python {

namespace {

// What a dropped Work's call holds in the context's InFlight: its Held, released with the
// GIL (InFlight releases holds on whichever thread sweeps, without the GIL).
struct Kept {
  Held held;

  explicit Kept(Held h) : held(std::move(h)) {}
  Kept(const Kept&) = delete;
  Kept& operator=(const Kept&) = delete;
  ~Kept() {
    if (!Py_IsInitialized()) {  // at exit: the interpreter is gone, nothing to release
      for (Buffer& b : held.buffers) b.abandon();
      held.result.release();
      return;
    }
    py::gil_scoped_acquire gil;
    held = Held();
  }
};

}  // namespace

State::~State() {
  if (inFlight.size() == 0) return;
  py::gil_scoped_release release;
  inFlight.drain();
}

Context& State::get(const char* what) {
  if (!context) throw InvalidArgument(Where{-1, what, -1}, "the context was closed");
  if (inFlight.size() > 0) {
    py::gil_scoped_release release;
    inFlight.sweep();
  }
  return *context;
}

void State::close() {
  if (!context) return;
  std::shared_ptr<Context> last = std::move(context);
  py::gil_scoped_release release;
  inFlight.drain();
  last.reset();  // may wait for the other ranks to leave when this rank hosts the store
}

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
    if (!done) state_->inFlight.adopt(std::move(work_), std::make_shared<Kept>(std::move(held_)));
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

PyContext::PyContext(std::shared_ptr<Context> context) : state_(std::make_shared<State>()) {
  state_->context = std::move(context);
}

PyContext::~PyContext() { state_->close(); }

py::object PyContext::call(Context& ctx, const Call& call, Held held, bool async) {
  if (!async) {
    {
      py::gil_scoped_release release;
      execute(ctx, call);
    }
    if (held.fn) held.fn->raiseIfFailed();
    return held.result;
  }
  Work work;
  {
    py::gil_scoped_release release;
    work = start(ctx, call);
  }
  return py::cast(std::make_unique<PyWork>(state_, std::move(work), std::move(held)));
}

void defineWork(py::module_& m) {
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
}

}  // namespace collx::python
