// reduce.h: runtime dispatch to the kernel tables, custom ops and divideBy.
//
// The instruction set is chosen once (the first call) from what the CPU and OS support, and
// its table is cached: a call costs one indirect call on top of the loop.
#include "collx/algorithms/reduce.h"

#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "collx/base/check.h"
#include "half_float.h"
#include "reduce_kernels.h"

#ifndef COLLX_REDUCE_X86
#define COLLX_REDUCE_X86 0
#endif
#if COLLX_REDUCE_X86 && defined(__clang__) && __clang_major__ < 15
#include <cpuid.h>
#endif

namespace collx::algorithms {
namespace detail {

const char* reduceIsaName(ReduceIsa isa) noexcept {
  switch (isa) {
    case ReduceIsa::kScalar:
      return "scalar";
    case ReduceIsa::kAvx2:
      return "avx2";
    case ReduceIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

bool reduceIsaAvailable(ReduceIsa isa) noexcept {
#if COLLX_REDUCE_X86
  // Also checks that the OS saves the ymm/zmm state (XGETBV), not only CPUID.
  __builtin_cpu_init();
#if defined(__clang__) && __clang_major__ < 15
  // Clang 14's __builtin_cpu_supports knows no "f16c": CPUID leaf 1, ECX bit 29.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
#else
  const bool f16c = __builtin_cpu_supports("f16c");
#endif
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  switch (isa) {
    case ReduceIsa::kScalar:
      return true;
    case ReduceIsa::kAvx2:
      return avx2;
    case ReduceIsa::kAvx512:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  }
  return false;
#else
  return isa == ReduceIsa::kScalar;
#endif
}

ReduceIsa selectedReduceIsa() noexcept {
  static const ReduceIsa kSelected = [] {
    for (ReduceIsa isa : {ReduceIsa::kAvx512, ReduceIsa::kAvx2}) {
      if (reduceIsaAvailable(isa)) return isa;
    }
    return ReduceIsa::kScalar;
  }();
  return kSelected;
}

const KernelTable& kernelTable(ReduceIsa isa) {
  COLLX_CHECK(reduceIsaAvailable(isa));
  switch (isa) {
#if COLLX_REDUCE_X86
    case ReduceIsa::kAvx512:
      return avx512KernelTable();
    case ReduceIsa::kAvx2:
      return avx2KernelTable();
#endif
    default:
      return scalarKernelTable();
  }
}

namespace {

KernelOp kernelOp(ReduceOpKind kind) {
  switch (kind) {
    case ReduceOpKind::kSum:
    case ReduceOpKind::kAvg:  // the division comes once, at the end (divideBy)
      return KernelOp::kSum;
    case ReduceOpKind::kProd:
      return KernelOp::kProd;
    case ReduceOpKind::kMin:
      return KernelOp::kMin;
    case ReduceOpKind::kMax:
      return KernelOp::kMax;
    case ReduceOpKind::kBand:
      return KernelOp::kBand;
    case ReduceOpKind::kBor:
      return KernelOp::kBor;
    case ReduceOpKind::kBxor:
      return KernelOp::kBxor;
    case ReduceOpKind::kCustom:
      break;
  }
  // kCustom never gets here: run() calls the user's function instead.
  ::collx::detail::checkFailed(__FILE__, __LINE__, "kernelOp(kCustom): custom ops have no kernel");
}

// The user function only knows inout (op)= in, so reduce() has to get a into dst first.
void reduceCustom(void* dst, const void* a, const void* b, std::size_t count, DataType type,
                  const ReduceOp& op) {
  const ReduceFunction& fn = op.function();
  COLLX_CHECK(static_cast<bool>(fn));
  const std::size_t bytes = count * dataTypeSize(type);
  if (dst == a) {
    fn(dst, b, count, type);
  } else if (dst != b) {
    std::memcpy(dst, a, bytes);
    fn(dst, b, count, type);
  } else if (op.commutative()) {
    fn(dst, a, count, type);  // dst is b: b (op) a == a (op) b
  } else {
    // dst is b and the order matters: copying a into dst would destroy b, so save b first.
    const auto* bytesOfB = static_cast<const unsigned char*>(b);
    std::vector<unsigned char> savedB(bytesOfB, bytesOfB + bytes);
    std::memcpy(dst, a, bytes);
    fn(dst, savedB.data(), count, type);
  }
}

void run(const KernelTable& table, void* dst, const void* a, const void* b, std::size_t count,
         DataType type, const ReduceOp& op) {
  if (count == 0) return;
  if (op.kind() == ReduceOpKind::kCustom) {
    reduceCustom(dst, a, b, count, type, op);
    return;
  }
  // ReduceOp::validate refused this already for the user; reaching it is a collx bug.
  COLLX_CHECK(!op.isBitwise() || isInteger(type));
  const ReduceKernel kernel =
      table.kernels[static_cast<std::size_t>(type)][static_cast<std::size_t>(kernelOp(op.kind()))];
  COLLX_CHECK(kernel != nullptr);
  kernel(dst, a, b, count);
}

const KernelTable& selectedTable() {
  static const KernelTable& kTable = kernelTable(selectedReduceIsa());
  return kTable;
}

template <class T>
void divideElements(void* data, std::size_t count, std::uint64_t divisor) {
  auto* p = static_cast<unsigned char*>(data);
  for (std::size_t i = 0; i < count; ++i, p += sizeof(T)) {
    T x;
    std::memcpy(&x, p, sizeof(T));
    if constexpr (std::is_floating_point_v<T>) {
      x = x / static_cast<T>(divisor);
    } else if constexpr (std::is_unsigned_v<T>) {
      x = static_cast<T>(x / divisor);
    } else if (divisor <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      // int64 arithmetic truncates toward zero, and x / divisor always fits in T.
      x = static_cast<T>(static_cast<std::int64_t>(x) / static_cast<std::int64_t>(divisor));
    } else {
      // divisor >= 2^63 > |x|, except for int64's minimum divided by exactly 2^63.
      const bool minusOne =
          x == std::numeric_limits<T>::min() && sizeof(T) == 8 && divisor == (1ull << 63);
      x = static_cast<T>(minusOne ? -1 : 0);
    }
    std::memcpy(p, &x, sizeof(T));
  }
}

template <float (*kToFloat)(std::uint16_t) noexcept, std::uint16_t (*kFromFloat)(float) noexcept>
void divideHalves(void* data, std::size_t count, std::uint64_t divisor) {
  auto* p = static_cast<unsigned char*>(data);
  const auto by = static_cast<float>(divisor);
  for (std::size_t i = 0; i < count; ++i, p += 2) {
    std::uint16_t h;
    std::memcpy(&h, p, 2);
    h = kFromFloat(kToFloat(h) / by);
    std::memcpy(p, &h, 2);
  }
}

}  // namespace

void reduceWithIsa(ReduceIsa isa, void* dst, const void* a, const void* b, std::size_t count,
                   DataType type, const ReduceOp& op) {
  run(kernelTable(isa), dst, a, b, count, type, op);
}

}  // namespace detail

void reduceInto(void* dst, const void* src, std::size_t count, DataType type, const ReduceOp& op) {
  detail::run(detail::selectedTable(), dst, dst, src, count, type, op);
}

void reduce(void* dst, const void* a, const void* b, std::size_t count, DataType type,
            const ReduceOp& op) {
  detail::run(detail::selectedTable(), dst, a, b, count, type, op);
}

// Not vectorized by hand: it runs once per collective, not once per step; the float loops
// are still auto-vectorized, and integer division has no vector instruction anyway.
void divideBy(void* data, std::size_t count, DataType type, std::uint64_t divisor) {
  COLLX_CHECK_GT(divisor, 0u);
  if (count == 0 || divisor == 1) return;
  switch (type) {
    case DataType::kInt8:
      return detail::divideElements<std::int8_t>(data, count, divisor);
    case DataType::kUint8:
      return detail::divideElements<std::uint8_t>(data, count, divisor);
    case DataType::kInt32:
      return detail::divideElements<std::int32_t>(data, count, divisor);
    case DataType::kInt64:
      return detail::divideElements<std::int64_t>(data, count, divisor);
    case DataType::kFloat16:
      return detail::divideHalves<detail::halfToFloat, detail::floatToHalf>(data, count, divisor);
    case DataType::kBfloat16:
      return detail::divideHalves<detail::bfloat16ToFloat, detail::floatToBfloat16>(data, count,
                                                                                    divisor);
    case DataType::kFloat32:
      return detail::divideElements<float>(data, count, divisor);
    case DataType::kFloat64:
      return detail::divideElements<double>(data, count, divisor);
  }
  COLLX_CHECK(false);
}

const char* reduceIsa() { return detail::reduceIsaName(detail::selectedReduceIsa()); }

}  // namespace collx::algorithms
