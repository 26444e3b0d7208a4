// The algorithms collx knows, registered as data ({collective, name, summary, builder,
// restrictions}), and the default choice per collective as a small table over (P, bytes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collx/algorithms/schedule.h"
#include "collx/base/data_type.h"
#include "collx/base/reduce_op.h"

namespace collx::algorithms {

enum class Collective : std::uint8_t {
  kAllreduce = 1,
  kAllgather = 2,
  kBroadcast = 3,
  kBarrier = 4,
  kSendRecv = 5,  // point-to-point, for fingerprints
};

const char* collectiveName(Collective coll) noexcept;

// Everything a builder needs; equal params give equal schedules (the cache key).
struct ScheduleParams {
  Collective coll = Collective::kAllreduce;
  int rank = 0;
  int size = 1;
  std::uint64_t count = 0;  // elements: the whole vector (allreduce, broadcast) or one
                            // rank's block (allgather)
  std::size_t elementSize = 1;
  ReduceOpKind op = ReduceOpKind::kSum;
  bool inPlace = false;
  int root = 0;
  std::uint64_t chunkBytes = 1u << 20;  // pipelining granularity of the chunked algorithms

  std::uint64_t bytes() const { return count * elementSize; }
  bool operator==(const ScheduleParams&) const = default;
};

struct AlgorithmInfo {
  Collective coll;
  const char* name;
  const char* summary;  // steps, bytes on the wire, cost; see the algorithm's file
  Schedule (*build)(const ScheduleParams& params);
};

// Every algorithm, in the order collx-info lists them.
const std::vector<AlgorithmInfo>& algorithmRegistry();
const AlgorithmInfo* findAlgorithm(Collective coll, std::string_view name);
// "ring, ring_chunked, ..." for error messages.
std::string algorithmNames(Collective coll);

// A row of the default selection table: the first row whose ranges hold picks.
struct SelectionRule {
  Collective coll;
  int minRanks;
  int maxRanks;
  std::uint64_t minBytes;
  std::uint64_t maxBytes;
  const char* algorithm;
};
const std::vector<SelectionRule>& defaultSelection();
// The default algorithm for a call (from defaultSelection()).
const char* defaultAlgorithm(Collective coll, int ranks, std::uint64_t bytes);

}  // namespace collx::algorithms
