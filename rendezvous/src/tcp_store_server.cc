// TcpStoreServer: one Asio io_context on one thread serves every client. Each connection is
// a Session that alternates strictly between reading one request and writing its reply, so
// a client can never make the server buffer more than one request (flow control for free).
// Requests that wait (get, wait) park a Waiter until their keys exist or their timer fires;
// meanwhile the session watches its socket so that a client that goes away frees its slot.
// With TLS (Options::tls), a session starts with Asio's TLS handshake (asio::ssl over the
// job's SSL_CTX), within the handshake timeout, and every byte after it is sealed.
#include <openssl/ssl.h>

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <atomic>
#include <bit>
#include <deque>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "collx/base/hex.h"
#include "collx/base/log.h"
#include "collx/rendezvous/tcp_store.h"
#include "collx/secure/job_secret.h"
#include "collx/secure/tls.h"
#include "tcp_store_protocol.h"

namespace collx::rendezvous {

static_assert(std::endian::native == std::endian::little, "the store protocol is little endian");

using asio::ip::tcp;

namespace {

constexpr std::chrono::milliseconds kMaxServerWait = std::chrono::hours(24);
constexpr std::size_t kFrameOverhead = std::size_t{1} << 20;

class Session;

struct Waiter {
  Waiter(asio::io_context& io, std::shared_ptr<Session> s, std::vector<std::string> k, bool values)
      : session(std::move(s)), keys(std::move(k)), wantValues(values), timer(io) {}
  std::shared_ptr<Session> session;
  std::vector<std::string> keys;
  bool wantValues;
  bool done = false;
  std::string registeredKey;  // the missing key under which it is parked
  asio::steady_timer timer;
};

std::vector<std::uint8_t> errorReply(ErrorKind kind, std::string_view message) {
  proto::Writer w;
  w.u8(static_cast<std::uint8_t>(proto::Status::kError)).u8(static_cast<std::uint8_t>(kind));
  w.str(message);
  return std::move(w.finish());
}

std::vector<std::uint8_t> okReply() {
  proto::Writer w;
  w.u8(static_cast<std::uint8_t>(proto::Status::kOk));
  return std::move(w.finish());
}

}  // namespace

const Setting<kind::Bytes> kStoreMaxValue(
    {.name = "COLLX_STORE_MAX_VALUE",
     .component = "rendezvous",
     .defaultValue = std::uint64_t{1} << 30,
     .range = {std::uint64_t{1} << 10, (std::uint64_t{4} << 30) - (std::uint64_t{1} << 20)},
     .help = "The largest value a TCP store server keeps and its clients accept (a request or "
             "reply beyond it is refused)."});

const Setting<kind::Duration> kStoreIdleTimeout(
    {.name = "COLLX_STORE_IDLE_TIMEOUT",
     .component = "rendezvous",
     .defaultValue = std::chrono::milliseconds(0),
     .range = {std::chrono::milliseconds(0)},
     .help = "A TCP store server closes a client that sends no request for this long (0: "
             "never; ranks are idle for hours during training, and reconnect on their own)."});

TcpStoreServer::Options TcpStoreServer::Options::fromConfig(const Config& config) {
  Options options;
  options.maxValueBytes = static_cast<std::size_t>(kStoreMaxValue.get(config));
  options.idleTimeout = kStoreIdleTimeout.get(config);
  return options;
}

struct TcpStoreServer::Impl {
  explicit Impl(const Options& opts) : options(opts), acceptor(io), retryTimer(io) {
    if (options.tls) {
      // Asio's context takes a reference of its own to the job's SSL_CTX.
      SSL_CTX_up_ref(options.tls->native());
      ssl = std::make_unique<asio::ssl::context>(options.tls->native());
    }
  }

  // A refused client, logged with its address: at most kRefusalsLogged a minute, then one
  // line that counts the rest (a flood of strangers does not flood the log).
  void logRefusal(const std::string& peer, const std::string& why);

