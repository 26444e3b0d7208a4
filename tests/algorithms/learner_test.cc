// Selection that learns inside a job (COLLX_SELECTION=learn, algorithms/learner.h): the
// learner's bookkeeping on its own (trials in turn, the cold first call left out, the
// fastest agreed time wins, classes by size, nothing to learn where one algorithm can run),
// then real ranks as threads: every call right while learning, every rank ending on the same
// algorithm, nonblocking calls in between, a named algorithm left alone.
#include "collx/algorithms/learner.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "collx/collx.h"
#include "util/world.h"

namespace collx {
namespace {

using algorithms::Collective;
using algorithms::Learner;

algorithms::ScheduleParams allreduceOf(std::uint64_t bytes, int P) {
  algorithms::UniformCall call;
  call.ranks = P;
  call.count = bytes / 4;
  return algorithms::paramsOf(call, 0);
}

TEST(Learner, TriesEveryCandidateInTurnThenKeepsTheFastestAgreed) {
  algorithms::SelectionPolicy policy;
  const auto params = allreduceOf(65536, 4);
  const auto table = algorithms::select(params, policy);
  const auto candidates = algorithms::eligibleAlgorithms(params, policy);
  ASSERT_GT(candidates.size(), 2u);
  const std::size_t C = candidates.size();
  Learner learner(2);
  int slot = -1;
  bool complete = false;
  for (std::size_t i = 0; i < 3 * C; ++i) {
    const Learner::Pick pick = learner.pick(params, policy, table, /*blocking=*/true);
    ASSERT_GE(pick.slot, 0) << i;
    slot = pick.slot;
    EXPECT_EQ(pick.algorithm, candidates[i % C]) << i;
    EXPECT_EQ(pick.cold, i < C) << i;
    // Candidate k takes k + 1 ms, except the cold first calls (far slower: left out).
    const double seconds = pick.cold ? 1.0 : (1 + static_cast<double>(i % C)) * 1e-3;
    complete = learner.record(pick, seconds);
    EXPECT_EQ(complete, i == 3 * C - 1) << i;
  }
  std::vector<double> offered = learner.offer(slot);
  ASSERT_EQ(offered.size(), C);
  for (std::size_t k = 0; k < C; ++k) EXPECT_DOUBLE_EQ(offered[k], (1 + k) * 1e-3);
  // Another rank was slower with the first candidate: the agreed maxima decide.
  offered[0] = 9e-3;
  const algorithms::AlgorithmInfo& chosen = learner.decide(slot, offered);
  EXPECT_EQ(&chosen, candidates[1]);
  for (bool blocking : {true, false}) {
    const Learner::Pick later = learner.pick(params, policy, table, blocking);
    EXPECT_EQ(later.algorithm, candidates[1]);
    EXPECT_EQ(later.slot, -1);
    EXPECT_STREQ(later.source, "learned");
  }
  ASSERT_EQ(learner.learned().size(), 1u);
  EXPECT_EQ(learner.learned()[0].first, "allreduce, 64 KiB to under 128 KiB");
  EXPECT_EQ(learner.learned()[0].second, candidates[1]->name);
}

TEST(Learner, ClassesBySizeAndNonblockingCallsTakeTheTable) {
  algorithms::SelectionPolicy policy;
  Learner learner(1);
  const auto small = allreduceOf(64, 4), large = allreduceOf(1 << 20, 4);
  const auto tableSmall = algorithms::select(small, policy);
  const Learner::Pick a = learner.pick(small, policy, tableSmall, true);
  const Learner::Pick b = learner.pick(large, policy, algorithms::select(large, policy), true);
  EXPECT_NE(a.slot, b.slot);
  EXPECT_EQ(a.algorithm, b.algorithm);  // each class starts with the first candidate
  // A nonblocking call while its class learns: the table's choice, no trial.
  const Learner::Pick n = learner.pick(small, policy, tableSmall, false);
  EXPECT_EQ(n.slot, -1);
  EXPECT_EQ(n.algorithm, tableSmall.algorithm);
  // Where one algorithm alone can take the call, there is nothing to learn.
  algorithms::ScheduleParams gatherv = small;
  gatherv.coll = Collective::kGatherv;
  const auto only = algorithms::eligibleAlgorithms(gatherv, policy);
  if (only.size() == 1) {
    EXPECT_EQ(learner.pick(gatherv, policy, algorithms::select(gatherv, policy), true).slot, -1);
  }
}

ContextOptions learning() {
  ContextOptions options;
  options.selection = "learn";
  return options;
}

// The algorithms rank `ctx` ran a collective with so far: name -> calls.
std::map<std::string, std::uint64_t> callsOf(Context& ctx, const std::string& collective) {
  std::map<std::string, std::uint64_t> out;
  for (const auto& a : ctx.stats().algorithms) {
    if (a.collective == collective) out[a.algorithm] = a.calls;
  }
  return out;
}
std::map<std::string, std::uint64_t> allreduces(Context& ctx) { return callsOf(ctx, "allreduce"); }

// The one algorithm whose calls grew by `calls` between two readings (every other unchanged).
std::string grownBy(const std::map<std::string, std::uint64_t>& before,
                    const std::map<std::string, std::uint64_t>& after, std::uint64_t calls) {
  std::string grew;
  for (const auto& [name, n] : after) {
    const std::uint64_t was = before.count(name) ? before.at(name) : 0;
    if (n == was) continue;
    EXPECT_EQ(n - was, calls) << name;
    EXPECT_TRUE(grew.empty()) << grew << " and " << name;
    grew = name;
  }
  return grew;
}

class LearningJob : public ::testing::TestWithParam<int> {};

TEST_P(LearningJob, EveryCallRightAndEveryRankEndsOnOneAlgorithm) {
  const int P = GetParam();
  test::World world(P, learning());
  std::vector<std::map<std::string, std::uint64_t>> before(P), after(P);
  world.runOk([&](int rank, Context& ctx) {
    constexpr std::uint64_t kCount = 65536;  // 256 KiB of float32: 3 trials per algorithm
    std::vector<float> data(kCount);
    // Enough calls for every candidate's 1 + 3 trials, with nonblocking calls in between.
    for (int i = 0; i < 40; ++i) {
      for (std::uint64_t k = 0; k < kCount; ++k) data[k] = static_cast<float>(rank + k % 7 + i);
      if (i % 5 == 4) {
        allreduceAsync(ctx, data.data(), data.data(), kCount, DataType::kFloat32).wait();
      } else {
        allreduce(ctx, data.data(), data.data(), kCount, DataType::kFloat32);
      }
      for (std::uint64_t k = 0; k < kCount; ++k) {
        const float want = static_cast<float>(P * (P - 1) / 2 + P * (k % 7 + i));
        ASSERT_EQ(data[k], want) << "rank " << rank << " call " << i << " element " << k;
      }
    }
    before[rank] = allreduces(ctx);
    for (int i = 0; i < 10; ++i)
      allreduce(ctx, data.data(), data.data(), kCount, DataType::kFloat32);
    after[rank] = allreduces(ctx);
  });
  // Learning tried several algorithms; the last ten calls ran one, the same on every rank.
  EXPECT_GT(before[0].size(), 2u);
  std::set<std::string> learned;
  for (int r = 0; r < P; ++r) learned.insert(grownBy(before[r], after[r], 10));
  EXPECT_EQ(learned.size(), 1u);
}

// A rooted collective's trials are fenced (the ranks meet after each): the calls stay right
// and every rank ends on the same algorithm.
TEST(LearningJobs, BroadcastsLearnToo) {
  constexpr int P = 3;
  test::World world(P, learning());
  std::vector<std::map<std::string, std::uint64_t>> before(P), after(P);
  world.runOk([&](int rank, Context& ctx) {
    constexpr std::uint64_t kCount = 65536;
    std::vector<std::int32_t> data(kCount);
    for (int i = 0; i < 40; ++i) {
      for (std::uint64_t k = 0; k < kCount; ++k) {
        data[k] = rank == 1 ? static_cast<std::int32_t>(k * 3 + i) : -1;
      }
      broadcast(ctx, data.data(), kCount, DataType::kInt32, /*root=*/1);
      for (std::uint64_t k = 0; k < kCount; k += 97) {
        ASSERT_EQ(data[k], static_cast<std::int32_t>(k * 3 + i)) << rank << " " << i << " " << k;
      }
      if (i == 29) before[rank] = callsOf(ctx, "broadcast");
    }
    after[rank] = callsOf(ctx, "broadcast");
  });
  EXPECT_GT(before[0].size(), 2u);
  std::set<std::string> learned;
  for (int r = 0; r < P; ++r) learned.insert(grownBy(before[r], after[r], 10));
  EXPECT_EQ(learned.size(), 1u);
}

TEST(LearningJobs, ANamedAlgorithmIsKeptAndABadSelectionIsRefused) {
  test::World world(3, learning());
  world.runOk([&](int, Context& ctx) {
    std::vector<float> data(256, 1.0f);
    AllreduceOptions ring;
    ring.algorithm = "ring";
    for (int i = 0; i < 30; ++i) {
      allreduce(ctx, data.data(), data.data(), data.size(), DataType::kFloat32, ring);
    }
    EXPECT_EQ(allreduces(ctx), (std::map<std::string, std::uint64_t>{{"ring", 30}}));
  });
  ContextOptions bad;
  bad.selection = "guess";
  EXPECT_THROW(test::World(2, bad), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Sizes, LearningJob, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return "P" + std::to_string(p.param);
                         });

}  // namespace
}  // namespace collx
