// Context::split: sub-contexts over their parent's connections (no new sockets, segments or
// threads), any list of ranks in any order, collectives and point to point interleaved with
// the parent's and the siblings' on every thread, nested splits, and the errors: a rank not
// in the list, a bad list, lists that differ, a first rank that never comes, a mismatched
// collective inside one, and the fate they share with their parent.
#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "collx/collx.h"
#include "collx/rendezvous/store.h"
#include "collx/transport/shared_group.h"
#include "util/test_util.h"
#include "util/world.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
using test::World;

// The descriptors this process has open.
int openDescriptors() {
  int n = 0;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (::readdir(dir) != nullptr) ++n;
    ::closedir(dir);
  }
  return n;
}

// The world's transport for these suites (COLLX_TRANSPORT: the "tcp:" copy runs over tcp).
ContextOptions worldOptions() { return {}; }

std::string key(const char* what, int i) { return std::string(what) + "/" + std::to_string(i); }

class Split : public ::testing::TestWithParam<int> {};

// Rows and columns of a 2 x P/2 grid (a 2-D DeviceMesh), each rank's three contexts in use at
// once: nonblocking calls on one while blocking calls run on another, from two threads.
TEST_P(Split, RowsAndColumnsRunBesideTheirParent) {
  const int P = GetParam();
  World world(P, worldOptions());
  const int before = openDescriptors();
  std::vector<std::shared_ptr<Context>> rows(P), cols(P);
  world.runOk([&](int rank, Context& ctx) {
    const int half = P / 2, row = rank / half, col = rank % half;
    std::vector<int> rowRanks, colRanks;
    for (int c = 0; c < half; ++c) rowRanks.push_back(row * half + c);
    for (int r = 0; r < 2; ++r) colRanks.push_back(r * half + col);
    rows[rank] = ctx.split(rowRanks, key("row", row));
    cols[rank] = ctx.split(colRanks, key("col", col));
    EXPECT_EQ(rows[rank]->rank(), col);
    EXPECT_EQ(rows[rank]->size(), half);
    EXPECT_EQ(cols[rank]->rank(), row);
    EXPECT_EQ(cols[rank]->size(), 2);
    EXPECT_EQ(rows[rank]->parent().get(), &ctx);
    // Within a host, groups of their own in the parent's shared memory.
    EXPECT_EQ(rows[rank]->sharedMemory(), ctx.sharedMemory() || half == 1);
    EXPECT_EQ(cols[rank]->sharedMemory(), ctx.sharedMemory());
  });
  // Nothing was connected or mapped for them, and their keys are gone from the store.
  EXPECT_EQ(openDescriptors(), before);
  for (int i = 0; i < P / 2; ++i) {
    for (const std::string& kind :
         std::vector<std::string>{"record", "done", "ack/" + std::to_string(i)}) {
      const std::string name = "split/0/" + kind + "/1/" + key("col", i);
      EXPECT_FALSE(world.context(0).store()->check({name})) << name;
    }
  }
  world.runOk([&](int rank, Context& ctx) {
    Context& rowCtx = *rows[rank];
    Context& colCtx = *cols[rank];
    for (int round = 0; round < 5; ++round) {
      const std::size_t n = round % 2 ? 3000 : 7;
      std::vector<float> mine(n, static_cast<float>(rank + 1)), viaRow(n), viaWorld(n), viaCol(n);
      Work w = allreduceAsync(rowCtx, mine.data(), viaRow.data(), n, DataType::kFloat32);
      std::thread other(
          [&] { allreduce(colCtx, mine.data(), viaCol.data(), n, DataType::kFloat32); });
      allreduce(ctx, mine.data(), viaWorld.data(), n, DataType::kFloat32);
      other.join();
      w.wait();
      const int half = P / 2, row = rank / half, col = rank % half;
      float rowSum = 0, colSum = 0;
      for (int c = 0; c < half; ++c) rowSum += static_cast<float>(row * half + c + 1);
      for (int r = 0; r < 2; ++r) colSum += static_cast<float>(r * half + col + 1);
      const float worldSum = static_cast<float>(P * (P + 1) / 2);
      for (std::size_t i = 0; i < n; i += 997) {
        ASSERT_EQ(viaWorld[i], worldSum) << "round " << round;
        ASSERT_EQ(viaRow[i], rowSum) << "round " << round;
        ASSERT_EQ(viaCol[i], colSum) << "round " << round;
      }
    }
  });
  for (int rank = 0; rank < P; ++rank) {
    // Its peers' transports are the parent's for the same ranks.
    const std::vector<std::string> all = world.context(rank).transports();
    const std::vector<std::string> colTransports = cols[rank]->transports();
    ASSERT_EQ(colTransports.size(), 2u);
    const int half = P / 2, col = rank % half;
    EXPECT_EQ(colTransports[1], all[static_cast<std::size_t>(half + col)]);
    EXPECT_EQ(cols[rank]->describePeer(1), world.context(rank).describePeer(half + col));
    // Its own flight record, numbered from 0.
    const std::vector<FlightEntry> calls = rows[rank]->flightRecord();
    ASSERT_EQ(calls.size(), 5u);
    for (std::size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(calls[i].seq, i);
    EXPECT_EQ(world.context(rank).flightRecord().size(), 5u);
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, Split, ::testing::ValuesIn(test::worldSizes({2, 4, 6, 8})),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return "P" + std::to_string(p.param);
                         });

// A list in any order: a rank's place in it is its rank, for roots and block order alike.
TEST(SplitOrder, ThePlaceInTheListIsTheRank) {
  World world(4, worldOptions());
  world.runOk([](int rank, Context& ctx) {
    if (rank == 2) return;  // not a member: it does not call split()
    const std::vector<int> ranks{3, 0, 1};
    auto sub = ctx.split(ranks, "reversed");
    const int mine = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
    EXPECT_EQ(sub->rank(), mine);
    std::int32_t value = rank * 10, all[3] = {};
    allgather(*sub, &value, all, 1, DataType::kInt32);
    EXPECT_EQ(all[0], 30);
    EXPECT_EQ(all[1], 0);
    EXPECT_EQ(all[2], 10);
    std::int64_t word = sub->rank() == 0 ? 77 : -1;  // root 0 is rank 3 of the parent
    broadcast(*sub, &word, 1, DataType::kInt64, 0);
    EXPECT_EQ(word, 77);
    // Every collective's schedule runs there: reduce-scatter and alltoall too.
    std::vector<std::int32_t> in(6), out(2);
    std::iota(in.begin(), in.end(), rank);
    reduceScatter(*sub, in.data(), out.data(), 2, DataType::kInt32);
    const int base = 2 * sub->rank();
    EXPECT_EQ(out[0], (base + 3) + (base + 0) + (base + 1));
    EXPECT_EQ(out[1], (base + 1 + 3) + (base + 1 + 0) + (base + 1 + 1));
    std::vector<std::int32_t> send(3), recv(3);
    for (int p = 0; p < 3; ++p) send[p] = sub->rank() * 100 + p;
    alltoall(*sub, send.data(), recv.data(), 1, DataType::kInt32);
    for (int p = 0; p < 3; ++p) EXPECT_EQ(recv[p], p * 100 + sub->rank());
  });
}

// Point to point with the same tag on the parent and a sub-context at once: each receive
// gets its own context's message.
TEST(SplitPointToPoint, TagsAreTheContextsOwn) {
  World world(3, worldOptions());
  world.runOk([](int rank, Context& ctx) {
    if (rank == 1) return;
    auto sub = ctx.split({2, 0}, "pair");
    const int peer = rank == 0 ? 2 : 0;
    std::int32_t viaWorld = rank, viaSub = 1000 + rank, gotWorld = -1, gotSub = -1;
    Work a = sendAsync(ctx, &viaWorld, 1, DataType::kInt32, peer, 5);
    Work b = sendAsync(*sub, &viaSub, 1, DataType::kInt32, 1 - sub->rank(), 5);
    recv(*sub, &gotSub, 1, DataType::kInt32, 1 - sub->rank(), 5);
    recv(ctx, &gotWorld, 1, DataType::kInt32, peer, 5);
    a.wait();
    b.wait();
    EXPECT_EQ(gotWorld, peer);
    EXPECT_EQ(gotSub, 1000 + peer);
    // Stats count per connection: the sub-context's peer is the parent's rank `peer`.
    const ContextStats s = sub->stats();
    ASSERT_EQ(s.peers.size(), 1u);
    EXPECT_EQ(s.peers[0].rank, 1 - sub->rank());
    EXPECT_EQ(s.peers[0].messagesReceived, 2u);  // both contexts' messages on that pair
  });
}

TEST(SplitNested, ASubContextSplitsAgain) {
  World world(4, worldOptions());
  world.runOk([](int rank, Context& ctx) {
    if (rank == 0) return;
    auto three = ctx.split({1, 2, 3}, "three");
    std::int32_t v = rank, sum = 0;
    if (rank != 1) {
      auto two = three->split({2, 1}, "two");  // ranks 3 and 2 of the world
      EXPECT_EQ(two->rank(), rank == 3 ? 0 : 1);
      EXPECT_EQ(two->parent(), three);
      allreduce(*two, &v, &sum, 1, DataType::kInt32);
      EXPECT_EQ(sum, 5);
      EXPECT_EQ(two->describePeer(1 - two->rank()), ctx.describePeer(rank == 3 ? 2 : 3));
    }
    allreduce(*three, &v, &sum, 1, DataType::kInt32);
    EXPECT_EQ(sum, 6);
  });
}

TEST(SplitAlone, ASubContextOfOneRank) {
  World world(2, worldOptions());
  world.runOk([](int rank, Context& ctx) {
    auto alone = ctx.split({rank}, key("alone", rank));
    EXPECT_EQ(alone->size(), 1);
    std::int32_t v = 7 + rank, out = 0;
    allreduce(*alone, &v, &out, 1, DataType::kInt32);
    EXPECT_EQ(out, 7 + rank);
    allreduce(ctx, &v, &out, 1, DataType::kInt32);
    EXPECT_EQ(out, 15);
  });
}

TEST(SplitErrors, BadListsAreRefusedNamingTheRank) {
  World world(3, worldOptions());
  world.runOk([](int rank, Context& ctx) {
    auto refused = [&](const std::vector<int>& ranks, const std::string& needle) {
      try {
        ctx.split(ranks, "bad");
        ADD_FAILURE() << "split accepted a bad list";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        EXPECT_EQ(e.rank(), rank);
      }
    };
    refused({}, "empty");
    refused({0, 3}, "rank 3 is outside [0, 3)");
    refused({rank, rank}, "listed twice");
    refused({(rank + 1) % 3}, "not among the ranks");
    try {
      ctx.split({rank}, "");
      ADD_FAILURE() << "split accepted an empty name";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("name is empty"), std::string::npos);
    }
  });
}

