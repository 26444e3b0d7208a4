// Every collective and algorithm with ranks as threads over real TCP (loopback), against
// serial references: P in {1..17, 32, 64} x counts {0, 1, P-1, odd, large} x dtypes x ops
// (above 16 ranks: no large count and representative dtype-op pairs), in place and out of place,
// blocking and nonblocking. Results are exact: the inputs are small integers, so floating-point
// results are checked bit for bit.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "collx/algorithms/registry.h"
#include "collx/algorithms/selection.h"
#include "collx/collx.h"
#include "util/reference.h"
#include "util/test_util.h"
#include "util/world.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
using test::World;

// Counts: empty, one element, fewer than P, odd, and (up to kFullSweepMaxSize) large.
std::vector<std::uint64_t> countsFor(int size) {
  std::vector<std::uint64_t> out = {0, 1, static_cast<std::uint64_t>(size > 1 ? size - 1 : 2),
                                    1001};
  if (size <= test::kFullSweepMaxSize) out.push_back(3 * 65536 + 7);
  return out;
}

// Above kFullSweepMaxSize ranks every combination runs the representative pairs only.
bool fullSweep(int size) { return size <= test::kFullSweepMaxSize; }

std::vector<ReduceOpKind> opsFor(DataType type) {
  std::vector<ReduceOpKind> ops = {ReduceOpKind::kSum, ReduceOpKind::kProd, ReduceOpKind::kMin,
                                   ReduceOpKind::kMax, ReduceOpKind::kAvg};
  if (isInteger(type)) {
    ops.insert(ops.end(), {ReduceOpKind::kBand, ReduceOpKind::kBor, ReduceOpKind::kBxor});
  }
  return ops;
}

// The large count (and P above kFullSweepMaxSize) runs with a few representative (dtype, op)
// pairs only, to keep time down: every dtype, and the ops that differ in kernels.
bool largeCase(DataType type, ReduceOpKind op) {
  return (type == DataType::kFloat32 && op == ReduceOpKind::kSum) ||
         (type == DataType::kInt32 && op == ReduceOpKind::kMax) ||
         (type == DataType::kBfloat16 && op == ReduceOpKind::kSum) ||
         (type == DataType::kFloat16 && op == ReduceOpKind::kAvg) ||
         (type == DataType::kInt8 && op == ReduceOpKind::kBxor) ||
         (type == DataType::kFloat64 && op == ReduceOpKind::kProd);
}

struct AllreduceCase {
  int size;
  std::string algorithm;
};

void PrintTo(const AllreduceCase& c, std::ostream* os) {
  *os << "P=" << c.size << " " << c.algorithm;
}

class AllreduceTest : public ::testing::TestWithParam<AllreduceCase> {};

