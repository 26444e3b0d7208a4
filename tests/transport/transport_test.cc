// The transport alone: meshes connected by hand (no store). TCP: strangers at the listener,
// several streams per peer, IPv6. Shared memory: every protocol path (eager, single copy,
// ring copy, rings that wrap and fill), early messages beyond the credit, mismatches and
// failures on both sides, sleeping ranks woken by their peers, mixed shm + tcp meshes, the
// two-sided fallback when an arena cannot be opened, and named arenas that leave nothing.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>

#include "collx/secure/job_secret.h"
#include "collx/transport/mesh.h"
#include "collx/transport/shared_group.h"
#include "collx/transport/shm_segments.h"
#include "util/meshes.h"

namespace collx::transport {
namespace {

using namespace std::chrono_literals;

using test::Done;

MeshOptions optionsFor(int rank, int size, int streams = 1, std::string routeHost = "127.0.0.1",
                       std::string transport = "tcp") {
  MeshOptions o;
  o.rank = rank;
  o.size = size;
  o.jobId = "transport-test";
  o.tcp.streams = streams;
  o.tcp.routeHost = std::move(routeHost);
  o.tcp.eagerLimit = 4096;
  o.transport = std::move(transport);
  return o;
}

using Tweak = std::function<void(MeshOptions&)>;

// Creates `size` meshes (options per rank adjusted by `tweak`), lets `beforeConnect` meddle
// with their addresses, connects them all.
std::vector<std::unique_ptr<Mesh>> connectAll(
    int size, int streams, std::string routeHost = "127.0.0.1",
    const std::function<void(std::vector<std::string>&)>& beforeConnect = nullptr,
    const std::string& transport = "tcp", const Tweak& tweak = nullptr) {
  std::vector<MeshOptions> options;
  for (int r = 0; r < size; ++r) {
    options.push_back(optionsFor(r, size, streams, routeHost, transport));
    if (tweak) tweak(options.back());
  }
  return test::connectMeshes(options, beforeConnect);
}

// Drives every mesh from one thread until every request finished (or 20 s).
bool driveAll(std::vector<std::unique_ptr<Mesh>>& meshes, const std::vector<Done*>& requests) {
  auto deadline = Clock::now() + 20s;
  while (Clock::now() < deadline) {
    bool all = true;
    for (Done* r : requests) all = all && r->finished;
    if (all) return true;
    for (auto& m : meshes) m->progress(std::chrono::microseconds(0));
  }
  return false;
}

void exchangeRing(std::vector<std::unique_ptr<Mesh>>& meshes, std::uint64_t bytes) {
  const int size = static_cast<int>(meshes.size());
  std::vector<std::vector<std::uint8_t>> out(size), in(size);
  std::vector<std::unique_ptr<Done>> requests;
  std::vector<Done*> all;
  for (int r = 0; r < size; ++r) {
    const int to = (r + 1) % size, from = (r + size - 1) % size;
    out[r].resize(bytes);
    for (std::uint64_t i = 0; i < bytes; ++i) out[r][i] = static_cast<std::uint8_t>(i * 31 + r);
    in[r].assign(bytes, 0);
    auto send = std::make_unique<Done>();
    send->kind = Request::Kind::kSend;
    send->peer = to;
    send->data = out[r].data();
    send->length = bytes;
    send->key = MessageKey{7, 1, Space::kPointToPoint};
    auto recv = std::make_unique<Done>();
    recv->kind = Request::Kind::kRecv;
    recv->peer = from;
    recv->data = in[r].data();
    recv->length = bytes;
    recv->key = send->key;
    // Receives first on even ranks, sends first on odd ones: both orders must work.
    if (r % 2 == 0) {
      meshes[r]->post(*recv);
      meshes[r]->post(*send);
    } else {
      meshes[r]->post(*send);
      meshes[r]->post(*recv);
    }
    all.push_back(send.get());
    all.push_back(recv.get());
    requests.push_back(std::move(send));
    requests.push_back(std::move(recv));
  }
  ASSERT_TRUE(driveAll(meshes, all)) << bytes << " bytes did not arrive";
  for (Done* r : all) EXPECT_EQ(r->error, "");
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(in[r], out[(r + size - 1) % size]) << "rank " << r << ", " << bytes << " bytes";
  }
}

TEST(Transport, EagerAndReadyPathsOverSeveralStreams) {
  for (int streams : {1, 3}) {
    auto meshes = connectAll(3, streams);
    for (std::uint64_t bytes : {0ull, 1ull, 4096ull, 4097ull, 3ull * 1024 * 1024 + 5}) {
      exchangeRing(meshes, bytes);
    }
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(meshes[r]->transportNames()[r], "self");
      EXPECT_EQ(meshes[r]->transportNames()[(r + 1) % 3], "tcp");
    }
  }
}

TEST(Transport, Ipv6Loopback) {
  std::vector<std::unique_ptr<Mesh>> meshes;
  try {
    meshes = connectAll(2, 2, "::1");
  } catch (const std::exception& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
  }
  EXPECT_NE(meshes[0]->describePeer(1).find("[::1]"), std::string::npos)
      << meshes[0]->describePeer(1);
  exchangeRing(meshes, 100000);
}

