#include "collx/algorithms/engine.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include "collx/algorithms/reduce.h"
#include "collx/base/check.h"
#include "collx/base/copy.h"
#include "collx/base/log.h"
#include "shm/runner.h"

namespace collx::algorithms {

namespace {
// A waiting thread wakes at least this often to check its deadline.
constexpr std::chrono::milliseconds kMaxPollSlice(20);
// Looks at a shared-memory member's use per pass of the progress loop.
constexpr int kSharedLooks = 16;
// How often a waiting collective looks whether a member of the shared-memory group runs its
// call through shared memory (checkSharedPeers).
constexpr std::chrono::milliseconds kPeerCheckPeriod(10);
}  // namespace

std::string callName(const CallInfo& info) {
  if (info.algorithm == nullptr) {
    return std::string(info.collective) + "(peer " + std::to_string(info.peer) + ", tag " +
           transport::seqText(info.key.seq) + ")";
  }
  return std::string(info.collective) + "(" + info.algorithm + ", seq " +
         transport::seqText(info.key.seq) + ")";
}

// One call of a schedule: its bound buffers, the state of every task, its outcome.
class Execution : public std::enable_shared_from_this<Execution> {
 public:
  Execution(Engine& engine, std::shared_ptr<const Schedule> schedule, const Bindings& bindings,
            CallInfo info, bool async)
      : engine_(engine),
        schedule_(std::move(schedule)),
        info_(std::move(info)),
        async_(async),
        input_(static_cast<const std::uint8_t*>(bindings.input)),
        output_(static_cast<std::uint8_t*>(bindings.output)) {
    const auto& tasks = schedule_->tasks();
    remaining_.resize(tasks.size());
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      remaining_[i] = tasks[i].depCount;
      if (remaining_[i] == 0) ready_.push_back(static_cast<TaskId>(i));
    }
    requests_.resize(tasks.size());
    shared_ = schedule_->sharedParams() != nullptr;
    if (tasks.empty()) finish();  // nothing to do (a world of one, an empty message)
  }

  // Its scratch, from the engine's pool when it becomes active, back to the pool when it
  // retires (driver only: the pool needs no lock of its own).
  void takeScratch() {
    if (schedule_->scratchBytes() > 0 && !scratch_) {
      scratch_ = engine_.takeScratch(schedule_->scratchBytes(), scratchCapacity_);
    }
  }
  void giveScratch() {
    if (scratch_) engine_.giveScratch(std::move(scratch_), scratchCapacity_);
  }
  Execution(const Execution&) = delete;
  Execution& operator=(const Execution&) = delete;

  bool finished() const noexcept { return finished_.load(std::memory_order_acquire); }
  const CallInfo& info() const noexcept { return info_; }
  // Its schedule is a shared-memory call (TaskKind::kShared), which the engine runs.
  bool shared() const noexcept { return shared_; }
  // That task's dependencies are done: its turn may come.
  bool sharedReady() const noexcept { return sharedTask_ != kNoTask; }
  const ScheduleParams& sharedParams() const { return *schedule_->sharedParams(); }
  Bindings bindings() const { return Bindings{input_, output_}; }
  // The engine ran the shared-memory task to its end.
  void sharedDone() { done(sharedTask_); }
  bool async() const noexcept { return async_; }
  bool failed() const noexcept { return error_.has_value(); }
  // The call's error, or null: a new exception object on every call, so that threads that
  // rethrow it never share one (its count of owners lives in the uninstrumented C++ runtime,
  // which ThreadSanitizer cannot see: a waiter's catch and the driver's release of a shared
  // object read as a race).
  std::exception_ptr error() const noexcept {
    if (!error_) return nullptr;
    try {
      throwError(error_->kind(), error_->where(), error_->detail());
    } catch (...) {
      return std::current_exception();
    }
  }

  // Runs every ready task (posts transfers, computes reductions and copies).
  void pump() {
    if (info_.notes.tracer != nullptr) {
      pumpTasks<true>();
    } else {
      pumpTasks<false>();
    }
  }

  // (Traced: each task's times go to the trace; the branch is per pump, not per task.)
  template <bool kTraced>
  void pumpTasks() {
    const auto& tasks = schedule_->tasks();
    while (!ready_.empty() && !finished()) {
      TaskId id = ready_.front();
      ready_.pop_front();
      const Task& t = tasks[id];
      switch (t.kind) {
        case TaskKind::kSend:
        case TaskKind::kRecv: {
          if (engine_.options_.onStep) [[unlikely]]
            engine_.options_.onStep(engine_.rank(), info_, t.step);
          Transfer& r = requests_[id];
          r.execution = this;
          r.task = id;
          r.kind = t.kind == TaskKind::kSend ? transport::Request::Kind::kSend
                                             : transport::Request::Kind::kRecv;
          r.peer = t.peer;
          r.data = t.kind == TaskKind::kSend ? const_cast<std::uint8_t*>(pointer(t.src))
                                             : pointer(t.dst);
          r.length = t.bytes;
          r.key = transport::MessageKey{info_.key.seq, t.step, info_.key.space};
          r.fingerprint = info_.fingerprint;
          ++outstanding_;
          r.posted = true;
          if constexpr (kTraced) r.postedNs = Observers::nowNs();
          engine_.mesh_->post(r);  // may complete inline
          break;
        }
        case TaskKind::kReduce: {
          const std::int64_t began = kTraced ? Observers::nowNs() : 0;
          reduce(pointer(t.dst), pointer(t.a), pointer(t.src), t.count, info_.dtype, info_.op);
          if constexpr (kTraced) computed(Tracer::Compute::kReduce, t.count, began);
          done(id);
          break;
        }
        case TaskKind::kCopy: {
          const std::int64_t began = kTraced ? Observers::nowNs() : 0;
          if (t.bytes > 0 && pointer(t.dst) != pointer(t.src)) {
            std::uint8_t* dst = pointer(t.dst);
            const std::uint8_t* src = pointer(t.src);
            if (dst + t.bytes <= src || src + t.bytes <= dst) {
              copyBytes(dst, src, t.bytes);
            } else {
              std::memmove(dst, src, t.bytes);
            }
          }
          if constexpr (kTraced) Observers::computed(info_, Tracer::Compute::kCopy, t.bytes, began);
          done(id);
          break;
        }
        case TaskKind::kDivide: {
          const std::int64_t began = kTraced ? Observers::nowNs() : 0;
          divideBy(pointer(t.dst), t.count, info_.dtype,
                   info_.divisor != 0 ? info_.divisor : static_cast<std::uint64_t>(engine_.size()));
          if constexpr (kTraced) computed(Tracer::Compute::kDivide, t.count, began);
          done(id);
          break;
        }
        case TaskKind::kShared:
          if (engine_.options_.onStep) [[unlikely]]
            engine_.options_.onStep(engine_.rank(), info_, 0);
          sharedTask_ = id;  // Engine::pumpShared runs it in its turn
          break;
      }
    }
  }

