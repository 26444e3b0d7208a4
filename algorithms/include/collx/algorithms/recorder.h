// Recorder: a context's flight recorder, the last calls it ran and what each is doing
// (the engine writes it: Engine::recorder()).
//
// Fixed rings of entries, allocated once. A collective's id is its sequence number + 1 (unique
// already: the context numbers its collectives) and its entry the one at id mod capacity, so
// that its way has no atomic read-modify-write; a send's or receive's id comes from a counter
// of their own ring (ids from 2^63). Nothing on a call's way allocates, locks or makes a
// system call. One thread writes an entry at a time (the thread that runs the call, or the
// engine's driver, which the engine's own locks serialize); any thread may read, never
// blocking a writer: each entry is a seqlock over atomic words (a reader retries while a write
// is in progress, and gives up on an entry after a few tries).
//
// An entry is reused when the ring wraps: writes for an id that no longer owns its entry are
// dropped, and a snapshot lists each entry under the id it holds now.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "collx/transport/message.h"

namespace collx::algorithms {

enum class CallState : std::uint8_t { kFree = 0, kQueued, kRunning, kCompleted, kFailed };
enum class WaitKind : std::uint8_t { kNone = 0, kSend, kRecv, kShared };

// One call as the recorder holds it (a consistent copy).
struct CallRecord {
  std::uint64_t id = 0;
  std::uint64_t seq = 0;  // collectives: the sequence number; point-to-point: the tag
  transport::Space space = transport::Space::kCollective;
  transport::Fingerprint fingerprint;
  const char* algorithm = "";  // static, from the registry; point-to-point: "send", "recv"
  int peer = -1;               // point-to-point: the peer
  CallState state = CallState::kFree;
  std::uint8_t errorKind = 0;  // collx::ErrorKind of a failed call
  // Steady clock; 0 while unknown: a short call may be admitted without reading a clock,
  // and gets its time when it first waits or ends.
  std::int64_t admittedNs = 0;
  std::uint32_t timeoutMs = 0;
  std::uint32_t endedUs = 0;   // after admission (saturating)
  std::int64_t runningNs = 0;  // steady clock; 0 until it runs (queued calls)
  // What it waits for, once it waited long enough to say (waitKind != kNone).
  WaitKind waitKind = WaitKind::kNone;
  int waitPeer = -1;
  std::uint32_t step = 0;
  std::uint32_t steps = 0;
  std::uint64_t waitBytes = 0;  // the message's bytes, or the shared-memory use awaited
  std::int64_t waitSinceNs = 0;
};

class Recorder {
 public:
  // What a call is when it is admitted.
  struct Call {
    std::uint64_t seq = 0;
    transport::Space space = transport::Space::kCollective;
    transport::Fingerprint fingerprint;
    const char* algorithm = "";
    int peer = -1;
    std::int64_t admittedNs = 0;
    std::uint32_t timeoutMs = 0;
  };

  // Keeps the last `capacity` calls (rounded up to a power of two, at least 1).
  explicit Recorder(std::size_t capacity);
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // Collectives it keeps (sends and receives: a quarter as many, at least 16).
  std::size_t capacity() const noexcept { return collectives_.mask + 1; }

  // A new call (queued, or running at once); returns its id (a collective's: its seq + 1).
  std::uint64_t admit(const Call& call, CallState state) noexcept;
  // A collective that ran and ended without ever being admitted (a short blocking call, whose
  // entry is written once, completed: one write instead of two), from admittedNs (0: unknown,
  // it takes endedNs) to endedNs; returns its id.
  std::uint64_t completed(std::uint64_t seq, const transport::Fingerprint& fingerprint,
                          const char* algorithm, std::uint32_t timeoutMs, std::int64_t admittedNs,
                          std::int64_t endedNs) noexcept;
  // A queued call runs.
  void running(std::uint64_t id, std::int64_t nowNs) noexcept;
  // What a running call waits for (written by a thread about to sleep in it); the same wait
  // noted again keeps the time it was first noted.
  void waiting(std::uint64_t id, WaitKind kind, int peer, std::uint32_t step, std::uint32_t steps,
               std::uint64_t bytes, std::int64_t sinceNs) noexcept;
  // The call ended at `nowNs` (failed: with collx::ErrorKind `errorKind`).
  void end(std::uint64_t id, bool failed, std::uint8_t errorKind, std::int64_t nowNs) noexcept;
  // Why a call failed (the failure path only: it locks and allocates); the last few are kept.
  void noteFailure(std::uint64_t id, std::string what);
  // The failure noted for `id`, or "".
  std::string failureOf(std::uint64_t id) const;

