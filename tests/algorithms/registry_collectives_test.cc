// Every algorithm of the registry for the collectives beyond allreduce / allgather /
// broadcast / barrier (allgatherv, reduce_scatter(v), reduce, gather(v), scatter(v),
// alltoall(v)), with ranks as threads over real TCP, against serial references. Algorithms
// added to the registry are tested here without a line of change.
#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "collx/algorithms/registry.h"
#include "collx/collx.h"
#include "util/reference.h"
#include "util/world.h"

namespace collx {
namespace {

using algorithms::Collective;
using test::World;

// Per-rank counts with zeros and unequal sizes, scaled by `scale`.
Counts unevenCounts(int P, std::uint64_t scale) {
  Counts c(P);
  for (int i = 0; i < P; ++i) c[i] = ((i * 7 + 3) % 5) * scale;
  return c;
}

// Displacements with a gap of `gap` elements before every block.
Counts gappedDispls(const Counts& counts, std::uint64_t gap) {
  Counts d(counts.size());
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    at += gap;
    d[i] = at;
    at += counts[i];
  }
  return d;
}

std::uint64_t extent(const Counts& counts, const Counts& displs) {
  std::uint64_t end = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) end = std::max(end, displs[i] + counts[i]);
  return end + 3;  // a tail that must stay untouched
}

// A recognizable value for element i of rank r's data.
std::int32_t valueOf(int r, std::uint64_t i) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(r) * 100003u +
                                   static_cast<std::uint32_t>(i));
}

class RegistryTest : public ::testing::TestWithParam<int> {
 protected:
  void report(const std::vector<std::string>& wrong, const std::string& what) {
    for (std::size_t r = 0; r < wrong.size(); ++r) {
      EXPECT_EQ(wrong[r], "") << what << ", rank " << r << " of " << wrong.size();
    }
  }
};

TEST_P(RegistryTest, Allgatherv) {
  const int P = GetParam();
  COLLX_NEED_FILES_FOR(P);
  World& world = test::worldOf(P);
  for (const std::string& algorithm : test::algorithmsOf(Collective::kAllgatherv)) {
    for (std::uint64_t scale : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{3001}}) {
      for (bool inPlace : {false, true}) {
        Counts counts = unevenCounts(P, scale), displs = gappedDispls(counts, 2);
        std::vector<std::string> wrong(P);
        world.runOk([&](int rank, Context& ctx) {
          std::vector<std::int32_t> mine(counts[rank]), out(extent(counts, displs), -7);
          for (std::uint64_t i = 0; i < mine.size(); ++i) mine[i] = valueOf(rank, i);
          if (inPlace) std::copy(mine.begin(), mine.end(), out.begin() + displs[rank]);
          CollectiveOptions o;
          o.algorithm = algorithm;
          allgatherv(ctx, inPlace ? nullptr : mine.data(), counts[rank], out.data(), counts, displs,
                     DataType::kInt32, o);
          std::vector<std::int32_t> expected(out.size(), -7);
          for (int i = 0; i < P; ++i) {
            for (std::uint64_t e = 0; e < counts[i]; ++e) expected[displs[i] + e] = valueOf(i, e);
          }
          if (out != expected) wrong[rank] = "the gathered buffer differs";
        });
        report(wrong, "allgatherv " + algorithm + " scale " + std::to_string(scale) +
                          (inPlace ? " in place" : ""));
      }
    }
  }
}

