#include "collx/algorithms/observers.h"

#include <algorithm>
#include <limits>

#include "collx/base/error.h"
#include "collx/transport/shared_group.h"

namespace collx::algorithms {

namespace {
// How often the flight recorder learns what sleeping calls wait for, and how old a call is
// before it does (a call that waits less is not worth a note).
constexpr std::chrono::milliseconds kNotePeriod(50);
constexpr std::chrono::milliseconds kNoteAfter(1);

// A blocking shared-memory call of this many elements (64 KiB of float64) reads the clock
// when it is admitted.
constexpr std::uint64_t kTimedCount = 8 << 10;

std::uint32_t timeoutMsOf(const CallInfo& info) noexcept {
  return static_cast<std::uint32_t>(
      std::clamp<std::int64_t>(info.timeout.count(), 0, std::numeric_limits<std::uint32_t>::max()));
}

// The name the flight recorder keeps for a call's algorithm (point to point: its kind).
const char* recordedAlgorithm(const CallInfo& info) noexcept {
  return info.algorithm != nullptr ? info.algorithm : info.collective;
}

// A call as the flight recorder keeps it.
Recorder::Call recordedCall(const CallInfo& info) noexcept {
  Recorder::Call call;
  call.seq = info.key.seq;
  call.space = info.key.space;
  call.fingerprint = info.fingerprint;
  call.algorithm = recordedAlgorithm(info);
  call.peer = info.peer;
  // A call with a deadline read the clock already. A blocking shared-memory call reads none
  // of its own: a small one gets its times from its waits' readings or, if it never waited,
  // the coarse clock's when it ends (sharedEnded), a large one the coarse clock's now (no
  // system call).
  if (info.deadline != Clock::time_point::max()) {
    call.admittedNs = Recorder::nanosOf(info.deadline - info.timeout);
  } else if (info.fingerprint.count >= kTimedCount) {
    call.admittedNs = Recorder::coarseNowNs();
  }
  call.timeoutMs = timeoutMsOf(info);
  return call;
}

}  // namespace

Observers::Observers(Options options)
    : size_(options.size),
      callCounters_(options.callCounters),
      hangNote_(std::move(options.hangNote)),
      recorder_(options.traceBuffer > 0 ? std::make_shared<Recorder>(options.traceBuffer)
                                        : nullptr),
      traffic_(std::make_unique<PeerCounters[]>(static_cast<std::size_t>(options.size))),
      calls_{std::make_unique<CallCounters[]>(options.callCounters),
             std::make_unique<CallCounters[]>(options.callCounters)} {}

void Observers::flush() {
  if (tracer_) tracer_->flush();
}

void Observers::admitted(CallInfo& info, CallState state, bool pending) noexcept {
  CallNotes& notes = info.notes;
  if (tracer_ && notes.record) traceAdmitted(info);
  // A sub-context's calls come with a recorder of their own (their seqs are its).
  if (notes.recorder == nullptr) notes.recorder = recorder_.get();
  if (notes.recorder == nullptr || !notes.record) {
    notes.recorder = nullptr;
    return;
  }
  // A short blocking collective (no clock read for it), not traced: one write when it ends.
  if (pending && notes.tracer == nullptr && info.key.space == transport::Space::kCollective &&
      info.deadline == Clock::time_point::max() && info.fingerprint.count < kTimedCount) {
    notes.recordId = info.key.seq + 1;
    notes.recordPending = true;
    return;
  }
  notes.recordId = notes.recorder->admit(recordedCall(info), state);
}

void Observers::admitPending(const CallInfo& info) noexcept {
  if (!info.notes.recordPending) return;
  info.notes.recordPending = false;
  info.notes.recorder->admit(recordedCall(info), CallState::kRunning);
}

void Observers::traceAdmitted(CallInfo& info) noexcept {
  Tracer::Call call;
  call.collective = info.collective;
  call.pointToPoint = info.key.space == transport::Space::kPointToPoint;
  call.algorithm = info.algorithm != nullptr ? info.algorithm : "";
  call.seq = info.key.seq;
  call.peer = info.peer;
  call.root = info.fingerprint.root;
  call.dtype = info.dtype;
  call.count = info.fingerprint.count;
  call.bytes = info.notes.bytes;
  info.notes.tracer = tracer_.get();
  info.notes.traceId = tracer_->beginCall(call, Tracer::nowNs());
}

bool Observers::waitsDue(Clock::time_point now) noexcept {
  if (!recorder_ || now < nextNote_) return false;
  nextNote_ = now + kNotePeriod;
  return true;
}

bool Observers::waitedLong(const CallInfo& info, Clock::time_point now) noexcept {
  return info.notes.recorder != nullptr && now - (info.deadline - info.timeout) >= kNoteAfter;
}

void Observers::traceTransfer(const CallInfo& info, const Task& task, std::int64_t postedNs,
                              bool failed) noexcept {
  info.notes.tracer->transfer(info.notes.traceId, task.kind == TaskKind::kSend, task.peer,
                              task.step, task.bytes, postedNs, Tracer::nowNs(), failed);
}

void Observers::computed(const CallInfo& info, Tracer::Compute kind, std::uint64_t bytes,
                         std::int64_t beganNs) noexcept {
  info.notes.tracer->compute(info.notes.traceId, kind, bytes, beganNs, Tracer::nowNs());
}

void Observers::sharedRan(const CallInfo& info, std::int64_t beganNs) noexcept {
  if (info.notes.tracer == nullptr) return;
  info.notes.tracer->shared(info.notes.traceId, info.collective, info.notes.bytes, beganNs,
                            Tracer::nowNs());
}

void Observers::sharedEnded(CallInfo& info, std::int64_t beganNs,
                            const transport::Waiting& waited) noexcept {
  sharedRan(info, beganNs);
  CallNotes& notes = info.notes;
  if (!notes.recordPending) {
    ended(info, nullptr);
    return;
  }
  // Its one write (instead of ended's), with the times its waits read: no clock of its own
  // unless it never waited.
  notes.recordPending = false;
  std::int64_t admittedNs = 0;
  std::int64_t endedNs;
  if (waited.deadline != Clock::time_point::max()) {
    admittedNs = Recorder::nanosOf(waited.deadline - waited.timeout);
    endedNs = Recorder::nanosOf(waited.lastLook);
  } else {
    endedNs = Recorder::coarseNowNs();
  }
  notes.recorder->completed(info.key.seq, info.fingerprint, recordedAlgorithm(info),
                            timeoutMsOf(info), admittedNs, endedNs);
}

void Observers::ended(const CallInfo& info, const Error* error) noexcept {
  const CallNotes& notes = info.notes;
  if (error != nullptr) failedCalls_.fetch_add(1, std::memory_order_relaxed);
  if (notes.tracer != nullptr) {
    notes.tracer->endCall(notes.traceId, info.collective, error != nullptr, Tracer::nowNs());
  }
  if (notes.recorder == nullptr) return;
  admitPending(info);
  if (error != nullptr) notes.recorder->noteFailure(notes.recordId, error->what());
  notes.recorder->end(notes.recordId, error != nullptr,
                      error != nullptr ? static_cast<std::uint8_t>(error->kind()) : 0,
                      Recorder::coarseNowNs());
}

std::string Observers::hangNote(const CallInfo& info) const {
  // (Only for the engine's own recorder: a sub-context's ids are its recorder's.)
  if (!hangNote_ || info.notes.recorder == nullptr || info.notes.recorder != recorder_.get()) {
    return {};
  }
  try {
    return hangNote_(info.notes.recordId);
  } catch (...) {
    return {};
  }
}

EngineStats Observers::stats() const {
  EngineStats out;
  out.peers.resize(static_cast<std::size_t>(size_));
  for (std::size_t r = 0; r < out.peers.size(); ++r) {
    const PeerCounters& c = traffic_[r];
    out.peers[r].messagesSent = c.messages[0].load(std::memory_order_relaxed);
    out.peers[r].bytesSent = c.bytes[0].load(std::memory_order_relaxed);
    out.peers[r].messagesReceived = c.messages[1].load(std::memory_order_relaxed);
    out.peers[r].bytesReceived = c.bytes[1].load(std::memory_order_relaxed);
  }
  out.calls.resize(callCounters_);
  for (std::size_t i = 0; i < out.calls.size(); ++i) {
    for (const auto& writer : calls_) {
      out.calls[i].calls += writer[i].calls.load(std::memory_order_relaxed);
      out.calls[i].bytes += writer[i].bytes.load(std::memory_order_relaxed);
    }
  }
  out.failedCalls = failedCalls_.load(std::memory_order_relaxed);
  out.waited = std::chrono::nanoseconds(waitedNs_.load(std::memory_order_relaxed));
  return out;
}

void Observers::resetStats() noexcept {
  for (std::size_t r = 0; r < static_cast<std::size_t>(size_); ++r) {
    for (int way = 0; way < 2; ++way) {
      traffic_[r].messages[way].store(0, std::memory_order_relaxed);
      traffic_[r].bytes[way].store(0, std::memory_order_relaxed);
    }
  }
  for (const auto& writer : calls_) {
    for (std::size_t i = 0; i < callCounters_; ++i) {
      writer[i].calls.store(0, std::memory_order_relaxed);
      writer[i].bytes.store(0, std::memory_order_relaxed);
    }
  }
  failedCalls_.store(0, std::memory_order_relaxed);
  waitedNs_.store(0, std::memory_order_relaxed);
}

}  // namespace collx::algorithms
