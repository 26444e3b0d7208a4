// The builders of every algorithm (one file each under <collective>/), for the registry.
#pragma once

#include "collx/algorithms/registry.h"
#include "collx/algorithms/schedule.h"

namespace collx::algorithms {

Schedule buildAllreduceRing(const ScheduleParams& p);
Schedule buildAllreduceRingChunked(const ScheduleParams& p);
Schedule buildAllreduceHalvingDoubling(const ScheduleParams& p);
Schedule buildAllreduceRecursiveDoubling(const ScheduleParams& p);
Schedule buildAllgatherRing(const ScheduleParams& p);
Schedule buildAllgatherLinear(const ScheduleParams& p);
Schedule buildAllgatherBruck(const ScheduleParams& p);
Schedule buildAllgatherRecursiveDoubling(const ScheduleParams& p);
Schedule buildAllgatherNeighborExchange(const ScheduleParams& p);
Schedule buildAllgatherTwoProc(const ScheduleParams& p);
Schedule buildAllgatherSparbit(const ScheduleParams& p);
Schedule buildBroadcastOneToAll(const ScheduleParams& p);
Schedule buildBroadcastBinomial(const ScheduleParams& p);
Schedule buildBarrierAllToAll(const ScheduleParams& p);
Schedule buildBarrierAllToOne(const ScheduleParams& p);
Schedule buildBarrierDissemination(const ScheduleParams& p);
Schedule buildAllgathervRing(const ScheduleParams& p);
Schedule buildAllgathervBruck(const ScheduleParams& p);
Schedule buildReduceScatterRing(const ScheduleParams& p);
Schedule buildReduceBinomial(const ScheduleParams& p);
Schedule buildGatherLinear(const ScheduleParams& p);
Schedule buildScatterLinear(const ScheduleParams& p);
Schedule buildAlltoallPairwise(const ScheduleParams& p);
Schedule buildAllreduceKnomial(const ScheduleParams& p);
Schedule buildReduceScatterRecursiveHalving(const ScheduleParams& p);
Schedule buildReduceReduceScatterGather(const ScheduleParams& p);
Schedule buildGatherBinomial(const ScheduleParams& p);
Schedule buildScatterBinomial(const ScheduleParams& p);
Schedule buildAlltoallBruck(const ScheduleParams& p);
Schedule buildAlltoallvBruck(const ScheduleParams& p);
Schedule buildBroadcastScatterAllgather(const ScheduleParams& p);
Schedule buildBroadcastChain(const ScheduleParams& p);
// Every shared-memory algorithm (shared/): one TaskKind::kShared task on the call's params.
Schedule buildShared(const ScheduleParams& p);
Schedule buildAllreduceHierarchical(const ScheduleParams& p);
Schedule buildBroadcastHierarchical(const ScheduleParams& p);
Schedule buildAllgatherHierarchical(const ScheduleParams& p);

// The documented cost of each algorithm for one rank (AlgorithmInfo::cost), written next to
// its builder from the algorithm's math, not by counting its schedule: the simulator checks
// one against the other.
Cost costAllreduceRing(const ScheduleParams& p);
Cost costAllreduceRingChunked(const ScheduleParams& p);
Cost costAllreduceHalvingDoubling(const ScheduleParams& p);
Cost costAllreduceRecursiveDoubling(const ScheduleParams& p);
Cost costAllgatherRing(const ScheduleParams& p);
Cost costBroadcastOneToAll(const ScheduleParams& p);
Cost costBroadcastBinomial(const ScheduleParams& p);
Cost costBarrierAllToAll(const ScheduleParams& p);
Cost costBarrierAllToOne(const ScheduleParams& p);
Cost costBarrierDissemination(const ScheduleParams& p);
Cost costAllgathervRing(const ScheduleParams& p);
Cost costReduceScatterRing(const ScheduleParams& p);
Cost costReduceBinomial(const ScheduleParams& p);
Cost costGatherLinear(const ScheduleParams& p);
Cost costScatterLinear(const ScheduleParams& p);
Cost costAlltoallPairwise(const ScheduleParams& p);
Cost costAllgatherLinear(const ScheduleParams& p);
Cost costAllgatherBruck(const ScheduleParams& p);
Cost costAllgatherRecursiveDoubling(const ScheduleParams& p);
Cost costAllgatherNeighborExchange(const ScheduleParams& p);
Cost costAllgatherTwoProc(const ScheduleParams& p);
Cost costAllgatherSparbit(const ScheduleParams& p);
Cost costAllgathervBruck(const ScheduleParams& p);
Cost costAllreduceKnomial(const ScheduleParams& p);
Cost costReduceScatterRecursiveHalving(const ScheduleParams& p);
Cost costReduceReduceScatterGather(const ScheduleParams& p);
Cost costGatherBinomial(const ScheduleParams& p);
Cost costScatterBinomial(const ScheduleParams& p);
Cost costAlltoallBruck(const ScheduleParams& p);
Cost costAlltoallvBruck(const ScheduleParams& p);
Cost costBroadcastScatterAllgather(const ScheduleParams& p);
Cost costBroadcastChain(const ScheduleParams& p);
Cost costAllreduceHierarchical(const ScheduleParams& p);
Cost costBroadcastHierarchical(const ScheduleParams& p);
Cost costAllgatherHierarchical(const ScheduleParams& p);

// Shared by the ring allreduces: the bandwidth-optimal ring (reduce-scatter + allgather)
// with every segment moved in `piecesPerSegment` pieces of at most 256 KiB (more where
// they would be larger), or (0) in pieces of params.chunkBytes.
Schedule buildAllreduceRingPieces(const ScheduleParams& p, std::uint64_t piecesPerSegment,
                                  const char* name);
Cost costAllreduceRingPieces(const ScheduleParams& p, std::uint64_t piecesPerSegment);

// The per-rank counts a binomial gather(v) / scatter(v) rank needs (`which` names them in
// the error): counts, or for a leaf its own count alone. Throws InvalidArgument when a rank
// with children has none (gatherv / scatterv give them at the root only unless the caller
// passes them everywhere) or when its own count disagrees with them.
std::vector<std::uint64_t> binomialCounts(const ScheduleParams& p, const char* which);
// A binomial gather(v)'s messages and bytes for one rank (a scatter's are the same, each
// the other way); `which` as for binomialCounts.
Cost binomialTreeCost(const ScheduleParams& p, const char* which);

// A world of one: copy input to output unless in place.
Schedule buildLocalOnly(const ScheduleParams& p, const char* name);

// Every algorithm's registry entry, defined in its file next to its description (the
// registry lists them in this order).
extern const AlgorithmInfo kAllreduceRing;
extern const AlgorithmInfo kAllreduceRingChunked;
extern const AlgorithmInfo kAllreduceHalvingDoubling;
extern const AlgorithmInfo kAllreduceRecursiveDoubling;
extern const AlgorithmInfo kAllreduceKnomial;
extern const AlgorithmInfo kAllreduceHierarchical;
extern const AlgorithmInfo kAllgatherRing;
extern const AlgorithmInfo kAllgatherLinear;
extern const AlgorithmInfo kAllgatherBruck;
extern const AlgorithmInfo kAllgatherRecursiveDoubling;
extern const AlgorithmInfo kAllgatherNeighborExchange;
extern const AlgorithmInfo kAllgatherTwoProc;
extern const AlgorithmInfo kAllgatherSparbit;
extern const AlgorithmInfo kAllgatherHierarchical;
extern const AlgorithmInfo kBroadcastOneToAll;
extern const AlgorithmInfo kBroadcastBinomial;
extern const AlgorithmInfo kBroadcastScatterAllgather;
extern const AlgorithmInfo kBroadcastChain;
extern const AlgorithmInfo kBroadcastHierarchical;
extern const AlgorithmInfo kBarrierAllToAll;
extern const AlgorithmInfo kBarrierAllToOne;
extern const AlgorithmInfo kBarrierDissemination;
extern const AlgorithmInfo kAllgathervRing;
extern const AlgorithmInfo kAllgathervBruck;
extern const AlgorithmInfo kReduceScatterRing;
extern const AlgorithmInfo kReduceScatterRecursiveHalving;
extern const AlgorithmInfo kReduceBinomial;
extern const AlgorithmInfo kReduceReduceScatterGather;
extern const AlgorithmInfo kGatherLinear;
extern const AlgorithmInfo kGatherBinomial;
extern const AlgorithmInfo kGathervLinear;
extern const AlgorithmInfo kGathervBinomial;
extern const AlgorithmInfo kScatterLinear;
extern const AlgorithmInfo kScatterBinomial;
extern const AlgorithmInfo kScattervLinear;
extern const AlgorithmInfo kScattervBinomial;
extern const AlgorithmInfo kAlltoallPairwise;
extern const AlgorithmInfo kAlltoallBruck;
extern const AlgorithmInfo kAlltoallvPairwise;
extern const AlgorithmInfo kAlltoallvBruck;
extern const AlgorithmInfo kAllreduceShm;
extern const AlgorithmInfo kReduceScatterShm;
extern const AlgorithmInfo kBroadcastShm;
extern const AlgorithmInfo kAllgatherShm;
extern const AlgorithmInfo kBarrierShm;

}  // namespace collx::algorithms