TEST_P(RegistryTest, ReduceScatterEqualAndPerRankCounts) {
  const int P = GetParam();
  COLLX_NEED_FILES_FOR(P);
  World& world = test::worldOf(P);
  for (const std::string& algorithm : test::algorithmsOf(Collective::kReduceScatter)) {
    for (bool perRank : {false, true}) {
      for (std::uint64_t scale : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{2049}}) {
        for (ReduceOpKind op : {ReduceOpKind::kSum, ReduceOpKind::kMax, ReduceOpKind::kAvg}) {
          Counts counts = perRank ? unevenCounts(P, scale) : Counts(P, scale);
          const std::uint64_t total =
              std::accumulate(counts.begin(), counts.end(), std::uint64_t{0});
          const auto full = test::expectedReduction(P, total, DataType::kFloat32, op);
          std::vector<std::string> wrong(P);
          world.runOk([&](int rank, Context& ctx) {
            auto in = test::makeInput(rank, total, DataType::kFloat32, op);
            std::vector<std::uint8_t> out(counts[rank] * 4, 0xEE);
            ReduceOptions o;
            o.algorithm = algorithm;
            o.op = op;
            if (perRank) {
              reduceScatterv(ctx, in.data(), out.data(), counts, DataType::kFloat32, o);
            } else {
              reduceScatter(ctx, in.data(), out.data(), scale, DataType::kFloat32, o);
            }
            std::uint64_t first =
                std::accumulate(counts.begin(), counts.begin() + rank, std::uint64_t{0});
            std::vector<std::uint8_t> expected(full.begin() + first * 4,
                                               full.begin() + (first + counts[rank]) * 4);
            if (out != expected) wrong[rank] = "block differs";
          });
          report(wrong, "reduce_scatter " + algorithm + (perRank ? " per-rank" : " equal") +
                            " scale " + std::to_string(scale) + " " + reduceOpKindName(op));
        }
      }
    }
  }
}

TEST_P(RegistryTest, ReduceToEveryRoot) {
  const int P = GetParam();
  COLLX_NEED_FILES_FOR(P);
  World& world = test::worldOf(P);
  for (const std::string& algorithm : test::algorithmsOf(Collective::kReduce)) {
    for (int root : {0, P - 1, P / 2}) {
      for (std::uint64_t count : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{70001}}) {
        for (ReduceOpKind op : {ReduceOpKind::kSum, ReduceOpKind::kMin, ReduceOpKind::kAvg}) {
          for (bool inPlace : {false, true}) {
            const auto expected = test::expectedReduction(P, count, DataType::kInt64, op);
            std::vector<std::string> wrong(P);
            world.runOk([&](int rank, Context& ctx) {
              auto in = test::makeInput(rank, count, DataType::kInt64, op);
              const auto original = in;
              std::vector<std::uint8_t> out(in.size(), 0x5A);
              ReduceOptions o;
              o.algorithm = algorithm;
              o.op = op;
              const bool here = inPlace && rank == root;
              reduce(ctx, in.data(), here ? in.data() : out.data(), count, DataType::kInt64, root,
                     o);
              if (rank == root) {
                if ((here ? in : out) != expected) wrong[rank] = "the root's result differs";
              } else {
                if (out != std::vector<std::uint8_t>(in.size(), 0x5A))
                  wrong[rank] = "wrote recvbuf";
                if (in != original) wrong[rank] = "changed its input";
              }
            });
            report(wrong, "reduce " + algorithm + " root " + std::to_string(root) + " count " +
                              std::to_string(count) + " " + reduceOpKindName(op) +
                              (inPlace ? " in place" : ""));
          }
        }
      }
    }
  }
}

using test::matmul;
using test::matrixOf;

