// The machinery behind a Context's collectives (internal to collx::collx): the engine over
// the mesh, the collective sequence numbers, the schedule cache and the algorithm choice.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "collx/algorithms/engine.h"
#include "collx/algorithms/learner.h"
#include "collx/algorithms/registry.h"
#include "collx/algorithms/selection.h"

namespace collx::detail {

// The library's own exchanges take sequence numbers that no collective reaches (those count
// from 0), each its own: connect's agreement (everyRank) and the trace's clock measurement.
inline constexpr std::uint64_t kAgreementSeq = ~std::uint64_t{0};
inline constexpr std::uint64_t kClockSeq = ~std::uint64_t{0} - 1;

struct Runtime {
  Runtime() = default;
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // A sub-context's is its parent's (Context::split): one engine drives the shared mesh.
  std::shared_ptr<algorithms::Engine> engine;
  int rank = 0;
  int size = 1;
  // A sub-context: its number in the high bits of its messages' seqs (kSubContextShift; 0:
  // not a sub-context), the mesh's rank of each of its ranks, and its own flight recorder
  // (its seqs are not the engine's recorder's).
  std::uint64_t seqBase = 0;
  std::vector<int> meshRanks;
  std::shared_ptr<algorithms::Recorder> recorder;
  // Context::split's count of the splits made of this context, by name.
  std::mutex splitMutex;
  std::unordered_map<std::string, std::uint64_t> splits;
  // The mesh's rank of this context's rank `r`.
  int meshRank(int r) const noexcept {
    return meshRanks.empty() ? r : meshRanks[static_cast<std::size_t>(r)];
  }
  std::chrono::milliseconds timeout{0};
  std::uint64_t chunkBytes = algorithms::kChunkBytes.defaultValue();  // COLLX_CHUNK_BYTES
  // Every rank's host index (hosts numbered by their lowest rank) and the number of hosts,
  // from the peers' host identities; the hierarchical algorithms' ScheduleParams::hostOf.
  std::vector<int> hostOf;
  int hosts = 1;
  // What algorithms::select() knows of this job: COLLX_RULES, COLLX_<COLL>_ALGO (read once),
  // whether every rank shares memory, the number of hosts.
  algorithms::SelectionPolicy policy;
  // COLLX_SELECTION=learn: what this context's calls learned (nullptr: the table decides).
  std::unique_ptr<algorithms::Learner> learner;
  std::mutex learnMutex;
  // Tests: a call stops once it chose its algorithm, which it leaves here (it takes no
  // sequence number and moves nothing, so its buffers are never touched).
  bool selectOnly = false;
  const algorithms::AlgorithmInfo* selected = nullptr;
  std::atomic<std::uint64_t> sequence{0};
  // Context::agree's rounds so far, and Context::shrink's attempts.
  std::atomic<std::uint64_t> agreements{0};
  std::atomic<std::uint64_t> shrinks{0};
  // The ranks an agreement of this context found failed: every later one counts them failed
  // from the start (a newcomer that took such a rank's place in a failed attempt answers for
  // its place in the mesh, not for the rank).
  std::mutex failedMutex;
  std::set<int> agreedFailed;
  // The engine's generation when this context was made (Engine::generation): once the
  // survivors went on in another (Context::shrink), this context's calls fail (isOver()).
  std::int64_t generation = 0;
  bool isOver() const noexcept { return engine->generation() != generation; }
  // A shrink() of this context succeeded: it is over for good (an attempt that failed
  // leaves it over too, but shrink() may then be called on it again).
  std::atomic<bool> replaced{false};
  // RevokedError: this context's generation is over (a call of it, or a recovery).
  [[noreturn]] void throwOver(Where where) const;
  // Every rank of the job shares memory with every other (all agreed at connect): the
  // shared-memory algorithms may run. nullptr otherwise. A sub-context's is its sub-group,
  // which runs in the engine's lane `lane` (Engine::addSharedGroup; 0: the mesh's group).
  transport::SharedGroup* group = nullptr;
  int lane = 0;
  // A split's own polling before it yields (CallInfo::spinUs: as a context of just its ranks
  // would; -1: the engine's).
  std::int32_t spinUs = -1;
  // The shared-memory algorithms may run: one group of every rank, or a world of one.
  bool sharedMemory() const noexcept { return group != nullptr || size == 1; }

  // The engine's call counters (CallInfo::counter; Context::stats): the registry's
  // algorithms by their index there, then send and receive.
  static std::uint32_t counterOf(const algorithms::AlgorithmInfo& algorithm) noexcept {
    return static_cast<std::uint32_t>(&algorithm - algorithms::algorithmRegistry().data());
  }
  static std::uint32_t sendCounter() noexcept {
    return static_cast<std::uint32_t>(algorithms::algorithmRegistry().size());
  }
  static std::uint32_t recvCounter() noexcept { return sendCounter() + 1; }
  static std::size_t callCounters() noexcept { return recvCounter() + 1; }

  // The trace file this rank writes (COLLX_TRACE; the engine holds the tracer), or "".
  std::string tracePath;

  // Schedules by (algorithm, params), built once and shared by every call with that key.
  std::shared_ptr<const algorithms::Schedule> schedule(const algorithms::AlgorithmInfo& algorithm,
                                                       const algorithms::ScheduleParams& params);

 private:
  struct Key {
    const algorithms::AlgorithmInfo* algorithm;
    algorithms::ScheduleParams params;
  };
  // A call's key without copying its params (heterogeneous lookup).
  struct KeyRef {
    const algorithms::AlgorithmInfo* algorithm;
    const algorithms::ScheduleParams* params;
  };
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(const Key& k) const noexcept { return hash(k.algorithm, k.params); }
    std::size_t operator()(const KeyRef& k) const noexcept { return hash(k.algorithm, *k.params); }
    static std::size_t hash(const algorithms::AlgorithmInfo* a,
                            const algorithms::ScheduleParams& p) noexcept {
      return algorithms::hashParams(p) ^ std::hash<const void*>()(a);
    }
  };
  struct KeyEqual {
    using is_transparent = void;
    bool operator()(const Key& a, const Key& b) const noexcept {
      return a.algorithm == b.algorithm && a.params == b.params;
    }
    bool operator()(const KeyRef& a, const Key& b) const noexcept {
      return a.algorithm == b.algorithm && *a.params == b.params;
    }
    bool operator()(const Key& a, const KeyRef& b) const noexcept { return (*this)(b, a); }
  };
  std::mutex cacheMutex_;
  using Cache =
      std::unordered_map<Key, std::shared_ptr<const algorithms::Schedule>, KeyHash, KeyEqual>;
  Cache cache_;
  const Cache::value_type* last_ = nullptr;  // the entry found last (elements never move)
};

// Which of the bits of `mine` are set on every rank (an allreduce of the context's own,
// outside the collective sequence: used while connecting). Throws like a collective.
std::uint8_t everyRank(Runtime& rt, std::uint8_t mine);

// "allreduce#42 float32x1024": how mismatch errors name a message.
std::string describeMessage(const transport::MessageKey& key, const transport::Fingerprint& fp);

}  // namespace collx::detail
