// The TCP store: TcpStoreServer (an Asio server on its own thread, serving many clients at
// once) and TcpStore (a client; plain sockets, one request in flight, thread-safe).
//
// The wire protocol is length-prefixed and versioned (rendezvous/src/tcp_store_protocol.h).
// The server bounds key and value sizes and the number of connections; a malformed,
// truncated or oversized request gets an error reply (or its connection closed) for that
// client alone while everyone else is served. A client that reaches something that is not a
// collx store gets a clear error, never a hang.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "collx/rendezvous/store.h"

namespace collx::rendezvous {

namespace proto {
enum class Op : std::uint8_t;  // the wire protocol's operations (internal)
}
namespace sockio {
class Link;  // a client's connection, plain or TLS (internal)
}

// COLLX_STORE_MAX_VALUE: the largest value a TCP store server keeps and its clients accept.
extern const Setting<kind::Bytes> kStoreMaxValue;

class TcpStoreServer {
 public:
  struct Options {
    // Address to listen on: "127.0.0.1" (default: this host only), "0.0.0.0" or "::" (every
    // interface), or a host name. Port 0 picks a free port (see port()).
    std::string host = "127.0.0.1";
    std::uint16_t port = 0;
    std::size_t maxValueBytes = std::size_t{1} << 30;
    std::size_t maxKeysPerRequest = 1 << 16;
    std::size_t maxConnections = 4096;
    // The job's secret: clients must prove it before anything is served (and the server
    // proves it to them); nullptr: every client is served (an unauthenticated job).
    std::shared_ptr<const secure::JobSecret> secret;
    // TLS (COLLX_TLS=1): every client starts with a TLS handshake and shows a certificate
    // the context's CA signed; nullptr: plain TCP.
    std::shared_ptr<const secure::TlsContext> tls;
    // A client that has not finished the handshake by then is closed.
    std::chrono::milliseconds handshakeTimeout{10000};
    // Clients in their handshake at most: beyond, the oldest of them is closed, so that a
    // flood of connections that never prove anything cannot keep the job's ranks out.
    std::size_t maxPendingHandshakes = 256;
    // Of them from one address at most: beyond, that address's oldest is closed, so that one
    // host's flood cannot push out another host's clients.
    std::size_t maxPendingPerAddress = 32;
    // A request whose bytes stop coming for this long (its header announced more) is
    // dropped with its connection; its buffer grows as its bytes arrive, never ahead of them.
    std::chrono::milliseconds stallTimeout{30000};
    // A client that sends no request for this long is closed (0: never).
    std::chrono::milliseconds idleTimeout{0};

    // The defaults with COLLX_STORE_MAX_VALUE and COLLX_STORE_IDLE_TIMEOUT from `config`.
    static Options fromConfig(const Config& config);
  };

  // Binds and starts serving on a thread of its own. Throws IoError when it cannot bind.
  explicit TcpStoreServer(const Options& options);
  TcpStoreServer();
  // Stops serving and closes every connection (blocking until the thread has ended).
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  std::uint16_t port() const noexcept;
  // The address clients should use: "tcp://127.0.0.1:29500" ("tcp://[::1]:29500").
  std::string url() const;
  // Number of client connections currently open.
  std::size_t connections() const noexcept;
  void stop() noexcept;

  struct Impl;  // opaque: keeps Asio out of this header

 private:
  std::unique_ptr<Impl> impl_;
};

class TcpStore final : public Store {
 public:
  // Connects to the server at host:port, retrying until the timeout (the server may not be
  // up yet). Throws TimeoutError if it never answers, IoError if what answers is not a collx
  // store or speaks another protocol version. A request the server does not answer (it is
  // stopped, or the network is) throws TimeoutError after the timeout; a get or wait, which
  // the server may hold for its wait w, after w + twice the timeout at most.
  TcpStore(std::string host, std::uint16_t port, const StoreOptions& options = {});
  ~TcpStore() override;

  std::string describe() const override;
  // With a secret: the server proved it, and serves only clients that prove it.
  bool authenticated() const override { return secret_ != nullptr; }
  // Round trip to the server; throws IoError or TimeoutError when it does not answer.
  void ping();

 protected:
  void doSet(const std::string& key, const Bytes& value) override;
  void doMultiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  std::vector<std::string> doWait(const std::vector<std::string>& keys,
                                  Clock::time_point deadline) override;
  std::vector<std::string> doMultiGet(const std::vector<std::string>& keys,
                                      Clock::time_point deadline,
                                      std::vector<Bytes>& values) override;
  std::int64_t doAdd(const std::string& key, std::int64_t delta) override;
  Bytes doCompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool doCheck(const std::vector<std::string>& keys) override;
  bool doErase(const std::string& key) override;
  std::unique_ptr<Store> doReopen(const StoreOptions& options) const override;

 private:
  struct Reply;
  void connectLocked(Clock::time_point deadline, std::string_view op);
  // The connection on a connected socket: TLS when the store uses it, then the handshake.
  // False when the server was busy with other handshakes (kHelloBusy): connect again.
  [[nodiscard]] bool openLocked(int fd, Clock::time_point deadline, std::string_view op,
                                Clock::time_point started);
  // The handshake on a connected socket (the hello, and the job secret's challenge when the
  // server asks for it); false, the socket closed, when the server said kHelloBusy; throws
  // IoError or TimeoutError, closing the socket.
  [[nodiscard]] bool handshakeLocked(Clock::time_point deadline, std::string_view op,
                                     Clock::time_point started);
  void closeLocked() noexcept;
  // Sends one request frame (of `op`, naming `keys` keys) and reads and parses its reply,
  // refusing one longer than such a request can have; `serverWait` is how long the server
  // may legitimately hold the request (a wait), on top of the store's timeout for the I/O.
  // A kError reply is thrown as its kind.
  Reply roundTrip(proto::Op op, std::size_t keys, std::vector<std::uint8_t>& frame,
                  std::chrono::milliseconds serverWait);

  std::string host_;
  std::uint16_t port_;
  std::shared_ptr<const secure::JobSecret> secret_;
  std::shared_ptr<const secure::TlsContext> tls_;
  std::uint64_t maxValueBytes_;  // the largest value a reply may carry (COLLX_STORE_MAX_VALUE)
  std::mutex mutex_;
  std::unique_ptr<sockio::Link> link_;  // the connection (closed: none)
};

// "tcp://host:port" for a host and port, with brackets around IPv6 literals.
std::string tcpUrl(const std::string& host, std::uint16_t port);

}  // namespace collx::rendezvous
