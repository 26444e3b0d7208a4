// Recovery with ranks as threads (shared memory, and over tcp in the "tcp:" copy):
// Context::revoke on every rank, over the connections and through the store's record.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "collx/collx.h"
#include "collx/rendezvous/store.h"
#include "util/world.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
using test::World;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class Revoke : public ::testing::TestWithParam<int> {};

// Rank 0 revokes while every other rank waits for it in an allreduce: each of them fails with
// RevokedError naming rank 0 and its reason (those rank 0 told, and those that heard it from
// a rank it told), long before the deadline; every later call fails so too, rank 0's own.
TEST_P(Revoke, EveryPendingAndLaterCallFailsOnEveryRankNamingWhoRevokedAndWhy) {
  const int P = GetParam();
  World world(P);
  std::atomic<int> waiting{0};
  const auto start = std::chrono::steady_clock::now();
  world.runOk([&](int rank, Context& ctx) {
    std::vector<float> v(1000, 1.0f);
    if (rank == 0) {
      // (Not every rank is inside its call yet, perhaps: a later one fails the same way.)
      while (waiting.load() < P - 1 && std::chrono::steady_clock::now() - start < 5s) {
        std::this_thread::yield();
      }
      std::this_thread::sleep_for(20ms);
      ctx.revoke("the test revoked it");
    } else {
      waiting.fetch_add(1);
      try {
        allreduce(ctx, v.data(), v.data(), v.size(), DataType::kFloat32);
        ADD_FAILURE() << "rank " << rank << ": the allreduce completed";
      } catch (const RevokedError& e) {
        EXPECT_EQ(e.peer(), 0) << e.what();
        EXPECT_TRUE(contains(e.detail(),
                             "rank 0 revoked generation 0 of job default: the test "
                             "revoked it"))
            << e.what();
        EXPECT_FALSE(contains(e.detail(), "failed:")) << e.what();
      }
    }
    try {
      barrier(ctx);
      ADD_FAILURE() << "rank " << rank << ": a barrier after the revoke completed";
    } catch (const RevokedError& e) {
      EXPECT_TRUE(contains(e.what(), "the test revoked it")) << e.what();
      EXPECT_EQ(e.peer(), rank == 0 ? -1 : 0) << e.what();
    }
  });
  // The world's timeout is 60 s: the revoke, not the deadline, ended the calls.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
}

// A revoke that reaches a rank through the store alone (as where no connection reaches it):
// its watcher finds the record and fails its pending call, naming the rank in it.
TEST_P(Revoke, ARecordInTheStoreRevokesARankThatNoConnectionTold) {
  const int P = GetParam();
  World world(P);
  std::atomic<bool> started{false};
  std::thread writer([&] {
    while (!started.load()) std::this_thread::yield();
    std::this_thread::sleep_for(50ms);
    // What Context::revoke writes, from a rank that told nobody over a connection.
    world.context(0).store()->set("revoked",
                                  "0\nrank 0 revoked generation 0 of job default: by the store");
  });
  const auto start = std::chrono::steady_clock::now();
  world.runOk([&](int rank, Context& ctx) {
    if (rank == 0) {
      started = true;
      return;  // rank 0 is idle: the others wait for it in the barrier
    }
    try {
      barrier(ctx);
      ADD_FAILURE() << "rank " << rank << ": the barrier completed without rank 0";
    } catch (const RevokedError& e) {
      EXPECT_EQ(e.peer(), 0) << e.what();
      EXPECT_TRUE(contains(e.detail(), "by the store")) << e.what();
    }
  });
  writer.join();
  // The watcher looks every 0.25 to 2 s; the world's deadline is 60 s.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  // Rank 0's watcher reads it too: a call of its own, which no other rank joins, ends with
  // the revoke (not at its 10 s deadline).
  CollectiveOptions within;
  within.timeout = 10s;
  EXPECT_THROW(barrier(world.context(0), within), RevokedError);
}

// A revoke of a sub-context is its parent's (they share their fate), and a second revoke or
// an abort after it changes nothing: the first one is what every rank reports.
TEST_P(Revoke, ASubContextsRevokeIsItsParentsAndTheFirstRevokeWins) {
  const int P = GetParam();
  World world(P);
  world.runOk([&](int rank, Context& ctx) {
    std::vector<int> all(static_cast<std::size_t>(P));
    for (int r = 0; r < P; ++r) all[static_cast<std::size_t>(r)] = P - 1 - r;  // reversed
    auto sub = ctx.split(all, "reversed");
    if (rank == P - 1) {  // the sub-context's rank 0
      sub->revoke("first");
      sub->revoke("second");
      ctx.abort("an abort after it");
    }
    for (Context* c : {sub.get(), &ctx}) {
      try {
        barrier(*c);
        ADD_FAILURE() << "rank " << rank << ": a barrier after the revoke completed";
      } catch (const RevokedError& e) {
        // Named by the mesh's rank, the parent's.
        EXPECT_TRUE(contains(e.detail(), "rank " + std::to_string(P - 1) + " revoked")) << e.what();
        EXPECT_TRUE(contains(e.detail(), ": first")) << e.what();
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, Revoke, ::testing::ValuesIn(test::worldSizes({2, 3, 4, 8})),
                         [](const auto& p) { return "P" + std::to_string(p.param); });

}  // namespace
}  // namespace collx
