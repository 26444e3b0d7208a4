// scatter / scatterv linear: the root sends every rank its block straight from its buffer
// (and copies its own). Per-rank counts come from ScheduleParams::counts at the root.
//
// Cost: the root sends n - n_root bytes in P-1 messages: (P-1) alpha + n beta at the root.
// Any P.
#include "../builders.h"

namespace collx::algorithms {

Schedule buildScatterLinear(const ScheduleParams& p) {
  Schedule s("linear");
  const std::uint64_t es = p.elementSize;
  if (p.rank != p.root) {
    s.recv(p.root, 0, output(), p.count * es);
    return s;
  }
  for (int i = 0; i < p.size; ++i) {
    const std::uint64_t bytes = p.counts[i] * es;
    if (i == p.rank) {
      if (!p.inPlace && bytes > 0) s.copy(output(), input(p.displs[i] * es), bytes);
      continue;
    }
    s.send(i, 0, input(p.displs[i] * es), bytes);
  }
  return s;
}

}  // namespace collx::algorithms
