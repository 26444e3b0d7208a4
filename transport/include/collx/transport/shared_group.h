// SharedGroup: the ranks of a context that share memory (one host, every pair over shm),
// seen as memory rather than as pairs, for collectives that work on it directly.
//
// Each member owns kBuffers buffers that every member can read, and a counter, its epoch,
// that only it advances (publish()). Members publish in lockstep: every member publishes
// exactly once per "use", so use u is "epoch u" on every member, and use u writes buffer
// u % kBuffers. The rules that make buffers safe to reuse without a handshake per use:
//   - a member writes its buffer for use u only after every other member's epoch reached
//     u - kBuffers + 1 (beginUse() waits for that; it is almost always true already);
//   - a member finishes reading peers' buffers of use u before it publishes use u + 1.
// Every use's buffer starts with a header naming the call (its sequence number and
// fingerprint), which readers check: a member that runs another collective there is a
// MismatchError naming both sides.
//
// Waiting spins, then yields the core, then sleeps on a futex; every wait is bounded by the
// call's deadline and ends early, with an error naming the rank, when the mesh fails (which
// abort() does), a member dies or closes, or it goes silent (setSilenceCheck). A failed wait fails
// the whole mesh (and so every member learns of it).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collx/base/error.h"
#include "collx/transport/message.h"

namespace collx::transport {

// Written at the start of every use's buffer by its owner before it publishes the use; `use`
// last (release), so that a reader polling it sees the rest, and the first bytes of the
// payload, which share its cache line: a small message costs a reader one line.
struct UseHeader {
  std::uint64_t use = 0;
  std::uint64_t seq = 0;
  Fingerprint fingerprint;
};

// How a waiting member waits: polls for `spin`, then polls yielding the core for `yield`,
// then sleeps. The API sets it from COLLX_SPIN_US and COLLX_YIELD_US (declared in
// algorithms/src/settings.cc); until then a member sleeps at once.
struct WaitPolicy {
  std::chrono::microseconds spin{0};
  std::chrono::microseconds yield{0};
};

// Whether a large broadcast, allgather or allreduce may go as single copies out of the
// members' own buffers (readFrom) instead of through their group buffers: never, when the
// leading member's timing of both says so (auto), or always.
enum class DirectReads { kNever, kAuto, kAlways };
// The calls that may read directly, each timed apart (chooseDirect). kBroadcastSplit: a
// broadcast that reads directly, choosing again: "direct" there reads a first part of the
// vector directly and takes the rest through the root's group buffers, which the root fills
// meanwhile; the other way reads the whole vector directly.
enum class DirectCall { kBroadcast, kAllgather, kAllreduce, kBroadcastSplit };
// COLLX_SHM_DIRECT's words, in the enum's order.
inline constexpr const char* kDirectReadsNames[] = {"never", "auto", "always"};

// What abort() or revoke() asked of a mesh (Mesh::stop): the error every wait then raises.
struct StopRequest {
  ErrorKind kind = ErrorKind::kAborted;
  int culprit = -1;  // the rank the error names (-1: none)
  std::string reason;
};

// Names the waiting call in error messages ("allreduce(shm, seq 7)"): built only on error.
using CallNamer = std::function<std::string()>;

// One call's waits: its deadline (time_point::max(): the first wait that has to wait starts
// it, `timeout` from then), the timeout it came from (named in errors), its name.
struct Waiting {
  // time_point::max() until the call first waits: the wait starts it, `timeout` from then.
  mutable std::chrono::steady_clock::time_point deadline;
  std::chrono::milliseconds timeout{0};
  CallNamer name;
  std::uint64_t seq = 0;  // the call, to tell a member that runs another one at this seq
  Fingerprint fingerprint;
  // The waits' last reading of the clock (a time the caller gets for free: the flight
  // recorder's end of a call that waited).
  mutable std::chrono::steady_clock::time_point lastLook;
  // Told once per wait, when the waiting thread first goes to sleep (after a millisecond at
  // least): the rank and the use it waits for, and when the wait began (the flight
  // recorder's note).
  std::function<void(int rank, std::uint64_t use, std::chrono::steady_clock::time_point since)>
      sleeping;
  // Told when a wait that slept ends: the rank and use it waited for, and when the wait
  // began (the trace's span of it).
  std::function<void(int rank, std::uint64_t use, std::chrono::steady_clock::time_point since)>
      slept;
};

// What a member can give a sub-group (SharedGroup::offerSlots).
struct SlotOffer {
  std::uint32_t slots = 0;  // bit s: slot s is free here
  bool canRead = false;     // this member can read every other member's memory
};

class SharedGroup {
 public:
  static constexpr int kBuffers = 4;
  static constexpr std::size_t kHeaderBytes = 32;  // a UseHeader; the payload follows
  // Sub-groups (Context::split) live in slots of the members' shared memory, as many at once
  // per member as this.
  static constexpr int kSubGroupSlots = 8;

