// The shared-memory transport's arena (internal): one per rank and context, holding this
// rank's state flags and one inbound ring per possible sender.
//
// Layout (every field that two processes write sits on a cache line of its own):
//
//   ArenaHeader   identity (written once by the owner before it publishes the address),
//                 state (open / closed / failed, with the failure's kind, culprit and text),
//                 `sleeping` (the owner is about to block in poll(): ring its doorbell),
//                 `pulling` (peers copying out of the owner's buffers right now)
//   verdicts      one byte per rank: the owner's answer to "can we talk over shm?" (0 not yet,
//                 1 yes: the owner mapped that peer's arena and checked it, 2 no)
//   rings         one per rank r (r != owner): the single-producer single-consumer ring that
//                 rank r writes into and the owner reads. RingControl holds the producer's
//                 `tail` and the consumer's `head` (monotonic byte counts, never reset), then
//                 `ringBytes` of data. Rings of ranks that never
//                 send (tcp peers, oneself) are never touched, so their pages are never
//                 allocated.
//   group         GroupControl, then SharedGroup::kBuffers buffers (a 32-byte UseHeader and
//                 `groupBytes` of payload each) that collectives working on shared memory
//                 directly write and every member of the group reads (shm_group.h). Pages
//                 are allocated when first used.
//   slots         kSubGroupSlots more group areas for the sub-groups of splits (Context::split
//                 of ranks that share memory): each a SlotControl, then a group area as above.
//                 Untouched slots cost no memory.
//
// The backing is a memfd (default: nothing to clean up, ever; peers open it through
// /proc/<pid>/fd/<n>) or a POSIX shm segment (/dev/shm/collx-<pidns>-<pid>-r<rank>-<token>,
// unlinked once every peer has mapped it; leftovers of killed ranks are removed by collx-run
// and by the next context on the host whose owner pid is gone).
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

