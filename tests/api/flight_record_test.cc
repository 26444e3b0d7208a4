// The flight recorder through a context (Context::flightRecord): what it says of real calls,
// blocking and nonblocking, over shared memory, tcp and point to point; what a waiting call
// waits for; a failed call's kind and message; COLLX_TRACE_BUFFER.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "collx/collx.h"
#include "util/test_util.h"
#include "util/world.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
using test::over;
using test::World;

class FlightRecord : public ::testing::TestWithParam<const char*> {};

TEST_P(FlightRecord, HoldsEachCallWithWhatItWasAndHowItEnded) {
  World world(3, over(GetParam()));
  world.runOk([](int rank, Context& ctx) {
    std::vector<float> a(1000, 1.0f), b(1000);
    allreduce(ctx, a.data(), b.data(), a.size(), DataType::kFloat32);
    allreduce(ctx, a.data(), b.data(), 10, DataType::kFloat32);
    std::vector<std::int32_t> v(7, rank);
    broadcast(ctx, v.data(), v.size(), DataType::kInt32, 2);
    barrier(ctx);
  });
  const std::vector<FlightEntry> calls = world.context(1).flightRecord();
  ASSERT_EQ(calls.size(), 4u);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const FlightEntry& e = calls[i];
    EXPECT_EQ(e.seq, i) << i;
    EXPECT_TRUE(e.collective);
    EXPECT_FALSE(e.algorithm.empty());
    EXPECT_EQ(e.state, CallState::kCompleted) << callStateName(e.state);
    ASSERT_TRUE(e.ended.has_value());
    EXPECT_GE(*e.ended, e.started);
    EXPECT_LT(*e.ended - e.started, 60s);
    EXPECT_LT(std::chrono::system_clock::now() - e.started, 60s);
    EXPECT_FALSE(e.error.has_value());
    EXPECT_EQ(e.timeout, world.context(1).timeout());
    EXPECT_FALSE(e.transports.empty());
    const std::string medium = std::string(GetParam()) == "tcp" ? "tcp" : "shm";
    EXPECT_EQ(e.transports, std::vector<std::string>{medium}) << e.describe();
  }
  EXPECT_EQ(calls[0].name, "allreduce");
  EXPECT_EQ(calls[0].dtype, DataType::kFloat32);
  EXPECT_EQ(calls[0].count, 1000u);
  EXPECT_EQ(calls[0].op, "sum");
  EXPECT_EQ(calls[0].root, -1);
  EXPECT_EQ(calls[1].count, 10u);
  EXPECT_EQ(calls[2].name, "broadcast");
  EXPECT_EQ(calls[2].root, 2);
  EXPECT_EQ(calls[2].op, "");
  EXPECT_EQ(calls[2].dtype, DataType::kInt32);
  EXPECT_EQ(calls[2].describe(), "broadcast#2 (" + calls[2].algorithm + ", int32 x 7, root 2)");
  EXPECT_EQ(calls[3].name, "barrier");
  EXPECT_LT(calls[0].id, calls[3].id);
}

TEST_P(FlightRecord, AWaitingCallSaysWhomItWaitsFor) {
  World world(2, over(GetParam()));
  world.runOk([](int rank, Context& ctx) {
    std::vector<float> a(4, 1.0f), b(4);
    if (rank == 0) {
      Work w = allreduceAsync(ctx, a.data(), b.data(), a.size(), DataType::kFloat32);
      // Rank 1 comes late: the call waits, and says for whom.
      FlightEntry e;
      const auto until = std::chrono::steady_clock::now() + 5s;
      do {
        std::this_thread::sleep_for(5ms);
        e = ctx.flightRecord().back();
      } while (e.state != CallState::kWaiting && std::chrono::steady_clock::now() < until);
      EXPECT_EQ(e.state, CallState::kWaiting) << callStateName(e.state);
      EXPECT_EQ(e.waitingFor, 1);
      EXPECT_TRUE(e.waitingWhat == "recv" || e.waitingWhat == "send" || e.waitingWhat == "shm")
          << e.waitingWhat;
      EXPECT_TRUE(e.running.has_value());
      ASSERT_TRUE(e.waitingSince.has_value());
      EXPECT_GE(*e.waitingSince, e.started);
      ctx.store()->set("go", {1});
      w.wait();
    } else {
      ctx.store()->wait({"go"}, 10s);
      allreduce(ctx, a.data(), b.data(), a.size(), DataType::kFloat32);
    }
    const FlightEntry last = ctx.flightRecord().back();
    EXPECT_EQ(last.state, CallState::kCompleted);
    EXPECT_EQ(last.waitingFor, -1);  // it waits for nothing any more
  });
}

