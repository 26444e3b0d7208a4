// allgather neighbor_exchange (Chen et al., HPCAsia 2005): P/2 steps. Ranks pair up as
// (0,1) (2,3) ... at even steps and as (1,2) (3,4) ... (P-1,0) at odd steps. Step 0 swaps
// the own blocks; from then on each rank forwards to its other neighbour the pair of blocks
// it received in the step before (its own pair at step 1) and receives a new pair, so the
// pairs held spread one pair further each way per step. A pair starts at an even block, so
// it is contiguous in the output and every message lands straight in place.
//
//   P=6, after step   rank0        rank1        rank2        rank3        rank4        rank5
//   (start)           b0           b1           b2           b3           b4           b5
//   0: 0-1 2-3 4-5    b0 b1        b0 b1        b2 b3        b2 b3        b4 b5        b4 b5
//   1: 1-2 3-4 5-0    b0b1 b4b5    b0b1 b2b3    b2b3 b0b1    b2b3 b4b5    b4b5 b2b3    b4b5 b0b1
//   2: 0-1 2-3 4-5    all six      all six      all six      all six      all six      all six
//
// Cost (n bytes per rank): (P/2) alpha + (P-1) n beta: one block, then P/2-1 pairs. Half the
// ring's steps, only with the two neighbours (the ring's locality).
//
// Restriction: P must be even. For odd P the schedule is the ring's (allgather/ring.cc), as
// in Open MPI.
#include "../patterns.h"
#include "collx/base/log.h"
#include "common.h"

namespace collx::algorithms {

Schedule buildAllgatherNeighborExchange(const ScheduleParams& p) {
  const int P = p.size;
  const int r = p.rank;
  if (P % 2 != 0) {
    COLLX_DEBUG(kAlgo,
                "rank {}: allgather neighbor_exchange needs an even number of ranks, "
                "{} ranks: using ring",
                r, P);
    return buildAllgatherRing(p);
  }
  const std::uint64_t block = p.bytes();
  Schedule s("neighbor_exchange");
  Deps pair;  // the tasks that brought the pair this rank forwards next
  allgather::placeOwnBlock(p, s, pair);
  if (allgather::trivial(p)) return s;
  const bool even = r % 2 == 0;
  // neighbor[0] at even steps, neighbor[1] at odd ones.
  const int neighbor[2] = {patterns::mod(even ? r + 1 : r - 1, P),
                           patterns::mod(even ? r - 1 : r + 1, P)};
  pair.push_back(s.recv(neighbor[0], 0, output(neighbor[0] * block), block));
  s.send(neighbor[0], 0, input(), block);  // the own block, without waiting for its copy
  // The pair forwarded next starts at `sendFrom`; the pairs received at even and odd steps
  // move away from the own pair by 2 blocks per step each, in opposite directions.
  int sendFrom = r & ~1;
  int recvFrom[2] = {r & ~1, r & ~1};
  const int offset[2] = {even ? 2 : -2, even ? -2 : 2};
  for (int i = 1; i < P / 2; ++i) {
    const int parity = i % 2;
    recvFrom[parity] = patterns::mod(recvFrom[parity] + offset[parity], P);
    const std::uint32_t step = static_cast<std::uint32_t>(i);
    const TaskId got = s.recv(neighbor[parity], step, output(recvFrom[parity] * block), 2 * block);
    s.send(neighbor[parity], step, output(sendFrom * block), 2 * block, pair);
    pair = {got};
    sendFrom = recvFrom[parity];
  }
  return s;
}

Cost costAllgatherNeighborExchange(const ScheduleParams& p) {
  if (p.size % 2 != 0) return costAllgatherRing(p);
  Cost c;
  if (allgather::trivial(p)) return c;
  c.sends = c.recvs = static_cast<std::uint64_t>(p.size / 2);
  c.sendBytes = c.recvBytes = static_cast<std::uint64_t>(p.size - 1) * p.bytes();
  return c;
}

const AlgorithmInfo kAllgatherNeighborExchange{
    .coll = Collective::kAllgather,
    .name = "neighbor_exchange",
    .summary =
        "P/2 steps with alternating neighbours, pairs of blocks, (P-1) n bytes; ring for odd P",
    .build = buildAllgatherNeighborExchange,
    .cost = costAllgatherNeighborExchange,
    .doc = {.rounds = "P/2",
            .perRank = "P/2 messages (one block, then pairs), (P-1) n bytes",
            .cost = "(P/2) alpha + (P-1) n beta",
            .restrictions = "P even, else ring's schedule"}};

}  // namespace collx::algorithms
