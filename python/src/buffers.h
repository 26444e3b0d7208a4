// Python objects as collx buffers: anything with the buffer protocol (numpy arrays,
// bytearray, memoryview, array.array) and CPU torch tensors (duck-typed through data_ptr(),
// so that the module needs no torch headers and works without torch installed).
//
// Every function here needs the GIL. A Buffer keeps its object alive and, for the buffer
// protocol, holds the exporter's view until it is destroyed (again with the GIL held), so
// that an array cannot be resized or freed under a collective in flight.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collx/base/data_type.h"
#include "collx/base/error.h"
#include "collx/base/reduce_op.h"
#include "common/mapping.h"

namespace collx::python {

namespace py = pybind11;

class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&&) noexcept = default;
  Buffer& operator=(Buffer&&) noexcept = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  // Borrows `object`'s memory. `role` names it in errors ("the input", "out"). Refuses, with
  // an InvalidArgument naming the rank and the call: memory that is not C-contiguous, a
  // read-only object when `writable`, a tensor that is not on the CPU. Anything that is
  // neither a buffer nor a tensor is a TypeError.
  static Buffer acquire(py::handle object, bool writable, const char* role, const Where& where);

  bool valid() const noexcept { return static_cast<bool>(object_); }
  void* data() const noexcept { return data_; }
  std::uint64_t bytes() const noexcept { return bytes_; }
  std::size_t itemSize() const noexcept { return itemSize_; }
  // The element type as the bindings know it (shared/mapping.h), nullptr for one collx has
  // no name for (uint16, big-endian float32, torch.complex32, ...).
  const bindings::ElementType* elementType() const noexcept { return type_; }
  // "float32", "uint16", "bool", "torch.complex64": for messages.
  const std::string& typeName() const noexcept { return typeName_; }
  const std::vector<py::ssize_t>& shape() const noexcept { return shape_; }
  const py::object& object() const noexcept { return object_; }
  bool isTorch() const noexcept { return torch_; }

  // Lets go of the object and its view without touching Python: for when the interpreter
  // has ended (at exit), where releasing them would crash. Leaks them.
  void abandon() noexcept;

  // A new, uninitialized array of `shape` with this buffer's element type: a torch tensor
  // for a tensor, else a numpy array.
  py::object allocateLike(const std::vector<py::ssize_t>& shape) const;

 private:
  py::object object_;
  std::unique_ptr<Py_buffer> view_;  // set while a buffer-protocol view is held
  void* data_ = nullptr;
  std::uint64_t bytes_ = 0;
  std::size_t itemSize_ = 1;
  const bindings::ElementType* type_ = nullptr;
  std::string typeName_;
  std::string format_;  // struct format of a buffer-protocol view
  std::vector<py::ssize_t> shape_;
  bool torch_ = false;
};

// How a call moves a buffer: a collx type and a count of its elements. `scale` is how many
// of those one of the buffer's elements takes (1; 2 for complex reduced as pairs of reals;
// the item size for elements moved as bytes), by which counts given by the caller are
// multiplied. With `override` (the dtype= argument) the bytes are reinterpreted as that type
// (a uint16 array tagged as bfloat16). `op` set: the call reduces with it, and elements that
// cannot be reduced so are refused with InvalidArgument (shared/mapping.h decides, as for
// the torch backend). `type`: the element type an op applies to (bool's rule, opFor()).
struct Typed {
  DataType dtype = DataType::kUint8;
  std::uint64_t count = 0;
  std::uint64_t scale = 1;
  const bindings::ElementType* type = nullptr;
};
Typed typeOf(const Buffer& buffer, std::optional<DataType> override, const ReduceOp* op,
             const char* role, const Where& where);

// Checks that `other` holds elements of the same type as `first` (after the override).
void checkSameType(const Buffer& first, const Typed& a, const Buffer& other, const Typed& b,
                   const char* role, const Where& where);

}  // namespace collx::python