  // The call failed: reword the root cause in this call's terms and end it.
  void fail(const Error& cause) {
    if (finished()) return;
    try {
      throwError(cause.kind(), Where{engine_.rank(), callName(info_), cause.peer()},
                 cause.detail() + engine_.observers_.hangNote(info_));
    } catch (const Error& e) {
      error_.emplace(e);
    }
    ready_.clear();
    finish();
  }

  // What this call waits for, to the flight recorder: the posted transfer of the lowest step
  // (a receive before a send), or the group member a shared-memory call waits for.
  void noteWait(std::int64_t nowNs) const {
    const auto& tasks = schedule_->tasks();
    const Task* first = nullptr;
    std::uint32_t steps = 0;
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      const Task& t = tasks[i];
      if (t.kind != TaskKind::kSend && t.kind != TaskKind::kRecv) continue;
      steps = std::max(steps, t.step + 1);
      if (!requests_[i].posted || requests_[i].completed) continue;
      if (first == nullptr || t.step < first->step ||
          (t.step == first->step && t.kind == TaskKind::kRecv)) {
        first = &t;
      }
    }
    if (first == nullptr) return;
    Observers::waiting(info_, first->kind == TaskKind::kSend ? WaitKind::kSend : WaitKind::kRecv,
                       first->peer, first->step, steps, first->bytes, nowNs);
  }

  // The peers and steps this call still waits for, for a timeout message.
  std::string pendingDescription() const {
    if (shared_) return engine_.sharedPending(*this);
    std::map<int, std::string> byPeer;
    const auto& tasks = schedule_->tasks();
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      const Task& t = tasks[i];
      if ((t.kind != TaskKind::kSend && t.kind != TaskKind::kRecv) || !requests_[i].posted)
        continue;
      if (requests_[i].completed) continue;
      std::string& text = byPeer[t.peer];
      if (!text.empty()) {
        if (text.size() < 200) text += ", ";
        if (text.size() < 200) text += "...";
        continue;
      }
      text = std::string(t.kind == TaskKind::kSend ? "send" : "recv") + " step " +
             std::to_string(t.step) + ", " + std::to_string(t.bytes) + " bytes";
    }
    std::string out;
    for (const auto& [peer, what] : byPeer) {
      if (!out.empty()) out += "; ";
      out += "rank " + std::to_string(peer) + " (" + engine_.mesh_->describePeer(peer) + ": " +
             what + ")";
    }
    return out.empty() ? std::string("its own tasks") : out;
  }

  int firstPendingPeer() const {
    if (shared_) return engine_.sharedPendingPeer(*this);
    const auto& tasks = schedule_->tasks();
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      if (requests_[i].posted && !requests_[i].completed) return tasks[i].peer;
    }
    return -1;
  }

 private:
  struct Transfer final : transport::Request {
    Execution* execution = nullptr;
    TaskId task = 0;
    bool posted = false;
    bool completed = false;
    std::int64_t postedNs = 0;  // traced calls only
    void onComplete(const Error* error) override {
      completed = true;
      execution->onTransferDone(task, error);
    }
  };

  std::uint8_t* pointer(const BufferRef& ref) {
    switch (ref.buffer) {
      case Buffer::kInput:
        return const_cast<std::uint8_t*>(input_) + ref.offset;
      case Buffer::kOutput:
        return output_ + ref.offset;
      case Buffer::kScratch:
        return scratch_.get() + ref.offset;
    }
    return nullptr;
  }

  void onTransferDone(TaskId id, const Error* error) {
    --outstanding_;
    engine_.observers_.transferDone(info_, schedule_->tasks()[id], requests_[id].postedNs,
                                    error != nullptr);
    if (error != nullptr) {
      fail(*error);
      return;
    }
    done(id);
  }

  // A reduction or division of `count` elements, begun at `began`, to the trace.
  void computed(Tracer::Compute kind, std::uint64_t count, std::int64_t began) const {
    Observers::computed(info_, kind, count * dataTypeSize(info_.dtype), began);
  }

  void done(TaskId id) {
    if (finished()) return;
    const Task& t = schedule_->tasks()[id];
    const auto& dependents = schedule_->dependents();
    for (std::uint32_t i = 0; i < t.dependentCount; ++i) {
      TaskId d = dependents[t.firstDependent + i];
      if (--remaining_[d] == 0) ready_.push_back(d);
    }
    if (++completed_ == schedule_->tasks().size()) finish();
  }

  void finish() {
    engine_.observers_.ended(info_, error_ ? &*error_ : nullptr);
    // (Sequentially consistent with waiter_: a thread that waits for this call without
    // driving either sees it finished or is told.)
    finished_.store(true);
    if (waiter_.load()) engine_.wakeWaiters();
  }

  friend class Engine;
  Engine& engine_;
  std::shared_ptr<const Schedule> schedule_;
  CallInfo info_;
  bool async_;
  const std::uint8_t* input_;
  std::uint8_t* output_;
  std::unique_ptr<std::uint8_t[]> scratch_;
  std::uint64_t scratchCapacity_ = 0;
  std::vector<std::uint32_t> remaining_;
  std::deque<TaskId> ready_;
  std::vector<Transfer> requests_;
  std::size_t completed_ = 0;
  std::size_t outstanding_ = 0;
  std::atomic<bool> finished_{false};
  // A thread waits for it without driving (Engine::awaitDrive); queued_: a blocking call
  // handed to another thread's driving, counted in asyncInFlight_ until it retires.
  std::atomic<bool> waiter_{false};
  bool queued_ = false;
  std::optional<Error> error_;
  static constexpr TaskId kNoTask = ~TaskId{0};
  bool shared_ = false;
  TaskId sharedTask_ = kNoTask;
};

