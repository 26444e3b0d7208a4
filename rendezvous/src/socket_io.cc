#include "socket_io.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace collx::rendezvous::sockio {

namespace {

int remainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return static_cast<int>(std::min<std::int64_t>(left.count() + 1, 1 << 30));
}

// Waits for `events` on fd; false on timeout.
bool waitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    struct pollfd p {
      fd, events, 0
    };
    int timeout = remainingMs(deadline);
    int rc = ::poll(&p, 1, timeout);
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return true;  // let the following I/O call report the error
  }
}

}  // namespace

std::string Outcome::describe() const {
  switch (result) {
    case Result::kOk:
      return "ok";
    case Result::kTimeout:
      return "timed out";
    case Result::kClosed:
      return "connection closed by the peer";
    case Result::kError:
      return std::strerror(error);
  }
  return "unknown";
}

int connectTcp(const std::string& host, std::uint16_t port, Clock::time_point deadline,
               std::string& error) {
  struct addrinfo hints {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
  struct addrinfo* list = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list);
  if (rc == EAI_ADDRFAMILY || rc == EAI_NONAME) {
    hints.ai_flags = AI_NUMERICSERV;  // loopback-only hosts: AI_ADDRCONFIG hides ::1
    rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list);
  }
  if (rc != 0) {
    error = "cannot resolve '" + host + "': " + ::gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (struct addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    int ok = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (ok != 0 && errno == EINPROGRESS) {
      if (!waitFor(fd, POLLOUT, deadline)) {
        error = "connect timed out";
        ::close(fd);
        fd = -1;
        continue;
      }
      int soError = 0;
      socklen_t len = sizeof(soError);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soError, &len);
      if (soError != 0) {
        errno = soError;
        ok = -1;
      } else {
        ok = 0;
      }
    }
    if (ok == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      break;
    }
    error = std::strerror(errno);
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(list);
  return fd;
}

Outcome sendAll(int fd, const void* data, std::size_t size, Clock::time_point deadline) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = ::send(fd, p + done, size - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!waitFor(fd, POLLOUT, deadline)) return {Result::kTimeout, 0};
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) return {Result::kClosed, errno};
    return {Result::kError, errno};
  }
  return {};
}

Outcome recvAll(int fd, void* data, std::size_t size, Clock::time_point deadline) {
  auto* p = static_cast<std::uint8_t*>(data);
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = ::recv(fd, p + done, size - done, 0);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) return {Result::kClosed, 0};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!waitFor(fd, POLLIN, deadline)) return {Result::kTimeout, 0};
      continue;
    }
    if (errno == ECONNRESET) return {Result::kClosed, errno};
    return {Result::kError, errno};
  }
  return {};
}

}  // namespace collx::rendezvous::sockio
