// TLS for the links that want it (COLLX_TLS=1): the TCP store and the ranks' tcp connections,
// authenticated both ways by certificates that one CA signed (COLLX_TLS_CERT, COLLX_TLS_KEY,
// COLLX_TLS_CA); and a Redis server's TLS (rediss://). OpenSSL 3 (libssl-dev).
//
// TlsContext holds the configuration (one SSL_CTX, shared by every connection of a process
// and by Asio's ssl::stream in the store server). TlsStream is one connection over a
// non-blocking socket: a handshake run step by step or to a deadline, then sealed writes and
// opened reads, non-blocking or to a deadline.
//
// The kernel's TLS (kTLS): every connection asks OpenSSL for it (SSL_OP_ENABLE_KTLS). Where
// the kernel has TLS and OpenSSL sets it up for a direction (OpenSSL 3.0: sending for TLS 1.2
// and 1.3, receiving for TLS 1.2), the kernel seals or opens that direction's records and
// the socket is written or read as a plain one (kernelSend(), kernelReceive()); elsewhere
// OpenSSL does it in this process: sealed records gather in a buffer of the stream's and
// leave in large writes, and reads take several records per system call.
//
// Internal to collx's layers (C++20), never installed.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "collx/base/config.h"

struct ssl_ctx_st;
struct ssl_st;
struct bio_st;

namespace collx::secure {

// The files of a TLS configuration (PEM).
struct TlsFiles {
  std::string cert;  // this side's certificate (a chain: leaf first)
  std::string key;   // its private key: a file only its owner can read
  std::string ca;    // the CA that signed the peers' certificates
};

class TlsContext {
 public:
  // COLLX_TLS=1: the job's links use TLS with COLLX_TLS_CERT, COLLX_TLS_KEY and COLLX_TLS_CA
  // (all three required); nullptr when COLLX_TLS is off. Throws InvalidArgument naming the
  // variable: a file missing or unreadable, a key file that group or others can read
  // ("chmod 600"), a certificate that is not its key's, a CA file without a certificate.
  static std::shared_ptr<const TlsContext> fromConfig(const Config& config);
  // The same from files given in code (tests, embedders).
  static std::shared_ptr<const TlsContext> fromFiles(const TlsFiles& files);
  // For a server that is not collx's (a Redis with TLS): its certificate is checked against
  // COLLX_TLS_CA (else the system's CAs) and, per connection, its host name; this side shows
  // COLLX_TLS_CERT and COLLX_TLS_KEY when they are set (a server that asks clients for one).
  static std::shared_ptr<const TlsContext> forService(const Config& config);

  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  ssl_ctx_st* native() const noexcept { return ctx_; }
  // Whether a connection's peer must show a certificate (collx's own links: both ways).
  bool mutual() const noexcept { return mutual_; }
  // For logs and collx-info: "cert /a.pem, key /a.key, CA /ca.pem".
  const std::string& describe() const noexcept { return describe_; }

 private:
  TlsContext(ssl_ctx_st* ctx, bool mutual, std::string describe);
  ssl_ctx_st* ctx_;
  bool mutual_;
  std::string describe_;
};

// OpenSSL's reason for a failed handshake or record, in the words collx shows: a peer that
// does not speak TLS, one that asks for a certificate this side did not show, one that
// refused this side's (an alert); else the reason as it is.
std::string explainTlsFailure(const std::string& reason);

// Whether this kernel offers TLS (the "tls" upper layer of TCP): asked once, without a
// connection. Its reason when not ("this kernel has no TLS module (CONFIG_TLS)").
bool kernelTlsAvailable(std::string* why = nullptr);

class TlsStream {
 public:
  enum class Role { kClient, kServer };
  enum class Status { kOk, kWantRead, kWantWrite, kClosed, kTimeout, kFailed };
  using Clock = std::chrono::steady_clock;

  // A TLS connection over the connected socket `fd`, which it makes non-blocking and never
  // closes (its owner does, after the stream is gone). `host`: the name a client checks the
  // server's certificate for (forService contexts); empty: the chain alone is checked.
  TlsStream(std::shared_ptr<const TlsContext> context, int fd, Role role, std::string host = {});
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  // One non-blocking step of the handshake: kOk when it is done, kWantRead / kWantWrite
  // (poll for that), kClosed or kFailed (error() says why: the peer's certificate, an alert
  // the peer sent, a peer that does not speak TLS).
  Status handshakeStep();
  // The whole handshake, waiting at most until `deadline`: kOk, kTimeout, kClosed, kFailed.
  Status handshake(Clock::time_point deadline);
  // Why the last step failed, in words.
  const std::string& error() const noexcept { return error_; }
  // "TLSv1.3 TLS_AES_256_GCM_SHA384, sealed by OpenSSL" or "..., kernel TLS both ways".
  std::string describe() const;
  bool kernelSend() const noexcept { return kernelSend_; }
  bool kernelReceive() const noexcept { return kernelReceive_; }

  // ---- data (after the handshake), non-blocking -------------------------------------------
  // Seals plaintext from `iov` (in order) while fewer than kOutLimit sealed bytes wait to
  // leave; returns the bytes taken (0 when full: flush() first). Never blocks; a taken byte
  // is the stream's (flush() sends it).
  std::size_t write(const iovec* iov, int count);
  std::size_t write(const void* data, std::size_t size);
  // Sends the sealed bytes that wait: kOk when none is left, kWantWrite when the socket is
  // full, kClosed (the peer reset the connection) or kFailed (lastErrno()).
  Status flush();
  bool outputPending() const noexcept { return outHead_ < out_.size(); }
  // Opens up to `size` bytes into `data`: their count, or 0 with `status` kWantRead (nothing
  // now), kClosed (the peer closed) or kFailed (error(): a record that does not verify, ...).
  std::size_t read(void* data, std::size_t size, Status& status);
  // Whether bytes already read from the socket wait in OpenSSL: poll() does not show them,
  // so a reader must read() again before it sleeps.
  bool readPending() const noexcept;
  int lastErrno() const noexcept { return errno_; }

  // ---- blocking, to a deadline (the store client, Redis) ------------------------------------
  Status writeAll(const void* data, std::size_t size, Clock::time_point deadline);
  Status readAll(void* data, std::size_t size, Clock::time_point deadline);
  // At least one byte (their count), else 0 with `status`.
  std::size_t readSome(void* data, std::size_t size, Clock::time_point deadline, Status& status);

  // Sealed bytes that may wait to leave before write() takes no more.
  static constexpr std::size_t kOutLimit = std::size_t{1} << 20;

 private:
  Status fail(int sslError, int result, const char* during);
  // After a write found the connection closed: kFailed with the peer's reason when it sent
  // an alert before it closed, else kClosed.
  Status closedWhy();
  void afterHandshake();
  bool waitFor(short events, Clock::time_point deadline);
  friend struct OutBio;

  std::shared_ptr<const TlsContext> context_;
  ssl_st* ssl_ = nullptr;
  int fd_;
  Role role_;
  std::string host_;
  std::string error_;
  int errno_ = 0;
  bool failed_ = false;      // a write failed for good: flush() says so
  bool readWanted_ = false;  // the last read found no whole record: the socket must add one
  bool kernelSend_ = false;
  bool kernelReceive_ = false;
  // Sealed bytes not sent yet (written there by the stream's own BIO when OpenSSL seals).
  std::vector<std::uint8_t> out_;
  std::size_t outHead_ = 0;
  std::vector<std::uint8_t> coalesce_;  // small pieces gathered into one record
};

const char* statusText(TlsStream::Status status);

}  // namespace collx::secure
