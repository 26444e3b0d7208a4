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

#include "collx/secure/tls.h"

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
  if (!text.empty()) return text;
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
      if (!waitFor(fd, POLLOUT, deadline)) return {Result::kTimeout, 0, {}};
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) return {Result::kClosed, errno, {}};
    return {Result::kError, errno, {}};
  }
  return {};
}

Outcome recvSome(int fd, void* data, std::size_t size, Clock::time_point deadline,
                 std::size_t& got) {
  got = 0;
  while (true) {
    const ssize_t n = ::recv(fd, data, size, 0);
    if (n > 0) {
      got = static_cast<std::size_t>(n);
      return {};
    }
    if (n == 0) return {Result::kClosed, 0, {}};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!waitFor(fd, POLLIN, deadline)) return {Result::kTimeout, 0, {}};
      continue;
    }
    if (errno == ECONNRESET) return {Result::kClosed, errno, {}};
    return {Result::kError, errno, {}};
  }
}

Outcome recvAll(int fd, void* data, std::size_t size, Clock::time_point deadline) {
  auto* p = static_cast<std::uint8_t*>(data);
  std::size_t done = 0;
  while (done < size) {
    std::size_t got = 0;
    Outcome out = recvSome(fd, p + done, size - done, deadline, got);
    if (out.result != Result::kOk) return out;
    done += got;
  }
  return {};
}

// ---- Link --------------------------------------------------------------------------------

namespace {

Outcome fromTls(secure::TlsStream::Status status, const secure::TlsStream& tls) {
  using Status = secure::TlsStream::Status;
  switch (status) {
    case Status::kOk:
      return {};
    case Status::kTimeout:
    case Status::kWantRead:
    case Status::kWantWrite:
      return {Result::kTimeout, 0, {}};
    case Status::kClosed:
      return {Result::kClosed, tls.lastErrno(), {}};
    case Status::kFailed:
      return {Result::kError, tls.lastErrno(), tls.error()};
  }
  return {Result::kError, 0, tls.error()};
}

}  // namespace

Link::~Link() { close(); }

Link::Link(Link&& other) noexcept : fd_(other.fd_), tls_(std::move(other.tls_)) { other.fd_ = -1; }

Link& Link::operator=(Link&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    tls_ = std::move(other.tls_);
    other.fd_ = -1;
  }
  return *this;
}

void Link::close() noexcept {
  tls_.reset();  // (before its socket)
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Outcome Link::startTls(std::shared_ptr<const secure::TlsContext> context, const std::string& host,
                       Clock::time_point deadline) {
  tls_ = std::make_unique<secure::TlsStream>(std::move(context), fd_,
                                             secure::TlsStream::Role::kClient, host);
  const auto status = tls_->handshake(deadline);
  if (status == secure::TlsStream::Status::kOk) return {};
  Outcome out = fromTls(status, *tls_);
  out.text = tls_->error();
  return out;
}

std::string Link::describeTls() const { return tls_ ? tls_->describe() : std::string("plain"); }

Outcome Link::sendAll(const void* data, std::size_t size, Clock::time_point deadline) {
  if (!tls_) return sockio::sendAll(fd_, data, size, deadline);
  return fromTls(tls_->writeAll(data, size, deadline), *tls_);
}

Outcome Link::recvAll(void* data, std::size_t size, Clock::time_point deadline) {
  if (!tls_) return sockio::recvAll(fd_, data, size, deadline);
  return fromTls(tls_->readAll(data, size, deadline), *tls_);
}

Outcome Link::recvSome(void* data, std::size_t size, Clock::time_point deadline, std::size_t& got) {
  if (!tls_) return sockio::recvSome(fd_, data, size, deadline, got);
  secure::TlsStream::Status status = secure::TlsStream::Status::kOk;
  got = tls_->readSome(data, size, deadline, status);
  return got > 0 ? Outcome{} : fromTls(status, *tls_);
}

}  // namespace collx::rendezvous::sockio
