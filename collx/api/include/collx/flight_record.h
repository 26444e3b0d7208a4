// FlightEntry: one call as a context's flight recorder holds it (Context::flightRecord()).
//
// Every context keeps its last COLLX_TRACE_BUFFER calls (1024 by default; 0 turns the
// recorder off): what each call is, the state it is in, what it waits for while it waits,
// and when each of those changed. Reading it never blocks a call.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "collx/base/data_type.h"
#include "collx/base/error.h"

namespace collx {

enum class CallState {
  kQueued,  // started nonblocking, not running yet
  kRunning,
  kWaiting,  // running, and waiting for a peer (waitingFor) for more than a millisecond
  kCompleted,
  kFailed,
};
// "queued", "running", "waiting", "completed", "failed".
const char* callStateName(CallState state) noexcept;

struct FlightEntry {
  using Time = std::chrono::system_clock::time_point;

  std::uint64_t id = 0;  // unique in this context: a collective's is its seq + 1
  // A collective's sequence number (the same call has the same one on every rank, in the
  // order calls are made); a send's or receive's tag.
  std::uint64_t seq = 0;
  bool collective = true;  // false: a send or a receive
  std::string name;        // "allreduce", "broadcast", ..., "send", "recv"
  std::string algorithm;   // "ring", "shm", ...; "" for a send or receive
  DataType dtype = DataType::kUint8;
  std::string op;           // "sum", ...: reductions only, else ""
  std::uint64_t count = 0;  // elements, as the ranks agree on them (the call's fingerprint)
  int root = -1;            // broadcast, reduce, gather, scatter; else -1
  int peer = -1;            // a send's or receive's peer; else -1
  std::vector<std::string> transports;  // the media its messages use ("shm", "tcp", ...)
  CallState state = CallState::kRunning;
  // While it waits (state kWaiting): for which rank, what ("send", "recv"; "shm": the rank's
  // next use of the shared-memory buffers), at which step of how many (steps 0: not a
  // schedule of steps), how many bytes (shm: the use awaited), since when.
  int waitingFor = -1;
  std::string waitingWhat;
  std::uint32_t step = 0;
  std::uint32_t steps = 0;
  std::uint64_t waitingBytes = 0;
  std::optional<Time> waitingSince;
  Time started;                 // admitted (times are this host's clock)
  std::optional<Time> running;  // when it began to run (nonblocking calls queue first)
  std::optional<Time> ended;
  std::chrono::milliseconds timeout{0};
  std::optional<ErrorKind> error;  // failed: its kind, and its message if still kept
  std::string errorText;

  // "allreduce#812 (ring, float32 x 4194304)", "send#9 (peer 1, int32 x 10)".
  std::string describe() const;
};

}  // namespace collx