  // A steady-clock time as the recorder keeps it (nanoseconds of its epoch).
  static std::int64_t nanosOf(std::chrono::steady_clock::time_point t) noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }
  // The steady clock's time (its timebase, CLOCK_MONOTONIC) at the kernel's tick
  // resolution: read in the vDSO, no system call, a few nanoseconds.
  static std::int64_t coarseNowNs() noexcept {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return std::int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
  }

  // Every call the rings hold, in the order they were admitted (entries being rewritten for
  // longer than a few tries are left out).
  std::vector<CallRecord> snapshot() const;
  // The call with `id`, if the ring still holds it (false: overwritten, torn or never made).
  bool find(std::uint64_t id, CallRecord* out) const;

 private:
  // Words of an entry, all atomics: readers race writers by design. The first cache line
  // holds all that a collective's admission and end write; the second what only some calls
  // write (a send's or receive's tag, a queued call's start, a wait), valid while kColdId
  // is the entry's id, so that an admission leaves it alone.
  enum Word : int {
    kVersion,  // seqlock: odd while a write is in progress
    kId,
    kPacked,    // coll, dtype, op, space, state, errorKind, waitKind (8 bits each)
    kRootPeer,  // root (32) | peer (32)
    kCount,
    kAlgorithm,
    kAdmitted,
    kTimes,  // timeoutMs (32) | endedUs (32)
    kColdId,
    kSeq,      // point-to-point (a collective's is its id - 1)
    kRunning,  // a queued call's start (0: the admission, unless queued)
    kWaitPeer,
    kSteps,  // step (32) | steps (32)
    kWaitBytes,
    kWaitSince,
    kWords
  };
  struct alignas(64) Entry {
    std::array<std::atomic<std::uint64_t>, kWords> w{};
  };

  struct Ring {
    explicit Ring(std::size_t capacity);
    std::unique_ptr<Entry[]> entries;
    std::uint64_t mask;
    Entry& at(std::uint64_t id) const noexcept { return entries[id & mask]; }
  };
  static constexpr std::uint64_t kPointToPoint = std::uint64_t{1} << 63;  // their ids' bit

  const Ring& ringOf(std::uint64_t id) const noexcept {
    return id & kPointToPoint ? pointToPoint_ : collectives_;
  }
  Entry* owned(std::uint64_t id) noexcept;
  // The second line, made this id's (inside a write).
  static void claimCold(Entry& e, std::uint64_t id) noexcept;
  static void writeAdmission(Entry& e, std::uint64_t id, std::uint64_t packed,
                             const transport::Fingerprint& fingerprint, int peer,
                             const char* algorithm, std::int64_t admittedNs,
                             std::uint32_t timeoutMs, std::uint32_t endedUs) noexcept;
  void prefetchNext(std::uint64_t id) noexcept;
  static void beginWrite(Entry& e) noexcept;
  static void endWrite(Entry& e) noexcept;
  static bool read(const Entry& e, CallRecord* out);

  Ring collectives_;
  Ring pointToPoint_;
  std::atomic<std::uint64_t> nextPointToPoint_{0};
  static constexpr std::size_t kFailuresKept = 8;
  mutable std::mutex failuresMutex_;
  std::array<std::pair<std::uint64_t, std::string>, kFailuresKept> failures_;
  std::size_t failuresNext_ = 0;
};

}  // namespace collx::algorithms