// A list that differs fails the split on every member, each naming a rank whose list differs.
TEST(SplitErrors, ListsThatDifferFailEveryMember) {
  World world(3, worldOptions());
  const auto errors = world.run([](int rank, Context& ctx) {
    // Rank 0 lists {0, 1, 2}; rank 1 {0, 2, 1}; rank 2 {0, 1, 2}.
    const std::vector<int> ranks =
        rank == 1 ? std::vector<int>{0, 2, 1} : std::vector<int>{0, 1, 2};
    ctx.split(ranks, "differ", 3s);
  });
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::string what = test::messageOf(errors[rank]);
    EXPECT_NE(what.find("this rank splits ranks [0,2,1], the published list is [0,1,2]"),
              std::string::npos)
        << what;
    try {
      std::rethrow_exception(errors[rank]);
    } catch (const MismatchError& e) {
      EXPECT_EQ(e.peer(), rank == 1 ? 0 : 1);
    } catch (...) {
      ADD_FAILURE() << "not a MismatchError: " << what;
    }
  }
  for (const char* kind : {"record", "ack/0", "ack/1", "ack/2", "done"}) {
    const std::string key = std::string("split/0/") + kind + "/1/differ";
    EXPECT_FALSE(world.context(0).store()->check({key})) << "a refused split's key " << key;
  }
}

