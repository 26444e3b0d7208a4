// The AVX2 path: ReduceLoops over 256-bit GCC vectors, this file alone built with
// -mavx2 -mfma -mf16c (algorithms/CMakeLists.txt). float16 converts with F16C
// (vcvtph2ps / vcvtps2ph), bfloat16 by moving 16-bit words into and out of the top half of
// 32-bit lanes.
//
// Checked with objdump -d on reduce_avx2.cc.o (GCC 12, -O3): every one of the 39 kernels runs
// its main loop on ymm registers, one vector per iteration, with these instructions:
//   float32/float64 sum, prod: vaddps/vaddpd, vmulps/vmulpd; min, max: vcmpltps + vcmpneqps
//     (the NaN test) + vpor + vblendvps (pd alike).
//   int8/uint8: vpaddb, vpminsb/vpmaxsb, vpminub/vpmaxub, vpand/vpor/vpxor; prod has no byte
//     multiply: vpunpck{l,h}bw + vpmullw + vpshufb + vpblendd.
//   int32: vpaddd, vpmulld, vpminsd/vpmaxsd. int64: vpaddq; prod vpmuludq x3 + shifts (no
//     64-bit multiply before AVX-512DQ); min/max vpcmpgtq + vpblendvb.
//   float16: vcvtph2ps, the float32 op, vcvtps2ph $0x8 (nearest even, no exceptions).
//   bfloat16: vpunpck{l,h}wd with zero, the float32 op, vpsrld/vpand/vpaddd (rounding),
//     vcmpneqps + vpblendvb (NaN), vpackusdw.
// The tails (count % lanes) run the same vector code on a zero-padded copy on the stack.
#include <immintrin.h>

#include <cstdint>

#include "reduce_kernels.h"
#include "reduce_loops.h"

namespace collx::algorithms::detail {
namespace {

struct Avx2 {
  template <class T>
  using Vec [[gnu::vector_size(32)]] = T;

  struct F16 {
    static constexpr std::size_t kLanes = 8;
    struct Wide {
      Vec<float> v[1];
    };
    static Wide load(const unsigned char* p) {
      return {{_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))}};
    }
    static void store(unsigned char* p, const Wide& w) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                       _mm256_cvtps_ph(w.v[0], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
  };

  // Interleaving a zero word below each bfloat16 word makes 32-bit lanes that are exactly its
  // float32 (one vpunpck{l,h}wd per 8 elements). The unpacks work within 128-bit lanes and so
  // does vpackusdw on the way back, which restores the original order: no cross-lane shuffle.
  struct Bf16 {
    static constexpr std::size_t kLanes = 16;
    struct Wide {
      Vec<float> v[2];
    };
    static Wide load(const unsigned char* p) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      const __m256i zero = _mm256_setzero_si256();
      return {{_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, h)),
               _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, h))}};
    }
    static void store(unsigned char* p, const Wide& w) {
      const auto lo = __builtin_bit_cast(__m256i, ReduceLoops<Avx2>::bfloat16Bits(w.v[0]));
      const auto hi = __builtin_bit_cast(__m256i, ReduceLoops<Avx2>::bfloat16Bits(w.v[1]));
      // Every lane is <= 0xFFFF, so the unsigned saturation of vpackusdw never triggers.
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_packus_epi32(lo, hi));
    }
  };
};

}  // namespace

const KernelTable& avx2KernelTable() noexcept {
  static constexpr KernelTable kTable = ReduceLoops<Avx2>::table();
  return kTable;
}

}  // namespace collx::algorithms::detail