  void accept();
  void notify(const std::string& key);
  // Completes `waiter` if every key exists, else parks it under its first missing key.
  bool tryComplete(const std::shared_ptr<Waiter>& waiter);
  void expire(const std::shared_ptr<Waiter>& waiter);
  void unpark(const std::shared_ptr<Waiter>& waiter);
  void shutdown();

  proto::Limits limits() const {
    return proto::Limits{options.maxKeysPerRequest, options.maxValueBytes};
  }

  Options options;
  std::unique_ptr<asio::ssl::context> ssl;  // with TLS
  std::size_t maxFrameBytes = 0;
  std::atomic<std::size_t> connections{0};
  std::unordered_set<Session*> sessions;
  std::unordered_map<std::string, Bytes> data;
  std::unordered_map<std::string, std::vector<std::shared_ptr<Waiter>>> waiters;
  asio::io_context io;
  tcp::acceptor acceptor;
  asio::steady_timer retryTimer;
  std::uint16_t port = 0;
  std::string urlHost;
  std::thread thread;
  std::atomic<bool> stopped{false};
  std::chrono::steady_clock::time_point refusalWindow{};
  int refusalsInWindow = 0;
  // Sessions in their handshake, oldest first (and some that finished, dropped lazily).
  std::deque<std::weak_ptr<Session>> pending;
};

void TcpStoreServer::Impl::logRefusal(const std::string& peer, const std::string& why) {
  constexpr int kRefusalsLogged = 10;
  const auto now = std::chrono::steady_clock::now();
  if (now - refusalWindow >= std::chrono::minutes(1)) {
    if (refusalsInWindow > kRefusalsLogged) {
      COLLX_WARN(kRdzv, "store server: and {} more refused connections in that minute",
                 refusalsInWindow - kRefusalsLogged);
    }
    refusalWindow = now;
    refusalsInWindow = 0;
  }
  if (++refusalsInWindow <= kRefusalsLogged) {
    COLLX_WARN(kRdzv, "store server: refused the connection from {}: {}", peer, why);
  }
}

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(TcpStoreServer::Impl& server, tcp::socket socket)
      : server_(server),
        socket_(std::move(socket)),
        handshakeTimer_(server.io),
        stallTimer_(server.io) {
    asio::error_code ec;
    auto endpoint = socket_.remote_endpoint(ec);
    address_ = ec ? std::string("unknown peer") : endpoint.address().to_string();
    peer_ = ec ? address_ : address_ + ":" + std::to_string(endpoint.port());
    if (server_.ssl)
      tls_ = std::make_unique<asio::ssl::stream<tcp::socket&>>(socket_, *server_.ssl);
    server_.sessions.insert(this);
    server_.connections.fetch_add(1);
  }
  ~Session() {
    server_.sessions.erase(this);
    server_.connections.fetch_sub(1);
  }

  void start(bool reject) {
    if (reject) {
      server_.logRefusal(
          peer_, std::to_string(server_.options.maxConnections) + " connections are already open");
      if (tls_) return close();  // (no TLS handshake for a client that is turned away)
      sendHello(proto::kHelloTooManyConnections, /*thenClose=*/true);
      return;
    }
    auto self = shared_from_this();
    // A client that does not finish the handshake in time (silent, slow, a stranger) is
    // closed: it cannot hold a connection slot.
    handshakeTimer_.expires_after(server_.options.handshakeTimeout);
    handshakeTimer_.async_wait([this, self](const asio::error_code& ec) {
      if (ec || authenticated_ || !socket_.is_open()) return;
      server_.logRefusal(peer_, "no handshake within " +
                                    std::to_string(server_.options.handshakeTimeout.count()) +
                                    " ms");
      close();
    });
    if (!tls_) return readHello();
    tls_->async_handshake(asio::ssl::stream_base::server, [this, self](const asio::error_code& ec) {
      if (ec) {
        if (socket_.is_open()) {
          server_.logRefusal(peer_, "TLS failed: " + secure::explainTlsFailure(ec.message()));
        }
        return close();
      }
      tlsReady_ = true;
      if (evicted_) return close();
      readHello();
    });
  }