TEST_P(RegistryTest, NonCommutativeOpsKeepRankOrderOrAreRefused) {
  const int P = GetParam();
  COLLX_NEED_FILES_FOR(P);
  World& world = test::worldOf(P);
  const std::uint64_t count = 331;
  std::vector<std::int64_t> expected(count);
  for (std::uint64_t i = 0; i < count; ++i) {
    auto product = static_cast<std::uint64_t>(matrixOf(0, i));
    for (int r = 1; r < P; ++r)
      product = matmul(product, static_cast<std::uint64_t>(matrixOf(r, i)));
    expected[i] = static_cast<std::int64_t>(product);
  }
  // reduce_scatter: equal blocks, and per-rank blocks with empty ones, over the same vector.
  Counts equal(P, count / P), uneven = unevenCounts(P, 1);
  equal[P - 1] += count % P;
  uneven[P - 1] += count - std::accumulate(uneven.begin(), uneven.end(), std::uint64_t{0});
  for (Collective coll :
       {Collective::kReduce, Collective::kAllreduce, Collective::kReduceScatter}) {
    for (const auto& info : algorithms::algorithmRegistry()) {
      if (info.coll != coll || (info.shared && !test::worldsShareMemory())) continue;
      for (int variant : {0, 1}) {  // reduce: root 0 or P-1; reduce_scatter: equal or uneven
        if (coll == Collective::kAllreduce && variant != 0) continue;
        const int root = variant == 0 ? 0 : P - 1;
        const Counts& counts = variant == 0 ? equal : uneven;
        std::vector<std::string> wrong(P);
        world.runOk([&](int rank, Context& ctx) {
          std::vector<std::int64_t> in(count), out(count, 0);
          for (std::uint64_t i = 0; i < count; ++i) in[i] = matrixOf(rank, i);
          ReduceOptions o;
          o.algorithm = info.name;
          o.op = test::matmulOp();
          std::uint64_t first = 0, mine = count;
          try {
            if (coll == Collective::kReduce) {
              reduce(ctx, in.data(), out.data(), count, DataType::kInt64, root, o);
            } else if (coll == Collective::kAllreduce) {
              allreduce(ctx, in.data(), out.data(), count, DataType::kInt64, o);
            } else {
              reduceScatterv(ctx, in.data(), out.data(), counts, DataType::kInt64, o);
              first = std::accumulate(counts.begin(), counts.begin() + rank, std::uint64_t{0});
              mine = counts[rank];
            }
          } catch (const InvalidArgument& e) {
            if (info.keepsOrder) {
              wrong[rank] = std::string("refused: ") + e.what();
            } else if (std::string(e.what()).find("does not keep rank order") ==
                       std::string::npos) {
              wrong[rank] = std::string("bad refusal: ") + e.what();
            }
            return;
          }
          if (!info.keepsOrder) {
            wrong[rank] = "accepted a non-commutative op";
            return;
          }
          if (coll == Collective::kReduce && rank != root) return;
          if (!std::equal(out.begin(), out.begin() + mine, expected.begin() + first)) {
            wrong[rank] = "the product is not in rank order";
          }
        });
        report(wrong, std::string(algorithms::collectiveName(coll)) + " " + info.name +
                          (coll == Collective::kReduceScatter
                               ? (variant == 0 ? " equal counts" : " per-rank counts")
                               : " root " + std::to_string(root)));
      }
    }
  }
}

TEST_P(RegistryTest, GatherAndGathervToEveryRoot) {
  const int P = GetParam();
  COLLX_NEED_FILES_FOR(P);
  World& world = test::worldOf(P);
  for (Collective coll : {Collective::kGather, Collective::kGatherv}) {
    for (const std::string& algorithm : test::algorithmsOf(coll)) {
      for (int root : {0, P - 1, P / 2}) {
        for (std::uint64_t scale : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{4099}}) {
          for (bool inPlace : {false, true}) {
            const bool v = coll == Collective::kGatherv;
            Counts counts = v ? unevenCounts(P, scale) : Counts(P, scale);
            Counts displs = v ? gappedDispls(counts, 1) : gappedDispls(counts, 0);
            std::vector<std::string> wrong(P);
            world.runOk([&](int rank, Context& ctx) {
              std::vector<std::int32_t> mine(counts[rank]);
              for (std::uint64_t i = 0; i < mine.size(); ++i) mine[i] = valueOf(rank, i);
              std::vector<std::int32_t> out(extent(counts, displs), -3);
              const bool here = inPlace && rank == root;
              if (here) std::copy(mine.begin(), mine.end(), out.begin() + displs[rank]);
              CollectiveOptions o;
              o.algorithm = algorithm;
              if (v) {
                gatherv(ctx, here ? nullptr : mine.data(), counts[rank], out.data(), counts, displs,
                        DataType::kInt32, root, o);
              } else {
                gather(ctx, here ? nullptr : mine.data(), out.data(), scale, DataType::kInt32, root,
                       o);
              }
              std::vector<std::int32_t> expected(out.size(), -3);
              if (rank == root) {
                for (int i = 0; i < P; ++i) {
                  for (std::uint64_t e = 0; e < counts[i]; ++e)
                    expected[displs[i] + e] = valueOf(i, e);
                }
              } else if (here) {
                expected = out;
              }
              if (out != expected)
                wrong[rank] = rank == root ? "the gathered buffer differs" : "wrote recvbuf";
            });
            report(wrong, std::string(algorithms::collectiveName(coll)) + " " + algorithm +
                              " root " + std::to_string(root) + " scale " + std::to_string(scale) +
                              (inPlace ? " in place" : ""));
          }
        }
      }
    }
  }
}

