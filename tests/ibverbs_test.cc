// The ibverbs transport alone, on the userspace verbs device (tests/verbs_emu): meshes of
// ranks as threads connected by hand (no store). Every protocol path (eager SENDs, announced
// messages written by RDMA WRITE WITH IMMEDIATE, early messages, slot credit under many small
// messages), the choice of transport, mismatches, failures on both sides and a peer that
// closes, and nothing left behind.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <thread>

#include "collx/base/error.h"
#include "collx/transport/mesh.h"
#include "ibverbs/verbs_api.h"

namespace collx::transport {
namespace {

using namespace std::chrono_literals;

struct Done final : Request {
  std::atomic<bool> finished{false};
  std::string error;
  void onComplete(const Error* e) override {
    if (e != nullptr) error = e->what();
    finished = true;
  }
};

MeshOptions optionsFor(int rank, int size, std::string transport = "ibverbs") {
  MeshOptions o;
  o.rank = rank;
  o.size = size;
  o.jobId = "ibverbs-test";
  o.routeHost = "127.0.0.1";
  o.transport = std::move(transport);
  o.ibverbsLibrary = COLLX_VERBS_EMU_PATH;
  o.ibEagerLimit = 4096;
  return o;
}

using Tweak = std::function<void(MeshOptions&)>;

std::vector<std::unique_ptr<Mesh>> connectAll(int size, const Tweak& tweak = nullptr) {
  std::vector<std::unique_ptr<Mesh>> meshes;
  std::vector<std::string> addresses;
  for (int r = 0; r < size; ++r) {
    MeshOptions o = optionsFor(r, size);
    if (tweak) tweak(o);
    meshes.push_back(std::make_unique<Mesh>(o));
    addresses.push_back(meshes.back()->address());
  }
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
    if (!errors[r].empty()) throw std::runtime_error("rank " + std::to_string(r) + ": " + errors[r]);
  }
  return meshes;
}

bool driveAll(std::vector<std::unique_ptr<Mesh>>& meshes, const std::vector<Done*>& requests,
              std::chrono::milliseconds limit = 20s) {
  auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    bool all = true;
    for (Done* r : requests) all = all && r->finished;
    if (all) return true;
    for (auto& m : meshes) {
      if (!m || m->failure()) continue;  // a failed mesh only rethrows its error
      try {
        m->progress(std::chrono::microseconds(0));
      } catch (const Error&) {
        // the requests in flight carry the error
      }
    }
  }
  return false;
}

std::unique_ptr<Done> request(Request::Kind kind, int peer, void* data, std::uint64_t length,
                              std::uint32_t step = 1) {
  auto r = std::make_unique<Done>();
  r->kind = kind;
  r->peer = peer;
  r->data = data;
  r->length = length;
  r->key = MessageKey{7, step, Space::kPointToPoint};
  return r;
}

// Every rank sends `bytes` to the next and receives from the previous; receives posted
// first or last.
void exchangeRing(std::vector<std::unique_ptr<Mesh>>& meshes, std::uint64_t bytes,
                  bool receivesFirst) {
  const int size = static_cast<int>(meshes.size());
  std::vector<std::vector<std::uint8_t>> out(size), in(size);
  std::vector<std::unique_ptr<Done>> owned;
  std::vector<Done*> all;
  for (int r = 0; r < size; ++r) {
    out[r].resize(bytes);
    for (std::uint64_t i = 0; i < bytes; ++i) out[r][i] = static_cast<std::uint8_t>(i * 31 + r);
    in[r].assign(bytes, 0);
  }
  auto postRecvs = [&] {
    for (int r = 0; r < size; ++r) {
      owned.push_back(request(Request::Kind::kRecv, (r + size - 1) % size, in[r].data(), bytes));
      meshes[r]->post(*owned.back());
      all.push_back(owned.back().get());
    }
  };
  if (receivesFirst) postRecvs();
  for (int r = 0; r < size; ++r) {
    owned.push_back(request(Request::Kind::kSend, (r + 1) % size, out[r].data(), bytes));
    meshes[r]->post(*owned.back());
    all.push_back(owned.back().get());
  }
  if (!receivesFirst) postRecvs();
  ASSERT_TRUE(driveAll(meshes, all)) << bytes << " bytes";
  for (Done* d : all) EXPECT_EQ(d->error, "");
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(in[r], out[(r + size - 1) % size]) << "rank " << r << ", " << bytes << " bytes";
  }
}

TEST(Ibverbs, PairsAreIbverbsAndSay) {
  auto meshes = connectAll(3);
  for (int r = 0; r < 3; ++r) {
    for (int p = 0; p < 3; ++p) {
      if (p == r) continue;
      EXPECT_EQ(meshes[r]->transportNames()[p], "ibverbs");
      EXPECT_NE(meshes[r]->describePeer(p).find("ibverbs emu0:1"), std::string::npos)
          << meshes[r]->describePeer(p);
    }
  }
}