  void readHello() {
    auto self = shared_from_this();
    readExactly(asio::buffer(hello_.data(), proto::kHelloHeadBytes),
                [this, self](const asio::error_code& ec, std::size_t) {
                  if (ec) return close();  // (and its handshake timer)
                  if (evicted_) return;    // (kHelloBusy is on its way)
                  onHello();
                });
  }

  // In its handshake still: not served yet, not closed, not told to make room.
  bool waiting() const noexcept { return !authenticated_ && !evicted_ && socket_.is_open(); }
  const std::string& address() const noexcept { return address_; }
  // Closed to make room for newer clients while still in its handshake. A client that
  // waits for the server's hello or for its proof's result is told kHelloBusy first (after
  // the challenge, when that is still being written): a rank of the job then connects again.
  // (A stranger that said nothing learns nothing from it.)
  void evict(const std::string& why) {
    server_.logRefusal(peer_, "closed in its handshake: " + why);
    evicted_ = true;
    if (tls_ && !tlsReady_) return close();
    if (!out_.empty()) {
      if (stage_ != Stage::kProof) close();  // (a refusal, closing anyway)
      return;                                // the challenge's write ends in tellBusy()
    }
    tellBusy();
  }

  void close() {
    asio::error_code ignored;
    handshakeTimer_.cancel();
    stallTimer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  // The waiter of this session finished: stop watching the socket, reply, read on.
  void finishWait(std::vector<std::uint8_t> frame) {
    waiter_.reset();
    asio::error_code ignored;
    socket_.cancel(ignored);
    send(std::move(frame), false);
  }

 private:
  void onHello() {
    std::uint32_t version = 0;
    if (!proto::parseHelloHead(hello_.data(), proto::kHelloHeadBytes, version)) {
      // A TLS handshake record: 0x16, then version 3.x.
      const bool speaksTls = hello_[0] == 0x16 && hello_[1] == 0x03;
      server_.logRefusal(peer_, std::string(speaksTls ? "it speaks TLS, and this store does not "
                                                        "use it (COLLX_TLS)"
                                                      : "it is not a collx store client") +
                                    " (first bytes: " +
                                    hexBytes(hello_.data(), proto::kHelloHeadBytes, " ") + ")");
      close();
      return;
    }
    if (version != proto::kVersion) {
      server_.logRefusal(peer_, "it speaks protocol v" + std::to_string(version) +
                                    " (this server: v" + std::to_string(proto::kVersion) + ")");
      sendHello(proto::kHelloBadVersion, true);
      return;
    }
    auto self = shared_from_this();
    readExactly(asio::buffer(hello_.data() + proto::kHelloHeadBytes,
                             proto::kClientHelloBytes - proto::kHelloHeadBytes),
                [this, self](const asio::error_code& ec, std::size_t) {
                  if (ec) return close();
                  if (evicted_) return;
                  onHelloRest();
                });
  }

  // Flags and the client's nonce: serve at once (no secret here), refuse a client without
  // the secret, or challenge it (this server proves the secret first).
  void onHelloRest() {
    const proto::ClientHello hello = proto::parseClientHello(hello_.data(), hello_.size());
    const auto& secret = server_.options.secret;
    if (!secret) {
      authenticated_ = true;
      stage_ = Stage::kServing;
      sendHello(proto::kHelloOk, false);
      return;
    }
    if ((hello.flags & proto::kHoldsSecret) == 0) {
      server_.logRefusal(peer_, "it holds no job secret");
      sendHello(proto::kHelloAuthRequired, true);
      return;
    }
    static_assert(sizeof(clientNonce_) == sizeof(hello.nonce));
    std::memcpy(clientNonce_.data(), hello.nonce.data(), clientNonce_.size());
    serverNonce_ = secure::randomNonce();
    const secure::Tag proof = secret->mac(secure::Purpose::kStore,
                                          {proto::kServerProofLabel, clientNonce_, serverNonce_});
    std::vector<std::uint8_t> frame = helloFrame(proto::kHelloChallenge);
    frame.insert(frame.end(), serverNonce_.begin(), serverNonce_.end());
    frame.insert(frame.end(), proof.begin(), proof.end());
    stage_ = Stage::kProof;
    send(std::move(frame), false, &Session::readProof);
  }

  void readProof() {
    auto self = shared_from_this();
    readExactly(asio::buffer(proof_), [this, self](const asio::error_code& ec, std::size_t) {
      if (ec) return close();
      if (evicted_) return;
      onProof();
    });
  }

  void onProof() {
    std::vector<std::uint8_t> result(proto::kAuthResultBytes);
    std::uint32_t status = proto::kHelloOk;
    if (!server_.options.secret->verify(secure::Purpose::kStore,
                                        {proto::kClientProofLabel, clientNonce_, serverNonce_},
                                        proof_)) {
      server_.logRefusal(peer_, "it failed the job secret's challenge (another secret, or none)");
      status = proto::kHelloAuthFailed;
      std::memcpy(result.data(), &status, 4);
      send(std::move(result), true);
      return;
    }
    authenticated_ = true;
    stage_ = Stage::kServing;
    handshakeTimer_.cancel();
    std::memcpy(result.data(), &status, 4);
    send(std::move(result), false);
  }

  void tellBusy() {
    if (stage_ == Stage::kHello) return sendHello(proto::kHelloBusy, /*thenClose=*/true);
    if (stage_ != Stage::kProof) return close();
    std::vector<std::uint8_t> result(proto::kAuthResultBytes);
    const std::uint32_t status = proto::kHelloBusy;
    std::memcpy(result.data(), &status, 4);
    send(std::move(result), /*thenClose=*/true);
  }

  std::vector<std::uint8_t> helloFrame(std::uint32_t status) {
    std::vector<std::uint8_t> frame(proto::kServerHelloBytes);
    std::memcpy(frame.data(), proto::kMagic, 4);
    std::uint32_t version = proto::kVersion;
    std::memcpy(frame.data() + 4, &version, 4);
    std::memcpy(frame.data() + 8, &status, 4);
    return frame;
  }

  void sendHello(std::uint32_t status, bool thenClose) {
    if (!thenClose) handshakeTimer_.cancel();  // (kHelloOk without a secret)
    send(helloFrame(status), thenClose);
  }

  // One write in flight at most: requests and replies alternate. Then `next` (the next
  // request's header, or the handshake's next step).
  void send(std::vector<std::uint8_t> frame, bool thenClose,
            void (Session::*next)() = &Session::readHeader) {
    out_ = std::move(frame);
    auto self = shared_from_this();
    writeAll(asio::buffer(out_),
             [this, self, thenClose, next](const asio::error_code& ec, std::size_t) {
               out_.clear();
               out_.shrink_to_fit();
               if (ec || thenClose) {
                 close();
                 return;
               }
               if (evicted_) return tellBusy();
               (this->*next)();
             });
  }

  void readHeader() {
    auto self = shared_from_this();
    const auto idle = server_.options.idleTimeout;
    if (idle.count() > 0) {
      stallTimer_.expires_after(idle);
      stallTimer_.async_wait([this, self, idle](const asio::error_code& ec) {
        if (ec || !socket_.is_open()) return;
        COLLX_DEBUG(kRdzv, "store server: closing the connection from {}: no request for {} ms",
                    peer_, idle.count());
        close();
      });
    }
    readExactly(asio::buffer(header_), [this, self](const asio::error_code& ec, std::size_t) {
      stallTimer_.cancel();
      if (ec) return;  // closed by the client (or truncated): nothing to answer
      std::uint32_t length;
      std::memcpy(&length, header_.data(), 4);
      if (length == 0 || length > server_.maxFrameBytes) {
        COLLX_WARN(kRdzv,
                   "store server: closing connection from {}: request of {} bytes (limit {})",
                   peer_, length, server_.maxFrameBytes);
        send(errorReply(ErrorKind::kInvalidArgument,
                        "request of " + std::to_string(length) +
                            " bytes is outside the server's limits (1.." +
                            std::to_string(server_.maxFrameBytes) + " bytes)"),
             true);
        return;
      }
      expected_ = length;
      body_.clear();
      readBody();
    });
  }

  // The request's body, a piece at a time (its buffer grows with the bytes that came, not
  // with what the header announced); a client that stops sending for stallTimeout is closed.
  void readBody() {
    constexpr std::size_t kPiece = std::size_t{1} << 20;
    auto self = shared_from_this();
    stallTimer_.expires_after(server_.options.stallTimeout);
    stallTimer_.async_wait([this, self](const asio::error_code& ec) {
      if (ec || !socket_.is_open()) return;
      COLLX_WARN(kRdzv,
                 "store server: closing connection from {}: its request stopped after {} of {} "
                 "bytes for {} ms",
                 peer_, body_.size(), expected_, server_.options.stallTimeout.count());
      close();
    });
    const std::size_t at = body_.size();
    const std::size_t piece = std::min(expected_ - at, kPiece);
    body_.resize(at + piece);
    readExactly(asio::buffer(body_.data() + at, piece),
                [this, self](const asio::error_code& ec, std::size_t) {
                  stallTimer_.cancel();
                  if (ec) return close();
                  if (body_.size() < expected_) return readBody();
                  handle();
                });
  }

  void handle() {
    std::vector<std::uint8_t> body = std::move(body_);
    body_ = {};
    proto::Op op = proto::Op::kPing;
    try {
      proto::Reader r(body.data(), body.size());
      op = static_cast<proto::Op>(r.u8());
      dispatch(proto::parseRequest(op, r, server_.limits()));
    } catch (const proto::ProtocolError& e) {
      COLLX_WARN(kRdzv, "store server: malformed {} request from {}: {}", proto::opName(op), peer_,
                 e.what());
      send(errorReply(ErrorKind::kInvalidArgument,
                      std::string("malformed ") + proto::opName(op) + " request: " + e.what()),
           false);
    } catch (const Error& e) {
      send(errorReply(e.kind(), e.detail()), false);
    }
  }

  // Carries out a parsed request (proto::parseRequest checked it).
  void dispatch(proto::Request q) {
    auto& data = server_.data;
    switch (q.op) {
      case proto::Op::kPing:
        send(okReply(), false);
        return;
      case proto::Op::kSet: {
        const std::string& key = q.keys[0];
        data[key] = Bytes(q.values[0].begin(), q.values[0].end());
        send(okReply(), false);
        server_.notify(key);
        return;
      }
      case proto::Op::kMultiSet: {
        for (std::size_t i = 0; i < q.keys.size(); ++i) {
          data[q.keys[i]] = Bytes(q.values[i].begin(), q.values[i].end());
        }
        send(okReply(), false);
        for (const auto& key : q.keys) server_.notify(key);
        return;
      }
      case proto::Op::kGet:
      case proto::Op::kWait: {
        auto timeout = std::chrono::milliseconds(q.timeoutMs);
        auto waiter = std::make_shared<Waiter>(server_.io, shared_from_this(), std::move(q.keys),
                                               q.op == proto::Op::kGet);
        if (server_.tryComplete(waiter)) return;
        waiter_ = waiter;
        waiter->timer.expires_after(std::min(timeout, kMaxServerWait));
        std::weak_ptr<Waiter> weak = waiter;
        waiter->timer.async_wait([this, weak](const asio::error_code& ec) {
          if (ec) return;
          if (auto w = weak.lock()) server_.expire(w);
        });
        watchWhileWaiting();
        return;
      }
      case proto::Op::kAdd: {
        const std::string& key = q.keys[0];
        auto it = data.find(key);
        std::int64_t result =
            detail::applyAdd(it == data.end() ? nullptr : &it->second, q.delta, key, Where{});
        data[key] = detail::formatCounter(result);
        proto::Writer w;
        w.u8(static_cast<std::uint8_t>(proto::Status::kOk)).i64(result);
        send(std::move(w.finish()), false);
        server_.notify(key);
        return;
      }
      case proto::Op::kCompareSet: {
        const std::string& key = q.keys[0];
        const std::string_view expected = q.values[0];
        const std::string_view desired = q.values[1];
        auto it = data.find(key);
        bool swap = it == data.end()
                        ? expected.empty()
                        : std::string_view(reinterpret_cast<const char*>(it->second.data()),
                                           it->second.size()) == expected;
        proto::Writer w;
        w.u8(static_cast<std::uint8_t>(proto::Status::kOk));
        if (swap) {
          data[key] = Bytes(desired.begin(), desired.end());
          w.str(desired);
        } else if (it == data.end()) {
          w.str("");
        } else {
          w.bytes(it->second.data(), it->second.size());
        }
        send(std::move(w.finish()), false);
        if (swap) server_.notify(key);
        return;
      }
      case proto::Op::kCheck: {
        bool all = true;
        for (const auto& key : q.keys) all = all && data.count(key) > 0;
        proto::Writer w;
        w.u8(static_cast<std::uint8_t>(proto::Status::kOk)).u8(all ? 1 : 0);
        send(std::move(w.finish()), false);
        return;
      }
      case proto::Op::kErase: {
        bool existed = data.erase(q.keys[0]) > 0;
        proto::Writer w;
        w.u8(static_cast<std::uint8_t>(proto::Status::kOk)).u8(existed ? 1 : 0);
        send(std::move(w.finish()), false);
        return;
      }
    }
  }

  // While a request waits, the client must not send anything: a read completing means it
  // closed the connection (or broke the protocol), and its waiter is dropped at once.
  void watchWhileWaiting() {
    auto self = shared_from_this();
    readSome(asio::buffer(&probe_, 1), [this, self](const asio::error_code& ec, std::size_t) {
      if (ec == asio::error::operation_aborted) return;
      if (auto waiter = waiter_) {
        COLLX_DEBUG(kRdzv, "store server: {} left while waiting", peer_);
        waiter->done = true;
        waiter->timer.cancel();
        server_.unpark(waiter);
        waiter->session.reset();
        waiter_.reset();
      }
      close();
    });
  }

  // The socket's I/O, through TLS when the server uses it.
  template <typename Buffers, typename Handler>
  void readExactly(const Buffers& buffers, Handler&& handler) {
    if (tls_) return asio::async_read(*tls_, buffers, std::forward<Handler>(handler));
    asio::async_read(socket_, buffers, std::forward<Handler>(handler));
  }
  template <typename Buffers, typename Handler>
  void readSome(const Buffers& buffers, Handler&& handler) {
    if (tls_) return tls_->async_read_some(buffers, std::forward<Handler>(handler));
    socket_.async_read_some(buffers, std::forward<Handler>(handler));
  }
  template <typename Buffers, typename Handler>
  void writeAll(const Buffers& buffers, Handler&& handler) {
    if (tls_) return asio::async_write(*tls_, buffers, std::forward<Handler>(handler));
    asio::async_write(socket_, buffers, std::forward<Handler>(handler));
  }

  TcpStoreServer::Impl& server_;
  tcp::socket socket_;
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls_;  // (declared after the socket)
  std::string address_;                                   // the client's IP address
  std::string peer_;                                      // and port
  std::array<std::uint8_t, proto::kClientHelloBytes> hello_{};
  asio::steady_timer handshakeTimer_;
  asio::steady_timer stallTimer_;
  std::size_t expected_ = 0;    // the request's bytes, as its header said
  bool authenticated_ = false;  // the handshake is done: requests are served
  // What the client waits for in its handshake: the server's hello, or its proof's result.
  enum class Stage { kHello, kProof, kServing } stage_ = Stage::kHello;
  bool tlsReady_ = false;  // the TLS handshake is done: the session can write
  bool evicted_ = false;   // closed in its handshake to make room (evict())
  secure::Nonce clientNonce_{};
  secure::Nonce serverNonce_{};
  secure::Tag proof_{};
  std::array<std::uint8_t, 4> header_{};
  std::vector<std::uint8_t> body_;
  std::vector<std::uint8_t> out_;
  std::uint8_t probe_ = 0;
  std::shared_ptr<Waiter> waiter_;
};

}  // namespace