TEST_P(RegistryTest, ScatterAndScattervFromEveryRoot) {
  const int P = GetParam();
  COLLX_NEED_FILES_FOR(P);
  World& world = test::worldOf(P);
  for (Collective coll : {Collective::kScatter, Collective::kScatterv}) {
    for (const std::string& algorithm : test::algorithmsOf(coll)) {
      for (int root : {0, P - 1, P / 2}) {
        for (std::uint64_t scale : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{4099}}) {
          for (bool inPlace : {false, true}) {
            const bool v = coll == Collective::kScatterv;
            Counts counts = v ? unevenCounts(P, scale) : Counts(P, scale);
            Counts displs = v ? gappedDispls(counts, 1) : gappedDispls(counts, 0);
            std::vector<std::string> wrong(P);
            world.runOk([&](int rank, Context& ctx) {
              std::vector<std::int32_t> all(extent(counts, displs), -3);
              if (rank == root) {
                for (int i = 0; i < P; ++i) {
                  for (std::uint64_t e = 0; e < counts[i]; ++e) all[displs[i] + e] = valueOf(i, e);
                }
              }
              const auto before = all;
              std::vector<std::int32_t> mine(counts[rank], -9);
              const bool here = inPlace && rank == root;
              CollectiveOptions o;
              o.algorithm = algorithm;
              if (v) {
                scatterv(ctx, all.data(), counts, displs, here ? nullptr : mine.data(),
                         counts[rank], DataType::kInt32, root, o);
              } else {
                scatter(ctx, all.data(), here ? nullptr : mine.data(), scale, DataType::kInt32,
                        root, o);
              }
              if (here) {
                if (all != before) wrong[rank] = "the root's buffer changed";
                return;
              }
              for (std::uint64_t e = 0; e < counts[rank]; ++e) {
                if (mine[e] != valueOf(rank, e)) wrong[rank] = "element " + std::to_string(e);
              }
              if (rank == root && all != before) wrong[rank] = "the root's sendbuf changed";
            });
            report(wrong, std::string(algorithms::collectiveName(coll)) + " " + algorithm +
                              " root " + std::to_string(root) + " scale " + std::to_string(scale) +
                              (inPlace ? " in place" : ""));
          }
        }
      }
    }
  }
}

