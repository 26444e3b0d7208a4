// Copying blocks of bytes: what the transports and the algorithms move payloads with.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace collx {

// dst = src, `bytes` bytes; they must not overlap. On x86 from kCopyLoopBytes on, a loop of
// whole vectors (AVX-512 or AVX2, chosen once) instead of memcpy: glibc 2.36 copies blocks
// of kilobytes to megabytes with `rep movsb`, which is much slower on some CPUs (this
// project's AMD EPYC among them: benchmarks/README.md has the figures).
inline constexpr std::size_t kCopyLoopBytes = 4096;
void copyBytes(void* dst, const void* src, std::size_t bytes) noexcept;

// copyBytes with non-temporal stores (AVX-512 or AVX2; else copyBytes): the bytes go to
// memory, not into this core's cache, and the lines of dst are not read first. For outputs
// larger than the caches and not read again soon (below that, the cache would have held
// them, and a plain copy wins). Ends with a store fence: the bytes are visible before any
// later store.
void copyStreaming(void* dst, const void* src, std::size_t bytes) noexcept;

namespace detail {
using CopyFunction = void (*)(void* dst, const void* src, std::size_t bytes);
// Every copy path this CPU can run, by name ("memcpy", "avx2", "avx512", "avx2-stream", ...),
// for the tests.
std::vector<std::pair<const char*, CopyFunction>> copyPaths();
}  // namespace detail

}  // namespace collx
