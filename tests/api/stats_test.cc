// Context::stats(): exact message and byte counts of known schedules per peer and transport,
// calls per collective and algorithm, the shared-memory algorithm's calls under "shm",
// failed calls, and the time spent waiting for a late rank (over tcp and shared memory).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "collx/collx.h"
#include "util/world.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
using test::over;
using test::World;

const AlgorithmStats* findAlgorithm(const ContextStats& s, const std::string& collective,
                                    const std::string& algorithm) {
  for (const AlgorithmStats& a : s.algorithms) {
    if (a.collective == collective && a.algorithm == algorithm) return &a;
  }
  return nullptr;
}

TEST(Stats, CountsARingAllreduceExactlyOverTcp) {
  World world(3, over("tcp"));
  constexpr std::uint64_t kCount = 3000;  // three segments of 1000 floats, one piece each
  world.runOk([](int rank, Context& ctx) {
    const ContextStats before = ctx.stats();
    EXPECT_EQ(before.calls, 0u) << "connect's own calls are not counted";
    EXPECT_EQ(before.messagesSent, 0u);
    EXPECT_EQ(before.messagesReceived, 0u);
    std::vector<float> a(kCount, 1.0f), b(kCount);
    AllreduceOptions ring;
    ring.algorithm = "ring";
    for (int i = 0; i < 2; ++i) {
      allreduce(ctx, a.data(), b.data(), kCount, DataType::kFloat32, ring);
    }
    std::vector<std::int32_t> v(5, rank);
    CollectiveOptions oneToAll;
    oneToAll.algorithm = "one_to_all";
    broadcast(ctx, v.data(), v.size(), DataType::kInt32, 0, oneToAll);
  });
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const ContextStats s = world.context(rank).stats();
    // Per allreduce: 2 reduce-scatter and 2 allgather steps, each a message of one 4000-byte
    // segment to the right neighbour and one from the left. The broadcast: rank 0 sends 20
    // bytes to each other rank.
    const std::uint64_t bcastSent = rank == 0 ? 2 : 0, bcastReceived = rank == 0 ? 0 : 1;
    EXPECT_EQ(s.messagesSent, 8 + bcastSent);
    EXPECT_EQ(s.bytesSent, 8 * 4000 + bcastSent * 20);
    EXPECT_EQ(s.messagesReceived, 8 + bcastReceived);
    EXPECT_EQ(s.bytesReceived, 8 * 4000 + bcastReceived * 20);
    ASSERT_EQ(s.peers.size(), 2u);
    const int right = (rank + 1) % 3, left = (rank + 2) % 3;
    for (const PeerStats& p : s.peers) {
      EXPECT_EQ(p.transport, "tcp");
      const std::uint64_t bcastTo = rank == 0 ? 1 : 0, bcastFrom = p.rank == 0 ? 1 : 0;
      EXPECT_EQ(p.messagesSent, (p.rank == right ? 4u : 0u) * 2 + bcastTo) << "peer " << p.rank;
      EXPECT_EQ(p.bytesSent, (p.rank == right ? 16000u : 0u) * 2 + bcastTo * 20)
          << "peer " << p.rank;
      EXPECT_EQ(p.messagesReceived, (p.rank == left ? 4u : 0u) * 2 + bcastFrom)
          << "peer " << p.rank;
      EXPECT_EQ(p.bytesReceived, (p.rank == left ? 16000u : 0u) * 2 + bcastFrom * 20)
          << "peer " << p.rank;
    }
    ASSERT_EQ(s.transports.size(), 1u);
    EXPECT_EQ(s.transports[0].transport, "tcp");
    EXPECT_EQ(s.transports[0].messagesSent, s.messagesSent);
    EXPECT_EQ(s.transports[0].bytesReceived, s.bytesReceived);
    EXPECT_EQ(s.transports[0].sharedCalls, 0u);
    EXPECT_EQ(s.calls, 3u);
    EXPECT_EQ(s.failedCalls, 0u);
    EXPECT_EQ(s.collectives.at("allreduce"), 2u);
    EXPECT_EQ(s.collectives.at("broadcast"), 1u);
    const AlgorithmStats* ring = findAlgorithm(s, "allreduce", "ring");
    ASSERT_NE(ring, nullptr);
    EXPECT_EQ(ring->calls, 2u);
    EXPECT_EQ(ring->bytes, 2 * kCount * 4);
    const AlgorithmStats* bcast = findAlgorithm(s, "broadcast", "one_to_all");
    ASSERT_NE(bcast, nullptr);
    EXPECT_EQ(bcast->calls, 1u);
    EXPECT_EQ(bcast->bytes, 20u);
    EXPECT_EQ(s.algorithms.size(), 2u);
    EXPECT_NE(s.describe().find("allreduce ring: 2 calls, 24000 B"), std::string::npos)
        << s.describe();
  }
}

