// The TCP store server under bad clients, and the client against things that are not a
// collx store. Every bad client is refused alone: the others keep being served.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "collx/rendezvous/tcp_store.h"
#include "collx/secure/job_secret.h"
#include "tcp_store_protocol.h"
#include "util/test_util.h"

namespace collx::rendezvous {
namespace {

using namespace std::chrono_literals;

// A raw TCP connection for speaking (or mangling) the protocol by hand.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      throw std::runtime_error("connect failed");
    }
  }
  ~RawClient() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void send(const void* data, std::size_t size) {
    ASSERT_EQ(::send(fd_, data, size, MSG_NOSIGNAL), static_cast<ssize_t>(size));
  }
  void send(const std::vector<std::uint8_t>& bytes) { send(bytes.data(), bytes.size()); }
  // This protocol's hello (a client without a secret), or another version's first 8 bytes.
  void hello(std::uint32_t version = proto::kVersion, std::uint32_t flags = 0) {
    std::uint8_t bytes[proto::kClientHelloBytes] = {};
    std::memcpy(bytes, proto::kMagic, 4);
    std::memcpy(bytes + 4, &version, 4);
    std::memcpy(bytes + 8, &flags, 4);
    send(bytes, version == proto::kVersion ? proto::kClientHelloBytes : proto::kHelloHeadBytes);
  }
  // Reads exactly n bytes; fewer if the peer closes or 5 s pass.
  std::vector<std::uint8_t> read(std::size_t n) {
    std::vector<std::uint8_t> out;
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      std::uint8_t buf[4096];
      ssize_t got = ::recv(fd_, buf, std::min(sizeof(buf), n - out.size()), 0);
      if (got <= 0) break;
      out.insert(out.end(), buf, buf + got);
    }
    return out;
  }
  // True when the server closed the connection within `timeout`.
  bool closedByPeer(std::chrono::milliseconds timeout = 5s) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    std::uint8_t buf[256];
    while (true) {
      ssize_t got = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (got == 0) return true;
      if (got < 0) return errno != EAGAIN;
      // skip data (an error reply) and look again
      if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    }
  }
  // Reads one reply frame: status and body.
  std::pair<proto::Status, std::vector<std::uint8_t>> reply() {
    auto header = read(4);
    if (header.size() != 4) return {proto::Status::kError, {}};
    std::uint32_t length;
    std::memcpy(&length, header.data(), 4);
    auto body = read(length);
    if (body.empty()) return {proto::Status::kError, {}};
    auto status = static_cast<proto::Status>(body[0]);
    body.erase(body.begin());
    return {status, body};
  }

 private:
  int fd_ = -1;
};

std::string errorMessage(const std::vector<std::uint8_t>& body) {
  proto::Reader r(body.data(), body.size());
  r.u8();  // kind
  return std::string(r.str());
}

class TcpStoreServerTest : public ::testing::Test {
 protected:
  TcpStoreServer::Options options() {
    TcpStoreServer::Options o;
    o.maxValueBytes = 1 << 20;
    return o;
  }
  // A well-behaved client keeps working while a bad one is refused.
  void expectServing() {
    StoreOptions o;
    o.timeout = 5s;
    TcpStore good("127.0.0.1", server_.port(), o);
    good.set("still", "serving");
    EXPECT_EQ(toString(good.get("still")), "serving");
  }
  TcpStoreServer server_{options()};
};

TEST_F(TcpStoreServerTest, GarbageInsteadOfHelloClosesOnlyThatConnection) {
  RawClient bad(server_.port());
  const char http[] = "GET / HTTP/1.0\r\n\r\n";
  bad.send(http, sizeof(http) - 1);
  EXPECT_TRUE(bad.closedByPeer());
  expectServing();
}

