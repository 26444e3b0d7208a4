// Internal to collx::algorithms (and its tests): the per-instruction-set kernel tables behind
// reduce.h, and a way to run a reduction on a chosen instruction set.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "collx/base/data_type.h"
#include "collx/base/reduce_op.h"

namespace collx::algorithms::detail {

enum class ReduceIsa : std::uint8_t { kScalar, kAvx2, kAvx512 };
inline constexpr ReduceIsa kAllReduceIsas[] = {ReduceIsa::kScalar, ReduceIsa::kAvx2,
                                               ReduceIsa::kAvx512};

// "scalar", "avx2", "avx512".
const char* reduceIsaName(ReduceIsa isa) noexcept;
// Compiled into this build and usable on this CPU and OS. avx2 needs AVX2, FMA and F16C;
// avx512 needs those plus AVX-512 F, BW, DQ and VL.
bool reduceIsaAvailable(ReduceIsa isa) noexcept;
// The best available one, chosen on first use and fixed for the life of the process.
ReduceIsa selectedReduceIsa() noexcept;

// The built-in ops a kernel exists for (kAvg runs as kSum, kCustom has no kernel).
enum class KernelOp : std::uint8_t { kSum, kProd, kMin, kMax, kBand, kBor, kBxor };
inline constexpr std::size_t kNumKernelOps = 7;
inline constexpr std::size_t kNumDataTypes = std::size(kAllDataTypes);

// dst[i] = a[i] (op) b[i] for i in [0, count); any pointer may be unaligned, dst may equal a
// or b.
using ReduceKernel = void (*)(void* dst, const void* a, const void* b, std::size_t count);

// kernels[DataType][KernelOp]; nullptr for the bitwise ops of floating-point types.
struct KernelTable {
  std::array<std::array<ReduceKernel, kNumKernelOps>, kNumDataTypes> kernels{};
};

// One table per translation unit, each compiled with its own -m flags. The x86 ones exist
// only on x86-64 builds; call them only when reduceIsaAvailable() says so.
const KernelTable& scalarKernelTable() noexcept;
const KernelTable& avx2KernelTable() noexcept;
const KernelTable& avx512KernelTable() noexcept;

// The table of `isa`; a COLLX_CHECK fails when it is not available.
const KernelTable& kernelTable(ReduceIsa isa);

// reduce() from reduce.h, run on `isa` instead of the selected one (tests compare the paths,
// benchmarks time them). A COLLX_CHECK fails when `isa` is not available.
void reduceWithIsa(ReduceIsa isa, void* dst, const void* a, const void* b, std::size_t count,
                   DataType type, const ReduceOp& op);

}  // namespace collx::algorithms::detail
