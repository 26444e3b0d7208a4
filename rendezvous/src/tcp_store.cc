// TcpStore: the client side of the TCP store. Plain non-blocking sockets with poll() for
// deadlines; one request in flight per store object (a mutex serializes callers). A broken
// connection is dropped and the next call connects again.
#include "collx/rendezvous/tcp_store.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <random>
#include <thread>

#include "collx/base/hex.h"
#include "collx/base/log.h"
#include "collx/secure/job_secret.h"
#include "collx/secure/tls.h"
#include "socket_io.h"
#include "tcp_store_protocol.h"

namespace collx::rendezvous {

static_assert(std::endian::native == std::endian::little, "the store protocol is little endian");

namespace {

// Extra time allowed for the server's reply beyond the wait it was asked to do, on top of the
// timeout for the I/O; never more than that timeout, so that a client with a short timeout
// (the hang report's watcher) learns of a stopped server within its wait + 2 x its timeout.
constexpr std::chrono::milliseconds kReplySlack(5000);
std::chrono::milliseconds replySlack(std::chrono::milliseconds timeout) {
  return std::min(kReplySlack, timeout);
}

std::string printable(const std::uint8_t* data, std::size_t size) {
  std::string text;
  for (std::size_t i = 0; i < size; ++i) {
    text += std::isprint(data[i]) ? static_cast<char>(data[i]) : '.';
  }
  return hexBytes(data, size, " ") + " '" + text + "'";
}

std::string ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

}  // namespace

struct TcpStore::Reply : proto::Reply {};

TcpStore::TcpStore(std::string host, std::uint16_t port, const StoreOptions& options)
    : Store(options),
      host_(std::move(host)),
      port_(port),
      secret_(options.secret),
      tls_(options.tls),
      maxValueBytes_(kStoreMaxValue.get(Config::process())),
      link_(std::make_unique<sockio::Link>()) {
  if (host_.size() > 2 && host_.front() == '[' && host_.back() == ']') {
    host_ = host_.substr(1, host_.size() - 2);
  }
  if (host_.empty()) throw InvalidArgument(Where{rank(), "TcpStore", -1}, "the host is empty");
  if (port_ == 0) throw InvalidArgument(Where{rank(), "TcpStore", -1}, "the port is 0");
  std::lock_guard<std::mutex> lock(mutex_);
  connectLocked(Clock::now() + timeout(), "connect");
}

TcpStore::~TcpStore() {
  std::lock_guard<std::mutex> lock(mutex_);
  closeLocked();
}

std::string TcpStore::describe() const { return tcpUrl(host_, port_); }

std::unique_ptr<Store> TcpStore::doReopen(const StoreOptions& options) const {
  StoreOptions same = options;
  if (!same.secret) same.secret = secret_;  // the same job's store: the same proof
  if (!same.tls) same.tls = tls_;
  return std::make_unique<TcpStore>(host_, port_, same);
}

void TcpStore::closeLocked() noexcept { link_->close(); }

bool TcpStore::openLocked(int fd, Clock::time_point deadline, std::string_view op,
                          Clock::time_point started) {
  *link_ = sockio::Link(fd);
  if (tls_) {
    // TLS first: the hello and everything after it go sealed.
    const sockio::Outcome out = link_->startTls(tls_, "", deadline);
    if (out.result != sockio::Result::kOk) {
      closeLocked();
      const std::string why = "TLS with the store at " + describe() + " failed: " + out.describe() +
                              " (COLLX_TLS=1 here: the store must use TLS " +
                              "too, with a certificate that COLLX_TLS_CA signed)";
      if (out.result == sockio::Result::kTimeout) throw TimeoutError(where(op), why);
      throw IoError(where(op), why);
    }
  }
  return handshakeLocked(deadline, op, started);
}

void TcpStore::connectLocked(Clock::time_point deadline, std::string_view op) {
  auto step = std::chrono::milliseconds(10);
  std::string lastError;
  const auto started = Clock::now();
  int busy = 0;
  while (true) {
    int fd = sockio::connectTcp(host_, port_, deadline, lastError);
    if (fd >= 0) {
      if (openLocked(fd, deadline, op, started)) return;
      // Too many clients were in their handshakes at once (hundreds of ranks starting
      // together): again after a pause, drawn at random so that they do not all come back
      // together.
      lastError = "the store was busy with other clients' handshakes";
      ++busy;
      COLLX_DEBUG(kRdzv, "store {}: busy with other handshakes (time {}); connecting again",
                  describe(), busy);
      thread_local std::minstd_rand random(std::random_device{}());
      const auto pause = std::chrono::milliseconds(
          std::uniform_int_distribution<std::int64_t>(1, 50 + 50 * std::min(busy, 8))(random));
      const auto now = Clock::now();
      if (now < deadline) {
        std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
        continue;
      }
    }
    if (Clock::now() >= deadline) {
      throw TimeoutError(
          where(op),
          "could not connect within " +
              ms(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started)) +
              " (last error: " + lastError + ")");
    }
    COLLX_DEBUG(kRdzv, "store {}: connect failed ({}); retrying", describe(), lastError);
    detail::backoffSleep(step, deadline, std::chrono::milliseconds(500));
  }
}

