// The reduction loops, written once and compiled once per instruction set.
//
// reduce_scalar.cc, reduce_avx2.cc and reduce_avx512.cc each define an `Isa` traits struct in
// an anonymous namespace and build their KernelTable from ReduceLoops<Isa>::table(). The traits
// give:
//   template <class T> using Vec = ...;  // T itself (scalar) or a GCC vector of T, 32/64 bytes
//   struct F16, struct Bf16 {           // 16-bit floats <-> float32 vectors
//     static constexpr std::size_t kLanes;  // elements per step
//     struct Wide { Vec<float> v[N]; };     // kLanes float32s, in any order store() undoes
//     static Wide load(const unsigned char* p);  // kLanes elements, unaligned
//     static void store(unsigned char* p, const Wide& w);
//   };
// The arithmetic is written with GCC vector extensions (+, *, <, ?:), so the same source
// serves every width and the compiler picks the instructions (vpaddd, vpminsb, vmaxps, ...).
//
// Everything here is a template over Isa on purpose: with Isa in an anonymous namespace every
// instantiation has internal linkage, so the linker can never keep an AVX-512 copy of a shared
// helper and hand it to the scalar path (the classic SIGILL of multi-ISA builds). For the same
// reason these files include no other inline code than the standard headers below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <type_traits>

#include "collx/base/data_type.h"
#include "reduce_kernels.h"

namespace collx::algorithms::detail {

template <class Isa>
struct ReduceLoops {
  // The ops, elementwise on a scalar or on a vector. Integer sum and prod are instantiated on
  // the unsigned type so that they wrap instead of overflowing.
  struct Sum {
    template <class V>
    static V apply(V x, V y) {
      return static_cast<V>(x + y);
    }
  };
  struct Prod {
    template <class V>
    static V apply(V x, V y) {
      return static_cast<V>(x * y);
    }
  };
  // NaN in either operand gives NaN (x != x is the NaN test that works on vectors; it folds
  // away for integers). On equal operands (-0.0, +0.0) the second one wins, like vminps.
  struct Min {
    template <class V>
    static V apply(V x, V y) {
      V r = x < y ? x : y;
      return x != x ? x : r;  // NOLINT(misc-redundant-expression): NaN test
    }
  };
  struct Max {
    template <class V>
    static V apply(V x, V y) {
      V r = x > y ? x : y;
      return x != x ? x : r;  // NOLINT(misc-redundant-expression): NaN test
    }
  };
  struct Band {
    template <class V>
    static V apply(V x, V y) {
      return static_cast<V>(x & y);
    }
  };
  struct Bor {
    template <class V>
    static V apply(V x, V y) {
      return static_cast<V>(x | y);
    }
  };
  struct Bxor {
    template <class V>
    static V apply(V x, V y) {
      return static_cast<V>(x ^ y);
    }
  };

  template <class V>
  static V load(const unsigned char* p) {
    V v;
    std::memcpy(&v, p, sizeof(V));  // one unaligned vector load
    return v;
  }
  template <class V>
  static void store(unsigned char* p, V v) {
    std::memcpy(p, &v, sizeof(V));
  }

  // float32 -> bfloat16 bits in the low half of each 32-bit lane: round to nearest even (the
  // carry of +0x7FFF(+1) into the exponent also turns overflow into infinity); a NaN is
  // quieted instead, since rounding could carry it into infinity.
  template <class F>
  static auto bfloat16Bits(F v) {
    using U = typename Isa::template Vec<std::uint32_t>;
    static_assert(sizeof(U) == sizeof(F));
    U bits;
    std::memcpy(&bits, &v, sizeof(U));
    U rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    U quieted = (bits >> 16) | 0x40u;
    return v != v ? quieted : rounded;  // NOLINT(misc-redundant-expression): NaN test
  }

  // Elements whose type the vector holds directly (integers, float32, float64). A tail shorter
  // than one vector goes through a zero-padded vector on the stack, so the body and the tail
  // run the very same instructions (and give the very same bits).
  template <class A, class Op>
  static void native(void* dst, const void* a, const void* b, std::size_t count) {
    using V = typename Isa::template Vec<A>;
    // NOLINTNEXTLINE(bugprone-sizeof-expression): V is A itself where the Isa has no vectors
    constexpr std::size_t kLanes = sizeof(V) / sizeof(A);
    auto* d = static_cast<unsigned char*>(dst);
    const auto* x = static_cast<const unsigned char*>(a);
    const auto* y = static_cast<const unsigned char*>(b);
    std::size_t i = 0;
    for (; i + kLanes <= count; i += kLanes) {
      const std::size_t at = i * sizeof(A);
      store(d + at, Op::apply(load<V>(x + at), load<V>(y + at)));
    }
    if constexpr (kLanes > 1) {
      if (i < count) {
        const std::size_t at = i * sizeof(A);
        const std::size_t bytes = (count - i) * sizeof(A);
        V va{};
        V vb{};
        std::memcpy(&va, x + at, bytes);
        std::memcpy(&vb, y + at, bytes);
        V r = Op::apply(va, vb);
        std::memcpy(d + at, &r, bytes);
      }
    }
  }

