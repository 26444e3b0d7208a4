#include "collx/algorithms/registry.h"

#include <cstdio>
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
  // (Each entry is defined in its algorithm's file: builders.h.)
  static const std::vector<AlgorithmInfo> kAlgorithms = {
      kAllreduceRing,
      kAllreduceRingChunked,
      kAllreduceHalvingDoubling,
      kAllreduceRecursiveDoubling,
      kAllreduceKnomial,
      kAllreduceHierarchical,
      kAllgatherRing,
      kAllgatherLinear,
      kAllgatherBruck,
      kAllgatherRecursiveDoubling,
      kAllgatherNeighborExchange,
      kAllgatherTwoProc,
      kAllgatherSparbit,
      kAllgatherHierarchical,
      kBroadcastOneToAll,
      kBroadcastBinomial,
      kBroadcastScatterAllgather,
      kBroadcastChain,
      kBroadcastHierarchical,
      kBarrierAllToAll,
      kBarrierAllToOne,
      kBarrierDissemination,
      kAllgathervRing,
      kAllgathervBruck,
      kReduceScatterRing,
      kReduceScatterRecursiveHalving,
      kReduceBinomial,
      kReduceReduceScatterGather,
      kGatherLinear,
      kGatherBinomial,
      kGathervLinear,
      kGathervBinomial,
      kScatterLinear,
      kScatterBinomial,
      kScattervLinear,
      kScattervBinomial,
      kAlltoallPairwise,
      kAlltoallBruck,
      kAlltoallvPairwise,
      kAlltoallvBruck,
      kAllreduceShm,
      kReduceScatterShm,
      kBroadcastShm,
      kAllgatherShm,
      kBarrierShm,
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

std::string algorithmList() {
  std::string out;
  char line[64];
  for (const AlgorithmInfo& info : algorithmRegistry()) {
    std::snprintf(line, sizeof line, "%-10s %-20s ", collectiveName(info.coll), info.name);
    out += line;
    out += info.summary;
    out += '\n';
  }
  return out;
}

namespace {

// The rank-order column: whether a reducing algorithm applies the op in rank order.
std::string rankOrder(const AlgorithmInfo& info) {
  if (!reduces(info.coll)) {
    return info.coll == Collective::kBarrier ? "(no data)" : "(no reduction)";
  }
  return info.keepsOrder ? std::string("yes") + info.doc.orderNote : "no";
}

std::string table(bool shared) {
  std::string out = std::string(kDocBegin) +
                    " by collx-bench -a list --markdown (each algorithm's entry is in its "
                    "file): do not edit -->\n";
  out += shared ? "| collective | algorithm | uses of the buffers | copied per rank | cost | "
                  "restrictions | keeps rank order |\n"
                : "| collective | algorithm | rounds | sent per rank | cost | restrictions | keeps "
                  "rank order |\n";
  out += "|---|---|---|---|---|---|---|\n";
  for (const AlgorithmInfo& info : algorithmRegistry()) {
    if (info.shared != shared) continue;
    for (const char* cell : {collectiveName(info.coll), info.name, info.doc.rounds,
                             info.doc.perRank, info.doc.cost, info.doc.restrictions}) {
      out += "| ";
      out += cell;
      out += " ";
    }
    out += "| " + rankOrder(info) + " |\n";
  }
  return out + kDocEnd + "\n";
}

}  // namespace

std::string algorithmTablesMarkdown() { return table(false) + "\n" + table(true); }

// allreduce: latency-bound sizes take the fewest steps (recursive doubling), mid sizes the
// fewest steps that still split the vector (halving-doubling), the largest the ring; the
// bounds come from collx-bench sweeps on loopback TCP (benchmarks/README.md, "Algorithms per
// collective").
//
// Every rank must pick the same row, so a row may depend on bytes only where every rank
// measures the same bytes (selectionBytes): the vector (allreduce, broadcast, reduce), one
// rank's block (gather, scatter, alltoall: equal blocks), the whole buffer (allgather(v),
// reduce_scatter); gatherv, scatterv and alltoallv get one row each.
//
// The rooted and blockwise collectives (P = 2, 4, 8): the root sending every rank its copy
// beats the binomial tree up to 16 KiB at P <= 4 and 4 KiB at P <= 8 (one step instead of
// log2 P, and 2 cores do the copies either way); above that binomial, scatter_allgather and
// chain come within 10% of one another.
// reduce_scatter recursive_halving (log2 P steps) beats the ring up to 256 KiB at every P,
// the ring is as fast or faster above. alltoall bruck beats pairwise for blocks up to 8 KiB
// at P = 8 and 1 KiB at P = 4 (log2 P steps instead of P - 1); at P = 3 both take 2 steps.
// reduce binomial beats reduce_scatter_gather at nearly every size, gather and scatter
// linear beat binomial: with every rank on 2 cores, the total bytes and messages decide,
// not the critical path. gatherv and scatterv binomial need counts on every rank, so linear
// stays their default; alltoallv bruck pays an allgather of the counts before its rounds,
// so pairwise stays alltoallv's. allgatherv bruck (log2 P steps) beats the ring (P - 1) up to
// 64 KiB gathered in all at P = 4, 1.11-1.48x over shared memory and TCP alike (AMD EPYC VM,
// collx-tune, 5 rounds, 2026-11-28; the session before measured the same), as allgather's
// tree picks log-step algorithms for small totals; from 256 KiB the ring is as fast or faster.
const std::vector<SelectionRule>& defaultSelection() {
  static constexpr std::uint64_t kAny = ~std::uint64_t{0};
  static constexpr int kMax = 1 << 30;
  static const std::vector<SelectionRule> kRules = {
      // Rows naming shm apply only when every rank shares memory with the others (the
      // selection skips them otherwise). shm wins everywhere but at P = 2 for allreduce
      // from 512 KiB to 1 MiB, where ring_chunked's pieces of at most the eager limit
      // (256 KiB) go as two copies through the pair's ring, pipelined: on the AMD EPYC VM
      // (Zen 4, 2026-11-28) it took 1.62x less time than shm at 1 MiB in place; on the
      // AMD EPYC VM (Zen 3, 2026-11-29) 1.12x-1.15x less in place and up to 1.22x more
      // out of place, the choice that loses least on both. (Until 2026-11-29 P = 2 also
      // took halving_doubling from 32 KiB to 512 KiB and ring_chunked up to 3 MiB, which
      // beat shm's copies through the group buffers while those ran at an eighth of
      // memcpy's speed in GCC 12's build, collx/base/src/copy.cc. Fixed, shm led from
      // 32 KiB to 256 KiB (out of place 1.14x-1.30x, in place level) and from 2 MiB
      // (1.6x-2.9x), collx-tune and three interleaved runs on the Zen 3 VM.) (One sweep
      // had binomial ahead of shm for broadcast at P = 8 from 64 KiB; three interleaved
      // reruns had shm 2-3x ahead from 1 MiB, so shm stays.) benchmarks/README.md, "Shared
      // memory: shm against the point-to-point algorithms", has the runs.
      {Collective::kAllreduce, 2, 2, 512 * 1024, 1024 * 1024, "ring_chunked", true},
      {Collective::kAllreduce, 2, kMax, 0, kAny, "shm"},
      {Collective::kReduceScatter, 2, kMax, 0, kAny, "shm"},
      // broadcast at P = 2 stays with shm from 64 KiB to 256 KiB, though scatter_allgather's
      // halves through the pair took 1.3x-1.5x less time there in two collx-tune runs (AMD
      // EPYC VM, Zen 3, 2026-11-29): in the periods when cores hand each other data slowly,
      // those copies through the pair's ring took 1.6x-2.6x more than shm's direct reads
      // (one of three interleaved runs the same hour), the larger loss.
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
      // allgather: Open MPI's decision tree (ompi/mca/coll/tuned/coll_tuned_decision_fixed.c), by
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
      {Collective::kAllgatherv, 3, kMax, 0, 64 * 1024, "bruck"},
      {Collective::kAllgatherv, 1, kMax, 0, kAny, "ring"},
      {Collective::kReduceScatter, 1, kMax, 0, 256 * 1024, "recursive_halving"},
      {Collective::kReduceScatter, 1, kMax, 0, kAny, "ring"},
      // reduce over shared memory from the eager limit (256 KiB), where binomial's whole
      // vectors wait for their receivers: reduce_scatter_gather took 1.35x-2.8x less time
      // at 512 KiB to 16 MiB at P = 2 and 4 (collx-tune and two interleaved runs, AMD EPYC
      // VM, 2026-11-29), and at P = 2 from 256 KiB 1.04x-1.36x less (two collx-tune runs
      // and three interleaved runs, the same day; at P = 4 the two were level at 256 KiB);
      // over TCP binomial stays ahead.
      {Collective::kReduce, 2, 2, 256 * 1024, kAny, "reduce_scatter_gather", true},
      {Collective::kReduce, 3, 4, 256 * 1024 + 1, kAny, "reduce_scatter_gather", true},
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