Engine::Engine(std::unique_ptr<transport::Mesh> mesh, const EngineOptions& options)
    : mesh_(std::move(mesh)),
      options_(options),
      observers_(Observers::Options{mesh_->size(), options.traceBuffer, options.callCounters,
                                    options.hangNote}) {
  lanes_[0].group = mesh_->sharedGroup();
  lanes_[0].runner = std::make_unique<shm::Runner>(lanes_[0].group);
  setFailMesh(lanes_[0]);
}

void Engine::setFailMesh(Lane& lane) {
  if (lane.group == nullptr) return;
  // A shared-memory wait that fails fails the mesh as the driving thread would: not while
  // another thread moves bytes through it. (A nonblocking call's waits run on the driving
  // thread itself.)
  lane.group->setFailMesh([this, &lane](const Error& error) {
    if (lane.blockingCaller.load(std::memory_order_relaxed) != std::this_thread::get_id()) {
      mesh_->fail(error);
      return;
    }
    failFromBlockingCall(error);
  });
}

void Engine::failFromBlockingCall(const Error& error) {
  if (drive_.try_lock()) {
    mesh_->fail(error);
    drive_.unlock();
    return;
  }
  // Another thread drives (a blocking call of its own may hold drive_ until its deadline):
  // it fails the mesh with this error in its next round, and this call ends now.
  // (An exception of its own, built anew: a copy would share the message's buffer, whose
  // count the C++ runtime keeps where ThreadSanitizer cannot see it.)
  std::exception_ptr own;
  try {
    throwError(error.kind(), error.where(), std::string(error.detail()));
  } catch (...) {
    own = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(failSoonMutex_);
    if (!failSoonError_) failSoonError_ = std::move(own);
    failSoon_.store(true, std::memory_order_release);
  }
  handToDriver(failSoon_, &Engine::applyFailSoon);
}

void Engine::handToDriver(const std::atomic<bool>& pending, void (Engine::*apply)()) {
  mesh_->wakeup();  // a driver asleep in poll() looks at once
  // Unless the driver let go before it looked: then this thread does it.
  while (pending.load(std::memory_order_acquire)) {
    if (drive_.try_lock()) {
      (this->*apply)();
      drive_.unlock();
      return;
    }
    std::this_thread::yield();
  }
}

void Engine::applyFailSoon() {
  std::exception_ptr failed;
  {
    std::lock_guard<std::mutex> lock(failSoonMutex_);
    failed = std::move(failSoonError_);
    failSoonError_ = nullptr;
    failSoon_.store(false, std::memory_order_release);
  }
  if (!failed) return;
  try {
    std::rethrow_exception(failed);
  } catch (const Error& e) {
    failAll(e);
  }
}

void Engine::addSharedGroup(int lane, std::unique_ptr<transport::SharedGroup> group) {
  if (lane < 1 || lane >= kLanes || group == nullptr) {
    throw std::logic_error("collx: rank " + std::to_string(rank()) + ": addSharedGroup: no lane " +
                           std::to_string(lane));
  }
  // Without the drive lock (another thread's blocking call may hold it until its deadline):
  // the driver looks at a lane's group and runner only once a call of the lane's context
  // was admitted, after this. The lane is free: its slot was (the group that had it let go
  // of it last thing in retireLane).
  Lane& l = lanes_[lane];
  if (l.group != nullptr) {
    throw std::logic_error("collx: rank " + std::to_string(rank()) + ": addSharedGroup: lane " +
                           std::to_string(lane) + " is in use");
  }
  l.runner = std::make_unique<shm::Runner>(group.get());
  l.owned = std::move(group);
  l.group = l.owned.get();
  setFailMesh(l);
}

void Engine::removeSharedGroup(int lane) {
  if (lane < 1 || lane >= kLanes) return;
  // As failFromBlockingCall: the driver retires it in its next round, or this thread does
  // when nobody drives.
  lanes_[lane].removeRequested.store(true, std::memory_order_release);
  retireRequested_.store(true, std::memory_order_release);
  handToDriver(lanes_[lane].removeRequested, &Engine::retireRequested);
}

void Engine::retireRequested() {
  retireRequested_.store(false, std::memory_order_relaxed);
  for (Lane& lane : lanes_) {
    if (!lane.removeRequested.load(std::memory_order_acquire)) continue;
    lane.removed = true;
    retireLane(lane);
    lane.removeRequested.store(false, std::memory_order_release);
  }
}

void Engine::retireLane(Lane& lane) noexcept {
  if (!lane.removed || !lane.queue.empty()) return;
  lane.removed = false;
  lane.runner.reset();
  lane.group = nullptr;
  // Last: its destructor lets go of the slot, which a split may then take for this lane.
  lane.owned.reset();
}

Engine::Lane& Engine::laneOf(const Execution& execution) noexcept {
  const int lane = execution.info().lane;
  return lanes_[lane >= 0 && lane < kLanes ? lane : 0];
}