void TcpStoreServer::Impl::accept() {
  acceptor.async_accept([this](const asio::error_code& ec, tcp::socket socket) {
    if (stopped.load()) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // Out of descriptors and the like: back off instead of spinning.
      COLLX_WARN(kRdzv, "store server: accept failed: {}; retrying in 100 ms", ec.message());
      retryTimer.expires_after(std::chrono::milliseconds(100));
      retryTimer.async_wait([this](const asio::error_code& e) {
        if (!e) accept();
      });
      return;
    }
    asio::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    // A flood of clients that never finish their handshake: the oldest makes room.
    while (!pending.empty()) {
      auto oldest = pending.front().lock();
      const bool waiting = oldest && oldest->waiting();
      if (waiting && pending.size() < options.maxPendingHandshakes) break;
      pending.pop_front();
      if (waiting) {
        oldest->evict("more than " + std::to_string(options.maxPendingHandshakes) +
                      " clients were in theirs");
      }
    }
    bool reject = connections.load() >= options.maxConnections;
    auto session = std::make_shared<Session>(*this, std::move(socket));
    if (!reject) {
      // One address floods: its own oldest handshake makes room, not another client's.
      std::shared_ptr<Session> oldestHere;
      std::size_t here = 0;
      for (const auto& weak : pending) {
        auto other = weak.lock();
        if (!other || !other->waiting() || other->address() != session->address()) {
          continue;
        }
        if (!oldestHere) oldestHere = other;
        ++here;
      }
      if (here >= options.maxPendingPerAddress && oldestHere) {
        oldestHere->evict("more than " + std::to_string(options.maxPendingPerAddress) +
                          " clients of its address were in theirs");
      }
      pending.push_back(session);
    }
    session->start(reject);
    accept();
  });
}

