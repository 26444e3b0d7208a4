// TLS (COLLX_TLS, collx/secure/tls.h): the configuration and its errors; a TlsStream on its
// own (both ways, gathered and large writes, records read ahead that poll() cannot see, the
// handshake's failures); the TCP store in TLS (its ranks served, every other client
// refused); the ranks' tcp connections in TLS (messages of every size, a rank without TLS
// or with another CA's certificate refused by name); collectives over it.
#include "collx/secure/tls.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <thread>

#include "collx/collx.h"
#include "collx/rendezvous/hash_store.h"
#include "collx/rendezvous/tcp_store.h"
#include "collx/secure/job_secret.h"
#include "collx/transport/mesh.h"
#include "util/meshes.h"
#include "util/test_util.h"
#include "util/tls_certs.h"
#include "util/world.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
using secure::TlsContext;
using secure::TlsStream;
using Status = secure::TlsStream::Status;

// One CA and its certificates, and another CA (a stranger's), for the whole suite. The
// stranger trusts nobody's CA but its own; the impostor trusts the job's CA (it would take
// the job's servers) but shows a certificate of the other CA.
// The suite's directory: removed at exit (the Pki itself is never destroyed).
const test::TempDir& pkiDir() {
  static test::TempDir dir;
  return dir;
}

struct Pki {
  const test::TempDir& dir = pkiDir();
  test::TlsCerts ca{dir.path() + "/job"};
  test::TlsCerts other{dir.path() + "/other", "other-ca"};
  secure::TlsFiles rank = ca.issue("rank");
  secure::TlsFiles store = ca.issue("store");
  secure::TlsFiles stranger = other.issue("stranger");
  std::shared_ptr<const TlsContext> job = TlsContext::fromFiles(rank);
  std::shared_ptr<const TlsContext> storeSide = TlsContext::fromFiles(store);
  std::shared_ptr<const TlsContext> foreign = TlsContext::fromFiles(stranger);
  std::shared_ptr<const TlsContext> impostor =
      TlsContext::fromFiles(secure::TlsFiles{stranger.cert, stranger.key, rank.ca});
};

