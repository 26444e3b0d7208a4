// Blocking socket I/O with deadlines, for the store client (internal). Sockets are
// non-blocking; every wait is a poll() bounded by the deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace collx::secure {
class TlsContext;
class TlsStream;
}  // namespace collx::secure

namespace collx::rendezvous::sockio {

using Clock = std::chrono::steady_clock;

enum class Result { kOk, kTimeout, kClosed, kError };

struct Outcome {
  Result result = Result::kOk;
  int error = 0;     // errno for kError
  std::string text;  // TLS: what failed, in words (then describe() says it)
  std::string describe() const;
};

// Resolves host:port and connects to the first address that accepts, waiting at most until
// `deadline`. Returns the descriptor (TCP_NODELAY, non-blocking, close-on-exec) or -1 with
// `error` describing the last failure.
int connectTcp(const std::string& host, std::uint16_t port, Clock::time_point deadline,
               std::string& error);

Outcome sendAll(int fd, const void* data, std::size_t size, Clock::time_point deadline);
Outcome recvAll(int fd, void* data, std::size_t size, Clock::time_point deadline);
// At least one byte (`got`), or the outcome that stopped it.
Outcome recvSome(int fd, void* data, std::size_t size, Clock::time_point deadline,
                 std::size_t& got);

// A client's connection (the TCP store's, Redis'): a connected socket, in TLS once
// startTls() succeeded. Move-only; closes the socket when it goes.
class Link {
 public:
  Link() = default;
  explicit Link(int fd) : fd_(fd) {}
  ~Link();
  Link(Link&& other) noexcept;
  Link& operator=(Link&& other) noexcept;

  bool open() const noexcept { return fd_ >= 0; }
  int fd() const noexcept { return fd_; }
  void close() noexcept;

  // TLS as a client, the whole handshake until `deadline`; `host`: the name the server's
  // certificate must carry (empty: the CA's signature is enough).
  Outcome startTls(std::shared_ptr<const secure::TlsContext> context, const std::string& host,
                   Clock::time_point deadline);
  bool tls() const noexcept { return tls_ != nullptr; }
  std::string describeTls() const;

  Outcome sendAll(const void* data, std::size_t size, Clock::time_point deadline);
  Outcome recvAll(void* data, std::size_t size, Clock::time_point deadline);
  // At least one byte (`got`), or the outcome that stopped it.
  Outcome recvSome(void* data, std::size_t size, Clock::time_point deadline, std::size_t& got);

 private:
  int fd_ = -1;
  std::unique_ptr<secure::TlsStream> tls_;
};

}  // namespace collx::rendezvous::sockio
