// allreduce shm: through the ranks' group buffers (B bytes each).
//
// Up to kOneShotBytes (one-shot): each rank copies its vector into its buffer and
// publishes; each then reduces all P buffers, in rank order, into its output.
//   1 use; bytes copied per rank: n in, reads P n; reductions: (P-1) n elements.
// Larger (two-shot, in rounds of B bytes): each rank copies the round's piece of its vector
// into a buffer, but for its own slice, which only it reads (from its input), and
// publishes; rank i reduces slice i of the piece (1/P of it) from all P ranks, in rank
// order, into a second buffer and publishes; each rank copies every slice into its output.
// The buffers are cache-sized, so the pieces move between caches and the memory traffic
// per rank is close to reading the input and writing the output once.
//   2 uses per round; per rank: (P-1) n / P copied in, n read for the reduction, n/P
//   written, n copied out; (P-1) n / P elements reduced.
// Every element is reduced by one rank in rank order: bit-identical results everywhere.
#include <algorithm>
#include <vector>

#include "shared.h"

namespace collx::algorithms::shared {

namespace {
// Measured at P = 2 (two-shot against one-shot): 4 KiB 0.86 us against 0.98-1.44, 16 KiB
// 2.3 against 3.1-4.2, 64 KiB 7.4 against 10.9 (one-shot reduces the whole vector on
// every rank).
constexpr std::uint64_t kOneShotBytes = 4 * 1024;
}  // namespace

void allreduce(Call& c) {
  const std::uint64_t es = c.p.elementSize;
  const std::uint64_t n = c.p.count;
  const std::uint64_t bytes = n * es;
  thread_local std::vector<const std::uint8_t*> src;
  src.resize(static_cast<std::size_t>(c.size));
  if (bytes <= std::min<std::uint64_t>(kOneShotBytes, c.bufferBytes())) {
    const std::uint64_t use = c.g.nextUse();
    std::uint8_t* mine = c.begin();
    if (bytes > 0) copyBytes(mine, c.in, bytes);
    c.publish();
    for (int m = 0; m < c.size; ++m) src[static_cast<std::size_t>(m)] = c.await(m, use);
    c.reduceAll(c.out, src.data(), 0, n);
    return;
  }
  const std::uint64_t perRound = c.bufferBytes() / es;
  const auto P = static_cast<std::uint64_t>(c.size);
  const auto me = static_cast<std::uint64_t>(c.me);
  for (std::uint64_t off = 0; off < n; off += perRound) {
    const std::uint64_t len = std::min(perRound, n - off);
    const std::uint64_t lo = len * me / P, hi = len * (me + 1) / P;
    const std::uint64_t pieces = c.g.nextUse();
    std::uint8_t* mine = c.begin();
    const std::uint8_t* piece = c.in + off * es;
    copyBytes(mine, piece, lo * es);
    copyBytes(mine + hi * es, piece + hi * es, (len - hi) * es);
    c.publish();
    for (int m = 0; m < c.size; ++m) {
      src[static_cast<std::size_t>(m)] = m == c.me ? piece : c.await(m, pieces);
    }
    const std::uint64_t slices = c.g.nextUse();
    std::uint8_t* slice = c.begin();
    c.reduceAll(slice, src.data(), lo * es, hi - lo);
    c.publish();
    for (int m = 0; m < c.size; ++m) {
      const auto mm = static_cast<std::uint64_t>(m);
      const std::uint64_t mlo = len * mm / P, mhi = len * (mm + 1) / P;
      const std::uint8_t* theirs = c.await(m, slices);
      if (mhi > mlo) copyBytes(c.out + (off + mlo) * es, theirs, (mhi - mlo) * es);
    }
  }
}

}  // namespace collx::algorithms::shared