bool TcpStore::handshakeLocked(Clock::time_point deadline, std::string_view op,
                               Clock::time_point started) {
  using sockio::Result;
  auto fail = [&](const sockio::Outcome& out) {
    closeLocked();
    if (out.result == Result::kTimeout) {
      throw TimeoutError(
          where(op),
          "connected, but no collx store handshake came back within " +
              ms(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started)) +
              ": is it a collx store?");
    }
    throw IoError(where(op), "the connection failed during the store handshake (" + out.describe() +
                                 "): is it a collx store, and is it still running?" +
                                 (tls_ ? ""
                                       : " (A store that uses TLS closes a client that does not: "
                                         "COLLX_TLS=1.)"));
  };
  const secure::Nonce clientNonce = secure::randomNonce();
  std::uint8_t hello[proto::kClientHelloBytes];
  std::memcpy(hello, proto::kMagic, 4);
  const std::uint32_t version = proto::kVersion;
  const std::uint32_t flags = secret_ ? proto::kHoldsSecret : 0;
  std::memcpy(hello + 4, &version, 4);
  std::memcpy(hello + 8, &flags, 4);
  std::memcpy(hello + 12, clientNonce.data(), clientNonce.size());
  sockio::Outcome out = link_->sendAll(hello, sizeof(hello), deadline);
  std::uint8_t answer[proto::kServerHelloBytes];
  if (out.result == Result::kOk) out = link_->recvAll(answer, 4, deadline);
  if (out.result == Result::kOk && std::memcmp(answer, proto::kMagic, 4) != 0) {
    closeLocked();
    throw IoError(where(op),
                  describe() + " is not a collx store: it answered " + printable(answer, 4));
  }
  if (out.result == Result::kOk) out = link_->recvAll(answer + 4, 8, deadline);
  if (out.result != Result::kOk) fail(out);
  const proto::ServerHello serverHello = proto::parseServerHello(answer, sizeof(answer));
  const std::uint32_t serverVersion = serverHello.version;
  std::uint32_t status = serverHello.status;
  if (status == proto::kHelloOk) {
    if (!secret_) return true;
    closeLocked();
    throw IoError(where(op), "the store at " + describe() +
                                 " serves clients without asking for the job's secret, and "
                                 "this rank holds one (" +
                                 secret_->origin() +
                                 "): it is not this job's store, or it was started without "
                                 "the secret; refusing it");
  }
  if (status == proto::kHelloChallenge && secret_) {
    std::uint8_t challenge[proto::kChallengeBytes];
    out = link_->recvAll(challenge, sizeof(challenge), deadline);
    if (out.result != Result::kOk) fail(out);
    const std::span<const std::uint8_t> serverNonce(challenge, proto::kNonceBytes);
    secure::Tag serverProof;
    std::memcpy(serverProof.data(), challenge + proto::kNonceBytes, serverProof.size());
    // The server proves the secret first: a store that cannot learns nothing from us.
    if (!secret_->verify(secure::Purpose::kStore,
                         {proto::kServerProofLabel, clientNonce, serverNonce}, serverProof)) {
      closeLocked();
      throw IoError(where(op), "the store at " + describe() +
                                   " could not prove that it holds the job's secret: it is not "
                                   "this job's store, or it was given another secret");
    }
    const secure::Tag proof =
        secret_->mac(secure::Purpose::kStore, {proto::kClientProofLabel, clientNonce, serverNonce});
    out = link_->sendAll(proof.data(), proof.size(), deadline);
    std::uint8_t result[proto::kAuthResultBytes];
    if (out.result == Result::kOk) out = link_->recvAll(result, sizeof(result), deadline);
    if (out.result != Result::kOk) fail(out);
    std::memcpy(&status, result, 4);
    if (status == proto::kHelloOk) return true;
  }
  closeLocked();
  if (status == proto::kHelloBusy) return false;
  if (status == proto::kHelloBadVersion) {
    throw IoError(where(op), "the store speaks protocol v" + std::to_string(serverVersion) +
                                 ", this client v" + std::to_string(proto::kVersion));
  }
  if (status == proto::kHelloTooManyConnections) {
    throw IoError(where(op), "the store refused the connection: it has too many connections");
  }
  if (status == proto::kHelloAuthRequired) {
    throw IoError(where(op), "the store at " + describe() +
                                 " asks for the job's secret, and this rank has none: set "
                                 "COLLX_JOB_SECRET or COLLX_JOB_SECRET_FILE as the job's other "
                                 "ranks have it (collx-run sets one)");
  }
  if (status == proto::kHelloAuthFailed) {
    throw IoError(where(op), "the store at " + describe() +
                                 " refused this rank's proof of the job's secret: the ranks "
                                 "were given different secrets");
  }
  throw IoError(where(op),
                "the store refused the connection (status " + std::to_string(status) + ")");
}

