#include "collx/algorithms/registry.h"

#include "builders.h"

namespace collx::algorithms {

const char* collectiveName(Collective coll) noexcept {
  switch (coll) {
    case Collective::kAllreduce:
      return "allreduce";
    case Collective::kAllgather:
      return "allgather";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kBarrier:
      return "barrier";
    case Collective::kSendRecv:
      return "send/recv";
    case Collective::kAllgatherv:
      return "allgatherv";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kReduce:
      return "reduce";
    case Collective::kGather:
      return "gather";
    case Collective::kGatherv:
      return "gatherv";
    case Collective::kScatter:
      return "scatter";
    case Collective::kScatterv:
      return "scatterv";
    case Collective::kAlltoall:
      return "alltoall";
    case Collective::kAlltoallv:
      return "alltoallv";
  }
  return "collective";
}

const std::vector<Collective>& collectives() {
  static const std::vector<Collective> kAll = {
      Collective::kAllreduce,     Collective::kAllgather, Collective::kAllgatherv,
      Collective::kReduceScatter, Collective::kReduce,    Collective::kBroadcast,
      Collective::kGather,        Collective::kGatherv,   Collective::kScatter,
      Collective::kScatterv,      Collective::kAlltoall,  Collective::kAlltoallv,
      Collective::kBarrier,
  };
  return kAll;
}

std::size_t hashParams(const ScheduleParams& p) noexcept {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::uint64_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  mix(static_cast<std::uint64_t>(p.coll));
  mix(static_cast<std::uint64_t>(p.rank));
  mix(static_cast<std::uint64_t>(p.size));
  mix(p.count);
  mix(p.elementSize);
  mix(static_cast<std::uint64_t>(p.op));
  mix(p.inPlace ? 1 : 0);
  mix(static_cast<std::uint64_t>(p.root + 1));
  mix(p.chunkBytes);
  mix(p.commutative ? 1 : 0);
  for (const auto* v : {&p.counts, &p.displs, &p.recvCounts, &p.recvDispls}) {
    mix(v->size());
    for (std::uint64_t x : *v) mix(x);
  }
  return static_cast<std::size_t>(h);
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
       "2 log P steps, 2(P-1)/P n bytes; keeps rank order",
       buildAllreduceHalvingDoubling, /*keepsOrder=*/true, costAllreduceHalvingDoubling},
      {Collective::kAllreduce, "recursive_doubling",
       "partners exchange the whole vector in log P rounds; log P steps, n log P bytes; "
       "for small messages; keeps rank order",
       buildAllreduceRecursiveDoubling, /*keepsOrder=*/true, costAllreduceRecursiveDoubling},
      {Collective::kAllreduce, "knomial",
       "recursive multiplying, radix 4: groups of 4 exchange whole vectors; ceil(log4 P) "
       "steps of 3 messages, 3n bytes per step; small messages; keeps rank order",
       buildAllreduceKnomial, /*keepsOrder=*/true, costAllreduceKnomial},
      {Collective::kAllgather, "ring", "P-1 steps, (P-1) n bytes, pipelined in chunks",
       buildAllgatherRing},
      {Collective::kBroadcast, "one_to_all",
       "the root sends to everyone: (P-1) n bytes at the root", buildBroadcastOneToAll},
      {Collective::kBroadcast, "binomial", "binomial tree, pipelined in chunks: ceil(log2 P) steps",
       buildBroadcastBinomial, /*keepsOrder=*/false, costBroadcastBinomial},
      {Collective::kBroadcast, "scatter_allgather",
       "van de Geijn: binomial scatter of P blocks + ring allgather; log P + P-1 steps, about "
       "2n bytes per rank; large buffers (binomial below P elements)",
       buildBroadcastScatterAllgather, /*keepsOrder=*/false, costBroadcastScatterAllgather},
      {Collective::kBroadcast, "chain",
       "root -> root+1 -> ... in pieces of chunkBytes; P-2+K steps of one piece, n bytes per "
       "link",
       buildBroadcastChain, /*keepsOrder=*/false, costBroadcastChain},
      {Collective::kBarrier, "all_to_all", "everyone tells everyone: 1 step, P-1 messages",
       buildBarrierAllToAll},
      {Collective::kBarrier, "all_to_one", "everyone tells rank 0, which answers: 2 steps",
       buildBarrierAllToOne},
      {Collective::kBarrier, "dissemination", "ceil(log2 P) rounds of one message each way",
       buildBarrierDissemination},
      {Collective::kAllgatherv, "ring",
       "P-1 steps, per-rank blocks straight into place, pipelined in chunks", buildAllgathervRing},
      {Collective::kReduceScatter, "ring",
       "P-1 steps, (n - n_r) bytes and reductions per rank, pipelined in chunks",
       buildReduceScatterRing},
      {Collective::kReduceScatter, "recursive_halving",
       "log P steps halving the vector between partners, (n - n_r) bytes and reductions; any "
       "counts; keeps rank order",
       buildReduceScatterRecursiveHalving, /*keepsOrder=*/true, costReduceScatterRecursiveHalving},
      {Collective::kReduce, "binomial",
       "binomial tree towards the root, pipelined in chunks; keeps rank order", buildReduceBinomial,
       /*keepsOrder=*/true},
      {Collective::kReduce, "reduce_scatter_gather",
       "Rabenseifner: recursive-halving reduce-scatter + binomial gather to the root; 2 log P "
       "steps, about 2n bytes at the root; large vectors; keeps rank order",
       buildReduceReduceScatterGather, /*keepsOrder=*/true, costReduceReduceScatterGather},
      {Collective::kGather, "linear", "everyone sends to the root: P-1 messages at the root",
       buildGatherLinear},
      {Collective::kGather, "binomial",
       "subtrees climb a binomial tree in one message each: ceil(log2 P) messages at the root",
       buildGatherBinomial, /*keepsOrder=*/false, costGatherBinomial},
      {Collective::kGatherv, "linear", "everyone sends to the root: P-1 messages at the root",
       buildGatherLinear},
      {Collective::kGatherv, "binomial",
       "subtrees climb a binomial tree in one message each: ceil(log2 P) messages at the "
       "root; needs recvcounts on every rank",
       buildGatherBinomial, /*keepsOrder=*/false, costGatherBinomial},
      {Collective::kScatter, "linear", "the root sends to everyone: P-1 messages at the root",
       buildScatterLinear},
      {Collective::kScatter, "binomial",
       "subtrees go down a binomial tree in one message each: ceil(log2 P) messages at the root",
       buildScatterBinomial, /*keepsOrder=*/false, costScatterBinomial},
      {Collective::kScatterv, "linear", "the root sends to everyone: P-1 messages at the root",
       buildScatterLinear},
      {Collective::kScatterv, "binomial",
       "subtrees go down a binomial tree in one message each: ceil(log2 P) messages at the "
       "root; needs sendcounts on every rank",
       buildScatterBinomial, /*keepsOrder=*/false, costScatterBinomial},
      {Collective::kAlltoall, "pairwise", "P-1 steps, in step s send to r+s and receive from r-s",
       buildAlltoallPairwise},
      {Collective::kAlltoall, "bruck",
       "Bruck: ceil(log2 P) steps, each packing the blocks whose bit k is set; about n/2 log P "
       "bytes; small blocks (alltoall only)",
       buildAlltoallBruck, /*keepsOrder=*/false, costAlltoallBruck},
      {Collective::kAlltoallv, "pairwise", "P-1 steps, in step s send to r+s and receive from r-s",
       buildAlltoallPairwise},
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
//
// Every rank must pick the same row, so a row may depend on bytes only where every rank
// passes the same bytes (collectives.cc): the vector (allreduce, broadcast, reduce), one
// rank's block (allgather, gather, scatter, alltoall: equal blocks), reduce_scatter's whole
// input; the v-collectives other than reduce_scatter get one row each.
//
// The rooted and blockwise collectives (P = 2, 4, 8, best of 5 interleaved rounds, sizes 64 B
// to 16 MiB): the root sending every rank its copy beats the binomial tree up to 16 KiB at
// P <= 4 and 4 KiB at P <= 8 (one step instead of log2 P, and 2 cores do the copies either
// way); above that binomial, scatter_allgather and chain come within 10% of one another.
// reduce_scatter recursive_halving (log2 P steps) beats the ring up to 256 KiB at every P,
// the ring is as fast or faster above. alltoall bruck beats pairwise for blocks up to 8 KiB
// at P = 8 and 1 KiB at P = 4 (log2 P steps instead of P - 1); at P = 3 both take 2 steps.
// reduce binomial beats reduce_scatter_gather at nearly every size, gather and scatter
// linear beat binomial: with every rank on 2 cores, the total bytes and messages decide,
// not the critical path. gatherv and scatterv binomial need counts on every rank, so linear
// stays their default.
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
      {Collective::kBroadcast, 3, 4, 0, 16 * 1024, "one_to_all"},
      {Collective::kBroadcast, 5, 8, 0, 4 * 1024, "one_to_all"},
      {Collective::kBroadcast, 3, kMax, 0, kAny, "binomial"},
      {Collective::kBarrier, 1, kMax, 0, kAny, "dissemination"},
      {Collective::kAllgatherv, 1, kMax, 0, kAny, "ring"},
      {Collective::kReduceScatter, 1, kMax, 0, 256 * 1024, "recursive_halving"},
      {Collective::kReduceScatter, 1, kMax, 0, kAny, "ring"},
      {Collective::kReduce, 1, kMax, 0, kAny, "binomial"},
      {Collective::kGather, 1, kMax, 0, kAny, "linear"},
      {Collective::kGatherv, 1, kMax, 0, kAny, "linear"},
      {Collective::kScatter, 1, kMax, 0, kAny, "linear"},
      {Collective::kScatterv, 1, kMax, 0, kAny, "linear"},
      {Collective::kAlltoall, 4, 4, 0, 1024, "bruck"},
      {Collective::kAlltoall, 5, kMax, 0, 8 * 1024, "bruck"},
      {Collective::kAlltoall, 1, kMax, 0, kAny, "pairwise"},
      {Collective::kAlltoallv, 1, kMax, 0, kAny, "pairwise"},
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
