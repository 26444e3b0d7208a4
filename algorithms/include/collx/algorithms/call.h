// One call as the engine runs it: what it is (CallInfo) and the buffers it is bound to.
// The shared-memory runner and the engine both take these; neither needs the other's header.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "collx/base/data_type.h"
#include "collx/base/reduce_op.h"
#include "collx/transport/message.h"

namespace collx::algorithms {

using Clock = std::chrono::steady_clock;
class Recorder;
class Tracer;

// CallNotes::counter of a call that no counter counts (the library's own).
inline constexpr std::uint32_t kUncounted = ~std::uint32_t{0};

// What the engine's observers (observers.h: the flight recorder, the trace, the counters)
// keep of one call. The caller sets the first four; the observers the rest, when the call is
// admitted.
struct CallNotes {
  // false: the library's own call (connect's agreement), kept out of the flight recorder.
  bool record = true;
  // The flight recorder's entry of this call (recorder nullptr: none). The engine sets its
  // own recorder unless the caller gave one (a sub-context's, whose seqs it numbers).
  Recorder* recorder = nullptr;
  // What owns a recorder the caller gave, kept alive until the call ends (a sub-context may
  // go while its nonblocking call runs on).
  std::shared_ptr<const void> recorderOwner;
  // The call counter it counts under (EngineOptions::callCounters; the API gives them their
  // meaning) and its bytes.
  std::uint32_t counter = kUncounted;
  std::uint64_t bytes = 0;

  std::uint64_t recordId = 0;
  // A short blocking shared-memory call's entry is written once, when the call ends, unless
  // it first sleeps in a wait or fails (Observers::admitPending writes it then).
  mutable bool recordPending = false;
  // The trace this call is written to (nullptr: none) and its span's id.
  Tracer* tracer = nullptr;
  std::uint64_t traceId = 0;
};

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
  // A shared-memory call's lane (Engine::addSharedGroup): 0, the mesh's group; s + 1, the
  // sub-group in slot s.
  int lane = 0;
  // How long a thread driving this call polls before it yields (EngineOptions::spin), where
  // its context's differs from the engine's: a split of ranks that have cores of their own
  // within a job whose ranks outnumber the cores. -1: the engine's.
  std::int32_t spinUs = -1;
  // The generation of the call's context (Engine::generation): a call of another, begun
  // before the survivors went on in a new one (Engine::reform), is refused, never run. -1:
  // not checked (the library's own exchanges while connecting).
  std::int64_t generation = -1;
  // Not what the call is: what its observers keep of it.
  CallNotes notes;
};

// "allreduce(ring, seq 7)", "send(peer 1, tag 9)".
std::string callName(const CallInfo& info);

struct Bindings {
  const void* input = nullptr;
  void* output = nullptr;
};

}  // namespace collx::algorithms
