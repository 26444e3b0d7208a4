#include "collx/algorithms/registry.h"

#include <map>
#include <string_view>
#include <utility>

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

bool reduces(Collective coll) noexcept {
  return coll == Collective::kAllreduce || coll == Collective::kReduce ||
         coll == Collective::kReduceScatter;
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
  mix(p.hostOf.size());
  for (int host : p.hostOf) mix(static_cast<std::uint64_t>(host));
  return static_cast<std::size_t>(h);
}

const std::vector<AlgorithmInfo>& algorithmRegistry() {
  static const std::vector<AlgorithmInfo> kAlgorithms = {
      {.coll = Collective::kAllreduce,
       .name = "ring",
       .summary = "reduce-scatter + allgather around the ring, pipelined in chunks; 2(P-1) steps, "
                  "2(P-1)/P n bytes; bandwidth-optimal",
       .build = buildAllreduceRing,
       .cost = costAllreduceRing},
      {.coll = Collective::kAllreduce,
       .name = "ring_chunked",
       .summary = "Gloo's ring with 2P chunks (double buffering); 4(P-1) steps, 2(P-1)/P n bytes",
       .build = buildAllreduceRingChunked,
       .cost = costAllreduceRingChunked},
      {.coll = Collective::kAllreduce,
       .name = "halving_doubling",
       .summary = "Rabenseifner: recursive-halving reduce-scatter + recursive-doubling allgather; "
                  "2 log P steps, 2(P-1)/P n bytes; keeps rank order",
       .build = buildAllreduceHalvingDoubling,
       .cost = costAllreduceHalvingDoubling,
       .keepsOrder = true},
      {.coll = Collective::kAllreduce,
       .name = "recursive_doubling",
       .summary = "partners exchange the whole vector in log P rounds; log P steps, n log P bytes; "
                  "for small messages; keeps rank order",
       .build = buildAllreduceRecursiveDoubling,
       .cost = costAllreduceRecursiveDoubling,
       .keepsOrder = true},
      {.coll = Collective::kAllreduce,
       .name = "knomial",
       .summary =
           "recursive multiplying, radix 4: groups of 4 exchange whole vectors; ceil(log4 P) "
           "steps of 3 messages, 3n bytes per step; small messages; keeps rank order",
       .build = buildAllreduceKnomial,
       .cost = costAllreduceKnomial,
       .keepsOrder = true},
      {.coll = Collective::kAllreduce,
       .name = "hierarchical",
       .summary =
           "hosts (hostOf): intra-host reduce-scatter into L slices, an allreduce of each slice "
           "among the ranks holding it on every host, intra-host allgather; uneven hosts: "
           "reduce to a leader, leaders allreduce, broadcast; the default across hosts",
       .build = buildAllreduceHierarchical,
       .cost = costAllreduceHierarchical,
       .acrossHosts = true},
      {.coll = Collective::kAllgather,
       .name = "ring",
       .summary = "P-1 steps, (P-1) n bytes, pipelined in chunks",
       .build = buildAllgatherRing,
       .cost = costAllgatherRing},
      {.coll = Collective::kAllgather,
       .name = "linear",
       .summary =
           "gather to rank 0, then a binomial broadcast of all P n bytes, pipelined in chunks",
       .build = buildAllgatherLinear,
       .cost = costAllgatherLinear},
      {.coll = Collective::kAllgather,
       .name = "bruck",
       .summary = "ceil(log2 P) steps to r-d of doubling distance d, (P-1) n bytes; any P",
       .build = buildAllgatherBruck,
       .cost = costAllgatherBruck},
      {.coll = Collective::kAllgather,
       .name = "recursive_doubling",
       .summary =
           "log2 P exchanges with r^d of doubling windows, (P-1) n bytes; bruck unless P is a "
           "power of two",
       .build = buildAllgatherRecursiveDoubling,
       .cost = costAllgatherRecursiveDoubling},
      {.coll = Collective::kAllgather,
       .name = "neighbor_exchange",
       .summary =
           "P/2 steps with alternating neighbours, pairs of blocks, (P-1) n bytes; ring for odd P",
       .build = buildAllgatherNeighborExchange,
       .cost = costAllgatherNeighborExchange},
      {.coll = Collective::kAllgather,
       .name = "two_proc",
       .summary = "the two ranks swap blocks: 1 step, n bytes; recursive_doubling unless P = 2",
       .build = buildAllgatherTwoProc,
       .cost = costAllgatherTwoProc},
      {.coll = Collective::kAllgather,
       .name = "sparbit",
       .summary =
           "ceil(log2 P) rounds of halving distance, P-1 one-block messages, (P-1) n bytes; any P",
       .build = buildAllgatherSparbit,
       .cost = costAllgatherSparbit},
      {.coll = Collective::kAllgather,
       .name = "hierarchical",
       .summary =
           "hosts (hostOf): gather to a leader per host, leaders allgatherv the host blocks, "
           "intra-host broadcast of all P n bytes; the default across hosts",
       .build = buildAllgatherHierarchical,
       .cost = costAllgatherHierarchical,
       .acrossHosts = true},
      {.coll = Collective::kBroadcast,
       .name = "one_to_all",
       .summary = "the root sends to everyone: (P-1) n bytes at the root",
       .build = buildBroadcastOneToAll,
       .cost = costBroadcastOneToAll},
      {.coll = Collective::kBroadcast,
       .name = "binomial",
       .summary = "binomial tree, pipelined in chunks: ceil(log2 P) steps",
       .build = buildBroadcastBinomial,
       .cost = costBroadcastBinomial},
      {.coll = Collective::kBroadcast,
       .name = "scatter_allgather",
       .summary =
           "van de Geijn: binomial scatter of P blocks + ring allgather; log P + P-1 steps, about "
           "2n bytes per rank; large buffers (binomial below P elements)",
       .build = buildBroadcastScatterAllgather,
       .cost = costBroadcastScatterAllgather},
      {.coll = Collective::kBroadcast,
       .name = "chain",
       .summary =
           "root -> root+1 -> ... in pieces of chunkBytes; P-2+K steps of one piece, n bytes per "
           "link",
       .build = buildBroadcastChain,
       .cost = costBroadcastChain},
      {.coll = Collective::kBroadcast,
       .name = "hierarchical",
       .summary = "hosts (hostOf): root -> one leader per host, then each leader -> its host; the "
                  "default across hosts",
       .build = buildBroadcastHierarchical,
       .cost = costBroadcastHierarchical,
       .acrossHosts = true},
      {.coll = Collective::kBarrier,
       .name = "all_to_all",
       .summary = "everyone tells everyone: 1 step, P-1 messages",
       .build = buildBarrierAllToAll,
       .cost = costBarrierAllToAll},
      {.coll = Collective::kBarrier,
       .name = "all_to_one",
       .summary = "everyone tells rank 0, which answers: 2 steps",
       .build = buildBarrierAllToOne,
       .cost = costBarrierAllToOne},
      {.coll = Collective::kBarrier,
       .name = "dissemination",
       .summary = "ceil(log2 P) rounds of one message each way",
       .build = buildBarrierDissemination,
       .cost = costBarrierDissemination},
      {.coll = Collective::kAllgatherv,
       .name = "ring",
       .summary = "P-1 steps, per-rank blocks straight into place, pipelined in chunks",
       .build = buildAllgathervRing,
       .cost = costAllgathervRing},
      {.coll = Collective::kAllgatherv,
       .name = "bruck",
       .summary =
           "ceil(log2 P) steps of doubling distance, blocks packed in a scratch buffer, N - n_r "
           "bytes received",
       .build = buildAllgathervBruck,
       .cost = costAllgathervBruck},
      {.coll = Collective::kReduceScatter,
       .name = "ring",
       .summary =
           "P-1 steps; n - n_r bytes out, n - n_(r-1) in and reduced per rank; pipelined in chunks",
       .build = buildReduceScatterRing,
       .cost = costReduceScatterRing},
      {.coll = Collective::kReduceScatter,
       .name = "recursive_halving",
       .summary =
           "log P steps halving the vector between partners, (n - n_r) bytes and reductions; any "
           "counts; keeps rank order",
       .build = buildReduceScatterRecursiveHalving,
       .cost = costReduceScatterRecursiveHalving,
       .keepsOrder = true},
      {.coll = Collective::kReduce,
       .name = "binomial",
       .summary = "binomial tree towards the root, pipelined in chunks; keeps rank order",
       .build = buildReduceBinomial,
       .cost = costReduceBinomial,
       .keepsOrder = true},
      {.coll = Collective::kReduce,
       .name = "reduce_scatter_gather",
       .summary =
           "Rabenseifner: recursive-halving reduce-scatter + binomial gather to the root; 2 log P "
           "steps, about 2n bytes at the root; large vectors; keeps rank order",
       .build = buildReduceReduceScatterGather,
       .cost = costReduceReduceScatterGather,
       .keepsOrder = true},
      {.coll = Collective::kGather,
       .name = "linear",
       .summary = "everyone sends to the root: P-1 messages at the root",
       .build = buildGatherLinear,
       .cost = costGatherLinear},
      {.coll = Collective::kGather,
       .name = "binomial",
       .summary =
           "subtrees climb a binomial tree in one message each: ceil(log2 P) messages at the root",
       .build = buildGatherBinomial,
       .cost = costGatherBinomial},
      {.coll = Collective::kGatherv,
       .name = "linear",
       .summary = "everyone sends to the root: P-1 messages at the root",
       .build = buildGatherLinear,
       .cost = costGatherLinear},
      {.coll = Collective::kGatherv,
       .name = "binomial",
       .summary =
           "subtrees climb a binomial tree in one message each: ceil(log2 P) messages at the "
           "root; needs recvcounts on every rank",
       .build = buildGatherBinomial,
       .cost = costGatherBinomial},
      {.coll = Collective::kScatter,
       .name = "linear",
       .summary = "the root sends to everyone: P-1 messages at the root",
       .build = buildScatterLinear,
       .cost = costScatterLinear},
      {.coll = Collective::kScatter,
       .name = "binomial",
       .summary = "subtrees go down a binomial tree in one message each: ceil(log2 P) messages at "
                  "the root",
       .build = buildScatterBinomial,
       .cost = costScatterBinomial},
      {.coll = Collective::kScatterv,
       .name = "linear",
       .summary = "the root sends to everyone: P-1 messages at the root",
       .build = buildScatterLinear,
       .cost = costScatterLinear},
      {.coll = Collective::kScatterv,
       .name = "binomial",
       .summary =
           "subtrees go down a binomial tree in one message each: ceil(log2 P) messages at the "
           "root; needs sendcounts on every rank",
       .build = buildScatterBinomial,
       .cost = costScatterBinomial},
      {.coll = Collective::kAlltoall,
       .name = "pairwise",
       .summary = "P-1 steps, in step s send to r+s and receive from r-s",
       .build = buildAlltoallPairwise,
       .cost = costAlltoallPairwise},
      {.coll = Collective::kAlltoall,
       .name = "bruck",
       .summary =
           "Bruck: ceil(log2 P) steps, each packing the blocks whose bit k is set; about n/2 log P "
           "bytes; small blocks (alltoall only)",
       .build = buildAlltoallBruck,
       .cost = costAlltoallBruck},
      {.coll = Collective::kAlltoallv,
       .name = "pairwise",
       .summary = "P-1 steps, in step s send to r+s and receive from r-s",
       .build = buildAlltoallPairwise,
       .cost = costAlltoallPairwise},
      {.coll = Collective::kAlltoallv,
       .name = "bruck",
       .summary = "Bruck over per-rank counts: an allgather of every rank's sendcounts first, then "
                  "ceil(log2 P) steps forwarding blocks through intermediate ranks; small blocks",
       .build = buildAlltoallvBruck,
       .cost = costAlltoallvBruck,
       .exchangesCounts = true},
      // Shared memory (algorithms/src/shared/): a schedule of one task the engine resumes;
      // every rank of the job must be in one shared-memory group.
      {.coll = Collective::kAllreduce,
       .name = "shm",
       .summary =
           "through shared-memory buffers: one-shot (each rank reduces every rank's vector) up to "
           "4 KiB, then reduce-scatter + allgather in cache-sized rounds; rank-order reduction",
       .build = buildShared,
       .keepsOrder = true,
       .shared = true},
      {.coll = Collective::kReduceScatter,
       .name = "shm",
       .summary =
           "through shared-memory buffers: each rank reduces its own block from every rank's "
           "piece, in rank order",
       .build = buildShared,
       .keepsOrder = true,
       .shared = true},
      {.coll = Collective::kBroadcast,
       .name = "shm",
       .summary = "through the root's shared-memory buffers, pipelined in cache-sized pieces",
       .build = buildShared,
       .shared = true},
      {.coll = Collective::kAllgather,
       .name = "shm",
       .summary =
           "through shared-memory buffers: each rank publishes its block, copies every other one",
       .build = buildShared,
       .shared = true},
      {.coll = Collective::kBarrier,
       .name = "shm",
       .summary = "one shared-memory flag per rank: one cache line's trip",
       .build = buildShared,
       .shared = true},
  };
  return kAlgorithms;
}