std::unique_ptr<std::uint8_t[]> Engine::takeScratch(std::uint64_t bytes, std::uint64_t& capacity) {
  {
    // The smallest pooled buffer that is large enough.
    std::size_t best = scratchPool_.size();
    for (std::size_t i = 0; i < scratchPool_.size(); ++i) {
      if (scratchPool_[i].first >= bytes &&
          (best == scratchPool_.size() || scratchPool_[i].first < scratchPool_[best].first)) {
        best = i;
      }
    }
    if (best < scratchPool_.size()) {
      capacity = scratchPool_[best].first;
      auto buffer = std::move(scratchPool_[best].second);
      scratchPool_.erase(scratchPool_.begin() + static_cast<std::ptrdiff_t>(best));
      return buffer;
    }
  }
  capacity = bytes;
  return std::make_unique<std::uint8_t[]>(bytes);
}

void Engine::giveScratch(std::unique_ptr<std::uint8_t[]> buffer, std::uint64_t capacity) {
  constexpr std::size_t kPooled = 8;
  if (scratchPool_.size() >= kPooled) {
    // Keep the larger buffers.
    auto smallest =
        std::min_element(scratchPool_.begin(), scratchPool_.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
    if (smallest->first >= capacity) return;
    scratchPool_.erase(smallest);
  }
  scratchPool_.emplace_back(capacity, std::move(buffer));
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(stateMutex_);
    stopping_ = true;
  }
  stateChanged_.notify_all();
  mesh_->wakeup();
  if (progressThread_.joinable()) progressThread_.join();
  std::lock_guard<std::mutex> drive(drive_);
  Aborted error(Where{rank(), "context destroyed", -1},
                "the context was destroyed while this call was in flight");
  {
    std::lock_guard<std::mutex> lock(stateMutex_);
    for (auto& e : incoming_) active_.push_back(e);
    incoming_.clear();
  }
  if (!active_.empty()) {
    mesh_->fail(error);
    failAll(error);
  }
  for (Lane& lane : lanes_) {
    if (lane.runner) lane.runner->abandon();
    if (lane.running != nullptr) releaseShared(lane);
    lane.running = nullptr;
    lane.queue.clear();
  }
  sharedCalls_ = 0;
  active_.clear();
}

void Engine::lockDrive() {
  // Free (no progress thread in poll()): no wakeup to send, and none for poll() to read back.
  if (drive_.try_lock()) return;
  callersWaiting_.fetch_add(1);
  mesh_->wakeup();  // a progress thread blocked in poll() lets go of drive_
  drive_.lock();
  callersWaiting_.fetch_sub(1);
}

void Engine::unlockDrive() {
  drive_.unlock();
  if (asyncInFlight_.load() > 0) {
    std::lock_guard<std::mutex> lock(stateMutex_);
    stateChanged_.notify_all();
  }
}

// Releases drive_, which the caller took, at the end of a scope (unlockDrive).
class Engine::DriveLock {
 public:
  DriveLock(Engine& engine, std::adopt_lock_t) : engine_(engine) {}
  ~DriveLock() { engine_.unlockDrive(); }
  DriveLock(const DriveLock&) = delete;
  DriveLock& operator=(const DriveLock&) = delete;

 private:
  Engine& engine_;
};

void Engine::wakeWaiters() {
  std::lock_guard<std::mutex> lock(stateMutex_);
  stateChanged_.notify_all();
}

// Another thread drives (a blocking call of its own, which it drives until that call ends,
// or the progress thread): waits until `execution` ends, driven by that thread, or drive_ is
// free, and returns whether it took drive_. Never blocks on drive_ itself: calls of
// different sub-contexts on different threads may each wait for the other's peers, so the
// driver must move this call too (a queued blocking call is admitted like a nonblocking one),
// and a call that ended returns at once.
bool Engine::awaitDrive(const std::shared_ptr<Execution>& execution,
                        std::optional<Clock::time_point> until) {
  execution->waiter_.store(true);
  callersWaiting_.fetch_add(1);  // a progress thread lets go of drive_
  mesh_->wakeup();               // a driver in poll() admits what was queued
  bool took = false;
  {
    std::unique_lock<std::mutex> lock(stateMutex_);
    // (finished_ read sequentially consistent, as finish() reads waiter_.)
    while (!execution->finished_.load()) {
      if (drive_.try_lock()) {
        took = true;
        break;
      }
      const auto now = Clock::now();
      if (until && now >= *until) break;
      // Woken when it ends, when a caller unlocks drive_, or when the progress thread lets
      // go of it (each under stateMutex_: nothing is missed); the slice is a safety net.
      stateChanged_.wait_for(lock, until ? std::min<Clock::duration>(*until - now, kMaxPollSlice)
                                         : Clock::duration(kMaxPollSlice));
    }
  }
  callersWaiting_.fetch_sub(1);
  return took;
}

void Engine::run(std::shared_ptr<const Schedule> schedule, const Bindings& bindings,
                 CallInfo info) {
  if (info.deadline == Clock::time_point::max()) info.deadline = Clock::now() + info.timeout;
  observers_.admitted(info, CallState::kRunning);
  auto execution = std::make_shared<Execution>(*this, std::move(schedule), bindings,
                                               std::move(info), /*async=*/false);
  bool driving = drive_.try_lock();
  if (!driving) {
    // Queued behind the nonblocking calls started before it, for whoever drives.
    execution->queued_ = true;
    asyncInFlight_.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(stateMutex_);
      incoming_.push_back(execution);
    }
    driving = awaitDrive(execution);
  }
  if (driving) {
    DriveLock held(*this, std::adopt_lock);
    if (execution->queued_) {
      driveUntil(*execution, std::nullopt);  // admits it first, unless it ended already
    } else if (!refuseIfFailed(*execution)) {
      admit();  // the nonblocking calls started before it come first
      activate(execution);
      driveUntil(*execution, std::nullopt);
    }
  }
  if (execution->failed()) std::rethrow_exception(execution->error());
}

