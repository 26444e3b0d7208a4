#include "ibverbs/registrations.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "collx/base/log.h"

namespace collx::transport::ibverbs {

namespace {

constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
const std::uintptr_t kPage = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));

std::atomic<std::uint64_t> gRegistrations{0}, gHits{0}, gInvalidations{0}, gEvictions{0},
    gUncached{0};

// Faults in every page of [start, end) for writing, as ibv_reg_mr will (and before the range
// is watched: a page missing from a watched range reads as a change of its memory).
void populate(std::uintptr_t start, std::uintptr_t end) noexcept {
  void* at = reinterpret_cast<void*>(start);
  if (::madvise(at, end - start, MADV_POPULATE_WRITE) == 0) return;
  if (errno != EINVAL && ::madvise(at, end - start, MADV_POPULATE_READ) == 0) return;
  if (errno != EINVAL) return;  // not mapped, or not readable: registering it fails anyway
  // A kernel before 5.14: reading each page maps it (the zero page for untouched memory).
  for (std::uintptr_t page = start; page < end; page += kPage) {
    [[maybe_unused]] volatile char byte = *reinterpret_cast<volatile const char*>(page);
  }
}

}  // namespace

struct Registrations::Entry : Watch {
  // kRegistering: watched, in no list yet; kCached: in lru_; kInvalid: in dead_; kGone: in
  // neither, about to be deregistered and freed (or in a destroy() chain).
  enum class State { kRegistering, kCached, kInvalid, kGone };
  ibv_mr* mr = nullptr;
  int refs = 0;
  State state = State::kRegistering;
  // In lru_ or dead_, or a destroy() chain's links once kGone.
  Entry* newer = nullptr;
  Entry* older = nullptr;
  std::list<Entry>::iterator self;
  std::uint64_t bytes() const noexcept { return end - start; }
};

void Registrations::Chain::pushFront(Entry& e) noexcept {
  e.newer = nullptr;
  e.older = head;
  if (head != nullptr) head->newer = &e;
  head = &e;
  if (tail == nullptr) tail = &e;
}

void Registrations::Chain::unlink(Entry& e) noexcept {
  (e.newer != nullptr ? e.newer->older : head) = e.older;
  (e.older != nullptr ? e.older->newer : tail) = e.newer;
  e.newer = e.older = nullptr;
}

Registrations::Counters Registrations::AtomicCounters::load() const noexcept {
  return Counters{registrations.load(), hits.load(), invalidations.load(), evictions.load(),
                  uncached.load()};
}

Registrations::Registrations(std::shared_ptr<const VerbsLibrary> library, ibv_pd* pd,
                             std::uint64_t cacheBytes)
    : library_(std::move(library)), pd_(pd), bound_(cacheBytes) {
  if (bound_ == 0) return;
  std::string why;
  monitor_ = MemoryMonitor::acquire(&why);
  if (monitor_ == nullptr) {
    COLLX_DEBUG(kIbverbs, "no registration cache: {}; user buffers are registered per message",
                why);
  }
}

Registrations::~Registrations() {
  Chain all;
  if (monitor_ != nullptr) {
    std::lock_guard lock(monitor_->mutex());
    for (Entry& e : entries_) {
      forgetLocked(e);
      all.pushFront(e);
    }
  }
  destroy(all);
  monitor_.reset();  // the last cache stops the monitor
}

void Registrations::count(std::atomic<std::uint64_t> AtomicCounters::*which) noexcept {
  (counters_.*which).fetch_add(1, std::memory_order_relaxed);
  std::atomic<std::uint64_t>* total = which == &AtomicCounters::registrations   ? &gRegistrations
                                      : which == &AtomicCounters::hits          ? &gHits
                                      : which == &AtomicCounters::invalidations ? &gInvalidations
                                      : which == &AtomicCounters::evictions     ? &gEvictions
                                                                                : &gUncached;
  total->fetch_add(1, std::memory_order_relaxed);
}

// Both under the monitor's mutex: a change of memory that returned to its caller has been
// counted (the monitor reads and applies events under it).
Registrations::Counters Registrations::counters() const noexcept {
  if (monitor_ == nullptr) return counters_.load();
  std::lock_guard lock(monitor_->mutex());
  return counters_.load();
}

Registrations::Counters Registrations::totals() noexcept {
  auto monitor = MemoryMonitor::current();
  std::unique_lock<std::mutex> lock;
  if (monitor != nullptr) lock = std::unique_lock(monitor->mutex());
  return Counters{gRegistrations.load(), gHits.load(), gInvalidations.load(), gEvictions.load(),
                  gUncached.load()};
}

std::uint64_t Registrations::cachedBytes() const noexcept {
  if (monitor_ == nullptr) return 0;
  std::lock_guard lock(monitor_->mutex());
  return cachedBytes_;
}

ibv_mr* Registrations::regMr(void* address, std::uint64_t length, std::string* why) {
  ibv_mr* mr = library_->api().regMr(pd_, address, length, kAccess);
  if (mr == nullptr) {
    const int error = errno;
    *why = "ibv_reg_mr of " + std::to_string(length) + " bytes failed: " + std::strerror(error);
    if (error == ENOMEM || error == EAGAIN) {
      *why += " (the locked-memory limit, ulimit -l, may be too low)";
    }
    return nullptr;
  }
  count(&AtomicCounters::registrations);
  return mr;
}

void Registrations::deregister(ibv_mr* mr) noexcept {
  if (mr == nullptr) return;
  if (int rc = library_->api().deregMr(mr); rc != 0) logDestroyFailure("memory region", rc);
}