Pki& pki() {
  static Pki* p = new Pki();  // (made once: key generation takes a while under TSan)
  return *p;
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- the configuration -------------------------------------------------------------------

TEST(TlsConfig, OffUnlessAskedAndAskingNamesWhatIsMissing) {
  EXPECT_EQ(TlsContext::fromConfig(Config(Config::Environment{})), nullptr);
  EXPECT_EQ(TlsContext::fromConfig(Config(Config::Environment{{"COLLX_TLS", "0"}})), nullptr);
  const std::string e = errorOf([] {
    TlsContext::fromConfig(Config(Config::Environment{{"COLLX_TLS", "1"}}));
  });
  EXPECT_NE(e.find("not set: COLLX_TLS_CERT COLLX_TLS_KEY COLLX_TLS_CA"), std::string::npos) << e;
  const auto& f = pki().rank;
  auto context = TlsContext::fromConfig(Config(Config::Environment{{"COLLX_TLS", "1"},
                                                                   {"COLLX_TLS_CERT", f.cert},
                                                                   {"COLLX_TLS_KEY", f.key},
                                                                   {"COLLX_TLS_CA", f.ca}}));
  ASSERT_NE(context, nullptr);
  EXPECT_TRUE(context->mutual());
  EXPECT_NE(context->describe().find(f.cert), std::string::npos);
}

TEST(TlsConfig, BadFilesAreRefusedNamingTheVariable) {
  const auto& f = pki().rank;
  test::TempDir dir;
  auto with = [](secure::TlsFiles files) { return errorOf([&] { TlsContext::fromFiles(files); }); };

  secure::TlsFiles missing = f;
  missing.cert = dir.path() + "/nothing.pem";
  std::string e = with(missing);
  EXPECT_NE(e.find("COLLX_TLS_CERT=" + missing.cert + ": No such file"), std::string::npos) << e;

  // A key that others can read.
  const std::string open = dir.path() + "/open.key";
  std::filesystem::copy_file(f.key, open);
  ::chmod(open.c_str(), 0644);
  secure::TlsFiles readable = f;
  readable.key = open;
  e = with(readable);
  EXPECT_NE(e.find("COLLX_TLS_KEY=" + open), std::string::npos) << e;
  EXPECT_NE(e.find("chmod 600 " + open), std::string::npos) << e;

  // A certificate that is not the key's.
  secure::TlsFiles crossed = f;
  crossed.key = pki().store.key;
  e = with(crossed);
  EXPECT_NE(e.find("is not the key of COLLX_TLS_CERT=" + f.cert), std::string::npos) << e;

  // Something that is no certificate.
  const std::string junk = dir.path() + "/junk.pem";
  std::ofstream(junk) << "not a certificate\n";
  secure::TlsFiles noCa = f;
  noCa.ca = junk;
  e = with(noCa);
  EXPECT_NE(e.find("COLLX_TLS_CA=" + junk + ": no PEM certificate"), std::string::npos) << e;
  secure::TlsFiles noCert = f;
  noCert.cert = junk;
  e = with(noCert);
  EXPECT_NE(e.find("COLLX_TLS_CERT=" + junk + ": not a PEM certificate"), std::string::npos) << e;
}

// docs/running.md's lines that make a CA and a certificate (OpenSSL's command line), run as they
// stand, make files that collx takes and that connect two ranks.
std::pair<std::string, std::string> connectTwo(std::shared_ptr<const TlsContext> a,
                                               std::shared_ptr<const TlsContext> b);

TEST(TlsConfig, TheReadmesRecipeMakesCertificatesThatWork) {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "the openssl command is not installed (apt-get install openssl)";
  }
  std::ifstream readme(std::string(COLLX_SOURCE_DIR) + "/docs/running.md");
  ASSERT_TRUE(readme) << "docs/running.md";
  std::string line, script;
  bool seen = false, inBlock = false;
  while (std::getline(readme, line)) {
    if (line.rfind("Making a CA and certificates", 0) == 0) seen = true;
    if (!seen) continue;
    if (!inBlock && line == "```sh") {
      inBlock = true;
      continue;
    }
    if (inBlock && line == "```") break;
    if (inBlock) script += line + "\n";
  }
  ASSERT_NE(script.find("openssl req -x509"), std::string::npos) << script;
  test::TempDir dir;
  std::ofstream(dir.path() + "/recipe.sh") << "set -e\ncd " << dir.path() << "\n" << script;
  ASSERT_EQ(std::system(("sh " + dir.path() + "/recipe.sh >" + dir.path() + "/out 2>&1").c_str()),
            0)
      << script;
  struct stat st {};
  ASSERT_EQ(::stat((dir.path() + "/node.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u);  // (umask 077: collx takes the key as it is)
  auto context = TlsContext::fromFiles(
      {dir.path() + "/node.pem", dir.path() + "/node.key", dir.path() + "/ca.pem"});
  auto [e0, e1] = connectTwo(context, context);
  EXPECT_EQ(e0, "");
  EXPECT_EQ(e1, "");
}

// ---- TlsStream on its own ----------------------------------------------------------------

// A connected pair of loopback TCP sockets.
struct Connected {
  int client = -1, server = -1;
  Connected() {
    int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(listener, 1);
    socklen_t len = sizeof addr;
    ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
    client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) std::abort();
    server = ::accept(listener, nullptr, nullptr);
    ::close(listener);
  }
  ~Connected() {
    ::close(client);
    ::close(server);
  }
};

// Both handshakes, stepped in turn from one thread; each side's final status.
std::pair<Status, Status> handshakeBoth(TlsStream& a, TlsStream& b) {
  Status sa = Status::kWantWrite, sb = Status::kWantWrite;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  auto open = [](Status s) { return s == Status::kWantRead || s == Status::kWantWrite; };
  while ((open(sa) || open(sb)) && std::chrono::steady_clock::now() < deadline) {
    if (open(sa)) sa = a.handshakeStep();
    if (open(sb)) sb = b.handshakeStep();
  }
  return {sa, sb};
}

// Everything `from` sends of `bytes` until `to` has read it all, in one thread.
std::vector<std::uint8_t> pump(TlsStream& from, const std::vector<iovec>& pieces, TlsStream& to,
                               std::size_t total) {
  std::vector<std::uint8_t> got(total);
  std::size_t read = 0;
  std::vector<iovec> left = pieces;
  std::size_t first = 0;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while ((read < total) && std::chrono::steady_clock::now() < deadline) {
    if (first < left.size()) {
      std::size_t taken = from.write(left.data() + first, static_cast<int>(left.size() - first));
      while (taken > 0 && first < left.size()) {
        const std::size_t n = std::min(taken, left[first].iov_len);
        left[first].iov_base = static_cast<std::uint8_t*>(left[first].iov_base) + n;
        left[first].iov_len -= n;
        taken -= n;
        if (left[first].iov_len == 0) ++first;
      }
    }
    if (from.outputPending()) {
      EXPECT_NE(from.flush(), Status::kFailed) << from.error();
    }
    Status status = Status::kOk;
    while (read < total) {
      const std::size_t n = to.read(got.data() + read, total - read, status);
      if (n == 0) break;
      read += n;
    }
    EXPECT_TRUE(status == Status::kOk || status == Status::kWantRead) << to.error();
  }
  EXPECT_EQ(read, total);
  return got;
}

TEST(TlsStream, CarriesGatheredAndLargeWritesBothWays) {
  Connected c;
  TlsStream client(pki().job, c.client, TlsStream::Role::kClient);
  TlsStream server(pki().storeSide, c.server, TlsStream::Role::kServer);
  auto [sc, ss] = handshakeBoth(client, server);
  ASSERT_EQ(sc, Status::kOk) << client.error();
  ASSERT_EQ(ss, Status::kOk) << server.error();
  EXPECT_NE(client.describe().find("TLSv1.3"), std::string::npos) << client.describe();
  std::string why;
  if (!secure::kernelTlsAvailable(&why)) {
    // Where the kernel has no TLS, OpenSSL seals in this process (what docs/running.md says).
    EXPECT_FALSE(client.kernelSend());
    EXPECT_NE(client.describe().find("sealed by OpenSSL in this process"), std::string::npos);
    EXPECT_NE(why.find("CONFIG_TLS"), std::string::npos) << why;
  }
  for (int direction = 0; direction < 2; ++direction) {
    TlsStream& from = direction == 0 ? client : server;
    TlsStream& to = direction == 0 ? server : client;
    // 300 frames of a 40-byte header and a small payload, then 5 MiB in one piece.
    std::vector<std::vector<std::uint8_t>> parts;
    std::vector<iovec> pieces;
    std::vector<std::uint8_t> expected;
    for (int i = 0; i < 301; ++i) {
      const std::size_t size = i == 300 ? (5u << 20) + 3 : (i % 2 == 0 ? 40 : 1 + i * 7);
      parts.emplace_back(size);
      for (std::size_t k = 0; k < size; ++k) {
        parts.back()[k] = static_cast<std::uint8_t>(k * 13 + i + direction);
      }
      expected.insert(expected.end(), parts.back().begin(), parts.back().end());
    }
    for (auto& p : parts) pieces.push_back(iovec{p.data(), p.size()});
    EXPECT_EQ(pump(from, pieces, to, expected.size()), expected) << "direction " << direction;
  }
}

TEST(TlsStream, RecordsReadAheadAreSeenThoughPollIsNot) {
  Connected c;
  TlsStream client(pki().job, c.client, TlsStream::Role::kClient);
  TlsStream server(pki().storeSide, c.server, TlsStream::Role::kServer);
  auto [sc, ss] = handshakeBoth(client, server);
  ASSERT_EQ(sc, Status::kOk) << client.error();
  ASSERT_EQ(ss, Status::kOk) << server.error();
  if (server.kernelReceive()) GTEST_SKIP() << "the kernel opens the records here";
  // Three records, all in the server's socket before it reads.
  std::uint8_t a[100], b[100], d[100];
  std::memset(a, 'a', 100);
  std::memset(b, 'b', 100);
  std::memset(d, 'd', 100);
  for (auto* p : {a, b, d}) {
    ASSERT_EQ(client.write(p, 100), 100u);
    ASSERT_EQ(client.flush(), Status::kOk);
  }
  pollfd p{c.server, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  std::this_thread::sleep_for(50ms);
  std::uint8_t got[100];
  Status status;
  ASSERT_EQ(server.read(got, 100, status), 100u);
  EXPECT_EQ(got[0], 'a');
  // The other two records are in OpenSSL's buffer now, not in the socket.
  p.revents = 0;
  EXPECT_EQ(::poll(&p, 1, 0), 0);
  EXPECT_TRUE(server.readPending());
  ASSERT_EQ(server.read(got, 100, status), 100u);
  EXPECT_EQ(got[99], 'b');
  ASSERT_EQ(server.read(got, 100, status), 100u);
  EXPECT_EQ(got[0], 'd');
  EXPECT_EQ(server.read(got, 100, status), 0u);
  EXPECT_EQ(status, Status::kWantRead);
  EXPECT_FALSE(server.readPending());  // (nothing left to open: the mesh may sleep)
}

// A handshake between a client and a server of these contexts, each side's status and
// error; a client whose handshake ended well reads once more (in TLS 1.3 the server's refusal
// of its certificate comes after the client's end of the handshake).
struct Shake {
  Status client, server;
  std::string clientError, serverError;
};
Shake shake(std::shared_ptr<const TlsContext> clientSide,
            std::shared_ptr<const TlsContext> serverSide) {
  Connected c;
  TlsStream client(std::move(clientSide), c.client, TlsStream::Role::kClient);
  TlsStream server(std::move(serverSide), c.server, TlsStream::Role::kServer);
  auto [sc, ss] = handshakeBoth(client, server);
  Status status = sc;
  std::uint8_t byte;
  for (int i = 0; i < 100 && status == Status::kOk; ++i) {
    if (client.read(&byte, 1, status) == 0 && status == Status::kWantRead) {
      std::this_thread::sleep_for(10ms);
      status = Status::kOk;
    }
  }
  return {status, ss, client.error(), server.error()};
}

TEST(TlsStream, HandshakeFailuresSayWhy) {
  // A stranger as the client: it refuses the server's certificate (another CA's) first,
  // and the server hears of it by the stranger's alert.
  Shake a = shake(pki().foreign, pki().storeSide);
  EXPECT_EQ(a.client, Status::kFailed);
  EXPECT_NE(a.clientError.find("certificate verify failed"), std::string::npos) << a.clientError;
  EXPECT_EQ(a.server, Status::kFailed);
  EXPECT_NE(a.serverError.find("the peer refused the connection"), std::string::npos)
      << a.serverError;
  // An impostor: it takes the server's certificate, the server refuses its own (another
  // CA's), and it learns so from the server's alert.
  Shake b = shake(pki().impostor, pki().storeSide);
  EXPECT_EQ(b.server, Status::kFailed);
  EXPECT_NE(b.serverError.find("certificate verify failed"), std::string::npos) << b.serverError;
  EXPECT_EQ(b.client, Status::kFailed);
  EXPECT_NE(b.clientError.find("the peer refused the connection"), std::string::npos)
      << b.clientError;
  // The server's certificate is another CA's: the client refuses it.
  Shake d = shake(pki().job, pki().foreign);
  EXPECT_EQ(d.client, Status::kFailed);
  EXPECT_NE(d.clientError.find("certificate verify failed (self-signed certificate in "
                               "certificate chain)"),
            std::string::npos)
      << d.clientError;
  EXPECT_NE(d.server, Status::kOk);
  {
    // A peer that does not speak TLS.
    Connected c;
    TlsStream server(pki().storeSide, c.server, TlsStream::Role::kServer);
    const char plain[] = "CLXS this is no TLS record at all, just bytes";
    ASSERT_GT(::send(c.client, plain, sizeof plain, MSG_NOSIGNAL), 0);
    EXPECT_EQ(server.handshake(std::chrono::steady_clock::now() + 5s), Status::kFailed);
    EXPECT_NE(server.error().find("does not speak TLS"), std::string::npos) << server.error();
  }
  {
    // A peer that says nothing: the handshake ends at its deadline.
    Connected c;
    TlsStream server(pki().storeSide, c.server, TlsStream::Role::kServer);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(server.handshake(start + 200ms), Status::kTimeout);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  }
}

// ---- the TCP store -----------------------------------------------------------------------

using rendezvous::StoreOptions;
using rendezvous::TcpStore;
using rendezvous::TcpStoreServer;

std::shared_ptr<const secure::JobSecret> jobSecret() {
  return secure::JobSecret::fromText("the secret of the TLS tests", "test");
}

StoreOptions clientOptions(std::shared_ptr<const TlsContext> tls,
                           std::shared_ptr<const secure::JobSecret> secret = jobSecret()) {
  StoreOptions o;
  o.timeout = 5s;
  o.secret = std::move(secret);
  o.tls = std::move(tls);
  return o;
}

// Connects to `port`, sends `bytes`, and tells whether the other end closed the connection
// within 3 s (whatever it answered first).
bool closedAfterSending(int port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return false;
  }
  ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  bool closed = false;
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (!closed && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buffer[512];
    closed = ::recv(fd, buffer, sizeof buffer, 0) <= 0;
  }
  ::close(fd);
  return closed;
}

TEST(TlsStore, ServesItsRanksAndRefusesEveryOtherClient) {
  TcpStoreServer::Options so;
  so.secret = jobSecret();
  so.tls = pki().storeSide;
  TcpStoreServer server(so);
  TcpStore good("127.0.0.1", server.port(), clientOptions(pki().job));
  good.set("key", "valuable");
  EXPECT_EQ(rendezvous::toString(good.get("key")), "valuable");
  auto connect = [&](std::shared_ptr<const TlsContext> tls) {
    return errorOf([&] { TcpStore("127.0.0.1", server.port(), clientOptions(std::move(tls))); });
  };
  // Without TLS: the server closes it during its TLS handshake; the error says why it may.
  std::string e = connect(nullptr);
  EXPECT_NE(e.find("A store that uses TLS closes a client that does not: COLLX_TLS=1"),
            std::string::npos)
      << e;
  // A client that does not trust the job's CA refuses the store; a certificate of another
  // CA is refused by the store.
  e = connect(pki().foreign);
  EXPECT_NE(e.find("certificate verify failed"), std::string::npos) << e;
  e = connect(pki().impostor);
  EXPECT_NE(e.find("the peer refused the connection"), std::string::npos) << e;
  // A raw stranger: garbage where the TLS handshake goes. The store closes it.
  EXPECT_TRUE(closedAfterSending(server.port(), "CLXS garbage, not a TLS record"));
  // The job goes on.
  EXPECT_EQ(rendezvous::toString(good.get("key")), "valuable");
  good.set("after", "strangers");
  TcpStore again("127.0.0.1", server.port(), clientOptions(pki().job));
  EXPECT_EQ(rendezvous::toString(again.get("after")), "strangers");
}

TEST(TlsStore, AClientInTlsRefusesAStoreWithoutIt) {
  TcpStoreServer::Options so;
  so.secret = jobSecret();
  TcpStoreServer plain(so);
  const std::string e =
      errorOf([&] { TcpStore("127.0.0.1", plain.port(), clientOptions(pki().job)); });
  EXPECT_NE(
      e.find("TLS with the store at tcp://127.0.0.1:" + std::to_string(plain.port()) + " failed"),
      std::string::npos)
      << e;
  EXPECT_NE(e.find("the store must use TLS too"), std::string::npos) << e;
}

TEST(TlsStore, LargeValuesAndAReopenedConnectionGoThroughTls) {
  TcpStoreServer::Options so;
  so.secret = jobSecret();
  so.tls = pki().storeSide;
  TcpStoreServer server(so);
  TcpStore store("127.0.0.1", server.port(), clientOptions(pki().job));
  std::vector<std::uint8_t> big(9u << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::uint8_t>(i * 7 + i / 4099);
  store.set("big", big);
  auto other = store.reopen();
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->get("big"), big);
  // A get that waits, answered while it waits.
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    store.set("late", "here");
  });
  EXPECT_EQ(rendezvous::toString(other->get("late")), "here");
  later.join();
}