// Lists whose first ranks differ: each takes itself for the first; both are told.
TEST(SplitErrors, ListsWithAnotherFirstRankFailBoth) {
  World world(2, worldOptions());
  const auto errors = world.run([](int rank, Context& ctx) {
    ctx.split(rank == 0 ? std::vector<int>{0, 1} : std::vector<int>{1, 0}, "first", 3s);
  });
  for (int rank = 0; rank < 2; ++rank) {
    const std::string what = test::messageOf(errors[rank]);
    EXPECT_NE(what.find("the published list is"), std::string::npos) << rank << ": " << what;
  }
}

// A member that never comes: every other member's split ends at its timeout, naming it.
TEST(SplitErrors, AMemberThatNeverComesTimesOut) {
  World world(3, worldOptions());
  const auto errors = world.run([](int rank, Context& ctx) {
    if (rank != 2) ctx.split({0, 1, 2}, "absent", 300ms);
  });
  for (int rank : {0, 1}) {
    const std::string what = test::messageOf(errors[rank]);
    EXPECT_NE(what.find("rank 2 of the list did not come within 300 ms"), std::string::npos)
        << rank << ": " << what;
  }
}

// A name comes again at once: each split of it is its own.
TEST(SplitNames, ANameComesAgain) {
  World world(3, worldOptions());
  world.runOk([](int rank, Context& ctx) {
    std::vector<std::shared_ptr<Context>> subs;
    for (int i = 0; i < 4; ++i) subs.push_back(ctx.split({0, 1, 2}, "again"));
    for (int i = 0; i < 4; ++i) {
      std::int32_t v = rank + i, sum = 0;
      allreduce(*subs[static_cast<std::size_t>(3 - i)], &v, &sum, 1, DataType::kInt32);
      EXPECT_EQ(sum, 3 + 3 * i);
    }
  });
}