TEST_P(FlightRecord, ABlockingCallThatWaitsSaysWhomItWaitsFor) {
  // Read by another thread while the call blocks (over shared memory the call waits in the
  // group's own waits, over tcp in the engine's).
  World world(2, over(GetParam()));
  world.runOk([](int rank, Context& ctx) {
    std::vector<float> a(4, 1.0f), b(4);
    if (rank == 1) {
      ctx.store()->wait({"go"}, 10s);
      allreduce(ctx, a.data(), b.data(), a.size(), DataType::kFloat32);
      return;
    }
    FlightEntry seen;
    std::thread reader([&] {
      const auto until = std::chrono::steady_clock::now() + 5s;
      while (std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(5ms);
        const auto calls = ctx.flightRecord();
        if (!calls.empty() && calls.back().state == CallState::kWaiting) {
          seen = calls.back();
          break;
        }
      }
      ctx.store()->set("go", {1});
    });
    allreduce(ctx, a.data(), b.data(), a.size(), DataType::kFloat32);
    reader.join();
    EXPECT_EQ(seen.state, CallState::kWaiting) << callStateName(seen.state);
    EXPECT_EQ(seen.waitingFor, 1);
    EXPECT_EQ(seen.name, "allreduce");
    EXPECT_EQ(ctx.flightRecord().back().state, CallState::kCompleted);
  });
}

TEST_P(FlightRecord, AFailedCallKeepsItsKindAndMessage) {
  World world(2, over(GetParam()));
  world.run([](int rank, Context& ctx) {
    std::vector<float> a(4, 1.0f), b(4);
    if (rank == 1) return;  // never calls: rank 0 times out
    AllreduceOptions options;
    options.timeout = 300ms;
    EXPECT_THROW(allreduce(ctx, a.data(), b.data(), a.size(), DataType::kFloat32, options),
                 TimeoutError);
    const FlightEntry e = ctx.flightRecord().back();
    EXPECT_EQ(e.state, CallState::kFailed);
    ASSERT_TRUE(e.error.has_value());
    EXPECT_EQ(*e.error, ErrorKind::kTimeout);
    EXPECT_NE(e.errorText.find("timed out after 300 ms"), std::string::npos) << e.errorText;
    ASSERT_TRUE(e.ended.has_value());
    EXPECT_GE(*e.ended - e.started, 250ms);
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, FlightRecord, ::testing::Values("tcp", "auto"));

TEST(FlightRecordP2P, SendsAndReceivesAreRecordedWithPeerAndTag) {
  World world(2, over("tcp"));
  world.runOk([](int rank, Context& ctx) {
    std::vector<std::int64_t> v(5, rank);
    if (rank == 0) {
      send(ctx, v.data(), v.size(), DataType::kInt64, 1, 42);
    } else {
      recv(ctx, v.data(), v.size(), DataType::kInt64, 0, 42);
    }
    const std::vector<FlightEntry> calls = ctx.flightRecord();
    ASSERT_EQ(calls.size(), 1u);
    const FlightEntry& e = calls[0];
    EXPECT_FALSE(e.collective);
    EXPECT_EQ(e.name, rank == 0 ? "send" : "recv");
    EXPECT_EQ(e.seq, 42u);
    EXPECT_EQ(e.peer, 1 - rank);
    EXPECT_EQ(e.count, 5u);
    EXPECT_EQ(e.dtype, DataType::kInt64);
    EXPECT_EQ(e.algorithm, "");
    EXPECT_EQ(e.transports, std::vector<std::string>{"tcp"});
    EXPECT_EQ(e.state, CallState::kCompleted);
    EXPECT_EQ(e.describe(), e.name + "#42 (peer " + std::to_string(1 - rank) + ", int64 x 5)");
  });
}

TEST(FlightRecordSize, KeepsTheLastCallsAndZeroTurnsItOff) {
  ContextOptions options = over("tcp");
  options.traceBuffer = 4;
  {
    World world(2, options);
    world.runOk([](int, Context& ctx) {
      for (int i = 0; i < 10; ++i) barrier(ctx);
      const std::vector<FlightEntry> calls = ctx.flightRecord();
      ASSERT_EQ(calls.size(), 4u);
      EXPECT_EQ(calls.front().seq, 6u);
      EXPECT_EQ(calls.back().seq, 9u);
    });
  }
  options.traceBuffer = 0;
  World world(2, options);
  world.runOk([](int, Context& ctx) {
    barrier(ctx);
    EXPECT_TRUE(ctx.flightRecord().empty());
  });
}

}  // namespace
}  // namespace collx
