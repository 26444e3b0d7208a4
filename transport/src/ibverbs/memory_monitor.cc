#include "ibverbs/memory_monitor.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "collx/base/log.h"

namespace collx::transport::ibverbs {

namespace {

const std::uintptr_t kPage = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));

std::mutex gLifeMu;                     // guards gCurrent
std::weak_ptr<MemoryMonitor> gCurrent;  // this process's monitor, while one exists
pid_t gOwner = 0;                       // the process that made it (a fork child makes its own)

// A userfaultfd that reports unmapping, dropping and moving registered memory; -1 with errno.
int openUserfaultfd() {
#ifdef SYS_userfaultfd
  // UFFD_USER_MODE_ONLY: allowed without privilege even with vm.unprivileged_userfaultfd=0
  // (the kernel's own faults on the ranges are not reported; the monitor needs none).
  int fd =
      static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
  if (fd < 0 && errno == EINVAL) {  // a kernel before 5.11: no such flag
    fd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  }
  if (fd < 0) return -1;
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;
  if (::ioctl(fd, UFFDIO_API, &api) != 0) {
    const int error = errno;
    ::close(fd);
    errno = error;
    return -1;
  }
  return fd;
#else
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

std::shared_ptr<MemoryMonitor> MemoryMonitor::acquire(std::string* why) {
  std::lock_guard life(gLifeMu);
  if (auto current = gCurrent.lock(); current != nullptr && gOwner == ::getpid()) return current;
  const int uffd = openUserfaultfd();
  if (uffd < 0) {
    const int error = errno;
    *why = std::string("userfaultfd is not available (") + std::strerror(error) + ")";
    if (error == EPERM || error == ENOSYS) *why += ": a kernel without it, or a seccomp filter";
    return nullptr;
  }
  const int stopFd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stopFd < 0) {
    *why = std::string("eventfd failed: ") + std::strerror(errno);
    ::close(uffd);
    return nullptr;
  }
  auto monitor = std::make_shared<MemoryMonitor>(Key{}, uffd, stopFd);
  MemoryMonitor* raw = monitor.get();
  monitor->thread_ = std::make_unique<std::thread>([raw] {
    pthread_setname_np(pthread_self(), "collx-mr-watch");  // findable in /proc/<pid>/task
    raw->run();
  });
  gCurrent = monitor;
  gOwner = ::getpid();
  return monitor;
}

std::shared_ptr<MemoryMonitor> MemoryMonitor::current() {
  std::lock_guard life(gLifeMu);
  return gOwner == ::getpid() ? gCurrent.lock() : nullptr;
}

bool MemoryMonitor::running() { return current() != nullptr; }

MemoryMonitor::MemoryMonitor(Key, int uffd, int stopFd)
    : uffd_(uffd), stopFd_(stopFd), pid_(::getpid()) {}

MemoryMonitor::~MemoryMonitor() {
  if (pid_ != ::getpid()) {
    // A fork child's copy: the thread is the parent's. Its memory is left alone.
    (void)thread_.release();  // NOLINT(bugprone-unused-return-value): left to the parent
  } else if (thread_ != nullptr) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(stopFd_, &one, sizeof one);
    thread_->join();
  }
  if (watches_ != nullptr) {
    COLLX_WARN(kIbverbs, "the memory monitor stops with ranges still watched");
  }
  ::close(uffd_);
  ::close(stopFd_);
}

void MemoryMonitor::link(Watch& watch) noexcept {
  watch.prev = nullptr;
  watch.next = watches_;
  if (watches_ != nullptr) watches_->prev = &watch;
  watches_ = &watch;
  watch.active = true;
}

void MemoryMonitor::unlink(Watch& watch) noexcept {
  if (watch.prev != nullptr)
    watch.prev->next = watch.next;
  else
    watches_ = watch.next;
  if (watch.next != nullptr) watch.next->prev = watch.prev;
  watch.prev = watch.next = nullptr;
  watch.active = false;
}

bool MemoryMonitor::add(Watch& watch, int* error) noexcept {
  if (pid_ != ::getpid()) {  // the parent's userfaultfd would register the parent's memory
    *error = ECHILD;
    return false;
  }
  if (broken_) {
    *error = EIO;
    return false;
  }
  uffdio_register reg{};
  reg.range.start = watch.start;
  reg.range.len = watch.end - watch.start;
  reg.mode = UFFDIO_REGISTER_MODE_MISSING;
  if (::ioctl(uffd_, UFFDIO_REGISTER, &reg) != 0) {
    *error = errno;
    // A range partly registered before the failure would report faults nobody expects.
    unregisterUncovered(watch.start, watch.end);
    return false;
  }
  link(watch);
  return true;
}

void MemoryMonitor::remove(Watch& watch) noexcept {
  if (!watch.active) return;
  unlink(watch);
  unregisterUncovered(watch.start, watch.end);
}

