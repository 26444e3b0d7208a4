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
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collx/algorithms/recorder.h"
#include "collx/algorithms/schedule.h"
#include "collx/base/data_type.h"
#include "collx/base/reduce_op.h"
#include "collx/transport/mesh.h"

namespace collx::algorithms {

using Clock = std::chrono::steady_clock;
class Tracer;

// CallInfo::counter of a call that no counter counts (the library's own).
inline constexpr std::uint32_t kUncounted = ~std::uint32_t{0};

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
  // What ReduceOp avg divides by: the number of ranks of the call's context (a sub-context's
  // are fewer than the mesh's); 0: the mesh's.
  std::uint32_t divisor = 0;
  // time_point::max(): the engine starts it, `timeout` from then, when the call first waits
  // (a blocking call that never waits reads no clock) or is started nonblocking.
  Clock::time_point deadline;
  std::chrono::milliseconds timeout{0};
  // false: the library's own call (connect's agreement), kept out of the flight recorder.
  bool record = true;
  // The flight recorder's entry of this call (recorder nullptr: none). The engine sets its
  // own recorder unless the caller gave one (a sub-context's, whose seqs it numbers).
  Recorder* recorder = nullptr;
  // What owns a recorder the caller gave, kept alive until the call ends (a sub-context may
  // go while its nonblocking call runs on).
  std::shared_ptr<const void> recorderOwner;
  std::uint64_t recordId = 0;
  // A short blocking shared-memory call's entry is written once, when the call ends, unless
  // it first sleeps in a wait or fails (Engine::recordPending writes it then).
  mutable bool recordPending = false;
  // Set by the API: the call counter it counts under (EngineOptions::callCounters; the API
  // gives them their meaning) and its bytes.
  std::uint32_t counter = kUncounted;
  std::uint64_t bytes = 0;
  // Set by the engine: the trace this call is written to (nullptr: none) and its span's id.
  Tracer* tracer = nullptr;
  std::uint64_t traceId = 0;
  // A shared-memory call's lane (Engine::addSharedGroup): 0, the mesh's group; s + 1, the
  // sub-group in slot s.
  int lane = 0;
  // How long a thread driving this call polls before it yields (EngineOptions::spin), where
  // its context's differs from the engine's: a split of ranks that have cores of their own
  // within a job whose ranks outnumber the cores. -1: the engine's.
  std::int32_t spinUs = -1;
};

// "allreduce(ring, seq 7)", "send(peer 1, tag 9)".
std::string callName(const CallInfo& info);

struct Bindings {
  const void* input = nullptr;
  void* output = nullptr;
};

struct ScheduleParams;
class Execution;
namespace shared {
class Runner;
}

struct EngineOptions {
  // How long a waiting thread polls without blocking before it sleeps in poll(): worth it
  // when this rank has a core of its own, harmful when ranks outnumber cores.
  // (engineOptions() in settings.h fills both from COLLX_SPIN_US and COLLX_YIELD_US.)
  std::chrono::microseconds spin{0};
  // Then how long it keeps polling but yields the core between polls (sched_yield), before
  // it sleeps: when ranks outnumber cores this hands the core to the peer being waited for
  // without paying a wakeup.
  std::chrono::microseconds yield{0};
  // Calls the flight recorder keeps (Recorder); 0: no recorder.
  std::size_t traceBuffer = 1024;
  // Asked when a call fails, with its recorder id: text to append to its error (the job's
  // hang report, when one covered the call), or "". Never on a call's way otherwise.
  std::function<std::string(std::uint64_t id)> hangNote;
  // Call counters (CallInfo::counter, EngineStats::calls).
  std::size_t callCounters = 0;
};

// What an engine moved and waited for since it was made (or resetStats()): messages and bytes
// per peer (counted when a transfer completes), failed calls, and the time the driving
// thread slept in the mesh's poll and blocking shared-memory calls slept in the group's
// waits.
struct EngineStats {
  struct Peer {
    std::uint64_t messagesSent = 0;
    std::uint64_t bytesSent = 0;
    std::uint64_t messagesReceived = 0;
    std::uint64_t bytesReceived = 0;
  };
  std::vector<Peer> peers;  // by rank
  // Calls and their bytes by CallInfo::counter, counted when they start to run (or are
  // refused: the context failed earlier).
  struct Calls {
    std::uint64_t calls = 0;
    std::uint64_t bytes = 0;
  };
  std::vector<Calls> calls;
  std::uint64_t failedCalls = 0;
  std::chrono::nanoseconds waited{0};
  std::chrono::nanoseconds sharedWaited{0};
};

