// The algorithms collx knows, registered as data ({collective, name, summary, builder,
// restrictions}), and the default choice per collective as a small table over (P, bytes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collx/algorithms/schedule.h"
#include "collx/algorithms/settings.h"
#include "collx/base/data_type.h"
#include "collx/base/reduce_op.h"

namespace collx::algorithms {

enum class Collective : std::uint8_t {
  kAllreduce = 1,
  kAllgather = 2,
  kBroadcast = 3,
  kBarrier = 4,
  kSendRecv = 5,  // point-to-point, for fingerprints
  kAllgatherv = 6,
  kReduceScatter = 7,  // equal or per-rank counts (ScheduleParams::counts)
  kReduce = 8,
  kGather = 9,
  kGatherv = 10,
  kScatter = 11,
  kScatterv = 12,
  kAlltoall = 13,
  kAlltoallv = 14,
};

// Every collective that has algorithms, in the order tools list them.
const std::vector<Collective>& collectives();

const char* collectiveName(Collective coll) noexcept;

// Everything a builder needs; equal params give equal schedules (the cache key).
struct ScheduleParams {
  Collective coll = Collective::kAllreduce;
  int rank = 0;
  int size = 1;
  std::uint64_t count = 0;  // elements: the whole vector (allreduce, reduce, broadcast) or
                            // one rank's block (allgather, reduce_scatter, gather, scatter,
                            // alltoall: per peer)
  std::size_t elementSize = 1;
  ReduceOpKind op = ReduceOpKind::kSum;
  bool inPlace = false;
  int root = 0;
  // Pipelining granularity of the chunked algorithms (COLLX_CHUNK_BYTES).
  std::uint64_t chunkBytes = kChunkBytes.defaultValue();
  bool commutative = true;  // false: the op must be applied in rank order
  // Per-rank blocks in elements, for allgatherv, reduce_scatter (equal blocks too),
  // gatherv, scatterv (counts[i], displs[i]: rank i's block in the buffer holding them all)
  // and alltoallv (what this rank sends to peer i; recvCounts / recvDispls: what it
  // receives from peer i). Empty for the other collectives.
  std::vector<std::uint64_t> counts;
  std::vector<std::uint64_t> displs;
  std::vector<std::uint64_t> recvCounts;
  std::vector<std::uint64_t> recvDispls;
  // alltoallv bruck only: every rank's sendcounts, row by row (P x P; entry i * P + j is what
  // rank i sends rank j), exchanged by the API layer before the schedule is built.
  std::vector<std::uint64_t> countMatrix;
  // The host index of every rank (hosts numbered in the order of their lowest rank), for the
  // hierarchical algorithms; empty: unknown or a single host. Every rank passes the same.
  std::vector<int> hostOf;

  std::uint64_t bytes() const { return count * elementSize; }
  bool operator==(const ScheduleParams&) const = default;
};

// What one rank does in one call, as an algorithm's documented formula predicts it (and
// the simulator counts it): messages and bytes it sends and receives, elements it reduces.
struct Cost {
  std::uint64_t sends = 0;
  std::uint64_t sendBytes = 0;
  std::uint64_t recvs = 0;
  std::uint64_t recvBytes = 0;
  std::uint64_t reducedElements = 0;
  bool operator==(const Cost&) const = default;
};

struct AlgorithmInfo {
  Collective coll;
  const char* name;
  const char* summary;  // steps, bytes on the wire, cost; see the algorithm's file
  Schedule (*build)(const ScheduleParams& params);
  // Reductions happen in rank order (r0 op r1 op ...), so non-commutative ops are exact.
  bool keepsOrder = false;
  // The documented formula for one rank's messages, bytes and reductions (nullptr: none
  // yet); the simulator checks every schedule against it.
  Cost (*cost)(const ScheduleParams& params) = nullptr;
  // Works on shared memory directly (algorithms/shared.h: runShared) instead of a schedule
  // (build is nullptr): only when every rank of the call shares memory with the others.
  bool shared = false;
};

// A hash of every field, for the schedule cache.
std::size_t hashParams(const ScheduleParams& params) noexcept;

// Every algorithm, in the order collx-info lists them.
const std::vector<AlgorithmInfo>& algorithmRegistry();
const AlgorithmInfo* findAlgorithm(Collective coll, std::string_view name);
// "ring, ring_chunked, ..." for error messages.
std::string algorithmNames(Collective coll);

// A row of the default selection table: the first row whose ranges hold picks.
//
// The bytes a collective's rows are matched against (what collx's choose() passes):
//   allreduce, reduce, broadcast   the vector: count x element size
//   allgather                      the total gathered: P x one rank's block (Open MPI's
//                                  total_dsize, in which its decision tree is written)
//   allgatherv                     the total gathered: the sum of the counts x element size
//   gather, scatter, alltoall      one rank's block (alltoall: per peer) x element size
//   reduce_scatter                 this rank's block: counts[rank] x element size
//   gatherv, scatterv              this rank's own count x element size
//   alltoallv, barrier             0
// Every rank of a call must pick the same algorithm, so rows may split by bytes only where
// the measure is the same on every rank: not for reduce_scatter with per-rank counts,
// gatherv or scatterv.
struct SelectionRule {
  Collective coll;
  int minRanks;
  int maxRanks;
  std::uint64_t minBytes;
  std::uint64_t maxBytes;
  const char* algorithm;
  // The row applies only where every rank shares memory with the others (as rows naming a
  // shared-memory algorithm do anyway).
  bool sharedOnly = false;
};
const std::vector<SelectionRule>& defaultSelection();
// The default algorithm for a call (from defaultSelection()).
// Rows of shared-memory algorithms count only when `shared` (see Selection::choose).
const char* defaultAlgorithm(Collective coll, int ranks, std::uint64_t bytes, bool shared = false);

}  // namespace collx::algorithms