bool Engine::runShared(const ScheduleParams& params, const Bindings& bindings, CallInfo& info) {
  // (A failed or aborted context: the engine's way refuses the call.) Its lane was added
  // before its context's first call and stays until the context goes.
  if (info.lane < 0 || info.lane >= kLanes) return false;
  Lane& lane = lanes_[info.lane];
  if (asyncInFlight_.load() > 0 || mesh_->stopped() || !claimShared(lane)) return false;
  if (info.generation >= 0 && info.generation != mesh_->generation()) [[unlikely]] {
    releaseShared(lane);
    return false;  // (the engine's way refuses it: its generation is over)
  }
  lane.blockingCaller.store(std::this_thread::get_id(), std::memory_order_relaxed);
  struct Release {
    Engine& engine;
    Lane& lane;
    ~Release() {
      lane.blockingCaller.store(std::thread::id(), std::memory_order_relaxed);
      engine.releaseShared(lane);
    }
  } release{*this, lane};
  observers_.running(info, 1, /*queued=*/false);
  observers_.admitted(info, CallState::kRunning, /*pending=*/true);
  const std::int64_t began = info.notes.tracer != nullptr ? Observers::nowNs() : 0;
  if (options_.onStep) [[unlikely]]
    options_.onStep(rank(), info, 0);
  try {
    lane.runner->start(params, bindings, info, /*blocking=*/true);
  } catch (const Error& e) {
    Observers::admitPending(info);  // before the hang report looks for it
    const std::string note = observers_.hangNote(info);
    if (note.empty()) {
      observers_.ended(info, &e);
      throw;
    }
    const Error noted(e.kind(), e.where(), e.detail() + note);
    observers_.ended(info, &noted);
    throwError(e.kind(), e.where(), noted.detail());
  }
  observers_.sharedEnded(info, began, lane.runner->waiting());
  return true;
}

EngineStats Engine::stats() const {
  EngineStats out = observers_.stats();
  if (const transport::SharedGroup* group = mesh_->sharedGroup()) {
    out.sharedWaited = group->waited();  // (a sub-group's waits are its own)
  }
  return out;
}

void Engine::resetStats() noexcept {
  observers_.resetStats();
  if (transport::SharedGroup* group = mesh_->sharedGroup()) group->resetWaited();
}

void Engine::noteWaits(Clock::time_point now) {
  if (!observers_.waitsDue(now)) return;
  const std::int64_t nowNs = Recorder::nanosOf(now);
  for (const auto& e : active_) {
    const CallInfo& info = e->info();
    if (e->finished() || !Observers::waitedLong(info, now)) continue;
    if (!e->shared()) {
      e->noteWait(nowNs);
    } else if (Lane& lane = laneOf(*e); lane.running == e.get()) {  // else queued
      const auto [member, use] = lane.runner->awaited();
      if (member >= 0) {
        Observers::waiting(info, WaitKind::kShared, lane.group->rankOf(member), 0, 0, use, nowNs);
      }
    }
  }
}

bool Engine::claimShared(Lane& lane) noexcept {
  bool free = false;
  return lane.runner != nullptr &&
         lane.claimed.compare_exchange_strong(free, true, std::memory_order_acq_rel);
}

void Engine::releaseShared(Lane& lane) noexcept {
  lane.claimed.store(false, std::memory_order_release);
  if (asyncInFlight_.load() > 0) mesh_->wakeup();  // a queued call may start
}

std::shared_ptr<Execution> Engine::start(std::shared_ptr<const Schedule> schedule,
                                         const Bindings& bindings, CallInfo info) {
  if (info.deadline == Clock::time_point::max()) info.deadline = Clock::now() + info.timeout;
  observers_.admitted(info, CallState::kQueued);
  auto execution = std::make_shared<Execution>(*this, std::move(schedule), bindings,
                                               std::move(info), /*async=*/true);
  asyncInFlight_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(stateMutex_);
    incoming_.push_back(execution);
    if (!progressThread_.joinable()) progressThread_ = std::thread([this] { progressLoop(); });
  }
  stateChanged_.notify_all();
  mesh_->wakeup();
  return execution;
}

bool Engine::wait(Execution& execution, std::optional<Clock::time_point> until) {
  if (!execution.finished() &&
      (drive_.try_lock() || awaitDrive(execution.shared_from_this(), until))) {
    DriveLock held(*this, std::adopt_lock);
    driveUntil(execution, until);
  }
  if (!execution.finished()) return false;
  if (execution.failed()) std::rethrow_exception(execution.error());
  return true;
}

bool Engine::test(Execution& execution) {
  if (!execution.finished() && drive_.try_lock()) {
    try {
      admit();
      pumpAll();
      if (!execution.finished() && !mesh_->failure()) {
        try {
          mesh_->progress(std::chrono::microseconds(0));
        } catch (const Error& e) {
          failAll(e);
        }
        pumpAll();
      }
      retire();
    } catch (...) {
      unlockDrive();
      throw;
    }
    unlockDrive();
  }
  if (!execution.finished()) return false;
  if (execution.failed()) std::rethrow_exception(execution.error());
  return true;
}

void Engine::abort(const std::string& why) { stop(ErrorKind::kAborted, -1, why); }

