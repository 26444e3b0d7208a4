#include "collx/base/copy.h"

#include <cstdint>
#include <cstring>

namespace collx {

namespace {

void copyMemcpy(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define COLLX_COPY_X86 1

// Four vectors of W bytes per step, stored aligned (the first vector, stored unaligned,
// covers the bytes before dst's alignment); the tail goes to memcpy. Inlined into each
// target-specific function below, so the vector moves are that target's. Stream: the
// aligned stores are non-temporal (vmovntdq, as inline assembly: GCC's intrinsics refuse to
// inline into a template without the target), and a store fence ends them.
template <std::size_t W, class V, bool Stream>
[[gnu::always_inline]] inline void copyVectors(void* to, const void* from, std::size_t bytes) {
  // V read from any address, as any type (vmovdqu). Declared here: GCC drops the attributes
  // of a type given as a template argument.
  typedef long long U __attribute__((vector_size(W), aligned(1), may_alias));
  auto* dst = static_cast<unsigned char*>(to);
  const auto* src = static_cast<const unsigned char*>(from);
  if (bytes >= 8 * W) {
    V v;
    std::memcpy(&v, src, W);
    std::memcpy(dst, &v, W);
    const std::size_t head = W - reinterpret_cast<std::uintptr_t>(dst) % W;
    dst += head;
    src += head;
    bytes -= head;
    for (; bytes >= 4 * W; bytes -= 4 * W, src += 4 * W, dst += 4 * W) {
      // Loaded as U, not by one memcpy of 4W bytes into `in`: GCC 12 expanded that into
      // 16-byte moves through the stack, reloaded as W-byte vectors (a store-forwarding
      // stall each), which made an allreduce of 64 KiB at P = 2 over shared memory 4x
      // slower on AMD EPYC (Zen 3) than GCC 14's build of the same source.
      V in[4];
      for (int i = 0; i < 4; ++i) in[i] = reinterpret_cast<const U*>(src)[i];
      V* out = static_cast<V*>(__builtin_assume_aligned(dst, W));
      for (int i = 0; i < 4; ++i) {
        if constexpr (Stream) {
#if defined(__clang__)
          // Clang checks the assembly's operand against the template's own (baseline) target;
          // its builtin becomes the same vmovntdq in the avx2/avx512f functions.
          __builtin_nontemporal_store(in[i], &out[i]);
#else
          asm volatile("vmovntdq %1, %0" : "=m"(out[i]) : "v"(in[i]));
#endif
        } else {
          out[i] = in[i];
        }
      }
    }
    if constexpr (Stream) asm volatile("sfence" ::: "memory");
  }
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

using V32 [[gnu::vector_size(32)]] = long long;
using V64 [[gnu::vector_size(64)]] = long long;

[[gnu::target("avx2")]] void copyAvx2(void* dst, const void* src, std::size_t bytes) {
  copyVectors<32, V32, false>(dst, src, bytes);
}

[[gnu::target("avx512f")]] void copyAvx512(void* dst, const void* src, std::size_t bytes) {
  copyVectors<64, V64, false>(dst, src, bytes);
}

[[gnu::target("avx2")]] void streamAvx2(void* dst, const void* src, std::size_t bytes) {
  copyVectors<32, V32, true>(dst, src, bytes);
}

[[gnu::target("avx512f")]] void streamAvx512(void* dst, const void* src, std::size_t bytes) {
  copyVectors<64, V64, true>(dst, src, bytes);
}
#endif

// The fastest copy this CPU runs, with plain or non-temporal stores (none of the latter
// without AVX2).
detail::CopyFunction bestCopy(bool stream) {
#ifdef COLLX_COPY_X86
  // (Also checks that the OS saves the ymm/zmm state, not only CPUID.)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return stream ? &streamAvx512 : &copyAvx512;
  if (__builtin_cpu_supports("avx2")) return stream ? &streamAvx2 : &copyAvx2;
#endif
  return stream ? nullptr : &copyMemcpy;
}

}  // namespace

void copyBytes(void* dst, const void* src, std::size_t bytes) noexcept {
  static const detail::CopyFunction kBest = bestCopy(false);
  if (bytes < kCopyLoopBytes) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return;
  }
  kBest(dst, src, bytes);
}

void copyStreaming(void* dst, const void* src, std::size_t bytes) noexcept {
  static const detail::CopyFunction kBest = bestCopy(true);
  if (kBest == nullptr || bytes < kCopyLoopBytes) {
    copyBytes(dst, src, bytes);
    return;
  }
  kBest(dst, src, bytes);
}

namespace detail {

std::vector<std::pair<const char*, CopyFunction>> copyPaths() {
  std::vector<std::pair<const char*, CopyFunction>> paths{{"memcpy", &copyMemcpy}};
#ifdef COLLX_COPY_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) {
    paths.emplace_back("avx2", &copyAvx2);
    paths.emplace_back("avx2-stream", &streamAvx2);
  }
  if (__builtin_cpu_supports("avx512f")) {
    paths.emplace_back("avx512", &copyAvx512);
    paths.emplace_back("avx512-stream", &streamAvx512);
  }
#endif
  paths.emplace_back("copyBytes",
                     [](void* d, const void* s, std::size_t n) { copyBytes(d, s, n); });
  paths.emplace_back("copyStreaming",
                     [](void* d, const void* s, std::size_t n) { copyStreaming(d, s, n); });
  return paths;
}

}  // namespace detail

}  // namespace collx