// avg divides by the split's ranks, not the parent's. A split whose ranks share memory has a
// shared-memory group of its own (over shm; not over tcp), which runs the shm algorithms
// beside its parent's calls; a split of one rank has none, and says why when one is asked for.
TEST(SplitAlgorithms, AvgAndASharedMemoryGroupOfItsOwn) {
  World world(4, worldOptions());
  world.runOk([](int rank, Context& ctx) {
    auto pair = ctx.split({rank / 2 * 2, rank / 2 * 2 + 1}, key("pair", rank / 2));
    EXPECT_EQ(pair->sharedMemory(), ctx.sharedMemory());
    for (const char* algorithm : {"ring", "recursive_doubling", ""}) {
      std::vector<float> v(1000, static_cast<float>(rank)), out(1000);
      AllreduceOptions options;
      options.op = ReduceOpKind::kAvg;
      if (*algorithm != 0) options.algorithm = algorithm;
      allreduce(*pair, v.data(), out.data(), v.size(), DataType::kFloat32, options);
      EXPECT_EQ(out[999], static_cast<float>(rank / 2 * 2) + 0.5f) << algorithm;
    }
    AllreduceOptions shm;
    shm.algorithm = "shm";
    if (ctx.sharedMemory()) {
      for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{300000}}) {
        std::vector<std::int32_t> v(n, rank + 1), out(n), all(n);
        allreduce(*pair, v.data(), out.data(), n, DataType::kInt32, shm);
        allreduce(ctx, v.data(), all.data(), n, DataType::kInt32, shm);  // the parent's between
        ASSERT_EQ(out[n - 1], rank / 2 * 4 + 3) << n;
        ASSERT_EQ(out[0], rank / 2 * 4 + 3) << n;
        ASSERT_EQ(all[n / 2], 10) << n;
      }
      CollectiveOptions viaShm;
      viaShm.algorithm = "shm";
      std::vector<std::int64_t> mine(300, rank), both(600);
      allgather(*pair, mine.data(), both.data(), mine.size(), DataType::kInt64, viaShm);
      EXPECT_EQ(both[0], rank / 2 * 2);
      EXPECT_EQ(both[599], rank / 2 * 2 + 1);
    } else {
      std::int32_t v = 1, out = 0;
      try {
        allreduce(*pair, &v, &out, 1, DataType::kInt32, shm);
        ADD_FAILURE() << "a split across tcp ran the shm algorithm";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("its ranks do not all share memory"),
                  std::string::npos)
            << e.what();
      }
    }
    std::int32_t v = 1, out = 0;
    auto alone = ctx.split({rank}, key("alone", rank));
    EXPECT_FALSE(alone->sharedMemory() && alone->size() > 1);
    try {
      allreduce(*alone, &v, &out, 1, DataType::kInt32, shm);
      ADD_FAILURE() << "a split of one rank ran the shm algorithm";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("it has one rank"), std::string::npos) << e.what();
    }
    allreduce(*alone, &v, &out, 1, DataType::kInt32);
    EXPECT_EQ(out, 1);
    allreduce(ctx, &v, &out, 1, DataType::kInt32);  // the parent's group is still in step
    EXPECT_EQ(out, 4);
  });
}