  virtual ~SharedGroup() = default;

  // Members, in rank order; this rank is member index().
  int size() const noexcept { return static_cast<int>(ranks_.size()); }
  int index() const noexcept { return index_; }
  int rankOf(int member) const noexcept { return ranks_[static_cast<std::size_t>(member)]; }
  const std::vector<int>& ranks() const noexcept { return ranks_; }
  // Payload bytes per buffer (after the header).
  std::size_t bufferBytes() const noexcept { return bufferBytes_; }

  // The next use this member will publish.
  std::uint64_t nextUse() const noexcept { return published_ + 1; }
  // Starts this member's use `nextUse()`: waits until every member may be overwritten (see
  // above), writes the header and returns the payload to fill (bufferBytes() bytes).
  std::uint8_t* beginUse(const UseHeader& header, const Waiting& waiting);
  // Publishes the use begun (epoch = use), waking members that sleep on this one.
  virtual void publish() = 0;
  // Waits until `member` published `use` and checks its header against `expected`.
  // Returns the member's payload of that use.
  const std::uint8_t* await(int member, std::uint64_t use, const UseHeader& expected,
                            const Waiting& waiting);
  // Payload of `member`'s use `use` without waiting (after await()).
  virtual std::uint8_t* payload(int member, std::uint64_t use) const = 0;
  // Without waiting: the header `member` published for its use `use`, or nullopt while it
  // has not (an earlier use's header, or one being written, is never returned).
  std::optional<UseHeader> published(int member, std::uint64_t use) const;
  // This rank starts collective call `seq` (whatever its algorithm): members waiting for it
  // in a shared-memory call of that seq with another fingerprint raise MismatchError.
  virtual void announce(std::uint64_t seq, const Fingerprint& fingerprint) noexcept = 0;
  // Throws the mesh's error if it failed (or abort() was called).
  void checkHealthy(const CallNamer& name) { check(-1, name, true); }
  // Throws what a wait for `member` would find: the mesh failed (or abort() was called),
  // the member died, closed its context or failed (failing the mesh first). For a caller
  // that waits for the member's uses itself (the engine's nonblocking calls).
  void checkMember(int member, const CallNamer& name) { check(member, name); }
  // For a thread that is about to sleep in the mesh's poll while a call waits for `member`'s
  // use `use`: false when the member published it already (do not sleep); else true, and
  // until endExpect() the member's next publish rings this rank's doorbell, so the poll
  // wakes. Not thread-safe: the thread that drives the mesh calls it.
  virtual bool expect(int member, std::uint64_t use) = 0;
  virtual void endExpect() noexcept = 0;

  // Whether this member can read every other member's memory (process_vm_readv permitted, or
  // members that are threads of one process).
  bool canReadPeers() const noexcept { return canReadPeers_; }
  // Set at connect: kNever unless every member can read every other's memory.
  void setDirectReads(DirectReads policy) noexcept { directReads_ = policy; }
  DirectReads directReads() const noexcept { return directReads_; }
  // Copies `bytes` at `address` in `member`'s memory to `dst`. The member keeps them valid
  // until this member publishes its next use. Fails (and fails the mesh) like a wait when
  // the member died, closed or failed, before or during the copy, or the copy fails.
  virtual void readFrom(int member, std::uint64_t address, void* dst, std::uint64_t bytes,
                        const Waiting& waiting) = 0;
  // For a call of `bytes` that this member leads: true to move it by direct reads. kAuto
  // alternates for the first 6 calls of a kind and size class, then takes the way that took
  // less time per byte (the median of its last 3 calls: a first call that touched fresh
  // pages, or one that lost its core, does not decide), and tries the other one call in 16
  // (the machine's state changes).
  bool chooseDirect(DirectCall call, std::uint64_t bytes);
  // What such a call took, for chooseDirect().
  void recordDirect(DirectCall call, std::uint64_t bytes, bool direct,
                    std::chrono::nanoseconds took) noexcept;