TcpStore::Reply TcpStore::roundTrip(proto::Op op, std::size_t keys,
                                    std::vector<std::uint8_t>& frame,
                                    std::chrono::milliseconds serverWait) {
  using sockio::Result;
  const std::string_view name = proto::opName(op);
  if (frame.size() - 4 > 0xFFFFFFFFull) {
    throw InvalidArgument(where(name), "request of " + std::to_string(frame.size()) +
                                           " bytes exceeds the protocol's 4 GiB limit");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (link_->open()) {
    // The server never speaks first: anything readable between requests is its close (it
    // stopped, or closed an idle client, COLLX_STORE_IDLE_TIMEOUT). Start on a new connection.
    pollfd p{link_->fd(), POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) > 0) {
      COLLX_DEBUG(kRdzv, "store {}: the server closed the connection; reconnecting", describe());
      closeLocked();
      // One attempt: a server that is gone fails at once, as a broken connection does.
      const auto started = Clock::now();
      std::string why;
      const int fd = sockio::connectTcp(host_, port_, started + timeout(), why);
      if (fd < 0) {
        throw IoError(where(name),
                      "the store closed the connection and takes no new one (" + why + ")");
      }
      if (!openLocked(fd, started + timeout(), name, started)) {
        connectLocked(started + timeout(), name);
      }
    }
  }
  if (!link_->open()) connectLocked(Clock::now() + timeout(), name);
  auto fail = [&](const sockio::Outcome& out, const char* phase) {
    closeLocked();
    if (out.result == Result::kTimeout) {
      throw TimeoutError(where(name), std::string("timed out ") + phase + " (the store did not " +
                                          "answer within " + ms(timeout() + serverWait) + ")");
    }
    throw IoError(where(name),
                  std::string("lost the connection to the store ") + phase + ": " + out.describe());
  };
  sockio::Outcome out = link_->sendAll(frame.data(), frame.size(), Clock::now() + timeout());
  if (out.result != Result::kOk) fail(out, "sending the request");
  auto replyDeadline = Clock::now() + timeout() + serverWait;
  std::uint32_t length = 0;
  out = link_->recvAll(&length, 4, replyDeadline);
  if (out.result != Result::kOk) fail(out, "waiting for the reply");
  if (length == 0) {
    closeLocked();
    throw IoError(where(name), "the store sent an empty reply");
  }
  const std::uint64_t most = proto::maxReplyBytes(op, keys, maxValueBytes_);
  if (length > most) {
    closeLocked();
    throw IoError(where(name), "the store announced a reply of " + std::to_string(length) +
                                   " bytes, more than a " + std::string(name) + " of " +
                                   std::to_string(keys) + " keys can have (" +
                                   std::to_string(most) + ")");
  }
  // The body grows as its bytes come, 1 MiB at a time, not ahead of them.
  constexpr std::size_t kPiece = std::size_t{1} << 20;
  std::vector<std::uint8_t> body;
  while (body.size() < length) {
    const std::size_t at = body.size();
    const std::size_t piece = std::min<std::size_t>(length - at, kPiece);
    body.resize(at + piece);
    out = link_->recvAll(body.data() + at, piece, replyDeadline);
    if (out.result != Result::kOk) fail(out, "reading the reply");
  }
  Reply reply;
  try {
    static_cast<proto::Reply&>(reply) = proto::parseReply(op, keys, body.data(), body.size());
  } catch (const proto::ProtocolError& e) {
    closeLocked();
    throw IoError(where(name), std::string("malformed reply from the store: ") + e.what());
  }
  if (reply.status == proto::Status::kError) {
    throwError(reply.errorKind, where(name),
               "the store server refused the request: " + reply.message);
  }
  return reply;
}