Registrations::Handle Registrations::registerOnce(void* address, std::uint64_t length,
                                                  std::string* why) {
  ibv_mr* mr = regMr(address, length, why);
  if (mr != nullptr) count(&AtomicCounters::uncached);
  return Handle{mr, nullptr};
}

void Registrations::explainUncached(int error) noexcept {
  if (std::find(explained_.begin(), explained_.end(), error) != explained_.end()) return;
  explained_.push_back(error);
  COLLX_DEBUG(kIbverbs,
              "a buffer is registered per message, not cached: userfaultfd cannot watch its "
              "memory ({}; file-backed or hugetlbfs memory?)",
              std::strerror(error));
}

Registrations::Handle Registrations::acquire(void* address, std::uint64_t length,
                                             std::string* why) {
  reap();
  const auto begin = reinterpret_cast<std::uintptr_t>(address);
  const std::uintptr_t start = begin & ~(kPage - 1);
  const std::uintptr_t end = (begin + length + kPage - 1) & ~(kPage - 1);
  if (monitor_ == nullptr || length == 0 || end - start > bound_) {
    return registerOnce(address, length, why);
  }
  {
    std::lock_guard lock(monitor_->mutex());
    for (Entry* e = lru_.head; e != nullptr; e = e->older) {
      if (e->start <= start && e->end >= end) {
        ++e->refs;
        lru_.unlink(*e);
        lru_.pushFront(*e);
        count(&AtomicCounters::hits);
        return Handle{e->mr, e};
      }
    }
  }
  // A miss: populate the pages, watch the range, register it. The monitor may invalidate the
  // entry at any point from the watch on; it is then used for this message only.
  populate(start, end);
  Entry& e = entries_.emplace_back();
  e.self = std::prev(entries_.end());
  e.start = start;
  e.end = end;
  e.watcher = this;
  e.refs = 1;
  int error = 0;
  bool watching;
  {
    std::lock_guard lock(monitor_->mutex());
    watching = monitor_->add(e, &error);
  }
  if (!watching) {
    entries_.erase(e.self);
    explainUncached(error);
    return registerOnce(address, length, why);
  }
  ibv_mr* mr = regMr(reinterpret_cast<void*>(start), end - start, why);
  Chain evicted;
  {
    std::lock_guard lock(monitor_->mutex());
    if (mr == nullptr) {
      forgetLocked(e);
    } else {
      e.mr = mr;
      if (e.state == Entry::State::kRegistering) {
        e.state = Entry::State::kCached;
        lru_.pushFront(e);
        cachedBytes_ += e.bytes();
        evictLocked(evicted);
      }
    }
  }
  destroy(evicted);
  if (mr == nullptr) {  // the device refuses the whole pages: the buffer alone, as before
    entries_.erase(e.self);
    return registerOnce(address, length, why);
  }
  return Handle{mr, &e};
}

void Registrations::release(Handle& handle) noexcept {
  if (handle.mr == nullptr) return;
  if (handle.entry == nullptr) {
    deregister(handle.mr);
  } else {
    Chain evicted;
    {
      std::lock_guard lock(monitor_->mutex());
      --handle.entry->refs;
      evictLocked(evicted);
    }
    destroy(evicted);
    reap();
  }
  handle = Handle{};
}

void Registrations::forgetLocked(Entry& e) noexcept {
  monitor_->remove(e);
  if (e.state == Entry::State::kCached) {
    lru_.unlink(e);
    cachedBytes_ -= e.bytes();
  } else if (e.state == Entry::State::kInvalid) {
    dead_.unlink(e);
  }
  e.state = Entry::State::kGone;
}

void Registrations::evictLocked(Chain& out) noexcept {
  for (Entry* e = lru_.tail; e != nullptr && cachedBytes_ > bound_;) {
    Entry* newer = e->newer;
    if (e->refs == 0) {
      forgetLocked(*e);
      out.pushFront(*e);
      count(&AtomicCounters::evictions);
    }
    e = newer;
  }
}

void Registrations::reap() noexcept {
  // Nothing invalidated (the common case): no lock taken. A flag raised after this look is
  // seen by the next acquire() or release(); the entry is never handed out meanwhile.
  if (monitor_ == nullptr || !anyDead_.load(std::memory_order_acquire)) return;
  Chain gone;
  {
    std::lock_guard lock(monitor_->mutex());
    for (Entry* e = dead_.head; e != nullptr;) {
      Entry* older = e->older;
      if (e->refs == 0) {
        forgetLocked(*e);
        gone.pushFront(*e);
      }
      e = older;
    }
    anyDead_.store(dead_.head != nullptr, std::memory_order_relaxed);
  }
  destroy(gone);
}

void Registrations::destroy(Chain& chain) noexcept {
  for (Entry* e = chain.head; e != nullptr;) {
    Entry* older = e->older;
    deregister(e->mr);
    entries_.erase(e->self);
    e = older;
  }
  chain = Chain{};
}

void Registrations::watched(Watch& watch) noexcept {
  auto& e = static_cast<Entry&>(watch);
  if (e.state == Entry::State::kCached) {
    lru_.unlink(e);
    cachedBytes_ -= e.bytes();
  }
  if (e.state == Entry::State::kCached || e.state == Entry::State::kRegistering) {
    e.state = Entry::State::kInvalid;
    dead_.pushFront(e);
    anyDead_.store(true, std::memory_order_release);
    count(&AtomicCounters::invalidations);
  }
}

}  // namespace collx::transport::ibverbs
