// The barriers. No data moves: every message is empty.
//
// all_to_all (Gloo's barrier_all_to_all): every rank sends to and receives from every
//   other rank. 1 step, P-1 messages each way per rank: alpha + (P-1) o.
// all_to_one (Gloo's barrier_all_to_one): every rank tells rank 0 it arrived, rank 0
//   answers everyone once all arrived. 2 steps; rank 0 handles 2(P-1) messages.
// dissemination: in round k (k < ceil(log2 P)) rank r sends to r + 2^k and receives from
//   r - 2^k (mod P); after the last round every rank has heard, directly or not, from every
//   other. ceil(log2 P) alpha, one message each way per round.
//
// Counts (costBarrier*): every message is empty; all_to_all: P-1 each way on every rank;
// all_to_one: P-1 each way at rank 0, one each way elsewhere; dissemination: ceil(log2 P)
// each way on every rank. Any P.
#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

Cost costBarrierAllToAll(const ScheduleParams& p) {
  const auto others = static_cast<std::uint64_t>(p.size - 1);
  return Cost{others, 0, others, 0, 0};
}

Cost costBarrierAllToOne(const ScheduleParams& p) {
  const std::uint64_t m = p.rank == 0 ? static_cast<std::uint64_t>(p.size - 1) : 1;
  return p.size == 1 ? Cost{} : Cost{m, 0, m, 0, 0};
}

Cost costBarrierDissemination(const ScheduleParams& p) {
  const auto rounds = static_cast<std::uint64_t>(patterns::log2Exact(p.size));
  return Cost{rounds, 0, rounds, 0, 0};
}

Schedule buildBarrierAllToAll(const ScheduleParams& p) {
  Schedule s("all_to_all");
  for (int peer = 0; peer < p.size; ++peer) {
    if (peer == p.rank) continue;
    s.recv(peer, 0, output(), 0);
    s.send(peer, 0, output(), 0);
  }
  return s;
}

Schedule buildBarrierAllToOne(const ScheduleParams& p) {
  Schedule s("all_to_one");
  if (p.size == 1) return s;
  if (p.rank == 0) {
    Deps arrived;
    for (int peer = 1; peer < p.size; ++peer) arrived.push_back(s.recv(peer, 0, output(), 0));
    for (int peer = 1; peer < p.size; ++peer) s.send(peer, 1, output(), 0, arrived);
  } else {
    TaskId told = s.send(0, 0, output(), 0);
    s.recv(0, 1, output(), 0, {told});
  }
  return s;
}

Schedule buildBarrierDissemination(const ScheduleParams& p) {
  Schedule s("dissemination");
  // Round k tells what every earlier round heard: its send waits for all earlier receives.
  Deps heard;
  for (int k = 0, dist = 1; dist < p.size; ++k, dist <<= 1) {
    const std::uint32_t step = static_cast<std::uint32_t>(k);
    s.send(patterns::mod(p.rank + dist, p.size), step, output(), 0, heard);
    heard.push_back(s.recv(patterns::mod(p.rank - dist, p.size), step, output(), 0));
  }
  return s;
}

const AlgorithmInfo kBarrierAllToAll{
    .coll = Collective::kBarrier,
    .name = "all_to_all",
    .summary = "everyone tells everyone: 1 step, P-1 messages",
    .build = buildBarrierAllToAll,
    .cost = costBarrierAllToAll,
    .doc = {.rounds = "1",
            .perRank = "P-1 empty messages",
            .cost = "(P-1) alpha at best; (2P-3) alpha in the model, as every rank sends to rank 0 "
                    "first, then rank 1, ... (a convoy on each receiver)",
            .restrictions = "any P"}};

const AlgorithmInfo kBarrierAllToOne{.coll = Collective::kBarrier,
                                     .name = "all_to_one",
                                     .summary = "everyone tells rank 0, which answers: 2 steps",
                                     .build = buildBarrierAllToOne,
                                     .cost = costBarrierAllToOne,
                                     .doc = {.rounds = "2",
                                             .perRank = "rank 0: P-1 empty messages each way",
                                             .cost = "2 (P-1) alpha at rank 0",
                                             .restrictions = "any P"}};

const AlgorithmInfo kBarrierDissemination{.coll = Collective::kBarrier,
                                          .name = "dissemination",
                                          .summary = "ceil(log2 P) rounds of one message each way",
                                          .build = buildBarrierDissemination,
                                          .cost = costBarrierDissemination,
                                          .doc = {.rounds = "ceil(log2 P)",
                                                  .perRank = "ceil(log2 P) empty messages",
                                                  .cost = "ceil(log2 P) alpha",
                                                  .restrictions = "any P"}};

}  // namespace collx::algorithms
