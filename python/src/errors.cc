// collx's error kinds as Python exception classes: collx.Error (a RuntimeError) and
// IoError, TimeoutError, InvalidArgument (also a ValueError), MismatchError, Unsupported,
// Aborted, RevokedError, ExcludedError, each with collx's message and its parts as attributes.
#include <string>

#include "module.h"

namespace collx::python {

namespace {

// The Python classes of collx's error kinds, created once at import (leaked on purpose:
// they live as long as the interpreter).
struct ErrorClasses {
  PyObject* base = nullptr;
  PyObject* kinds[static_cast<int>(kLastErrorKind) + 1] = {};
};
ErrorClasses& errorClasses() {
  static ErrorClasses classes;
  return classes;
}

PyObject* classOf(ErrorKind kind) {
  const int k = static_cast<int>(kind);
  return (k >= 0 && k <= static_cast<int>(kLastErrorKind)) ? errorClasses().kinds[k]
                                                           : errorClasses().base;
}

}  // namespace

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

void defineErrors(py::module_& m) {
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
  c.kinds[static_cast<int>(ErrorKind::kRevoked)] =
      sub("RevokedError",
          "A rank revoked the context (Context.revoke(), or a failure it detected): every call "
          "of this generation in flight and later fails, on every rank; peer is the rank that "
          "revoked it.");
  c.kinds[static_cast<int>(ErrorKind::kExcluded)] =
      sub("ExcludedError",
          "The other ranks agreed without this one (Context.agree(), shrink()): they found it "
          "failed, or it came after the deadline. Its context is over; the process may join "
          "the job again.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      raiseError(e);
    }
  });
}

}  // namespace collx::python
