// The hierarchical algorithms with ranks as threads on several simulated hosts in one process
// (ContextOptions::hostId): shared memory inside a host, TCP between hosts, as the mesh
// chooses per pair; results against serial references for even, uneven, one-rank and
// interleaved layouts, counts 0, 1, odd and large, in place and out of place; and the
// default selection across hosts.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>

#include "collx/collx.h"
#include "util/reference.h"
#include "util/sanitizer.h"
#include "util/world.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
using test::World;

struct Layout {
  const char* name;
  std::vector<std::string> hostIds;  // by rank
};

std::vector<Layout> layouts() {
  return {
      {"2x2", {"a", "a", "b", "b"}},
      {"3x2", {"a", "a", "b", "b", "c", "c"}},
      {"2+3", {"a", "a", "b", "b", "b"}},
      {"4x1", {"a", "b", "c", "d"}},
      {"1x4", {"a", "a", "a", "a"}},
      // Hosts whose ranks are not consecutive (allgather reorders through scratch).
      {"interleaved", {"a", "b", "a", "c", "b", "c", "a"}},
  };
}

void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }

std::vector<std::uint64_t> counts() { return {0, 1, 7, 3001, (1u << 20) + 3}; }

class Hierarchical : public ::testing::TestWithParam<Layout> {
 protected:
  void SetUp() override {
    COLLX_SKIP_UNDER_TSAN(
        "simulated hosts repeat the paths of shm and tcp, which the thread suites run "
        "(ASan runs the layouts)");
  }
  World& world() {
    const Layout& l = GetParam();
    auto& w = worlds_[l.name];
    if (!w)
      w = std::make_unique<World>(static_cast<int>(l.hostIds.size()), ContextOptions{}, l.hostIds);
    return *w;
  }
  int size() const { return static_cast<int>(GetParam().hostIds.size()); }
  static inline std::map<std::string, std::unique_ptr<World>> worlds_;
};

// Within a host shm, between hosts tcp, as ContextOptions::hostId says.
TEST_P(Hierarchical, IntraHostPairsAreShmAndInterHostPairsTcp) {
  const auto& ids = GetParam().hostIds;
  const int P = size();
  std::vector<std::string> wrong(P);
  world().runOk([&](int rank, Context& ctx) {
    const auto transports = ctx.transports();
    for (int q = 0; q < P; ++q) {
      const std::string want = q == rank ? "self" : ids[q] == ids[rank] ? "shm" : "tcp";
      if (transports[q] != want) {
        wrong[rank] +=
            "peer " + std::to_string(q) + " is " + transports[q] + ", not " + want + "; ";
      }
    }
  });
  for (int r = 0; r < P; ++r) EXPECT_EQ(wrong[r], "") << "rank " << r;
}

TEST_P(Hierarchical, AllreduceMatchesTheSerialReference) {
  const int P = size();
  int combination = 0;
  for (std::uint64_t count : counts()) {
    for (auto [type, op] : {std::pair{DataType::kInt32, ReduceOpKind::kSum},
                            std::pair{DataType::kFloat32, ReduceOpKind::kAvg},
                            std::pair{DataType::kFloat64, ReduceOpKind::kMax}}) {
      const bool inPlace = combination++ % 2 == 0;
      const auto expected = test::expectedReduction(P, count, type, op);
      std::vector<std::string> wrong(P);
      world().runOk([&](int rank, Context& ctx) {
        auto in = test::makeInput(rank, count, type, op);
        std::vector<std::uint8_t> out(in.size(), 0xAB);
        AllreduceOptions o;
        o.op = op;
        o.algorithm = "hierarchical";
        if (inPlace) {
          allreduce(ctx, in.data(), in.data(), count, type, o);
          out = in;
        } else {
          allreduce(ctx, in.data(), out.data(), count, type, o);
        }
        const std::int64_t bad = test::firstDifference(out, expected, type);
        if (bad >= 0) wrong[rank] = "element " + std::to_string(bad) + " differs";
      });
      for (int r = 0; r < P; ++r) {
        EXPECT_EQ(wrong[r], "") << GetParam().name << " rank " << r << " count " << count << " "
                                << dataTypeName(type) << " " << reduceOpKindName(op)
                                << (inPlace ? " in place" : "");
      }
      if (HasFailure()) return;
    }
  }
}