const AlgorithmInfo* findAlgorithm(Collective coll, std::string_view name) {
  // This runs on every call that names its algorithm: an index by collective, built once.
  static const auto* byCollective = [] {
    auto* index =
        new std::map<Collective, std::vector<std::pair<std::string_view, const AlgorithmInfo*>>>();
    for (const AlgorithmInfo& info : algorithmRegistry())
      (*index)[info.coll].emplace_back(info.name, &info);
    return index;
  }();
  auto it = byCollective->find(coll);
  if (it == byCollective->end()) return nullptr;
  for (const auto& [n, info] : it->second) {
    if (n == name) return info;
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

// allreduce: measured with collx-bench on loopback TCP, 2 cores, minimum of 3 runs per
// algorithm (benchmarks/README.md has the figures): latency-bound sizes take the fewest steps
// (recursive doubling), mid sizes the fewest steps that still split the vector
// (halving-doubling), the largest the ring.
//
// Every rank must pick the same row, so a row may depend on bytes only where every rank
// measures the same bytes (selectionBytes): the vector (allreduce, broadcast, reduce), one
// rank's block (gather, scatter, alltoall: equal blocks), the whole buffer (allgather(v),
// reduce_scatter); gatherv, scatterv and alltoallv get one row each.
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
// stays their default; alltoallv bruck pays an allgather of the counts before its rounds,
// so pairwise stays alltoallv's.
const std::vector<SelectionRule>& defaultSelection() {
  static constexpr std::uint64_t kAny = ~std::uint64_t{0};
  static constexpr int kMax = 1 << 30;
  static const std::vector<SelectionRule> kRules = {
      // Rows naming shm apply only when every rank shares memory with the others (the
      // selection skips them otherwise). Measured with collx-bench through collx-run on
      // this 2-core machine, best of 2 runs per algorithm (benchmarks/README.md): shm wins
      // everywhere but at P = 2 for allreduce from 32 KiB up to 1 MiB, where its copies
      // through the buffers cost more than halving-doubling's single exchange of halves
      // (64 KiB: 7.8-9.0 us against 12.7-14.2; 256 KiB 20.6-22.9 against 33.6-39.0). From 1
      // MiB shm is as fast (1 MiB 100-134 us against 116-133) and keeps its speed in the
      // slow periods through its direct reads (one such round: 1 MiB 100 against 533, 4 MiB
      // 507 against 1734). (One sweep had binomial ahead of shm for broadcast at
      // P = 8 from 64 KiB; three interleaved reruns had shm ahead from 1 MiB by 2-3x: 1 MiB
      // 194-250 us against 490-655, 4 MiB 1067-1157 against 3162-3718.)
      {Collective::kAllreduce, 2, 2, 32 * 1024, 1024 * 1024 - 1, "halving_doubling", true},
      {Collective::kAllreduce, 2, kMax, 0, kAny, "shm"},
      {Collective::kReduceScatter, 2, kMax, 0, kAny, "shm"},
      {Collective::kBroadcast, 2, kMax, 0, kAny, "shm"},
      {Collective::kAllgather, 2, kMax, 0, kAny, "shm"},
      {Collective::kBarrier, 2, kMax, 0, kAny, "shm"},
      {Collective::kAllreduce, 1, 2, 0, 256 * 1024, "recursive_doubling"},
      {Collective::kAllreduce, 1, 2, 0, kAny, "ring"},
      {Collective::kAllreduce, 3, 8, 0, 64 * 1024, "recursive_doubling"},
      {Collective::kAllreduce, 3, 8, 0, 4 * 1024 * 1024, "halving_doubling"},
      {Collective::kAllreduce, 9, kMax, 0, 16 * 1024, "recursive_doubling"},
      {Collective::kAllreduce, 9, kMax, 0, 1024 * 1024, "halving_doubling"},
      {Collective::kAllreduce, 1, kMax, 0, kAny, "ring"},
      // allgather: Open MPI's decision tree (coll_tuned_allgather_decision.c, seed 000), by
      // P and the total bytes gathered (P x one rank's block); "total < X" is maxBytes X-1.
      {Collective::kAllgather, 2, 2, 0, kAny, "two_proc"},
      {Collective::kAllgather, 1, 31, 0, kAny, "recursive_doubling"},
      {Collective::kAllgather, 32, 63, 0, 1023, "recursive_doubling"},
      {Collective::kAllgather, 32, 63, 1024, 65535, "neighbor_exchange"},
      {Collective::kAllgather, 32, 63, 65536, kAny, "ring"},
      {Collective::kAllgather, 64, 127, 0, 511, "recursive_doubling"},
      {Collective::kAllgather, 64, 127, 512, 65535, "neighbor_exchange"},
      {Collective::kAllgather, 64, 127, 65536, kAny, "ring"},
      {Collective::kAllgather, 128, 255, 0, 511, "recursive_doubling"},
      {Collective::kAllgather, 128, 255, 512, 131071, "neighbor_exchange"},
      {Collective::kAllgather, 128, 255, 131072, 524287, "ring"},
      {Collective::kAllgather, 128, 255, 524288, 1048575, "neighbor_exchange"},
      {Collective::kAllgather, 128, 255, 1048576, kAny, "ring"},
      {Collective::kAllgather, 256, 511, 0, 31, "recursive_doubling"},
      {Collective::kAllgather, 256, 511, 32, 127, "bruck"},
      {Collective::kAllgather, 256, 511, 128, 1023, "recursive_doubling"},
      {Collective::kAllgather, 256, 511, 1024, 131071, "neighbor_exchange"},
      {Collective::kAllgather, 256, 511, 131072, 524287, "ring"},
      {Collective::kAllgather, 256, 511, 524288, 1048575, "neighbor_exchange"},
      {Collective::kAllgather, 256, 511, 1048576, kAny, "ring"},
      {Collective::kAllgather, 512, 1023, 0, 63, "recursive_doubling"},
      {Collective::kAllgather, 512, 1023, 64, 255, "bruck"},
      {Collective::kAllgather, 512, 1023, 256, 2047, "recursive_doubling"},
      {Collective::kAllgather, 512, 1023, 2048, kAny, "neighbor_exchange"},
      {Collective::kAllgather, 1024, 2047, 0, 3, "recursive_doubling"},
      {Collective::kAllgather, 1024, 2047, 4, 7, "bruck"},
      {Collective::kAllgather, 1024, 2047, 8, 15, "recursive_doubling"},
      {Collective::kAllgather, 1024, 2047, 16, 31, "bruck"},
      {Collective::kAllgather, 1024, 2047, 32, 255, "recursive_doubling"},
      {Collective::kAllgather, 1024, 2047, 256, 511, "bruck"},
      {Collective::kAllgather, 1024, 2047, 512, 4095, "recursive_doubling"},
      {Collective::kAllgather, 1024, 2047, 4096, kAny, "neighbor_exchange"},
      {Collective::kAllgather, 2048, 4095, 0, 31, "bruck"},
      {Collective::kAllgather, 2048, 4095, 32, 127, "recursive_doubling"},
      {Collective::kAllgather, 2048, 4095, 128, 511, "bruck"},
      {Collective::kAllgather, 2048, 4095, 512, 4095, "recursive_doubling"},
      {Collective::kAllgather, 2048, 4095, 4096, kAny, "neighbor_exchange"},
      {Collective::kAllgather, 4096, kMax, 0, 1, "recursive_doubling"},
      {Collective::kAllgather, 4096, kMax, 2, 7, "bruck"},
      {Collective::kAllgather, 4096, kMax, 8, 15, "recursive_doubling"},
      {Collective::kAllgather, 4096, kMax, 16, 511, "bruck"},
      {Collective::kAllgather, 4096, kMax, 512, 4095, "recursive_doubling"},
      {Collective::kAllgather, 4096, kMax, 4096, kAny, "neighbor_exchange"},
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

}  // namespace collx::algorithms
