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
  mix(static_cast<std::uint64_t>(p.root) + 1);  // root -1 (none) mixes as 0
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

}  // namespace collx::algorithms
