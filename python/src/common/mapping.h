// How the bindings (the module collx._collx and the torch backend collx._collx_torch) map
// what Python hands them onto collx: element types by the names numpy and torch give them
// (torch.float32 is "float32", as is numpy's float32), and reduce ops by collx's names or
// torch.distributed's. Both bindings go through these functions, so that an array and a
// tensor of one type, reduced with one op, make the same collx call.
//
// No pybind11 and no torch here: this compiles into both modules (one C++17, one C++20).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "collx/base/data_type.h"
#include "collx/base/error.h"
#include "collx/base/reduce_op.h"

namespace collx::bindings {

// An element type the bindings know by name, and how collx moves and reduces it.
struct ElementType {
  const char* name;  // numpy's and torch's name: "float32", "bool", "complex64"
  // The collx type of one element; none for complex, which reduces as pairs of `real`.
  std::optional<DataType> dtype;
  // bool: stored as uint8; sum and prod reduce as logical or and and (as in torch and numpy,
  // a sum of trues stays a valid bool); avg has no meaning.
  bool logical = false;
  // complex: sum and avg reduce the real and imaginary parts as two `real` elements.
  std::optional<DataType> real;
};

// The type named `name`, or nullptr for one collx has no name for (uint16, int16,
// complex32, ...): those move as bytes and cannot be reduced.
const ElementType* findElementType(std::string_view name) noexcept;

// The table, in a fixed order (for the tests that compare the bindings).
const ElementType* elementTypesBegin() noexcept;
const ElementType* elementTypesEnd() noexcept;

// How a call moves elements of `type` (nullptr: a type without a collx name, `itemSize`
// bytes each, named `typeName` in messages): as `dtype`, `perElement` of them per element.
struct Units {
  DataType dtype = DataType::kUint8;
  std::uint64_t perElement = 1;
};

// `op`: the call reduces with it (nullptr: it only moves). Types that cannot be reduced with
// `op` (a type without a collx name; complex with anything but sum and avg) are an
// InvalidArgument naming `role` ("the input", "out") and `typeName`; `hint` is appended to
// its message (a binding's way out, e.g. its dtype= argument).
Units unitsOf(const ElementType* type, std::size_t itemSize, const ReduceOp* op,
              const std::string& typeName, const char* role, const Where& where,
              const char* hint = "");

// The op a reduction of elements of `type` applies: bool's sum and prod become bor and band,
// bool's avg is an InvalidArgument; every other op and type as given.
ReduceOp opFor(const ReduceOp& op, const ElementType* type, const Where& where);

// torch.distributed's ReduceOp, by the value of its RedOpType (c10d::ReduceOp::RedOpType:
// SUM 0, AVG 1, PRODUCT 2, MIN 3, MAX 4, BAND 5, BOR 6, BXOR 7, PREMUL_SUM 8). The torch
// backend checks that order against torch's headers.
inline constexpr ReduceOpKind kTorchOps[] = {
    ReduceOpKind::kSum, ReduceOpKind::kAvg,  ReduceOpKind::kProd, ReduceOpKind::kMin,
    ReduceOpKind::kMax, ReduceOpKind::kBand, ReduceOpKind::kBor,  ReduceOpKind::kBxor,
};
inline constexpr int kTorchPremulSum = 8;

// A torch RedOpType value as a collx op; InvalidArgument for PREMUL_SUM and anything else.
ReduceOpKind torchOp(int value, const Where& where);

// An op by name, case-insensitively: collx's ("sum", "prod", ..., "bxor"), torch's
// ("PRODUCT"), with torch's prefixes ("ReduceOp.SUM", "RedOpType.SUM"). std::nullopt when
// it names none.
std::optional<ReduceOpKind> parseOp(std::string_view name);

}  // namespace collx::bindings