class IbverbsSizes : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(IbverbsSizes, RingExchangesArriveWhole) {
  const auto [size, receivesFirst] = GetParam();
  auto meshes = connectAll(size);
  // 0, eager (up to 4096), announced (one write, several writes of the 1 MiB pieces below).
  for (std::uint64_t bytes : {0ull, 1ull, 4095ull, 4096ull, 4097ull, 65536ull, 1ull << 20,
                              (5ull << 20) + 3}) {
    exchangeRing(meshes, bytes, receivesFirst);
  }
}

INSTANTIATE_TEST_SUITE_P(Ibverbs, IbverbsSizes,
                         ::testing::Combine(::testing::Values(2, 3, 4, 8), ::testing::Bool()));

TEST(Ibverbs, ManySmallMessagesBeforeTheirReceivesUseCreditNotRnr) {
  // 500 eager messages, far more than the 32 slots, all before any receive is posted: the
  // sender waits for slots the receiver hands back, and every message arrives in order.
  auto meshes = connectAll(2);
  constexpr int kMessages = 500;
  std::vector<std::uint32_t> out(kMessages), in(kMessages, 0);
  std::vector<std::unique_ptr<Done>> owned;
  std::vector<Done*> all;
  for (int i = 0; i < kMessages; ++i) {
    out[i] = 1000 + i;
    owned.push_back(request(Request::Kind::kSend, 1, &out[i], 4, 100 + i % 3));
    meshes[0]->post(*owned.back());
    all.push_back(owned.back().get());
  }
  for (int round = 0; round < 200; ++round) {
    for (auto& m : meshes) m->progress(std::chrono::microseconds(0));
  }
  for (int i = 0; i < kMessages; ++i) {
    owned.push_back(request(Request::Kind::kRecv, 0, &in[i], 4, 100 + i % 3));
    meshes[1]->post(*owned.back());
    all.push_back(owned.back().get());
  }
  ASSERT_TRUE(driveAll(meshes, all));
  for (Done* d : all) EXPECT_EQ(d->error, "");
  EXPECT_EQ(in, out);
}

TEST(Ibverbs, BothDirectionsAtOnceWithManyMessagesInFlight) {
  auto meshes = connectAll(2);
  constexpr int kMessages = 200;
  std::vector<std::vector<std::uint8_t>> out(2 * kMessages), in(2 * kMessages);
  std::vector<std::unique_ptr<Done>> owned;
  std::vector<Done*> all;
  for (int i = 0; i < 2 * kMessages; ++i) {
    const std::uint64_t bytes = (i % 4 == 0) ? 20000 + i : 100 + i;  // announced and eager
    out[i].assign(bytes, static_cast<std::uint8_t>(i));
    in[i].assign(bytes, 0);
  }
  for (int i = 0; i < kMessages; ++i) {
    for (int r = 0; r < 2; ++r) {
      const int m = r * kMessages + i;
      owned.push_back(request(Request::Kind::kSend, 1 - r, out[m].data(), out[m].size(), i));
      meshes[r]->post(*owned.back());
      all.push_back(owned.back().get());
      const int from = (1 - r) * kMessages + i;
      owned.push_back(request(Request::Kind::kRecv, 1 - r, in[from].data(), in[from].size(), i));
      meshes[r]->post(*owned.back());
      all.push_back(owned.back().get());
    }
  }
  ASSERT_TRUE(driveAll(meshes, all));
  for (Done* d : all) EXPECT_EQ(d->error, "");
  EXPECT_EQ(in, out);
}

TEST(Ibverbs, ForcedWithoutADeviceIsUnsupportedAndSaysWhy) {
  MeshOptions o = optionsFor(0, 2);
  o.ibverbsLibrary = "/nonexistent/libibverbs.so.1";
  try {
    Mesh mesh(o);
    FAIL() << "a mesh without verbs was made";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/libibverbs.so.1"), std::string::npos)
        << e.what();
  }
}

TEST(Ibverbs, AutoWithoutADeviceFallsBackToTcp) {
  auto meshes = connectAll(2, [](MeshOptions& o) {
    o.transport = "auto";
    o.ibverbsLibrary = "/nonexistent/libibverbs.so.1";
    o.hostId = "host" + std::to_string(o.rank);  // two hosts: no shared memory
  });
  EXPECT_EQ(meshes[0]->transportNames()[1], "tcp");
  exchangeRing(meshes, 100000, true);
}

TEST(Ibverbs, AutoPicksIbverbsBetweenHostsAndSharedMemoryWithin) {
  // Ranks 0, 1 on one host, 2 on another.
  auto meshes = connectAll(3, [](MeshOptions& o) {
    o.transport = "auto";
    o.hostId = o.rank < 2 ? "hostA" : "hostB";
  });
  EXPECT_EQ(meshes[0]->transportNames()[1], "shm");
  EXPECT_EQ(meshes[0]->transportNames()[2], "ibverbs");
  EXPECT_EQ(meshes[2]->transportNames()[1], "ibverbs");
  exchangeRing(meshes, 300000, false);
}