// ---- the ranks' tcp connections ----------------------------------------------------------

transport::MeshOptions meshOptions(int rank, int size, std::shared_ptr<const TlsContext> tls,
                                   int streams = 1) {
  transport::MeshOptions o;
  o.rank = rank;
  o.size = size;
  o.jobId = "tls-test";
  o.tcp.streams = streams;
  o.tcp.routeHost = "127.0.0.1";
  o.tcp.eagerLimit = 4096;
  o.transport = "tcp";
  o.secret = jobSecret();
  o.tls = std::move(tls);
  return o;
}

// Every rank sends `bytes` to the next and receives from the previous; checks every byte.
void ring(std::vector<std::unique_ptr<transport::Mesh>>& meshes, std::uint64_t bytes) {
  const int size = static_cast<int>(meshes.size());
  std::vector<std::vector<std::uint8_t>> out(size), in(size);
  std::vector<std::unique_ptr<test::Done>> requests;
  for (int r = 0; r < size; ++r) {
    out[r].resize(bytes);
    for (std::uint64_t i = 0; i < bytes; ++i) out[r][i] = static_cast<std::uint8_t>(i * 29 + r);
    in[r].assign(bytes, 0);
    auto send = std::make_unique<test::Done>();
    send->kind = transport::Request::Kind::kSend;
    send->peer = (r + 1) % size;
    send->data = out[r].data();
    send->length = bytes;
    send->key = transport::MessageKey{3, 1, transport::Space::kPointToPoint};
    auto recv = std::make_unique<test::Done>();
    recv->kind = transport::Request::Kind::kRecv;
    recv->peer = (r + size - 1) % size;
    recv->data = in[r].data();
    recv->length = bytes;
    recv->key = send->key;
    meshes[r]->post(*recv);
    meshes[r]->post(*send);
    requests.push_back(std::move(send));
    requests.push_back(std::move(recv));
  }
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  auto finished = [&] {
    for (auto& q : requests) {
      if (!q->finished) return false;
    }
    return true;
  };
  while (!finished() && std::chrono::steady_clock::now() < deadline) {
    // Each mesh sleeps briefly in poll(): records read ahead must not be left behind.
    for (auto& m : meshes) m->progress(std::chrono::microseconds(100));
  }
  ASSERT_TRUE(finished()) << bytes << " bytes did not arrive";
  for (auto& q : requests) EXPECT_EQ(q->error, "");
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(in[r], out[(r + size - 1) % size]) << "rank " << r << ", " << bytes << " bytes";
  }
}

