// System calls of the transports' hot paths without glibc's cancellation bookkeeping.
//
// recv, sendmsg, poll and read are cancellation points: once a process has a second thread
// (any program that embeds collx has some; collx's own hang-report watcher is one), glibc
// wraps each in two atomic read-modify-writes of the thread's cancellation state. The
// transports never use pthread_cancel and call these on nonblocking sockets (or poll with a
// bound), so they make the same system calls through syscall(2), which is not a
// cancellation point. (A profile of 4-byte allreduces over tcp at P=2, with a second thread
// in the process, put 1.5% of the samples in that bookkeeping: two calls per call.)
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>

namespace collx::transport::detail {

inline ssize_t recvNoCancel(int fd, void* buf, std::size_t len, int flags) noexcept {
  return ::syscall(SYS_recvfrom, fd, buf, len, flags, nullptr, nullptr);
}

inline ssize_t sendmsgNoCancel(int fd, const msghdr* msg, int flags) noexcept {
  return ::syscall(SYS_sendmsg, fd, msg, flags);
}

inline int pollNoCancel(pollfd* fds, nfds_t n, int timeoutMs) noexcept {
  return static_cast<int>(::syscall(SYS_poll, fds, n, timeoutMs));
}

inline ssize_t readNoCancel(int fd, void* buf, std::size_t len) noexcept {
  return ::syscall(SYS_read, fd, buf, len);
}

}  // namespace collx::transport::detail
