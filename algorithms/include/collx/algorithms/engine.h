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

#include "collx/algorithms/call.h"
#include "collx/algorithms/observers.h"
#include "collx/algorithms/schedule.h"
#include "collx/transport/mesh.h"

namespace collx::algorithms {

struct ScheduleParams;
class Execution;
namespace shm {
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
  // Call counters (CallNotes::counter, EngineStats::calls).
  std::size_t callCounters = 0;
  // Called on the driving thread as each send or receive of a call is posted, with the
  // engine's rank, the call and the transfer's step (a shared-memory algorithm's call: once,
  // step 0, when it is ready to run): the fault injector's hook (COLLX_FAULT's collective
  // steps). Empty: nothing is called (one test per posted transfer).
  std::function<void(int rank, const CallInfo& call, std::uint32_t step)> onStep;
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

  // Thread-safe: fails every call in flight and every later call with Aborted (stop()).
  void abort(const std::string& why);
  // Thread-safe: as abort(), with an error of `kind` naming `culprit` (Mesh::stop). Where no
  // thread drives (an idle context) the mesh fails at once, which tells every peer.
  void stop(ErrorKind kind, int culprit, const std::string& why);
  // The survivors go on over the same connections in `generation` (Mesh::reform): waits
  // (until `deadline`: TimeoutError) for every call of the old generation to end, all of
  // which fail (the mesh fails first if it had not), then reforms the mesh. Thread-safe;
  // a call started meanwhile fails with the old generation's error.
  void reform(std::int64_t generation, const std::vector<bool>& keep, Clock::time_point deadline);
  // After reform(): the pairs with `peers` (mesh ranks) end after all (Mesh::drop), taken as
  // reform() takes the driving thread's lock; nothing of the new generation may be in flight.
  void drop(const std::vector<int>& peers, const std::string& why, Clock::time_point deadline);
  // After reform(), once every member re-formed (Mesh::resume), taken as reform() takes the
  // driving thread's lock.
  void resume(Clock::time_point deadline);
  // Newcomers fill the mesh's places `slots` in this generation (Mesh::joinAddress/admit):
  // the driving thread's, taken as reform() takes it; nothing may be in flight.
  std::string joinAddress(bool listen, Clock::time_point deadline);
  void welcome(const std::vector<int>& slots, const std::vector<std::string>& addresses,
               Clock::time_point deadline);
  // The mesh's generation (Mesh::generation): a context of another is over.
  std::int64_t generation() const noexcept { return mesh_->generation(); }
  // The error that failed this engine, if any.
  std::exception_ptr failure() const { return mesh_->failure(); }
  // The flight recorder (nullptr when off): the calls admitted, shared with whoever reads it
  // while the engine runs.
  const std::shared_ptr<Recorder>& recorder() const noexcept { return observers_.recorder(); }
  // The trace every later call is written to (COLLX_TRACE; nullptr: none). Set once, before
  // the first call that should be traced; the engine keeps it until it goes away.
  void setTracer(std::shared_ptr<Tracer> tracer) noexcept {
    observers_.setTracer(std::move(tracer));
  }
  // Thread-safe: the counters so far (relaxed reads: each is exact, together they may be a
  // moment apart).
  EngineStats stats() const;
  // Counts from zero again (while no call is in flight: the API does at the end of connect,
  // so that its own messages are not counted).
  void resetStats() noexcept;

 private:
  // The driving thread's lock (reform, joinAddress, welcome): a thread still in a failed call
  // lets go within a wait's check; TimeoutError (naming `op`) past `deadline`.
  std::unique_lock<std::mutex> takeDrive(Clock::time_point deadline, const char* op);
  friend class Execution;
  class DriveLock;
  struct Lane;
  // A lane's runner is one call's at a time: a blocking call's on its own thread, or the
  // queued calls' under the drive lock.
  static bool claimShared(Lane& lane) noexcept;
  void releaseShared(Lane& lane) noexcept;
  // How a failed wait of the lane's group fails the mesh.
  void setFailMesh(Lane& lane);
  // Lane 0 takes the mesh's shared-memory group (after a reform or a drop: a new one, or none).
  void takeMeshGroup();
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
  // One drive round, the same for every thread that drives (holding drive_), in two halves.
  // First the work handed over, the calls started, what is ready and the calls that ended;
  // `lastActivity` is set when anything moved.
  void moveReady(Clock::time_point& lastActivity);
  // Then, after the caller's deadlines: the periodic look at the shared-memory group's
  // members (checkSharedPeers), and one progress round of the mesh sleeping up to `wait`
  // (noting first, when it sleeps, what the calls wait for).
  void progressRound(std::chrono::microseconds wait, bool tryDirect, Clock::time_point now,
                     Clock::time_point& lastActivity);
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
  // What the calls in flight wait for, written at most every kNotePeriod while they sleep.
  void noteWaits(Clock::time_point now);
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
  // The recorder, the trace and the counters: told what happens to each call.
  Observers observers_;
  // The shared-memory calls, by lane (driver only but for `claimed`): the group and its
  // runner, and the calls in the order they run; the first is running when `running` is it.
  struct Lane {
    transport::SharedGroup* group = nullptr;
    std::unique_ptr<transport::SharedGroup> owned;  // a sub-group's
    std::unique_ptr<shm::Runner> runner;
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