TEST(TlsTransport, RanksConnectInTlsAndCarryMessagesOfEverySize) {
  for (int streams : {1, 2}) {
    std::vector<transport::MeshOptions> options;
    for (int r = 0; r < 3; ++r) options.push_back(meshOptions(r, 3, pki().job, streams));
    auto meshes = test::connectMeshes(options);
    for (std::uint64_t bytes : {0ull, 1ull, 4096ull, 100000ull, (3ull << 20) + 5}) {
      ring(meshes, bytes);
    }
  }
}

// Connects rank 0 and rank 1 with their own TLS contexts; their errors ("" when connected).
std::pair<std::string, std::string> connectTwo(std::shared_ptr<const TlsContext> a,
                                               std::shared_ptr<const TlsContext> b) {
  transport::Mesh m0(meshOptions(0, 2, std::move(a))), m1(meshOptions(1, 2, std::move(b)));
  const std::vector<std::string> addresses = {m0.address(), m1.address()};
  std::string e0, e1;
  std::thread other(
      [&] { e1 = errorOf([&] { m1.connect(addresses, transport::Clock::now() + 1500ms); }); });
  e0 = errorOf([&] { m0.connect(addresses, transport::Clock::now() + 1500ms); });
  other.join();
  return {e0, e1};
}

TEST(TlsTransport, ARankWithoutTlsOrWithAnotherCasCertificateIsRefusedByName) {
  auto [a0, a1] = connectTwo(pki().job, nullptr);
  EXPECT_NE(a1.find("one of the two ranks uses TLS (COLLX_TLS=1) and the other does not"),
            std::string::npos)
      << a1;
  EXPECT_NE(a0.find("rank 1"), std::string::npos) << a0;
  // Rank 1's certificate is another CA's: rank 0 refuses it; both errors name the peer.
  auto [b0, b1] = connectTwo(pki().job, pki().impostor);
  EXPECT_NE(b0.find("TLS with rank 1 (127.0.0.1:"), std::string::npos) << b0;
  EXPECT_NE(b0.find("certificate verify failed"), std::string::npos) << b0;
  EXPECT_NE(b1.find("TLS with rank 0 (127.0.0.1:"), std::string::npos) << b1;
  EXPECT_NE(b1.find("the peer refused the connection"), std::string::npos) << b1;
  // Rank 1 trusts another CA: it refuses rank 0's certificate.
  auto [d0, d1] = connectTwo(pki().job, pki().foreign);
  EXPECT_NE(d1.find("certificate verify failed"), std::string::npos) << d1;
  EXPECT_NE(d0.find("the peer refused the connection"), std::string::npos) << d0;
  auto [c0, c1] = connectTwo(pki().job, pki().job);
  EXPECT_EQ(c0, "");
  EXPECT_EQ(c1, "");
}

