// Strangers against a running job, as another user of the machine would be: garbage,
// truncated, oversized and slow input to the store's port and to every rank's pair port, a
// flood of connections to the store, store clients with a wrong secret or none. The job, three
// real processes over tcp with a secret, completes with checked results, every stranger is
// refused, and the ranks log whom they refused. Once plain, once in TLS (COLLX_TLS=1), where
// a store client in TLS with another CA's certificate is refused too.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>
#include <regex>
#include <thread>

#include "collx/collx.h"
#include "collx/secure/job_secret.h"
#include "collx/secure/tls.h"
#include "util/test_util.h"
#include "util/tls_certs.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* kSecret = "the job's secret, 32 bytes or so";

int dial(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

void sendAll(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;  // the other side may close first: that is the point
    done += static_cast<std::size_t>(n);
  }
}

// Reads until the other side closes or `within` passes: what it sent, and whether it closed.
struct Answer {
  std::string bytes;
  bool closed = false;
};
Answer readToEnd(int fd, std::chrono::milliseconds within) {
  Answer a;
  const auto until = Clock::now() + within;
  char buf[4096];
  while (Clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      a.closed = true;
      break;
    }
    a.bytes.append(buf, static_cast<std::size_t>(n));
  }
  return a;
}

std::string garbage(std::size_t n, unsigned seed) {
  std::string out(n, '\0');
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<char>((i * 131 + seed * 7919) >> 3);
  return out;
}

// Every kind of bad input to one port, each on a connection of its own: garbage the size of a
// hello and more, a truncated hello, 64 KiB of 0xff, a slow drip (one byte every 20 ms, on a
// thread of its own), and a connection that says nothing. A rank accepts only while it
// connects: until then the kernel holds them, and they meet the rank all at once.
class Attack {
 public:
  Attack(int port, std::string what) : what_(std::move(what)) {
    auto open = [&](const std::string& bytes, bool done, const char* how) {
      const int fd = dial(port);
      if (fd < 0) return;  // a refused connect is a refusal too
      sendAll(fd, bytes);
      if (done) ::shutdown(fd, SHUT_WR);
      fds_.push_back({fd, how});
    };
    open(garbage(88, 1) + garbage(200, 2), false, "garbage");
    open(garbage(10, 3), true, "a truncated hello");
    open(std::string(64 << 10, '\xff'), false, "64 KiB of 0xff");
    open("", false, "a silent connection");
    const int drip = dial(port);
    if (drip >= 0) {
      fds_.push_back({drip, "a slow drip"});
      dripper_ = std::thread([drip] {
        for (char c : garbage(40, 4)) {
          if (::send(drip, &c, 1, MSG_NOSIGNAL) != 1) break;
          std::this_thread::sleep_for(20ms);
        }
        ::shutdown(drip, SHUT_WR);
      });
    }
  }
  ~Attack() {
    if (dripper_.joinable()) dripper_.join();
    for (auto& [fd, how] : fds_) ::close(fd);
  }
  // What the other side did not close within `within` ("" when it closed every one but the
  // silent connection, which is only closed when `silentToo`).
  std::string unclosed(std::chrono::milliseconds within, bool silentToo) {
    if (dripper_.joinable()) dripper_.join();
    std::string problems;
    for (auto& [fd, how] : fds_) {
      if (!silentToo && how == std::string("a silent connection")) continue;
      if (!readToEnd(fd, within).closed) problems += what_ + ": " + how + " was not closed\n";
    }
    return problems;
  }

 private:
  std::string what_;
  std::vector<std::pair<int, const char*>> fds_;
  std::thread dripper_;
};

class HostileProcesses : public ::testing::TestWithParam<bool> {};