void Engine::reform(std::int64_t generation, const std::vector<bool>& keep,
                    Clock::time_point deadline) {
  auto late = [&](const char* what) {
    if (Clock::now() < deadline) return false;
    throw TimeoutError(Where{rank(), "reform", -1},
                       std::string("the calls of the old generation did not end in time: ") + what);
  };
  std::unique_lock<std::mutex> drive = takeDrive(deadline, "reform");
  // The old generation ends here if it had not: every call in flight, and every one started
  // (incoming_), fails with its error.
  if (!mesh_->failure()) {
    failAll(RevokedError(Where{rank(), "reform", -1},
                         "generation " + std::to_string(mesh_->generation()) +
                             " is over: the job goes on in generation " +
                             std::to_string(generation)));
  }
  applyFailSoon();
  admit();
  retire();
  for (Lane& lane : lanes_) {
    // A blocking shared-memory call of the old generation leaves its lane at its next check.
    while (lane.claimed.load(std::memory_order_acquire)) {
      applyFailSoon();  // what its failed wait hands to the driver, which this thread is
      late("a shared-memory call still runs");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (!active_.empty()) {
    throw InvalidArgument(Where{rank(), "reform", -1}, std::to_string(active_.size()) +
                                                           " calls of the old generation have not "
                                                           "ended");
  }
  mesh_->reform(generation, keep);
  // The old generation's shared-memory group is left failed with its device: lane 0 takes the
  // mesh's new one (the members kept, their uses numbered from this generation's first), so
  // nothing of the new generation reads the old one again. A member left out that wakes and
  // goes on in it (a stopped rank, say) publishes only there.
  takeMeshGroup();
}

void Engine::takeMeshGroup() {
  Lane& shared = lanes_[0];
  shared.group = mesh_->sharedGroup();
  shared.runner = std::make_unique<shm::Runner>(shared.group);
  setFailMesh(shared);
}

void Engine::drop(const std::vector<int>& peers, const std::string& why,
                  Clock::time_point deadline) {
  if (peers.empty()) return;
  std::unique_lock<std::mutex> drive = takeDrive(deadline, "reform");
  mesh_->drop(peers, IoError(Where{rank(), "reform", -1}, why));
  takeMeshGroup();  // (its group made again without them)
}

void Engine::resume(Clock::time_point deadline) {
  std::unique_lock<std::mutex> drive = takeDrive(deadline, "reform");
  mesh_->resume();
}

std::unique_lock<std::mutex> Engine::takeDrive(Clock::time_point deadline, const char* op) {
  std::unique_lock<std::mutex> drive(drive_, std::defer_lock);
  while (!drive.try_lock()) {  // a thread still in a failed call lets go within a wait's check
    if (Clock::now() >= deadline) {
      throw TimeoutError(Where{rank(), op, -1},
                         "the calls of the old generation did not end in time: another thread "
                         "still drives progress");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return drive;
}

std::string Engine::joinAddress(bool listen, Clock::time_point deadline) {
  std::unique_lock<std::mutex> drive = takeDrive(deadline, "grow");
  return mesh_->joinAddress(listen);
}

void Engine::welcome(const std::vector<int>& slots, const std::vector<std::string>& addresses,
                     Clock::time_point deadline) {
  std::unique_lock<std::mutex> drive = takeDrive(deadline, "grow");
  if (!active_.empty()) {
    throw InvalidArgument(Where{rank(), "grow", -1},
                          std::to_string(active_.size()) + " calls are in flight");
  }
  mesh_->admit(slots, addresses, deadline);
}

void Engine::stop(ErrorKind kind, int culprit, const std::string& why) {
  mesh_->stop(kind, culprit, why);
  // A driver applies it in its next round (it was woken); with none, this thread does.
  std::unique_lock<std::mutex> drive(drive_, std::try_to_lock);
  if (!drive.owns_lock()) return;
  try {
    if (mesh_->applyAbort()) std::rethrow_exception(mesh_->failure());
  } catch (const Error& e) {
    failAll(e);
  }
}

std::exception_ptr Engine::errorOf(const Execution& execution) {
  return execution.finished() ? execution.error() : nullptr;
}

// After a failure the context takes no more work: a new call ends at once with the first
// error, worded for it. Returns true when it refused the call.
bool Engine::refuseIfFailed(Execution& execution) {
  const std::int64_t generation = execution.info().generation;
  if (generation >= 0 && generation != mesh_->generation()) [[unlikely]] {
    observers_.refused(execution.info());
    execution.fail(RevokedError(Where{rank(), callName(execution.info()), -1},
                                "generation " + std::to_string(generation) +
                                    " of this context is over: the job went on "
                                    "in generation " +
                                    std::to_string(mesh_->generation()) + " (Context::shrink)"));
    return true;
  }
  // (An abort asked for takes effect here too: a call whose messages are there already
  // would otherwise complete without a progress() that fails it.)
  if (!mesh_->applyAbort()) return false;
  std::exception_ptr failed = mesh_->failure();
  observers_.refused(execution.info());
  try {
    std::rethrow_exception(failed);
  } catch (const Error& e) {
    execution.fail(
        Error(e.kind(), e.where(),
              "the context failed earlier and takes no more work: " + std::string(e.what())));
  }
  return true;
}

// Collectives in flight, for the transport's early mismatch check (driver only).
void Engine::registerActive(const Execution& execution) {
  if (execution.info().key.space == transport::Space::kCollective) {
    mesh_->link().addActive(execution.info().key.seq, execution.info().fingerprint);
  }
}

// Moves started nonblocking calls into the active set, in the order they were started
// (driver only).
void Engine::admit() {
  // None started (a nonblocking call counts itself before it joins incoming_): no lock.
  if (asyncInFlight_.load() == 0) return;
  std::deque<std::shared_ptr<Execution>> arrived;
  {
    std::lock_guard<std::mutex> lock(stateMutex_);
    if (incoming_.empty()) return;
    arrived.swap(incoming_);
  }
  for (auto& execution : arrived) {
    if (refuseIfFailed(*execution)) {
      asyncInFlight_.fetch_sub(1);
      continue;
    }
    activate(std::move(execution));
  }
}

void Engine::activate(std::shared_ptr<Execution> execution) {
  observers_.running(execution->info(), 0, /*queued=*/execution->async());
  execution->takeScratch();
  registerActive(*execution);
  if (execution->shared()) {
    laneOf(*execution).queue.push_back(execution.get());
    ++sharedCalls_;
  }
  active_.push_back(std::move(execution));
}

bool Engine::pumpAll() {
  // Pumping may complete transfers inline, which readies more tasks: loop until quiet.
  for (auto& execution : active_) {
    try {
      execution->pump();
    } catch (const Error& e) {
      failAll(e);
      return true;
    }
  }
  return sharedCalls_ > 0 && pumpShared();
}

bool Engine::pumpShared() {
  bool moved = false;
  for (Lane& lane : lanes_) {
    if (!lane.queue.empty() && pumpLane(lane)) moved = true;
  }
  return moved;
}

bool Engine::pumpLane(Lane& lane) {
  bool moved = false;
  while (!lane.queue.empty()) {
    Execution& e = *lane.queue.front();
    if (e.finished()) {  // it failed
      dropEnded(lane);
      continue;
    }
    if (!e.sharedReady()) break;
    bool ended = false;
    try {
      if (lane.running != &e) {
        if (!claimShared(lane)) break;  // a blocking call runs on its own thread
        lane.running = &e;
        if (e.info().notes.tracer != nullptr) lane.beganNs = Observers::nowNs();
        ended = lane.runner->start(e.sharedParams(), e.bindings(), e.info(), /*blocking=*/false);
      } else {
        ended = lane.runner->poll(kSharedLooks);
      }
    } catch (const Error& error) {
      failAll(error);  // the call's wait failed the mesh already
      return true;
    }
    if (!ended) break;
    Observers::sharedRan(e.info(), lane.beganNs);
    moved = true;
    lane.running = nullptr;
    releaseShared(lane);
    lane.queue.pop_front();
    --sharedCalls_;
    e.sharedDone();
  }
  retireLane(lane);
  return moved;
}

void Engine::dropEndedShared() noexcept {
  if (sharedCalls_ == 0) return;
  for (Lane& lane : lanes_) {
    if (!lane.queue.empty()) dropEnded(lane);
  }
}

void Engine::dropEnded(Lane& lane) noexcept {
  const std::size_t before = lane.queue.size();
  while (!lane.queue.empty() && lane.queue.front()->finished()) {
    if (lane.running == lane.queue.front()) {
      lane.runner->abandon();
      lane.running = nullptr;
      releaseShared(lane);
    }
    lane.queue.pop_front();
  }
  // A failure fails every call: the ones behind end too, before they ran.
  std::erase_if(lane.queue, [](Execution* e) { return e->finished(); });
  sharedCalls_ -= static_cast<int>(before - lane.queue.size());
  retireLane(lane);
}

std::string Engine::sharedPending(const Execution& execution) {
  Lane& lane = laneOf(execution);
  if (lane.running == &execution) return lane.runner->waitingFor();
  return "an earlier shared-memory call to end";
}

int Engine::sharedPendingPeer(const Execution& execution) {
  Lane& lane = laneOf(execution);
  return lane.running == &execution ? lane.runner->waitingRank() : -1;
}

void Engine::checkSharedPeers() {
  // The member each running call waits for: gone, closed or failed ends the call now, not at
  // its deadline (a blocking call's own waits check this; the engine's calls wait here).
  for (Lane& lane : lanes_) {
    if (lane.running == nullptr) continue;
    const int member = lane.runner->awaited().first;
    if (member < 0) continue;
    const Execution* running = lane.running;
    try {
      lane.group->checkMember(member, [running] { return callName(running->info()); });
    } catch (const Error& e) {
      failAll(e);
      return;
    }
  }
  // Not while this rank has a shared-memory call of the mesh's group: its next use is that
  // call's. (Sub-groups are not asked: a mismatch there ends at the call's deadline.)
  Lane& lane = lanes_[0];
  transport::SharedGroup* group = lane.group;
  if (group == nullptr || !lane.queue.empty() || !claimShared(lane)) return;
  const std::uint64_t use = group->nextUse();
  releaseShared(lane);
  for (const auto& execution : active_) {
    const CallInfo& info = execution->info();
    if (execution->finished() || info.key.space != transport::Space::kCollective) continue;
    for (int m = 0; m < group->size(); ++m) {
      if (m == group->index()) continue;
      // The member published the use this rank would take next for this sequence number:
      // it runs this call through shared memory while this rank waits for messages.
      const std::optional<transport::UseHeader> header = group->published(m, use);
      if (!header || header->seq != info.key.seq) continue;
      const transport::MessageKey key{info.key.seq, 0, info.key.space};
      const std::string mine = mesh_->link().describe(key, info.fingerprint);
      const std::string theirs = mesh_->link().describe(key, header->fingerprint);
      const int peer = group->rankOf(m);
      MismatchError error(Where{rank(), callName(info), peer},
                          header->fingerprint != info.fingerprint
                              ? "rank " + std::to_string(rank()) + " expected " + mine +
                                    " from rank " + std::to_string(peer) + ", got " + theirs
                              : "rank " + std::to_string(peer) + " runs " + theirs +
                                    " through shared memory (algorithm shm), rank " +
                                    std::to_string(rank()) + " with " + info.algorithm);
      failAll(error);
      return;
    }
  }
}

// Drops finished calls from the active set (driver only).
void Engine::retire() {
  auto finished = [&](const std::shared_ptr<Execution>& e) {
    if (!e->finished()) return false;
    e->giveScratch();
    if (e->info().key.space == transport::Space::kCollective) {
      mesh_->link().removeActive(e->info().key.seq);
    }
    if (e->async() || e->queued_) asyncInFlight_.fetch_sub(1);
    return true;
  };
  dropEndedShared();
  active_.erase(std::remove_if(active_.begin(), active_.end(), finished), active_.end());
}

void Engine::failAll(const Error& error) {
  mesh_->fail(error);  // fails every transfer in flight (and poisons the mesh)
  for (auto& execution : active_) execution->fail(error);
  dropEndedShared();
  observers_.flush();
}

void Engine::timeOut(Execution& execution) {
  const CallInfo& info = execution.info();
  TimeoutError error(Where{rank(), callName(info), execution.firstPendingPeer()},
                     "timed out after " + std::to_string(info.timeout.count()) +
                         " ms waiting for " + execution.pendingDescription());
  failAll(error);
}

void Engine::moveReady(Clock::time_point& lastActivity) {
  if (failSoon_.load(std::memory_order_acquire)) applyFailSoon();
  if (retireRequested_.load(std::memory_order_acquire)) retireRequested();
  admit();
  if (pumpAll()) lastActivity = Clock::now();
  retire();
}

void Engine::progressRound(std::chrono::microseconds wait, bool tryDirect, Clock::time_point now,
                           Clock::time_point& lastActivity) {
  if (now >= nextPeerCheck_) {
    nextPeerCheck_ = now + kPeerCheckPeriod;
    checkSharedPeers();
  }
  if (wait.count() > 0) noteWaits(now);
  progressSleeping(wait, tryDirect, now, lastActivity);
}

bool Engine::driveUntil(Execution& target, std::optional<Clock::time_point> until) {
  auto lastActivity = Clock::now();
  while (true) {
    moveReady(lastActivity);
    if (target.finished()) return true;
    auto now = Clock::now();
    if (now >= target.info().deadline) {
      timeOut(target);
      retire();
      return true;
    }
    // The other calls it drives (queued blocking calls of other threads, nonblocking ones)
    // time out at their own deadlines, not at the end of this one.
    if (active_.size() > 1) {
      for (const auto& e : active_) {
        if (e.get() != &target && !e->finished() && now >= e->info().deadline) {
          timeOut(*e);
          break;
        }
      }
      retire();
      if (target.finished()) return true;
    }
    if (until && now >= *until) return false;
    std::chrono::microseconds wait(0);
    const auto idle = now - lastActivity;
    const auto spin =
        target.info().spinUs >= 0 ? std::chrono::microseconds(target.info().spinUs) : options_.spin;
    const bool spinning = idle < spin;
    const auto limit = std::min(target.info().deadline, until.value_or(Clock::time_point::max()));
    if (!spinning && idle < spin + options_.yield) {
      std::this_thread::yield();
    } else if (!spinning) {
      wait = std::chrono::duration_cast<std::chrono::microseconds>(
          std::min<Clock::duration>(limit - now, kMaxPollSlice));
      if (wait.count() < 1) wait = std::chrono::microseconds(1);
    }
    progressRound(wait, spinning, now, lastActivity);
  }
}

void Engine::progressSleeping(std::chrono::microseconds wait, bool tryDirect, Clock::time_point now,
                              Clock::time_point& lastActivity) {
  // A nonblocking shared-memory call that waits for a member's use sleeps in the mesh's poll
  // like any other call: the member's publish rings this rank's doorbell (expect()).
  bool expecting[kLanes] = {};
  if (wait.count() > 0 && sharedCalls_ > 0) {
    for (int l = 0; l < kLanes; ++l) {
      Lane& lane = lanes_[l];
      if (lane.running == nullptr) continue;
      const auto [member, use] = lane.runner->awaited();
      if (member < 0) continue;
      expecting[l] = lane.group->expect(member, use);
      if (!expecting[l]) wait = std::chrono::microseconds(0);  // it is there already
    }
  }
  bool moved = false;
  try {
    moved = mesh_->progress(wait, tryDirect);
  } catch (const Error& e) {
    failAll(e);
  }
  // One clock read after the poll: the activity's time, and a wait that may have slept timed
  // from `now` (stats().waited).
  const bool slept = wait.count() > 0;
  if (moved || slept) {
    const Clock::time_point after = Clock::now();
    if (moved) lastActivity = after;
    if (slept) {
      observers_.slept(std::chrono::duration_cast<std::chrono::nanoseconds>(after - now));
    }
  }
  for (int l = 0; l < kLanes; ++l) {
    if (expecting[l]) lanes_[l].group->endExpect();
  }
}

void Engine::progressLoop() {
  log::ScopedLogRank rankTag(rank());
  std::unique_lock<std::mutex> lock(stateMutex_);
  while (!stopping_) {
    stateChanged_.wait(lock, [&] {
      return stopping_ ||
             ((asyncInFlight_.load() > 0 || !incoming_.empty()) && callersWaiting_.load() == 0);
    });
    if (stopping_) break;
    lock.unlock();
    {
      std::lock_guard<std::mutex> drive(drive_);
      auto lastActivity = Clock::now();
      while (!stopping_ && callersWaiting_.load() == 0 && asyncInFlight_.load() > 0) {
        moveReady(lastActivity);
        // Deadlines of the nonblocking calls.
        auto now = Clock::now();
        Execution* expired = nullptr;
        auto earliest = Clock::time_point::max();
        for (auto& e : active_) {
          if (e->finished()) continue;
          if (now >= e->info().deadline) expired = e.get();
          earliest = std::min(earliest, e->info().deadline);
        }
        if (expired != nullptr) {
          timeOut(*expired);
          retire();
          continue;
        }
        if (asyncInFlight_.load() == 0) break;
        // Nobody waits for these calls: no spinning. A shared-memory call's wait yields the
        // core for a while (its members are usually there soon), then sleeps.
        const auto idle = now - lastActivity;
        const bool yielding = sharedCalls_ > 0 && idle < options_.spin + options_.yield;
        std::chrono::microseconds wait(0);
        if (!yielding) {
          wait = std::max(std::chrono::duration_cast<std::chrono::microseconds>(
                              std::min<Clock::duration>(earliest - now, kMaxPollSlice)),
                          std::chrono::microseconds(1));
        }
        progressRound(wait, /*tryDirect=*/true, now, lastActivity);
        if (yielding) std::this_thread::yield();
      }
    }
    lock.lock();
    // A caller waiting in awaitDrive() may take drive_ now.
    if (callersWaiting_.load() > 0) stateChanged_.notify_all();
  }
}

}  // namespace collx::algorithms
