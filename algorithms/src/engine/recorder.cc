#include "collx/algorithms/recorder.h"

#include <algorithm>
#include <bit>

namespace collx::algorithms {

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr int kReadTries = 3;

std::uint64_t pack32(std::uint32_t high, std::uint32_t low) {
  return std::uint64_t{high} << 32 | low;
}
std::uint32_t high32(std::uint64_t w) { return static_cast<std::uint32_t>(w >> 32); }
std::uint32_t low32(std::uint64_t w) { return static_cast<std::uint32_t>(w); }

// kPacked's bytes, from the lowest: coll, dtype, op, space, state, errorKind, waitKind.
std::uint64_t withByte(std::uint64_t w, int at, std::uint8_t value) {
  const int shift = 8 * at;
  return (w & ~(std::uint64_t{0xff} << shift)) | std::uint64_t{value} << shift;
}
std::uint8_t byteOf(std::uint64_t w, int at) { return static_cast<std::uint8_t>(w >> (8 * at)); }
enum PackedByte : int { kColl, kDtype, kOp, kSpace, kState, kErrorKind, kWaitKind };

// An entry's endedUs: microseconds from admission to the end (0 if none passed; saturating).
std::uint32_t microsBetween(std::int64_t admittedNs, std::int64_t endedNs) {
  const std::int64_t us = endedNs > admittedNs ? (endedNs - admittedNs) / 1000 : 0;
  return static_cast<std::uint32_t>(std::min<std::int64_t>(us, UINT32_MAX));
}

}  // namespace

Recorder::Ring::Ring(std::size_t capacity)
    : entries(new Entry[std::bit_ceil(std::max<std::size_t>(capacity, 1))]),
      mask(std::bit_ceil(std::max<std::size_t>(capacity, 1)) - 1) {}

Recorder::Recorder(std::size_t capacity)
    : collectives_(capacity), pointToPoint_(std::max<std::size_t>(capacity / 4, 16)) {}

// One writer per entry at a time: the version moves with plain stores (no locked
// read-modify-write on a call's way), ordered by the release fence and the release store.
void Recorder::beginWrite(Entry& e) noexcept {
  e.w[kVersion].store(e.w[kVersion].load(kRelaxed) + 1, kRelaxed);  // odd: readers retry
  std::atomic_thread_fence(std::memory_order_release);
}

void Recorder::endWrite(Entry& e) noexcept {
  e.w[kVersion].store(e.w[kVersion].load(kRelaxed) + 1, std::memory_order_release);
}

Recorder::Entry* Recorder::owned(std::uint64_t id) noexcept {
  Entry& e = ringOf(id).at(id);
  return e.w[kId].load(kRelaxed) == id ? &e : nullptr;
}

void Recorder::claimCold(Entry& e, std::uint64_t id) noexcept {
  if (e.w[kColdId].load(kRelaxed) == id) return;
  e.w[kColdId].store(id, kRelaxed);
  e.w[kSeq].store(0, kRelaxed);
  e.w[kRunning].store(0, kRelaxed);
}

namespace {

std::uint64_t packedOf(const transport::Fingerprint& fingerprint, transport::Space space,
                       CallState state) {
  std::uint64_t packed = 0;
  packed = withByte(packed, kColl, fingerprint.coll);
  packed = withByte(packed, kDtype, fingerprint.dtype);
  packed = withByte(packed, kOp, fingerprint.op);
  packed = withByte(packed, kSpace, static_cast<std::uint8_t>(space));
  return withByte(packed, kState, static_cast<std::uint8_t>(state));
}

}  // namespace

// The first line's words of a new call (inside a write).
void Recorder::writeAdmission(Entry& e, std::uint64_t id, std::uint64_t packed,
                              const transport::Fingerprint& fingerprint, int peer,
                              const char* algorithm, std::int64_t admittedNs,
                              std::uint32_t timeoutMs, std::uint32_t endedUs) noexcept {
  e.w[kId].store(id, kRelaxed);
  e.w[kPacked].store(packed, kRelaxed);
  e.w[kRootPeer].store(
      pack32(static_cast<std::uint32_t>(fingerprint.root), static_cast<std::uint32_t>(peer)),
      kRelaxed);
  e.w[kCount].store(fingerprint.count, kRelaxed);
  e.w[kAlgorithm].store(reinterpret_cast<std::uintptr_t>(algorithm), kRelaxed);
  e.w[kAdmitted].store(static_cast<std::uint64_t>(admittedNs), kRelaxed);
  e.w[kTimes].store(pack32(timeoutMs, endedUs), kRelaxed);
}

// The next call's entry, on its way into this core's cache while the caller goes on: its
// admission then writes a line it owns already.
void Recorder::prefetchNext(std::uint64_t id) noexcept {
  __builtin_prefetch(&ringOf(id).at(id + 1), 1);
}

