// broadcast one_to_all: the root sends the whole buffer to every other rank (Gloo's
// broadcast_one_to_all); every other rank receives once.
//
// Cost: the root sends (P-1) n bytes: (P-1) alpha + (P-1) n beta at the root, one alpha +
// n beta elsewhere. Simple and good for small P; the root's link is the bottleneck. Any P.
// Counts (costBroadcastOneToAll): P-1 messages of n bytes out of the root, empty or not; one
// in everywhere else.
#include "../builders.h"

namespace collx::algorithms {

Cost costBroadcastOneToAll(const ScheduleParams& p) {
  const std::uint64_t n = p.bytes();
  if (p.rank != p.root) return Cost{0, 0, 1, n, 0};
  const std::uint64_t others = static_cast<std::uint64_t>(p.size - 1);
  return Cost{others, others * n, 0, 0, 0};
}

Schedule buildBroadcastOneToAll(const ScheduleParams& p) {
  Schedule s("one_to_all");
  const std::uint64_t n = p.bytes();
  if (p.rank == p.root) {
    for (int peer = 0; peer < p.size; ++peer) {
      if (peer != p.root) s.send(peer, 0, output(), n);
    }
  } else {
    s.recv(p.root, 0, output(), n);
  }
  return s;
}

const AlgorithmInfo kBroadcastOneToAll{
    .coll = Collective::kBroadcast,
    .name = "one_to_all",
    .summary = "the root sends to everyone: (P-1) n bytes at the root",
    .build = buildBroadcastOneToAll,
    .cost = costBroadcastOneToAll,
    .doc = {.rounds = "1",
            .perRank = "the root: P-1 messages of n bytes",
            .cost = "(P-1) (alpha + n beta)",
            .restrictions = "any P, any root; the root's link is the bottleneck"}};

}  // namespace collx::algorithms
