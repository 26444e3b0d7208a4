// Recovery with ranks as threads (shared memory, and over tcp in the "tcp:" copy):
// Context::revoke on every rank, over the connections and through the store's record;
// Context::agree on a healthy context, with a rank that closed, a rank that never comes, a
// malformed answer in the store.
#include "recovery.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "collx/collx.h"
#include "collx/rendezvous/hash_store.h"
#include "collx/rendezvous/store.h"
#include "util/world.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
using test::World;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The cause each kind of evidence names (the texts as the transports and the agreement
// write them), and a silent rank: stopped where its process is on this host and exists,
// unreachable from another host.
TEST(FailureCauses, EachEvidenceNamesItsCause) {
  struct Case {
    std::string why;
    FailureCause here, elsewhere;
  };
  const Case cases[] = {
      {"the connection to rank 2 (tcp 10.0.0.2:4000) was closed: rank 2 died or was killed",
       FailureCause::kKilled, FailureCause::kKilled},
      {"rank 2 (tcp 10.0.0.2:4000) closed its connection: it died, was killed or left",
       FailureCause::kKilled, FailureCause::kKilled},
      {"rank 2 (pid 77) exited: it died or was killed", FailureCause::kKilled,
       FailureCause::kKilled},
      {"rank 2 closed its context", FailureCause::kKilled, FailureCause::kKilled},
      {"rank 2 (tcp 10.0.0.2:4000) has answered nothing for 5.0 s while this rank waited on "
       "it (COLLX_PEER_TIMEOUT=5000ms): it is stopped, its host is down, or the network "
       "between them is cut",
       FailureCause::kStopped, FailureCause::kUnreachable},
      {"it did not come within 300 ms", FailureCause::kExcluded, FailureCause::kExcluded},
      {"an earlier agreement found it failed", FailureCause::kExcluded, FailureCause::kExcluded},
      {"a frame without the frame magic (the stream is corrupt)", FailureCause::kUnknown,
       FailureCause::kUnknown},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(detail::causeOf(c.why, true), c.here) << c.why;
    EXPECT_EQ(detail::causeOf(c.why, false), c.elsewhere) << c.why;
  }
  EXPECT_STREQ(failureCauseName(FailureCause::kUnreachable), "unreachable");
  EXPECT_STREQ(failureCauseName(FailureCause::kUnknown), "unknown");
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
  // Rank 0's watcher reads it too: a receive of its own, which no rank sends (the others'
  // barrier messages may have come already: a barrier could complete), ends with the
  // revoke, not at its 10 s deadline.
  CollectiveOptions within;
  within.timeout = 10s;
  std::int32_t value = 0;
  EXPECT_THROW(recv(world.context(0), &value, 1, DataType::kInt32, 1, 99, within), RevokedError);
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

class Agree : public ::testing::TestWithParam<int> {};

// Every rank clears its own bit: the answer has all of them cleared, on every rank, round
// after round, and nobody failed.
TEST_P(Agree, AHealthyContextAgreesOnTheAndOfEveryRanksFlags) {
  const int P = GetParam();
  World world(P);
  std::vector<std::vector<Agreement>> got(static_cast<std::size_t>(P));
  world.runOk([&](int rank, Context& ctx) {
    for (int round = 0; round < 3; ++round) {
      const std::uint64_t mine = ~(std::uint64_t{1} << ((rank + round) % 64));
      got[static_cast<std::size_t>(rank)].push_back(ctx.agree(mine));
    }
    barrier(ctx);  // the context is still healthy
  });
  for (int round = 0; round < 3; ++round) {
    std::uint64_t expected = ~std::uint64_t{0};
    for (int r = 0; r < P; ++r) expected &= ~(std::uint64_t{1} << ((r + round) % 64));
    for (int r = 0; r < P; ++r) {
      const Agreement& a = got[static_cast<std::size_t>(r)][static_cast<std::size_t>(round)];
      EXPECT_EQ(a.flags, expected) << "rank " << r << ", round " << round;
      EXPECT_TRUE(a.failed.empty()) << "rank " << r << ", round " << round;
    }
  }
}

// A rank that closed its context is failed at once (its connection says so; no deadline, no
// peer timeout), and its flags are not in the answer.
TEST_P(Agree, ARankThatClosedIsFailedAndItsFlagsLeftOut) {
  const int P = GetParam();
  World world(P);
  const int gone = P - 1;
  world.close(gone);
  const auto start = std::chrono::steady_clock::now();
  std::vector<Agreement> got(static_cast<std::size_t>(P));
  world.runOk([&](int rank, Context& ctx) {
    if (rank == gone) return;
    got[static_cast<std::size_t>(rank)] = ctx.agree(~(std::uint64_t{1} << rank), 30s);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  std::uint64_t expected = ~std::uint64_t{0};
  for (int r = 0; r < gone; ++r) expected &= ~(std::uint64_t{1} << r);
  for (int r = 0; r < gone; ++r) {
    EXPECT_EQ(got[static_cast<std::size_t>(r)].flags, expected) << "rank " << r;
    EXPECT_EQ(got[static_cast<std::size_t>(r)].failed, std::vector<int>{gone}) << "rank " << r;
    // Why, as each survivor saw it: its connection or segment closed.
    const auto& causes = got[static_cast<std::size_t>(r)].causes;
    ASSERT_EQ(causes.size(), 1u) << "rank " << r;
    EXPECT_EQ(causes[0].rank, gone);
    EXPECT_EQ(causes[0].cause, FailureCause::kKilled) << "rank " << r << ": " << causes[0].why;
    EXPECT_STREQ(failureCauseName(causes[0].cause), "killed");
  }
}

// A rank that is alive but does not come is failed at the others' deadline; when it comes
// late, the answer is there and names it: ExcludedError.
TEST_P(Agree, ARankThatDoesNotComeByTheDeadlineIsExcludedAndToldSoWhenItComes) {
  const int P = GetParam();
  World world(P);
  const int late = 0;
  std::vector<Agreement> got(static_cast<std::size_t>(P));
  world.runOk([&](int rank, Context& ctx) {
    if (rank == late) return;
    got[static_cast<std::size_t>(rank)] = ctx.agree(~std::uint64_t{0}, 300ms);
  });
  for (int r = 1; r < P; ++r) {
    EXPECT_EQ(got[static_cast<std::size_t>(r)].failed, std::vector<int>{late}) << "rank " << r;
    const auto& causes = got[static_cast<std::size_t>(r)].causes;
    ASSERT_EQ(causes.size(), 1u) << "rank " << r;
    EXPECT_EQ(causes[0].cause, FailureCause::kExcluded) << "rank " << r << ": " << causes[0].why;
    EXPECT_TRUE(contains(causes[0].why, "did not come within 300 ms") ||
                contains(causes[0].why, "had not come in time"))
        << causes[0].why;
  }
  try {
    world.context(late).agree(~std::uint64_t{0}, 10s);
    ADD_FAILURE() << "the late rank was not told it is excluded";
  } catch (const ExcludedError& e) {
    EXPECT_TRUE(contains(e.what(), "agreed without this one")) << e.what();
  }
}

// A store in this process that counts, for the rank its calling thread is tagged with, the
// requests and the keys of each (a request of n keys counts n).
class CountingStore final : public rendezvous::Store {
 public:
  struct Count {
    std::uint64_t requests = 0, keys = 0, widest = 0;  // widest: the most keys of one request
    std::chrono::steady_clock::duration took{};        // (the test's: how long the call took)
  };
  explicit CountingStore(int size)
      : Store(rendezvous::StoreOptions{}), counts_(static_cast<std::size_t>(size)) {}
  // The rank whose requests this thread's go to (-1: none; the watchers' threads).
  static thread_local int tagged;
  Count count(int rank) const { return counts_[static_cast<std::size_t>(rank)]; }
  std::string describe() const override { return "counting hash://"; }
  bool authenticated() const override { return true; }

 protected:
  void doSet(const std::string& key, const rendezvous::Bytes& value) override {
    counted(1);
    inner_.set(key, value);
  }
  std::vector<std::string> doWait(const std::vector<std::string>& keys,
                                  rendezvous::Clock::time_point deadline) override {
    counted(keys.size());
    std::vector<rendezvous::Bytes> values;
    return getting(keys, deadline, values);
  }
  std::vector<std::string> doMultiGet(const std::vector<std::string>& keys,
                                      rendezvous::Clock::time_point deadline,
                                      std::vector<rendezvous::Bytes>& values) override {
    counted(keys.size());
    return getting(keys, deadline, values);
  }
  std::int64_t doAdd(const std::string& key, std::int64_t delta) override {
    counted(1);
    return inner_.add(key, delta);
  }
  rendezvous::Bytes doCompareSet(const std::string& key, const rendezvous::Bytes& expected,
                                 const rendezvous::Bytes& desired) override {
    counted(1);
    return inner_.compareSet(key, expected, desired);
  }
  bool doCheck(const std::vector<std::string>& keys) override {
    counted(keys.size());
    return inner_.check(keys);
  }
  std::vector<std::string> doMissing(const std::vector<std::string>& keys) override {
    counted(keys.size());
    return inner_.missing(keys);
  }
  bool doErase(const std::string& key) override {
    counted(1);
    return inner_.erase(key);
  }

 private:
  void counted(std::size_t keys) {
    if (tagged < 0) return;
    Count& c = counts_[static_cast<std::size_t>(tagged)];
    ++c.requests;
    c.keys += keys;
    c.widest = std::max<std::uint64_t>(c.widest, keys);
  }
  std::vector<std::string> getting(const std::vector<std::string>& keys,
                                   rendezvous::Clock::time_point deadline,
                                   std::vector<rendezvous::Bytes>& values) {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - rendezvous::Clock::now());
      if (auto got = inner_.tryMultiGet(keys, std::max(left, std::chrono::milliseconds(0)))) {
        values = std::move(*got);
        return {};
      }
      std::vector<std::string> absent = inner_.missing(keys);
      if (!absent.empty()) return absent;
    }
  }

  rendezvous::HashStore inner_;
  std::vector<Count> counts_;  // each written by its rank's thread only
};
thread_local int CountingStore::tagged = -1;

// Each rank's store traffic in an agreement is what collx::agreementCost() accounts for
// (every rank a reader, or one coordinator and ranks that wait for the answer, as
// COLLX_AGREE_COORDINATOR_FROM says: the "coordinated:" copy of this suite sets it to 2): at
// least that many requests and keys, and only the waits in slices beyond it (a wait that ran
// out: a few more requests; of one key for a rank that waits for the answer). Each request of a
// waiting rank carries one key whatever P; a reader's, P - 1.
TEST_P(Agree, EachRanksStoreTrafficIsWhatAgreementCostSays) {
  const int P = GetParam();
  auto store = std::make_shared<CountingStore>(P);
  World world(P, {}, {}, store);
  constexpr int kRounds = 3;
  std::vector<std::vector<CountingStore::Count>> got(static_cast<std::size_t>(P),
                                                     std::vector<CountingStore::Count>(kRounds));
  world.runOk([&](int rank, Context& ctx) {
    for (int round = 0; round < kRounds; ++round) {
      barrier(ctx);
      const CountingStore::Count before = store->count(rank);
      CountingStore::tagged = rank;
      const auto start = std::chrono::steady_clock::now();
      const Agreement a = ctx.agree(~std::uint64_t{0});
      const auto took = std::chrono::steady_clock::now() - start;
      CountingStore::tagged = -1;
      const CountingStore::Count after = store->count(rank);
      ASSERT_TRUE(a.failed.empty()) << "rank " << rank;
      CountingStore::Count& c =
          got[static_cast<std::size_t>(rank)][static_cast<std::size_t>(round)];
      c.requests = after.requests - before.requests;
      c.keys = after.keys - before.keys;
      c.widest = after.widest;
      c.took = took;
    }
  });
  for (int round = 0; round < kRounds; ++round) {
    const AgreementCost cost = agreementCost(P, 0, static_cast<std::uint64_t>(round + 1));
    ASSERT_GE(cost.readers, 1);
    for (int r = 0; r < P; ++r) {
      const CountingStore::Count& c =
          got[static_cast<std::size_t>(r)][static_cast<std::size_t>(round)];
      const bool reader = cost.readers == P || r == 0;  // (the coordinator: rank 0, alive)
      const std::string where = "rank " + std::to_string(r) + ", round " +
                                std::to_string(round + 1) + (reader ? " (reader)" : " (waiter)");
      const std::uint64_t requests = reader ? cost.readerRequests : cost.waiterRequests;
      const std::uint64_t keys = reader ? cost.readerKeys : cost.waiterKeys;
      EXPECT_GE(c.requests, requests) << where;
      EXPECT_GE(c.keys, keys) << where;
      // The slices (1 ms, doubling, at most 50 ms) that fit in the call's time, each ending
      // in at most 4 requests (the wait, which entries came, those read, the answer looked for).
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(c.took).count();
      std::uint64_t slices = 1;
      for (std::int64_t sum = 0, step = 1; sum <= ms;
           sum += step, step = std::min<std::int64_t>(step * 2, 50)) {
        ++slices;
      }
      EXPECT_LE(c.requests, requests + 4 * slices)
          << where << " in " << ms << " ms: it polls instead of waiting";
      if (!reader) {
        EXPECT_EQ(c.keys, c.requests) << where << ": a request of more than one key";
      }
    }
  }
  if (agreementCost(P).readers < P) {
    for (int r = 1; r < P; ++r) {
      EXPECT_EQ(store->count(r).widest, 1u) << "rank " << r << " read more than the answer";
    }
  }
}

// The lowest rank (a coordinated agreement's coordinator) closed: the next takes its part,
// and the answer names it failed, long before the deadline.
TEST_P(Agree, TheLowestRankClosedIsFailedAndTheOthersAgreeWithoutIt) {
  const int P = GetParam();
  World world(P);
  world.close(0);
  const auto start = std::chrono::steady_clock::now();
  std::vector<Agreement> got(static_cast<std::size_t>(P));
  world.runOk([&](int rank, Context& ctx) {
    if (rank == 0) return;
    got[static_cast<std::size_t>(rank)] = ctx.agree(~(std::uint64_t{1} << rank), 30s);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  std::uint64_t expected = ~std::uint64_t{0};
  for (int r = 1; r < P; ++r) expected &= ~(std::uint64_t{1} << r);
  for (int r = 1; r < P; ++r) {
    EXPECT_EQ(got[static_cast<std::size_t>(r)].flags, expected) << "rank " << r;
    EXPECT_EQ(got[static_cast<std::size_t>(r)].failed, std::vector<int>{0}) << "rank " << r;
  }
}

// An answer in the store that is not one fails every rank's agreement alike.
TEST_P(Agree, AMalformedAnswerInTheStoreIsAMismatchOnEveryRank) {
  const int P = GetParam();
  World world(P);
  world.context(0).store()->set("agree/0/1/decision", "not an agreement");
  auto errors = world.run([&](int, Context& ctx) { ctx.agree(); });
  for (int r = 0; r < P; ++r) {
    try {
      if (errors[static_cast<std::size_t>(r)])
        std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
      ADD_FAILURE() << "rank " << r << " agreed";
    } catch (const MismatchError& e) {
      EXPECT_TRUE(contains(e.what(), "malformed agreement")) << e.what();
    }
  }
}

class Shrink : public ::testing::TestWithParam<int> {};

// Every rank's part of an allreduce of `count` floats: rank r gives r + 1 + i % 5.
void checkAllreduce(Context& ctx, std::uint64_t count) {
  std::vector<float> v(count);
  for (std::uint64_t i = 0; i < count; ++i) v[i] = static_cast<float>(ctx.rank() + 1 + i % 5);
  allreduce(ctx, v.data(), v.data(), count, DataType::kFloat32);
  const int P = ctx.size();
  for (std::uint64_t i = 0; i < count; i += 97) {
    const float expected = static_cast<float>(P * (P + 1) / 2 + P * static_cast<int>(i % 5));
    ASSERT_EQ(v[i], expected) << "rank " << ctx.rank() << " of " << P << ", element " << i;
  }
}

// A rank closes; the others shrink: a context of the survivors, renumbered in order, in
// generation 1, whose collectives (small and large) give the right sums and whose point to
// point reaches the right ranks; the old context's calls fail (its generation is over), and
// it cannot shrink again. Then a second rank closes, and the survivors shrink again. The
// survivors, on one host, have a shared-memory group again where the job had one.
TEST_P(Shrink, TheSurvivorsGoOnRenumberedInTheNextGeneration) {
  const int P = GetParam();
  World world(P);
  const int gone = P / 2;
  world.close(gone);
  std::vector<std::shared_ptr<Context>> next(static_cast<std::size_t>(P));
  world.runOk([&](int rank, Context& ctx) {
    auto shrunk = ctx.shrink(30s);
    EXPECT_EQ(shrunk->size(), P - 1);
    EXPECT_EQ(shrunk->rank(), rank < gone ? rank : rank - 1);
    EXPECT_EQ(shrunk->generation(), 1);
    EXPECT_EQ(shrunk->sharedMemory(), ctx.sharedMemory());
    EXPECT_EQ(shrunk->peers()[static_cast<std::size_t>(shrunk->rank())].rank, shrunk->rank());
    for (std::uint64_t count : {1, 1000, 300000}) checkAllreduce(*shrunk, count);
    // Point to point around the new ring.
    const int to = (shrunk->rank() + 1) % shrunk->size();
    const int from = (shrunk->rank() + shrunk->size() - 1) % shrunk->size();
    std::int32_t out = shrunk->rank(), in = -1;
    Work sent = sendAsync(*shrunk, &out, 1, DataType::kInt32, to, 7);
    recv(*shrunk, &in, 1, DataType::kInt32, from, 7);
    sent.wait();
    EXPECT_EQ(in, from);
    EXPECT_THROW(barrier(ctx), RevokedError);
    EXPECT_THROW(ctx.shrink(), RevokedError);
    next[static_cast<std::size_t>(rank)] = std::move(shrunk);
  });
  // Again, from the new context: its last rank closes it (and the old one, which holds the
  // same connections: the process is done with collx).
  const int last = P - 1;  // its rank there: P - 2
  next[static_cast<std::size_t>(last)].reset();
  world.close(last);
  auto errors = world.run([&](int rank, Context&) {
    if (rank == last) return;
    auto again = next[static_cast<std::size_t>(rank)]->shrink(30s);
    EXPECT_EQ(again->size(), P - 2);
    EXPECT_EQ(again->generation(), 2);
    // (One rank alone is all over shared memory.)
    EXPECT_EQ(again->sharedMemory(), P == 3 || world.context(0).sharedMemory());
    for (std::uint64_t count : {1, 5000, 300000}) checkAllreduce(*again, count);
  });
  for (int r = 0; r < P; ++r) EXPECT_EQ(test::messageOf(errors[static_cast<std::size_t>(r)]), "");
}

// A rank left out while it still runs its shared-memory call of the old generation (stopped,
// then woken, under a real job): what it published there is nothing to the survivors, whose
// calls of the new generation (the same sequence numbers from 0) take neither that group nor
// what is in it. Rank 2 starts allreduce#0 and waits in it; ranks 0 and 1 shrink without it
// and run their allreduce#0 there, rank 1 late so that rank 0 waits (and looks at the
// shared-memory group's members, as a waiting call does) meanwhile. Over shared memory the
// survivors' group is made again, and rank 2's call ends before its timeout, told that the
// others went on without it (or that their generation ended).
TEST_P(Shrink, WhatALeftOutRankPublishedInTheOldGroupIsNothingToTheSurvivors) {
  const int P = GetParam();
  if (P < 3) GTEST_SKIP() << "needs two survivors and a rank left out (P >= 3)";
  ContextOptions options;
  options.timeout = 3s;  // the left-out rank's call ends at it
  World world(P, options);
  const int out = P - 1;
  std::vector<std::string> errors(static_cast<std::size_t>(P));
  world.run([&](int rank, Context& ctx) {
    if (rank == out) {
      std::vector<float> v(1000, 1.0f);
      try {
        allreduce(ctx, v.data(), v.data(), v.size(), DataType::kFloat32);
        errors[static_cast<std::size_t>(rank)] = "its allreduce returned";
      } catch (const Error& e) {
        if (ctx.sharedMemory() && e.kind() != ErrorKind::kExcluded &&
            e.kind() != ErrorKind::kRevoked) {
          errors[static_cast<std::size_t>(rank)] =
              std::string("not told it was left out: ") + e.what();
        }
      }
      return;
    }
    std::this_thread::sleep_for(100ms);  // rank `out` is in its call, published
    std::shared_ptr<Context> shrunk;
    try {
      shrunk = ctx.shrink(1500ms);
    } catch (const Error& e) {
      errors[static_cast<std::size_t>(rank)] = std::string("shrink: ") + e.what();
      return;
    }
    if (shrunk->size() != P - 1 || shrunk->sharedMemory() != ctx.sharedMemory()) {
      errors[static_cast<std::size_t>(rank)] = "shrunk to " + std::to_string(shrunk->size()) +
                                               (shrunk->sharedMemory() ? " with" : " without") +
                                               " a shared-memory group";
      return;
    }
    if (rank == 1) std::this_thread::sleep_for(300ms);
    try {
      checkAllreduce(*shrunk, 1000);
    } catch (const Error& e) {
      errors[static_cast<std::size_t>(rank)] = std::string("allreduce: ") + e.what();
    }
  });
  for (int r = 0; r < P; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

int openDescriptors() {
  int n = 0;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (::readdir(dir) != nullptr) ++n;
    ::closedir(dir);
  }
  return n;
}

int threads() {
  int n = 0;
  if (DIR* dir = ::opendir("/proc/self/task")) {
    while (::readdir(dir) != nullptr) ++n;
    ::closedir(dir);
  }
  return n;
}

// This process's named segments (/dev/shm/collx-<ns>-<pid>-...; memfd segments are
// descriptors, counted above): other tests' processes may make theirs meanwhile.
int sharedMemorySegments() {
  int n = 0;
  const std::string mine = "-" + std::to_string(::getpid()) + "-";
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (const dirent* entry = ::readdir(dir)) {
      if (std::string(entry->d_name).find(mine) != std::string::npos) ++n;
    }
    ::closedir(dir);
  }
  return n;
}

// Re-forming again and again opens nothing: after 100 shrinks (each followed by an
// allreduce on the new context, the old ones dropped), the process holds the descriptors
// and threads it held after the first, and no shared-memory segment more.
TEST_P(Shrink, AHundredReformsLeaveNoDescriptorThreadOrSegmentBehind) {
  const int P = GetParam();
  World world(P);
  std::vector<std::shared_ptr<Context>> current(static_cast<std::size_t>(P));
  int descriptors = 0, tasks = 0, segments = 0;
  for (int round = 0; round < 100; ++round) {
    world.runOk([&](int rank, Context& ctx) {
      auto& mine = current[static_cast<std::size_t>(rank)];
      mine = (mine ? mine : std::shared_ptr<Context>(&ctx, [](Context*) {}))->shrink(30s);
      EXPECT_EQ(mine->sharedMemory(), ctx.sharedMemory());
      checkAllreduce(*mine, 1000);
    });
    if (round == 0) {
      descriptors = openDescriptors();
      tasks = threads();
      segments = sharedMemorySegments();
    }
  }
  EXPECT_EQ(current[0]->generation(), 100);
  EXPECT_LE(openDescriptors(), descriptors);
  EXPECT_LE(threads(), tasks);
  EXPECT_LE(sharedMemorySegments(), segments);
}

// The descriptors of this process that are connections or shared memory (sockets, memfd
// segments), by what they name ("socket:[inode]", "/memfd:..."), each with its number.
std::set<std::string> connectionsAndSegments() {
  std::set<std::string> out;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (const dirent* entry = ::readdir(dir)) {
      char target[512] = {};
      const std::string path = std::string("/proc/self/fd/") + entry->d_name;
      const ssize_t n = ::readlink(path.c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      const std::string what(target, static_cast<std::size_t>(n));
      if (what.rfind("socket:", 0) == 0 || what.rfind("/memfd:", 0) == 0) {
        out.insert(what + " (fd " + entry->d_name + ")");
      }
    }
    ::closedir(dir);
  }
  return out;
}

// A shrink opens nothing: the survivors go on over the connections and shared memory they
// held (and their calls after it too, small and large); only the lost rank's go.
TEST_P(Shrink, OpensNoConnectionAndNoSegment) {
  const int P = GetParam();
  World world(P);
  world.runOk([&](int, Context& ctx) { checkAllreduce(ctx, 300000); });
  const int gone = P - 1;
  world.close(gone);
  const std::set<std::string> before = connectionsAndSegments();
  std::vector<std::shared_ptr<Context>> next(static_cast<std::size_t>(P));
  auto errors = world.run([&](int rank, Context& ctx) {
    if (rank == gone) return;
    auto shrunk = ctx.shrink(30s);
    for (std::uint64_t count : {1, 1000, 300000}) checkAllreduce(*shrunk, count);
    barrier(*shrunk);
    next[static_cast<std::size_t>(rank)] = std::move(shrunk);
  });
  for (int r = 0; r < P; ++r) EXPECT_EQ(test::messageOf(errors[static_cast<std::size_t>(r)]), "");
  ASSERT_FALSE(before.empty());
  for (const std::string& now : connectionsAndSegments()) {
    EXPECT_EQ(before.count(now), 1u) << now << " was opened by the shrink or a call after it";
  }
}

// A shrink of a healthy context keeps every rank: the same ranks in the next generation.
TEST_P(Shrink, AHealthyContextShrinksToAllOfItsRanks) {
  const int P = GetParam();
  World world(P);
  world.runOk([&](int rank, Context& ctx) {
    checkAllreduce(ctx, 100);
    auto shrunk = ctx.shrink(30s);
    EXPECT_EQ(shrunk->size(), P);
    EXPECT_EQ(shrunk->rank(), rank);
    EXPECT_EQ(shrunk->sharedMemory(), ctx.sharedMemory());
    checkAllreduce(*shrunk, 100);
    barrier(*shrunk);
  });
}

// Ranks that leave at different points meet all the same: rank 0 fails (it aborts its own
// context) only once the others are inside shrink() with healthy contexts, so it leaves the
// generation before agreeing and they after; nobody failed, every rank goes on.
TEST_P(Shrink, RanksThatLeaveBeforeAndAfterAgreeingMeetAllTheSame) {
  const int P = GetParam();
  World world(P);
  world.runOk([&](int rank, Context& ctx) {
    checkAllreduce(ctx, 100);
    barrier(ctx);
    if (rank == 0) {
      std::vector<std::string> keys;
      for (int r = 1; r < P; ++r) keys.push_back("test/in-shrink/" + std::to_string(r));
      world.store()->wait(keys, 30s);
      std::this_thread::sleep_for(50ms);
      ctx.abort("rank 0 fails after the others called shrink()");
    } else {
      world.store()->set("test/in-shrink/" + std::to_string(rank), "1");
    }
    auto shrunk = ctx.shrink(30s);
    EXPECT_EQ(shrunk->size(), P);
    EXPECT_EQ(shrunk->rank(), rank);
    EXPECT_EQ(shrunk->sharedMemory(), ctx.sharedMemory());
    for (std::uint64_t count : {1, 300000}) checkAllreduce(*shrunk, count);
    barrier(*shrunk);
  });
}

class Grow : public ::testing::TestWithParam<int> {};

BootstrapOptions joinOptions(World& world) {
  BootstrapOptions options;
  options.storeObject = world.store();
  options.timeout = 30s;
  return options;
}

// A rank closes, the others shrink; a newcomer joins while the survivors grow: a context of
// every survivor, then the newcomer, in generation 2, whose collectives count it; only the
// newcomer's pairs are new (tcp), the survivors' go on.
TEST_P(Grow, ANewcomerTakesALostRanksPlaceAtTheEnd) {
  const int P = GetParam();
  World world(P);
  const int gone = P / 2;
  world.close(gone);
  std::shared_ptr<Context> newcomer;
  std::exception_ptr newcomerError;
  std::thread joiner([&] {
    try {
      newcomer = join(joinOptions(world));
      checkAllreduce(*newcomer, 1000);
      checkAllreduce(*newcomer, 300000);
      barrier(*newcomer);
    } catch (...) {
      newcomerError = std::current_exception();
    }
  });
  std::vector<std::shared_ptr<Context>> kept(static_cast<std::size_t>(P));
  world.runOk([&](int rank, Context& ctx) {
    auto shrunk = ctx.shrink(30s);
    auto grown = shrunk->grow(1, 30s);
    EXPECT_EQ(grown->size(), P);
    EXPECT_EQ(grown->rank(), shrunk->rank());
    EXPECT_EQ(grown->generation(), 2);
    EXPECT_THROW(barrier(*shrunk), RevokedError);
    EXPECT_EQ(grown->transports()[static_cast<std::size_t>(P - 1)], "tcp");
    EXPECT_FALSE(grown->sharedMemory()) << "the newcomer is reached over tcp";
    checkAllreduce(*grown, 1000);
    checkAllreduce(*grown, 300000);
    barrier(*grown);
    kept[static_cast<std::size_t>(rank)] = grown;
  });
  joiner.join();
  ASSERT_EQ(test::messageOf(newcomerError), "");
  ASSERT_TRUE(newcomer);
  EXPECT_EQ(newcomer->rank(), P - 1);
  EXPECT_EQ(newcomer->size(), P);
  EXPECT_EQ(newcomer->generation(), 2);
  for (int r = 0; r < P - 1; ++r) {
    EXPECT_EQ(newcomer->transports()[static_cast<std::size_t>(r)], "tcp");
  }
}

// A hundred failures, each replaced: in every round one rank (in turn) closes its context,
// the others reform() with a newcomer that joins in its place (new tcp pairs with every
// survivor, the dead rank's closed), and all of them check an allreduce. After the hundredth
// the process holds no more descriptors, threads or shared-memory segments than once every
// place was replaced once (a member listens again for a newcomer of a higher place, and
// keeps that listener), what a job that keeps losing and replacing ranks needs.
TEST(Replacements, AHundredReformsWithANewcomerEachLeaveNothingBehind) {
  constexpr int P = 3;
  constexpr int kRounds = 100;
  World world(P);
  std::vector<std::shared_ptr<Context>> current(P);
  std::vector<bool> worldOpen(P, true);
  for (int r = 0; r < P; ++r) {
    current[static_cast<std::size_t>(r)] =
        std::shared_ptr<Context>(&world.context(r), [](Context*) {});
  }
  int descriptors = 0, tasks = 0, segments = 0;
  for (int round = 0; round < kRounds; ++round) {
    const int gone = round % P;
    current[static_cast<std::size_t>(gone)].reset();
    if (worldOpen[static_cast<std::size_t>(gone)]) {
      world.close(gone);
      worldOpen[static_cast<std::size_t>(gone)] = false;
    }
    std::vector<std::string> errors(P);
    std::vector<std::thread> ranks;
    for (int r = 0; r < P; ++r) {
      ranks.emplace_back([&, r] {
        auto& mine = current[static_cast<std::size_t>(r)];
        try {
          if (r == gone) {
            mine = join(joinOptions(world));
          } else {
            Reformed reformed = mine->reform(30s, 30s);
            if (reformed.failed != std::vector<int>{gone}) {
              std::string failed;
              for (int f : reformed.failed) failed += " " + std::to_string(f);
              throw std::runtime_error("rank " + std::to_string(r) + ", round " +
                                       std::to_string(round) + ": reform() found failed" + failed +
                                       ", not " + std::to_string(gone));
            }
            mine = reformed.context;
          }
          checkAllreduce(*mine, 1000);
          barrier(*mine);
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    }
    for (auto& t : ranks) t.join();
    for (int r = 0; r < P; ++r) {
      ASSERT_EQ(errors[static_cast<std::size_t>(r)], "") << "round " << round << ", rank " << r;
      EXPECT_EQ(current[static_cast<std::size_t>(r)]->rank(), r);
    }
    if (round == P - 1) {
      descriptors = openDescriptors();
      tasks = threads();
      segments = sharedMemorySegments();
    }
  }
  EXPECT_EQ(current[0]->generation(), kRounds);
  EXPECT_LE(openDescriptors(), descriptors);
  EXPECT_LE(threads(), tasks);
  EXPECT_LE(sharedMemorySegments(), segments);
}

// reform(): the survivors keep their numbers, the newcomer takes the failed rank's, and what
// changed is the same on every rank; later a healthy reform() with no newcomer keeps all.
TEST_P(Grow, ReformPutsTheNewcomerInTheFailedRanksPlace) {
  const int P = GetParam();
  World world(P);
  const int gone = 1;
  world.close(gone);
  std::shared_ptr<Context> newcomer;
  std::exception_ptr newcomerError;
  std::thread joiner([&] {
    try {
      newcomer = join(joinOptions(world));
      checkAllreduce(*newcomer, 5000);
      auto again = newcomer->reform(30s);
      EXPECT_TRUE(again.failed.empty());
      checkAllreduce(*again.context, 100);
    } catch (...) {
      newcomerError = std::current_exception();
    }
  });
  world.runOk([&](int rank, Context& ctx) {
    Reformed reformed = ctx.reform(30s, 30s);
    EXPECT_EQ(reformed.failed, std::vector<int>{gone});
    ASSERT_EQ(reformed.causes.size(), 1u);
    EXPECT_EQ(reformed.causes[0].rank, gone);
    EXPECT_EQ(reformed.causes[0].cause, FailureCause::kKilled) << reformed.causes[0].why;
    EXPECT_EQ(reformed.joined, std::vector<int>{gone});
    ASSERT_EQ(reformed.rankOf.size(), static_cast<std::size_t>(P));
    for (int r = 0; r < P; ++r) {
      EXPECT_EQ(reformed.rankOf[static_cast<std::size_t>(r)], r == gone ? -1 : r);
    }
    EXPECT_EQ(reformed.context->rank(), rank);
    EXPECT_EQ(reformed.context->size(), P);
    checkAllreduce(*reformed.context, 5000);
    auto again = reformed.context->reform(30s);
    EXPECT_TRUE(again.failed.empty());
    EXPECT_TRUE(again.causes.empty());
    EXPECT_TRUE(again.joined.empty());
    EXPECT_EQ(again.context->rank(), rank);
    checkAllreduce(*again.context, 100);
  });
  joiner.join();
  ASSERT_EQ(test::messageOf(newcomerError), "");
  ASSERT_TRUE(newcomer);
  EXPECT_EQ(newcomer->rank(), gone);
}

// A job formed with room to grow (ContextOptions::maxSize = P + 2): with nobody lost, a
// newcomer is appended as rank P, over tcp, the members' pairs going on; then another as
// rank P + 1; a third finds no place left (InvalidArgument, before anything happens). After
// a member closes, a reform() takes a newcomer into its place, so that the others keep their
// numbers in a job grown beyond its first size.
TEST_P(Grow, NewcomersAreAppendedBeyondTheFirstSizeUpToMaxSize) {
  const int P = GetParam();
  ContextOptions options;
  options.maxSize = P + 2;
  World world(P, options);
  auto joinOne = [&](std::shared_ptr<Context>& joined, std::exception_ptr& error) {
    return std::thread([&] {
      try {
        joined = join(joinOptions(world));
        checkAllreduce(*joined, 1000);
        checkAllreduce(*joined, 300000);
      } catch (...) {
        error = std::current_exception();
      }
    });
  };
  std::shared_ptr<Context> first, second, third;
  std::exception_ptr firstError, secondError, thirdError;
  std::vector<std::shared_ptr<Context>> grown(static_cast<std::size_t>(P));
  std::thread joiner = joinOne(first, firstError);
  world.runOk([&](int rank, Context& ctx) {
    auto next = ctx.grow(1, 30s);
    EXPECT_EQ(next->size(), P + 1);
    EXPECT_EQ(next->rank(), rank);
    EXPECT_EQ(next->transports()[static_cast<std::size_t>(P)], "tcp");
    checkAllreduce(*next, 1000);
    checkAllreduce(*next, 300000);
    grown[static_cast<std::size_t>(rank)] = next;
  });
  joiner.join();
  ASSERT_EQ(test::messageOf(firstError), "");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->rank(), P);
  EXPECT_EQ(first->size(), P + 1);
  // The second, grown by every member of the P + 1 (the first newcomer too).
  joiner = joinOne(second, secondError);
  std::shared_ptr<Context> firstGrown;
  std::thread firstGrows([&] {
    try {
      firstGrown = first->grow(1, 30s);
      checkAllreduce(*firstGrown, 1000);
      checkAllreduce(*firstGrown, 300000);
      EXPECT_THROW(firstGrown->grow(1, 30s), InvalidArgument);
    } catch (...) {
      thirdError = std::current_exception();
    }
  });
  world.runOk([&](int rank, Context&) {
    auto& ctx = grown[static_cast<std::size_t>(rank)];
    ctx = ctx->grow(1, 30s);
    EXPECT_EQ(ctx->size(), P + 2);
    checkAllreduce(*ctx, 1000);
    checkAllreduce(*ctx, 300000);
    try {
      ctx->grow(1, 30s);
      ADD_FAILURE() << "rank " << rank << ": a grow beyond COLLX_MAX_SIZE was taken";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), "count in [1, 0]") || contains(e.what(), "0 such places"))
          << e.what();
    }
  });
  joiner.join();
  firstGrows.join();
  ASSERT_EQ(test::messageOf(secondError), "");
  ASSERT_EQ(test::messageOf(thirdError), "");
  ASSERT_TRUE(second);
  EXPECT_EQ(second->rank(), P + 1);
  EXPECT_EQ(second->size(), P + 2);
  // Rank 0 closes; a newcomer takes its place, the others keep their numbers.
  const int gone = 0;
  grown[static_cast<std::size_t>(gone)].reset();
  world.close(gone);
  joiner = joinOne(third, thirdError);
  std::vector<std::thread> others;
  std::vector<std::exception_ptr> otherErrors(2);
  std::vector<std::shared_ptr<Context>*> appended = {&firstGrown, &second};
  for (std::size_t i = 0; i < appended.size(); ++i) {
    others.emplace_back([&, i] {
      try {
        Reformed r = (*appended[i])->reform(30s, 30s);
        EXPECT_EQ(r.context->rank(), P + static_cast<int>(i));
        checkAllreduce(*r.context, 1000);
        checkAllreduce(*r.context, 300000);
      } catch (...) {
        otherErrors[i] = std::current_exception();
      }
    });
  }
  world.runOk([&](int rank, Context&) {
    if (rank == gone) return;
    Reformed r = grown[static_cast<std::size_t>(rank)]->reform(30s, 30s);
    EXPECT_EQ(r.context->rank(), rank);
    EXPECT_EQ(r.context->size(), P + 2);
    EXPECT_EQ(r.joined, std::vector<int>{gone});
    checkAllreduce(*r.context, 1000);
    checkAllreduce(*r.context, 300000);
  });
  joiner.join();
  for (auto& t : others) t.join();
  ASSERT_EQ(test::messageOf(thirdError), "");
  for (auto& e : otherErrors) ASSERT_EQ(test::messageOf(e), "");
  ASSERT_TRUE(third);
  EXPECT_EQ(third->rank(), gone);
}

// No newcomer comes: grow() fails on every rank alike at its deadline, and the context goes
// on; a grow beyond the places that lost ranks left is refused before anything happens.
TEST_P(Grow, WithoutANewcomerGrowTimesOutAndTheContextGoesOn) {
  const int P = GetParam();
  World world(P);
  world.close(P - 1);
  world.runOk([&](int rank, Context& ctx) {
    if (rank == P - 1) return;
    EXPECT_THROW(ctx.grow(1, 30s), InvalidArgument);  // (no place yet: the mesh is whole)
    auto shrunk = ctx.shrink(30s);
    EXPECT_THROW(shrunk->grow(2, 30s), InvalidArgument);
    const auto start = std::chrono::steady_clock::now();
    try {
      shrunk->grow(1, 300ms);
      ADD_FAILURE() << "rank " << rank << ": grow() returned with no newcomer";
    } catch (const TimeoutError& e) {
      EXPECT_TRUE(contains(e.what(), "this context goes on")) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
    checkAllreduce(*shrunk, 1000);
  });
}

// A live rank that was excluded (it did not come to the shrink in time) is told so, and
// comes back as a newcomer: collx::join() while the others grow.
TEST_P(Grow, AnExcludedRankRejoinsAsANewcomer) {
  const int P = GetParam();
  World world(P);
  const int late = P - 1;
  std::vector<std::shared_ptr<Context>> next(static_cast<std::size_t>(P));
  world.runOk([&](int rank, Context& ctx) {
    if (rank != late) next[static_cast<std::size_t>(rank)] = ctx.shrink(300ms);
  });
  try {
    world.context(late).shrink(10s);
    ADD_FAILURE() << "the late rank was not told it is excluded";
  } catch (const ExcludedError& e) {
    EXPECT_TRUE(contains(e.what(), "collx::join() brings the process back")) << e.what();
  }
  std::shared_ptr<Context> back;
  std::exception_ptr backError;
  std::thread joiner([&] {
    try {
      back = join(joinOptions(world));
      checkAllreduce(*back, 2000);
    } catch (...) {
      backError = std::current_exception();
    }
  });
  world.runOk([&](int rank, Context&) {
    if (rank == late) return;
    auto grown = next[static_cast<std::size_t>(rank)]->grow(1, 30s);
    EXPECT_EQ(grown->size(), P);
    checkAllreduce(*grown, 2000);
  });
  joiner.join();
  ASSERT_EQ(test::messageOf(backError), "");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->rank(), P - 1);
}

// A plan in the store that is not one (outside input) fails the grow on every rank alike
// with a MismatchError quoting it; nothing was changed, so shrink() still goes on.
TEST_P(Grow, AMalformedPlanInTheStoreIsAMismatchOnEveryRank) {
  const int P = GetParam();
  World world(P);
  world.close(P - 1);
  std::atomic<int> shrunk{0};
  std::vector<std::shared_ptr<Context>> next(static_cast<std::size_t>(P));
  world.runOk([&](int rank, Context& ctx) {
    next[static_cast<std::size_t>(rank)] = ctx.shrink(30s);
    shrunk.fetch_add(1);
  });
  // (Generation 1's first attempt: its plan's key.)
  world.store()->set("collx/default/1/grow/1/plan", "1 2 0 4 1 1 j1@9,o0@0");
  world.runOk([&](int rank, Context&) {
    auto& ctx = *next[static_cast<std::size_t>(rank)];
    try {
      ctx.grow(1, 30s);
      ADD_FAILURE() << "rank " << rank << ": a malformed plan was taken";
    } catch (const MismatchError& e) {
      EXPECT_TRUE(contains(e.what(), "malformed plan: '1 2 0 4 1 1 j1@9,o0@0'")) << e.what();
    }
    checkAllreduce(*ctx.shrink(30s), 1000);
  });
}

class Uniform : public ::testing::TestWithParam<int> {};

// A uniform call on a healthy context: every rank's result, as without it.
TEST_P(Uniform, AHealthyCallReturnsOnEveryRank) {
  const int P = GetParam();
  World world(P);
  world.runOk([&](int rank, Context& ctx) {
    AllreduceOptions o;
    o.uniform = true;
    std::vector<float> v(1000, static_cast<float>(rank + 1));
    allreduce(ctx, v.data(), v.data(), v.size(), DataType::kFloat32, o);
    EXPECT_EQ(v[999], static_cast<float>(P * (P + 1) / 2));
    Work w;
    EXPECT_THROW(w = allreduceAsync(ctx, v.data(), v.data(), v.size(), DataType::kFloat32, o),
                 InvalidArgument);
  });
}

// A gather whose senders' parts complete (each hands its block over and is done) while the
// root's fails (a rank closed): without uniform the senders would return; with it, every
// rank throws, the senders saying that another rank's part failed, naming the lost rank.
TEST_P(Uniform, WhenOneRanksPartFailsEveryRankThrows) {
  const int P = GetParam();
  World world(P);
  const int gone = P - 1;
  world.close(gone);
  std::vector<std::string> errors(static_cast<std::size_t>(P));
  world.runOk([&](int rank, Context& ctx) {
    CollectiveOptions o;
    o.uniform = true;
    o.algorithm = "linear";
    o.timeout = 20s;
    std::vector<std::int32_t> mine(4, rank), all(4 * static_cast<std::size_t>(P), -1);
    try {
      gather(ctx, mine.data(), all.data(), mine.size(), DataType::kInt32, 0, o);
      ADD_FAILURE() << "rank " << rank << ": the uniform gather returned";
    } catch (const Error& e) {
      errors[static_cast<std::size_t>(rank)] = e.what();
    }
  });
  for (int r = 1; r < gone; ++r) {
    const std::string& e = errors[static_cast<std::size_t>(r)];
    EXPECT_TRUE(contains(e, "this rank's part completed, but not every rank's (failed rank " +
                                std::to_string(gone) + ")"))
        << "rank " << r << ": " << e;
  }
  EXPECT_TRUE(contains(errors[0], "rank " + std::to_string(gone))) << errors[0];
}

INSTANTIATE_TEST_SUITE_P(Sizes, Uniform, ::testing::ValuesIn(test::worldSizes({3, 4, 8})),
                         [](const auto& p) { return "P" + std::to_string(p.param); });

INSTANTIATE_TEST_SUITE_P(Sizes, Grow, ::testing::ValuesIn(test::worldSizes({2, 3, 4, 8})),
                         [](const auto& p) { return "P" + std::to_string(p.param); });
INSTANTIATE_TEST_SUITE_P(Sizes, Shrink, ::testing::ValuesIn(test::worldSizes({3, 4, 8})),
                         [](const auto& p) { return "P" + std::to_string(p.param); });

INSTANTIATE_TEST_SUITE_P(Sizes, Agree, ::testing::ValuesIn(test::worldSizes({2, 3, 4, 8, 17})),
                         [](const auto& p) { return "P" + std::to_string(p.param); });

INSTANTIATE_TEST_SUITE_P(Sizes, Revoke, ::testing::ValuesIn(test::worldSizes({2, 3, 4, 8})),
                         [](const auto& p) { return "P" + std::to_string(p.param); });

}  // namespace
}  // namespace collx
