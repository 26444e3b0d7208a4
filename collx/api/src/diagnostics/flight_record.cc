// The flight recorder as the API shows it: the engine's Recorder entries in public terms.
#include "collx/flight_record.h"

#include <set>

#include "../runtime.h"
#include "collx/algorithms/recorder.h"
#include "collx/algorithms/registry.h"
#include "collx/base/reduce_op.h"
#include "collx/context.h"

namespace collx {

namespace {

using algorithms::CallRecord;
using algorithms::Collective;
using algorithms::WaitKind;

// The recorder's times are the steady clock's; users read wall-clock times.
struct Clocks {
  std::chrono::system_clock::time_point wall = std::chrono::system_clock::now();
  std::int64_t steadyNs = algorithms::Recorder::nanosOf(std::chrono::steady_clock::now());
  FlightEntry::Time at(std::int64_t ns) const {
    return wall + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                      std::chrono::nanoseconds(ns - steadyNs));
  }
};

FlightEntry entryOf(const CallRecord& r, const Clocks& clocks) {
  FlightEntry e;
  e.id = r.id;
  e.seq = r.seq;
  const auto coll = static_cast<Collective>(r.fingerprint.coll);
  e.collective = r.space == transport::Space::kCollective;
  e.name = e.collective ? collectiveName(coll) : r.algorithm;
  if (e.collective) e.algorithm = r.algorithm;
  if (r.fingerprint.dtype <= static_cast<std::uint8_t>(DataType::kFloat64)) {
    e.dtype = static_cast<DataType>(r.fingerprint.dtype);
  }
  if (e.collective && algorithms::reduces(coll)) {
    e.op = reduceOpKindName(static_cast<ReduceOpKind>(r.fingerprint.op));
  }
  e.count = r.fingerprint.count;
  e.root = e.collective ? r.fingerprint.root : -1;
  e.peer = e.collective ? -1 : r.peer;
  switch (r.state) {
    case algorithms::CallState::kQueued:
      e.state = CallState::kQueued;
      break;
    case algorithms::CallState::kFree:
    case algorithms::CallState::kRunning:
      e.state = r.waitKind == WaitKind::kNone ? CallState::kRunning : CallState::kWaiting;
      break;
    case algorithms::CallState::kCompleted:
      e.state = CallState::kCompleted;
      break;
    case algorithms::CallState::kFailed:
      e.state = CallState::kFailed;
      e.error = static_cast<ErrorKind>(r.errorKind);
      break;
  }
  if (e.state == CallState::kWaiting) {
    e.waitingFor = r.waitPeer;
    e.waitingWhat = r.waitKind == WaitKind::kSend   ? "send"
                    : r.waitKind == WaitKind::kRecv ? "recv"
                                                    : "shm";
    e.step = r.step;
    e.steps = r.steps;
    e.waitingBytes = r.waitBytes;
    e.waitingSince = clocks.at(r.waitSinceNs);
  }
  // A short call admitted without reading a clock, still running: it began a moment ago.
  e.started = r.admittedNs != 0 ? clocks.at(r.admittedNs) : clocks.wall;
  if (r.runningNs != 0) e.running = clocks.at(r.runningNs);
  if (e.state == CallState::kCompleted || e.state == CallState::kFailed) {
    e.ended = e.started + std::chrono::microseconds(r.endedUs);
  }
  e.timeout = std::chrono::milliseconds(r.timeoutMs);
  return e;
}

}  // namespace

const char* callStateName(CallState state) noexcept {
  switch (state) {
    case CallState::kQueued:
      return "queued";
    case CallState::kRunning:
      return "running";
    case CallState::kWaiting:
      return "waiting";
    case CallState::kCompleted:
      return "completed";
    case CallState::kFailed:
      return "failed";
  }
  return "unknown";
}

std::string FlightEntry::describe() const {
  std::string out = name + "#" + std::to_string(seq) + " (";
  if (collective) {
    out += algorithm + ", ";
  } else {
    out += "peer " + std::to_string(peer) + ", ";
  }
  out += std::string(dataTypeName(dtype)) + " x " + std::to_string(count);
  if (root >= 0) out += ", root " + std::to_string(root);
  return out + ")";
}

std::vector<FlightEntry> Context::flightRecord() const {
  std::vector<FlightEntry> out;
  if (!runtime_) return out;
  // A sub-context's calls are in its own recorder.
  const algorithms::Recorder* own =
      runtime_->recorder ? runtime_->recorder.get() : runtime_->engine->recorder().get();
  if (own == nullptr) return out;
  const algorithms::Recorder& recorder = *own;
  const std::vector<CallRecord> records = recorder.snapshot();
  const Clocks clocks;
  const std::vector<std::string> byRank = transports();
  std::set<std::string> used;  // every peer's medium but this rank's own
  for (std::size_t r = 0; r < byRank.size(); ++r) {
    if (static_cast<int>(r) != rank_) used.insert(byRank[r]);
  }
  out.reserve(records.size());
  for (const CallRecord& r : records) {
    FlightEntry e = entryOf(r, clocks);
    e.seq &= transport::kSeqMask;  // a sub-context's number (kSubContextShift) is its own
    if (e.algorithm == "shm") {
      e.transports = {"shm"};
    } else if (!e.collective) {
      if (e.peer >= 0 && e.peer < static_cast<int>(byRank.size())) {
        e.transports = {byRank[static_cast<std::size_t>(e.peer)]};
      }
    } else {
      e.transports.assign(used.begin(), used.end());
    }
    if (e.state == CallState::kFailed) e.errorText = recorder.failureOf(r.id);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace collx