bool TcpStoreServer::Impl::tryComplete(const std::shared_ptr<Waiter>& waiter) {
  for (const std::string& key : waiter->keys) {
    if (data.find(key) == data.end()) {
      waiter->registeredKey = key;
      waiters[key].push_back(waiter);
      return false;
    }
  }
  waiter->done = true;
  waiter->timer.cancel();
  proto::Writer w;
  w.u8(static_cast<std::uint8_t>(proto::Status::kOk));
  if (waiter->wantValues) {
    w.u32(static_cast<std::uint32_t>(waiter->keys.size()));
    for (const std::string& key : waiter->keys) {
      const Bytes& value = data.at(key);
      w.bytes(value.data(), value.size());
    }
  }
  std::shared_ptr<Session> session = std::move(waiter->session);
  session->finishWait(std::move(w.finish()));
  return true;
}

void TcpStoreServer::Impl::notify(const std::string& key) {
  auto it = waiters.find(key);
  if (it == waiters.end()) return;
  std::vector<std::shared_ptr<Waiter>> parked = std::move(it->second);
  waiters.erase(it);
  for (const auto& waiter : parked) {
    if (!waiter->done) tryComplete(waiter);
  }
}

void TcpStoreServer::Impl::unpark(const std::shared_ptr<Waiter>& waiter) {
  auto it = waiters.find(waiter->registeredKey);
  if (it == waiters.end()) return;
  std::erase(it->second, waiter);
  if (it->second.empty()) waiters.erase(it);
}

