// Serial references for the collective tests: deterministic inputs and the expected results
// computed element by element, in the element type's own semantics.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "collx/base/data_type.h"
#include "collx/base/reduce_op.h"

namespace collx::test {

// Round-to-nearest-even conversions for the 16-bit float types.
std::uint16_t floatToHalf(float f);
float halfToFloat(std::uint16_t h);
std::uint16_t floatToBfloat16(float f);
float bfloat16ToFloat(std::uint16_t b);

// Writes `value` (an integer small enough for every type) as element `i` of `data`.
void storeValue(void* data, std::uint64_t i, DataType type, double value);
double loadValue(const void* data, std::uint64_t i, DataType type);

// The input of `rank` for an op: small integers, exact in every type (products stay small).
double inputValue(int rank, std::uint64_t i, ReduceOpKind op);
std::vector<std::uint8_t> makeInput(int rank, std::uint64_t count, DataType type, ReduceOpKind op);

// The reduction of every rank's makeInput() over `size` ranks, in the type's semantics.
std::vector<std::uint8_t> expectedReduction(int size, std::uint64_t count, DataType type,
                                            ReduceOpKind op);

// A 2x2 matrix of 16-bit entries packed in one int64 element, multiplied modulo 2^16:
// associative, as every reduce op must be, but not commutative, so only rank order gives
// the reference. One matrix per element, so algorithms may split a vector anywhere.
std::uint64_t matmul(std::uint64_t a, std::uint64_t b);
// matmul as a custom ReduceOp over int64 elements (commutative = false).
ReduceOp matmulOp();
// [[1, x], [y, 1]], x and y depending on the rank and the element: distinct, non-trivial.
std::int64_t matrixOf(int rank, std::uint64_t i);

// The index of the first element that differs, or -1.
std::int64_t firstDifference(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b,
                             DataType type);

}  // namespace collx::test