bool MemoryMonitor::unregisterUncovered(std::uintptr_t start, std::uintptr_t end) noexcept {
  // Walks [start, end): skips what an active watch covers, unregisters each gap. Quadratic in
  // the watches that overlap, which are few; allocates nothing (see the header).
  bool ok = true;
  std::uintptr_t at = start;
  while (at < end) {
    std::uintptr_t coveredTo = at;
    std::uintptr_t nextStart = end;
    for (Watch* w = watches_; w != nullptr; w = w->next) {
      if (w->start <= at && w->end > at) coveredTo = std::max(coveredTo, w->end);
      if (w->start > at && w->start < nextStart) nextStart = w->start;
    }
    if (coveredTo > at) {
      at = coveredTo;
      continue;
    }
    uffdio_range range{at, nextStart - at};
    // Unmapped parts (after UNMAP) are not registered anywhere: EINVAL or ENOMEM is fine.
    if (::ioctl(uffd_, UFFDIO_UNREGISTER, &range) != 0 && errno != EINVAL && errno != ENOMEM) {
      ok = false;
    }
    at = nextStart;
  }
  return ok;
}

bool MemoryMonitor::changed(std::uintptr_t start, std::uintptr_t end) noexcept {
  bool ok = true;
  // Watches end one at a time: each is unlinked and its range unregistered before its
  // watcher hears of it (the watcher may reuse the watch's memory).
  for (Watch* w = watches_; w != nullptr;) {
    Watch* next = w->next;
    if (w->start < end && w->end > start) {
      unlink(*w);
      ok = unregisterUncovered(w->start, w->end) && ok;
      w->watcher->watched(*w);
      next = watches_;  // the list changed: again from the start (ended watches are gone)
    }
    w = next;
  }
  return ok;
}

void MemoryMonitor::drain() noexcept {
  uffd_msg msgs[16];
  for (;;) {
    const ssize_t n = ::read(uffd_, msgs, sizeof msgs);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // EAGAIN: nothing more
    for (ssize_t i = 0; i < n / static_cast<ssize_t>(sizeof(uffd_msg)); ++i) {
      const uffd_msg& m = msgs[i];
      switch (m.event) {
        case UFFD_EVENT_UNMAP:
        case UFFD_EVENT_REMOVE:
          changed(m.arg.remove.start, m.arg.remove.end);
          break;
        case UFFD_EVENT_REMAP: {
          changed(m.arg.remap.from, m.arg.remap.from + m.arg.remap.len);
          // The moved memory is registered at its new place: nothing of it is watched.
          unregisterUncovered(m.arg.remap.to, m.arg.remap.to + m.arg.remap.len);
          break;
        }
        case UFFD_EVENT_PAGEFAULT: {
          // A missing page of a registered mapping is touched: a page of a watched range
          // that went missing without an event (its range is no longer what was
          // registered: its watches end), or one the mapping gained (mremap in place). The
          // page is unregistered and the thread woken, to fault as if nobody watched; if
          // that failed, anonymous memory gets the zero page it would have had.
          const std::uintptr_t page = m.arg.pagefault.address & ~(kPage - 1);
          const bool ended = changed(page, page + kPage);
          if (!(unregisterUncovered(page, page + kPage) && ended)) {
            uffdio_zeropage zero{};
            zero.range = {page, kPage};
            if (::ioctl(uffd_, UFFDIO_ZEROPAGE, &zero) == 0) break;
          }
          uffdio_range range{page, kPage};
          ::ioctl(uffd_, UFFDIO_WAKE, &range);
          break;
        }
        default:
          break;
      }
    }
  }
}

void MemoryMonitor::run() noexcept {
  pollfd fds[2] = {{uffd_, POLLIN, 0}, {stopFd_, POLLIN, 0}};
  for (;;) {
    const int ready = ::poll(fds, 2, -1);  // ends with stopFd_ (the destructor)
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0 || (fds[0].revents & (POLLERR | POLLNVAL)) != 0) {
      // Nobody would read the events any more, and a thread that unmaps watched memory
      // would wait for that forever: end every watch (its entries are never used again)
      // and refuse new ones.
      const int error = ready < 0 ? errno : EIO;
      std::lock_guard lock(mu_);
      drain();
      broken_ = true;
      changed(0, UINTPTR_MAX);
      COLLX_WARN(kIbverbs, "the memory monitor stopped ({}): registrations are no longer cached",
                 std::strerror(error));
      return;
    }
    if (fds[1].revents != 0) return;
    // The lock first: a thread the kernel holds for an event goes on once the event is read,
    // and must find its effect applied (see the header).
    std::lock_guard lock(mu_);
    drain();
  }
}

}  // namespace collx::transport::ibverbs
