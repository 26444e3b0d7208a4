#include "collx/transport/shared_group.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>

#include "collx/base/log.h"

namespace collx::transport {

std::optional<UseHeader> SharedGroup::published(int member, std::uint64_t use) const {
  UseHeader& header = *headerOf(member, use);
  // `use` is stored last, with release: once it reads `use`, the rest is this use's.
  if (std::atomic_ref<std::uint64_t>(header.use).load(std::memory_order_acquire) != use) {
    return std::nullopt;
  }
  return UseHeader{use, header.seq, header.fingerprint};
}

namespace {

using Clock = std::chrono::steady_clock;

// Between checks of a member's life and this mesh's health while waiting: spinning (on a
// core of its own, for at most COLLX_SPIN_US), and while yielding the core between looks,
// where a check (a poll of the member's pidfd, a few loads) is cheap beside sched_yield and
// a member's death or a peer's failure is noticed within that, not at the first sleep.
constexpr Clock::duration kCheckPeriod = std::chrono::milliseconds(10);
constexpr Clock::duration kYieldingCheckPeriod = std::chrono::microseconds(100);
// The longest sleep: a lost wakeup would cost at most this.
constexpr std::chrono::milliseconds kMaxSleep(5);
// A wait this long is worth telling Waiting::sleeping.
constexpr std::chrono::milliseconds kNoteAfter(1);

inline void cpuRelax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Whether a 32-bit epoch has reached `use` (epochs wrap; members are never 2^31 uses apart).
inline bool reached(std::uint32_t epoch, std::uint64_t use) noexcept {
  return static_cast<std::int32_t>(epoch - static_cast<std::uint32_t>(use)) >= 0;
}

}  // namespace

bool SharedGroup::hasPublished(int member, std::uint32_t epoch, std::uint64_t use) const noexcept {
  if (!reached(epoch, use)) return false;
  return base_ == 0 || std::atomic_ref<std::uint64_t>(headerOf(member, use)->use)
                               .load(std::memory_order_acquire) >= use;
}

std::uint8_t* SharedGroup::beginUse(const UseHeader& header, const Waiting& waiting) {
  check(-1, waiting.name, true);
  const std::uint64_t use = published_ + 1;
  if (use > static_cast<std::uint64_t>(kBuffers)) {
    const std::uint64_t need = use - kBuffers + 1;
    for (int m = 0; m < size(); ++m) {
      if (m != index_ && seen_[static_cast<std::size_t>(m)] < need) waitFor(m, need, waiting);
    }
  }
  // Not `use`: a member may be polling it already (it is stored at publish()).
  UseHeader* mine = headerOf(index_, use);
  mine->seq = header.seq;
  mine->fingerprint = header.fingerprint;
  return payload(index_, use);
}

const std::uint8_t* SharedGroup::await(int member, std::uint64_t use, const UseHeader& expected,
                                       const Waiting& waiting) {
  if (member != index_) {
    UseHeader& got = *headerOf(member, use);
    if (seen_[static_cast<std::size_t>(member)] < use) {
      // The header's line first: it holds the use number, the call and a small payload.
      // (Not when ranks outnumber cores, spin 0: the member needs this core to get there.)
      bool ready = false;
      const int looks = policy_.spin.count() > 0 ? 256 : 1;
      for (int i = 0; i < looks && !ready; ++i) {
        ready = std::atomic_ref<std::uint64_t>(got.use).load(std::memory_order_acquire) == use;
        if (!ready) cpuRelax();
      }
      if (ready) {
        // The member's epoch is at least `use`: beginUse() need not read its epoch's line
        // (a line the member writes at every publish) to know the buffers are free.
        seen_[static_cast<std::size_t>(member)] = use;
      } else {
        waitFor(member, use, waiting);
      }
    }
    // A later use where this one was: the member re-formed without this rank and published
    // that in its new generation's group (a member is never a use ahead in the same one: it
    // waits for this member's epoch before it writes the buffer again).
    const std::uint64_t at =
        std::atomic_ref<std::uint64_t>(got.use).load(std::memory_order_acquire);
    if (at != use) {
      fail(Failure::kExcluded, member,
           "rank " + std::to_string(rankOf(member)) +
               " went on in a later generation without rank " +
               std::to_string(ranks_[static_cast<std::size_t>(index_)]) + " (it published use " +
               std::to_string(at) + " where this call waits for use " + std::to_string(use) +
               "): this rank was left out of a shrink or reform",
           waiting.name);
    }
    if (got.seq != expected.seq || got.fingerprint != expected.fingerprint) {
      fail(Failure::kMismatch, member,
           "rank " + std::to_string(ranks_[static_cast<std::size_t>(index_)]) + " expected " +
               describe(expected.seq, expected.fingerprint) + " from rank " +
               std::to_string(rankOf(member)) + ", got " + describe(got.seq, got.fingerprint),
           waiting.name);
    }
  }
  return payload(member, use);
}

SharedGroup::DirectStats& SharedGroup::directStatsOf(DirectCall call,
                                                     std::uint64_t bytes) noexcept {
  // by log2 of the bytes
  return directStats_[static_cast<int>(call)][63 - __builtin_clzll(bytes | 1)];
}

double SharedGroup::DirectStats::typical(int way) const noexcept {
  const double* v = nsPerByte[way];
  switch (std::min<std::uint32_t>(recorded[way], 3)) {
    case 0:
      return 0;
    case 1:
      return v[0];
    case 2:
      return 0.5 * (v[0] + v[1]);
    default:
      return std::max(std::min(v[0], v[1]), std::min(std::max(v[0], v[1]), v[2]));
  }
}

bool SharedGroup::chooseDirect(DirectCall call, std::uint64_t bytes) {
  if (directReads_ != DirectReads::kAuto) return directReads_ == DirectReads::kAlways;
  DirectStats& s = directStatsOf(call, bytes);
  const std::uint32_t n = s.calls++;
  // The first calls alternate, the group buffers first, until each way has 3 (a first call
  // may pay for touching fresh pages: the median leaves it out).
  if (s.recorded[0] < 3 || s.recorded[1] < 3) return n % 2 == 1;
  const bool faster = s.typical(1) < s.typical(0);
  if (s.chosen != (faster ? 1 : 0)) {
    s.chosen = faster ? 1 : 0;
    // Per call: its name, then what its two ways are called.
    static constexpr const char* kNames[][3] = {
        {"broadcast", "the group buffers", "direct reads"},
        {"allgather", "the group buffers", "direct reads"},
        {"allreduce", "the group buffers", "direct reads"},
        {"broadcast read directly", "the whole vector read directly",
         "a first part read directly, the rest through the group buffers"}};
    const auto& names = kNames[static_cast<int>(call)];
    const int log2 = 63 - __builtin_clzll(bytes | 1);
    COLLX_DEBUG(kShm,
                "shm {} of 2^{} to 2^{} bytes: {} now (the median of the last 3 calls: {:.4f} ns "
                "a byte with {}, {:.4f} with {})",
                names[0], log2, log2 + 1, names[faster ? 2 : 1], s.typical(0), names[1],
                s.typical(1), names[2]);
  }
  return n % 16 == 15 ? !faster : faster;
}

void SharedGroup::recordDirect(DirectCall call, std::uint64_t bytes, bool direct,
                               std::chrono::nanoseconds took) noexcept {
  if (bytes == 0) return;
  DirectStats& s = directStatsOf(call, bytes);
  const int way = direct ? 1 : 0;
  s.nsPerByte[way][s.recorded[way]++ % 3] =
      static_cast<double>(took.count()) / static_cast<double>(bytes);
}

void SharedGroup::checkCall(int member, const Waiting& waiting) {
  std::uint64_t seq = 0;
  Fingerprint fp;
  std::int64_t generation = 0;
  if (!announced(member, seq, fp, generation)) return;
  if (generation > generation_) {
    fail(Failure::kExcluded, member,
         "rank " + std::to_string(rankOf(member)) + " runs " + describe(seq, fp) +
             " in generation " + std::to_string(generation) + ", without rank " +
             std::to_string(ranks_[static_cast<std::size_t>(index_)]) + " (generation " +
             std::to_string(generation_) + "): this rank was left out of a shrink or reform",
         waiting.name);
  }
  // (An older generation's: the member has not announced a call of this one yet.)
  if (generation < generation_ || seq != waiting.seq || fp == waiting.fingerprint) return;
  fail(Failure::kMismatch, member,
       "rank " + std::to_string(ranks_[static_cast<std::size_t>(index_)]) + " expected " +
           describe(waiting.seq, waiting.fingerprint) + " from rank " +
           std::to_string(rankOf(member)) + ", got " + describe(seq, fp),
       waiting.name);
}

void SharedGroup::waitFor(int member, std::uint64_t use, const Waiting& waiting) {
  const auto& name = waiting.name;
  const auto start = Clock::now();
  waiting.lastLook = start;
  if (waiting.deadline == Clock::time_point::max()) waiting.deadline = start + waiting.timeout;
  const auto deadline = waiting.deadline;
  auto nextCheck =
      start + std::min(kCheckPeriod, Clock::duration(policy_.spin) + kYieldingCheckPeriod);
  bool noted = false;
  bool slept = false;
  for (;;) {
    // A short burst of looks before anything costlier (one look when spin is 0).
    const int looks = policy_.spin.count() > 0 ? 64 : 1;
    for (int i = 0; i < looks; ++i) {
      const std::uint32_t epoch = epochOf(member);
      if (hasPublished(member, epoch, use)) {
        // (A re-formed group's epoch may still be the old generation's: only `use` is sure.)
        const auto ahead = static_cast<std::uint32_t>(epoch - static_cast<std::uint32_t>(use));
        seen_[static_cast<std::size_t>(member)] = use + (base_ == 0 ? ahead : 0);
        if (slept) endSleptWait(member, use, start, waiting);
        return;
      }
      cpuRelax();
    }
    const auto now = Clock::now();
    waiting.lastLook = now;
    const auto waited = now - start;
    if (now >= nextCheck) {
      check(member, name);
      checkCall(member, waiting);
      nextCheck = now + (waited < policy_.spin ? kCheckPeriod : kYieldingCheckPeriod);
    }
    if (now >= deadline) {
      fail(Failure::kTimeout, member,
           "timed out after " + std::to_string(waiting.timeout.count()) + " ms waiting for rank " +
               std::to_string(rankOf(member)) + " (shared memory: its use " + std::to_string(use) +
               " of the group buffers)",
           name);
    }
    if (waited < policy_.spin) continue;
    if (waited < policy_.spin + policy_.yield) {
      sched_yield();
      continue;
    }
    const std::uint32_t seen = epochOf(member);
    if (hasPublished(member, seen, use)) continue;
    check(member, name);
    if (!noted && waited >= kNoteAfter && waiting.sleeping) {
      noted = true;
      waiting.sleeping(rankOf(member), use, start);
    }
    slept = true;
    sleep(member, seen, std::min(deadline, Clock::now() + kMaxSleep));
  }
}

void SharedGroup::endSleptWait(int member, std::uint64_t use, Clock::time_point since,
                               const Waiting& waiting) {
  // (Read after a sleep, a system call: the clock costs nothing in comparison.)
  const auto took = Clock::now() - since;
  waitedNs_.store(waitedNs_.load(std::memory_order_relaxed) +
                      static_cast<std::uint64_t>(
                          std::chrono::duration_cast<std::chrono::nanoseconds>(took).count()),
                  std::memory_order_relaxed);
  if (waiting.slept) waiting.slept(rankOf(member), use, since);
}

}  // namespace collx::transport
