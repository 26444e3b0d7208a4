// The AVX-512 path: ReduceLoops over 512-bit GCC vectors, this file alone built with
// -mavx512f -mavx512bw -mavx512dq -mavx512vl (plus the AVX2 set). BW gives the byte lanes
// (int8, uint8), DQ the 64-bit multiply (vpmullq); float16 converts with the zmm forms of
// vcvtph2ps / vcvtps2ph, bfloat16 by moving 16-bit words into and out of the top half of
// 32-bit lanes (vpunpck{l,h}wd, vpackusdw). The AVX512_BF16 conversion
// (vcvtneps2bf16) is not used: it flushes subnormals, which would break bit-equality with the
// other paths.
//
// Checked with objdump -d on reduce_avx512.cc.o (GCC 12, -O3): every one of the 39 kernels runs
// its main loop on zmm registers, one vector per iteration, with these instructions:
//   float32/float64: vaddps/vaddpd, vmulps/vmulpd; min, max: vcmpltps + vcmpneqps into k
//     registers + vblendmps (pd alike).
//   int8/uint8: vpaddb, vpminsb/vpmaxsb, vpminub/vpmaxub, vpandq/vporq/vpxorq; prod
//     vpunpck{l,h}bw + vpmullw + vpermt2w/vpermi2w + vpshufb.
//   int32: vpaddd, vpmulld, vpminsd/vpmaxsd. int64: vpaddq, vpmullq, vpminsq/vpmaxsq.
//   float16: vcvtph2ps zmm, the float32 op, vcvtps2ph $0x8 to ymm.
//   bfloat16: vpunpck{l,h}wd with zero, the float32 op, vpsrld/vpandd/vpaddd (rounding),
//     vcmpneqps + masked vpord (NaN), vpackusdw.
// The tails (count % lanes) run the same vector code on a zero-padded copy on the stack.
#include <immintrin.h>

#include <cstdint>

#include "reduce_kernels.h"
#include "reduce_loops.h"

namespace collx::algorithms::detail {
namespace {

struct Avx512 {
  template <class T>
  using Vec [[gnu::vector_size(64)]] = T;

  // The all-ones maskz forms compile to the plain instructions; they avoid the unmasked
  // intrinsics' `__Y = __Y` self-initialization, which GCC 12 reports as maybe-uninitialized
  // (GCC bug 105593).
  static constexpr __mmask16 kAll = 0xFFFF;

  struct F16 {
    static constexpr std::size_t kLanes = 16;
    struct Wide {
      Vec<float> v[1];
    };
    static Wide load(const unsigned char* p) {
      return {
          {_mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))}};
    }
    static void store(unsigned char* p, const Wide& w) {
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(p),
          _mm512_maskz_cvtps_ph(kAll, w.v[0], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
  };

  // As in reduce_avx2.cc: a zero word interleaved below each bfloat16 word is its float32, and
  // the in-lane vpackusdw undoes the in-lane unpacks' order.
  struct Bf16 {
    static constexpr std::size_t kLanes = 32;
    struct Wide {
      Vec<float> v[2];
    };
    static Wide load(const unsigned char* p) {
      const __m512i h = _mm512_loadu_si512(p);
      const __m512i zero = _mm512_setzero_si512();
      return {{_mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, h)),
               _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, h))}};
    }
    static void store(unsigned char* p, const Wide& w) {
      const auto lo = __builtin_bit_cast(__m512i, ReduceLoops<Avx512>::bfloat16Bits(w.v[0]));
      const auto hi = __builtin_bit_cast(__m512i, ReduceLoops<Avx512>::bfloat16Bits(w.v[1]));
      _mm512_storeu_si512(p, _mm512_packus_epi32(lo, hi));
    }
  };
};

}  // namespace

const KernelTable& avx512KernelTable() noexcept {
  static constexpr KernelTable kTable = ReduceLoops<Avx512>::table();
  return kTable;
}

}  // namespace collx::algorithms::detail