std::uint64_t Recorder::admit(const Call& call, CallState state) noexcept {
  const bool collective = call.space == transport::Space::kCollective;
  const std::uint64_t id =
      collective ? call.seq + 1 : kPointToPoint | (nextPointToPoint_.fetch_add(1, kRelaxed) + 1);
  Entry& e = ringOf(id).at(id);
  beginWrite(e);
  writeAdmission(e, id, packedOf(call.fingerprint, call.space, state), call.fingerprint, call.peer,
                 call.algorithm, call.admittedNs, call.timeoutMs, 0);
  if (!collective) {
    claimCold(e, id);
    e.w[kSeq].store(call.seq, kRelaxed);
  }
  endWrite(e);
  return id;
}

std::uint64_t Recorder::completed(std::uint64_t seq, const transport::Fingerprint& fingerprint,
                                  const char* algorithm, std::uint32_t timeoutMs,
                                  std::int64_t admittedNs, std::int64_t endedNs) noexcept {
  const std::uint64_t id = seq + 1;
  Entry& e = collectives_.at(id);
  if (admittedNs == 0) admittedNs = endedNs;
  beginWrite(e);
  writeAdmission(e, id, packedOf(fingerprint, transport::Space::kCollective, CallState::kCompleted),
                 fingerprint, -1, algorithm, admittedNs, timeoutMs,
                 microsBetween(admittedNs, endedNs));
  endWrite(e);
  prefetchNext(id);
  return id;
}

void Recorder::running(std::uint64_t id, std::int64_t nowNs) noexcept {
  Entry* e = owned(id);
  if (e == nullptr) return;
  beginWrite(*e);
  e->w[kPacked].store(withByte(e->w[kPacked].load(kRelaxed), kState,
                               static_cast<std::uint8_t>(CallState::kRunning)),
                      kRelaxed);
  claimCold(*e, id);
  e->w[kRunning].store(static_cast<std::uint64_t>(nowNs), kRelaxed);
  endWrite(*e);
}

void Recorder::waiting(std::uint64_t id, WaitKind kind, int peer, std::uint32_t step,
                       std::uint32_t steps, std::uint64_t bytes, std::int64_t sinceNs) noexcept {
  Entry* e = owned(id);
  if (e == nullptr) return;
  // Still the same wait (noted again while it lasts): it keeps the time it began.
  const std::uint64_t packed = e->w[kPacked].load(kRelaxed);
  if (byteOf(packed, kWaitKind) == static_cast<std::uint8_t>(kind) &&
      e->w[kColdId].load(kRelaxed) == id &&
      e->w[kWaitPeer].load(kRelaxed) == static_cast<std::uint32_t>(peer) &&
      e->w[kSteps].load(kRelaxed) == pack32(step, steps) &&
      e->w[kWaitBytes].load(kRelaxed) == bytes) {
    return;
  }
  beginWrite(*e);
  // Admitted without a clock: it began no later than this wait.
  if (e->w[kAdmitted].load(kRelaxed) == 0) {
    e->w[kAdmitted].store(static_cast<std::uint64_t>(sinceNs), kRelaxed);
  }
  claimCold(*e, id);
  e->w[kPacked].store(withByte(packed, kWaitKind, static_cast<std::uint8_t>(kind)), kRelaxed);
  e->w[kWaitPeer].store(static_cast<std::uint32_t>(peer), kRelaxed);
  e->w[kSteps].store(pack32(step, steps), kRelaxed);
  e->w[kWaitBytes].store(bytes, kRelaxed);
  e->w[kWaitSince].store(static_cast<std::uint64_t>(sinceNs), kRelaxed);
  endWrite(*e);
}

void Recorder::end(std::uint64_t id, bool failed, std::uint8_t errorKind,
                   std::int64_t nowNs) noexcept {
  Entry* e = owned(id);
  if (e == nullptr) return;
  const auto admitted = static_cast<std::int64_t>(e->w[kAdmitted].load(kRelaxed));
  const std::uint32_t endedUs = admitted != 0 ? microsBetween(admitted, nowNs) : 0;
  beginWrite(*e);
  // A short call admitted without a clock (it never waited): it ran within this tick.
  if (admitted == 0) e->w[kAdmitted].store(static_cast<std::uint64_t>(nowNs), kRelaxed);
  std::uint64_t packed = e->w[kPacked].load(kRelaxed);
  packed = withByte(packed, kState,
                    static_cast<std::uint8_t>(failed ? CallState::kFailed : CallState::kCompleted));
  packed = withByte(packed, kErrorKind, failed ? errorKind : 0);
  packed = withByte(packed, kWaitKind, static_cast<std::uint8_t>(WaitKind::kNone));
  e->w[kPacked].store(packed, kRelaxed);
  e->w[kTimes].store(pack32(high32(e->w[kTimes].load(kRelaxed)), endedUs), kRelaxed);
  endWrite(*e);
  prefetchNext(id);
}