// Every rank has SharedGroup::kSubGroupSlots slots: that many live splits get groups, the
// next ones take the point-to-point algorithms (with the same results), and the slots come
// back once their splits are gone, for splits of other ranks too.
TEST(SplitAlgorithms, SlotsServeEightSplitsAtOnceAndComeBack) {
  World world(4, worldOptions());
  if (!world.context(0).sharedMemory()) GTEST_SKIP() << "over tcp: no shared-memory groups";
  const int slots = transport::SharedGroup::kSubGroupSlots;
  world.runOk([&](int rank, Context& ctx) {
    std::vector<std::shared_ptr<Context>> live;
    const std::vector<int> pair{rank / 2 * 2, rank / 2 * 2 + 1};
    for (int i = 0; i < slots + 2; ++i) {
      live.push_back(ctx.split(pair, key("many", rank / 2) + "/" + std::to_string(i)));
      EXPECT_EQ(live.back()->sharedMemory(), i < slots) << "split " << i;
    }
    for (int i = 0; i < slots + 2; ++i) {
      std::vector<std::int32_t> v(777, rank + i), out(777);
      allreduce(*live[static_cast<std::size_t>(i)], v.data(), out.data(), v.size(),
                DataType::kInt32);
      ASSERT_EQ(out[776], rank / 2 * 4 + 1 + 2 * i) << "split " << i;
    }
    live.clear();
    barrier(ctx);  // every member let go of its slots
    // Pairs across the old ones: the slots were each member's last pair's.
    const std::vector<int> across{rank % 2, rank % 2 + 2};
    for (int round = 0; round < 3; ++round) {
      auto sub = ctx.split(across, key("across", rank % 2) + "/" + std::to_string(round));
      EXPECT_TRUE(sub->sharedMemory()) << "round " << round;
      std::vector<std::int32_t> v(5000, rank), out(5000);
      AllreduceOptions shm;
      shm.algorithm = "shm";
      allreduce(*sub, v.data(), out.data(), v.size(), DataType::kInt32, shm);
      ASSERT_EQ(out[4999], 2 * (rank % 2) + 2) << "round " << round;
      sub.reset();
      barrier(ctx);
    }
  });
}

