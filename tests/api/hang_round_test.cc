// The hang report's rounds in one process (ranks as threads, one watcher thread serving them
// all): Context::dumpState() names the rank that holds the others, whatever that rank is doing.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "collx/collx.h"
#include "util/world.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
using test::World;

ContextOptions over(const char* transport) {
  ContextOptions options;
  options.transport = transport;
  return options;
}

class HangRound : public ::testing::TestWithParam<const char*> {};

TEST_P(HangRound, DumpStateNamesTheRankThatHasNotCalled) {
  World world(4, over(GetParam()));
  world.runOk([](int rank, Context& ctx) {
    std::vector<float> a(64, 1.0f), b(64);
    allreduce(ctx, a.data(), b.data(), a.size(), DataType::kFloat32);  // #0 on every rank
    if (rank == 2) {
      // Busy outside collx while the others wait in #1; it still answers (its watcher does).
      ctx.store()->wait({"reported"}, 20s);
      allreduce(ctx, a.data(), b.data(), a.size(), DataType::kFloat32);
      return;
    }
    Work w = allreduceAsync(ctx, a.data(), b.data(), a.size(), DataType::kFloat32);
    if (rank == 0) {
      std::this_thread::sleep_for(100ms);
      const auto started = std::chrono::steady_clock::now();
      const std::string report = ctx.dumpState();
      EXPECT_LT(std::chrono::steady_clock::now() - started, 3s);
      EXPECT_EQ(report.rfind("collx hang report, job ", 0), 0u) << report;
      EXPECT_NE(report.find("4 ranks"), std::string::npos) << report;
      EXPECT_NE(report.find("allreduce#1"), std::string::npos) << report;
      EXPECT_NE(report.find("rank 2: has not called allreduce#1"), std::string::npos) << report;
      EXPECT_NE(report.find("ranks 0,1,3: in allreduce#1"), std::string::npos) << report;
      ctx.store()->set("reported", {1});
    }
    w.wait();
  });
}

TEST_P(HangRound, DumpStateOfAnIdleJobSaysNothingIsInFlight) {
  World world(2, over(GetParam()));
  world.runOk([](int rank, Context& ctx) {
    barrier(ctx);
    if (rank == 0) {
      ctx.store()->wait({"idle"}, 20s);  // rank 1 is out of the barrier too
      const std::string report = ctx.dumpState();
      EXPECT_EQ(report.rfind("collx hang report", 0), 0u) << report;
      EXPECT_EQ(report.find("not responding"), std::string::npos) << report;
      EXPECT_EQ(report.find("waiting"), std::string::npos) << report;
      // Rank 1's line (merged with rank 0's when both say the same).
      EXPECT_TRUE(report.find("rank 1: last completed barrier#0") != std::string::npos ||
                  report.find("ranks 0,1: last completed barrier#0") != std::string::npos)
          << report;
      ctx.store()->set("dumped", {1});
    } else {
      ctx.store()->set("idle", {1});
      ctx.store()->wait({"dumped"}, 20s);  // idle while rank 0 asks
    }
    barrier(ctx);
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, HangRound, ::testing::Values("tcp", "auto"));

TEST(HangRoundOff, DumpStateWithoutARecorderIsRefused) {
  ContextOptions options = over("tcp");
  options.traceBuffer = 0;
  World world(2, options);
  world.runOk([](int, Context& ctx) {
    EXPECT_THROW(ctx.dumpState(), InvalidArgument);
    EXPECT_TRUE(ctx.flightRecord().empty());
  });
}

}  // namespace
}  // namespace collx
