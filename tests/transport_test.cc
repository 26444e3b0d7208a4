// The transport alone: meshes connected by hand (no store), strangers at the listener,
// several streams per peer, IPv6, and messages of every protocol path.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <thread>

#include "collx/transport/mesh.h"

namespace collx::transport {
namespace {

using namespace std::chrono_literals;

// A request that records its completion.
struct Done final : Request {
  std::atomic<bool> finished{false};
  std::string error;
  void onComplete(const Error* e) override {
    if (e != nullptr) error = e->what();
    finished = true;
  }
};

MeshOptions optionsFor(int rank, int size, int streams = 1, std::string routeHost = "127.0.0.1") {
  MeshOptions o;
  o.rank = rank;
  o.size = size;
  o.jobId = "transport-test";
  o.tcpStreams = streams;
  o.routeHost = std::move(routeHost);
  o.eagerLimit = 4096;
  return o;
}

// Creates `size` meshes, lets `beforeConnect` meddle with their addresses, connects them all.
std::vector<std::unique_ptr<Mesh>> connectAll(
    int size, int streams, std::string routeHost = "127.0.0.1",
    const std::function<void(const std::vector<std::string>&)>& beforeConnect = nullptr) {
  std::vector<std::unique_ptr<Mesh>> meshes;
  std::vector<std::string> addresses;
  for (int r = 0; r < size; ++r) {
    meshes.push_back(std::make_unique<Mesh>(optionsFor(r, size, streams, routeHost)));
    addresses.push_back(meshes.back()->address());
  }
  if (beforeConnect) beforeConnect(addresses);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(size);
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        meshes[r]->connect(addresses, Clock::now() + 20s);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    if (!errors[r].empty())
      throw std::runtime_error("rank " + std::to_string(r) + ": " + errors[r]);
  }
  return meshes;
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
  auto meshes = connectAll(3, 1, "127.0.0.1", [&](const std::vector<std::string>& addresses) {
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

// A gather's root may post its receive after a rank has sent its block and closed its
// context: what arrived before the goodbye is delivered, and only what can no longer come
// fails, naming the peer.
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

}  // namespace
}  // namespace collx::transport