TEST_P(Hierarchical, BroadcastFromEveryRoot) {
  const int P = size();
  for (std::uint64_t count : counts()) {
    for (int root = 0; root < P; ++root) {
      if (count > 10000 && root != 0 && root != P - 1) continue;
      std::vector<std::uint8_t> data(count * 4);
      for (std::uint64_t i = 0; i < data.size(); ++i)
        data[i] = static_cast<std::uint8_t>(i * 7 + root);
      std::vector<std::string> wrong(P);
      world().runOk([&](int rank, Context& ctx) {
        std::vector<std::uint8_t> buf =
            rank == root ? data : std::vector<std::uint8_t>(data.size());
        CollectiveOptions o;
        o.algorithm = "hierarchical";
        broadcast(ctx, buf.data(), count, DataType::kInt32, root, o);
        if (buf != data) wrong[rank] = "wrong data";
      });
      for (int r = 0; r < P; ++r) {
        EXPECT_EQ(wrong[r], "") << GetParam().name << " rank " << r << " count " << count
                                << " root " << root;
      }
      if (HasFailure()) return;
    }
  }
}

TEST_P(Hierarchical, AllgatherInAndOutOfPlace) {
  const int P = size();
  for (std::uint64_t count : counts()) {
    if (count > 300000) count = 262147;  // P blocks of it on every rank
    std::vector<std::uint8_t> all(count * 4 * P);
    for (std::uint64_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint8_t>(i * 13 + 5);
    for (bool inPlace : {false, true}) {
      std::vector<std::string> wrong(P);
      world().runOk([&](int rank, Context& ctx) {
        const std::uint64_t block = count * 4;
        std::vector<std::uint8_t> mine(
            all.begin() + static_cast<std::ptrdiff_t>(rank * block),
            all.begin() + static_cast<std::ptrdiff_t>((rank + 1) * block));
        std::vector<std::uint8_t> out(all.size(), 0xEE);
        CollectiveOptions o;
        o.algorithm = "hierarchical";
        if (inPlace) {
          std::copy(mine.begin(), mine.end(),
                    out.begin() + static_cast<std::ptrdiff_t>(rank * block));
          allgather(ctx, out.data() + rank * block, out.data(), count, DataType::kInt32, o);
        } else {
          allgather(ctx, mine.data(), out.data(), count, DataType::kInt32, o);
        }
        if (out != all) wrong[rank] = "wrong data";
      });
      for (int r = 0; r < P; ++r) {
        EXPECT_EQ(wrong[r], "") << GetParam().name << " rank " << r << " count " << count
                                << (inPlace ? " in place" : "");
      }
      if (HasFailure()) return;
    }
  }
}

// Across hosts with several ranks on a host, the default is hierarchical on every rank:
// rank 0 names it and the others take the default; they only meet if the two agree. On
// one host, or one rank per host, every rank takes the default (whatever the table picks).
TEST_P(Hierarchical, TheDefaultAcrossHostsIsHierarchical) {
  const auto& ids = GetParam().hostIds;
  const int P = size();
  std::set<std::string> hosts(ids.begin(), ids.end());
  const bool acrossHosts = hosts.size() > 1 && static_cast<int>(hosts.size()) < P;
  const std::uint64_t count = 50001;
  std::vector<std::string> wrong(P);
  world().runOk([&](int rank, Context& ctx) {
    const std::string named = rank == 0 && acrossHosts ? "hierarchical" : "";
    auto v = test::makeInput(rank, count, DataType::kInt32, ReduceOpKind::kSum);
    AllreduceOptions a;
    a.algorithm = named;
    a.timeout = 20s;
    allreduce(ctx, v.data(), v.data(), count, DataType::kInt32, a);
    if (v != test::expectedReduction(P, count, DataType::kInt32, ReduceOpKind::kSum)) {
      wrong[rank] += "allreduce; ";
    }
    CollectiveOptions o;
    o.timeout = 20s;
    o.algorithm = named;
    std::vector<std::int32_t> b(count, rank == 1 ? 42 : 0);
    broadcast(ctx, b.data(), count, DataType::kInt32, 1, o);
    if (b != std::vector<std::int32_t>(count, 42)) wrong[rank] += "broadcast; ";
    std::vector<std::int32_t> mine(count, rank), all(count * P, -1), want;
    for (int q = 0; q < P; ++q) want.insert(want.end(), count, q);
    allgather(ctx, mine.data(), all.data(), count, DataType::kInt32, o);
    if (all != want) wrong[rank] += "allgather; ";
  });
  for (int r = 0; r < P; ++r) EXPECT_EQ(wrong[r], "") << GetParam().name << " rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Layouts, Hierarchical, ::testing::ValuesIn(layouts()), [](const auto& p) {
  std::string name = p.param.name;
  for (char& c : name) {
    if (c == '+') c = '_';
  }
  return name;
});

}  // namespace
}  // namespace collx
