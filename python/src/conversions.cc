// The arguments of the module's calls that are not buffers (those are buffers.cc): timeouts,
// dtypes, reduce ops (built-in, by name, torch.distributed's, or written in Python) and
// per-rank counts; and the Python classes DataType and ReduceOp.
#include <pybind11/stl.h>

#include <string>
#include <utility>

#include "module.h"

namespace collx::python {

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

// The op argument: a ReduceOp, a name (collx's or torch's, shared/mapping.h), or
// torch.distributed's ReduceOp (its RedOpType value, through the table the torch backend
// reads too).
PyReduceOp toReduceOp(py::handle value, const Where& where) {
  if (value.is_none()) return {ReduceOpKind::kSum, nullptr};
  if (py::isinstance<PyReduceOp>(value)) return value.cast<PyReduceOp>();
  py::object op = py::reinterpret_borrow<py::object>(value);
  const std::string type = py::str(py::type::handle_of(op).attr("__name__"));
  if (type == "ReduceOp" && py::hasattr(op, "op")) {  // torch.distributed.ReduceOp.SUM
    op = op.attr("op");
    return {bindings::torchOp(op.cast<int>(), where), nullptr};
  }
  if (type == "RedOpType") return {bindings::torchOp(op.cast<int>(), where), nullptr};
  const std::string name = py::str(op);
  std::optional<ReduceOpKind> kind = bindings::parseOp(name);
  if (!kind) {
    throw InvalidArgument(where, "'" + name +
                                     "' is not a reduce op (sum, prod, min, max, "
                                     "avg, band, bor, bxor or ReduceOp.custom)");
  }
  return {*kind, nullptr};
}

PyReduceFn::~PyReduceFn() {
  if (!Py_IsInitialized()) {
    fn.release();
    error.release();
    return;
  }
  py::gil_scoped_acquire gil;
  fn = py::object();
  error = py::object();
}

void PyReduceFn::reduce(void* inout, const void* in, std::size_t count, DataType type) {
  if (!Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  try {
    static const char* const kNumpyNames[] = {"int8",    "uint8",  "int32",   "int64",
                                              "float16", "uint16", "float32", "float64"};
    const auto bytes = static_cast<py::ssize_t>(count * dataTypeSize(type));
    py::module_ numpy = py::module_::import("numpy");
    const char* name = kNumpyNames[static_cast<int>(type)];
    py::object a = numpy.attr("frombuffer")(py::memoryview::from_memory(inout, bytes, false), name);
    py::object b = numpy.attr("frombuffer")(py::memoryview::from_memory(in, bytes), name);
    py::object result = fn(a, b);
    if (!result.is_none() && !result.is(a)) numpy.attr("copyto")(a, result, "unsafe");
  } catch (py::error_already_set& e) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!error) error = e.value();
  }
}

void PyReduceFn::raiseIfFailed() {
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

void defineTypes(py::module_& m) {
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
                            "ReduceOp.custom(fn). Collectives also take the names ('max', "
                            "torch's 'PRODUCT') and torch.distributed's ReduceOp.");
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
}

}  // namespace collx::python
