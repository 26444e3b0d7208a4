#include "buffers.h"

#include <string_view>

namespace collx::python {

namespace {

std::string shapeText(const std::vector<py::ssize_t>& v) {
  std::string out = "(";
  for (std::size_t i = 0; i < v.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(v[i]);
  }
  return out + (v.size() == 1 ? ",)" : ")");
}

// The name numpy gives a struct-module format (what numpy, array.array and memoryview export):
// "float32", "bool", "uint16", "complex64". Byte-order prefixes other than native little
// endian make a name with no collx type ("big-endian float32").
std::string nameOfFormat(std::string_view format, std::size_t itemSize, bool& native) {
  native = true;
  if (!format.empty() && (format[0] == '@' || format[0] == '=' || format[0] == '<')) {
    format.remove_prefix(1);
  } else if (!format.empty() && (format[0] == '>' || format[0] == '!')) {
    native = false;
    format.remove_prefix(1);
  }
  const std::string bits = std::to_string(itemSize * 8);
  std::string name;
  if (format == "b") {
    name = "int8";
  } else if (format == "B" || format == "c") {
    name = "uint8";
  } else if (format == "?") {
    name = "bool";
  } else if (format == "e") {
    name = "float16";
  } else if (format == "f") {
    name = "float32";
  } else if (format == "d") {
    name = "float64";
  } else if (format == "h" || format == "i" || format == "l" || format == "q" || format == "n") {
    name = "int" + bits;
  } else if (format == "H" || format == "I" || format == "L" || format == "Q" || format == "N") {
    name = "uint" + bits;
  } else if (format == "Zf") {
    name = "complex64";
  } else if (format == "Zd") {
    name = "complex128";
  } else if (format == "g") {
    name = "longdouble";
  } else {
    name = "format '" + std::string(format) + "'";
  }
  return native ? name : "big-endian " + name;
}

bool looksLikeTensor(py::handle object) {
  return py::hasattr(object, "data_ptr") && py::hasattr(object, "element_size") &&
         py::hasattr(object, "is_contiguous") && py::hasattr(object, "dtype") &&
         py::hasattr(object, "device");
}

}  // namespace

Buffer::~Buffer() {
  if (view_ && view_->obj != nullptr) PyBuffer_Release(view_.get());
}

void Buffer::abandon() noexcept {
  object_.release();
  static_cast<void>(view_.release());
}

Buffer Buffer::acquire(py::handle object, bool writable, const char* role, const Where& where) {
  Buffer b;
  b.object_ = py::reinterpret_borrow<py::object>(object);
  if (PyObject_CheckBuffer(object.ptr())) {
    b.view_ = std::make_unique<Py_buffer>();
    if (PyObject_GetBuffer(object.ptr(), b.view_.get(), PyBUF_RECORDS_RO) != 0) {
      b.view_.reset();
      throw py::error_already_set();
    }
    const Py_buffer& v = *b.view_;
    b.itemSize_ = static_cast<std::size_t>(v.itemsize);
    b.format_ = v.format ? v.format : "B";
    bool native = true;
    b.typeName_ = nameOfFormat(b.format_, b.itemSize_, native);
    if (native) b.type_ = bindings::findElementType(b.typeName_);
    if (v.shape != nullptr) b.shape_.assign(v.shape, v.shape + v.ndim);
    if (!PyBuffer_IsContiguous(&v, 'C')) {
      std::vector<py::ssize_t> strides;
      if (v.strides != nullptr) strides.assign(v.strides, v.strides + v.ndim);
      throw InvalidArgument(where, std::string(role) + " is not contiguous (" + b.typeName_ +
                                       ", shape " + shapeText(b.shape_) + ", strides " +
                                       shapeText(strides) +
                                       "): collx moves contiguous memory only; pass a "
                                       "contiguous copy, e.g. numpy.ascontiguousarray(x)");
    }
    if (writable && v.readonly) {
      throw InvalidArgument(where,
                            std::string(role) + " is read-only (" +
                                std::string(py::str(py::type::handle_of(object).attr("__name__"))) +
                                "): the call writes into it");
    }
    b.data_ = v.buf;
    b.bytes_ = static_cast<std::uint64_t>(v.len);
    return b;
  }
  if (!looksLikeTensor(object)) {
    throw py::type_error(
        formatError(where, std::string(role) +
                               ": expected a buffer (numpy array, bytearray, "
                               "memoryview, array.array) or a CPU "
                               "torch.Tensor, got " +
                               std::string(py::str(py::type::handle_of(object).attr("__name__")))));
  }
  b.torch_ = true;
  // str(torch.float32) == "torch.float32": torch names its types as numpy does.
  const std::string dtype = py::str(object.attr("dtype"));
  const std::string name = dtype.rfind("torch.", 0) == 0 ? dtype.substr(6) : dtype;
  b.type_ = bindings::findElementType(name);
  b.typeName_ = b.type_ != nullptr ? name : dtype;
  for (py::handle d : object.attr("shape")) b.shape_.push_back(d.cast<py::ssize_t>());
  const std::string device = py::str(object.attr("device").attr("type"));
  if (device != "cpu") {
    throw InvalidArgument(where, std::string(role) + " is a tensor on device '" + device +
                                     "': collx moves CPU memory only");
  }
  if (!object.attr("is_contiguous")().cast<bool>()) {
    throw InvalidArgument(where, std::string(role) + " is not contiguous (" + b.typeName_ +
                                     ", shape " + shapeText(b.shape_) +
                                     "): collx moves contiguous memory only; pass "
                                     "x.contiguous()");
  }
  b.itemSize_ = object.attr("element_size")().cast<std::size_t>();
  b.bytes_ = object.attr("numel")().cast<std::uint64_t>() * b.itemSize_;
  b.data_ = reinterpret_cast<void*>(object.attr("data_ptr")().cast<std::uintptr_t>());
  return b;
}

py::object Buffer::allocateLike(const std::vector<py::ssize_t>& shape) const {
  py::tuple dims(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) dims[i] = shape[i];
  if (torch_) return object_.attr("new_empty")(dims);
  py::module_ numpy = py::module_::import("numpy");
  py::object dtype = py::hasattr(object_, "dtype") && py::isinstance(object_, numpy.attr("ndarray"))
                         ? object_.attr("dtype")
                         : numpy.attr("dtype")(format_);
  return numpy.attr("empty")(dims, dtype);
}

Typed typeOf(const Buffer& buffer, std::optional<DataType> override, const ReduceOp* op,
             const char* role, const Where& where) {
  Typed t;
  if (override) {
    const std::size_t size = dataTypeSize(*override);
    if (buffer.bytes() % size != 0) {
      throw InvalidArgument(where, std::string(role) + " holds " + std::to_string(buffer.bytes()) +
                                       " bytes, not a whole number of " + dataTypeName(*override) +
                                       " elements");
    }
    t.dtype = *override;
    t.count = buffer.bytes() / size;
    t.type = bindings::findElementType(dataTypeName(*override));
    return t;
  }
  // (numpy has no bfloat16: such arrays are often uint16.)
  const char* hint = buffer.typeName() == "uint16"
                         ? "; for bfloat16 stored as uint16, pass dtype=collx.bfloat16"
                         : "";
  const bindings::Units units = bindings::unitsOf(buffer.elementType(), buffer.itemSize(), op,
                                                  buffer.typeName(), role, where, hint);
  t.dtype = units.dtype;
  t.count = buffer.bytes() / dataTypeSize(units.dtype);
  t.scale = units.perElement;
  t.type = buffer.elementType();
  return t;
}

void checkSameType(const Buffer& first, const Typed& a, const Buffer& other, const Typed& b,
                   const char* role, const Where& where) {
  const bool same = a.dtype == b.dtype && a.scale == b.scale &&
                    (a.scale == 1 || first.typeName() == other.typeName());
  if (!same) {
    const std::string na = a.scale == 1 ? dataTypeName(a.dtype) : first.typeName();
    const std::string nb = b.scale == 1 ? dataTypeName(b.dtype) : other.typeName();
    throw InvalidArgument(
        where, std::string(role) + " holds " + nb + " elements but the input holds " + na);
  }
}

}  // namespace collx::python
