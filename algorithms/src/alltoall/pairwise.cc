// alltoall / alltoallv pairwise exchange: in step s (1..P-1) rank r sends its block for
// r+s and receives the block of r-s; its own block is copied locally. One message each way
// per step and peer, so no link carries two messages at once.
//
//   P=4, step 1: 0->1 1->2 2->3 3->0   step 2: 0->2 1->3 2->0 3->1   step 3: 0->3 ...
//
// Cost: (P-1) alpha + (n - n_self) beta per rank. Any P; per-peer counts from
// ScheduleParams (counts/displs: what this rank sends, recvCounts/recvDispls: what it gets).
// Counts (costAlltoallPairwise): P-1 messages each way, empty blocks included; the bytes
// are the blocks for (from) every other rank.
#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

Cost costAlltoallPairwise(const ScheduleParams& p) {
  const std::uint64_t es = p.elementSize;
  std::uint64_t out = 0, in = 0;
  for (int i = 0; i < p.size; ++i) {
    if (i == p.rank) continue;
    out += p.counts[i];
    in += p.recvCounts[i];
  }
  const auto others = static_cast<std::uint64_t>(p.size - 1);
  return Cost{others, out * es, others, in * es, 0};
}

Schedule buildAlltoallPairwise(const ScheduleParams& p) {
  Schedule s("pairwise");
  const int P = p.size, r = p.rank;
  const std::uint64_t es = p.elementSize;
  if (p.counts[r] > 0) {
    s.copy(output(p.recvDispls[r] * es), input(p.displs[r] * es), p.counts[r] * es);
  }
  for (int st = 1; st < P; ++st) {
    const int to = patterns::mod(r + st, P), from = patterns::mod(r - st, P);
    s.recv(from, 0, output(p.recvDispls[from] * es), p.recvCounts[from] * es);
    s.send(to, 0, input(p.displs[to] * es), p.counts[to] * es);
  }
  return s;
}

const AlgorithmInfo kAlltoallPairwise{
    .coll = Collective::kAlltoall,
    .name = "pairwise",
    .summary = "P-1 steps, in step s send to r+s and receive from r-s",
    .build = buildAlltoallPairwise,
    .cost = costAlltoallPairwise,
    .doc = {.rounds = "1",
            .perRank = "P-1 messages (empty blocks included), (P-1) n bytes",
            .cost = "(P-1) (alpha + n beta)",
            .restrictions = "any P"}};

const AlgorithmInfo kAlltoallvPairwise{
    .coll = Collective::kAlltoallv,
    .name = "pairwise",
    .summary = "P-1 steps, in step s send to r+s and receive from r-s",
    .build = buildAlltoallPairwise,
    .cost = costAlltoallPairwise,
    .doc = {.rounds = "1",
            .perRank = "P-1 messages (empty blocks included), the blocks for every other rank",
            .cost = "(P-1) alpha + (sent) beta",
            .restrictions = "any P, any counts"}};

}  // namespace collx::algorithms