  // ---- sub-groups (the group of a mesh's ranks on this host makes them) -----------------
  // A sub-group of some of this group's ranks uses the same memory, connections and
  // descriptors, in a slot of its own in every member's memory: its uses and epochs are its
  // own, so its calls and this group's (or another sub-group's) run side by side. Every
  // member of the split offers the slots it can give (offerSlots), they agree on the lowest
  // slot that every member offers, and each makes the sub-group there (subGroup), or
  // withdraws its offer (withdrawSlots). Thread-safe.
  //
  // The slots this member can give a sub-group of `ranks` (mesh ranks, this rank's among
  // them): free here, zeroed, and let go by every member of the sub-group that had the slot
  // last. Reserved for this agreement until subGroup() or withdrawSlots(). {0, false} when a
  // rank is not in this group. (A sub-group is itself no maker of sub-groups.)
  virtual SlotOffer offerSlots(const std::vector<int>& ranks) {
    (void)ranks;
    return {};
  }
  // The sub-group of `ranks` (in its context's order: member i is the context's rank i) in
  // `slot`, which every member offered; the rest of `offered` is free again.
  virtual std::unique_ptr<SharedGroup> subGroup(const std::vector<int>& ranks, int slot,
                                                std::uint32_t offered) {
    (void)ranks, (void)slot, (void)offered;
    return nullptr;
  }
  // The agreement ended without a sub-group: `offered` is free again, or (`forGood`: this
  // member does not know what the others concluded, and a member may use a slot) never
  // offered again.
  virtual void withdrawSlots(std::uint32_t offered, bool forGood) noexcept {
    (void)offered, (void)forGood;
  }
  // The sub-group's slot (-1: not a sub-group).
  int slot() const noexcept { return slot_; }

  void setPolicy(WaitPolicy policy) noexcept { policy_ = policy; }
  WaitPolicy policy() const noexcept { return policy_; }
  // The generation whose calls this group carries, and its first use (0 for a group made at
  // connect): a group re-formed for generation g numbers its uses from g << 40 on, so that a
  // member left out, still waiting in the old generation, never takes a use of the new one
  // for its own (it reads a later use there, and learns that it was left out).
  std::int64_t generation() const noexcept { return generation_; }
  std::uint64_t firstUse() const noexcept { return base_; }
  static constexpr int kGenerationShift = 40;
  // The time this member's waits that slept took, from their start to their end (read from
  // any thread; written by the thread that waits, one at a time). resetWaited() zeroes it.
  std::chrono::nanoseconds waited() const noexcept {
    return std::chrono::nanoseconds(waitedNs_.load(std::memory_order_relaxed));
  }
  void resetWaited() noexcept { waitedNs_.store(0, std::memory_order_relaxed); }
  // Waits do not spin (every member agreed at connect): ranks outnumber cores, where a
  // spinning rank takes the core its peer needs, or some rank set COLLX_SPIN_US=0.
  bool oversubscribed() const noexcept { return policy_.spin.count() == 0; }
  // How a failed wait fails the mesh (the engine serializes it with progress), and where a
  // wait learns that abort() was called, and why.
  void setFailMesh(std::function<void(const Error&)> failMesh) { failMesh_ = std::move(failMesh); }
  // `requested` turns true (release) once `request` is set: both outlive the group.
  void setAbortCheck(const std::atomic<bool>* requested, const StopRequest* request) {
    abortRequested_ = requested;
    stopRequest_ = request;
  }
  // How a wait learns that the member it waits for went silent (the mesh's liveness): given
  // the member's mesh rank, when the wait last heard of it (the wait's start, or the member's
  // epoch moving) and the time now, the error's text once nothing (no answer to a ping
  // either) was heard for the peer timeout, else "". A wait then fails the mesh with an
  // IoError naming the member. Unset: waits are not watched (their deadline ends them).
  using SilenceCheck =
      std::function<std::string(int rank, std::chrono::steady_clock::time_point heard,
                                std::chrono::steady_clock::time_point now)>;
  void setSilenceCheck(SilenceCheck check) { silenceCheck_ = std::move(check); }

