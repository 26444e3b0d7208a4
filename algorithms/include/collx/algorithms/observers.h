// Observers: the engine's one seam for diagnostics. The engine tells them what happens to a
// call (admitted, running, waiting, a transfer done, a computation done, ended) and they keep
// it: the flight recorder (recorder.h, which the hang report reads), the trace (tracer.h,
// COLLX_TRACE) and the counters behind stats(). The engine itself knows none of them.
//
// Threads: the driving thread (the engine's drive lock) calls every hook but the ones marked
// otherwise; a blocking shared-memory call's own thread calls admitted, running (writer 1)
// and ended for that call. The hooks called per task or transfer (running, transferDone, and
// computed only on a traced call) are inline and test one pointer each; the ones called once
// per call (admitted, sharedRan, sharedEnded, ended) are out of line and do what the engine
// did inline before them (measured level with it: the commit that made this seam says so).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collx/algorithms/call.h"
#include "collx/algorithms/recorder.h"
#include "collx/algorithms/schedule.h"
#include "collx/algorithms/tracer.h"

namespace collx {
class Error;
}

namespace collx::transport {
struct Waiting;
}

namespace collx::algorithms {

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
  // Calls and their bytes by CallNotes::counter, counted when they start to run (or are
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

class Observers {
 public:
  struct Options {
    int size = 1;                  // ranks, for the per-peer counters
    std::size_t traceBuffer = 0;   // calls the flight recorder keeps; 0: no recorder
    std::size_t callCounters = 0;  // CallNotes::counter's range
    // Asked when a call fails, with its recorder id: text to append to its error, or "".
    std::function<std::string(std::uint64_t id)> hangNote;
  };
  explicit Observers(Options options);
  Observers(const Observers&) = delete;
  Observers& operator=(const Observers&) = delete;

  // The flight recorder (nullptr when off), shared with whoever reads it.
  const std::shared_ptr<Recorder>& recorder() const noexcept { return recorder_; }
  // The trace every later call is written to (nullptr: none); set once, before the first
  // call that should be traced.
  void setTracer(std::shared_ptr<Tracer> tracer) noexcept { tracer_ = std::move(tracer); }
  // The trace's buffer to its file (a failure: what led to it is not lost).
  void flush();

  // A call is admitted, queued (started nonblocking) or running. `pending`: a short blocking
  // shared-memory call's entry is written when it ends (or admitPending), not now.
  void admitted(CallInfo& info, CallState state, bool pending = false) noexcept;
  // Writes the entry whose admission was left for later (CallNotes::recordPending), before
  // anything else is noted of it. Any thread that runs the call.
  static void admitPending(const CallInfo& info) noexcept;
  // A call starts to run; `writer` 0: the driving thread, 1: the thread that runs a blocking
  // shared-memory call itself. `queued`: it was admitted queued (its recorder entry runs).
  void running(const CallInfo& info, int writer, bool queued) noexcept {
    count(info, writer);
    if (queued && info.notes.recorder != nullptr) {
      info.notes.recorder->running(info.notes.recordId, Recorder::coarseNowNs());
    }
  }
  // A call refused (its context failed earlier): counted as one that ran.
  void refused(const CallInfo& info) noexcept { count(info, 0); }
  // Whether the calls in flight should note what they wait for now (at most every 50 ms,
  // with a recorder); then waiting() for each call older than 1 ms.
  bool waitsDue(Clock::time_point now) noexcept;
  static bool waitedLong(const CallInfo& info, Clock::time_point now) noexcept;
  static void waiting(const CallInfo& info, WaitKind kind, int peer, std::uint32_t step,
                      std::uint32_t steps, std::uint64_t bytes, std::int64_t nowNs) noexcept {
    if (info.notes.recorder == nullptr) return;
    info.notes.recorder->waiting(info.notes.recordId, kind, peer, step, steps, bytes, nowNs);
  }
  // A transfer of `task` completed (or failed), posted at `postedNs` (traced calls only).
  void transferDone(const CallInfo& info, const Task& task, std::int64_t postedNs,
                    bool failed) noexcept {
    if (info.notes.tracer != nullptr) traceTransfer(info, task, postedNs, failed);
    if (failed) return;
    PeerCounters& c = traffic_[static_cast<std::size_t>(task.peer)];
    const int way = task.kind == TaskKind::kRecv ? 1 : 0;
    bump(c.messages[way], 1);
    bump(c.bytes[way], task.bytes);
  }
  // A reduction, copy or division of `bytes` ran from `beganNs` (traced calls only).
  static void computed(const CallInfo& info, Tracer::Compute kind, std::uint64_t bytes,
                       std::int64_t beganNs) noexcept;
  // A shared-memory algorithm's run of a nonblocking call ended, begun at `beganNs`.
  static void sharedRan(const CallInfo& info, std::int64_t beganNs) noexcept;
  // A blocking shared-memory call ran to its end on its own thread (runShared): `waited`, its
  // waits' clock readings, give its times without a clock read of its own.
  void sharedEnded(CallInfo& info, std::int64_t beganNs, const transport::Waiting& waited) noexcept;
  // A call ended: `error` null on success. Any thread that ends a call.
  void ended(const CallInfo& info, const Error* error) noexcept;
  // The hang report's text for a failing call ("" without one).
  std::string hangNote(const CallInfo& info) const;
  // The driving thread slept this long in the mesh's poll.
  void slept(std::chrono::nanoseconds how) noexcept {
    bump(waitedNs_, static_cast<std::uint64_t>(how.count()));
  }
  // Now, on the trace's clock (what `beganNs` and `postedNs` above take).
  static std::int64_t nowNs() noexcept { return Tracer::nowNs(); }

  // Thread-safe: the counters so far (relaxed reads: each exact, together a moment apart);
  // sharedWaited is the caller's to fill.
  EngineStats stats() const;
  void resetStats() noexcept;

 private:
  // A counter that only one thread at a time writes: no locked instruction.
  static void bump(std::atomic<std::uint64_t>& counter, std::uint64_t n) noexcept {
    counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void count(const CallInfo& info, int writer) noexcept {
    if (info.notes.counter >= callCounters_) return;
    CallCounters& c = calls_[writer][info.notes.counter];
    bump(c.calls, 1);
    bump(c.bytes, info.notes.bytes);
  }
  void traceAdmitted(CallInfo& info) noexcept;
  static void traceTransfer(const CallInfo& info, const Task& task, std::int64_t postedNs,
                            bool failed) noexcept;

  int size_;
  std::size_t callCounters_;
  std::function<std::string(std::uint64_t id)> hangNote_;
  std::shared_ptr<Recorder> recorder_;
  std::shared_ptr<Tracer> tracer_;
  Clock::time_point nextNote_{};
  // Each written by one thread at a time (a relaxed load and store: no locked instruction on
  // a call's path), except failedCalls_ (any caller's thread).
  struct PeerCounters {
    std::atomic<std::uint64_t> messages[2];  // [0] sent, [1] received
    std::atomic<std::uint64_t> bytes[2];
  };
  std::unique_ptr<PeerCounters[]> traffic_;
  struct CallCounters {
    std::atomic<std::uint64_t> calls{0};
    std::atomic<std::uint64_t> bytes{0};
  };
  std::unique_ptr<CallCounters[]> calls_[2];  // by writer: one writer each
  std::atomic<std::uint64_t> failedCalls_{0};
  std::atomic<std::uint64_t> waitedNs_{0};
};

}  // namespace collx::algorithms
