// Reduction kernels: the "gamma" part of every reducing collective.
//
// Elementwise, in one thread, vectorized (AVX-512, AVX2 or portable scalar code, chosen once at
// run time). Every function here is reentrant and blocks only for the arithmetic; nothing is
// allocated except a scratch copy in one rare custom-op case (see reduce()).
//
// Semantics shared by every instruction set (the results are bit for bit the same on each,
// except which NaN comes out when both operands are NaN: the compiler may swap the operands of
// an addition):
// - Integers: sum and prod wrap around (two's complement); min and max are signed for int8,
//   int32 and int64; band, bor and bxor are bitwise.
// - float32, float64: IEEE arithmetic in the element type. min/max return NaN when either
//   operand is NaN; for equal operands (-0.0 and +0.0) they return the second one (src, b).
// - float16, bfloat16: each element is widened to float32 exactly, combined in float32 and
//   rounded back once (round to nearest, ties to even; overflow gives infinity; a NaN stays a
//   NaN, quieted).
// - kAvg reduces as kSum: the algorithm divides once at the end with divideBy().
// - Bitwise ops on floating-point types are a caller bug (ReduceOp::validate refuses them).
// - kCustom calls op.function(): the built-in vector paths are not involved.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collx/base/data_type.h"
#include "collx/base/reduce_op.h"

namespace collx::algorithms {

// dst[i] = dst[i] (op) src[i] for i in [0, count). dst and src may be unaligned; they must not
// partially overlap (dst == src is allowed). count == 0 does nothing (no custom call either).
void reduceInto(void* dst, const void* src, std::size_t count, DataType type, const ReduceOp& op);

// dst[i] = a[i] (op) b[i]; dst may equal a or b (or both), but must not partially overlap
// either. For a custom op with dst != a, a is copied to dst and then reduced with b; when dst
// is b and the op is not commutative, b is first saved to a scratch buffer.
void reduce(void* dst, const void* a, const void* b, std::size_t count, DataType type,
            const ReduceOp& op);

// For ReduceOpKind::kAvg: the kernels above compute the sum; algorithms then call this once
// to divide by the number of ranks. Integers: truncating division (toward zero). float16 and
// bfloat16: divided in float32 and rounded once. divisor must be > 0.
void divideBy(void* data, std::size_t count, DataType type, std::uint64_t divisor);

// Which instruction set runtime dispatch chose: "avx512", "avx2" or "scalar".
const char* reduceIsa();

}  // namespace collx::algorithms
