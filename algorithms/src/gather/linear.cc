// gather / gatherv linear: every rank sends its block straight to the root, which receives
// them all at their displacements (and then copies its own). Per-rank counts come from
// ScheduleParams::counts at the root; the other ranks only know their own count.
//
// Cost: the root receives n - n_root bytes in P-1 messages: (P-1) alpha + n beta at the
// root, alpha + n_i beta elsewhere. Simple and best for small P or small blocks. Any P.
// Counts (costGatherLinear): one message (empty or not) per rank but the root's.
#include "../builders.h"

namespace collx::algorithms {

Cost costGatherLinear(const ScheduleParams& p) {
  const std::uint64_t es = p.elementSize;
  if (p.rank != p.root) return Cost{1, p.count * es, 0, 0, 0};
  std::uint64_t others = 0;
  for (int i = 0; i < p.size; ++i) others += i == p.root ? 0 : p.counts[i];
  return Cost{0, 0, static_cast<std::uint64_t>(p.size - 1), others * es, 0};
}

Schedule buildGatherLinear(const ScheduleParams& p) {
  Schedule s("linear");
  const std::uint64_t es = p.elementSize;
  if (p.rank != p.root) {
    s.send(p.root, 0, input(), p.count * es);
    return s;
  }
  // Every receive is posted before the root copies its own block, so that no sender waits
  // for that copy (copied first, a 1 MiB block at P = 2 over TCP took 1.2x binomial's time).
  for (int i = 0; i < p.size; ++i) {
    if (i != p.rank) s.recv(i, 0, output(p.displs[i] * es), p.counts[i] * es);
  }
  const std::uint64_t own = p.counts[p.rank] * es;
  if (!p.inPlace && own > 0) s.copy(output(p.displs[p.rank] * es), input(), own);
  return s;
}

const AlgorithmInfo kGatherLinear{
    .coll = Collective::kGather,
    .name = "linear",
    .summary = "everyone sends to the root: P-1 messages at the root",
    .build = buildGatherLinear,
    .cost = costGatherLinear,
    .doc = {
        .rounds = "1",
        .perRank = "one message of n to the root; the root receives P-1 messages, (P-1) n bytes",
        .cost = "(P-1) (alpha + n beta) at the root",
        .restrictions = "any P, any root"}};

const AlgorithmInfo kGathervLinear{
    .coll = Collective::kGatherv,
    .name = "linear",
    .summary = "everyone sends to the root: P-1 messages at the root",
    .build = buildGatherLinear,
    .cost = costGatherLinear,
    .doc = {.rounds = "1",
            .perRank =
                "one message of n_r to the root; the root receives P-1 messages, N - n_root bytes",
            .cost = "(P-1) alpha + (N - n_root) beta at the root",
            .restrictions = "any P, any root, any counts"}};

}  // namespace collx::algorithms