void Recorder::noteFailure(std::uint64_t id, std::string what) {
  std::lock_guard<std::mutex> lock(failuresMutex_);
  failures_[failuresNext_++ % kFailuresKept] = {id, std::move(what)};
}

std::string Recorder::failureOf(std::uint64_t id) const {
  std::lock_guard<std::mutex> lock(failuresMutex_);
  for (const auto& [noted, what] : failures_) {
    if (noted == id && id != 0) return what;
  }
  return {};
}

bool Recorder::read(const Entry& e, CallRecord* out) {
  for (int attempt = 0; attempt < kReadTries; ++attempt) {
    const std::uint64_t before = e.w[kVersion].load(std::memory_order_acquire);
    if (before & 1) continue;
    std::array<std::uint64_t, kWords> w;
    for (int i = 0; i < kWords; ++i) w[i] = e.w[i].load(kRelaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e.w[kVersion].load(kRelaxed) != before) continue;
    if (w[kId] == 0) return false;  // never written
    CallRecord r;
    r.id = w[kId];
    const bool cold = w[kColdId] == w[kId];  // the second line is this call's
    r.fingerprint.coll = byteOf(w[kPacked], kColl);
    r.fingerprint.dtype = byteOf(w[kPacked], kDtype);
    r.fingerprint.op = byteOf(w[kPacked], kOp);
    r.space = static_cast<transport::Space>(byteOf(w[kPacked], kSpace));
    r.state = static_cast<CallState>(byteOf(w[kPacked], kState));
    r.errorKind = byteOf(w[kPacked], kErrorKind);
    r.waitKind = static_cast<WaitKind>(byteOf(w[kPacked], kWaitKind));
    r.fingerprint.root = static_cast<std::int32_t>(high32(w[kRootPeer]));
    r.peer = static_cast<std::int32_t>(low32(w[kRootPeer]));
    r.fingerprint.count = w[kCount];
    r.algorithm = reinterpret_cast<const char*>(static_cast<std::uintptr_t>(w[kAlgorithm]));
    r.admittedNs = static_cast<std::int64_t>(w[kAdmitted]);
    r.timeoutMs = high32(w[kTimes]);
    r.endedUs = low32(w[kTimes]);
    r.seq = r.id & kPointToPoint ? (cold ? w[kSeq] : 0) : r.id - 1;
    r.runningNs = cold ? static_cast<std::int64_t>(w[kRunning]) : 0;
    if (r.runningNs == 0 && r.state != CallState::kQueued) r.runningNs = r.admittedNs;
    if (r.waitKind != WaitKind::kNone && cold) {
      r.waitPeer = static_cast<std::int32_t>(static_cast<std::uint32_t>(w[kWaitPeer]));
      r.step = high32(w[kSteps]);
      r.steps = low32(w[kSteps]);
      r.waitBytes = w[kWaitBytes];
      r.waitSinceNs = static_cast<std::int64_t>(w[kWaitSince]);
    }
    *out = r;
    return true;
  }
  return false;  // written all the while: left out
}

bool Recorder::find(std::uint64_t id, CallRecord* out) const {
  if (id == 0 || id == kPointToPoint) return false;
  CallRecord r;
  if (!read(ringOf(id).at(id), &r) || r.id != id) return false;
  *out = r;
  return true;
}

std::vector<CallRecord> Recorder::snapshot() const {
  std::vector<CallRecord> out;
  out.reserve(static_cast<std::size_t>(collectives_.mask + pointToPoint_.mask + 2));
  for (const Ring* ring : {&collectives_, &pointToPoint_}) {
    for (std::uint64_t i = 0; i <= ring->mask; ++i) {
      CallRecord r;
      if (read(ring->entries[i], &r)) out.push_back(r);
    }
  }
  // Collectives in the order of their sequence numbers, sends and receives among them by
  // the time they were admitted.
  const auto p2p = std::stable_partition(
      out.begin(), out.end(), [](const CallRecord& r) { return !(r.id & kPointToPoint); });
  std::sort(out.begin(), p2p, [](const CallRecord& a, const CallRecord& b) { return a.id < b.id; });
  std::sort(p2p, out.end(), [](const CallRecord& a, const CallRecord& b) { return a.id < b.id; });
  std::vector<CallRecord> merged;
  merged.reserve(out.size());
  std::merge(out.begin(), p2p, p2p, out.end(), std::back_inserter(merged),
             [](const CallRecord& a, const CallRecord& b) { return a.admittedNs < b.admittedNs; });
  return merged;
}

}  // namespace collx::algorithms
