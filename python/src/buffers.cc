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

// A struct-module format (what numpy, array.array and memoryview export) as a collx type and
// a readable name. Byte-order prefixes other than native little endian leave no collx type.
std::optional<DataType> typeOfFormat(std::string_view format, std::size_t itemSize,
                                     std::string& name) {
  bool nonNative = false;
  if (!format.empty() && (format[0] == '@' || format[0] == '=' || format[0] == '<')) {
    format.remove_prefix(1);
  } else if (!format.empty() && (format[0] == '>' || format[0] == '!')) {
    nonNative = true;
    format.remove_prefix(1);
  }
  std::optional<DataType> type;
  if (format == "b") {
    type = DataType::kInt8, name = "int8";
  } else if (format == "B" || format == "c") {
    type = DataType::kUint8, name = "uint8";
  } else if (format == "?") {
    type = DataType::kUint8, name = "bool";
  } else if (format == "e") {
    type = DataType::kFloat16, name = "float16";
  } else if (format == "f") {
    type = DataType::kFloat32, name = "float32";
  } else if (format == "d") {
    type = DataType::kFloat64, name = "float64";
  } else if (format == "i" || format == "l" || format == "q" || format == "n") {
    if (itemSize == 4) type = DataType::kInt32, name = "int32";
    if (itemSize == 8) type = DataType::kInt64, name = "int64";
  } else if (format == "h") {
    name = "int16";
  } else if (format == "H") {
    name = "uint16";
  } else if (format == "I" || format == "L" || format == "Q" || format == "N") {
    name = "uint" + std::to_string(itemSize * 8);
  } else if (format == "Zf") {
    name = "complex64";
  } else if (format == "Zd") {
    name = "complex128";
  } else if (format == "g") {
    name = "longdouble";
  }
  if (name.empty()) name = "format '" + std::string(format) + "'";
  if (nonNative) {
    name = "big-endian " + name;
    type.reset();
  }
  return type;
}

std::optional<DataType> typeOfTorch(const std::string& dtype, std::string& name) {
  // str(torch.float32) == "torch.float32"
  name = dtype.rfind("torch.", 0) == 0 ? dtype.substr(6) : dtype;
  if (name == "bool") return DataType::kUint8;
  std::optional<DataType> type = parseDataType(name);
  if (type && name != dataTypeName(*type)) type.reset();  // only the exact names
  if (!type) name = "torch." + name;
  return type;
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
    b.dtype_ = typeOfFormat(b.format_, b.itemSize_, b.typeName_);
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
  b.dtype_ = typeOfTorch(py::str(object.attr("dtype")), b.typeName_);
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

Typed typeOf(const Buffer& buffer, std::optional<DataType> override, bool reduces, const char* role,
             const Where& where) {
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
    return t;
  }
  if (buffer.dataType()) {
    t.dtype = *buffer.dataType();
    t.count = buffer.bytes() / dataTypeSize(t.dtype);
    return t;
  }
  if (reduces) {
    throw InvalidArgument(where, std::string(role) + " holds " + buffer.typeName() +
                                     " elements, which collx cannot reduce (it reduces int8, "
                                     "uint8, int32, int64, float16, bfloat16, float32 and "
                                     "float64; for bfloat16 stored as uint16, pass "
                                     "dtype=collx.bfloat16)");
  }
  t.dtype = DataType::kUint8;
  t.count = buffer.bytes();
  t.scale = buffer.itemSize();
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