TEST_P(AllreduceTest, MatchesTheSerialReference) {
  const int P = GetParam().size;
  COLLX_NEED_FILES_FOR(P);
  if (GetParam().algorithm == "shm" && !test::worldsShareMemory()) {
    GTEST_SKIP()
        << "allreduce shm needs ranks that share memory; this copy runs over tcp or ibverbs";
  }
  World& world = test::worldOf(P);
  int combination = 0;
  for (std::uint64_t count : countsFor(P)) {
    for (DataType type : kAllDataTypes) {
      for (ReduceOpKind op : opsFor(type)) {
        if ((count > 10000 || !fullSweep(P)) && !largeCase(type, op)) continue;
        const bool inPlace = combination++ % 2 == 0;
        const auto expected = test::expectedReduction(P, count, type, op);
        std::vector<std::string> wrong(P);
        world.runOk([&](int rank, Context& ctx) {
          auto in = test::makeInput(rank, count, type, op);
          std::vector<std::uint8_t> out(in.size(), 0xAB);
          AllreduceOptions o;
          o.op = op;
          o.algorithm = GetParam().algorithm;
          if (inPlace) {
            allreduce(ctx, in.data(), in.data(), count, type, o);
            out = in;
          } else {
            allreduce(ctx, in.data(), out.data(), count, type, o);
            if (in != test::makeInput(rank, count, type, op)) wrong[rank] = "the input changed";
          }
          std::int64_t bad = test::firstDifference(out, expected, type);
          if (bad >= 0) {
            wrong[rank] = "element " + std::to_string(bad) + " is " +
                          std::to_string(test::loadValue(out.data(), bad, type)) + ", expected " +
                          std::to_string(test::loadValue(expected.data(), bad, type));
          }
        });
        for (int r = 0; r < P; ++r) {
          EXPECT_EQ(wrong[r], "") << "rank " << r << " of " << P << ", " << GetParam().algorithm
                                  << ", count " << count << ", " << dataTypeName(type) << ", "
                                  << reduceOpKindName(op) << (inPlace ? ", in place" : "");
        }
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

std::vector<AllreduceCase> allreduceCases() {
  std::vector<AllreduceCase> out;
  for (int P : test::worldSizes()) {
    for (const char* a :
         {"ring", "ring_chunked", "halving_doubling", "recursive_doubling", "knomial", "shm"}) {
      out.push_back({P, a});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Sizes, AllreduceTest, ::testing::ValuesIn(allreduceCases()),
                         [](const auto& p) {
                           return "P" + std::to_string(p.param.size) + "_" + p.param.algorithm;
                         });

class SizeTest : public ::testing::TestWithParam<int> {};

// Every allgather algorithm of the registry, and the default choice (""), which takes the
// decision tree's pick for each size. The inputs are made once per (count, type) and shared
// by the ranks; the large count runs with one type per algorithm, in turn, to keep time down.
TEST_P(SizeTest, AllgatherEveryAlgorithm) {
  const int P = GetParam();
  COLLX_NEED_FILES_FOR(P);
  World& world = test::worldOf(P);
  std::vector<std::string> names = {""};
  for (const std::string& name : test::algorithmsOf(algorithms::Collective::kAllgather)) {
    names.push_back(name);
  }
  ASSERT_GE(names.size(), 8u) << "ring, linear, bruck, recursive_doubling, neighbor_exchange, "
                                 "two_proc and sparbit should all be registered";
  constexpr DataType kTypes[] = {DataType::kInt8, DataType::kFloat16, DataType::kInt32,
                                 DataType::kFloat64};
  int combination = 0;
  for (std::size_t a = 0; a < names.size(); ++a) {
    const std::string& algorithm = names[a];
    for (std::uint64_t count : countsFor(P)) {
      for (std::size_t t = 0; t < std::size(kTypes); ++t) {
        if ((count > 10000 || !fullSweep(P)) && t != a % std::size(kTypes)) continue;
        const DataType type = kTypes[t];
        const bool inPlace = combination++ % 2 == 0;
        const std::size_t es = dataTypeSize(type);
        std::vector<std::vector<std::uint8_t>> inputs;
        for (int r = 0; r < P; ++r) {
          inputs.push_back(test::makeInput(r, count, type, ReduceOpKind::kSum));
        }
        std::vector<std::string> wrong(P);
        world.runOk([&](int rank, Context& ctx) {
          std::vector<std::uint8_t> out(count * es * P, 0xCD);
          CollectiveOptions o;
          o.algorithm = algorithm;
          if (inPlace) {
            std::copy(inputs[rank].begin(), inputs[rank].end(), out.begin() + rank * count * es);
            allgather(ctx, nullptr, out.data(), count, type, o);
          } else {
            allgather(ctx, inputs[rank].data(), out.data(), count, type, o);
          }
          for (int r = 0; r < P && wrong[rank].empty(); ++r) {
            if (!std::equal(inputs[r].begin(), inputs[r].end(), out.begin() + r * count * es)) {
              wrong[rank] = "block of rank " + std::to_string(r) + " differs";
            }
          }
        });
        for (int r = 0; r < P; ++r) {
          EXPECT_EQ(wrong[r], "") << (algorithm.empty() ? "default" : algorithm) << ", rank " << r
                                  << ", count " << count << ", " << dataTypeName(type)
                                  << (inPlace ? ", in place" : "");
        }
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST_P(SizeTest, BroadcastEveryAlgorithmFromSeveralRoots) {
  const int P = GetParam();
  COLLX_NEED_FILES_FOR(P);
  World& world = test::worldOf(P);
  const auto names = test::algorithmsOf(algorithms::Collective::kBroadcast);
  ASSERT_GE(names.size(), 2u);
  for (const std::string& algorithm : names) {
    for (int root : {0, P - 1, P / 2}) {
      for (std::uint64_t count : countsFor(P)) {
        std::vector<std::string> wrong(P);
        world.runOk([&](int rank, Context& ctx) {
          auto expected = test::makeInput(root, count, DataType::kFloat32, ReduceOpKind::kSum);
          std::vector<std::uint8_t> buffer =
              rank == root ? expected : std::vector<std::uint8_t>(expected.size(), 0x11);
          CollectiveOptions o;
          o.algorithm = algorithm;
          broadcast(ctx, buffer.data(), count, DataType::kFloat32, root, o);
          if (buffer != expected) wrong[rank] = "the buffer differs from the root's";
        });
        for (int r = 0; r < P; ++r) {
          EXPECT_EQ(wrong[r], "") << algorithm << " root " << root << " count " << count << " rank "
                                  << r;
        }
      }
    }
  }
}

TEST_P(SizeTest, BarriersHoldEveryRankBack) {
  const int P = GetParam();
  COLLX_NEED_FILES_FOR(P);
  World& world = test::worldOf(P);
  for (const std::string& algorithm : test::algorithmsOf(algorithms::Collective::kBarrier)) {
    std::atomic<int> arrived{0};
    std::vector<std::string> wrong(P);
    world.runOk([&](int rank, Context& ctx) {
      CollectiveOptions o;
      o.algorithm = algorithm;
      for (int round = 1; round <= 3; ++round) {
        std::this_thread::sleep_for(std::chrono::microseconds(200 * ((rank + round) % P)));
        arrived.fetch_add(1);
        barrier(ctx, o);
        if (arrived.load() < round * P) wrong[rank] = "left the barrier before everyone arrived";
        barrier(ctx, o);  // nobody may arrive for the next round before all have checked
      }
    });
    for (int r = 0; r < P; ++r) EXPECT_EQ(wrong[r], "") << algorithm << " rank " << r;
  }
}

TEST_P(SizeTest, SendRecvAroundTheRingWithTags) {
  const int P = GetParam();
  COLLX_NEED_FILES_FOR(P);
  World& world = test::worldOf(P);
  for (std::uint64_t count : {std::uint64_t{0}, std::uint64_t{3}, std::uint64_t{100000}}) {
    std::vector<std::string> wrong(P);
    world.runOk([&](int rank, Context& ctx) {
      const int right = (rank + 1) % P, left = (rank + P - 1) % P;
      // Two messages with different tags, received in the opposite order of sending.
      auto a = test::makeInput(rank, count, DataType::kInt32, ReduceOpKind::kSum);
      auto b = test::makeInput(rank + 100, count, DataType::kInt32, ReduceOpKind::kSum);
      Work sa = sendAsync(ctx, a.data(), count, DataType::kInt32, right, 1);
      Work sb = sendAsync(ctx, b.data(), count, DataType::kInt32, right, 2);
      std::vector<std::uint8_t> gotA(a.size()), gotB(b.size());
      recv(ctx, gotB.data(), count, DataType::kInt32, left, 2);
      recv(ctx, gotA.data(), count, DataType::kInt32, left, 1);
      sa.wait();
      sb.wait();
      if (gotA != test::makeInput(left, count, DataType::kInt32, ReduceOpKind::kSum) ||
          gotB != test::makeInput(left + 100, count, DataType::kInt32, ReduceOpKind::kSum)) {
        wrong[rank] = "received the wrong bytes";
      }
    });
    for (int r = 0; r < P; ++r) EXPECT_EQ(wrong[r], "") << "count " << count << " rank " << r;
  }
}

TEST_P(SizeTest, NonblockingCallsOverlapAndComplete) {
  const int P = GetParam();
  COLLX_NEED_FILES_FOR(P);
  World& world = test::worldOf(P);
  std::vector<std::string> wrong(P);
  world.runOk([&](int rank, Context& ctx) {
    constexpr int kCalls = 6;
    std::vector<std::vector<std::uint8_t>> buffers;
    std::vector<Work> works;
    for (int c = 0; c < kCalls; ++c) {
      buffers.push_back(
          test::makeInput(rank, 5000 + c * 999, DataType::kFloat32, ReduceOpKind::kSum));
    }
    for (int c = 0; c < kCalls; ++c) {
      AllreduceOptions o;
      o.algorithm = c % 2 == 0 ? "ring" : "recursive_doubling";
      works.push_back(allreduceAsync(ctx, buffers[c].data(), buffers[c].data(), 5000 + c * 999,
                                     DataType::kFloat32, o));
    }
    // A blocking call in the middle drives the nonblocking ones too.
    barrier(ctx);
    for (int c = kCalls - 1; c >= 0; --c) {
      while (!works[c].test()) std::this_thread::yield();
      works[c].wait();
      if (works[c].error()) wrong[rank] = "call " + std::to_string(c) + " failed";
      auto expected =
          test::expectedReduction(P, 5000 + c * 999, DataType::kFloat32, ReduceOpKind::kSum);
      if (buffers[c] != expected) wrong[rank] = "call " + std::to_string(c) + " is wrong";
    }
  });
  for (int r = 0; r < P; ++r) EXPECT_EQ(wrong[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Sizes, SizeTest, ::testing::ValuesIn(test::worldSizes()),
                         [](const auto& p) { return "P" + std::to_string(p.param); });

// The default allgather rows against the seed's decision tree (Open MPI's
// coll_tuned_allgather_decision.c) written out as code, at every boundary of it and around.
std::string openMpiAllgather(int P, std::uint64_t total) {
  struct Cut {
    std::uint64_t below;
    const char* algorithm;
  };
  auto pick = [&](std::initializer_list<Cut> cuts, const char* otherwise) {
    for (const Cut& c : cuts) {
      if (total < c.below) return std::string(c.algorithm);
    }
    return std::string(otherwise);
  };
  const char* rd = "recursive_doubling";
  const char* ne = "neighbor_exchange";
  if (P == 2) return "two_proc";
  if (P < 32) return rd;
  if (P < 64) return pick({{1024, rd}, {65536, ne}}, "ring");
  if (P < 128) return pick({{512, rd}, {65536, ne}}, "ring");
  if (P < 256) return pick({{512, rd}, {131072, ne}, {524288, "ring"}, {1048576, ne}}, "ring");
  if (P < 512) {
    return pick(
        {{32, rd}, {128, "bruck"}, {1024, rd}, {131072, ne}, {524288, "ring"}, {1048576, ne}},
        "ring");
  }
  if (P < 1024) return pick({{64, rd}, {256, "bruck"}, {2048, rd}}, ne);
  if (P < 2048) {
    return pick(
        {{4, rd}, {8, "bruck"}, {16, rd}, {32, "bruck"}, {256, rd}, {512, "bruck"}, {4096, rd}},
        ne);
  }
  if (P < 4096) return pick({{32, "bruck"}, {128, rd}, {512, "bruck"}, {4096, rd}}, ne);
  return pick({{2, rd}, {8, "bruck"}, {16, rd}, {512, "bruck"}, {4096, rd}}, ne);
}

TEST(Selection, AllgatherDefaultIsOpenMpisDecisionTree) {
  std::vector<std::uint64_t> totals = {0, ~std::uint64_t{0}};
  for (std::uint64_t cut :
       {2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 65536, 131072, 524288, 1048576}) {
    for (std::uint64_t t : {cut - 1, cut, cut + 1}) totals.push_back(t);
  }
  int checked = 0;
  for (int P : {1,   2,   3,   4,   7,   8,   16,   31,   32,   33,   63,   64,   100,
                127, 128, 255, 256, 511, 512, 1023, 1024, 2047, 2048, 4095, 4096, 100000}) {
    for (std::uint64_t total : totals) {
      const auto* row =
          algorithms::Selection::builtIn().choose(algorithms::Collective::kAllgather, P, total);
      const char* chosen = row == nullptr ? nullptr : row->algorithm->name;
      ASSERT_NE(chosen, nullptr) << "P " << P << ", " << total << " bytes";
      EXPECT_EQ(chosen, openMpiAllgather(P, total)) << "P " << P << ", " << total << " bytes";
      EXPECT_NE(algorithms::findAlgorithm(algorithms::Collective::kAllgather, chosen), nullptr)
          << chosen;
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000);
}

// Several TCP streams per peer: large messages are striped over them.
TEST(Streams, ThreeStreamsPerPeerGiveTheSameResults) {
  ContextOptions options;
  options.tcpStreams = 3;
  options.transport = "tcp";
  World world(4, options);
  for (std::uint64_t count : {std::uint64_t{5}, std::uint64_t{70000}, std::uint64_t{3000001}}) {
    for (const char* algorithm : {"ring", "halving_doubling"}) {
      std::vector<std::string> wrong(4);
      world.runOk([&](int rank, Context& ctx) {
        auto v = test::makeInput(rank, count, DataType::kFloat32, ReduceOpKind::kSum);
        AllreduceOptions o;
        o.algorithm = algorithm;
        allreduce(ctx, v.data(), v.data(), count, DataType::kFloat32, o);
        if (v != test::expectedReduction(4, count, DataType::kFloat32, ReduceOpKind::kSum)) {
          wrong[rank] = "wrong result";
        }
        if (ctx.describePeer((rank + 1) % 4).rfind("tcp ", 0) != 0) wrong[rank] = "not over tcp";
      });
      for (int r = 0; r < 4; ++r) {
        EXPECT_EQ(wrong[r], "") << algorithm << " count " << count << " rank " << r;
      }
    }
  }
}

TEST(CustomOps, AUserFunctionReduces) {
  World& world = test::worldOf(3);
  std::vector<std::string> wrong(3);
  world.runOk([&](int rank, Context& ctx) {
    // max of absolute values, as a user function on int32.
    ReduceOp op = ReduceOp::custom(
        [](void* inout, const void* in, std::size_t n, DataType) {
          auto* a = static_cast<std::int32_t*>(inout);
          const auto* b = static_cast<const std::int32_t*>(in);
          for (std::size_t i = 0; i < n; ++i) a[i] = std::max(std::abs(a[i]), std::abs(b[i]));
        },
        "absmax");
    std::vector<std::int32_t> v(777);
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = (rank == 1 ? -1 : 1) * static_cast<std::int32_t>(i % 50 + rank);
    AllreduceOptions o;
    o.op = op;
    allreduce(ctx, v.data(), v.data(), v.size(), DataType::kInt32, o);
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i] != static_cast<std::int32_t>(i % 50 + 2))
        wrong[rank] = "element " + std::to_string(i);
    }
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(wrong[r], "") << "rank " << r;
}

TEST(Validation, BadArgumentsAreInvalidArgumentNamingRankAndCall) {
  World& world = test::worldOf(2);
  auto errors = world.run([&](int rank, Context& ctx) {
    float x[4] = {};
    auto expectInvalid = [&](const std::function<void()>& f, const std::string& mentions) {
      try {
        f();
        throw std::runtime_error("accepted: " + mentions);
      } catch (const InvalidArgument& e) {
        std::string what = e.what();
        if (what.find("rank " + std::to_string(rank)) == std::string::npos ||
            what.find(mentions) == std::string::npos) {
          throw std::runtime_error("'" + what + "' lacks '" + mentions + "'");
        }
      }
    };
    expectInvalid([&] { broadcast(ctx, x, 4, DataType::kFloat32, 2); }, "root 2 is outside [0, 2)");
    expectInvalid([&] { allreduce(ctx, nullptr, x, 4, DataType::kFloat32); }, "sendbuf is null");
    expectInvalid(
        [&] {
          AllreduceOptions o;
          o.op = ReduceOpKind::kBxor;
          allreduce(ctx, x, x, 4, DataType::kFloat32, o);
        },
        "bitwise");
    expectInvalid(
        [&] {
          AllreduceOptions o;
          o.algorithm = "bogus";
          allreduce(ctx, x, x, 4, DataType::kFloat32, o);
        },
        "unknown allreduce algorithm 'bogus' (from options; valid: ring, ring_chunked");
    expectInvalid([&] { send(ctx, x, 4, DataType::kFloat32, 5); }, "peer 5 is outside");
    // The context is still usable after refused arguments: nothing was sent.
    allreduce(ctx, x, x, 4, DataType::kFloat32);
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(test::messageOf(errors[r]), "") << "rank " << r;
}

// ---- calls as descriptions (call.h) --------------------------------------------------

// Every kind through execute() and start() with a Call filled by hand, as the bindings fill it,
// against the same call through its function of collectives.h.
TEST(Descriptions, EveryKindMatchesItsFunction) {
  constexpr int P = 3;
  World& world = test::worldOf(P);
  std::vector<std::string> wrong(P);
  world.runOk([&](int rank, Context& ctx) {
    const std::uint64_t n = 4;
    std::vector<std::int32_t> in(n * P);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::int32_t>(rank * 100 + i);
    Counts counts{1, 2, 3}, displs{0, 1, 3}, sizes(P, n), offsets{0, n, 2 * n};
    const auto I32 = DataType::kInt32;
    struct Case {
      CallKind kind;
      std::function<void(std::int32_t*)> function;  // the same call through collectives.h
      std::function<void(Call&, std::int32_t*)> fill;
    };
    AllreduceOptions maxOp;
    maxOp.op = ReduceOpKind::kMax;
    const std::vector<Case> cases = {
        {CallKind::kAllreduce,
         [&](std::int32_t* out) { allreduce(ctx, in.data(), out, n, I32, maxOp); },
         [&](Call& c, std::int32_t* out) {
           c.sendbuf = in.data(), c.recvbuf = out, c.count = n, c.op = ReduceOpKind::kMax;
         }},
        {CallKind::kReduce, [&](std::int32_t* out) { reduce(ctx, in.data(), out, n, I32, 1); },
         [&](Call& c, std::int32_t* out) {
           c.sendbuf = in.data(), c.recvbuf = out, c.count = n, c.root = 1;
         }},
        {CallKind::kBroadcast,
         [&](std::int32_t* out) {
           std::copy(in.begin(), in.begin() + n, out);
           broadcast(ctx, out, n, I32, 2);
         },
         [&](Call& c, std::int32_t* out) {
           std::copy(in.begin(), in.begin() + n, out);
           c.recvbuf = out, c.count = n, c.root = 2;
         }},
        {CallKind::kAllgather, [&](std::int32_t* out) { allgather(ctx, in.data(), out, n, I32); },
         [&](Call& c, std::int32_t* out) { c.sendbuf = in.data(), c.recvbuf = out, c.count = n; }},
        {CallKind::kAllgatherv,
         [&](std::int32_t* out) {
           allgatherv(ctx, in.data(), counts[rank], out, counts, displs, I32);
         },
         [&](Call& c, std::int32_t* out) {
           c.sendbuf = in.data(), c.recvbuf = out, c.count = counts[rank];
           c.counts = &counts, c.displs = &displs;
         }},
        {CallKind::kReduceScatter,
         [&](std::int32_t* out) { reduceScatter(ctx, in.data(), out, n, I32); },
         [&](Call& c, std::int32_t* out) { c.sendbuf = in.data(), c.recvbuf = out, c.count = n; }},
        {CallKind::kReduceScatterv,
         [&](std::int32_t* out) { reduceScatterv(ctx, in.data(), out, counts, I32); },
         [&](Call& c, std::int32_t* out) {
           c.sendbuf = in.data(), c.recvbuf = out, c.counts = &counts;
         }},
        {CallKind::kGather, [&](std::int32_t* out) { gather(ctx, in.data(), out, n, I32, 0); },
         [&](Call& c, std::int32_t* out) { c.sendbuf = in.data(), c.recvbuf = out, c.count = n; }},
        {CallKind::kGatherv,
         [&](std::int32_t* out) {
           gatherv(ctx, in.data(), counts[rank], out, counts, displs, I32, 1);
         },
         [&](Call& c, std::int32_t* out) {
           c.sendbuf = in.data(), c.recvbuf = out, c.count = counts[rank], c.root = 1;
           c.counts = &counts;  // packed: `displs` are its prefix sums
         }},
        {CallKind::kScatter, [&](std::int32_t* out) { scatter(ctx, in.data(), out, n, I32, 2); },
         [&](Call& c, std::int32_t* out) {
           c.sendbuf = in.data(), c.recvbuf = out, c.count = n, c.root = 2;
         }},
        {CallKind::kScatterv,
         [&](std::int32_t* out) {
           scatterv(ctx, in.data(), counts, displs, out, counts[rank], I32, 0);
         },
         [&](Call& c, std::int32_t* out) {
           c.sendbuf = in.data(), c.recvbuf = out, c.count = counts[rank];
           c.counts = &counts, c.displs = &displs;
         }},
        {CallKind::kAlltoall, [&](std::int32_t* out) { alltoall(ctx, in.data(), out, n, I32); },
         [&](Call& c, std::int32_t* out) { c.sendbuf = in.data(), c.recvbuf = out, c.count = n; }},
        {CallKind::kAlltoallv,
         [&](std::int32_t* out) {
           alltoallv(ctx, in.data(), sizes, offsets, out, sizes, offsets, I32);
         },
         [&](Call& c, std::int32_t* out) {
           // No displacements: the blocks packed in rank order, as `offsets` says.
           c.sendbuf = in.data(), c.recvbuf = out, c.counts = &sizes, c.recvCounts = &sizes;
         }},
        {CallKind::kBarrier, [&](std::int32_t*) { barrier(ctx); }, [&](Call&, std::int32_t*) {}},
        {CallKind::kSend,
         [&](std::int32_t* out) {
           // A ring: send to the next rank, receive from the previous one.
           Work w = recvAsync(ctx, out, n, I32, (rank + P - 1) % P, 9);
           send(ctx, in.data(), n, I32, (rank + 1) % P, 9);
           w.wait();
         },
         [&](Call& c, std::int32_t* out) {
           Call r;
           r.kind = CallKind::kRecv, r.recvbuf = out, r.count = n, r.dtype = I32;
           r.peer = (rank + P - 1) % P, r.tag = 9;
           Work w = start(ctx, r);
           c.sendbuf = in.data(), c.count = n, c.peer = (rank + 1) % P, c.tag = 9;
           execute(ctx, c);
           w.wait();
           c.kind = CallKind::kBarrier;  // done: what the caller runs next is a barrier
         }},
    };
    for (const Case& k : cases) {
      for (bool async : {false, true}) {
        std::vector<std::int32_t> expected(n * P * 2, -1), got(n * P * 2, -1);
        k.function(expected.data());
        Call c;
        c.kind = k.kind;
        c.dtype = I32;
        k.fill(c, got.data());
        if (async) {
          start(ctx, c).wait();
        } else {
          execute(ctx, c);
        }
        if (got != expected) {
          wrong[rank] += std::string(callKindName(k.kind)) + (async ? " (start) " : " (execute) ");
        }
      }
    }
  });
  for (int r = 0; r < P; ++r) EXPECT_EQ(wrong[r], "") << "rank " << r;
}

TEST(Descriptions, MissingVectorsAndUnknownKindsAreInvalidArguments) {
  World& world = test::worldOf(2);
  std::vector<std::string> messages(2);
  world.runOk([&](int rank, Context& ctx) {
    float x[4] = {};
    auto message = [&](const Call& c) -> std::string {
      try {
        execute(ctx, c);
      } catch (const InvalidArgument& e) {
        return e.what();
      }
      return "accepted";
    };
    Call c;
    c.kind = CallKind::kAllgatherv;
    c.sendbuf = x, c.recvbuf = x, c.count = 1, c.dtype = DataType::kFloat32;
    messages[rank] = message(c);
    Counts counts{1, 1};
    c.kind = CallKind::kAlltoallv;
    c.counts = &counts, c.displs = &counts;
    messages[rank] += " | " + message(c);
    c.kind = static_cast<CallKind>(200);
    messages[rank] += " | " + message(c);
    allreduce(ctx, x, x, 4, DataType::kFloat32);  // nothing was sent: the context still works
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& m = messages[r];
    EXPECT_NE(m.find("rank " + std::to_string(r) + ": allgatherv: recvcounts are missing"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("alltoallv: recvcounts are missing"), std::string::npos) << m;
    EXPECT_NE(m.find("unknown call kind 200"), std::string::npos) << m;
  }
  EXPECT_STREQ(callKindName(CallKind::kReduceScatterv), "reduce_scatterv");
  EXPECT_STREQ(callKindName(static_cast<CallKind>(200)), "unknown");
}

// ---- failures: each test forms its own world, which the failure poisons ----------------

// A mismatch raises MismatchError on both sides: in the mismatched call itself on a rank
// that receives the other's message, and on a rank whose part already completed (a root that
// only sent) in its next call, through the ERROR the other side sent it.
void expectMismatchBothSides(const std::function<void(int, Context&)>& job, const std::string& a,
                             const std::string& b) {
  World world(2);
  auto errors = world.run([&](int rank, Context& ctx) {
    job(rank, ctx);
    CollectiveOptions o;
    o.timeout = std::chrono::seconds(10);
    barrier(ctx, o);  // the peer's ERROR must fail this call
  });
  for (int r = 0; r < 2; ++r) {
    std::string what = test::messageOf(errors[r]);
    bool mismatch = false;
    try {
      if (errors[r]) std::rethrow_exception(errors[r]);
    } catch (const MismatchError&) {
      mismatch = true;
    } catch (...) {
    }
    EXPECT_TRUE(mismatch) << "rank " << r << ": " << (what.empty() ? "no error" : what);
    EXPECT_NE(what.find(a), std::string::npos) << what;
    EXPECT_NE(what.find(b), std::string::npos) << what;
    EXPECT_EQ(what.rfind("rank " + std::to_string(r) + ":", 0), 0u) << what;
  }
}

TEST(Failures, AllreduceAgainstBroadcastIsAMismatchOnBothSides) {
  expectMismatchBothSides(
      [&](int rank, Context& ctx) {
        std::vector<float> v(1024, 1.0f);
        if (rank == 0) {
          allreduce(ctx, v.data(), v.data(), v.size(), DataType::kFloat32);
        } else {
          broadcast(ctx, v.data(), v.size(), DataType::kFloat32, 1);
        }
      },
      "rank 0 expected allreduce#0 float32x1024 from rank 1, got broadcast#0", "root 1");
}

// A call of a shared-memory algorithm against one of messages (a rank that waits in shared
// memory, a rank that waits for a message): still a mismatch on both sides, not a timeout,
// blocking (the shm rank's own wait sees the other's announcement) or nonblocking (the
// engine runs the shm call; the waiting rank sees the other's use of the group buffers).
TEST(Failures, SharedMemoryCallAgainstAMessageCallIsAMismatchOnBothSides) {
  if (!test::worldsShareMemory()) {
    GTEST_SKIP()
        << "the shm algorithms need ranks that share memory; this copy runs over tcp or ibverbs";
  }
  for (bool nonblocking : {false, true}) {
    SCOPED_TRACE(nonblocking ? "nonblocking" : "blocking");
    expectMismatchBothSides(
        [&](int rank, Context& ctx) {
          std::vector<float> v(1024, 1.0f);
          CollectiveOptions o;
          o.timeout = std::chrono::seconds(10);
          if (rank == 0) {
            AllreduceOptions ao;
            ao.algorithm = "shm";
            ao.timeout = o.timeout;
            if (nonblocking) {
              allreduceAsync(ctx, v.data(), v.data(), v.size(), DataType::kFloat32, ao).wait();
            } else {
              allreduce(ctx, v.data(), v.data(), v.size(), DataType::kFloat32, ao);
            }
          } else {
            o.algorithm = "one_to_all";
            broadcast(ctx, v.data(), v.size(), DataType::kFloat32, 0, o);
          }
        },
        "allreduce#0 float32x1024", "broadcast#0 float32x1024 root 0");
  }
}

TEST(Failures, WrongCountIsAMismatchOnBothSides) {
  for (std::uint64_t base : {std::uint64_t{16}, std::uint64_t{1} << 20}) {  // eager and large
    expectMismatchBothSides(
        [&](int rank, Context& ctx) {
          std::vector<float> v(2 * base, 1.0f);
          AllreduceOptions o;
          o.algorithm = "ring";
          allreduce(ctx, v.data(), v.data(), rank == 0 ? base : 2 * base, DataType::kFloat32, o);
        },
        "float32x" + std::to_string(base), "float32x" + std::to_string(2 * base));
  }
}

TEST(Failures, WrongDtypeIsAMismatchOnBothSides) {
  expectMismatchBothSides(
      [&](int rank, Context& ctx) {
        std::vector<float> v(64, 1.0f);
        allreduce(ctx, v.data(), v.data(), 64, rank == 0 ? DataType::kFloat32 : DataType::kInt32);
      },
      "float32x64", "int32x64");
}

// A rank that waits sleeps (in the transport's poll: a doorbell, a socket, a completion
// channel) instead of spinning: a receive that waits a second for its message costs the
// process a small part of a core, over each transport the copies of this suite run.
TEST(Waiting, ARankThatWaitsASecondUsesLittleCpu) {
  World world(2);
  auto cpu = [] {
    timespec t{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
  };
  std::chrono::nanoseconds used{};
  world.runOk([&](int rank, Context& ctx) {
    std::int64_t value = 0;
    if (rank == 1) {
      std::this_thread::sleep_for(1000ms);
      value = 42;
      send(ctx, &value, 1, DataType::kInt64, 0, 3);
      return;
    }
    const auto before = cpu();
    recv(ctx, &value, 1, DataType::kInt64, 1, 3);
    used = cpu() - before;
    if (value != 42) throw std::runtime_error("received " + std::to_string(value));
  });
  EXPECT_LT(used, 150ms) << "the process used "
                         << std::chrono::duration_cast<std::chrono::milliseconds>(used).count()
                         << " ms of CPU while rank 0 waited 1 s";
}

TEST(Failures, TimeoutNamesThePeerAndPoisonsTheContext) {
  World world(2);
  std::vector<float> buffer(1000, 7.0f);
  auto errors = world.run([&](int rank, Context& ctx) {
    if (rank == 1) {
      std::this_thread::sleep_for(1500ms);  // misses the deadline, then sends
      std::vector<float> mine(1000, 3.0f);
      try {
        send(ctx, mine.data(), mine.size(), DataType::kFloat32, 0, 9);
      } catch (const Error&) {
      }
      return;
    }
    CollectiveOptions o;
    o.timeout = 300ms;
    auto start = std::chrono::steady_clock::now();
    try {
      recv(ctx, buffer.data(), buffer.size(), DataType::kFloat32, 1, 9, o);
    } catch (const TimeoutError& e) {
      auto took = std::chrono::steady_clock::now() - start;
      if (took < 290ms || took > 3s) throw std::runtime_error("timed out after the wrong time");
      std::string what = e.what();
      if (what.find("rank 0: recv(peer 1, tag 9)") == std::string::npos ||
          what.find("waiting for rank 1") == std::string::npos) {
        throw std::runtime_error("bad message: " + what);
      }
      // Later calls fail at once with the first error.
      try {
        barrier(ctx);
      } catch (const TimeoutError& later) {
        if (std::string(later.what()).find("failed earlier") == std::string::npos) {
          throw std::runtime_error("later call: " + std::string(later.what()));
        }
        return;
      }
      throw std::runtime_error("a call after the timeout succeeded");
    }
    throw std::runtime_error("recv returned although nothing was sent in time");
  });
  EXPECT_EQ(test::messageOf(errors[0]), "");
  // Rank 1's late message never landed in rank 0's buffer.
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(buffer, std::vector<float>(1000, 7.0f));
}

TEST(Failures, AbortWakesABlockedCall) {
  World world(2);
  std::atomic<bool> rank0Blocked{false};
  auto errors = world.run([&](int rank, Context& ctx) {
    if (rank == 1) {
      std::this_thread::sleep_for(300ms);
      world.context(0).abort("stopped by the test");
      return;
    }
    std::vector<float> v(100);
    rank0Blocked = true;
    auto start = std::chrono::steady_clock::now();
    try {
      allreduce(ctx, v.data(), v.data(), v.size(), DataType::kFloat32);
    } catch (const Aborted& e) {
      if (std::chrono::steady_clock::now() - start > 5s) throw std::runtime_error("abort was slow");
      if (std::string(e.what()).find("stopped by the test") == std::string::npos) {
        throw std::runtime_error(std::string("bad message: ") + e.what());
      }
      return;
    }
    throw std::runtime_error("allreduce returned although rank 1 never called it");
  });
  EXPECT_TRUE(rank0Blocked);
  EXPECT_EQ(test::messageOf(errors[0]), "");
}

class AbortFirst : public ::testing::TestWithParam<const char*> {};

// A call made after abort() fails with Aborted and leaves its output alone, even when the
// peer's part of it is there already (no wait would notice the abort).
TEST_P(AbortFirst, ACallAfterAbortFailsEvenWhenItsMessagesArrived) {
  ContextOptions options = test::over(GetParam());
  options.timeout = 2000ms;
  World world(2, options);
  std::vector<float> out(64, -1.0f);
  auto errors = world.run([&](int rank, Context& ctx) {
    std::vector<float> in(64, 1.0f);
    if (rank == 1) {
      std::vector<float> sum(64);
      allreduce(ctx, in.data(), sum.data(), in.size(), DataType::kFloat32);  // rank 0 never does
      return;
    }
    std::this_thread::sleep_for(300ms);  // rank 1's part has arrived
    ctx.abort("stopped by the test");
    try {
      allreduce(ctx, in.data(), out.data(), in.size(), DataType::kFloat32);
    } catch (const Aborted& e) {
      if (std::string(e.what()).find("stopped by the test") == std::string::npos) {
        throw std::runtime_error(std::string("bad message: ") + e.what());
      }
      return;
    }
    throw std::runtime_error("allreduce after abort() returned");
  });
  EXPECT_EQ(test::messageOf(errors[0]), "");
  EXPECT_NE(test::messageOf(errors[1]), "");  // rank 1 waited for rank 0 in vain
  EXPECT_EQ(out, std::vector<float>(64, -1.0f));
}

INSTANTIATE_TEST_SUITE_P(Transports, AbortFirst, ::testing::Values("tcp", "auto"));

// Runs `body` on worlds of 2, 3 and 5 thread ranks, with each COLLX_SHM_DIRECT way.
void forEachDirectWay(const std::function<void(const char* direct, int P, World& world)>& body) {
  for (const char* direct : {"always", "auto", "never"}) {
    for (int P : {2, 3, 5}) {
      ContextOptions options;
      options.shmDirect = direct;
      World world(P, options);
      body(direct, P, world);
    }
  }
}

// P vectors of `count` random floats of mixed magnitude, whose sum depends on the order, and
// their serial rank-order sum.
void orderSensitiveInputs(int P, std::uint64_t count, std::vector<std::vector<float>>& inputs,
                          std::vector<float>& expected) {
  inputs.assign(static_cast<std::size_t>(P), std::vector<float>(count));
  std::mt19937 rng(static_cast<std::uint32_t>(P * 1000 + count));
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  for (auto& in : inputs) {
    for (float& x : in) x = std::ldexp(mantissa(rng), exponent(rng));
  }
  expected = inputs[0];
  for (int r = 1; r < P; ++r) {
    for (std::uint64_t i = 0; i < count; ++i) expected[i] = expected[i] + inputs[r][i];
  }
}

// The shared-memory algorithms reduce every element in rank order on one rank: with values
// whose sum depends on the order (random floats of mixed magnitude), every rank gets the same
// bits, and they are the serial rank-order sum's; reduce_scatter's blocks are that sum's too.
// Blocking and nonblocking calls interleave in issue order.
// Broadcasts from 64 KiB may be read straight out of the root's buffer: each
// way (always: a head read directly, the tail through the group buffers, or the whole vector
// read directly when ranks outnumber cores; auto: the group buffers first, then the whole
// vector read directly, then the faster; never) gives every rank the root's bytes, from
// every root, with other calls in between.
TEST(SharedMemory, BroadcastsReadFromTheRootOrInPiecesGiveTheRootsBytes) {
  if (!test::worldsShareMemory()) {
    GTEST_SKIP()
        << "the shm algorithms need ranks that share memory; this copy runs over tcp or ibverbs";
  }
  forEachDirectWay([&](const char* direct, int P, World& world) {
    // (From 4 MiB, ranks outnumbering cores write the pieces with non-temporal stores.)
    for (std::uint64_t bytes :
         {std::uint64_t{65535}, std::uint64_t{65536}, std::uint64_t{100003}, std::uint64_t{524287},
          std::uint64_t{(1 << 20) + 7}, std::uint64_t{(4 << 20) + 9}}) {
      for (int root = 0; root < P; ++root) {
        for (int time = 0; time < 2; ++time) {
          const auto seed = static_cast<std::uint64_t>(root * 2 + time);
          std::vector<std::vector<std::uint8_t>> got(static_cast<std::size_t>(P));
          std::vector<std::int32_t> sums(static_cast<std::size_t>(P));
          world.runOk([&](int rank, Context& ctx) {
            auto& buffer = got[static_cast<std::size_t>(rank)];
            buffer.assign(bytes, 0);
            if (rank == root) test::patternBytes(seed, 0, buffer.data(), bytes);
            CollectiveOptions o;
            o.algorithm = "shm";
            broadcast(ctx, buffer.data(), bytes, DataType::kUint8, root, o);
            const std::int32_t one = 1;
            allreduce(ctx, &one, &sums[static_cast<std::size_t>(rank)], 1, DataType::kInt32);
          });
          for (int r = 0; r < P; ++r) {
            EXPECT_EQ(
                test::firstPatternMismatch(got[static_cast<std::size_t>(r)].data(), bytes, seed),
                -1)
                << direct << " P=" << P << " " << bytes << " bytes from rank " << root << ", rank "
                << r << ", time " << time;
            EXPECT_EQ(sums[static_cast<std::size_t>(r)], P);
          }
        }
      }
    }
  });
}

// Allgathers from 16 KiB gathered may read every rank's block straight out of its buffer:
// each way gives every rank every block, in place or not, with other calls in between.
TEST(SharedMemory, AllgathersReadDirectlyOrInPiecesGiveEveryRanksBlock) {
  if (!test::worldsShareMemory()) {
    GTEST_SKIP()
        << "the shm algorithms need ranks that share memory; this copy runs over tcp or ibverbs";
  }
  forEachDirectWay([&](const char* direct, int P, World& world) {
    const std::uint64_t around16K = 16384 / static_cast<std::uint64_t>(P);  // gathered
    for (std::uint64_t block :
         {around16K - 1, around16K + 1, std::uint64_t{100003}, std::uint64_t{(1 << 20) + 13}}) {
      for (int time = 0; time < 4; ++time) {
        const bool inPlace = time % 2 == 1;
        const auto total = block * static_cast<std::uint64_t>(P);
        std::vector<std::vector<std::uint8_t>> inputs(static_cast<std::size_t>(P)),
            got(static_cast<std::size_t>(P));
        std::vector<std::int32_t> sums(static_cast<std::size_t>(P));
        world.runOk([&](int rank, Context& ctx) {
          const auto r = static_cast<std::size_t>(rank);
          const std::uint64_t seed = static_cast<std::uint64_t>(time * 16 + rank);
          got[r].assign(total, 0);
          inputs[r].resize(block);
          test::patternBytes(seed, 0, inputs[r].data(), block);
          const std::uint8_t* in = inputs[r].data();
          if (inPlace) {
            std::memcpy(got[r].data() + block * r, in, block);
            in = got[r].data() + block * r;
          }
          CollectiveOptions o;
          o.algorithm = "shm";
          allgather(ctx, in, got[r].data(), block, DataType::kUint8, o);
          const std::int32_t one = 1;
          allreduce(ctx, &one, &sums[r], 1, DataType::kInt32);
        });
        for (int r = 0; r < P; ++r) {
          for (int b = 0; b < P; ++b) {
            EXPECT_EQ(test::firstPatternMismatch(got[static_cast<std::size_t>(r)].data() +
                                                     block * static_cast<std::uint64_t>(b),
                                                 block, static_cast<std::uint64_t>(time * 16 + b)),
                      -1)
                << direct << " P=" << P << " block " << block << " of rank " << b << " at rank "
                << r << ", time " << time << (inPlace ? " (in place)" : "");
          }
          EXPECT_EQ(sums[static_cast<std::size_t>(r)], P);
        }
      }
    }
  });
}

TEST(SharedMemory, ReductionsAreBitIdenticalToTheRankOrderSum) {
  if (!test::worldsShareMemory()) {
    GTEST_SKIP()
        << "the shm algorithms need ranks that share memory; this copy runs over tcp or ibverbs";
  }
  for (int P : {2, 3, 5}) {
    World& world = test::worldOf(P);
    ASSERT_TRUE(world.context(0).sharedMemory()) << "thread ranks of one process share memory";
    for (std::uint64_t count : {std::uint64_t{7}, std::uint64_t{3000}, std::uint64_t{300001}}) {
      std::vector<std::vector<float>> inputs;
      std::vector<float> expected;
      orderSensitiveInputs(P, count, inputs, expected);
      std::vector<std::vector<float>> sums(P), blocks(P), late(P);
      const std::uint64_t block = count / static_cast<std::uint64_t>(P);
      world.runOk([&](int rank, Context& ctx) {
        AllreduceOptions o;
        o.algorithm = "shm";
        ReduceOptions ro;
        ro.algorithm = "shm";
        sums[rank].resize(count);
        late[rank].resize(count);
        blocks[rank].resize(block);
        Work first = allreduceAsync(ctx, inputs[rank].data(), sums[rank].data(), count,
                                    DataType::kFloat32, o);
        reduceScatter(ctx, inputs[rank].data(), blocks[rank].data(), block, DataType::kFloat32, ro);
        first.wait();
        allreduce(ctx, inputs[rank].data(), late[rank].data(), count, DataType::kFloat32, o);
      });
      for (int r = 0; r < P; ++r) {
        EXPECT_EQ(std::memcmp(sums[r].data(), expected.data(), count * sizeof(float)), 0)
            << "P=" << P << " count " << count << " rank " << r;
        EXPECT_EQ(std::memcmp(late[r].data(), expected.data(), count * sizeof(float)), 0)
            << "P=" << P << " count " << count << " rank " << r;
        EXPECT_EQ(std::memcmp(blocks[r].data(), expected.data() + block * r, block * sizeof(float)),
                  0)
            << "P=" << P << " count " << count << " rank " << r;
      }
    }
  }
}

// Allreduces from 256 KiB may reduce by reading the other ranks' inputs and results
// directly: each way gives every rank the bits of the rank-order sum, in place or not (in
// place, a rank's input is the output the others read its result from), called again and
// again (auto: the group buffers first, then direct reads, then the faster).
TEST(SharedMemory, AllreducesReadDirectlyOrInRoundsAreBitIdenticalToTheRankOrderSum) {
  if (!test::worldsShareMemory()) {
    GTEST_SKIP()
        << "the shm algorithms need ranks that share memory; this copy runs over tcp or ibverbs";
  }
  forEachDirectWay([&](const char* direct, int P, World& world) {
    for (std::uint64_t count : {std::uint64_t{65537}, std::uint64_t{300001}}) {
      std::vector<std::vector<float>> inputs;
      std::vector<float> expected;
      orderSensitiveInputs(P, count, inputs, expected);
      for (int time = 0; time < 4; ++time) {
        const bool inPlace = time % 2 == 1;
        std::vector<std::vector<float>> got(P);
        world.runOk([&](int rank, Context& ctx) {
          AllreduceOptions o;
          o.algorithm = "shm";
          got[rank] = inPlace ? inputs[rank] : std::vector<float>(count, -1.0f);
          allreduce(ctx, inPlace ? got[rank].data() : inputs[rank].data(), got[rank].data(), count,
                    DataType::kFloat32, o);
        });
        for (int r = 0; r < P; ++r) {
          EXPECT_EQ(std::memcmp(got[r].data(), expected.data(), count * sizeof(float)), 0)
              << direct << " P=" << P << " count " << count << " rank " << r << ", time " << time
              << (inPlace ? " (in place)" : "");
        }
      }
    }
  });
}

// Nonblocking shared-memory calls are tasks of the engine, run one at a time in issue order
// on every rank: many in flight at once, of several collectives, mixed with calls of
// messages and blocking ones, each give their result, whatever order their Works are waited
// in (the last first here), and before any is waited for.
TEST(SharedMemory, NonblockingCallsRunInIssueOrderWithEverythingElse) {
  if (!test::worldsShareMemory()) {
    GTEST_SKIP()
        << "the shm algorithms need ranks that share memory; this copy runs over tcp or ibverbs";
  }
  for (int P : {2, 3, 5}) {
    World& world = test::worldOf(P);
    constexpr int kCalls = 12;
    std::vector<std::string> wrong(static_cast<std::size_t>(P));
    world.runOk([&](int rank, Context& ctx) {
      AllreduceOptions shm;
      shm.algorithm = "shm";
      CollectiveOptions shmPlain;
      shmPlain.algorithm = "shm";
      CollectiveOptions ring;
      ring.algorithm = "ring";
      std::vector<std::vector<std::int32_t>> sums(kCalls), gathered(kCalls), bcasts(kCalls);
      std::vector<Work> works;
      for (int i = 0; i < kCalls; ++i) {
        const std::uint64_t count = 1 + static_cast<std::uint64_t>(i) * 5003;  // 4 B to 220 KiB
        sums[i].assign(count, rank + i);
        works.push_back(
            allreduceAsync(ctx, sums[i].data(), sums[i].data(), count, DataType::kInt32, shm));
        gathered[i].assign(count * static_cast<std::uint64_t>(P), -1);
        std::vector<std::int32_t> mine(count, rank * 7 + i);
        // A call of messages in between (its own copy of `mine` is in `gathered` when done).
        std::copy(mine.begin(), mine.end(), gathered[i].begin() + static_cast<long>(count) * rank);
        works.push_back(allgatherAsync(ctx, nullptr, gathered[i].data(), count, DataType::kInt32,
                                       i % 2 == 0 ? shmPlain : ring));
        bcasts[i].assign(count, rank == i % P ? 1000 + i : 0);
        if (i % 3 == 0) {  // blocking ones among them
          broadcast(ctx, bcasts[i].data(), count, DataType::kInt32, i % P, shmPlain);
        } else {
          works.push_back(
              broadcastAsync(ctx, bcasts[i].data(), count, DataType::kInt32, i % P, shmPlain));
        }
      }
      // Another thread waits for them (and so drives the engine) while this one makes
      // blocking shared-memory calls after them.
      std::exception_ptr waited;
      std::thread waiter([&] {
        try {
          for (auto it = works.rbegin(); it != works.rend(); ++it) it->wait();
        } catch (...) {
          waited = std::current_exception();
        }
      });
      std::vector<std::int32_t> after(1000, rank);
      allreduce(ctx, after.data(), after.data(), after.size(), DataType::kInt32, shm);
      barrier(ctx, shmPlain);
      waiter.join();
      if (waited) std::rethrow_exception(waited);
      std::string& out = wrong[static_cast<std::size_t>(rank)];
      auto all = [](const std::vector<std::int32_t>& v, std::int32_t x) {
        return std::all_of(v.begin(), v.end(), [x](std::int32_t y) { return y == x; });
      };
      if (!all(after, P * (P - 1) / 2)) out += "after; ";
      for (int i = 0; i < kCalls; ++i) {
        const std::uint64_t count = sums[i].size();
        const std::int32_t sum = P * i + P * (P - 1) / 2;
        if (!all(sums[i], sum)) out += "allreduce " + std::to_string(i) + "; ";
        for (int q = 0; q < P; ++q) {
          for (std::uint64_t k = 0; k < count; ++k) {
            if (gathered[i][static_cast<std::size_t>(q) * count + k] != q * 7 + i) {
              out += "allgather " + std::to_string(i) + "; ";
              k = count;
              q = P;
            }
          }
        }
        if (!all(bcasts[i], 1000 + i)) out += "broadcast " + std::to_string(i) + "; ";
      }
    });
    for (int r = 0; r < P; ++r)
      EXPECT_EQ(wrong[static_cast<std::size_t>(r)], "") << "P=" << P << " rank " << r;
  }
}

// A nonblocking shared-memory call waiting for a rank that never comes ends at its deadline
// with a TimeoutError naming that rank and its use of the group buffers; abort() ends one at
// once. Neither holds up the caller meanwhile.
TEST(SharedMemory, NonblockingCallsEndAtTheirDeadlineOrOnAbort) {
  if (!test::worldsShareMemory()) {
    GTEST_SKIP()
        << "the shm algorithms need ranks that share memory; this copy runs over tcp or ibverbs";
  }
  for (bool abortIt : {false, true}) {
    World world(2);
    auto errors = world.run([&](int rank, Context& ctx) {
      if (rank == 1) {  // never takes part
        if (abortIt) {
          std::this_thread::sleep_for(300ms);
          world.context(0).abort("stopped by the test");
        }
        return;
      }
      std::vector<float> v(1000);
      AllreduceOptions o;
      o.algorithm = "shm";
      o.timeout = abortIt ? 30s : 300ms;
      const auto start = std::chrono::steady_clock::now();
      Work w = allreduceAsync(ctx, v.data(), v.data(), v.size(), DataType::kFloat32, o);
      if (std::chrono::steady_clock::now() - start > 100ms) {
        throw std::runtime_error("starting the call waited for the other rank");
      }
      if (w.test()) throw std::runtime_error("the call ended without the other rank");
      try {
        w.wait();
      } catch (const Error& e) {
        const auto took = std::chrono::steady_clock::now() - start;
        const std::string what = e.what();
        if (abortIt) {
          if (e.kind() != ErrorKind::kAborted ||
              what.find("stopped by the test") == std::string::npos || took > 5s) {
            throw std::runtime_error("abort: " + what);
          }
        } else if (e.kind() != ErrorKind::kTimeout || took < 290ms || took > 5s ||
                   what.find("rank 0: allreduce(shm, seq 0)") == std::string::npos ||
                   what.find("waiting for rank 1 (shared memory: its use") == std::string::npos) {
          throw std::runtime_error("timeout: " + what);
        }
        if (!w.error()) throw std::runtime_error("the Work has no error");
        return;
      }
      throw std::runtime_error("the call succeeded without the other rank");
    });
    EXPECT_EQ(test::messageOf(errors[0]), "") << (abortIt ? "abort" : "timeout");
  }
}

// A nonblocking shared-memory call waiting for a rank that closes its context ends then, with
// an IoError naming that rank, not at its deadline (the engine's wait looks at the member it
// waits for, as a blocking call's own wait does).
TEST(SharedMemory, ANonblockingCallEndsWhenTheRankItWaitsForCloses) {
  if (!test::worldsShareMemory()) {
    GTEST_SKIP()
        << "the shm algorithms need ranks that share memory; this copy runs over tcp or ibverbs";
  }
  World world(2);
  auto errors = world.run([&](int rank, Context& ctx) {
    if (rank == 1) {
      std::this_thread::sleep_for(200ms);
      world.close(1);
      return;
    }
    std::vector<float> v(1000);
    AllreduceOptions o;
    o.algorithm = "shm";
    o.timeout = 60s;
    const auto start = std::chrono::steady_clock::now();
    Work w = allreduceAsync(ctx, v.data(), v.data(), v.size(), DataType::kFloat32, o);
    try {
      w.wait();
    } catch (const Error& e) {
      const auto took = std::chrono::steady_clock::now() - start;
      const std::string what = e.what();
      if (e.kind() != ErrorKind::kIo || e.peer() != 1 || took > 10s ||
          what.find("rank 1") == std::string::npos) {
        throw std::runtime_error("close: " + what);
      }
      return;
    }
    throw std::runtime_error("the call succeeded without the other rank");
  });
  EXPECT_EQ(test::messageOf(errors[0]), "");
}

TEST(Failures, NonblockingCallFailsItsWork) {
  World world(2);
  auto errors = world.run([&](int rank, Context& ctx) {
    if (rank == 1) return;  // never takes part
    std::vector<float> v(10);
    AllreduceOptions o;
    o.timeout = 200ms;
    Work w = allreduceAsync(ctx, v.data(), v.data(), v.size(), DataType::kFloat32, o);
    try {
      w.wait();
    } catch (const TimeoutError&) {
      if (!w.error()) throw std::runtime_error("the Work has no error");
      return;
    }
    throw std::runtime_error("the Work succeeded");
  });
  EXPECT_EQ(test::messageOf(errors[0]), "");
}

}  // namespace
}  // namespace collx
