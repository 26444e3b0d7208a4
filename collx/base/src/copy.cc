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
// target-specific function below, so the vector moves are that target's.
template <std::size_t W, class V>
[[gnu::always_inline]] inline void copyVectors(void* to, const void* from, std::size_t bytes) {
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
      V a, b, c, d;
      std::memcpy(&a, src, W);
      std::memcpy(&b, src + W, W);
      std::memcpy(&c, src + 2 * W, W);
      std::memcpy(&d, src + 3 * W, W);
      V* out = static_cast<V*>(__builtin_assume_aligned(dst, W));
      out[0] = a;
      out[1] = b;
      out[2] = c;
      out[3] = d;
    }
  }
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

using V32 [[gnu::vector_size(32)]] = long long;
using V64 [[gnu::vector_size(64)]] = long long;

[[gnu::target("avx2")]] void copyAvx2(void* dst, const void* src, std::size_t bytes) {
  copyVectors<32, V32>(dst, src, bytes);
}

[[gnu::target("avx512f")]] void copyAvx512(void* dst, const void* src, std::size_t bytes) {
  copyVectors<64, V64>(dst, src, bytes);
}
#endif

detail::CopyFunction bestCopy() {
#ifdef COLLX_COPY_X86
  // (Also checks that the OS saves the ymm/zmm state, not only CPUID.)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return &copyAvx512;
  if (__builtin_cpu_supports("avx2")) return &copyAvx2;
#endif
  return &copyMemcpy;
}

}  // namespace

void copyBytes(void* dst, const void* src, std::size_t bytes) noexcept {
  static const detail::CopyFunction kBest = bestCopy();
  if (bytes < kCopyLoopBytes) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return;
  }
  kBest(dst, src, bytes);
}

namespace detail {

std::vector<std::pair<const char*, CopyFunction>> copyPaths() {
  std::vector<std::pair<const char*, CopyFunction>> paths{{"memcpy", &copyMemcpy}};
#ifdef COLLX_COPY_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) paths.emplace_back("avx2", &copyAvx2);
  if (__builtin_cpu_supports("avx512f")) paths.emplace_back("avx512", &copyAvx512);
#endif
  paths.emplace_back("copyBytes",
                     [](void* d, const void* s, std::size_t n) { copyBytes(d, s, n); });
  return paths;
}

}  // namespace detail

}  // namespace collx