namespace collx::transport::shm {

inline constexpr std::uint64_t kArenaMagic = 0x314d48535f584c43ull;  // "CLX_SHM1"
inline constexpr std::uint32_t kArenaVersion = 6;
inline constexpr std::size_t kLine = 64;
inline constexpr int kGroupBuffers = 4;  // SharedGroup::kBuffers
inline constexpr int kSlots = 8;         // SharedGroup::kSubGroupSlots
inline constexpr std::size_t kErrorTextBytes = 2048;

enum class State : std::uint32_t { kOpen = 0, kClosed = 1, kFailed = 2 };
enum Verdict : std::uint8_t { kVerdictUnknown = 0, kVerdictYes = 1, kVerdictNo = 2 };

// Fields are plain integers accessed through std::atomic_ref where two parties touch them.
struct ArenaHeader {
  // Line 0: identity, immutable after publication.
  std::uint64_t magic;
  std::uint32_t version;
  std::int32_t rank;
  std::int32_t size;
  std::uint32_t eagerLimit;  // the owner's COLLX_SHM_EAGER_LIMIT (see ShmPair::agreedEagerLimit)
  std::int64_t pid;
  std::uint64_t job;  // hash of the job id and generation
  std::int64_t generation;
  std::uint64_t token;       // random: names this arena among every arena ever made
  std::uint64_t ringBytes;   // data bytes per ring
  std::uint64_t groupBytes;  // payload bytes per group buffer (see GroupControl)
  // Line 1: state. `state` is stored last (release) after the error fields.
  alignas(kLine) std::uint32_t state;
  std::uint32_t errorKind;
  std::int32_t culprit;
  std::uint32_t errorLength;
  std::uint64_t cmaProbe;  // address (in the owner) of a word holding `token`, for the CMA probe
  // The generation the owner last failed in (-1: none), stored before `state`. A peer still
  // in that generation fails on it even when the owner has re-formed since (its `state` is
  // open again, for the next generation): the notice outlasts the owner's moving on.
  std::int64_t failedIn;
  // Line 2: the owner sleeps (a writer that sees 1 exchanges it for 0 and rings the doorbell).
  alignas(kLine) std::uint32_t sleeping;
  // Line 3: peers copying from the owner's memory right now (see ShmPair's pulls).
  alignas(kLine) std::uint32_t pulling;
  alignas(kLine) char errorText[kErrorTextBytes];
};
static_assert(sizeof(ArenaHeader) % kLine == 0);

struct RingControl {
  alignas(kLine) std::uint64_t tail;             // producer: bytes written
  alignas(kLine) std::uint64_t head;             // consumer: bytes consumed
  alignas(kLine) std::uint32_t producerWaiting;  // producer blocked on a full ring
};
static_assert(sizeof(RingControl) == 3 * kLine);

// The owner's epoch (published uses of its group buffers) and the count of peers sleeping
// on it (futex waiters: the owner wakes them when it publishes).
// `version`, `seq` and the fingerprint words: the collective call the owner started last
// (any algorithm), under a sequence lock (version odd while it writes), so that a member
// waiting for it can tell that it runs another collective at that sequence number.
struct GroupControl {
  alignas(kLine) std::uint32_t epoch;
  alignas(kLine) std::uint32_t sleepers;
  alignas(kLine) std::uint64_t version;
  std::uint64_t seq;
  std::uint64_t fingerprint[2];
  std::uint64_t generation;  // the job's generation of that call (a re-formed group's)
};
static_assert(sizeof(GroupControl) == 3 * kLine);

// A sub-group slot's state, written by the arena's owner only: `busy` is 1 while the owner has
// a sub-group in the slot (from before its members first read the slot until the owner's
// sub-group is gone and reads no member's slot any more). A member that shared a sub-group
// with the owner in the slot reuses its own slot only once the owner's `busy` is 0.
struct SlotControl {
  alignas(kLine) std::uint32_t busy;
};
static_assert(sizeof(SlotControl) == kLine);

template <typename T>
inline std::atomic_ref<T> atomic(T& value) {
  return std::atomic_ref<T>(value);
}

// The error an arena's owner publishes before it stores State::kFailed, and clears when it
// opens again (a reform). A peer may read it while the owner writes the next one (it saw
// the last failure; the owner re-formed and failed again): each field and each byte is an
// atomic access, so that such a peer reads a mix of the two errors at worst, never a torn
// field.
struct PublishedError {
  std::uint32_t kind = 0;
  std::int32_t culprit = -1;
  std::string text;
};
inline void publishError(ArenaHeader& h, std::uint32_t kind, std::int32_t culprit,
                         std::string_view text) noexcept {
  const std::size_t n = std::min(text.size(), kErrorTextBytes);
  for (std::size_t i = 0; i < n; ++i)
    atomic(h.errorText[i]).store(text[i], std::memory_order_relaxed);
  atomic(h.errorLength).store(static_cast<std::uint32_t>(n), std::memory_order_relaxed);
  atomic(h.errorKind).store(kind, std::memory_order_relaxed);
  atomic(h.culprit).store(culprit, std::memory_order_relaxed);
}
// (After an acquire load of `state` that saw State::kFailed.)
inline PublishedError readError(const ArenaHeader& header) {
  auto& h = const_cast<ArenaHeader&>(header);
  PublishedError e;
  e.kind = atomic(h.errorKind).load(std::memory_order_relaxed);
  e.culprit = atomic(h.culprit).load(std::memory_order_relaxed);
  const std::size_t n =
      std::min<std::size_t>(atomic(h.errorLength).load(std::memory_order_relaxed), kErrorTextBytes);
  e.text.resize(n);
  for (std::size_t i = 0; i < n; ++i)
    e.text[i] = atomic(h.errorText[i]).load(std::memory_order_relaxed);
  return e;
}

struct Layout {
  std::size_t verdicts = 0;
  std::size_t rings = 0;
  std::size_t ringStride = 0;
  std::size_t group = 0;         // GroupControl
  std::size_t groupBuffers = 0;  // the first buffer (header, then payload)
  std::size_t groupStride = 0;
  std::size_t slots = 0;  // the first SlotControl; its group area follows
  std::size_t slotStride = 0;
  std::size_t total = 0;