TEST(Stats, CountsSendAndRecvPerPeer) {
  World world(2, over("tcp"));
  world.runOk([](int rank, Context& ctx) {
    std::vector<std::int64_t> v(3, rank);
    if (rank == 0) {
      send(ctx, v.data(), v.size(), DataType::kInt64, 1, 7);
    } else {
      recv(ctx, v.data(), v.size(), DataType::kInt64, 0, 7);
    }
  });
  const ContextStats sender = world.context(0).stats();
  const ContextStats receiver = world.context(1).stats();
  EXPECT_EQ(sender.collectives.at("send"), 1u);
  EXPECT_EQ(receiver.collectives.at("recv"), 1u);
  ASSERT_EQ(sender.peers.size(), 1u);
  EXPECT_EQ(sender.peers[0].messagesSent, 1u);
  EXPECT_EQ(sender.peers[0].bytesSent, 24u);
  EXPECT_EQ(receiver.peers[0].messagesReceived, 1u);
  EXPECT_EQ(receiver.peers[0].bytesReceived, 24u);
  ASSERT_EQ(sender.algorithms.size(), 1u);
  EXPECT_EQ(sender.algorithms[0].algorithm, "");
  EXPECT_EQ(sender.algorithms[0].bytes, 24u);
}

TEST(Stats, CountsSharedMemoryCallsUnderShm) {
  World world(3, over("shm"));
  if (!world.context(0).sharedMemory()) GTEST_SKIP() << "no shared-memory group here";
  world.runOk([](int, Context& ctx) {
    std::vector<float> a(64, 1.0f), b(64);
    AllreduceOptions shm;
    shm.algorithm = "shm";
    for (int i = 0; i < 5; ++i)
      allreduce(ctx, a.data(), b.data(), a.size(), DataType::kFloat32, shm);
  });
  for (int rank = 0; rank < 3; ++rank) {
    const ContextStats s = world.context(rank).stats();
    EXPECT_EQ(s.messagesSent, 0u) << "the shm algorithm moves no messages";
    const TransportStats* shm = nullptr;
    for (const TransportStats& t : s.transports) {
      if (t.transport == "shm") shm = &t;
    }
    ASSERT_NE(shm, nullptr);
    EXPECT_EQ(shm->sharedCalls, 5u);
    EXPECT_EQ(shm->sharedBytes, 5u * 64 * 4);
    EXPECT_EQ(shm->messagesSent, 0u);
    const AlgorithmStats* a = findAlgorithm(s, "allreduce", "shm");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->calls, 5u);
  }
}

// A rank that comes 300 ms late: the others' time waiting counts most of it (the engine's
// sleeping waits over tcp; the group's waits over shared memory), the late rank's little.
void expectWaitingFor(const char* transport, const char* algorithm) {
  World world(2, over(transport));
  if (std::string(algorithm) == "shm" && !world.context(0).sharedMemory()) {
    GTEST_SKIP() << "no shared-memory group here";
  }
  world.runOk([algorithm](int rank, Context& ctx) {
    if (rank == 1) std::this_thread::sleep_for(300ms);
    std::vector<float> a(4, 1.0f), b(4);
    AllreduceOptions options;
    options.algorithm = algorithm;
    allreduce(ctx, a.data(), b.data(), a.size(), DataType::kFloat32, options);
  });
  const ContextStats waiter = world.context(0).stats();
  const ContextStats late = world.context(1).stats();
  EXPECT_GE(waiter.waiting, 200ms) << waiter.describe();
  EXPECT_LT(waiter.waiting, 30s);
  EXPECT_LT(late.waiting, 200ms) << late.describe();
  if (std::string(algorithm) == "shm") {
    EXPECT_EQ(waiter.sharedMemoryWaiting, waiter.waiting);
  } else {
    EXPECT_EQ(waiter.sharedMemoryWaiting, 0ns);
  }
}

TEST(Stats, WaitingOverTcp) { expectWaitingFor("tcp", "ring"); }
TEST(Stats, WaitingInSharedMemoryWaits) { expectWaitingFor("shm", "shm"); }

TEST(Stats, CountsFailedCalls) {
  World world(2, over("tcp"));
  world.runOk([](int rank, Context& ctx) {
    barrier(ctx);
    if (rank == 1) return;  // rank 0's next call waits for it in vain
    CollectiveOptions quick;
    quick.timeout = 200ms;
    EXPECT_THROW(barrier(ctx, quick), TimeoutError);
    EXPECT_THROW(barrier(ctx), TimeoutError) << "refused: the context failed";
  });
  const ContextStats s = world.context(0).stats();
  EXPECT_EQ(s.failedCalls, 2u);
  EXPECT_EQ(s.calls, 3u);
  EXPECT_EQ(s.collectives.at("barrier"), 3u);
  EXPECT_EQ(world.context(1).stats().failedCalls, 0u);
}

}  // namespace
}  // namespace collx
