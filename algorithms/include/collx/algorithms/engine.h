// Engine: runs schedules over a mesh, blocking or nonblocking, from the same code.
//
// One thread at a time drives progress (posts ready sends and receives, runs ready
// reductions and copies, moves bytes): a caller blocked in run() or wait() drives it
// itself, so a small collective costs one trip on the wire and no thread hand-off; when
// nobody waits, the engine's progress thread drives the nonblocking calls in flight.
//
// Failure: the first error (a peer lost, a mismatch, a deadline, abort()) fails the mesh,
// every call in flight and every later call, each with an error that names its own call.
// A failed call never writes its buffers after its error was returned.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collx/algorithms/schedule.h"
#include "collx/base/data_type.h"
#include "collx/base/reduce_op.h"
#include "collx/transport/mesh.h"

namespace collx::algorithms {

using Clock = std::chrono::steady_clock;

// What one call is: named in errors, fingerprinted on the wire, reduced with.
struct CallInfo {
  // Named in errors as "allreduce(ring, seq 7)" or "send(peer 1, tag 9)"; the text is only
  // built when an error needs it.
  const char* collective = "";
  const char* algorithm = nullptr;  // nullptr for point to point
  int peer = -1;                    // point to point: the peer
  transport::MessageKey key;        // seq and space; the schedule supplies the steps
  transport::Fingerprint fingerprint;
  DataType dtype = DataType::kUint8;
  ReduceOp op;
  Clock::time_point deadline;
  std::chrono::milliseconds timeout{0};
};

// "allreduce(ring, seq 7)", "send(peer 1, tag 9)".
std::string callName(const CallInfo& info);

struct Bindings {
  const void* input = nullptr;
  void* output = nullptr;
};

class Execution;

struct EngineOptions {
  // How long a waiting thread polls without blocking before it sleeps in poll(): worth it
  // when this rank has a core of its own, harmful when ranks outnumber cores.
  // (engineOptions() in settings.h fills both from COLLX_SPIN_US and COLLX_YIELD_US.)
  std::chrono::microseconds spin{0};
  // Then how long it keeps polling but yields the core between polls (sched_yield), before
  // it sleeps: when ranks outnumber cores this hands the core to the peer being waited for
  // without paying a wakeup.
  std::chrono::microseconds yield{0};
};

class Engine {
 public:
  Engine(std::unique_ptr<transport::Mesh> mesh, const EngineOptions& options);
  // Fails nonblocking calls still in flight with Aborted and stops the progress thread.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  transport::Mesh& mesh() noexcept { return *mesh_; }
  int rank() const noexcept { return mesh_->rank(); }
  int size() const noexcept { return mesh_->size(); }

  // Blocking: runs the schedule to completion on this thread. Throws the call's error.
  void run(std::shared_ptr<const Schedule> schedule, const Bindings& bindings, CallInfo info);
  // Nonblocking: starts the schedule and returns at once.
  std::shared_ptr<Execution> start(std::shared_ptr<const Schedule> schedule,
                                   const Bindings& bindings, CallInfo info);
  // Waits until `execution` ends (driving progress meanwhile) or `until` passes; returns
  // false in the second case (the call goes on). Throws the call's error.
  bool wait(Execution& execution, std::optional<Clock::time_point> until = std::nullopt);
  // Non-blocking check, moving what can move if no other thread is driving.
  bool test(Execution& execution);

  // A call's error once it failed (nullptr while running or after success).
  static std::exception_ptr errorOf(const Execution& execution);

  // Thread-safe: fails every call in flight and every later call with Aborted.
  void abort(const std::string& why);
  // The error that failed this engine, if any.
  std::exception_ptr failure() const { return mesh_->failure(); }

 private:
  friend class Execution;
  class DriveLock;
  void admit(const std::shared_ptr<Execution>& execution);
  void registerActive(const Execution& execution);
  bool refuseIfFailed(Execution& execution);
  // Drives progress (the caller holds drive_) until `target` ends or `until` passes.
  bool driveUntil(Execution& target, std::optional<Clock::time_point> until);
  void pumpAll();
  void failAll(const Error& error);
  void timeOut(Execution& execution);
  void retire();
  void progressLoop();
  void lockDrive();
  void unlockDrive();

  // Scratch buffers outlive calls: allocating (and page-faulting) megabytes per call would
  // cost more than a large collective's reduction.
  std::unique_ptr<std::uint8_t[]> takeScratch(std::uint64_t bytes, std::uint64_t& capacity);
  void giveScratch(std::unique_ptr<std::uint8_t[]> buffer, std::uint64_t capacity);

  std::unique_ptr<transport::Mesh> mesh_;
  EngineOptions options_;
  std::mutex scratchMutex_;
  std::vector<std::pair<std::uint64_t, std::unique_ptr<std::uint8_t[]>>> scratchPool_;

  std::mutex drive_;  // whoever holds it drives progress
  std::mutex stateMutex_;
  std::condition_variable stateChanged_;
  std::deque<std::shared_ptr<Execution>> incoming_;  // started, not yet admitted (stateMutex_)
  std::vector<std::shared_ptr<Execution>> active_;   // admitted, running (drive_)
  std::atomic<int> callersWaiting_{0};
  std::atomic<int> asyncInFlight_{0};
  // Set under stateMutex_; the progress thread also reads it while driving (without it).
  std::atomic<bool> stopping_{false};
  std::thread progressThread_;
};

}  // namespace collx::algorithms
