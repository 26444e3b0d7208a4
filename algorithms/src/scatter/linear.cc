// scatter / scatterv linear: the root sends every rank its block straight from its buffer
// (and copies its own). Per-rank counts come from ScheduleParams::counts at the root.
//
// Cost: the root sends n - n_root bytes in P-1 messages: (P-1) alpha + n beta at the root.
// Counts (costScatterLinear): one message (empty or not) per rank but the root's. Any P.
#include "../builders.h"

namespace collx::algorithms {

Cost costScatterLinear(const ScheduleParams& p) {
  const std::uint64_t es = p.elementSize;
  if (p.rank != p.root) return Cost{0, 0, 1, p.count * es, 0};
  std::uint64_t others = 0;
  for (int i = 0; i < p.size; ++i) others += i == p.root ? 0 : p.counts[i];
  return Cost{static_cast<std::uint64_t>(p.size - 1), others * es, 0, 0, 0};
}

Schedule buildScatterLinear(const ScheduleParams& p) {
  Schedule s("linear");
  const std::uint64_t es = p.elementSize;
  if (p.rank != p.root) {
    s.recv(p.root, 0, output(), p.count * es);
    return s;
  }
  // The messages first, from the next rank on, and the root's own block last: copied
  // first, it held back every send (at P = 2 over shared memory that cost 1.06-1.55x against
  // the binomial tree, which sends first).
  for (int k = 1; k < p.size; ++k) {
    const int i = (p.rank + k) % p.size;
    s.send(i, 0, input(p.displs[i] * es), p.counts[i] * es);
  }
  const std::uint64_t own = p.counts[p.rank] * es;
  if (!p.inPlace && own > 0) s.copy(output(), input(p.displs[p.rank] * es), own);
  return s;
}

const AlgorithmInfo kScatterLinear{
    .coll = Collective::kScatter,
    .name = "linear",
    .summary = "the root sends to everyone: P-1 messages at the root",
    .build = buildScatterLinear,
    .cost = costScatterLinear,
    .doc = {.rounds = "1",
            .perRank = "the root: P-1 messages, (P-1) n bytes",
            .cost = "(P-1) (alpha + n beta) at the root",
            .restrictions = "any P, any root"}};

const AlgorithmInfo kScattervLinear{
    .coll = Collective::kScatterv,
    .name = "linear",
    .summary = "the root sends to everyone: P-1 messages at the root",
    .build = buildScatterLinear,
    .cost = costScatterLinear,
    .doc = {.rounds = "1",
            .perRank = "the root: P-1 messages, N - n_root bytes",
            .cost = "(P-1) alpha + (N - n_root) beta at the root",
            .restrictions = "any P, any root, any counts"}};

}  // namespace collx::algorithms