 protected:
  SharedGroup(std::vector<int> ranks, int index, std::size_t bufferBytes, WaitPolicy policy,
              std::int64_t generation = 0, std::uint64_t base = 0)
      : ranks_(std::move(ranks)),
        index_(index),
        bufferBytes_(bufferBytes),
        policy_(policy),
        generation_(generation),
        base_(base),
        published_(base),
        seen_(ranks_.size(), base) {}

  // The member's published epoch (acquire).
  virtual std::uint32_t epochOf(int member) const = 0;
  virtual UseHeader* headerOf(int member, std::uint64_t use) const = 0;
  // Sleeps until `member`'s epoch may have changed from `seen`, or `until` passes.
  virtual void sleep(int member, std::uint32_t seen,
                     std::chrono::steady_clock::time_point until) = 0;
  // Throws when the mesh failed (abort() fails it too), or (member >= 0) when `member` died or
  // closed its context (failing the mesh first). `starting`: a call that had not begun
  // ("the context failed earlier").
  virtual void check(int member, const CallNamer& name, bool starting = false) = 0;
  // kExcluded: the member went on in a later generation without this one.
  enum class Failure { kTimeout, kMismatch, kExcluded };
  // Fails the mesh with this error (every member learns of it), then throws it.
  [[noreturn]] virtual void fail(Failure kind, int member, const std::string& what,
                                 const CallNamer& name) = 0;
  // The call `member` announced last, and the generation it announced it in: false when it
  // announced none or was writing it.
  virtual bool announced(int member, std::uint64_t& seq, Fingerprint& fingerprint,
                         std::int64_t& generation) const = 0;
  // Whether `member`, whose epoch reads `epoch`, published `use` (or a later one). In a
  // re-formed group a member's epoch is its old generation's until it publishes in this one:
  // there the use's header must hold `use` or a later one too.
  bool hasPublished(int member, std::uint32_t epoch, std::uint64_t use) const noexcept;
  // "allreduce#42 float32x1024", for mismatch errors.
  virtual std::string describe(std::uint64_t seq, const Fingerprint& fp) const = 0;

  std::vector<int> ranks_;
  int index_;
  int slot_ = -1;
  std::size_t bufferBytes_;
  WaitPolicy policy_;
  bool canReadPeers_ = false;
  std::int64_t generation_ = 0;
  std::uint64_t base_ = 0;
  std::uint64_t published_ = 0;      // this member's epoch
  std::vector<std::uint64_t> seen_;  // a lower bound of each member's epoch
  std::function<void(const Error&)> failMesh_;
  SilenceCheck silenceCheck_;
  const std::atomic<bool>* abortRequested_ = nullptr;
  const StopRequest* stopRequest_ = nullptr;

 private:
  struct DirectStats {
    double nsPerByte[2][3] = {};  // [arena, direct][the last 3 calls]
    std::uint32_t recorded[2] = {0, 0};
    std::uint32_t calls = 0;
    std::int8_t chosen = -1;  // the way last taken for speed (not to try the other), -1: none
    // The median of the way's last calls (the mean of 2, the one; 0: not measured yet).
    double typical(int way) const noexcept;
  };
  DirectReads directReads_ = DirectReads::kNever;
  DirectStats directStats_[4][64];
  DirectStats& directStatsOf(DirectCall call, std::uint64_t bytes) noexcept;

  void waitFor(int member, std::uint64_t use, const Waiting& waiting);
  // A wait that slept ended: its time to waited(), its span to Waiting::slept.
  void endSleptWait(int member, std::uint64_t use, std::chrono::steady_clock::time_point since,
                    const Waiting& waiting);
  std::atomic<std::uint64_t> waitedNs_{0};
  // Fails the call when `member` announced another collective at its sequence number.
  void checkCall(int member, const Waiting& waiting);
};

}  // namespace collx::transport
