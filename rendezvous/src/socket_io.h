// Blocking socket I/O with deadlines, for the store client (internal). Sockets are
// non-blocking; every wait is a poll() bounded by the deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace collx::rendezvous::sockio {

using Clock = std::chrono::steady_clock;

enum class Result { kOk, kTimeout, kClosed, kError };

struct Outcome {
  Result result = Result::kOk;
  int error = 0;  // errno for kError
  std::string describe() const;
};

// Resolves host:port and connects to the first address that accepts, waiting at most until
// `deadline`. Returns the descriptor (TCP_NODELAY, non-blocking, close-on-exec) or -1 with
// `error` describing the last failure.
int connectTcp(const std::string& host, std::uint16_t port, Clock::time_point deadline,
               std::string& error);

Outcome sendAll(int fd, const void* data, std::size_t size, Clock::time_point deadline);
Outcome recvAll(int fd, void* data, std::size_t size, Clock::time_point deadline);

}  // namespace collx::rendezvous::sockio
