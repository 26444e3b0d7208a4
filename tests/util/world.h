// World: P ranks as threads in this process, each with a Context over one HashStore and
// the transport COLLX_TRANSPORT picks between them (auto: shared memory; the "tcp:" and
// "ibverbs:" copies of the suites: loopback TCP or the emulated verbs device). Threads are
// created once and reused for every job.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collx/algorithms/registry.h"
#include "collx/collx.h"
#include "util/sanitizer.h"

namespace collx::test {

class World {
 public:
  // Forms a world of `size` ranks (throws what a rank threw while forming). `hostIds`, when
  // given, is every rank's ContextOptions::hostId: several simulated hosts in one process.
  // `store`, when given, is the store the ranks meet through instead of a new HashStore.
  explicit World(int size, ContextOptions options = {}, std::vector<std::string> hostIds = {},
                 std::shared_ptr<rendezvous::Store> store = nullptr);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int size() const { return size_; }
  Context& context(int rank) { return *contexts_[rank]; }
  // Closes rank `rank`'s context now (jobs no longer run on that rank): the others see a
  // peer that closed its context.
  void close(int rank) { contexts_[static_cast<std::size_t>(rank)].reset(); }
  // The store the ranks met through (a newcomer joins through it: collx::join).
  const std::shared_ptr<rendezvous::Store>& store() const { return store_; }

  // Runs job(rank, context) on every rank's thread at once and waits for all. Returns what
  // each rank threw (nullptr where it returned).
  std::vector<std::exception_ptr> run(const std::function<void(int, Context&)>& job);
  // Like run(), but fails the calling test (ADD_FAILURE) naming each rank that threw.
  void runOk(const std::function<void(int, Context&)>& job);

 private:
  void loop(int rank);
  int size_;
  std::shared_ptr<rendezvous::Store> store_;
  std::vector<std::shared_ptr<Context>> contexts_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable cv_;
  const std::function<void(int, Context&)>* job_ = nullptr;
  std::uint64_t generation_ = 0;
  int running_ = 0;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
};

// The world sizes the thread-rank suites run: every P up to 17, then 32 and 64.
inline constexpr int kWorldSizes[] = {1,  2,  3,  4,  5,  6,  7,  8,  9, 10,
                                      11, 12, 13, 14, 15, 16, 17, 32, 64};
// Whether the suites of this build run worlds of P ranks: every P in the Release build. The
// sanitizer builds run 1 to 5, 7 and 8 (ThreadSanitizer, 3-5x slower: 1 to 5): one rank and
// two, odd and even, powers of two and not. The larger worlds repeat the engine's paths (the
// same pairs, steps and rings, only more of them) and take most of a suite's time under a
// sanitizer; the Release suite runs them.
inline bool sanitizerRunsWorld(int P) {
  switch (kSanitizer) {
    case Sanitizer::kAddress:
      return P <= 8 && P != 6;
    case Sanitizer::kThread:
      return P <= 5;
    case Sanitizer::kNone:
      break;
  }
  return true;
}
// The world sizes a thread-rank suite instantiates: those of `sizes` that this build runs
// (sanitizerRunsWorld), so a world a sanitizer build leaves out costs nothing there.
inline std::vector<int> worldSizes(const std::vector<int>& sizes) {
  std::vector<int> kept;
  for (int P : sizes)
    if (sanitizerRunsWorld(P)) kept.push_back(P);
  return kept;
}
// The same of kWorldSizes.
inline std::vector<int> worldSizes() {
  return worldSizes(std::vector<int>(std::begin(kWorldSizes), std::end(kWorldSizes)));
}
// Above this size a suite runs fewer combinations (dtypes, ops, counts) per algorithm.
inline constexpr int kFullSweepMaxSize = 16;

// The registry's algorithms of one collective: suites cover what is added there unchanged.
// The shared-memory ones (AlgorithmInfo::shared) only where worlds share memory: not in the
// "tcp:" and "ibverbs:" copies of the suites (COLLX_TRANSPORT=tcp or ibverbs), whose ranks
// cannot run them.
std::vector<std::string> algorithmsOf(algorithms::Collective coll);
// Whether thread-rank worlds of this process share memory (COLLX_TRANSPORT is auto or shm).
bool worldsShareMemory();

// One world per size, shared by the tests of this process.
World& worldOf(int size);

// Raises the soft limit on open files for a world of `size` ranks in this process (every
// rank holds a socket per peer). Returns "" when there are enough, else why not (for a
// GTEST_SKIP that says so).
std::string ensureFilesFor(int size);

// In a test body: skips, saying why, when this process cannot open a world of P ranks.
#define COLLX_NEED_FILES_FOR(P)                                \
  do {                                                         \
    const std::string why_ = ::collx::test::ensureFilesFor(P); \
    if (!why_.empty()) GTEST_SKIP() << why_;                   \
  } while (0)

// The message of an exception_ptr ("" for nullptr).
std::string messageOf(const std::exception_ptr& error);

// Options whose ranks use `transport` ("tcp", "shm", ...).
inline ContextOptions over(const char* transport) {
  ContextOptions options;
  options.transport = transport;
  return options;
}

}  // namespace collx::test