// A call queued behind another thread's blocking call times out at its own deadline.
TEST(SplitDeadlines, AQueuedCallTimesOutAtItsOwnDeadline) {
  World world(2, worldOptions());
  std::vector<std::shared_ptr<Context>> subs(2);
  world.runOk([&](int rank, Context& ctx) { subs[rank] = ctx.split({0, 1}, "late"); });
  const auto errors = world.run([&](int rank, Context& ctx) {
    if (rank == 1) return;  // it never comes
    std::string queued;
    double seconds = 0;
    std::thread other([&] {
      std::this_thread::sleep_for(100ms);  // the main thread drives by then
      const auto start = std::chrono::steady_clock::now();
      std::int32_t v = 1, out = 0;
      AllreduceOptions options;
      options.timeout = 300ms;
      try {
        allreduce(*subs[0], &v, &out, 1, DataType::kInt32, options);
      } catch (const Error& e) {
        queued = e.what();
      }
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
    std::int32_t v = 0;
    CollectiveOptions options;
    options.timeout = 20s;
    try {
      recv(ctx, &v, 1, DataType::kInt32, 1, 7, options);
    } catch (const Error&) {
      // the queued call's timeout failed the context
    }
    other.join();
    EXPECT_NE(queued.find("timed out after 300 ms"), std::string::npos) << queued;
    EXPECT_NE(queued.find("of sub-context"), std::string::npos) << queued;
    EXPECT_LT(seconds, 5.0) << "the queued call waited for the driver's own deadline";
  });
  EXPECT_EQ(test::messageOf(errors[0]), "");
}

// A split comes, runs and goes on one thread while another thread's blocking call holds the
// engine (until rank 1 sends, which it does only once the split has gone): making and
// removing its shared-memory lane waits for no other call.
TEST(SplitDeadlines, ASplitComesAndGoesWhileAnotherThreadDrives) {
  World world(2, worldOptions());
  std::atomic<bool> gone{false};
  world.runOk([&](int rank, Context& ctx) {
    auto useASplit = [&] {
      auto sub = ctx.split({0, 1}, "meanwhile");
      std::int32_t x = rank + 1, y = 0;
      allreduce(*sub, &x, &y, 1, DataType::kInt32);
      EXPECT_EQ(y, 3);
    };
    std::int32_t v = 0;
    if (rank == 1) {
      useASplit();
      const auto until = std::chrono::steady_clock::now() + 10s;
      while (!gone.load() && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(1ms);
      }
      v = 42;
      send(ctx, &v, 1, DataType::kInt32, 0, 7);
      return;
    }
    double seconds = 0;
    std::thread other([&] {
      std::this_thread::sleep_for(100ms);  // the main thread drives its receive by then
      const auto start = std::chrono::steady_clock::now();
      useASplit();
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      gone = true;
    });
    CollectiveOptions options;
    options.timeout = 20s;
    recv(ctx, &v, 1, DataType::kInt32, 1, 7, options);
    other.join();
    EXPECT_EQ(v, 42);
    EXPECT_LT(seconds, 5.0) << "the split waited for the receive's deadline";
  });
}

TEST(SplitErrors, AFirstRankThatNeverComesTimesOut) {
  World world(2, worldOptions());
  const auto errors = world.run([](int rank, Context& ctx) {
    if (rank == 1) ctx.split({0, 1}, "late", 300ms);
  });
  EXPECT_EQ(test::messageOf(errors[0]), "");
  const std::string what = test::messageOf(errors[1]);
  EXPECT_NE(what.find("rank 0, the first of the list, did not publish the sub-context within "
                      "300 ms"),
            std::string::npos)
      << what;
}

TEST(SplitErrors, TagsAboveTheirRangeAreRefused) {
  World world(1, worldOptions());
  std::int32_t v = 0;
  try {
    send(world.context(0), &v, 1, DataType::kInt32, 0, std::uint64_t{1} << 40);
    ADD_FAILURE() << "a tag of 2^40 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("above the largest, 2^40 - 1"), std::string::npos)
        << e.what();
  }
}

// Different collectives on one sub-context: a mismatch that names the sub-context's call.
TEST(SplitErrors, AMismatchedCollectiveNamesTheSubContext) {
  World world(3, worldOptions());
  std::vector<std::shared_ptr<Context>> subs(3);
  world.runOk([&](int rank, Context& ctx) {
    if (rank != 1) subs[rank] = ctx.split({0, 2}, "pair");
  });
  const auto errors = world.run([&](int rank, Context&) {
    if (rank == 1) return;
    CollectiveOptions options;
    options.timeout = 5s;
    std::vector<float> a(16, 1.0f), b(16);
    if (rank == 0) {
      AllreduceOptions reduceOptions;
      reduceOptions.timeout = 5s;
      allreduce(*subs[rank], a.data(), b.data(), a.size(), DataType::kFloat32, reduceOptions);
    } else {
      broadcast(*subs[rank], a.data(), a.size(), DataType::kFloat32, 0, options);
    }
  });
  for (int rank : {0, 2}) {
    const std::string what = test::messageOf(errors[rank]);
    EXPECT_NE(what.find("of sub-context"), std::string::npos) << "rank " << rank << ": " << what;
  }
}

// A sub-context shares its parent's fate: aborting it fails the parent's calls too.
TEST(SplitFate, AbortingASubContextFailsItsParent) {
  World world(2, worldOptions());
  const auto errors = world.run([](int rank, Context& ctx) {
    auto sub = ctx.split({0, 1}, "doomed");
    barrier(*sub);
    if (rank == 0) sub->abort("the test aborts the sub-context");
    std::int32_t v = 1, out = 0;
    AllreduceOptions options;
    options.timeout = 5s;
    allreduce(ctx, &v, &out, 1, DataType::kInt32, options);
  });
  const std::string what = test::messageOf(errors[0]);
  EXPECT_NE(what.find("the test aborts the sub-context"), std::string::npos) << what;
  EXPECT_NE(test::messageOf(errors[1]), "");
}

}  // namespace
}  // namespace collx