TEST_P(HostileProcesses, StrangersAreRefusedWhileTheJobCompletes) {
  const bool tls = GetParam();
  test::TempDir dir;
  std::optional<test::TlsCerts> certs, otherCa;
  secure::TlsFiles files;
  std::shared_ptr<const secure::TlsContext> context, foreign;
  if (tls) {
    certs.emplace(dir.path() + "/pki");
    otherCa.emplace(dir.path() + "/other", "other-ca");
    files = certs->issue("node");
    context = secure::TlsContext::fromFiles(files);
    const secure::TlsFiles stranger = otherCa->issue("stranger");
    foreign = secure::TlsContext::fromFiles({stranger.cert, stranger.key, files.ca});
  }
  auto secret = secure::JobSecret::fromText(kSecret, "the test's");
  rendezvous::TcpStoreServer::Options serverOptions;
  serverOptions.secret = secret;
  serverOptions.tls = context;
  serverOptions.handshakeTimeout = 2s;
  rendezvous::TcpStoreServer server(serverOptions);
  const int storePort = server.port();

  // A flood of silent connections to the store, held through the job's join.
  std::vector<int> flood;
  for (int i = 0; i < 300; ++i) {
    const int fd = dial(storePort);
    if (fd >= 0) flood.push_back(fd);
  }
  ASSERT_GT(flood.size(), 200u);

  rendezvous::StoreOptions clientOptions;
  clientOptions.secret = secret;
  clientOptions.tls = context;
  clientOptions.timeout = 60s;
  auto client = std::make_shared<rendezvous::TcpStore>("127.0.0.1", storePort, clientOptions);
  rendezvous::PrefixStore job("collx/hostile/0", client);

  std::map<std::string, std::string> env{{"COLLX_WORLD_SIZE", "3"},   {"COLLX_STORE", server.url()},
                                         {"COLLX_JOB_ID", "hostile"}, {"COLLX_JOB_SECRET", kSecret},
                                         {"COLLX_TRANSPORT", "tcp"},  {"COLLX_TIMEOUT", "90s"}};
  if (tls) {
    env.insert({{"COLLX_LOG_LEVEL", "warn,collx.tcp=info"},
                {"COLLX_TLS", "1"},
                {"COLLX_TLS_CERT", files.cert},
                {"COLLX_TLS_KEY", files.key},
                {"COLLX_TLS_CA", files.ca}});
  }
  auto start = [&](int rank) {
    auto e = env;
    e["COLLX_RANK"] = std::to_string(rank);
    e["COLLX_LOCAL_RANK"] = std::to_string(rank);
    return std::make_unique<test::Process>(
        std::vector<std::string>{test::binDir() + "/collx-test-worker", "count", "100000"}, e);
  };
  std::vector<std::unique_ptr<test::Process>> ranks;
  ranks.push_back(start(0));
  ranks.push_back(start(1));

  // Rank 2 is late: its record is stood in by rank 1's until ranks 0 and 1 listen for it.
  const rendezvous::Bytes record1 = job.get("rank/1");
  ASSERT_EQ(job.compareSet("rank/2", {}, record1), record1);
  const std::vector<rendezvous::Bytes> addresses = job.multiGet({"transport/0", "transport/1"});
  job.erase("rank/2");

  // The store's port: strangers with garbage, and collx clients with a wrong secret or none.
  {
    Attack store(storePort, "store");
    EXPECT_EQ(store.unclosed(15s, /*silentToo=*/true), "");  // the handshake timeout: 2 s
  }
  for (const char* wrong : {"a secret that is not the job's", ""}) {
    rendezvous::StoreOptions o;
    o.timeout = 3s;
    o.tls = context;  // (in TLS, a client with the job's certificate but not its secret)
    if (*wrong != '\0') o.secret = secure::JobSecret::fromText(wrong, "the stranger's");
    try {
      rendezvous::TcpStore stranger("127.0.0.1", storePort, o);
      std::string got = rendezvous::toString(stranger.get("collx/hostile/0/rank/0", 500ms));
      ADD_FAILURE() << "a stranger read a key: " << got;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("secret"), std::string::npos) << e.what();
    }
  }

  if (tls) {
    // The job's secret, but a certificate of another CA.
    rendezvous::StoreOptions o;
    o.timeout = 3s;
    o.tls = foreign;
    o.secret = secret;
    try {
      rendezvous::TcpStore stranger("127.0.0.1", storePort, o);
      ADD_FAILURE() << "a client with another CA's certificate was served";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the peer refused the connection"), std::string::npos)
          << e.what();
    }
  }

  // Every rank's pair port.
  std::regex tcp(R"(tcp=127\.0\.0\.1:(\d+))");
  std::vector<std::unique_ptr<Attack>> attacks;
  for (int r = 0; r < 2; ++r) {
    const std::string text = rendezvous::toString(addresses[r]);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(text, m, tcp)) << text;
    attacks.push_back(std::make_unique<Attack>(std::stoi(m[1]), "rank " + std::to_string(r)));
  }

  // The real rank 2 joins, and the job completes with checked results; the ranks closed every
  // stranger's connection as they connected.
  ranks.push_back(start(2));
  for (auto& a : attacks) EXPECT_EQ(a->unclosed(60s, /*silentToo=*/true), "");
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(ranks[r]->wait(120s)) << "rank " << r;
    EXPECT_EQ(ranks[r]->exitCode(), 0) << "rank " << r << ": " << ranks[r]->err();
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(ranks[r]->err().find("a connection from 127.0.0.1:"), std::string::npos)
        << "rank " << r << " logged no refusal:\n"
        << ranks[r]->err();
  }
  if (tls) {
    for (int r = 0; r < 3; ++r) {
      EXPECT_NE(ranks[r]->err().find("TLS on the tcp connections between ranks: TLSv1.3"),
                std::string::npos)
          << "rank " << r << ":\n"
          << ranks[r]->err();
    }
  }
  for (int fd : flood) ::close(fd);
  // The store served the job throughout, and the job erased its keys when it ended.
  EXPECT_FALSE(job.check({"rank/0"}));
  EXPECT_FALSE(job.check({"world_size"}));
}

INSTANTIATE_TEST_SUITE_P(, HostileProcesses, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("tls") : std::string("plain");
                         });

}  // namespace
}  // namespace collx
