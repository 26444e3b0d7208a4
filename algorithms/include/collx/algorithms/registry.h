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
// allreduce, reduce and reduce_scatter: the collectives that apply a reduce op.
bool reduces(Collective coll) noexcept;

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

// How docs/algorithms.md describes an algorithm: one row of its table, written next to the
// algorithm in its file (collx-bench -a list --markdown prints the tables).
struct AlgorithmDoc {
  const char* rounds = "";        // messages on the critical path (shm: uses of the buffers)
  const char* perRank = "";       // what one rank sends (shm: copies), the busiest rank's
  const char* cost = "";          // the alpha-beta-gamma time
  const char* restrictions = "";  // where it applies, what it falls back to, what it is for
  // After "yes" in the rank-order column (keepsOrder), e.g. ", for every root".
  const char* orderNote = "";
};

// One algorithm: what it is, how to build it, and what it needs of a call. select()
// (selection.h) checks the prerequisites, the same way whichever rule named the algorithm:
// a call's option or COLLX_<COLL>_ALGO that names one that cannot take the call is an error
// saying why, a row of the rules or the table naming one is passed over.
struct AlgorithmInfo {
  Collective coll;
  const char* name;
  const char* summary;  // steps, bytes on the wire, cost; see the algorithm's file
  Schedule (*build)(const ScheduleParams& params) = nullptr;
  // The documented formula for one rank's messages, bytes and reductions (nullptr: none
  // yet); the simulator checks every schedule against it.
  Cost (*cost)(const ScheduleParams& params) = nullptr;
  // Prerequisites.
  // Reductions happen in rank order (r0 op r1 op ...), so non-commutative ops are exact; an
  // algorithm without it takes commutative ops only.
  bool keepsOrder = false;
  // Works on shared memory directly (src/shm/): its schedule is one TaskKind::kShared task
  // that the engine resumes until it ends; only when every rank of the call shares memory
  // with the others. Not simulated (the simulator has no shared memory).
  bool shared = false;
  // The schedule needs every rank's counts (ScheduleParams::countMatrix), which the API
  // exchanges before it builds it (an allgather of the counts, paid by every call).
  bool exchangesCounts = false;
  // The host rule: the default (over the built-in table, not over a rules file) when the job
  // spans hosts and some host has several ranks.
  bool acrossHosts = false;
  AlgorithmDoc doc;
};

// Collective values index arrays of this size (Collective starts at 1).
inline constexpr std::size_t kCollectiveSlots = 15;

// A hash of every field, for the schedule cache.
std::size_t hashParams(const ScheduleParams& params) noexcept;

// Every algorithm, in the order collx-info lists them.
const std::vector<AlgorithmInfo>& algorithmRegistry();
const AlgorithmInfo* findAlgorithm(Collective coll, std::string_view name);
// "ring, ring_chunked, ..." for error messages.
std::string algorithmNames(Collective coll);
// Every algorithm, one line each: "allreduce  ring                 <summary>" (collx-bench -a
// list).
std::string algorithmList();
// docs/algorithms.md's tables of every algorithm (the schedules, then the shared-memory
// ones), each from a line that starts with kDocBegin to the line kDocEnd, the blocks
// separated by an empty line (collx-bench -a list --markdown). The file's other text is
// written by hand.
std::string algorithmTablesMarkdown();
inline constexpr const char* kDocBegin = "<!-- generated from the registry";
inline constexpr const char* kDocEnd = "<!-- end of the generated table -->";

// A row of the default selection table: the first row whose ranges hold, and whose algorithm
// can take the call, picks (select(), selection.h).
//
// The bytes a collective's rows are matched against (selectionBytes(), selection.h):
//   allreduce, reduce, broadcast   the vector: count x element size
//   allgather                      the total gathered: P x one rank's block (Open MPI's
//                                  total_dsize, in which its decision tree is written)
//   allgatherv, reduce_scatter     the whole buffer: the sum of the counts x element size
//   gather, scatter, alltoall      one rank's block (alltoall: per peer) x element size
//   gatherv, scatterv              this rank's own count x element size
//   alltoallv, barrier             0
// Every rank of a call must pick the same algorithm, so rows may split by bytes only where
// the measure is the same on every rank: not for gatherv or scatterv.
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

}  // namespace collx::algorithms
