// allgather sparbit (Loch and Koslovski, "Sparbit: a new logarithmic-cost and data
// locality-aware MPI Allgather algorithm"): Bruck's distances in reverse order. With L the
// smallest power of two >= P, rounds use distances L/2, L/4, ..., 1; in a round of distance
// d rank r sends every block it holds to r+d and receives as many from r-d. The blocks a
// rank holds are spread d apart (r, r-2d, r-4d, ...), so each moves as its own message,
// straight from and into its place in the output. When P is not a power of two, a round may
// leave out the block received last (the blocks of both halves would otherwise overlap
// later): the exclusion mask below.
//
//   P=6, after round   rank0       rank1       rank2       rank3       rank4       rank5
//   (start)            b0          b1          b2          b3          b4          b5
//   d=4                b0 b2       b1 b3       b2 b4       b3 b5       b4 b0       b5 b1
//   d=2 (1 block)      b0 b2 b4    b1 b3 b5    b2 b4 b0    b3 b5 b1    b4 b0 b2    b5 b1 b3
//   d=1 (3 blocks)     all six     all six     all six     all six     all six     all six
//
// Cost (n bytes per rank): ceil(log2 P) alpha (the messages of a round go out together) +
// (P-1) n beta; P-1 messages of one block each way. Message sizes never decrease from
// round to round and the far partners come first with little data. Any P, any count.
#include <bit>

#include "../patterns.h"
#include "common.h"

namespace collx::algorithms {

namespace {

// Calls f(round, distance, blocks) for every round: `blocks` messages of one block, the t-th
// (t < blocks) sending block r - 2td and receiving block r - (2t+1)d.
template <typename F>
void forEachRound(int P, F&& f) {
  const int rounds = patterns::log2Exact(P);
  if (rounds == 0) return;
  // Rounds whose distance has its bit set in `exclusions` leave out the block received last.
  const auto uP = static_cast<std::uint32_t>(P);
  const int lowBit = std::countr_zero(uP);
  const std::uint32_t exclusions = (~(uP >> lowBit) | 1u) << lowBit;
  std::int64_t held = 1;  // blocks held before the round
  std::int64_t d = std::int64_t{1} << (rounds - 1);
  for (int i = 0; i < rounds; ++i, d >>= 1) {
    const int excluded = (static_cast<std::uint32_t>(d) & exclusions) != 0 ? 1 : 0;
    f(i, d, held - excluded);
    held = 2 * held - excluded;
  }
}

}  // namespace

Schedule buildAllgatherSparbit(const ScheduleParams& p) {
  const int P = p.size;
  const int r = p.rank;
  const std::uint64_t block = p.bytes();
  Schedule s("sparbit");
  Deps own;
  allgather::placeOwnBlock(p, s, own);
  if (allgather::trivial(p)) return s;
  // The task that brought each block (the own block is read from the input).
  std::vector<TaskId> got(static_cast<std::size_t>(P));
  auto blockAt = [&](std::int64_t i) { return static_cast<int>(((i % P) + P) % P); };
  forEachRound(P, [&](int, std::int64_t d, std::int64_t blocks) {
    const int to = blockAt(r + d), from = blockAt(r - d);
    for (std::int64_t t = 0; t < blocks; ++t) {
      const int recvBlock = blockAt(r - (2 * t + 1) * d);
      got[recvBlock] = s.recv(from, static_cast<std::uint32_t>(recvBlock),
                              output(static_cast<std::uint64_t>(recvBlock) * block), block);
    }
    // Every send of the round after its receives: they are posted first and take the
    // blocks straight off the wire.
    for (std::int64_t t = 0; t < blocks; ++t) {
      const int sendBlock = blockAt(r - 2 * t * d);
      // A block travels in messages whose step is its index: unique between two ranks,
      // since a rank sends a given block to a given peer once.
      const auto step = static_cast<std::uint32_t>(sendBlock);
      if (sendBlock == r) {
        s.send(to, step, input(), block);
      } else {
        s.send(to, step, output(static_cast<std::uint64_t>(sendBlock) * block), block,
               {got[sendBlock]});
      }
    }
  });
  return s;
}

Cost costAllgatherSparbit(const ScheduleParams& p) {
  Cost c;
  if (allgather::trivial(p)) return c;
  // Every block reaches every other rank once, in a message of its own.
  c.sends = c.recvs = static_cast<std::uint64_t>(p.size - 1);
  c.sendBytes = c.recvBytes = static_cast<std::uint64_t>(p.size - 1) * p.bytes();
  return c;
}

const AlgorithmInfo kAllgatherSparbit{
    .coll = Collective::kAllgather,
    .name = "sparbit",
    .summary =
        "ceil(log2 P) rounds of halving distance, P-1 one-block messages, (P-1) n bytes; any P",
    .build = buildAllgatherSparbit,
    .cost = costAllgatherSparbit,
    .doc = {.rounds = "floor(log2 P) (ceil(log2 P) rounds of distance)",
            .perRank = "P-1 messages of n, (P-1) n bytes",
            .cost = "(P-1) alpha + (P-1) n beta; ceil(log2 P) alpha + (P-1) n beta where a round's "
                    "messages leave together (the file's figure)",
            .restrictions = "any P, any count"}};

}  // namespace collx::algorithms