TEST_F(TcpStoreServerTest, WrongProtocolVersionIsTold) {
  RawClient old(server_.port());
  old.hello(99);
  auto answer = old.read(proto::kServerHelloBytes);
  ASSERT_EQ(answer.size(), proto::kServerHelloBytes);
  std::uint32_t status;
  std::memcpy(&status, answer.data() + 8, 4);
  EXPECT_EQ(status, proto::kHelloBadVersion);
  EXPECT_TRUE(old.closedByPeer());
  expectServing();
}

TEST_F(TcpStoreServerTest, MalformedRequestGetsAnErrorReplyAndTheConnectionLives) {
  RawClient client(server_.port());
  client.hello();
  ASSERT_EQ(client.read(proto::kServerHelloBytes).size(), proto::kServerHelloBytes);
  // A set whose key claims 1000 bytes in a 10-byte frame.
  proto::Writer w;
  w.u8(static_cast<std::uint8_t>(proto::Op::kSet)).u32(1000).u8('x');
  client.send(w.finish());
  auto [status, body] = client.reply();
  ASSERT_EQ(status, proto::Status::kError);
  EXPECT_NE(errorMessage(body).find("truncated"), std::string::npos) << errorMessage(body);
  // An unknown operation.
  proto::Writer unknown;
  unknown.u8(200);
  client.send(unknown.finish());
  auto [status2, body2] = client.reply();
  ASSERT_EQ(status2, proto::Status::kError);
  EXPECT_NE(errorMessage(body2).find("unknown operation 200"), std::string::npos);
  // The same connection still works.
  proto::Writer ping;
  ping.u8(static_cast<std::uint8_t>(proto::Op::kPing));
  client.send(ping.finish());
  EXPECT_EQ(client.reply().first, proto::Status::kOk);
  expectServing();
}

TEST_F(TcpStoreServerTest, OversizedRequestIsRefusedAndClosed) {
  RawClient client(server_.port());
  client.hello();
  ASSERT_EQ(client.read(proto::kServerHelloBytes).size(), proto::kServerHelloBytes);
  std::uint32_t huge = 0x7fffffff;
  client.send(&huge, 4);
  auto [status, body] = client.reply();
  ASSERT_EQ(status, proto::Status::kError);
  EXPECT_NE(errorMessage(body).find("outside the server's limits"), std::string::npos);
  EXPECT_TRUE(client.closedByPeer());
  expectServing();
}

