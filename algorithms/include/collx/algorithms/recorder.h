// Recorder: a context's flight recorder, the last calls it ran and what each is doing
// (the engine writes it: Engine::recorder()).
//
// A fixed ring of entries, allocated once: a call takes the next id (one relaxed fetch_add)
// and the entry at id mod capacity; nothing on a call's way allocates, locks or makes a
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
  std::uint8_t errorKind = 0;   // collx::ErrorKind of a failed call
  std::int64_t admittedNs = 0;  // steady clock
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

  std::size_t capacity() const noexcept { return mask_ + 1; }
  // Ids handed out so far (the next call's id is this plus 1).
  std::uint64_t admitted() const noexcept { return next_.load(std::memory_order_relaxed); }

  // A new call (queued, or running at once); returns its id (from 1).
  std::uint64_t admit(const Call& call, CallState state) noexcept;
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

  // The steady clock's time (its timebase, CLOCK_MONOTONIC) at the kernel's tick
  // resolution: read in the vDSO, no system call, a few nanoseconds.
  static std::int64_t coarseNowNs() noexcept {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return std::int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
  }

  // Every call the ring holds, oldest first (entries being rewritten for longer than a few
  // tries are left out).
  std::vector<CallRecord> snapshot() const;
  // The call with `id`, if the ring still holds it (false: overwritten, torn or never made).
  bool find(std::uint64_t id, CallRecord* out) const;

 private:
  // Words of an entry (two cache lines), all atomics: readers race writers by design.
  enum Word : int {
    kVersion,  // seqlock: odd while a write is in progress
    kId,
    kSeq,
    kPacked,    // coll, dtype, op, space, state, errorKind, waitKind (8 bits each)
    kRootPeer,  // root (32) | peer (32)
    kCount,
    kAlgorithm,
    kAdmitted,
    kTimes,  // timeoutMs (32) | endedUs (32)
    kRunning,
    kWaitPeer,
    kSteps,  // step (32) | steps (32)
    kWaitBytes,
    kWaitSince,
    kWords
  };
  struct alignas(64) Entry {
    std::array<std::atomic<std::uint64_t>, kWords> w{};
  };

  Entry* owned(std::uint64_t id) noexcept;
  static void beginWrite(Entry& e) noexcept;
  static void endWrite(Entry& e) noexcept;
  static bool read(const Entry& e, CallRecord* out);

  std::unique_ptr<Entry[]> entries_;
  std::uint64_t mask_;
  std::atomic<std::uint64_t> next_{0};
  static constexpr std::size_t kFailuresKept = 8;
  mutable std::mutex failuresMutex_;
  std::array<std::pair<std::uint64_t, std::string>, kFailuresKept> failures_;
  std::size_t failuresNext_ = 0;
};

}  // namespace collx::algorithms
