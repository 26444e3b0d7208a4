// The machinery behind a Context's collectives (internal to collx::collx): the engine over
// the mesh, the collective sequence numbers, the schedule cache and the algorithm choice.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "collx/algorithms/engine.h"
#include "collx/algorithms/registry.h"
#include "collx/algorithms/selection.h"

namespace collx::detail {

struct Runtime {
  std::unique_ptr<algorithms::Engine> engine;
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{0};
  std::uint64_t chunkBytes = 1u << 20;
  // Every rank's host index (hosts numbered by their lowest rank) and the number of hosts,
  // from the peers' host identities; the hierarchical algorithms' ScheduleParams::hostOf.
  std::vector<int> hostOf;
  int hosts = 1;
  // COLLX_<COLL>_ALGO, read once.
  std::map<algorithms::Collective, std::string> configuredAlgorithm;
  // COLLX_RULES, then the built-in table.
  algorithms::Selection selection;
  std::atomic<std::uint64_t> sequence{0};

  // Schedules by (algorithm, params), built once and shared by every call with that key.
  std::shared_ptr<const algorithms::Schedule> schedule(const algorithms::AlgorithmInfo& algorithm,
                                                       const algorithms::ScheduleParams& params);

 private:
  struct Key {
    const algorithms::AlgorithmInfo* algorithm;
    algorithms::ScheduleParams params;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept {
      return algorithms::hashParams(k.params) ^ std::hash<const void*>()(k.algorithm);
    }
  };
  std::mutex cacheMutex_;
  std::unordered_map<Key, std::shared_ptr<const algorithms::Schedule>, KeyHash> cache_;
};

// "allreduce#42 float32x1024": how mismatch errors name a message.
std::string describeMessage(const transport::MessageKey& key, const transport::Fingerprint& fp);

}  // namespace collx::detail
