// Registrations: user buffers registered with the RDMA device (memory regions), kept in a
// cache between messages (internal).
//
// Every registration allows local and remote writes: a receive buffer's rkey goes to the peer
// in READY, a send buffer's lkey is used by the RDMA WRITE that pushes it. Only receive
// buffers' keys ever leave this rank.
//
// The cache (COLLX_IB_MR_CACHE bytes; 0: none): entries cover page-aligned ranges, and a
// buffer that lies inside an entry's range uses that entry's memory region (a hit) instead of
// a registration of its own. Entries that a message uses are never evicted; the others go,
// least recently used first, while the cached bytes exceed the bound. A cached range is
// watched by the process's MemoryMonitor (memory_monitor.h): when its memory is unmapped,
// dropped or moved, the entry is invalidated before the call that changed the memory
// returns, so that a later buffer at the same addresses never meets the old registration
// (which would let the device access the old pages). An invalidated entry is never handed out
// again; its region is deregistered by this cache's thread (the monitor's thread may not
// block on the library) at its next acquire() or release(), or when the last message using it
// releases it.
//
// Not cached (registered for one use, as with a bound of 0): everything where userfaultfd is
// unavailable, and ranges that cannot be watched (file-backed other than shmem, hugetlbfs,
// ...) or that exceed the bound alone. One debug line says why, once per reason.
//
// Threading: acquire() and release() are called by the thread that drives the mesh's
// progress only; the monitor's thread invalidates entries concurrently, under its mutex.
// counters() may be called from any thread.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "ibverbs/memory_monitor.h"
#include "ibverbs/verbs_api.h"

namespace collx::transport::ibverbs {

class Registrations final : private Watch::Watcher {
 public:
  struct Entry;

  struct Handle {
    ibv_mr* mr = nullptr;
    Entry* entry = nullptr;  // the cache's entry; null: registered for this use only
    explicit operator bool() const noexcept { return mr != nullptr; }
    std::uint32_t lkey() const noexcept { return mr->lkey; }
    std::uint32_t rkey() const noexcept { return mr->rkey; }
  };

  struct Counters {
    std::uint64_t registrations = 0;  // ibv_reg_mr calls (cached or not)
    std::uint64_t hits = 0;           // acquisitions served by a cached entry
    std::uint64_t invalidations = 0;  // entries whose memory changed under them
    std::uint64_t evictions = 0;      // entries dropped to stay within the bound
    std::uint64_t uncached = 0;       // registrations for one use only
  };

  // `cacheBytes`: the bound (IbOptions::mrCacheBytes); 0 registers for each use.
  Registrations(std::shared_ptr<const VerbsLibrary> library, ibv_pd* pd, std::uint64_t cacheBytes);
  ~Registrations();
  Registrations(const Registrations&) = delete;
  Registrations& operator=(const Registrations&) = delete;

  // A registration that covers [address, address + length): a cached one, or a new one. Null
  // with `*why` (the library's errno text) when the device refuses (memory not mapped, the
  // locked-memory limit reached, ...).
  Handle acquire(void* address, std::uint64_t length, std::string* why);
  // The handle's memory is no longer used by the device; `handle` is reset.
  void release(Handle& handle) noexcept;

  // Whether buffers are cached here (a bound above 0 and userfaultfd available).
  bool caching() const noexcept { return monitor_ != nullptr; }
  Counters counters() const noexcept;
  std::uint64_t cachedBytes() const noexcept;
  // The sums over every cache this process has had, for tests that see no cache.
  static Counters totals() noexcept;

 private:
  struct AtomicCounters {
    std::atomic<std::uint64_t> registrations{0}, hits{0}, invalidations{0}, evictions{0},
        uncached{0};
    Counters load() const noexcept;
  };
  // Entries in a list of their own (intrusive: nothing is allocated under the monitor's lock).
  struct Chain {
    Entry* head = nullptr;
    Entry* tail = nullptr;
    void pushFront(Entry& e) noexcept;
    void unlink(Entry& e) noexcept;
  };

  Handle registerOnce(void* address, std::uint64_t length, std::string* why);
  ibv_mr* regMr(void* address, std::uint64_t length, std::string* why);
  void deregister(ibv_mr* mr) noexcept;
  // With the monitor's mutex held: unlinks `e` from wherever it is.
  void forgetLocked(Entry& e) noexcept;
  // With the monitor's mutex held: moves unreferenced entries beyond the bound to `out`.
  void evictLocked(Chain& out) noexcept;
  // Deregisters and frees what `chain` holds (the mutex not held).
  void destroy(Chain& chain) noexcept;
  // Deregisters invalidated entries that no message uses any more.
  void reap() noexcept;
  void count(std::atomic<std::uint64_t> AtomicCounters::*which) noexcept;
  void explainUncached(int error) noexcept;
  void watched(Watch& watch) noexcept override;

  std::shared_ptr<const VerbsLibrary> library_;
  ibv_pd* pd_;
  std::uint64_t bound_;
  std::shared_ptr<MemoryMonitor> monitor_;  // null: nothing is cached
  std::list<Entry> entries_;                // every entry (changed by this cache's thread only)
  // With the monitor's mutex held:
  Chain lru_;                         // cached entries, most recently used first
  Chain dead_;                        // invalidated entries, until deregistered
  std::atomic<bool> anyDead_{false};  // dead_ is not empty (set under the monitor's mutex)
  std::uint64_t cachedBytes_ = 0;
  AtomicCounters counters_;
  std::vector<int> explained_;  // errno values already logged (explainUncached)
};

}  // namespace collx::transport::ibverbs