namespace {

void checkEncodable(const Store& store, const Bytes& value, const Where& where) {
  (void)store;
  if (value.size() > 0xFFFFFFF0ull) {
    throw InvalidArgument(where, "value of " + std::to_string(value.size()) +
                                     " bytes exceeds the protocol's 4 GiB limit");
  }
}

std::chrono::milliseconds remaining(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? left : std::chrono::milliseconds(0);
}

}  // namespace

void TcpStore::ping() {
  proto::Writer w;
  w.u8(static_cast<std::uint8_t>(proto::Op::kPing));
  roundTrip(proto::Op::kPing, 0, w.finish(), std::chrono::milliseconds(0));
}

void TcpStore::doSet(const std::string& key, const Bytes& value) {
  checkEncodable(*this, value, where("set"));
  proto::Writer w;
  w.u8(static_cast<std::uint8_t>(proto::Op::kSet)).str(key).bytes(value.data(), value.size());
  roundTrip(proto::Op::kSet, 1, w.finish(), std::chrono::milliseconds(0));
}

void TcpStore::doMultiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  proto::Writer w;
  w.u8(static_cast<std::uint8_t>(proto::Op::kMultiSet)).keys(keys);
  w.u32(static_cast<std::uint32_t>(values.size()));
  for (const Bytes& value : values) {
    checkEncodable(*this, value, where("multiSet"));
    w.bytes(value.data(), value.size());
  }
  roundTrip(proto::Op::kMultiSet, keys.size(), w.finish(), std::chrono::milliseconds(0));
}

std::vector<std::string> TcpStore::doWait(const std::vector<std::string>& keys,
                                          Clock::time_point deadline) {
  auto wait = remaining(deadline);
  proto::Writer w;
  w.u8(static_cast<std::uint8_t>(proto::Op::kWait)).u64(wait.count()).keys(keys);
  Reply reply = roundTrip(proto::Op::kWait, keys.size(), w.finish(), wait + replySlack(timeout()));
  return std::move(reply.missing);
}

std::vector<std::string> TcpStore::doMultiGet(const std::vector<std::string>& keys,
                                              Clock::time_point deadline,
                                              std::vector<Bytes>& values) {
  auto wait = remaining(deadline);
  proto::Writer w;
  w.u8(static_cast<std::uint8_t>(proto::Op::kGet)).u64(wait.count()).keys(keys);
  Reply reply = roundTrip(proto::Op::kGet, keys.size(), w.finish(), wait + replySlack(timeout()));
  if (reply.status != proto::Status::kOk) return std::move(reply.missing);
  values.clear();
  for (auto& value : reply.values) values.emplace_back(std::move(value));
  return {};
}

std::int64_t TcpStore::doAdd(const std::string& key, std::int64_t delta) {
  proto::Writer w;
  w.u8(static_cast<std::uint8_t>(proto::Op::kAdd)).str(key).i64(delta);
  return roundTrip(proto::Op::kAdd, 1, w.finish(), std::chrono::milliseconds(0)).number;
}

Bytes TcpStore::doCompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  checkEncodable(*this, expected, where("compareSet"));
  checkEncodable(*this, desired, where("compareSet"));
  proto::Writer w;
  w.u8(static_cast<std::uint8_t>(proto::Op::kCompareSet)).str(key);
  w.bytes(expected.data(), expected.size()).bytes(desired.data(), desired.size());
  Reply reply = roundTrip(proto::Op::kCompareSet, 1, w.finish(), std::chrono::milliseconds(0));
  return Bytes(std::move(reply.values.at(0)));
}

bool TcpStore::doCheck(const std::vector<std::string>& keys) {
  proto::Writer w;
  w.u8(static_cast<std::uint8_t>(proto::Op::kCheck)).keys(keys);
  return roundTrip(proto::Op::kCheck, keys.size(), w.finish(), std::chrono::milliseconds(0)).flag;
}

bool TcpStore::doErase(const std::string& key) {
  proto::Writer w;
  w.u8(static_cast<std::uint8_t>(proto::Op::kErase)).str(key);
  return roundTrip(proto::Op::kErase, 1, w.finish(), std::chrono::milliseconds(0)).flag;
}

}  // namespace collx::rendezvous