int connectRaw(const std::string& address) {
  std::string ip = address.substr(address.find('=') + 1);
  ip = ip.substr(0, ip.find(';'));
  std::size_t colon = ip.rfind(':');
  int port = std::stoi(ip.substr(colon + 1));
  ip = ip.substr(0, colon);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST(Transport, StrangersAtTheListenerAreRefusedAndTheRanksCarryOn) {
  std::vector<int> strangers;
  auto meshes = connectAll(3, 1, "127.0.0.1", [&](std::vector<std::string>& addresses) {
    // Rank 0 accepts from ranks 1 and 2; before them come garbage, a silent connection and
    // a hello of another job.
    std::string tcp = addresses[0].substr(addresses[0].find("tcp="));
    int garbage = connectRaw(tcp);
    const char junk[] = "GET / HTTP/1.0\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxx";
    ASSERT_GT(::send(garbage, junk, sizeof(junk), MSG_NOSIGNAL), 0);
    strangers.push_back(garbage);
    strangers.push_back(connectRaw(tcp));  // says nothing at all
    int other = connectRaw(tcp);
    struct {
      char magic[4] = {'C', 'L', 'X', 'T'};
      std::uint32_t version = 1;
      std::uint64_t job = 12345;  // not this job's hash
      std::int64_t generation = 0;
      std::int32_t from = 2;
      std::int32_t to = 0;
      std::uint32_t stream = 0;
      std::uint32_t streams = 1;
    } hello;
    ASSERT_EQ(::send(other, &hello, sizeof(hello), MSG_NOSIGNAL), 40);
    strangers.push_back(other);
  });
  exchangeRing(meshes, 10000);
  for (int fd : strangers) ::close(fd);
}

// ---- the job's secret on the ranks' connections ----

std::shared_ptr<const secure::JobSecret> secretNamed(const char* text) {
  return text ? secure::JobSecret::fromText(text, "test") : nullptr;
}

// Connects rank 0 (secret a) and rank 1 (secret b), each from its own thread; their errors
// ("" when connected).
std::pair<std::string, std::string> connectTwo(const char* a, const char* b) {
  MeshOptions oa = optionsFor(0, 2), ob = optionsFor(1, 2);
  oa.secret = secretNamed(a);
  ob.secret = secretNamed(b);
  Mesh m0(oa), m1(ob);
  const std::vector<std::string> addresses = {m0.address(), m1.address()};
  std::string e0, e1;
  std::thread other([&] {
    try {
      m1.connect(addresses, Clock::now() + 1500ms);
    } catch (const Error& e) {
      e1 = e.what();
    }
  });
  try {
    m0.connect(addresses, Clock::now() + 1500ms);
  } catch (const Error& e) {
    e0 = e.what();
  }
  other.join();
  return {e0, e1};
}

TEST(TransportSecret, RanksWithTheJobsSecretConnectAndCarryMessages) {
  auto meshes = connectAll(3, 2, "127.0.0.1", nullptr, "tcp",
                           [](MeshOptions& o) { o.secret = secretNamed("the job's own secret"); });
  exchangeRing(meshes, 100000);
}

TEST(TransportSecret, DifferentOrMissingSecretsFailWithAClearError) {
  auto [e0, e1] = connectTwo("the job's own secret", "another secret entirely");
  // Rank 1 dials rank 0, whose proof does not hold for rank 1's secret: rank 1 stops at
  // once, proving nothing; rank 0 never gets its connection.
  EXPECT_NE(e1.find("could not prove that it holds the job's secret"), std::string::npos) << e1;
  EXPECT_NE(e0.find("rank 1"), std::string::npos) << e0;
  auto [f0, f1] = connectTwo("the job's own secret", nullptr);
  EXPECT_NE(f1.find("one of the two ranks holds a job secret and the other does not"),
            std::string::npos)
      << f1;
  auto [g0, g1] = connectTwo(nullptr, nullptr);  // an unauthenticated job still connects
  EXPECT_EQ(g0, "");
  EXPECT_EQ(g1, "");
}

TEST(TransportSecret, AStrangerWithTheRightHelloTakesNoSlot) {
  // A stranger knows the job id (so the hello's job hash) and dials rank 0 first, as rank 1
  // stream 0, then fails the challenge: the real rank 1 still gets the stream.
  std::thread stranger;
  int fd = -1;
  std::uint32_t status = 99, verdict = 99;
  std::atomic<bool> helloSent{false};
  auto meshes = connectAll(
      2, 1, "127.0.0.1",
      [&](std::vector<std::string>& addresses) {
        fd = connectRaw(addresses[0].substr(addresses[0].find("tcp=")));
        stranger = std::thread([&] {
          struct {
            char magic[4] = {'C', 'L', 'X', 'T'};
            std::uint32_t version = 3;
            std::uint64_t job = 0;
            std::int64_t generation = 0;
            std::int32_t from = 1;
            std::int32_t to = 0;
            std::uint32_t stream = 0;
            std::uint32_t streams = 1;
            std::uint64_t eagerLimit = 4096;
            std::uint32_t flags = 1;  // "holds the secret"
            std::uint32_t reserved = 0;
            std::uint8_t nonce[32] = {};
          } hello;
          static_assert(sizeof(hello) == 88);
          hello.job = transport::jobHash("transport-test", 0);
          const bool sent = ::send(fd, &hello, sizeof(hello), MSG_NOSIGNAL) == 88;
          helloSent = true;
          if (!sent) return;
          std::uint8_t ack[80];
          if (::recv(fd, ack, sizeof(ack), MSG_WAITALL) != 80) return;
          std::memcpy(&status, ack + 4, 4);
          std::uint8_t proof[32];
          std::memset(proof, 0x5a, sizeof(proof));
          if (::send(fd, proof, sizeof(proof), MSG_NOSIGNAL) != 32) return;
          if (::recv(fd, &verdict, 4, MSG_WAITALL) != 4) verdict = 98;
        });
        // Its hello is in rank 0's socket before the real rank 1 dials (a sleep was not enough
        // on a loaded machine).
        for (int i = 0; i < 1000 && !helloSent; ++i) std::this_thread::sleep_for(10ms);
      },
      "tcp", [](MeshOptions& o) { o.secret = secretNamed("the job's own secret"); });
  stranger.join();
  EXPECT_EQ(status, 0u);  // challenged: the slot is not given at the hello
  // Refused (kAckAuthFailed, 5), or dropped unjudged (98: no verdict came) once rank 0 had
  // every connection it expects, the real rank 1's among them, before the stranger's proof
  // came (seen in CI with clang-tidy beside the suite). Either way it took no slot.
  EXPECT_TRUE(verdict == 5u || verdict == 98u) << verdict;
  exchangeRing(meshes, 10000);
  ::close(fd);
}

TEST(Transport, AMissingPeerIsATimeoutNamingIt) {
  Mesh a(optionsFor(0, 2)), b(optionsFor(1, 2));
  std::vector<std::string> addresses = {a.address(), b.address()};
  // Rank 1 never connects: rank 0 waits for it until the deadline.
  auto start = Clock::now();
  try {
    a.connect(addresses, Clock::now() + 300ms);
    FAIL() << "connected without its peer";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 3s);
}

// Liveness's check when the ranks connect: a peer on another host (here: over tcp) that
// answers no ping, as behind a firewall that drops UDP, is left unwatched by the others,
// who still watch everyone else; it watches them, since they answer it. The connect waits
// for the answers at most the peer timeout.
TEST(Liveness, APeerThatAnswersNoPingWhenTheRanksConnectIsNotWatched) {
  // A UDP socket nobody reads stands for rank 2's liveness address.
  const int sink = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(sink, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(local);
  ASSERT_EQ(::bind(sink, reinterpret_cast<sockaddr*>(&local), sizeof(local)), 0);
  ASSERT_EQ(::getsockname(sink, reinterpret_cast<sockaddr*>(&local), &length), 0);
  const std::string dead = "live=127.0.0.1:" + std::to_string(ntohs(local.sin_port));
  const auto start = Clock::now();
  auto meshes = connectAll(
      3, 1, "127.0.0.1",
      [&](std::vector<std::string>& addresses) {
        std::string& blob = addresses[2];
        const std::size_t at = blob.find("live=");
        ASSERT_NE(at, std::string::npos) << blob;
        blob = blob.substr(0, at) + dead;
      },
      "tcp", [](MeshOptions& o) { o.peerTimeout = 400ms; });
  EXPECT_LT(Clock::now() - start, 10s);
  for (int r : {0, 1}) {
    EXPECT_FALSE(meshes[r]->watched(2)) << "rank " << r;
    EXPECT_TRUE(meshes[r]->watched(1 - r)) << "rank " << r;
  }
  EXPECT_TRUE(meshes[2]->watched(0));
  EXPECT_TRUE(meshes[2]->watched(1));
  EXPECT_FALSE(meshes[0]->watched(0));  // not itself
  exchangeRing(meshes, 100);
  ::close(sink);
}

TEST(Liveness, OffWatchesNobody) {
  auto meshes =
      connectAll(2, 1, "127.0.0.1", nullptr, "tcp", [](MeshOptions& o) { o.peerTimeout = 0ms; });
  EXPECT_FALSE(meshes[0]->watched(1));
  EXPECT_EQ(meshes[0]->address().find("live="), std::string::npos) << meshes[0]->address();
}

TEST(Transport, SendingToOneselfWorksBeforeTheReceive) {
  auto meshes = connectAll(1, 1);
  std::vector<std::uint8_t> out(100, 9), in(100, 0);
  Done send, recv;
  send.kind = Request::Kind::kSend;
  send.peer = 0;
  send.data = out.data();
  send.length = 100;
  recv.kind = Request::Kind::kRecv;
  recv.peer = 0;
  recv.data = in.data();
  recv.length = 100;
  meshes[0]->post(send);
  EXPECT_TRUE(send.finished);
  meshes[0]->post(recv);
  EXPECT_TRUE(recv.finished);
  EXPECT_EQ(in, out);
}

// ---- shared memory ------------------------------------------------------------------------

std::unique_ptr<Done> request(Request::Kind kind, int peer, void* data, std::uint64_t length,
                              MessageKey key, Fingerprint fp = {}) {
  auto r = std::make_unique<Done>();
  r->kind = kind;
  r->peer = peer;
  r->data = data;
  r->length = length;
  r->key = key;
  r->fingerprint = fp;
  return r;
}

std::vector<std::unique_ptr<Mesh>> connectShm(int size, const Tweak& tweak = nullptr,
                                              const std::string& transport = "shm") {
  return connectAll(size, 1, "127.0.0.1", nullptr, transport, tweak);
}

// The error a mesh's progress() throws within 20 s ("" when none).
std::string errorOf(Mesh& mesh) {
  auto deadline = Clock::now() + 20s;
  while (Clock::now() < deadline) {
    try {
      mesh.progress(std::chrono::microseconds(1000));
    } catch (const Error& e) {
      return e.what();
    }
  }
  return "";
}

TEST(ShmTransport, EagerSingleCopyAndRingCopyPathsWithRingsThatWrap) {
  for (bool cma : {true, false}) {
    for (std::uint64_t ring : {std::uint64_t{0}, std::uint64_t{8192}}) {
      SCOPED_TRACE(std::string(cma ? "single copy" : "ring copy") + ", ring " +
                   std::to_string(ring));
      auto meshes = connectShm(3, [&](MeshOptions& o) {
        o.shm.cma = cma;
        o.shm.ringBytes = ring;
        o.shm.eagerLimit = 16384;
      });
      for (int r = 0; r < 3; ++r) {
        EXPECT_EQ(meshes[r]->transportNames()[(r + 1) % 3], "shm");
        EXPECT_EQ(meshes[r]->describePeer((r + 1) % 3),
                  cma ? "shm same process" : "shm same process, ring copy");
      }
      for (std::uint64_t bytes :
           {0ull, 1ull, 4095ull, 16384ull, 16385ull, 100000ull, 3ull * 1024 * 1024 + 5}) {
        // Small messages a few times (the rings wrap), large ones once.
        for (int repeat = 0; repeat < (bytes < 65536 ? 3 : 1); ++repeat) {
          exchangeRing(meshes, bytes);
        }
      }
    }
  }
}

TEST(ShmTransport, EarlyMessagesBeyondTheCreditArriveInOrderWithTheirKey) {
  // Rank 0 sends 300 messages of one key (eager, large and empty ones mixed) before rank 1
  // posts a receive: eager ones wait in rank 1's memory up to the credit, the rest are
  // announced; rank 1 then receives them in posting order.
  for (std::uint64_t ring : {std::uint64_t{0}, std::uint64_t{8192}}) {
    auto meshes = connectShm(2, [&](MeshOptions& o) { o.shm.ringBytes = ring; });
    const int n = 300;
    auto sizeOf = [](int i) -> std::uint64_t { return i % 3 == 0 ? 100 : i % 3 == 1 ? 20000 : 0; };
    std::vector<std::vector<std::uint8_t>> out(n), in(n);
    std::vector<std::unique_ptr<Done>> sends, recvs;
    std::vector<Done*> all;
    const MessageKey key{42, 0, Space::kPointToPoint};
    for (int i = 0; i < n; ++i) {
      out[i].assign(sizeOf(i), static_cast<std::uint8_t>(i));
      in[i].assign(sizeOf(i), 0xEE);
      sends.push_back(request(Request::Kind::kSend, 1, out[i].data(), sizeOf(i), key));
      meshes[0]->post(*sends.back());
      all.push_back(sends.back().get());
      for (int k = 0; k < 3; ++k) meshes[1]->progress(std::chrono::microseconds(0));
    }
    for (int i = 0; i < n; ++i) {
      recvs.push_back(request(Request::Kind::kRecv, 0, in[i].data(), sizeOf(i), key));
      meshes[1]->post(*recvs.back());
      all.push_back(recvs.back().get());
      meshes[0]->progress(std::chrono::microseconds(0));
    }
    ASSERT_TRUE(driveAll(meshes, all));
    for (Done* r : all) EXPECT_EQ(r->error, "");
    for (int i = 0; i < n; ++i) EXPECT_EQ(in[i], out[i]) << "message " << i;
  }
}

TEST(ShmTransport, AMismatchIsAMismatchErrorOnBothSidesNamingBoth) {
  auto meshes = connectShm(2);
  std::vector<std::uint8_t> a(64, 1), b(64, 0);
  const MessageKey key{7, 3, Space::kCollective};
  auto send = request(Request::Kind::kSend, 1, a.data(), 64, key, Fingerprint{1, 2, 0, -1, 16});
  auto recv = request(Request::Kind::kRecv, 0, b.data(), 64, key, Fingerprint{1, 2, 0, -1, 17});
  meshes[0]->post(*send);
  std::string receiver;
  try {
    meshes[1]->post(*recv);
    receiver = errorOf(*meshes[1]);
  } catch (const Error& e) {
    receiver = e.what();
  }
  EXPECT_NE(receiver.find("rank 1 expected"), std::string::npos) << receiver;
  EXPECT_NE(receiver.find("from rank 0"), std::string::npos) << receiver;
  EXPECT_NE(receiver.find("count 17"), std::string::npos) << receiver;
  EXPECT_NE(receiver.find("count 16"), std::string::npos) << receiver;
  std::string sender = errorOf(*meshes[0]);
  EXPECT_NE(sender.find("rank 1 expected"), std::string::npos) << sender;
  try {
    std::rethrow_exception(meshes[0]->failure());
  } catch (const MismatchError&) {
  } catch (...) {
    ADD_FAILURE() << "the sender's error is not a MismatchError: " << sender;
  }
  EXPECT_EQ(b, std::vector<std::uint8_t>(64, 0));
}

TEST(ShmTransport, AFailedMeshNeverTouchesItsBuffersAgain) {
  for (bool cma : {true, false}) {
    auto meshes = connectShm(2, [&](MeshOptions& o) { o.shm.cma = cma; });
    const std::uint64_t big = 1 << 20;
    std::vector<std::uint8_t> out(big, 7), in(big, 0xAB), small(10, 0xAB), smallOut(10, 1);
    auto recvBig = request(Request::Kind::kRecv, 1, in.data(), big, MessageKey{1, 0});
    auto recvSmall = request(Request::Kind::kRecv, 1, small.data(), 10, MessageKey{1, 1});
    meshes[0]->post(*recvBig);
    meshes[0]->post(*recvSmall);
    meshes[0]->abort("the test aborts rank 0");
    EXPECT_NE(errorOf(*meshes[0]).find("the test aborts rank 0"), std::string::npos);
    EXPECT_NE(recvBig->error.find("the test aborts rank 0"), std::string::npos) << recvBig->error;
    EXPECT_TRUE(recvSmall->finished);
    auto sendBig = request(Request::Kind::kSend, 0, out.data(), big, MessageKey{1, 0});
    auto sendSmall = request(Request::Kind::kSend, 0, smallOut.data(), 10, MessageKey{1, 1});
    std::string peer;
    try {
      meshes[1]->post(*sendSmall);
      meshes[1]->post(*sendBig);
      peer = errorOf(*meshes[1]);
    } catch (const Error& e) {
      peer = e.what();
    }
    EXPECT_NE(peer.find("the test aborts rank 0"), std::string::npos) << peer;
    EXPECT_NE(peer.find("(peer rank 0)"), std::string::npos) << peer;
    EXPECT_TRUE(sendBig->finished);
    EXPECT_EQ(in, std::vector<std::uint8_t>(big, 0xAB));
    EXPECT_EQ(small, std::vector<std::uint8_t>(10, 0xAB));
  }
}

// Two ranks on their own threads ping-pong, each sleeping in progress() between messages:
// a lost wakeup would stall a round trip for the whole wait.
TEST(ShmTransport, SleepingRanksAreWokenByTheirPeers) {
  struct Case {
    bool cma;
    std::uint64_t ring;
    std::uint64_t bytes;
  };
  for (Case c : {Case{true, 0, 8}, Case{true, 0, 400000}, Case{false, 4096, 60000}}) {
    SCOPED_TRACE(std::to_string(c.bytes) + " bytes, ring " + std::to_string(c.ring));
    auto meshes = connectShm(2, [&](MeshOptions& o) {
      o.shm.cma = c.cma;
      o.shm.ringBytes = c.ring;
    });
    const int rounds = 200;
    // A lost wakeup stalls a round trip for the whole wait; scheduling never comes close.
    const auto wait = std::chrono::milliseconds(2000);
    std::atomic<int> slow{0};
    auto player = [&](int rank) {
      std::vector<std::uint8_t> buffer(c.bytes, static_cast<std::uint8_t>(rank));
      for (int i = 0; i < rounds; ++i) {
        const MessageKey key{static_cast<std::uint64_t>(i), 0, Space::kPointToPoint};
        const bool sends = (i % 2) == rank;
        auto r = request(sends ? Request::Kind::kSend : Request::Kind::kRecv, 1 - rank,
                         buffer.data(), c.bytes, key);
        auto start = Clock::now();
        meshes[rank]->post(*r);
        while (!r->finished) meshes[rank]->progress(wait);
        if (Clock::now() - start > wait / 2) ++slow;
        if (!r->error.empty()) ADD_FAILURE() << r->error;
      }
    };
    auto start = Clock::now();
    std::thread t0(player, 0), t1(player, 1);
    t0.join();
    t1.join();
    EXPECT_EQ(slow.load(), 0) << "round trips that waited for their timeout";
    EXPECT_LT(Clock::now() - start, 60s);
  }
}

TEST(ShmTransport, APeerThatClosesWithMessagesInFlightFailsTheOther) {
  auto meshes = connectShm(2);
  std::vector<std::uint8_t> in(100);
  auto recv = request(Request::Kind::kRecv, 1, in.data(), 100, MessageKey{5, 0});
  meshes[0]->post(*recv);
  meshes[1].reset();
  std::string error = errorOf(*meshes[0]);
  EXPECT_NE(error.find("rank 1 closed its context while this rank still had 1 message(s)"),
            std::string::npos)
      << error;
  EXPECT_NE(recv->error, "");
}

TEST(ShmTransport, AClosedPeerWithNothingInFlightIsNoError) {
  auto meshes = connectShm(3);
  exchangeRing(meshes, 1000);
  meshes[2].reset();
  for (int i = 0; i < 50; ++i) {
    meshes[0]->progress(std::chrono::microseconds(100));
    meshes[1]->progress(std::chrono::microseconds(100));
  }
  std::vector<std::uint8_t> out(10, 3), in(10, 0);
  auto send = request(Request::Kind::kSend, 1, out.data(), 10, MessageKey{9, 0});
  auto recv = request(Request::Kind::kRecv, 0, in.data(), 10, MessageKey{9, 0});
  meshes[0]->post(*send);
  meshes[1]->post(*recv);
  std::vector<std::unique_ptr<Mesh>> two;
  two.push_back(std::move(meshes[0]));
  two.push_back(std::move(meshes[1]));
  ASSERT_TRUE(driveAll(two, {send.get(), recv.get()}));
  EXPECT_EQ(in, out);
}

TEST(ShmTransport, RanksOnTwoHostsUseShmWithinAndTcpAcross) {
  auto meshes = connectShm(
      4, [](MeshOptions& o) { o.shm.hostId = o.rank < 2 ? "host-a" : "host-b"; }, "auto");
  for (int r = 0; r < 4; ++r) {
    for (int p = 0; p < 4; ++p) {
      const std::string expected = p == r ? "self" : (p < 2) == (r < 2) ? "shm" : "tcp";
      EXPECT_EQ(meshes[r]->transportNames()[p], expected) << "rank " << r << " peer " << p;
    }
  }
  for (std::uint64_t bytes : {0ull, 10ull, 100000ull, 3ull * 1024 * 1024}) {
    exchangeRing(meshes, bytes);
  }
}

TEST(ShmTransport, AnArenaThatCannotBeOpenedMakesBothSidesUseTcp) {
  // Rank 1's published arena token is wrong: nobody can map it, rank 1 sees their verdicts,
  // and every pair with rank 1 falls back to tcp on both sides.
  auto meshes = connectAll(
      3, 1, "127.0.0.1",
      [](std::vector<std::string>& addresses) {
        std::string& a = addresses[1];
        std::size_t shm = a.find("shm=");
        std::size_t end = a.find(';', shm);
        std::size_t lastDot = a.rfind('.', end);
        a.replace(lastDot + 1, end - lastDot - 1, "1234");
      },
      "auto");
  EXPECT_EQ(meshes[0]->transportNames()[1], "tcp");
  EXPECT_EQ(meshes[1]->transportNames()[0], "tcp");
  EXPECT_EQ(meshes[2]->transportNames()[1], "tcp");
  EXPECT_EQ(meshes[1]->transportNames()[2], "tcp");
  EXPECT_EQ(meshes[0]->transportNames()[2], "shm");
  EXPECT_EQ(meshes[2]->transportNames()[0], "shm");
  exchangeRing(meshes, 50000);
}

TEST(ShmTransport, ForcedShmRefusesAPeerOnAnotherHost) {
  try {
    connectShm(2, [](MeshOptions& o) { o.shm.hostId = "host-" + std::to_string(o.rank); });
    FAIL() << "connected";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("no transport can reach rank"), std::string::npos)
        << e.what();
  }
}

TEST(ShmTransport, AMissingPeerIsATimeoutNamingIt) {
  Mesh a(optionsFor(0, 2, 1, "127.0.0.1", "shm")), b(optionsFor(1, 2, 1, "127.0.0.1", "shm"));
  std::vector<std::string> addresses = {a.address(), b.address()};
  auto start = Clock::now();
  try {
    a.connect(addresses, Clock::now() + 300ms);
    FAIL() << "connected without its peer";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 1 did not answer"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(Clock::now() - start, 3s);
}

std::vector<std::string> collxSegments() {
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(kShmDirectory)) {
    while (dirent* e = ::readdir(dir)) {
      if (std::string(e->d_name).rfind(kShmPrefix, 0) == 0) names.push_back(e->d_name);
    }
    ::closedir(dir);
  }
  return names;
}

std::string segmentOf(pid_t pid, const std::vector<std::string>& names) {
  for (const std::string& n : names) {
    if (n.find("-" + std::to_string(pid) + "-r") != std::string::npos) return n;
  }
  return "";
}

TEST(ShmTransport, NamedArenasAreUnlinkedOnceEveryPeerMappedThem) {
  std::vector<std::unique_ptr<Mesh>> meshes;
  std::vector<std::string> addresses;
  for (int r = 0; r < 2; ++r) {
    MeshOptions o = optionsFor(r, 2, 1, "127.0.0.1", "shm");
    o.shm.posix = true;
    meshes.push_back(std::make_unique<Mesh>(o));
    addresses.push_back(meshes.back()->address());
  }
  EXPECT_NE(segmentOf(::getpid(), collxSegments()), "");
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] { meshes[r]->connect(addresses, Clock::now() + 20s); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(segmentOf(::getpid(), collxSegments()), "");
  exchangeRing(meshes, 100000);
}

TEST(ShmTransport, LeftoversOfDeadProcessesAreRemovedAndOthersKept) {
  // A child creates a named arena and is killed before anyone maps it.
  pid_t child = ::fork();
  if (child == 0) {
    MeshOptions o = optionsFor(0, 2, 1, "127.0.0.1", "shm");
    o.shm.posix = true;
    Mesh mesh(o);
    ::pause();
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  auto deadline = Clock::now() + 10s;
  while (segmentOf(child, collxSegments()).empty() && Clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_NE(segmentOf(child, collxSegments()), "");
  // Arenas of live owners stay (the child's and this process's).
  MeshOptions o = optionsFor(0, 2, 1, "127.0.0.1", "shm");
  o.shm.posix = true;
  Mesh mine(o);
  removeShmLeftovers();
  EXPECT_NE(segmentOf(child, collxSegments()), "");
  EXPECT_NE(segmentOf(::getpid(), collxSegments()), "");
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  removeShmLeftovers();  // (or another test's collx-run did: either way it is gone)
  EXPECT_EQ(segmentOf(child, collxSegments()), "");
  EXPECT_NE(segmentOf(::getpid(), collxSegments()), "");
}

// A gather's root may post its receive after a rank has sent its block and closed its
// context: what arrived before the goodbye is delivered, and only what can no longer come
// fails, naming the peer.
// Mesh::reform: rank 2 is lost; ranks 0 and 1 go on over the connection they have, in
// generation 1. Messages of generation 0 were on their way when they failed (eager ones, an
// announced one, pieces of a pushed one cut short), with the keys the new ones use: none of
// them is ever delivered, the new ones arrive whole, and nobody posts to or reads from the
// lost rank's pair again.
class Reform : public ::testing::TestWithParam<std::tuple<std::string, int, bool>> {};

// A request kept in `into` until the test ends.
Done& kept(std::vector<std::unique_ptr<Done>>& into, Request::Kind kind, int peer, void* data,
           std::uint64_t length, const MessageKey& key) {
  into.push_back(std::make_unique<Done>());
  Done& d = *into.back();
  d.kind = kind;
  d.peer = peer;
  d.data = data;
  d.length = length;
  d.key = key;
  return d;
}

TEST_P(Reform, TheSurvivorsGoOnAndNothingOfTheOldGenerationIsDelivered) {
  const auto [transport, streams, cma] = GetParam();
  auto meshes = connectAll(3, streams, "127.0.0.1", nullptr, transport, [&](MeshOptions& o) {
    o.shm.cma = cma;
    o.shm.eagerLimit = 4096;
    o.tcp.eagerLimit = 4096;
  });
  const MessageKey eagerKey{3, 1, Space::kPointToPoint}, largeKey{4, 1, Space::kPointToPoint};
  constexpr std::uint64_t kLarge = 4 << 20;
  // Generation 0: rank 0 sends to rank 1 what rank 1 never receives (eager, announced), and a
  // large message that rank 1 receives in part when everything fails.
  std::vector<std::uint8_t> oldSmall(1000, 0xAA), oldLarge(kLarge, 0xBB), oldPushed(kLarge, 0xCC);
  std::vector<std::uint8_t> partial(kLarge, 0);
  std::vector<std::unique_ptr<Done>> old;
  auto post = [&](Mesh& mesh, Request::Kind kind, int peer, void* data, std::uint64_t length,
                  const MessageKey& key) { mesh.post(kept(old, kind, peer, data, length, key)); };
  const MessageKey pushedKey{5, 1, Space::kPointToPoint};
  post(*meshes[0], Request::Kind::kSend, 1, oldPushed.data(), oldPushed.size(), pushedKey);
  post(*meshes[1], Request::Kind::kRecv, 0, partial.data(), partial.size(), pushedKey);
  for (int round = 0; round < 3; ++round) {
    meshes[0]->progress(std::chrono::microseconds(0));
    meshes[1]->progress(std::chrono::microseconds(0));
  }
  // ... and these rank 1 has not read when everything fails: they wait in its socket or ring.
  post(*meshes[0], Request::Kind::kSend, 1, oldSmall.data(), oldSmall.size(), eagerKey);
  post(*meshes[0], Request::Kind::kSend, 1, oldLarge.data(), oldLarge.size(), largeKey);
  for (int round = 0; round < 3; ++round) meshes[0]->progress(std::chrono::microseconds(0));
  // Rank 2 is lost: the survivors fail (and tell each other), then go on without it.
  const IoError lost(Where{0, "test", 2}, "rank 2 is lost");
  meshes[0]->fail(lost);
  meshes[1]->fail(lost);
  meshes[2].reset();
  for (const auto& d : old) EXPECT_TRUE(d->finished);
  const std::vector<bool> keep{true, true, false};
  meshes[0]->reform(1, keep);
  meshes[1]->reform(1, keep);
  EXPECT_EQ(meshes[0]->generation(), 1);
  EXPECT_EQ(meshes[0]->failure(), nullptr);
  // Generation 1: the same keys, other bytes, both ways; rank 1's receives posted after
  // whatever of generation 0 it may read first.
  for (int round = 0; round < 2; ++round) {
    std::vector<std::uint8_t> small(1000), large(kLarge), back(kLarge);
    for (std::size_t i = 0; i < small.size(); ++i) small[i] = static_cast<std::uint8_t>(i + round);
    for (std::size_t i = 0; i < large.size(); ++i)
      large[i] = static_cast<std::uint8_t>(i * 7 + round);
    std::vector<std::uint8_t> gotSmall(small.size()), gotLarge(kLarge), gotBack(kLarge);
    std::vector<std::unique_ptr<Done>> fresh;
    auto make = [&](Request::Kind kind, int peer, void* data, std::uint64_t length,
                    const MessageKey& key) { return &kept(fresh, kind, peer, data, length, key); };
    for (int i = 0; i < 50; ++i) meshes[1]->progress(std::chrono::microseconds(0));
    meshes[1]->post(*make(Request::Kind::kRecv, 0, gotSmall.data(), gotSmall.size(), eagerKey));
    meshes[1]->post(*make(Request::Kind::kRecv, 0, gotLarge.data(), gotLarge.size(), largeKey));
    meshes[0]->post(*make(Request::Kind::kSend, 1, small.data(), small.size(), eagerKey));
    meshes[0]->post(*make(Request::Kind::kSend, 1, large.data(), large.size(), largeKey));
    meshes[1]->post(*make(Request::Kind::kSend, 0, large.data(), large.size(), pushedKey));
    meshes[0]->post(*make(Request::Kind::kRecv, 1, gotBack.data(), gotBack.size(), pushedKey));
    std::vector<Done*> all;
    for (auto& d : fresh) all.push_back(d.get());
    std::vector<std::unique_ptr<Mesh>> two;
    two.push_back(std::move(meshes[0]));
    two.push_back(std::move(meshes[1]));
    const bool done = driveAll(two, all);
    meshes[0] = std::move(two[0]);
    meshes[1] = std::move(two[1]);
    ASSERT_TRUE(done) << "generation 1's messages did not arrive (round " << round << ")";
    for (Done* d : all) EXPECT_EQ(d->error, "");
    EXPECT_EQ(gotSmall, small) << "round " << round;
    EXPECT_EQ(gotLarge, large) << "round " << round;
    EXPECT_EQ(gotBack, large) << "round " << round;
  }
  // Frames of generation 0 were read and dropped (the eager message and the announcement at
  // least), none delivered.
  EXPECT_GE(meshes[1]->staleFrames(), 2u);
  // The failed rank's pair is not used again.
  Done toLost;
  toLost.kind = Request::Kind::kSend;
  toLost.peer = 2;
  std::uint8_t byte = 1;
  toLost.data = &byte;
  toLost.length = 1;
  EXPECT_THROW(meshes[0]->post(toLost), Error);
}

INSTANTIATE_TEST_SUITE_P(Media, Reform,
                         ::testing::Values(std::make_tuple("tcp", 1, true),
                                           std::make_tuple("tcp", 2, true),
                                           std::make_tuple("shm", 1, true),
                                           std::make_tuple("shm", 1, false)),
                         [](const auto& p) {
                           return std::get<0>(p.param) + "_" +
                                  std::to_string(std::get<1>(p.param)) +
                                  (std::get<2>(p.param) ? "" : "_ringcopy");
                         });

TEST(Transport, WhatAPeerSentBeforeLeavingIsStillDelivered) {
  auto meshes = connectAll(2, 1);
  std::vector<std::uint8_t> out(100), in(100, 0), never(8, 0);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::uint8_t>(i * 7 + 1);
  Done send;
  send.kind = Request::Kind::kSend;
  send.peer = 0;
  send.data = out.data();
  send.length = out.size();
  send.key = MessageKey{3, 0, Space::kCollective};
  meshes[1]->post(send);
  ASSERT_TRUE(driveAll(meshes, {&send}));
  meshes[1].reset();  // rank 1 leaves: its goodbye follows the message
  auto until = Clock::now() + 300ms;
  while (Clock::now() < until) meshes[0]->progress(std::chrono::microseconds(1000));
  Done recv;
  recv.kind = Request::Kind::kRecv;
  recv.peer = 1;
  recv.data = in.data();
  recv.length = in.size();
  recv.key = send.key;
  meshes[0]->post(recv);
  EXPECT_TRUE(recv.finished);
  EXPECT_EQ(recv.error, "");
  EXPECT_EQ(in, out);
  Done late;
  late.kind = Request::Kind::kRecv;
  late.peer = 1;
  late.data = never.data();
  late.length = never.size();
  late.key = MessageKey{4, 0, Space::kCollective};
  try {
    meshes[0]->post(late);
    auto deadline = Clock::now() + 5s;
    while (!late.finished && Clock::now() < deadline) {
      meshes[0]->progress(std::chrono::microseconds(1000));
    }
    EXPECT_TRUE(late.finished);
    EXPECT_NE(late.error.find("rank 1"), std::string::npos) << late.error;
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("closed its context"), std::string::npos) << e.what();
  }
}

// ---- the direct-read choice (COLLX_SHM_DIRECT=auto) -----------------------------------------

// A SharedGroup with nothing behind it, for its bookkeeping alone.
class BareGroup final : public SharedGroup {
 public:
  BareGroup() : SharedGroup({0, 1}, 0, 64, WaitPolicy{}) {}
  void publish() override {}
  std::uint8_t* payload(int, std::uint64_t) const override { return nullptr; }
  void announce(std::uint64_t, const Fingerprint&) noexcept override {}
  void readFrom(int, std::uint64_t, void*, std::uint64_t, const Waiting&) override {}
  bool expect(int, std::uint64_t) override { return false; }
  void endExpect() noexcept override {}

 protected:
  std::uint32_t epochOf(int) const override { return 0; }
  UseHeader* headerOf(int, std::uint64_t) const override { return nullptr; }
  void sleep(int, std::uint32_t, std::chrono::steady_clock::time_point) override {}
  void check(int, const CallNamer&, bool) override {}
  [[noreturn]] void fail(Failure, int, const std::string& what, const CallNamer&) override {
    throw std::runtime_error(what);
  }
  bool announced(int, std::uint64_t&, Fingerprint&, std::int64_t&) const override { return false; }
  std::string describe(std::uint64_t, const Fingerprint&) const override { return ""; }
};

// auto: the first 6 calls alternate, the group buffers first; then the way whose last 3 calls
// of that kind and size class took less (their median: a slow first call or one slow call
// does not decide, two do), trying the other one call in 16; never and always ask nothing.
TEST(DirectReadChoice, FollowsTheMedianOfTheLastCallsAndTriesTheOtherWay) {
  constexpr std::uint64_t kBytes = 1 << 20;
  const auto call = DirectCall::kAllreduce;
  BareGroup g;
  EXPECT_FALSE(g.chooseDirect(call, kBytes)) << "never is the default";
  g.setDirectReads(DirectReads::kAlways);
  EXPECT_TRUE(g.chooseDirect(call, kBytes));
  g.setDirectReads(DirectReads::kAuto);
  // `calls` choices, each followed by its call's time; returns how many read directly.
  auto run = [&](int calls, std::chrono::nanoseconds arena, std::chrono::nanoseconds direct) {
    int directs = 0;
    for (int i = 0; i < calls; ++i) {
      const bool d = g.chooseDirect(call, kBytes);
      directs += d ? 1 : 0;
      g.recordDirect(call, kBytes, d, d ? direct : arena);
    }
    return directs;
  };
  // The first call through the group buffers touches fresh pages: 50 ms, then 1 ms.
  for (int i = 0; i < 6; ++i) {
    const bool d = g.chooseDirect(call, kBytes);
    EXPECT_EQ(d, i % 2 == 1) << "call " << i;
    g.recordDirect(call, kBytes, d, d ? 2ms : i == 0 ? 50ms : 1ms);
  }
  EXPECT_EQ(run(32, 1ms, 2ms), 2) << "the faster way, and the other one call in 16";
  // Another kind or size class has its own record.
  EXPECT_FALSE(g.chooseDirect(DirectCall::kBroadcast, kBytes));
  EXPECT_FALSE(g.chooseDirect(DirectCall::kBroadcastSplit, kBytes));
  EXPECT_FALSE(g.chooseDirect(call, kBytes * 4));
  // One slow call through the buffers does not flip the choice; a second one does.
  g.recordDirect(call, kBytes, false, 10ms);
  EXPECT_LE(run(14, 1ms, 2ms), 1) << "one slow call flipped the choice";
  g.recordDirect(call, kBytes, false, 10ms);
  g.recordDirect(call, kBytes, false, 10ms);
  EXPECT_GE(run(15, 10ms, 2ms), 14) << "the buffers are slow now: direct reads";
}

}  // namespace
}  // namespace collx::transport
