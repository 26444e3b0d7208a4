// The machinery behind a Context's collectives (internal to collx::collx): the engine over
// the mesh, the collective sequence numbers, the schedule cache and the algorithm choice.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "collx/algorithms/engine.h"
#include "collx/algorithms/registry.h"
#include "collx/algorithms/selection.h"

namespace collx::detail {

// A nonblocking call of a shared-memory algorithm (which runs on a thread that waits for
// the other ranks): done, and its error, once the SharedWorker ran it.
struct SharedJob {
  std::function<void()> run;
  Where where;  // the rank and the call, for an error that ends it before it runs
  std::mutex mutex;
  std::condition_variable ended;
  bool done = false;
  std::exception_ptr error;

  // Until done (true) or `until` passed (false). Throws the call's error.
  bool wait(std::optional<std::chrono::steady_clock::time_point> until);
};

// Runs nonblocking shared-memory calls one after another, in the order they were started
// (every rank runs them in that order), on a thread of its own, started on first use.
class SharedWorker {
 public:
  SharedWorker() = default;
  // Fails the jobs not yet started with Aborted and joins the thread (the caller aborts the
  // engine first, so that a job waiting for other ranks ends).
  ~SharedWorker();
  void submit(std::shared_ptr<SharedJob> job);
  // Waits until every job submitted so far ended (each is bounded by its call's deadline):
  // a blocking shared-memory call runs after the nonblocking ones started before it.
  void drain();
  // A job not yet ended (lock-free: every blocking shared-memory call asks).
  bool busy() const noexcept { return outstanding_.load(std::memory_order_acquire) > 0; }

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<SharedJob>> queue_;
  bool running_ = false;             // a job is running
  std::atomic<int> outstanding_{0};  // submitted, not yet ended
  bool stopping_ = false;
  std::thread thread_;
};

struct Runtime {
  Runtime() = default;
  // A nonblocking shared-memory call still waiting for other ranks ends (Aborted) first.
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  std::unique_ptr<algorithms::Engine> engine;
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{0};
  std::uint64_t chunkBytes = algorithms::kChunkBytes.defaultValue();  // COLLX_CHUNK_BYTES
  // Every rank's host index (hosts numbered by their lowest rank) and the number of hosts,
  // from the peers' host identities; the hierarchical algorithms' ScheduleParams::hostOf.
  std::vector<int> hostOf;
  int hosts = 1;
  // COLLX_<COLL>_ALGO, read once.
  std::map<algorithms::Collective, std::string> configuredAlgorithm;
  // COLLX_RULES, then the built-in table.
  algorithms::Selection selection;
  std::atomic<std::uint64_t> sequence{0};
  // Every rank of the job shares memory with every other (all agreed at connect): the
  // shared-memory algorithms may run. nullptr otherwise.
  transport::SharedGroup* group = nullptr;
  // The shared-memory algorithms may run: one group of every rank, or a world of one.
  bool sharedMemory() const noexcept { return group != nullptr || size == 1; }
  // Declared after the engine, so destroyed before it.
  SharedWorker sharedWorker;

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

// Which of the bits of `mine` are set on every rank (an allreduce of the context's own,
// outside the collective sequence: used while connecting). Throws like a collective.
std::uint8_t everyRank(Runtime& rt, std::uint8_t mine);

// "allreduce#42 float32x1024": how mismatch errors name a message.
std::string describeMessage(const transport::MessageKey& key, const transport::Fingerprint& fp);

}  // namespace collx::detail
