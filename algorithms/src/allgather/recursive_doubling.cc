// allgather recursive_doubling: log2 P steps; at the step of distance d (1, 2, 4, ...) rank r
// exchanges the d blocks it holds, its aligned window [r & ~(d-1), +d), with r ^ d, which
// holds the neighbouring window. Windows double until everyone holds all P blocks; every
// message goes straight from and into the output.
//
//   P=4, after step   rank0          rank1          rank2          rank3
//   (start)           b0             b1             b2             b3
//   d=1               b0 b1          b0 b1          b2 b3          b2 b3
//   d=2               b0 b1 b2 b3    b0 b1 b2 b3    b0 b1 b2 b3    b0 b1 b2 b3
//
// Cost (n bytes per rank): log2 P alpha + (P-1) n beta; one message per step, each rank
// sends and receives (P-1) n bytes. Latency-optimal, and the partners of the last steps are
// far apart (less locality than the ring).
//
// Restriction: P must be a power of two. Otherwise the schedule is bruck's (allgather/
// bruck.cc), Open MPI's fallback too: as many steps, rounded up, and any P.
#include "../patterns.h"
#include "collx/base/log.h"
#include "common.h"

namespace collx::algorithms {

Schedule buildAllgatherRecursiveDoubling(const ScheduleParams& p) {
  const int P = p.size;
  const int r = p.rank;
  if (!allgather::isPowerOfTwo(P)) {
    COLLX_DEBUG(kAlgo,
                "rank {}: allgather recursive_doubling needs a power of two, {} ranks: "
                "using bruck",
                r, P);
    return buildAllgatherBruck(p);
  }
  const std::uint64_t block = p.bytes();
  Schedule s("recursive_doubling");
  Deps held;  // the tasks that brought the blocks of this rank's window
  allgather::placeOwnBlock(p, s, held);
  if (allgather::trivial(p)) return s;
  std::uint32_t j = 0;
  for (int d = 1; d < P; d *= 2, ++j) {
    const int partner = r ^ d;
    const std::uint64_t mine = static_cast<std::uint64_t>(r & ~(d - 1)) * block;
    const std::uint64_t theirs = static_cast<std::uint64_t>(partner & ~(d - 1)) * block;
    const std::uint64_t bytes = static_cast<std::uint64_t>(d) * block;
    const TaskId got = s.recv(partner, j, output(theirs), bytes);
    if (d == 1) {
      s.send(partner, j, input(), block);  // the own block, without waiting for its copy
    } else {
      s.send(partner, j, output(mine), bytes, held);
    }
    held.push_back(got);
  }
  return s;
}

Cost costAllgatherRecursiveDoubling(const ScheduleParams& p) {
  if (!allgather::isPowerOfTwo(p.size)) return costAllgatherBruck(p);
  Cost c;
  if (allgather::trivial(p)) return c;
  c.sends = c.recvs = static_cast<std::uint64_t>(patterns::log2Exact(p.size));
  c.sendBytes = c.recvBytes = static_cast<std::uint64_t>(p.size - 1) * p.bytes();
  return c;
}

const AlgorithmInfo kAllgatherRecursiveDoubling{
    .coll = Collective::kAllgather,
    .name = "recursive_doubling",
    .summary =
        "log2 P exchanges with r^d of doubling windows, (P-1) n bytes; bruck unless P is a "
        "power of two",
    .build = buildAllgatherRecursiveDoubling,
    .cost = costAllgatherRecursiveDoubling,
    .doc = {.rounds = "log2 P",
            .perRank = "log2 P messages, (P-1) n bytes",
            .cost = "log2 P alpha + (P-1) n beta",
            .restrictions = "P a power of two, else bruck's schedule"}};

}  // namespace collx::algorithms