// ---- collectives over TLS ----------------------------------------------------------------

TEST(TlsCollectives, AllreduceAllgatherAndAlltoallOverTlsMatchTheReference) {
  ContextOptions options;
  options.transport = "tcp";
  options.secret = jobSecret();
  options.tls = pki().job;
  test::World world(3, options);
  for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{1} << 20}) {
    world.runOk([&](int rank, Context& ctx) {
      for (const char* algorithm : {"ring", "halving_doubling"}) {
        std::vector<float> data(count);
        for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<float>((i % 97) + rank);
        AllreduceOptions o;
        o.algorithm = algorithm;
        allreduce(ctx, data.data(), data.data(), count, DataType::kFloat32, o);
        for (std::size_t i = 0; i < count; i += 1 + count / 1000) {
          ASSERT_EQ(data[i], static_cast<float>(3 * (i % 97) + 3)) << algorithm << " " << i;
        }
      }
      std::vector<std::int32_t> mine(count, rank + 1), all(3 * count);
      allgather(ctx, mine.data(), all.data(), count, DataType::kInt32);
      for (int r = 0; r < 3; ++r) ASSERT_EQ(all[r * count + count - 1], r + 1);
      std::vector<std::int32_t> send(3 * count), recv(3 * count);
      for (int r = 0; r < 3; ++r) std::fill_n(send.begin() + r * count, count, rank * 10 + r);
      alltoall(ctx, send.data(), recv.data(), count, DataType::kInt32);
      for (int r = 0; r < 3; ++r) ASSERT_EQ(recv[r * count], r * 10 + rank);
    });
  }
}

}  // namespace
}  // namespace collx