TEST_F(TcpStoreServerTest, ValueOverTheLimitIsInvalidArgumentAndTheClientGoesOn) {
  StoreOptions o;
  o.timeout = 5s;
  TcpStore store("127.0.0.1", server_.port(), o);
  try {
    store.set("big", Bytes((1 << 20) + 1));
    FAIL() << "a value over the server's limit was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the server's limit"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(store.check({"big"}));
  store.set("small", "ok");
  EXPECT_EQ(toString(store.get("small")), "ok");
}

TEST_F(TcpStoreServerTest, TruncatedRequestAndVanishingClientsFreeTheirSlots) {
  const std::size_t before = server_.connections();
  {
    RawClient truncated(server_.port());
    truncated.hello();
    truncated.read(proto::kServerHelloBytes);
    std::uint32_t length = 100;
    truncated.send(&length, 4);
    truncated.send("only ten b", 10);
  }  // closes mid-request
  {
    RawClient waiting(server_.port());
    waiting.hello();
    waiting.read(proto::kServerHelloBytes);
    proto::Writer w;
    w.u8(static_cast<std::uint8_t>(proto::Op::kWait)).u64(60000).keys({"never"});
    waiting.send(w.finish());
    std::this_thread::sleep_for(50ms);
  }  // goes away while the server holds its wait
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (server_.connections() > before && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(server_.connections(), before);
  expectServing();
}

TEST(TcpStoreServerLimits, TooManyConnectionsIsAClearRefusal) {
  TcpStoreServer::Options o;
  o.maxConnections = 2;
  TcpStoreServer server(o);
  StoreOptions so;
  so.timeout = 5s;
  auto first = std::make_unique<TcpStore>("127.0.0.1", server.port(), so);
  TcpStore second("127.0.0.1", server.port(), so);
  try {
    TcpStore third("127.0.0.1", server.port(), so);
    FAIL() << "a third connection was accepted with a limit of 2";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("too many connections"), std::string::npos) << e.what();
  }
  first.reset();
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (server.connections() > 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  TcpStore fourth("127.0.0.1", server.port(), so);  // a slot is free again
  fourth.set("k", "v");
  EXPECT_EQ(toString(second.get("k")), "v");
}

TEST(TcpStoreServerLimits, AStalledRequestIsDroppedWithItsConnection) {
  TcpStoreServer::Options o;
  o.stallTimeout = 200ms;
  TcpStoreServer server(o);
  RawClient slow(server.port());
  slow.hello();
  ASSERT_EQ(slow.read(proto::kServerHelloBytes).size(), proto::kServerHelloBytes);
  const std::uint32_t announced = 512u << 20;  // then 10 bytes, and nothing more
  slow.send(&announced, 4);
  slow.send(std::vector<std::uint8_t>(10, 1));
  EXPECT_TRUE(slow.closedByPeer(3s));
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (server.connections() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(server.connections(), 0u);
  // A request that keeps coming is not a stalled one, however long it takes as a whole.
  StoreOptions clientOptions;
  clientOptions.timeout = 5s;
  TcpStore good("127.0.0.1", server.port(), clientOptions);
  good.set("big", std::string(3u << 20, 'x'));
  EXPECT_EQ(good.get("big").size(), 3u << 20);
}

TEST(TcpStoreServerLifetime, StoppingTheServerFailsWaitersAtOnce) {
  auto server = std::make_unique<TcpStoreServer>();
  StoreOptions so;
  so.timeout = 30s;
  TcpStore store("127.0.0.1", server->port(), so);
  std::thread stopper([&] {
    std::this_thread::sleep_for(200ms);
    server->stop();
  });
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(store.wait({"never"}), IoError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  stopper.join();
}

TEST(TcpStoreServerLifetime, PortIsReleasedWhenTheServerEnds) {
  int port;
  {
    TcpStoreServer server;
    port = server.port();
    EXPECT_TRUE(test::portOpen(port));
  }
  EXPECT_FALSE(test::portOpen(port));
}

TEST(TcpStoreServerBind, CannotBindIsAnIoErrorNamingTheAddress) {
  TcpStoreServer first;
  TcpStoreServer::Options o;
  o.port = first.port();
  try {
    TcpStoreServer second(o);
    FAIL() << "two servers bound one port";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(first.port())), std::string::npos);
  }
}

TEST(TcpStoreServerBind, ServesOverIpv6Loopback) {
  TcpStoreServer::Options o;
  o.host = "::1";
  std::unique_ptr<TcpStoreServer> server;
  try {
    server = std::make_unique<TcpStoreServer>(o);
  } catch (const IoError& e) {
    GTEST_SKIP() << "no IPv6 loopback on this machine: " << e.what();
  }
  EXPECT_EQ(server->url().rfind("tcp://[::1]:", 0), 0u) << server->url();
  auto store = openStore(server->url());
  store->set("v6", "yes");
  EXPECT_EQ(toString(store->get("v6")), "yes");
}

// A listener that is not a collx store.
class FakeServer {
 public:
  explicit FakeServer(std::string greeting) : greeting_(std::move(greeting)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(fd_, 8);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) {
          if (stop_) return;
          continue;
        }
        int client = ::accept(fd_, nullptr, nullptr);
        if (client < 0) continue;
        if (!greeting_.empty()) {
          ssize_t ignored = ::send(client, greeting_.data(), greeting_.size(), MSG_NOSIGNAL);
          (void)ignored;
        }
        clients_.push_back(client);  // held open, silent after the greeting
      }
    });
  }
  ~FakeServer() {
    stop_ = true;
    thread_.join();
    for (int c : clients_) ::close(c);
    ::close(fd_);
  }
  std::uint16_t port() const { return static_cast<std::uint16_t>(port_); }

 private:
  std::string greeting_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<int> clients_;
  std::thread thread_;
};

