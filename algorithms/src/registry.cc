#include "collx/algorithms/registry.h"

#include "builders.h"

namespace collx::algorithms {

const char* collectiveName(Collective coll) noexcept {
  switch (coll) {
    case Collective::kAllreduce: return "allreduce";
    case Collective::kAllgather: return "allgather";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kBarrier: return "barrier";
    case Collective::kSendRecv: return "send/recv";
  }
  return "collective";
}

const std::vector<AlgorithmInfo>& algorithmRegistry() {
  static const std::vector<AlgorithmInfo> kAlgorithms = {
      {Collective::kAllreduce, "ring",
       "reduce-scatter + allgather around the ring, pipelined in chunks; 2(P-1) steps, "
       "2(P-1)/P n bytes; bandwidth-optimal",
       buildAllreduceRing},
      {Collective::kAllreduce, "ring_chunked",
       "Gloo's ring with 2P chunks (double buffering); 4(P-1) steps, 2(P-1)/P n bytes",
       buildAllreduceRingChunked},
      {Collective::kAllreduce, "halving_doubling",
       "Rabenseifner: recursive-halving reduce-scatter + recursive-doubling allgather; "
       "2 log P steps, 2(P-1)/P n bytes",
       buildAllreduceHalvingDoubling},
      {Collective::kAllreduce, "recursive_doubling",
       "partners exchange the whole vector in log P rounds; log P steps, n log P bytes; "
       "for small messages",
       buildAllreduceRecursiveDoubling},
      {Collective::kAllgather, "ring", "P-1 steps, (P-1) n bytes, pipelined in chunks",
       buildAllgatherRing},
      {Collective::kBroadcast, "one_to_all", "the root sends to everyone: (P-1) n bytes at the root",
       buildBroadcastOneToAll},
      {Collective::kBroadcast, "binomial",
       "binomial tree, pipelined in chunks: ceil(log2 P) steps", buildBroadcastBinomial},
      {Collective::kBarrier, "all_to_all", "everyone tells everyone: 1 step, P-1 messages",
       buildBarrierAllToAll},
      {Collective::kBarrier, "all_to_one", "everyone tells rank 0, which answers: 2 steps",
       buildBarrierAllToOne},
      {Collective::kBarrier, "dissemination", "ceil(log2 P) rounds of one message each way",
       buildBarrierDissemination},
  };
  return kAlgorithms;
}

const AlgorithmInfo* findAlgorithm(Collective coll, std::string_view name) {
  for (const AlgorithmInfo& info : algorithmRegistry()) {
    if (info.coll == coll && name == info.name) return &info;
  }
  return nullptr;
}

std::string algorithmNames(Collective coll) {
  std::string out;
  for (const AlgorithmInfo& info : algorithmRegistry()) {
    if (info.coll != coll) continue;
    if (!out.empty()) out += ", ";
    out += info.name;
  }
  return out;
}

// Measured with collx-bench on loopback TCP, 2 cores, minimum of 3 runs per algorithm
// (benchmarks/README.md has the figures): latency-bound sizes take the fewest steps
// (recursive doubling), mid sizes the fewest steps that still split the vector
// (halving-doubling), the largest the ring.
const std::vector<SelectionRule>& defaultSelection() {
  static constexpr std::uint64_t kAny = ~std::uint64_t{0};
  static constexpr int kMax = 1 << 30;
  static const std::vector<SelectionRule> kRules = {
      {Collective::kAllreduce, 1, 2, 0, 256 * 1024, "recursive_doubling"},
      {Collective::kAllreduce, 1, 2, 0, kAny, "ring"},
      {Collective::kAllreduce, 3, 8, 0, 64 * 1024, "recursive_doubling"},
      {Collective::kAllreduce, 3, 8, 0, 4 * 1024 * 1024, "halving_doubling"},
      {Collective::kAllreduce, 9, kMax, 0, 16 * 1024, "recursive_doubling"},
      {Collective::kAllreduce, 9, kMax, 0, 1024 * 1024, "halving_doubling"},
      {Collective::kAllreduce, 1, kMax, 0, kAny, "ring"},
      {Collective::kAllgather, 1, kMax, 0, kAny, "ring"},
      {Collective::kBroadcast, 1, 2, 0, kAny, "one_to_all"},
      {Collective::kBroadcast, 3, kMax, 0, kAny, "binomial"},
      {Collective::kBarrier, 1, kMax, 0, kAny, "dissemination"},
  };
  return kRules;
}

const char* defaultAlgorithm(Collective coll, int ranks, std::uint64_t bytes) {
  for (const SelectionRule& rule : defaultSelection()) {
    if (rule.coll == coll && ranks >= rule.minRanks && ranks <= rule.maxRanks &&
        bytes >= rule.minBytes && bytes <= rule.maxBytes) {
      return rule.algorithm;
    }
  }
  return nullptr;
}

}  // namespace collx::algorithms
