// reduce_scatter shm: in pieces of B bytes of the whole vector, each rank copies its piece
// into its group buffer and publishes; each rank then reduces, from all P buffers in rank
// order, the part of the piece that falls in its own block, straight into its output.
//   ceil(N / B) uses (N: the whole vector); per rank: N copied in, P n read (n: its
//   block); (P-1) n elements reduced. Bit-identical to a rank-order reduction.
#include <algorithm>
#include <vector>

#include "../builders.h"
#include "shared.h"

namespace collx::algorithms::shm {

Step<> reduceScatter(Call& c) {
  const std::uint64_t es = c.p.elementSize;
  const auto me = static_cast<std::size_t>(c.me);
  std::uint64_t total = 0;
  for (std::uint64_t n : c.p.counts) total += n;
  const std::uint64_t myLo = c.p.displs[me], myHi = myLo + c.p.counts[me];
  const std::uint64_t perRound = c.bufferBytes() / es;
  std::vector<const std::uint8_t*>& src = c.sources();
  std::uint64_t off = 0;
  do {
    const std::uint64_t len = std::min(perRound, total - off);
    const std::uint64_t use = c.g.nextUse();
    std::uint8_t* mine = co_await c.begin();
    if (len > 0) copyBytes(mine, c.in + off * es, len * es);
    c.publish();
    const std::uint64_t lo = std::max(off, myLo), hi = std::min(off + len, myHi);
    if (lo < hi) {
      for (int m = 0; m < c.size; ++m) {
        src[static_cast<std::size_t>(m)] = co_await c.await(m, use);
      }
      c.reduceAll(c.out + (lo - myLo) * es, src.data(), (lo - off) * es, hi - lo);
    }
    off += len;
  } while (off < total);
}

}  // namespace collx::algorithms::shm

namespace collx::algorithms {

const AlgorithmInfo kReduceScatterShm{
    .coll = Collective::kReduceScatter,
    .name = "shm",
    .summary =
        "through shared-memory buffers: each rank reduces its own block from every rank's "
        "piece, in rank order",
    .build = buildShared,
    .keepsOrder = true,
    .shared = true,
    .doc = {.rounds = "1 per B bytes of the whole vector",
            .perRank = "N in, P n_r read, (P-1) n_r reduced",
            .cost = "ceil(N/B) alpha_shm + N c + P n_r c + (P-1) n_r gamma",
            .restrictions = "every rank in one shared-memory group"}};

}  // namespace collx::algorithms