TEST(Ibverbs, AMismatchNamesBothSides) {
  auto meshes = connectAll(2);
  std::vector<std::uint8_t> out(64), in(128);
  auto send = request(Request::Kind::kSend, 1, out.data(), out.size());
  auto recv = request(Request::Kind::kRecv, 0, in.data(), in.size());
  meshes[0]->post(*send);
  meshes[1]->post(*recv);
  std::string error;
  auto deadline = Clock::now() + 10s;
  while (Clock::now() < deadline && !recv->finished) {
    try {
      for (auto& m : meshes) m->progress(std::chrono::microseconds(0));
    } catch (const MismatchError& e) {
      error = e.what();
      break;
    }
  }
  EXPECT_TRUE(recv->finished || !error.empty());
  const std::string seen = error.empty() ? recv->error : error;
  EXPECT_NE(seen.find("64 bytes"), std::string::npos) << seen;
  EXPECT_NE(seen.find("128 bytes"), std::string::npos) << seen;
}

TEST(Ibverbs, APeerThatFailsTellsWhy) {
  auto meshes = connectAll(2);
  std::vector<std::uint8_t> in(100000);
  auto recv = request(Request::Kind::kRecv, 0, in.data(), in.size());
  meshes[1]->post(*recv);
  meshes[0]->fail(IoError(Where{0, "allreduce", -1}, "rank 0 ran out of luck"));
  ASSERT_TRUE(driveAll(meshes, {recv.get()}, 10s));
  EXPECT_NE(recv->error.find("ran out of luck"), std::string::npos) << recv->error;
}

TEST(Ibverbs, APeerThatClosesWithAMessageInFlightIsAnError) {
  auto meshes = connectAll(2);
  std::vector<std::uint8_t> in(100);
  auto recv = request(Request::Kind::kRecv, 0, in.data(), in.size());
  meshes[1]->post(*recv);
  meshes[0].reset();  // GOODBYE, then its queue pair goes
  ASSERT_TRUE(driveAll(meshes, {recv.get()}, 5s));
  EXPECT_NE(recv->error.find("rank 0 closed its context"), std::string::npos) << recv->error;
}

TEST(Ibverbs, AClosedPeerWithNothingInFlightIsNoFailure) {
  auto meshes = connectAll(2);
  exchangeRing(meshes, 1000, true);
  meshes[0].reset();  // GOODBYE, then its queue pair goes
  for (int i = 0; i < 2000; ++i) meshes[1]->progress(std::chrono::microseconds(100));
  EXPECT_EQ(meshes[1]->failure(), nullptr);
  // A later receive from it fails at once, naming it.
  std::vector<std::uint8_t> in(10);
  auto recv = request(Request::Kind::kRecv, 0, in.data(), in.size());
  try {
    meshes[1]->post(*recv);
    for (int i = 0; i < 100 && !recv->finished; ++i) meshes[1]->progress(1ms);
    EXPECT_TRUE(recv->finished);
    EXPECT_NE(recv->error.find("rank 0"), std::string::npos) << recv->error;
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
  }
}

TEST(Ibverbs, AWaitingRankSleepsAndIsWokenByItsPeer) {
  auto meshes = connectAll(2);
  std::uint64_t value = 0, sent = 0xfeedface;
  auto recv = request(Request::Kind::kRecv, 0, &value, sizeof(value));
  meshes[1]->post(*recv);
  std::thread sleeper([&] {
    auto deadline = Clock::now() + 10s;
    while (!recv->finished && Clock::now() < deadline) meshes[1]->progress(200ms);
  });
  std::this_thread::sleep_for(50ms);
  auto send = request(Request::Kind::kSend, 1, &sent, sizeof(sent));
  const auto start = Clock::now();
  meshes[0]->post(*send);
  while (!send->finished) meshes[0]->progress(1ms);
  sleeper.join();
  EXPECT_TRUE(recv->finished);
  EXPECT_EQ(value, sent);
  // Woken by the completion channel, not by the end of its 200 ms wait.
  EXPECT_LT(Clock::now() - start, 150ms);
}

// Every verbs object of every test was destroyed, in order, on every path (the device refuses
// destroys out of order: a PD with MRs or QPs, a CQ with QPs or unacknowledged events, ...).
class NothingLeaked : public ::testing::Environment {
 public:
  void TearDown() override { EXPECT_EQ(ibverbs::destroyFailures(), 0u); }
};
const auto* const kNothingLeaked = ::testing::AddGlobalTestEnvironment(new NothingLeaked);

}  // namespace
}  // namespace collx::transport