TEST_P(RegistryTest, AlltoallAndAlltoallv) {
  const int P = GetParam();
  COLLX_NEED_FILES_FOR(P);
  World& world = test::worldOf(P);
  for (Collective coll : {Collective::kAlltoall, Collective::kAlltoallv}) {
    for (const std::string& algorithm : test::algorithmsOf(coll)) {
      for (std::uint64_t scale : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{1023}}) {
        const bool v = coll == Collective::kAlltoallv;
        // count[i][j]: what rank i sends rank j.
        auto count = [&](int i, int j) { return v ? ((i + 2 * j) % 4) * scale : scale; };
        std::vector<std::string> wrong(P);
        world.runOk([&](int rank, Context& ctx) {
          Counts sc(P), rc(P);
          for (int j = 0; j < P; ++j) {
            sc[j] = count(rank, j);
            rc[j] = count(j, rank);
          }
          Counts sd = gappedDispls(sc, v ? 1 : 0), rd = gappedDispls(rc, v ? 2 : 0);
          std::vector<std::int32_t> in(extent(sc, sd), -1), out(extent(rc, rd), -5);
          for (int j = 0; j < P; ++j) {
            for (std::uint64_t e = 0; e < sc[j]; ++e) in[sd[j] + e] = valueOf(rank * 1000 + j, e);
          }
          CollectiveOptions o;
          o.algorithm = algorithm;
          if (v) {
            alltoallv(ctx, in.data(), sc, sd, out.data(), rc, rd, DataType::kInt32, o);
          } else {
            alltoall(ctx, in.data(), out.data(), scale, DataType::kInt32, o);
          }
          std::vector<std::int32_t> expected(out.size(), -5);
          for (int i = 0; i < P; ++i) {
            for (std::uint64_t e = 0; e < rc[i]; ++e)
              expected[rd[i] + e] = valueOf(i * 1000 + rank, e);
          }
          if (out != expected) wrong[rank] = "the received blocks differ";
        });
        report(wrong, std::string(algorithms::collectiveName(coll)) + " " + algorithm + " scale " +
                          std::to_string(scale));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, RegistryTest, ::testing::ValuesIn(test::worldSizes()),
                         [](const auto& p) { return "P" + std::to_string(p.param); });

TEST(RegistryValidation, BadLayoutsAreRefused) {
  World& world = test::worldOf(3);
  auto errors = world.run([&](int rank, Context& ctx) {
    std::vector<std::int32_t> buf(100);
    auto expect = [&](const std::function<void()>& f, const std::string& mentions) {
      try {
        f();
      } catch (const InvalidArgument& e) {
        if (std::string(e.what()).find(mentions) == std::string::npos) {
          throw std::runtime_error(std::string("'") + e.what() + "' lacks '" + mentions + "'");
        }
        return;
      }
      throw std::runtime_error("accepted: " + mentions);
    };
    expect(
        [&] {
          allgatherv(ctx, buf.data(), 1, buf.data() + 50, {1, 1}, {0, 1}, DataType::kInt32);
        },
        "recvcounts has 2 entries for 3 ranks");
    expect(
        [&] {
          allgatherv(ctx, buf.data(), 1, buf.data() + 50, {1, 1, 1}, {0, 0, 2}, DataType::kInt32);
        },
        "overlap");
    expect(
        [&] {
          allgatherv(ctx, buf.data(), 2, buf.data() + 50, {1, 1, 1}, {0, 1, 2}, DataType::kInt32);
        },
        "sendcount 2 differs from recvcounts[" + std::to_string(rank) + "]");
    expect([&] { reduce(ctx, buf.data(), buf.data(), 3, DataType::kInt32, 7); },
           "root 7 is outside");
    expect([&] { reduceScatter(ctx, buf.data(), buf.data(), 3, DataType::kInt32); },
           "out of place");
    expect(
        [&] {
          alltoallv(ctx, buf.data(), {1, 1, 1}, {0, 1, 2}, buf.data() + 50, {2, 2, 2}, {0, 2, 4},
                    DataType::kInt32);
        },
        "differs from recvcounts");
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(test::messageOf(errors[r]), "") << "rank " << r;
}

// alltoallv bruck learns every rank's counts first: counts that disagree between a sender
// and its receiver are a MismatchError on every rank, naming both, instead of a hang.
TEST(RegistryValidation, AlltoallvBruckCountsThatDisagreeAreAMismatchEverywhere) {
  World& world = test::worldOf(3);
  auto errors = world.run([&](int rank, Context& ctx) {
    Counts sc(3, 2), rc(3, 2), sd = {0, 2, 4};
    if (rank == 1) rc[0] = 3;  // rank 0 sends it 2
    const Counts rd = rank == 1 ? Counts{0, 3, 5} : Counts{0, 2, 4};
    std::vector<std::int32_t> in(6, rank), out(8, -1);
    CollectiveOptions o;
    o.algorithm = "bruck";
    alltoallv(ctx, in.data(), sc, sd, out.data(), rc, rd, DataType::kInt32, o);
  });
  for (int r = 0; r < 3; ++r) {
    const std::string what = test::messageOf(errors[r]);
    EXPECT_NE(what.find("rank 0 sends 2 elements to rank 1, whose recvcounts[0] is 3"),
              std::string::npos)
        << "rank " << r << ": " << what;
    try {
      if (errors[r]) std::rethrow_exception(errors[r]);
    } catch (const MismatchError&) {
    } catch (...) {
      ADD_FAILURE() << "rank " << r << ": not a MismatchError: " << what;
    }
  }
  // The world goes on: the same call with agreeing counts works on every rank.
  world.runOk([&](int rank, Context& ctx) {
    Counts sc(3, 2), d = {0, 2, 4};
    std::vector<std::int32_t> in(6), out(6, -1);
    for (int j = 0; j < 3; ++j) in[2 * j] = in[2 * j + 1] = rank * 10 + j;
    CollectiveOptions o;
    o.algorithm = "bruck";
    alltoallv(ctx, in.data(), sc, d, out.data(), sc, d, DataType::kInt32, o);
    for (int j = 0; j < 3; ++j) {
      if (out[2 * j] != j * 10 + rank || out[2 * j + 1] != j * 10 + rank)
        throw std::runtime_error("block from rank " + std::to_string(j) + " is wrong");
    }
  });
}

}  // namespace
}  // namespace collx
