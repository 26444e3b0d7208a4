// allgather two_proc: the two ranks swap their blocks in one step, each received straight
// into place and sent straight from the input.
//
//   after step   rank0    rank1
//   (start)      b0       b1
//   0            b0 b1    b0 b1
//
// Cost (n bytes per rank): alpha + n beta, one message each way.
//
// Restriction: exactly 2 ranks. Open MPI refuses other sizes; here the schedule is then
// recursive_doubling's (allgather/recursive_doubling.cc), which is this very exchange
// repeated log2 P times (and bruck's when P is not a power of two). One rank only places
// its own block.
#include "collx/base/log.h"
#include "common.h"

namespace collx::algorithms {

Schedule buildAllgatherTwoProc(const ScheduleParams& p) {
  if (p.size != 2 && p.size != 1) {
    COLLX_DEBUG(kAlgo,
                "rank {}: allgather two_proc needs 2 ranks, {} ranks: using "
                "recursive_doubling",
                p.rank, p.size);
    return buildAllgatherRecursiveDoubling(p);
  }
  const std::uint64_t block = p.bytes();
  Schedule s("two_proc");
  Deps own;
  if (!allgather::trivial(p)) {
    const int other = 1 - p.rank;
    s.recv(other, 0, output(static_cast<std::uint64_t>(other) * block), block);
    s.send(other, 0, input(), block);
  }
  // The own block last: the exchange is under way while it is copied.
  allgather::placeOwnBlock(p, s, own);
  return s;
}

Cost costAllgatherTwoProc(const ScheduleParams& p) {
  if (p.size != 2 && p.size != 1) return costAllgatherRecursiveDoubling(p);
  Cost c;
  if (allgather::trivial(p)) return c;
  c.sends = c.recvs = 1;
  c.sendBytes = c.recvBytes = p.bytes();
  return c;
}

const AlgorithmInfo kAllgatherTwoProc{
    .coll = Collective::kAllgather,
    .name = "two_proc",
    .summary = "the two ranks swap blocks: 1 step, n bytes; recursive_doubling unless P = 2",
    .build = buildAllgatherTwoProc,
    .cost = costAllgatherTwoProc,
    .doc = {
        .rounds = "1",
        .perRank = "1 message of n",
        .cost = "alpha + n beta",
        .restrictions =
            "P = 2, else recursive_doubling's schedule (bruck's when P is not a power of two)"}};

}  // namespace collx::algorithms