TEST(TcpStoreClient, SomethingElseAnsweringIsAClearError) {
  FakeServer http("HTTP/1.1 400 Bad Request\r\n\r\n");
  StoreOptions o;
  o.timeout = 10s;
  o.rank = 3;
  auto start = std::chrono::steady_clock::now();
  try {
    TcpStore store("127.0.0.1", http.port(), o);
    FAIL() << "connected to an HTTP server as if it were a store";
  } catch (const IoError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("is not a collx store"), std::string::npos) << what;
    EXPECT_NE(what.find("HTTP"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 3"), std::string::npos) << what;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);  // at once, not at the timeout
}

// A store that announces a reply longer than the request can have: refused from its
// header, before the client allocates or reads it.
TEST(TcpStoreClient, AReplyLongerThanItsRequestCanHaveIsRefusedUnread) {
  std::string greeting(proto::kMagic, 4);
  const std::uint32_t hello[2] = {proto::kVersion, proto::kHelloOk};
  greeting.append(reinterpret_cast<const char*>(hello), sizeof hello);
  const std::uint32_t length = 0xFFFFFFF0u;  // almost 4 GiB for a ping
  greeting.append(reinterpret_cast<const char*>(&length), sizeof length);
  FakeServer liar(greeting);
  StoreOptions o;
  o.timeout = 10s;
  TcpStore store("127.0.0.1", liar.port(), o);
  try {
    store.ping();
    FAIL() << "a 4 GiB reply to a ping was read";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("announced a reply of 4294967280 bytes, more than a ping "
                                         "of 0 keys can have (1048576)"),
              std::string::npos)
        << e.what();
  }
}

// The parsers of the protocol alone (tests/fuzz/ runs them on anything).
TEST(TcpStoreProtocol, RepliesAreCheckedAgainstTheirRequest) {
  auto reply = [](proto::Op op, std::size_t keys, std::vector<std::uint8_t> body) {
    return proto::parseReply(op, keys, body.data(), body.size());
  };
  // Get: one value per key.
  proto::Writer ok;
  ok.u8(0).u32(2).str("a").str("bc");
  std::vector<std::uint8_t> body(ok.finish().begin() + 4, ok.finish().end());
  EXPECT_EQ(reply(proto::Op::kGet, 2, body).values.size(), 2u);
  EXPECT_THROW(reply(proto::Op::kGet, 3, body), proto::ProtocolError);
  // An error of a kind that does not exist, a status that does not exist, a timeout for
  // an operation that does not wait, nothing at all.
  EXPECT_THROW(reply(proto::Op::kSet, 1, {2, 99, 0, 0, 0, 0}), proto::ProtocolError);
  EXPECT_EQ(reply(proto::Op::kSet, 1, {2, 2, 0, 0, 0, 0}).errorKind, ErrorKind::kInvalidArgument);
  EXPECT_THROW(reply(proto::Op::kSet, 1, {7}), proto::ProtocolError);
  EXPECT_THROW(reply(proto::Op::kAdd, 1, {1, 0, 0, 0, 0}), proto::ProtocolError);
  EXPECT_THROW(reply(proto::Op::kPing, 0, {}), proto::ProtocolError);
  // More missing keys than were asked for.
  proto::Writer missing;
  missing.u8(1).keys({"x", "y"});
  std::vector<std::uint8_t> timeout(missing.finish().begin() + 4, missing.finish().end());
  EXPECT_THROW(reply(proto::Op::kWait, 1, timeout), proto::ProtocolError);
  EXPECT_EQ(reply(proto::Op::kWait, 2, timeout).missing.size(), 2u);
  // A server's long error message is cut.
  proto::Writer chatty;
  chatty.u8(2).u8(0).str(std::string(100000, 'e'));
  std::vector<std::uint8_t> error(chatty.finish().begin() + 4, chatty.finish().end());
  EXPECT_LT(reply(proto::Op::kSet, 1, error).message.size(), proto::kMaxErrorMessageBytes + 32);
  // What a client reads at most.
  EXPECT_EQ(proto::maxReplyBytes(proto::Op::kPing, 0, 1 << 30), 1u << 20);
  EXPECT_EQ(proto::maxReplyBytes(proto::Op::kGet, 2, 1000), (1u << 20) + 2 * (4 + 4096));
  EXPECT_EQ(proto::maxReplyBytes(proto::Op::kGet, 1 << 16, 1 << 30), 0xFFFFFFFFu);
  EXPECT_EQ(proto::maxReplyBytes(proto::Op::kCompareSet, 1, 1000), (1u << 20) + 1000);
}

TEST(TcpStoreClient, SilentListenerIsATimeoutNotAHang) {
  FakeServer silent("");
  StoreOptions o;
  o.timeout = 300ms;
  auto start = std::chrono::steady_clock::now();
  try {
    TcpStore store("127.0.0.1", silent.port(), o);
    FAIL() << "a silent listener was taken for a store";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("handshake"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST(TcpStoreClient, NothingListeningTimesOutWithTheLastError) {
  test::ClosedPort closed;
  int port = closed.port();
  StoreOptions o;
  o.timeout = 300ms;
  try {
    TcpStore store("127.0.0.1", static_cast<std::uint16_t>(port), o);
    FAIL() << "connected to a closed port";
  } catch (const TimeoutError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("could not connect"), std::string::npos) << what;
    EXPECT_NE(what.find("refused"), std::string::npos) << what;
  }
}

TEST(TcpStoreClient, RetriesUntilTheServerComesUp) {
  // Nothing listens on it for 300 ms, then the server binds it (test::serverPort says why
  // not a released port-0 port).
  int port = test::serverPort();
  std::unique_ptr<TcpStoreServer> server;
  std::thread late([&] {
    std::this_thread::sleep_for(300ms);
    TcpStoreServer::Options o;
    o.port = static_cast<std::uint16_t>(port);
    server = std::make_unique<TcpStoreServer>(o);
  });
  StoreOptions so;
  so.timeout = 10s;
  TcpStore store("127.0.0.1", static_cast<std::uint16_t>(port), so);
  late.join();
  store.set("late", "but fine");
  EXPECT_EQ(toString(store.get("late")), "but fine");
}

TEST(TcpStoreClient, ReconnectsAfterTheServerRestarts) {
  auto server = std::make_unique<TcpStoreServer>();
  const std::uint16_t port = server->port();
  StoreOptions so;
  so.timeout = 5s;
  TcpStore store("127.0.0.1", port, so);
  store.set("a", "1");
  server.reset();
  EXPECT_THROW(store.get("a"), IoError);  // the connection is gone
  TcpStoreServer::Options o;
  o.port = port;
  server = std::make_unique<TcpStoreServer>(o);
  store.set("b", "2");  // the next call connects again
  EXPECT_EQ(toString(store.get("b")), "2");
}

// ---- the job secret: a challenge and response before anything is served ----

std::shared_ptr<const secure::JobSecret> secretOf(const char* text) {
  return secure::JobSecret::fromText(text, "test");
}

TcpStoreServer::Options withSecret(const char* text) {
  TcpStoreServer::Options o;
  o.secret = secretOf(text);
  return o;
}

StoreOptions clientWith(std::shared_ptr<const secure::JobSecret> secret) {
  StoreOptions o;
  o.timeout = 5s;
  o.secret = std::move(secret);
  return o;
}

std::string connectError(int port, std::shared_ptr<const secure::JobSecret> secret) {
  try {
    TcpStore store("127.0.0.1", static_cast<std::uint16_t>(port), clientWith(std::move(secret)));
    return "";
  } catch (const IoError& e) {
    return e.what();
  }
}

TEST(TcpStoreAuth, TheJobsRanksAreServedAndOthersAreRefusedWithAClearError) {
  TcpStoreServer server(withSecret("the job's own secret"));
  TcpStore good("127.0.0.1", server.port(), clientWith(secretOf("the job's own secret")));
  good.set("k", "v");
  EXPECT_EQ(toString(good.get("k")), "v");
  // Another secret: the server's proof does not hold for it (it never sends its own).
  EXPECT_NE(connectError(server.port(), secretOf("some other secret")).find("another secret"),
            std::string::npos);
  // No secret: the server asks for one.
  EXPECT_NE(connectError(server.port(), nullptr).find("this rank has none"), std::string::npos);
  // A rank with a secret refuses a store that serves without one.
  TcpStoreServer open;
  EXPECT_NE(connectError(open.port(), secretOf("the job's own secret"))
                .find("without asking for the job's secret"),
            std::string::npos);
  EXPECT_EQ(toString(good.get("k")), "v");  // the job goes on
}

TEST(TcpStoreAuth, AStrangerSpeakingTheProtocolLearnsNothing) {
  TcpStoreServer server(withSecret("the job's own secret"));
  TcpStore good("127.0.0.1", server.port(), clientWith(secretOf("the job's own secret")));
  good.set("key", "valuable");
  auto holds = [](const std::vector<std::uint8_t>& bytes) {
    return std::string(bytes.begin(), bytes.end()).find("valuable") != std::string::npos;
  };
  {
    // Says it holds the secret, gets the challenge, answers with garbage.
    RawClient stranger(server.port());
    stranger.hello(proto::kVersion, proto::kHoldsSecret);
    auto challenge = stranger.read(proto::kServerHelloBytes + proto::kChallengeBytes);
    ASSERT_EQ(challenge.size(), proto::kServerHelloBytes + proto::kChallengeBytes);
    std::uint32_t status;
    std::memcpy(&status, challenge.data() + 8, 4);
    EXPECT_EQ(status, proto::kHelloChallenge);
    stranger.send(std::vector<std::uint8_t>(proto::kProofBytes, 0x5a));
    auto result = stranger.read(proto::kAuthResultBytes);
    ASSERT_EQ(result.size(), proto::kAuthResultBytes);
    std::memcpy(&status, result.data(), 4);
    EXPECT_EQ(status, proto::kHelloAuthFailed);
    EXPECT_TRUE(stranger.closedByPeer());
  }
  {
    // Skips the proof: a get request where the proof goes is read as a (wrong) proof.
    RawClient stranger(server.port());
    stranger.hello(proto::kVersion, proto::kHoldsSecret);
    stranger.read(proto::kServerHelloBytes + proto::kChallengeBytes);
    proto::Writer get;
    get.u8(static_cast<std::uint8_t>(proto::Op::kGet)).u64(100).u32(1).str("key");
    std::vector<std::uint8_t> frame = get.finish();
    frame.resize(std::max<std::size_t>(frame.size(), proto::kProofBytes));
    stranger.send(frame);
    EXPECT_FALSE(holds(stranger.read(4096)));
    EXPECT_TRUE(stranger.closedByPeer());
  }
  {
    // Holds no secret: refused after the hello.
    RawClient stranger(server.port());
    stranger.hello();
    auto answer = stranger.read(proto::kServerHelloBytes);
    ASSERT_EQ(answer.size(), proto::kServerHelloBytes);
    std::uint32_t status;
    std::memcpy(&status, answer.data() + 8, 4);
    EXPECT_EQ(status, proto::kHelloAuthRequired);
    EXPECT_TRUE(stranger.closedByPeer());
  }
  EXPECT_EQ(toString(good.get("key")), "valuable");
}

TEST(TcpStoreAuth, AFloodOfClientsThatNeverProveAnythingDoesNotKeepTheRanksOut) {
  TcpStoreServer::Options o = withSecret("the job's own secret");
  o.maxPendingHandshakes = 8;
  o.maxConnections = 32;
  TcpStoreServer server(o);
  std::vector<std::unique_ptr<RawClient>> flood;
  for (int i = 0; i < 40; ++i) {
    flood.push_back(std::make_unique<RawClient>(server.port()));
    if (i % 2 == 0) flood.back()->hello(proto::kVersion, proto::kHoldsSecret);  // then nothing
  }
  std::this_thread::sleep_for(200ms);
  // Without the cap on handshakes, 40 open connections over a limit of 32 would refuse it.
  TcpStore good("127.0.0.1", server.port(), clientWith(secretOf("the job's own secret")));
  good.set("k", "v");
  EXPECT_EQ(toString(good.get("k")), "v");
  int closed = 0;
  for (int i = 0; i < 30; ++i) closed += flood[static_cast<std::size_t>(i)]->closedByPeer(1s);
  EXPECT_EQ(closed, 30);  // the oldest made room
}

TEST(TcpStoreAuth, AClientThatDoesNotFinishTheHandshakeIsClosed) {
  TcpStoreServer::Options o = withSecret("the job's own secret");
  o.handshakeTimeout = 200ms;
  TcpStoreServer server(o);
  RawClient silent(server.port());
  RawClient half(server.port());
  half.hello(proto::kVersion, proto::kHoldsSecret);  // then never proves anything
  EXPECT_TRUE(silent.closedByPeer(3s));
  EXPECT_TRUE(half.closedByPeer(3s));
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (server.connections() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(server.connections(), 0u);
  // A client that finishes in time stays, past the handshake timeout.
  TcpStore good("127.0.0.1", server.port(), clientWith(secretOf("the job's own secret")));
  std::this_thread::sleep_for(400ms);
  good.set("k", "v");
  EXPECT_EQ(toString(good.get("k")), "v");
}

TEST(TcpStoreLimits, OneAddressFloodingItsHandshakesClosesOnlyItsOwnOldest) {
  TcpStoreServer::Options o = withSecret("the job's own secret");
  o.maxPendingPerAddress = 4;
  TcpStoreServer server(o);
  std::vector<std::unique_ptr<RawClient>> flood;
  for (int i = 0; i < 10; ++i) flood.push_back(std::make_unique<RawClient>(server.port()));
  std::this_thread::sleep_for(200ms);
  int closed = 0;
  for (int i = 0; i < 6; ++i) closed += flood[static_cast<std::size_t>(i)]->closedByPeer(2s);
  EXPECT_EQ(closed, 6);  // the oldest six made room for the newest four
  for (int i = 6; i < 10; ++i) {
    EXPECT_FALSE(flood[static_cast<std::size_t>(i)]->closedByPeer(100ms)) << i;
  }
  TcpStore good("127.0.0.1", server.port(), clientWith(secretOf("the job's own secret")));
  good.set("k", "v");
  EXPECT_EQ(toString(good.get("k")), "v");
}

TEST(TcpStoreLimits, AHandshakeClosedToMakeRoomIsToldTheStoreIsBusy) {
  TcpStoreServer::Options o = withSecret("the job's own secret");
  o.maxPendingPerAddress = 1;
  TcpStoreServer server(o);
  auto statusOf = [](const std::vector<std::uint8_t>& bytes, std::size_t at) {
    std::uint32_t status = ~0u;
    if (bytes.size() >= at + 4) std::memcpy(&status, bytes.data() + at, 4);
    return status;
  };
  // Waiting for the server's hello: kHelloBusy in its place.
  RawClient first(server.port());
  std::this_thread::sleep_for(100ms);
  RawClient second(server.port());  // the address's second handshake: the first makes room
  const auto hello = first.read(proto::kServerHelloBytes);
  ASSERT_EQ(hello.size(), proto::kServerHelloBytes);
  EXPECT_EQ(statusOf(hello, 8), proto::kHelloBusy);
  EXPECT_TRUE(first.closedByPeer());
  // Waiting for its proof's result: kHelloBusy in its place.
  second.hello(proto::kVersion, proto::kHoldsSecret);
  const auto challenge = second.read(proto::kServerHelloBytes + proto::kChallengeBytes);
  ASSERT_EQ(challenge.size(), proto::kServerHelloBytes + proto::kChallengeBytes);
  EXPECT_EQ(statusOf(challenge, 8), proto::kHelloChallenge);
  RawClient third(server.port());
  const auto result = second.read(proto::kAuthResultBytes);
  EXPECT_EQ(statusOf(result, 0), proto::kHelloBusy);
  EXPECT_TRUE(second.closedByPeer());
}

TEST(TcpStoreLimits, ClientsToldTheStoreIsBusyConnectAgainUntilServed) {
  // Far more clients in their handshakes at once than the limits take, as when hundreds of
  // ranks start together: every one is served, none refused.
  TcpStoreServer::Options o = withSecret("the job's own secret");
  o.maxPendingPerAddress = 2;
  o.maxPendingHandshakes = 3;
  TcpStoreServer server(o);
  constexpr int kClients = 48;
  std::vector<std::thread> clients;
  std::atomic<int> served{0};
  std::mutex mutex;
  std::vector<std::string> errors;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      try {
        StoreOptions options = clientWith(secretOf("the job's own secret"));
        options.timeout = 60s;
        TcpStore store("127.0.0.1", server.port(), options);
        store.set("client/" + std::to_string(i), "here");
        served.fetch_add(1);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        errors.push_back(e.what());
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(served.load(), kClients) << (errors.empty() ? "" : errors.front());
  TcpStore check("127.0.0.1", server.port(), clientWith(secretOf("the job's own secret")));
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(toString(check.get("client/" + std::to_string(i))), "here");
  }
}

TEST(TcpStoreLimits, AnIdleClientIsClosedAndReconnectsOnItsOwn) {
  TcpStoreServer::Options o = TcpStoreServer::Options::fromConfig(
      Config(Config::Environment{{"COLLX_STORE_IDLE_TIMEOUT", "200ms"}}));
  EXPECT_EQ(o.idleTimeout, 200ms);
  TcpStoreServer server(o);
  TcpStore client("127.0.0.1", server.port());
  client.set("k", "v");
  EXPECT_EQ(server.connections(), 1u);
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (server.connections() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(server.connections(), 0u);
  EXPECT_EQ(toString(client.get("k")), "v");  // a new connection
  // A get that waits is not idle: it is answered when its key comes.
  std::thread later([&] {
    std::this_thread::sleep_for(500ms);
    TcpStore("127.0.0.1", server.port()).set("late", "yes");
  });
  EXPECT_EQ(toString(client.get("late", 5s)), "yes");
  later.join();
}

TEST(TcpStoreLimits, TheLargestValueIsASetting) {
  TcpStoreServer::Options o = TcpStoreServer::Options::fromConfig(
      Config(Config::Environment{{"COLLX_STORE_MAX_VALUE", "2K"}}));
  EXPECT_EQ(o.maxValueBytes, 2048u);
  EXPECT_EQ(TcpStoreServer::Options::fromConfig(Config(Config::Environment{})).maxValueBytes,
            std::size_t{1} << 30);
  EXPECT_THROW(TcpStoreServer::Options::fromConfig(
                   Config(Config::Environment{{"COLLX_STORE_MAX_VALUE", "5G"}})),
               InvalidArgument);
  TcpStoreServer server(o);
  TcpStore client("127.0.0.1", server.port());
  client.set("small", std::string(2048, 's'));
  try {
    client.set("big", std::string(4096, 'b'));
    FAIL() << "a value over COLLX_STORE_MAX_VALUE was stored";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2048"), std::string::npos) << e.what();
  }
  EXPECT_EQ(client.get("small").size(), 2048u);
}

}  // namespace
}  // namespace collx::rendezvous
