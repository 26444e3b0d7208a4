#include "shm_group.h"

#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

namespace collx::transport::shm {

namespace {

using Clock = std::chrono::steady_clock;

// madvise(MADV_POPULATE_READ), Linux 5.14 (older kernels refuse it: the pages then fault in
// at first use).
constexpr int kPopulateRead = 22;

// Shared (not private) futexes: the word lives in memory other processes map.
long futexWait(std::uint32_t* word, std::uint32_t expected, std::chrono::nanoseconds timeout) {
  const auto ns = std::max<std::int64_t>(timeout.count(), 0);
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  return ::syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futexWake(std::uint32_t* word) {
  ::syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

ShmGroup::ShmGroup(LinkState& link, std::vector<GroupMember> members, int self,
                   std::size_t bufferBytes, int bellSocket, int slot, ShmGroup* parent,
                   std::int64_t generation, std::uint64_t base)
    : SharedGroup(
          [&] {
            std::vector<int> ranks;
            ranks.reserve(members.size());
            for (const auto& m : members) ranks.push_back(m.rank);
            return ranks;
          }(),
          self, bufferBytes, WaitPolicy{}, parent != nullptr ? parent->generation() : generation,
          parent != nullptr ? parent->firstUse() : base),
      link_(link),
      members_(std::move(members)),
      bellSocket_(bellSocket),
      parent_(parent) {
  slot_ = slot;
  for (const auto& m : members_) {
    controls_.push_back(slot < 0 ? m.mapping->group(m.layout)
                                 : m.mapping->slotGroup(m.layout, slot));
    buffers_.push_back(slot < 0 ? m.mapping->groupBuffer(m.layout, 0)
                                : m.mapping->slotBuffer(m.layout, slot));
  }
  stride_ = members_[static_cast<std::size_t>(self)].layout.groupStride;
  // Every page of the group buffers now (this member's written, the others' read), not in
  // the first calls that use them: a first touch of a shared page costs a fault, and 4 x 256
  // KiB of them made the first large broadcasts 10x slower than the next ones.
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  // (A re-formed group's pages are the old group's, touched already.)
  for (std::size_t m = 0; m < buffers_.size() && base_ == 0; ++m) {
    if (static_cast<int>(m) != self && slot >= 0) {
      // A sub-group's members may be writing their slots already (they made the group
      // first): the kernel maps those pages without reading them here.
      const auto begin = reinterpret_cast<std::uintptr_t>(buffers_[m]) / page * page;
      const auto end = reinterpret_cast<std::uintptr_t>(buffers_[m]) + stride_ * kBuffers;
      (void)::madvise(reinterpret_cast<void*>(begin), end - begin, kPopulateRead);
      continue;
    }
    for (std::size_t at = 0; at < stride_ * kBuffers; at += page) {
      if (static_cast<int>(m) == self) {
        atomic(buffers_[m][at]).fetch_or(0, std::memory_order_relaxed);
      } else {
        (void)atomic(buffers_[m][at]).load(std::memory_order_relaxed);
      }
    }
  }
  canReadPeers_ = true;
  for (std::size_t m = 0; m < members_.size(); ++m) {
    if (static_cast<int>(m) != self && !members_[m].cma) {
      canReadPeers_ = false;
    }
  }
  // Every member's epoch starts at 0 (a fresh arena is zeroed, a slot is zeroed before it is
  // offered).
  if (parent_ != nullptr) {
    failMesh_ = parent_->failMesh_;
    silenceCheck_ = parent_->silenceCheck_;
    abortRequested_ = parent_->abortRequested_;
    stopRequest_ = parent_->stopRequest_;
    policy_ = parent_->policy_;
  }
}

ShmGroup::~ShmGroup() {
  if (parent_ == nullptr) return;
  // This member reads no member's slot any more: the members of this sub-group may give the
  // slot to another one.
  const GroupMember& self = members_[static_cast<std::size_t>(index_)];
  std::lock_guard<std::mutex> lock(parent_->slotMutex_);
  std::erase(parent_->subGroups_, this);
  atomic(self.mapping->slot(self.layout, slot_)->busy).store(0, std::memory_order_release);
  parent_->slotsUsed_ &= ~(1u << slot_);
}

void ShmGroup::zeroSlot(int slot) noexcept {
  const GroupMember& self = members_[static_cast<std::size_t>(index_)];
  std::memset(static_cast<void*>(self.mapping->slotGroup(self.layout, slot)), 0,
              sizeof(GroupControl));
  std::uint8_t* buffer = self.mapping->slotBuffer(self.layout, slot);
  for (int b = 0; b < kBuffers; ++b) {
    std::memset(buffer + self.layout.groupStride * static_cast<std::size_t>(b), 0, kHeaderBytes);
  }
}

SlotOffer ShmGroup::offerSlots(const std::vector<int>& ranks) {
  // (Not a re-formed group: the old generation's sub-groups may still hold slots here, and
  // members left out still read theirs. Its splits go over the pairs.)
  if (parent_ != nullptr || base_ != 0 || ranks.size() < 2) return {};
  SlotOffer out;
  out.canRead = true;
  std::vector<int> indices;
  for (int rank : ranks) {
    auto it = std::find_if(members_.begin(), members_.end(),
                           [rank](const GroupMember& m) { return m.rank == rank; });
    if (it == members_.end()) return {};
    const int m = static_cast<int>(it - members_.begin());
    if (m != index_ && !it->cma) out.canRead = false;
    indices.push_back(m);
  }
  if (std::find(indices.begin(), indices.end(), index_) == indices.end()) return {};
  std::lock_guard<std::mutex> lock(slotMutex_);
  if (failed_.load(std::memory_order_acquire)) return {};
  for (int s = 0; s < kSlots; ++s) {
    const std::uint32_t bit = 1u << s;
    if (((slotsUsed_ | slotsOffered_ | slotsWithdrawn_) & bit) != 0) continue;
    bool free = true;
    for (int m : slotMembers_[s]) {
      const GroupMember& member = members_[static_cast<std::size_t>(m)];
      if (m != index_ &&
          atomic(member.mapping->slot(member.layout, s)->busy).load(std::memory_order_acquire) !=
              0) {
        free = false;  // it still reads this member's slot, or uses its own again
        break;
      }
    }
    if (!free) continue;
    zeroSlot(s);
    out.slots |= bit;
  }
  slotsOffered_ |= out.slots;
  if (out.slots == 0) out.canRead = false;
  return out;
}

std::unique_ptr<SharedGroup> ShmGroup::subGroup(const std::vector<int>& ranks, int slot,
                                                std::uint32_t offered) {
  std::vector<GroupMember> members;
  std::vector<int> indices;
  int self = -1;
  for (int rank : ranks) {
    auto it = std::find_if(members_.begin(), members_.end(),
                           [rank](const GroupMember& m) { return m.rank == rank; });
    if (it == members_.end() || slot < 0 || slot >= kSlots || (offered >> slot & 1u) == 0) {
      withdrawSlots(offered, false);
      throw InvalidArgument(Where{link_.rank, "split", rank},
                            "rank " + std::to_string(rank) +
                                " is not in this rank's shared-memory group, or slot " +
                                std::to_string(slot) + " was not offered");
    }
    if (rank == link_.rank) self = static_cast<int>(members.size());
    indices.push_back(static_cast<int>(it - members_.begin()));
    members.push_back(*it);
  }
  {
    std::lock_guard<std::mutex> lock(slotMutex_);
    slotsOffered_ &= ~offered;
    slotsUsed_ |= 1u << slot;
    slotMembers_[slot] = std::move(indices);
  }
  const GroupMember& mine = members_[static_cast<std::size_t>(index_)];
  atomic(mine.mapping->slot(mine.layout, slot)->busy).store(1, std::memory_order_release);
  auto group = std::make_unique<ShmGroup>(link_, std::move(members), self, bufferBytes_,
                                          bellSocket_, slot, this);
  std::lock_guard<std::mutex> lock(slotMutex_);
  subGroups_.push_back(group.get());
  if (failed_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> error(errorMutex_);
    group->setFailure(errorKind_, errorCulprit_, errorText_, errorWhat_);
  }
  return group;
}

void ShmGroup::withdrawSlots(std::uint32_t offered, bool forGood) noexcept {
  std::lock_guard<std::mutex> lock(slotMutex_);
  slotsOffered_ &= ~offered;
  if (forGood) slotsWithdrawn_ |= offered;
}

std::uint32_t ShmGroup::epochOf(int member) const {
  return atomic(controls_[static_cast<std::size_t>(member)]->epoch).load(std::memory_order_acquire);
}

UseHeader* ShmGroup::headerOf(int member, std::uint64_t use) const {
  static_assert(sizeof(UseHeader) <= kHeaderBytes);
  return reinterpret_cast<UseHeader*>(buffers_[static_cast<std::size_t>(member)] +
                                      stride_ * (use % kBuffers));
}

std::uint8_t* ShmGroup::payload(int member, std::uint64_t use) const {
  return buffers_[static_cast<std::size_t>(member)] + stride_ * (use % kBuffers) + kHeaderBytes;
}

void ShmGroup::publish() {
  GroupControl* mine = controls_[static_cast<std::size_t>(index_)];
  ++published_;
  atomic(headerOf(index_, published_)->use).store(published_, std::memory_order_release);
  atomic(mine->epoch).store(static_cast<std::uint32_t>(published_), std::memory_order_release);
  // Against a sleeper's "sleepers++, then look at epoch": one of us sees the other.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (atomic(mine->sleepers).load(std::memory_order_relaxed) != 0) {
    futexWake(&mine->epoch);
    ringSleepers();  // and the members that sleep in their mesh's poll (expect())
  }
}

void ShmGroup::ringSleepers() noexcept {
  for (std::size_t m = 0; m < members_.size(); ++m) {
    if (static_cast<int>(m) == index_) continue;
    // As a pair's writer does (shm_pair.cc notifyPeer): the sleeper set `sleeping`, fenced,
    // then looked at our epoch; we stored the epoch, fenced, then look at `sleeping`.
    auto sleeping = atomic(members_[m].mapping->header()->sleeping);
    if (sleeping.load(std::memory_order_relaxed) != 0 &&
        sleeping.exchange(0, std::memory_order_acq_rel) != 0) {
      ssize_t ignored =
          ::sendto(bellSocket_, "", 0, MSG_DONTWAIT | MSG_NOSIGNAL,
                   reinterpret_cast<const sockaddr*>(&members_[m].bell), members_[m].bellLength);
      (void)ignored;  // a full queue already holds a wakeup
    }
  }
}

bool ShmGroup::reached(int member, std::uint64_t use) const noexcept {
  return hasPublished(member, epochOf(member), use);
}

bool ShmGroup::expect(int member, std::uint64_t use) {
  atomic(controls_[static_cast<std::size_t>(member)]->sleepers)
      .fetch_add(1, std::memory_order_seq_cst);
  if (reached(member, use)) {
    atomic(controls_[static_cast<std::size_t>(member)]->sleepers)
        .fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  expectedMember_ = member;
  expectedUse_ = use;
  return true;
}

void ShmGroup::endExpect() noexcept {
  if (expectedMember_ < 0) return;
  atomic(controls_[static_cast<std::size_t>(expectedMember_)]->sleepers)
      .fetch_sub(1, std::memory_order_relaxed);
  expectedMember_ = -1;
}

bool ShmGroup::expectationMet() noexcept {
  if (expectedMember_ >= 0 && reached(expectedMember_, expectedUse_)) return true;
  if (parent_ != nullptr) return false;
  std::lock_guard<std::mutex> lock(slotMutex_);
  for (ShmGroup* sub : subGroups_) {
    if (sub->expectationMet()) return true;
  }
  return false;
}

void ShmGroup::readFrom(int member, std::uint64_t address, void* dst, std::uint64_t bytes,
                        const Waiting& waiting) {
  const GroupMember& m = members_[static_cast<std::size_t>(member)];
  // (Not whether it still runs: a read from a process that exited fails, and the check
  // after the read asks; that costs a system call.)
  checkState(member, waiting.name, false);
  int err = 0;
  if (!readProcessMemory(m.pid, m.samePid, address, dst, bytes, err)) {
    check(member, waiting.name, false);  // closed or failed: that is the error
    // No such process: it is exiting (its pidfd may not say so yet).
    raise(ErrorKind::kIo, m.rank,
          err == ESRCH ? diedText(m)
                       : "reading rank " + std::to_string(m.rank) +
                             "'s buffer (process_vm_readv) failed: " + std::strerror(err),
          waiting.name, true);
  }
  // The member still waits for this rank (it did not fail or leave during the copy), so
  // what was read is its buffer as the call found it.
  check(member, waiting.name, false);
}

void ShmGroup::announce(std::uint64_t seq, const Fingerprint& fingerprint) noexcept {
  GroupControl* mine = controls_[static_cast<std::size_t>(index_)];
  static_assert(sizeof(Fingerprint) <= sizeof(mine->fingerprint));
  std::uint64_t words[2] = {};
  std::memcpy(words, &fingerprint, sizeof(Fingerprint));
  auto version = atomic(mine->version);
  const std::uint64_t v = version.load(std::memory_order_relaxed);
  version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  atomic(mine->seq).store(seq, std::memory_order_relaxed);
  atomic(mine->fingerprint[0]).store(words[0], std::memory_order_relaxed);
  atomic(mine->fingerprint[1]).store(words[1], std::memory_order_relaxed);
  atomic(mine->generation)
      .store(static_cast<std::uint64_t>(generation_), std::memory_order_relaxed);
  version.store(v + 2, std::memory_order_release);
}

bool ShmGroup::announced(int member, std::uint64_t& seq, Fingerprint& fingerprint,
                         std::int64_t& generation) const {
  GroupControl* theirs = controls_[static_cast<std::size_t>(member)];
  const std::uint64_t before = atomic(theirs->version).load(std::memory_order_acquire);
  if (before == 0 || (before & 1) != 0) return false;
  seq = atomic(theirs->seq).load(std::memory_order_relaxed);
  std::uint64_t words[2] = {atomic(theirs->fingerprint[0]).load(std::memory_order_relaxed),
                            atomic(theirs->fingerprint[1]).load(std::memory_order_relaxed)};
  generation =
      static_cast<std::int64_t>(atomic(theirs->generation).load(std::memory_order_relaxed));
  std::atomic_thread_fence(std::memory_order_acquire);
  if (atomic(theirs->version).load(std::memory_order_relaxed) != before) return false;
  std::memcpy(&fingerprint, words, sizeof(Fingerprint));
  return true;
}

void ShmGroup::sleep(int member, std::uint32_t seen, Clock::time_point until) {
  GroupControl* theirs = controls_[static_cast<std::size_t>(member)];
  atomic(theirs->sleepers).fetch_add(1, std::memory_order_seq_cst);
  if (atomic(theirs->epoch).load(std::memory_order_seq_cst) == seen) {
    futexWait(&theirs->epoch, seen, until - Clock::now());
  }
  atomic(theirs->sleepers).fetch_sub(1, std::memory_order_relaxed);
}

void ShmGroup::failed(const Error& error) noexcept {
  setFailure(error.kind(), error.peer(), error.detail(), error.what());
}

void ShmGroup::setFailure(ErrorKind kind, int culprit, const std::string& text,
                          const std::string& what) noexcept {
  {
    std::lock_guard<std::mutex> lock(errorMutex_);
    if (failed_.load(std::memory_order_relaxed)) return;
    errorKind_ = kind;
    errorCulprit_ = culprit;
    errorText_ = text;
    errorWhat_ = what;
    failed_.store(true, std::memory_order_release);
    // Members of this process sleeping on this rank wake and see it; and every member that
    // sleeps on another (a dead one, whose epoch nobody else would touch) wakes to look
    // now instead of at the end of its sleep.
    for (GroupControl* control : controls_) futexWake(&control->epoch);
  }
  if (parent_ != nullptr) return;
  std::lock_guard<std::mutex> lock(slotMutex_);
  for (ShmGroup* sub : subGroups_) sub->setFailure(kind, culprit, text, what);
}

void ShmGroup::raise(ErrorKind kind, int culprit, const std::string& detail, const CallNamer& name,
                     bool failMesh) {
  const Where where{link_.rank, name ? name() : std::string("shm group"), culprit};
  if (failMesh && failMesh_) {
    try {
      throwError(kind, where, detail);
    } catch (const Error& e) {
      failMesh_(e);
    }
  }
  throwError(kind, where, detail);
}

std::string ShmGroup::diedText(const GroupMember& m) {
  return "rank " + std::to_string(m.rank) + " (pid " + std::to_string(m.pid) +
         ") exited without closing its context: rank " + std::to_string(m.rank) +
         " died or was killed";
}

void ShmGroup::check(int member, const CallNamer& name, bool starting) {
  checkState(member, name, starting);
  if (member < 0) return;
  const GroupMember& m = members_[static_cast<std::size_t>(member)];
  bool gone = false;
  if (!m.samePid && m.pidfd >= 0) {
    pollfd p{m.pidfd, POLLIN, 0};
    gone = ::poll(&p, 1, 0) > 0;  // readable once the process exited, zombie or not
  } else if (!m.samePid) {
    gone = ::kill(m.pid, 0) != 0 && errno == ESRCH;
  }
  if (gone) raise(ErrorKind::kIo, m.rank, diedText(m), name, true);
  if (silenceCheck_ && member != index_) checkSilence(member, name);
}

void ShmGroup::checkSilence(int member, const CallNamer& name) {
  // A member not looked at for this long: a new wait on it starts now.
  constexpr std::chrono::milliseconds kNewWait(100);
  const auto now = Clock::now();
  if (silence_.empty()) silence_.resize(members_.size());
  Silence& s = silence_[static_cast<std::size_t>(member)];
  const std::uint32_t epoch = epochOf(member);
  if (epoch != s.epoch || now - s.looked > kNewWait) {
    s.epoch = epoch;
    s.heard = now;
  }
  s.looked = now;
  const int rank = members_[static_cast<std::size_t>(member)].rank;
  const std::string text = silenceCheck_(rank, s.heard, now);
  if (!text.empty()) raise(ErrorKind::kIo, rank, text, name, true);
}

void ShmGroup::checkState(int member, const CallNamer& name, bool starting) {
  if (failed_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(errorMutex_);
    if (starting) {
      raise(errorKind_, errorCulprit_,
            "the context failed earlier and takes no more work: " + errorWhat_, name, false);
    }
    raise(errorKind_, errorCulprit_, errorText_, name, false);
  }
  if (abortRequested_ != nullptr && abortRequested_->load(std::memory_order_acquire)) {
    raise(stopRequest_->kind, stopRequest_->culprit, stopRequest_->reason, name, true);
  }
  if (member < 0) return;
  const GroupMember& m = members_[static_cast<std::size_t>(member)];
  const ArenaHeader& h = *m.mapping->header();
  const auto state = atomic(const_cast<std::uint32_t&>(h.state)).load(std::memory_order_acquire);
  if (state == static_cast<std::uint32_t>(State::kFailed)) {
    PublishedError e = readError(h);
    int culprit = e.culprit;
    if (culprit < 0 || culprit == link_.rank) culprit = m.rank;
    // (A revoke names who revoked, whoever passed it on.)
    if (culprit != m.rank && errorKindFrom(e.kind) != ErrorKind::kRevoked) {
      e.text = "rank " + std::to_string(m.rank) + " failed: " + e.text;
    }
    raise(errorKindFrom(e.kind), culprit, e.text, name, true);
  }
  if (state == static_cast<std::uint32_t>(State::kClosed)) {
    raise(ErrorKind::kIo, m.rank,
          "rank " + std::to_string(m.rank) + " closed its context while rank " +
              std::to_string(link_.rank) + " waited for it",
          name, true);
  }
}

void ShmGroup::fail(Failure kind, int member, const std::string& what, const CallNamer& name) {
  const ErrorKind error = kind == Failure::kTimeout    ? ErrorKind::kTimeout
                          : kind == Failure::kExcluded ? ErrorKind::kExcluded
                                                       : ErrorKind::kMismatch;
  raise(error, rankOf(member), what, name, true);
}

std::string ShmGroup::describe(std::uint64_t seq, const Fingerprint& fp) const {
  return link_.describe(MessageKey{seq, 0, Space::kCollective}, fp);
}

}  // namespace collx::transport::shm