// Schedules of the shared-memory algorithms (one TaskKind::kShared task) run here too: one
// at a time, in the order they were started (every rank uses the group buffers in that
// order), each resumed by whoever drives progress once what it waits for is there.
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
  // Blocking, for a shared-memory call (`params` as its schedule's, TaskKind::kShared) when
  // no nonblocking call is in flight: runs it on this thread in the group's own waits (spin,
  // yield, then sleep until a member publishes; each bounded by the deadline, ended by abort
  // or failure) while other threads' calls progress. Returns false, having done nothing,
  // when it cannot (then run() its schedule). Throws the call's error.
  bool runShared(const ScheduleParams& params, const Bindings& bindings, CallInfo& info);
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

  // Lanes: each shared-memory group runs its calls in its own order, beside the others'
  // (a sub-context's calls and its parent's interleave differently on different ranks).
  // Lane 0 is the mesh's group; lane s + 1 the sub-group in slot s, added by its
  // sub-context (Context::split) and removed when that goes: removeSharedGroup() keeps the
  // group until the lane's calls in flight end, then destroys it (which lets go of the slot).
  static constexpr int kLanes = 1 + transport::SharedGroup::kSubGroupSlots;
  void addSharedGroup(int lane, std::unique_ptr<transport::SharedGroup> group);
  void removeSharedGroup(int lane);

  // Thread-safe: fails every call in flight and every later call with Aborted.
  void abort(const std::string& why);
  // The error that failed this engine, if any.
  std::exception_ptr failure() const { return mesh_->failure(); }
  // The flight recorder (nullptr when off): the calls admitted, shared with whoever reads it
  // while the engine runs.
  const std::shared_ptr<Recorder>& recorder() const noexcept { return recorder_; }
  // Writes the entry of a call whose admission was left for later (CallInfo::recordPending),
  // before anything else is noted of it.
  static void recordPending(const CallInfo& info) noexcept;
  // The trace every later call is written to (COLLX_TRACE; nullptr: none). Set once, before
  // the first call that should be traced; the engine keeps it until it goes away.
  void setTracer(std::shared_ptr<Tracer> tracer) noexcept { tracer_ = std::move(tracer); }
  // Thread-safe: the counters so far (relaxed reads: each is exact, together they may be a
  // moment apart).
  EngineStats stats() const;
  // Counts from zero again (while no call is in flight: the API does at the end of connect,
  // so that its own messages are not counted).
  void resetStats() noexcept;

 private:
  friend class Execution;
  class DriveLock;
  struct Lane;
  // A lane's runner is one call's at a time: a blocking call's on its own thread, or the
  // queued calls' under the drive lock.
  static bool claimShared(Lane& lane) noexcept;
  void releaseShared(Lane& lane) noexcept;
  // How a failed wait of the lane's group fails the mesh.
  void setFailMesh(Lane& lane);
  // A removed lane whose calls ended: its group and runner go (driver, or under drive_).
  void retireLane(Lane& lane) noexcept;
  // A blocking shared-memory call's wait failed (on its own thread, without drive_): fails
  // the mesh now if it can take drive_, else hands the error to the driving thread
  // (failSoon_), which fails the mesh in its next round, and returns at once.
  void failFromBlockingCall(const Error& error);
  void applyFailSoon();  // holding drive_
  // Work left to the thread that drives, which looks at `pending` every round and calls
  // `apply` (holding drive_) when it is set: returns once `pending` is clear again, having
  // called `apply` itself where nobody drives.
  void handToDriver(const std::atomic<bool>& pending, void (Engine::*apply)());
  // Marks the lanes removeSharedGroup() asked for removed, retiring those with no calls
  // (holding drive_).
  void retireRequested();
  std::atomic<bool> retireRequested_{false};
  void admit();
  // Makes an admitted call active (driver only).
  void activate(std::shared_ptr<Execution> execution);
  void registerActive(const Execution& execution);
  bool refuseIfFailed(Execution& execution);
  // Drives progress (the caller holds drive_) until `target` ends or `until` passes.
  bool driveUntil(Execution& target, std::optional<Clock::time_point> until);
  // Runs what is ready; true when anything moved.
  bool pumpAll();
  // Starts or resumes the shared-memory call whose turn it is in each lane; true when it
  // moved.
  bool pumpShared();
  bool pumpLane(Lane& lane);
  // Drops the shared-memory calls that ended (failed) from the queues.
  void dropEndedShared() noexcept;
  void dropEnded(Lane& lane) noexcept;
  // Where a collective waits for messages: whether a member of the shared-memory group runs
  // this sequence number through shared memory instead (a mismatch, named on both sides);
  // where a shared-memory call waits for a member: whether that member died, closed its
  // context or failed.
  void checkSharedPeers();
  // One progress round of the mesh, sleeping up to `wait`; a shared-memory call that waits
  // for a member's use has the member's publish ring this thread awake
  // (SharedGroup::expect). `lastActivity` is set when anything moved.
  void progressSleeping(std::chrono::microseconds wait, bool tryDirect, Clock::time_point now,
                        Clock::time_point& lastActivity);
  std::string sharedPending(const Execution& execution);
  int sharedPendingPeer(const Execution& execution);
  void failAll(const Error& error);
  // The flight recorder's part (each a no-op when it is off). `pending`: the entry is written
  // when the call ends (or recordPending), not now.
  void recordAdmitted(CallInfo& info, CallState state, bool pending = false) noexcept;
  static void recordEnded(const CallInfo& info, const Error* error);
  // The hang report's text for a failing call ("" without one).
  std::string hangNote(const CallInfo& info) const;
  // The trace's part of admission (tracer_ set and the call recorded).
  void traceAdmitted(CallInfo& info) noexcept;
  // A transfer completed (driving thread only).
  void countTransfer(const Task& task) noexcept;
  // A call runs (or is refused); `writer` 0: the driving thread, 1: the thread that holds the
  // shared-memory runner in runShared.
  void countCall(const CallInfo& info, int writer) noexcept;
  // What the calls in flight wait for, written at most every kNotePeriod while they sleep.
  void noteWaits(Clock::time_point now);
  void noteWait(const Execution& execution, std::int64_t nowNs);
  void timeOut(Execution& execution);
  void retire();
  void progressLoop();
  void lockDrive();
  void unlockDrive();
  // Another thread drives: waits for `execution` to end, for drive_ (true: taken) or for
  // `until`.
  bool awaitDrive(const std::shared_ptr<Execution>& execution,
                  std::optional<Clock::time_point> until = std::nullopt);
  void wakeWaiters();

  // Scratch buffers outlive calls: allocating (and page-faulting) megabytes per call would
  // cost more than a large collective's reduction. Driver only (drive_), as is the pool.
  std::unique_ptr<std::uint8_t[]> takeScratch(std::uint64_t bytes, std::uint64_t& capacity);
  void giveScratch(std::unique_ptr<std::uint8_t[]> buffer, std::uint64_t capacity);

  std::unique_ptr<transport::Mesh> mesh_;
  EngineOptions options_;
  std::shared_ptr<Recorder> recorder_;
  Clock::time_point nextNote_{};
  std::shared_ptr<Tracer> tracer_;
  // The counters of stats(). Each written by one thread at a time (a relaxed load and store:
  // no locked instruction on a call's path), except failedCalls_ (any caller's thread).
  struct PeerCounters {
    std::atomic<std::uint64_t> messages[2];  // [0] sent, [1] received
    std::atomic<std::uint64_t> bytes[2];
  };
  std::unique_ptr<PeerCounters[]> traffic_;
  struct CallCounters {
    std::atomic<std::uint64_t> calls{0};
    std::atomic<std::uint64_t> bytes{0};
  };
  std::unique_ptr<CallCounters[]> calls_[2];  // by countCall's writer: one writer each
  std::atomic<std::uint64_t> failedCalls_{0};
  std::atomic<std::uint64_t> waitedNs_{0};
  // The shared-memory calls, by lane (driver only but for `claimed`): the group and its
  // runner, and the calls in the order they run; the first is running when `running` is it.
  struct Lane {
    transport::SharedGroup* group = nullptr;
    std::unique_ptr<transport::SharedGroup> owned;  // a sub-group's
    std::unique_ptr<shared::Runner> runner;
    std::atomic<bool> claimed{false};
    std::atomic<std::thread::id> blockingCaller{};  // a blocking call runs in the runner
    std::deque<Execution*> queue;
    Execution* running = nullptr;
    std::int64_t beganNs = 0;                  // traced: when the running nonblocking call started
    bool removed = false;                      // goes once its calls end
    std::atomic<bool> removeRequested{false};  // removeSharedGroup(), until the driver saw it
  };
  Lane lanes_[kLanes];
  int sharedCalls_ = 0;  // queued in every lane (driver only)
  Lane& laneOf(const Execution& execution) noexcept;
  Clock::time_point nextPeerCheck_{};
  std::vector<std::pair<std::uint64_t, std::unique_ptr<std::uint8_t[]>>> scratchPool_;  // drive_

  std::mutex drive_;  // whoever holds it drives progress
  std::atomic<bool> failSoon_{false};
  std::mutex failSoonMutex_;
  std::exception_ptr failSoonError_;  // failSoonMutex_
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