void TcpStoreServer::Impl::expire(const std::shared_ptr<Waiter>& waiter) {
  if (waiter->done) return;
  waiter->done = true;
  unpark(waiter);
  std::vector<std::string> missing;
  for (const std::string& key : waiter->keys) {
    if (data.find(key) == data.end()) missing.push_back(key);
  }
  proto::Writer w;
  w.u8(static_cast<std::uint8_t>(proto::Status::kTimeout)).keys(missing);
  std::shared_ptr<Session> session = std::move(waiter->session);
  if (session) session->finishWait(std::move(w.finish()));
}

void TcpStoreServer::Impl::shutdown() {
  asio::error_code ignored;
  acceptor.close(ignored);
  retryTimer.cancel();
  for (auto& [key, parked] : waiters) {
    for (auto& waiter : parked) {
      waiter->done = true;
      waiter->timer.cancel();
      waiter->session.reset();
    }
  }
  waiters.clear();
  std::vector<Session*> open(sessions.begin(), sessions.end());
  for (Session* session : open) session->close();
}

TcpStoreServer::TcpStoreServer() : TcpStoreServer(Options{}) {}

TcpStoreServer::TcpStoreServer(const Options& options) : impl_(std::make_unique<Impl>(options)) {
  Impl& impl = *impl_;
  impl.maxFrameBytes = options.maxValueBytes + kFrameOverhead;
  Where where{-1, "store server (" + options.host + ":" + std::to_string(options.port) + ")", -1};
  asio::error_code ec;
  tcp::resolver resolver(impl.io);
  auto endpoints = resolver.resolve(options.host, std::to_string(options.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec) throw IoError(where, "cannot resolve '" + options.host + "': " + ec.message());
  std::string lastError = "no address";
  for (const auto& entry : endpoints) {
    tcp::endpoint endpoint = entry.endpoint();
    asio::error_code e;
    impl.acceptor.open(endpoint.protocol(), e);
    if (!e) impl.acceptor.set_option(tcp::acceptor::reuse_address(true), e);
    if (!e && endpoint.address().is_v6()) impl.acceptor.set_option(asio::ip::v6_only(false), e);
    if (!e) impl.acceptor.bind(endpoint, e);
    if (!e) impl.acceptor.listen(asio::socket_base::max_listen_connections, e);
    if (!e) break;
    lastError = endpoint.address().to_string() + ": " + e.message();
    asio::error_code ignored;
    impl.acceptor.close(ignored);
  }
  if (!impl.acceptor.is_open()) {
    throw IoError(where, "cannot listen on " + options.host + ":" + std::to_string(options.port) +
                             ": " + lastError);
  }
  tcp::endpoint local = impl.acceptor.local_endpoint();
  impl.port = local.port();
  asio::ip::address address = local.address();
  if (address.is_unspecified()) {
    address = address.is_v6() ? asio::ip::address(asio::ip::address_v6::loopback())
                              : asio::ip::address(asio::ip::address_v4::loopback());
  }
  impl.urlHost = address.to_string();
  impl.accept();
  impl.thread = std::thread([&impl] {
    log::ScopedLogRank noRank(-1);
    try {
      impl.io.run();
    } catch (const std::exception& e) {
      COLLX_ERROR(kRdzv, "store server: stopped by an unexpected error: {}", e.what());
    }
  });
  COLLX_DEBUG(kRdzv, "store server listening on {}", url());
}

TcpStoreServer::~TcpStoreServer() { stop(); }

void TcpStoreServer::stop() noexcept {
  if (!impl_ || impl_->stopped.exchange(true)) return;
  asio::post(impl_->io, [impl = impl_.get()] { impl->shutdown(); });
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::uint16_t TcpStoreServer::port() const noexcept { return impl_->port; }

std::string TcpStoreServer::url() const { return tcpUrl(impl_->urlHost, impl_->port); }

std::size_t TcpStoreServer::connections() const noexcept { return impl_->connections.load(); }

std::string tcpUrl(const std::string& host, std::uint16_t port) {
  if (host.find(':') != std::string::npos) return "tcp://[" + host + "]:" + std::to_string(port);
  return "tcp://" + host + ":" + std::to_string(port);
}

}  // namespace collx::rendezvous
