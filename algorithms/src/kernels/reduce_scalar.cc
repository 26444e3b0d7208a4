// The portable path: ReduceLoops over plain scalars, built with the default flags (on x86-64
// the compiler may still use SSE2 for some loops). It runs on CPUs without AVX2 and F16C, and
// is the path the others are checked against.
//
// objdump -d on reduce_scalar.cc.o (GCC 12, -O3): GCC auto-vectorizes most loops with SSE2
// on xmm after a runtime overlap check that dst == a passes (paddb, pmullw, pminub, paddd,
// pmuludq, addps/mulps, addpd, cmpltps + blends, and even bfloat16 sum and prod); int64
// prod/min/max and every float16 loop stay scalar (float16: a branchy conversion per element,
// where the AVX2 path converts eight at a time with F16C).
#include <cstdint>
#include <cstring>

#include "half_float.h"
#include "reduce_kernels.h"
#include "reduce_loops.h"

namespace collx::algorithms::detail {
namespace {

struct Scalar {
  template <class T>
  using Vec = T;

  struct F16 {
    static constexpr std::size_t kLanes = 1;
    struct Wide {
      float v[1];
    };
    static Wide load(const unsigned char* p) {
      std::uint16_t h;
      std::memcpy(&h, p, sizeof(h));
      return {{halfToFloat(h)}};
    }
    static void store(unsigned char* p, const Wide& w) {
      const std::uint16_t h = floatToHalf(w.v[0]);
      std::memcpy(p, &h, sizeof(h));
    }
  };

  struct Bf16 {
    static constexpr std::size_t kLanes = 1;
    struct Wide {
      float v[1];
    };
    static Wide load(const unsigned char* p) {
      std::uint16_t h;
      std::memcpy(&h, p, sizeof(h));
      return {{bfloat16ToFloat(h)}};
    }
    static void store(unsigned char* p, const Wide& w) {
      const std::uint16_t h = floatToBfloat16(w.v[0]);
      std::memcpy(p, &h, sizeof(h));
    }
  };
};

}  // namespace

const KernelTable& scalarKernelTable() noexcept {
  static constexpr KernelTable kTable = ReduceLoops<Scalar>::table();
  return kTable;
}

}  // namespace collx::algorithms::detail