  // The layout of an arena for `size` ranks. `total` is 0 when the sizes do not fit in
  // std::size_t (a peer's header is outside input: validatePeerHeader refuses that).
  static Layout of(int size, std::uint64_t ringBytes, std::uint64_t groupBytes) noexcept;
};

// The largest ring a peer may have (COLLX_SHM_RING_BYTES' range) and the largest arena it
// may publish: bounds on what this rank maps and indexes.
inline constexpr std::uint64_t kMaxRingBytes = std::uint64_t{1} << 30;
inline constexpr std::uint64_t kMaxArenaBytes = std::uint64_t{64} << 30;

// What this rank expects of a peer's arena: the peer's rank, this job's size, job hash,
// generation and group buffer bytes.
struct PeerExpectation {
  int rank = 0;
  int size = 0;
  std::uint64_t job = 0;
  std::int64_t generation = 0;
  std::uint64_t groupBytes = 0;
};

// Checks a peer's arena header (its identity line, immutable once published) against what
// this rank expects and the size the peer published, and computes its layout. Pure: no
// mapping, no system call. Returns false with `why` set ("its arena belongs to rank 3 of 4
// of another job or generation", "its rings of 5000 bytes are not a power of two", ...).
bool validatePeerHeader(const ArenaHeader& h, const PeerExpectation& expect,
                        std::uint64_t publishedBytes, Layout& layout, std::string& why);

// A shared mapping (munmap on destruction).
class Mapping {
 public:
  Mapping(void* base, std::size_t bytes) noexcept : base_(base), bytes_(bytes) {}
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  std::uint8_t* base() const noexcept { return static_cast<std::uint8_t*>(base_); }
  std::size_t bytes() const noexcept { return bytes_; }
  ArenaHeader* header() const noexcept { return reinterpret_cast<ArenaHeader*>(base_); }
  std::uint8_t* verdicts(const Layout& layout) const noexcept { return base() + layout.verdicts; }
  GroupControl* group(const Layout& layout) const noexcept {
    return reinterpret_cast<GroupControl*>(base() + layout.group);
  }
  std::uint8_t* groupBuffer(const Layout& layout, int index) const noexcept {
    return base() + layout.groupBuffers + layout.groupStride * static_cast<std::size_t>(index);
  }
  // Sub-group slot `slot` (0..kSlots-1): its control, its GroupControl, its first buffer.
  SlotControl* slot(const Layout& layout, int slot) const noexcept {
    return reinterpret_cast<SlotControl*>(base() + layout.slots +
                                          layout.slotStride * static_cast<std::size_t>(slot));
  }
  GroupControl* slotGroup(const Layout& layout, int slot) const noexcept {
    return reinterpret_cast<GroupControl*>(
        reinterpret_cast<std::uint8_t*>(this->slot(layout, slot)) + sizeof(SlotControl));
  }
  std::uint8_t* slotBuffer(const Layout& layout, int slot) const noexcept {
    return reinterpret_cast<std::uint8_t*>(slotGroup(layout, slot)) + sizeof(GroupControl);
  }
  RingControl* ring(const Layout& layout, int sender) const noexcept {
    return reinterpret_cast<RingControl*>(base() + layout.rings +
                                          layout.ringStride * static_cast<std::size_t>(sender));
  }

 private:
  void* base_;
  std::size_t bytes_;
};

// The owner's side of an arena: its backing (memfd or POSIX segment) and its mapping.
class Arena {
 public:
  // Creates and maps an arena for `rank` of `size` and fills in its header. `posix`: a
  // named /dev/shm segment instead of a memfd. Throws IoError.
  Arena(int rank, int size, std::uint64_t job, std::int64_t generation, std::uint64_t ringBytes,
        std::uint64_t groupBytes, bool posix);
  // Closes the backing (unlinks a segment still named) and unmaps (unless peers in this
  // process still use the mapping).
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  const std::shared_ptr<Mapping>& mapping() const noexcept { return mapping_; }
  const Layout& layout() const noexcept { return layout_; }
  ArenaHeader* header() const noexcept { return mapping_->header(); }
  std::uint64_t token() const noexcept { return token_; }
  // Where peers find it: "fd<N>" (memfd of this pid) or "n<segment name without '/'>".
  std::string locator() const;
  // Drops the name and the descriptor: every peer that will map it has done so.
  void seal() noexcept;

 private:
  std::uint64_t token_;
  Layout layout_;
  int fd_ = -1;
  std::string name_;  // POSIX: "/collx-...", until unlinked
  std::shared_ptr<Mapping> mapping_;
};

// Maps a peer's arena given its locator, pid and published size. Arenas of this process
// are found in a process-wide registry (one mapping per arena, so that every thread of the
// process sees the same addresses: required for correct atomics under ThreadSanitizer).
// Returns nullptr and sets `why` when it cannot.
std::shared_ptr<Mapping> mapPeerArena(pid_t pid, const std::string& locator, std::uint64_t token,
                                      std::size_t bytes, std::string& why);

// Hash of this host's identity: COLLX_HOST_ID if given (tests), else hostname + boot id.
std::uint64_t hostId(const std::string& override);

// A random 64-bit number (getrandom, else the clock and pid mixed).
std::uint64_t randomToken();

// Copies `bytes` at `address` in process `pid`'s memory to `dst`: process_vm_readv, or
// copyBytes when `samePid`. False, with the errno in `err`, when the kernel refuses or the
// process is gone (ESRCH); `dst` may then hold part of it.
bool readProcessMemory(pid_t pid, bool samePid, std::uint64_t address, void* dst,
                       std::uint64_t bytes, int& err);

// This process's PID namespace inode ("4026531836"), "" when unknown.
std::string pidNamespace();

}  // namespace collx::transport::shm
