// MemoryMonitor: the process's watch over address ranges that registration caches keep
// registered (internal; registrations.h is its user).
//
// A registration pins the physical pages under a range. When the process unmaps that memory
// (munmap, mremap, the MAP_FIXED of another mapping) or drops its pages (madvise DONTNEED,
// FREE, REMOVE), and maps new memory at the same addresses, the old registration would let
// the device read and write the old pages: a cache must forget the range before it can be
// looked up again. The monitor learns of those changes from a userfaultfd (UFFD_USER_MODE_ONLY,
// features EVENT_UNMAP, EVENT_REMOVE and EVENT_REMAP) on which every watched range is
// registered (UFFDIO_REGISTER_MODE_MISSING; its pages are populated first, so that nothing is
// missing). The kernel holds the thread that unmaps or drops watched memory until the event
// has been read; the monitor reads events only with mutex() held and applies them before it
// lets go, so that once munmap() or madvise() returned, a lookup under mutex() never sees the
// range again. A page of a watched range that went missing and is touched (a pagefault event)
// ends the watches over it too, and its thread is woken: no application thread ever waits
// for the monitor beyond that.
//
// One monitor thread and one userfaultfd per process, from the first acquire() until the last
// reference is dropped; a child after fork() gets its own.
//
// Locking (why the rules are strict): a thread that the kernel holds for an event may hold any
// lock of its own (malloc's arena lock while free() trims the heap, a verbs library's lock),
// and only the monitor thread releases it. So whoever holds mutex() must never wait for
// anything else: no malloc or free, no verbs calls, no logging, and the monitor thread itself
// never blocks outside poll() and mutex(). Watches are therefore intrusive (the watcher owns
// their memory) and watched() callbacks may only mark and unlink.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace collx::transport::ibverbs {

class MemoryMonitor;

// A watched range [start, end) (page aligned), owned by its watcher.
struct Watch {
  struct Watcher {
    // The memory of `watch` changed; the watch has ended (it is no longer registered). Called
    // by the monitor thread with mutex() held: must not block, allocate or free (see above).
    virtual void watched(Watch& watch) noexcept = 0;

   protected:
    ~Watcher() = default;
  };

  std::uintptr_t start = 0;
  std::uintptr_t end = 0;
  Watcher* watcher = nullptr;
  // The monitor's list of active watches (mutex() held).
  Watch* prev = nullptr;
  Watch* next = nullptr;
  bool active = false;
};

class MemoryMonitor {
 public:
  // The process's monitor, started by the first caller. Null, with the reason in `*why`,
  // where userfaultfd cannot be used (ENOSYS, EPERM: a kernel without it, a seccomp filter,
  // vm.unprivileged_userfaultfd=0 on a kernel without UFFD_USER_MODE_ONLY). Thread safe.
  static std::shared_ptr<MemoryMonitor> acquire(std::string* why);
  // This process's monitor if one runs (none is started).
  static std::shared_ptr<MemoryMonitor> current();
  // Whether a monitor (its thread and userfaultfd) exists in this process now, for tests.
  static bool running();

  // Stops the thread and closes the userfaultfd (the last reference); watches must be gone.
  ~MemoryMonitor();
  MemoryMonitor(const MemoryMonitor&) = delete;
  MemoryMonitor& operator=(const MemoryMonitor&) = delete;

  // Guards every watch and what watchers keep with them.
  std::mutex& mutex() noexcept { return mu_; }

  // With mutex() held. Starts watching [watch.start, watch.end) (page aligned; its pages
  // populated). False with the errno value in `*error` when the range cannot be registered
  // (file-backed memory other than shmem, hugetlbfs pages not aligned to their size, memory
  // that is not mapped).
  bool add(Watch& watch, int* error) noexcept;
  // With mutex() held. Ends a watch (nothing if it already ended).
  void remove(Watch& watch) noexcept;

  struct Key {};  // only acquire() makes one
  MemoryMonitor(Key, int uffd, int stopFd);

 private:
  void run() noexcept;
  // With mutex_ held: reads every event that waits and applies it.
  void drain() noexcept;
  // Ends every watch that overlaps [start, end); false when a range could not be
  // unregistered (a faulting thread must then be served otherwise).
  bool changed(std::uintptr_t start, std::uintptr_t end) noexcept;
  // Unregisters the parts of [start, end) that no active watch covers.
  bool unregisterUncovered(std::uintptr_t start, std::uintptr_t end) noexcept;
  void link(Watch& watch) noexcept;
  void unlink(Watch& watch) noexcept;

  std::mutex mu_;
  int uffd_;
  int stopFd_;
  pid_t pid_;
  Watch* watches_ = nullptr;  // active watches, a doubly linked list
  bool broken_ = false;       // the thread stopped reading events: add() refuses (mu_)
  std::unique_ptr<std::thread> thread_;
};

}  // namespace collx::transport::ibverbs