  // float16 and bfloat16: widened to float32 by Conv, combined, narrowed once by Conv.
  template <class Op, class Wide>
  static Wide combine(const Wide& x, const Wide& y) {
    Wide r;
    for (std::size_t k = 0; k < std::size(r.v); ++k) r.v[k] = Op::apply(x.v[k], y.v[k]);
    return r;
  }
  template <class Conv, class Op>
  static void narrow(void* dst, const void* a, const void* b, std::size_t count) {
    constexpr std::size_t kLanes = Conv::kLanes;
    constexpr std::size_t kSize = 2;
    auto* d = static_cast<unsigned char*>(dst);
    const auto* x = static_cast<const unsigned char*>(a);
    const auto* y = static_cast<const unsigned char*>(b);
    std::size_t i = 0;
    for (; i + kLanes <= count; i += kLanes) {
      const std::size_t at = i * kSize;
      Conv::store(d + at, combine<Op>(Conv::load(x + at), Conv::load(y + at)));
    }
    if constexpr (kLanes > 1) {
      if (i < count) {
        const std::size_t at = i * kSize;
        const std::size_t bytes = (count - i) * kSize;
        unsigned char ta[kLanes * kSize] = {};
        unsigned char tb[kLanes * kSize] = {};
        unsigned char td[kLanes * kSize];
        std::memcpy(ta, x + at, bytes);
        std::memcpy(tb, y + at, bytes);
        Conv::store(td, combine<Op>(Conv::load(ta), Conv::load(tb)));
        std::memcpy(d + at, td, bytes);
      }
    }
  }

  static constexpr KernelTable table() {
    KernelTable t;
    setInteger<std::int8_t>(t, DataType::kInt8);
    setInteger<std::uint8_t>(t, DataType::kUint8);
    setInteger<std::int32_t>(t, DataType::kInt32);
    setInteger<std::int64_t>(t, DataType::kInt64);
    setFloat<float>(t, DataType::kFloat32);
    setFloat<double>(t, DataType::kFloat64);
    setNarrow<typename Isa::F16>(t, DataType::kFloat16);
    setNarrow<typename Isa::Bf16>(t, DataType::kBfloat16);
    return t;
  }

 private:
  static constexpr auto& row(KernelTable& t, DataType type) {
    return t.kernels[static_cast<std::size_t>(type)];
  }
  static constexpr std::size_t at(KernelOp op) { return static_cast<std::size_t>(op); }

  template <class T>
  static constexpr void setInteger(KernelTable& t, DataType type) {
    using U = std::make_unsigned_t<T>;
    auto& r = row(t, type);
    r[at(KernelOp::kSum)] = &native<U, Sum>;
    r[at(KernelOp::kProd)] = &native<U, Prod>;
    r[at(KernelOp::kMin)] = &native<T, Min>;
    r[at(KernelOp::kMax)] = &native<T, Max>;
    r[at(KernelOp::kBand)] = &native<U, Band>;
    r[at(KernelOp::kBor)] = &native<U, Bor>;
    r[at(KernelOp::kBxor)] = &native<U, Bxor>;
  }
  template <class T>
  static constexpr void setFloat(KernelTable& t, DataType type) {
    auto& r = row(t, type);
    r[at(KernelOp::kSum)] = &native<T, Sum>;
    r[at(KernelOp::kProd)] = &native<T, Prod>;
    r[at(KernelOp::kMin)] = &native<T, Min>;
    r[at(KernelOp::kMax)] = &native<T, Max>;
  }
  template <class Conv>
  static constexpr void setNarrow(KernelTable& t, DataType type) {
    auto& r = row(t, type);
    r[at(KernelOp::kSum)] = &narrow<Conv, Sum>;
    r[at(KernelOp::kProd)] = &narrow<Conv, Prod>;
    r[at(KernelOp::kMin)] = &narrow<Conv, Min>;
    r[at(KernelOp::kMax)] = &narrow<Conv, Max>;
  }
};

}  // namespace collx::algorithms::detail
