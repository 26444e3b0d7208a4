// The simulator: every algorithm of the registry run for P up to 1024 in one process, its
// results checked against serial references and its per-rank counts against the
// algorithm's documented cost formula; hand-built schedules that deadlock or disagree; and
// the time model on cases whose time is known in closed form. Algorithms added to the
// registry are covered here without a line of change.
#include "collx/algorithms/simulator.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <iostream>
#include <numeric>
#include <sstream>

#include "collx/algorithms/registry.h"
#include "util/reference.h"

namespace collx::algorithms {
namespace {

using Bytes = std::vector<std::uint8_t>;
using Counts = std::vector<std::uint64_t>;

constexpr int kSizes[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,   10,  11,
                          12, 13, 14, 15, 16, 17, 32, 64, 128, 1024};

// alltoallv bruck's count matrix: P^2 entries on each of P ranks (8 GB at P = 1024).
constexpr int kMatrixMaxRanks = 128;

std::string describe(const Cost& c) {
  std::ostringstream out;
  out << "{sends " << c.sends << ", " << c.sendBytes << " B; recvs " << c.recvs << ", "
      << c.recvBytes << " B; reduced " << c.reducedElements << "}";
  return out.str();
}

// A recognizable int32 for element e of what rank r holds for (or from) rank j.
std::int32_t valueOf(int r, int j, std::uint64_t e) {
  return static_cast<std::int32_t>(r * 1000003 + j * 1009 + static_cast<std::int64_t>(e % 1009));
}

void put(Bytes& b, std::uint64_t index, std::int32_t v) { std::memcpy(&b[index * 4], &v, 4); }

// Per-rank counts with zeros and unequal sizes around `c`.
std::uint64_t unevenCount(int i, std::uint64_t c) {
  return c == 0 ? 0 : (static_cast<std::uint64_t>(i) * 7 + 3) % (c + 2);
}

// Displacements with `gap` elements before every block.
Counts gapped(const Counts& counts, std::uint64_t gap) {
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
  return end + 2;  // a tail that must stay untouched
}

// One call on every rank: what each rank passes, and what each rank's output must be after.
struct Scenario {
  std::string label;
  SimOptions options;
  std::vector<ScheduleParams> params;
  std::vector<SimBuffers> buffers;
  std::vector<Bytes> expected;
};

// The reductions every reducing collective cycles through: exact in every order.
struct Reduction {
  DataType dtype;
  ReduceOpKind op;
};
constexpr Reduction kReductions[] = {{DataType::kInt32, ReduceOpKind::kSum},
                                     {DataType::kFloat32, ReduceOpKind::kAvg},
                                     {DataType::kInt32, ReduceOpKind::kProd},
                                     {DataType::kFloat32, ReduceOpKind::kMax}};

// Collectives whose buffers hold P blocks of `count` on some rank: their counts are capped at
// large P so that P^2 blocks fit in memory.
bool blockwise(Collective coll) {
  return coll != Collective::kAllreduce && coll != Collective::kReduce &&
         coll != Collective::kBroadcast && coll != Collective::kBarrier;
}

// {0, 1, P-1, an odd count that does not divide evenly}, capped for blockwise collectives.
std::vector<std::uint64_t> countsFor(Collective coll, int P) {
  const auto p = static_cast<std::uint64_t>(P);
  std::vector<std::uint64_t> out;
  const std::uint64_t cap =
      blockwise(coll) ? std::max<std::uint64_t>(5, (std::uint64_t{1} << 22) / (p * p)) | 1 : ~0ull;
  for (std::uint64_t c : {std::uint64_t{0}, std::uint64_t{1}, p - 1, 2 * p + 1}) {
    c = std::min(c, cap);
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  if (coll == Collective::kBarrier) out = {0};
  return out;
}

// Host layouts (ScheduleParams::hostOf) the sweep gives its calls: the hierarchical
// algorithms run under every one, the others under one per call (they ignore it).
enum class Hosts { kNone, kPairs, kTriples, kFours, kUneven, kInterleaved, kOnePerRank };
constexpr Hosts kLayouts[] = {Hosts::kNone,   Hosts::kPairs,       Hosts::kTriples,   Hosts::kFours,
                              Hosts::kUneven, Hosts::kInterleaved, Hosts::kOnePerRank};

const char* layoutName(Hosts kind) {
  switch (kind) {
    case Hosts::kNone:
      return "one host";
    case Hosts::kPairs:
      return "hosts of 2";
    case Hosts::kTriples:
      return "hosts of 3";
    case Hosts::kFours:
      return "hosts of 4";
    case Hosts::kUneven:
      return "hosts of 1, 2, 3, 4, 1, ...";
    case Hosts::kInterleaved:
      return "3 hosts round robin, numbered backwards";
    case Hosts::kOnePerRank:
      return "a host per rank";
  }
  return "?";
}

std::vector<int> hostLayout(Hosts kind, int P) {
  std::vector<int> h(static_cast<std::size_t>(P));
  int host = 0, left = 1, size = 1;  // kUneven
  for (int r = 0; r < P; ++r) {
    switch (kind) {
      case Hosts::kNone:
        return {};
      case Hosts::kPairs:
        h[r] = r / 2;  // odd P: a last host of one rank
        break;
      case Hosts::kTriples:
        h[r] = r / 3;
        break;
      case Hosts::kFours:
        h[r] = r / 4;
        break;
      case Hosts::kUneven:
        if (left == 0) {
          ++host;
          size = size % 4 + 1;
          left = size;
        }
        h[r] = host;
        --left;
        break;
      case Hosts::kInterleaved:
        h[r] = (P - r) % 3;  // host numbers not in the order of their lowest rank
        break;
      case Hosts::kOnePerRank:
        h[r] = r;
        break;
    }
  }
  return h;
}

Scenario makeScenario(const AlgorithmInfo& info, int P, std::uint64_t c, int variant, Hosts hosts) {
  Scenario s;
  const Collective coll = info.coll;
  const bool inPlace = variant % 2 == 1;
  const int root = static_cast<int>((static_cast<std::uint64_t>(variant) * (P / 3 + 1)) % P);
  Reduction red{DataType::kInt32, ReduceOpKind::kSum};
  if (reduces(coll)) red = kReductions[variant % 4];
  const std::size_t es = dataTypeSize(red.dtype);
  s.options.dtype = red.dtype;
  s.options.op = red.op;
  ScheduleParams base;
  base.coll = coll;
  base.size = P;
  base.count = c;
  base.elementSize = es;
  base.op = red.op;
  // Small pieces at small P exercise the pipelining; large P keeps the default.
  base.chunkBytes = P <= 17 && variant % 3 != 2 ? 2 * es : std::uint64_t{1} << 20;
  base.hostOf = hostLayout(hosts, P);
  s.params.assign(P, base);
  s.buffers.resize(P);
  s.expected.resize(P);
  for (int r = 0; r < P; ++r) s.params[r].rank = r;
  std::ostringstream label;
  label << collectiveName(coll) << " " << info.name << " P=" << P << " count=" << c << " ("
        << layoutName(hosts) << ")";

  switch (coll) {
    case Collective::kAllreduce: {
      label << " " << dataTypeName(red.dtype) << " " << reduceOpKindName(red.op)
            << (inPlace ? " in place" : "");
      const Bytes expected = test::expectedReduction(P, c, red.dtype, red.op);
      for (int r = 0; r < P; ++r) {
        s.params[r].inPlace = inPlace;
        Bytes in = test::makeInput(r, c, red.dtype, red.op);
        if (inPlace) {
          s.buffers[r].output = std::move(in);
          s.buffers[r].inputInOutput = 0;
        } else {
          s.buffers[r].input = std::move(in);
          s.buffers[r].output.assign(c * es, 0xEE);
        }
        s.expected[r] = expected;
      }
      break;
    }
    case Collective::kReduce: {
      label << " root " << root << " " << dataTypeName(red.dtype) << " " << reduceOpKindName(red.op)
            << (inPlace ? " in place" : "");
      const Bytes expected = test::expectedReduction(P, c, red.dtype, red.op);
      for (int r = 0; r < P; ++r) {
        s.params[r].root = root;
        Bytes in = test::makeInput(r, c, red.dtype, red.op);
        if (inPlace && r == root) {
          s.params[r].inPlace = true;
          s.buffers[r].output = std::move(in);
          s.buffers[r].inputInOutput = 0;
        } else {
          s.buffers[r].input = std::move(in);
          s.buffers[r].output.assign(c * es, 0x5A);
        }
        s.expected[r] = r == root ? expected : s.buffers[r].output;
      }
      break;
    }
    case Collective::kReduceScatter: {
      const bool uneven = variant % 2 == 1;
      label << (uneven ? " uneven" : " equal") << " " << dataTypeName(red.dtype) << " "
            << reduceOpKindName(red.op);
      Counts counts(P, c);
      if (uneven) {
        for (int i = 0; i < P; ++i) counts[i] = unevenCount(i, c);
      }
      Counts displs = gapped(counts, 0);
      const std::uint64_t total = std::accumulate(counts.begin(), counts.end(), std::uint64_t{0});
      const Bytes full = test::expectedReduction(P, total, red.dtype, red.op);
      for (int r = 0; r < P; ++r) {
        s.params[r].count = counts[r];
        s.params[r].counts = counts;
        s.params[r].displs = displs;
        s.buffers[r].input = test::makeInput(r, total, red.dtype, red.op);
        s.buffers[r].output.assign(counts[r] * es, 0xEE);
        s.expected[r].assign(
            full.begin() + static_cast<std::ptrdiff_t>(displs[r] * es),
            full.begin() + static_cast<std::ptrdiff_t>((displs[r] + counts[r]) * es));
      }
      break;
    }
    case Collective::kBroadcast: {
      label << " root " << root;
      Bytes data(c * 4);
      for (std::uint64_t e = 0; e < c; ++e) put(data, e, valueOf(root, 0, e));
      for (int r = 0; r < P; ++r) {
        s.params[r].root = root;
        s.params[r].inPlace = true;
        s.buffers[r].output = r == root ? data : Bytes(c * 4, 0xEE);
        s.buffers[r].inputInOutput = 0;
        s.expected[r] = data;
      }
      break;
    }
    case Collective::kAllgather:
    case Collective::kAllgatherv: {
      const bool v = coll == Collective::kAllgatherv;
      label << (inPlace ? " in place" : "");
      Counts counts(P, c);
      if (v) {
        for (int i = 0; i < P; ++i) counts[i] = unevenCount(i, c);
      }
      const Counts displs = v ? gapped(counts, 1) : gapped(counts, 0);
      const std::uint64_t size = v ? extent(counts, displs) : c * static_cast<std::uint64_t>(P);
      Bytes all(size * 4, 0xEE);
      for (int i = 0; i < P; ++i) {
        for (std::uint64_t e = 0; e < counts[i]; ++e) put(all, displs[i] + e, valueOf(i, 0, e));
      }
      for (int r = 0; r < P; ++r) {
        s.params[r].count = counts[r];
        s.params[r].inPlace = inPlace;
        if (v) {
          s.params[r].counts = counts;
          s.params[r].displs = displs;
        }
        Bytes mine(counts[r] * 4);
        for (std::uint64_t e = 0; e < counts[r]; ++e) put(mine, e, valueOf(r, 0, e));
        s.buffers[r].output.assign(size * 4, 0xEE);
        if (inPlace) {
          std::copy(mine.begin(), mine.end(), s.buffers[r].output.begin() + displs[r] * 4);
          s.buffers[r].inputInOutput = displs[r] * 4;
        } else {
          s.buffers[r].input = std::move(mine);
        }
        s.expected[r] = all;
      }
      break;
    }
    case Collective::kGather:
    case Collective::kGatherv: {
      const bool v = coll == Collective::kGatherv;
      label << " root " << root << (inPlace ? " in place" : "");
      Counts counts(P, c);
      if (v) {
        for (int i = 0; i < P; ++i) counts[i] = unevenCount(i, c);
      }
      const Counts displs = v ? gapped(counts, 1) : gapped(counts, 0);
      const std::uint64_t size = extent(counts, displs);
      for (int r = 0; r < P; ++r) {
        s.params[r].root = root;
        s.params[r].count = counts[r];
        Bytes mine(counts[r] * 4);
        for (std::uint64_t e = 0; e < counts[r]; ++e) put(mine, e, valueOf(r, 0, e));
        // Every rank knows every count: the binomial algorithms need them where a rank
        // forwards others' blocks, and the others ignore them away from the root.
        s.params[r].counts = counts;
        if (r != root) {
          s.buffers[r].input = std::move(mine);
          continue;
        }
        s.params[r].displs = displs;
        s.buffers[r].output.assign(size * 4, 0xEE);
        Bytes all = s.buffers[r].output;
        for (int i = 0; i < P; ++i) {
          for (std::uint64_t e = 0; e < counts[i]; ++e) put(all, displs[i] + e, valueOf(i, 0, e));
        }
        if (inPlace) {
          s.params[r].inPlace = true;
          std::copy(mine.begin(), mine.end(), s.buffers[r].output.begin() + displs[r] * 4);
          s.buffers[r].inputInOutput = displs[r] * 4;
        } else {
          s.buffers[r].input = std::move(mine);
        }
        s.expected[r] = all;
      }
      break;
    }
    case Collective::kScatter:
    case Collective::kScatterv: {
      const bool v = coll == Collective::kScatterv;
      label << " root " << root;
      Counts counts(P, c);
      if (v) {
        for (int i = 0; i < P; ++i) counts[i] = unevenCount(i, c);
      }
      const Counts displs = v ? gapped(counts, 1) : gapped(counts, 0);
      for (int r = 0; r < P; ++r) {
        s.params[r].root = root;
        s.params[r].count = counts[r];
        s.expected[r].resize(counts[r] * 4);
        for (std::uint64_t e = 0; e < counts[r]; ++e) put(s.expected[r], e, valueOf(r, 0, e));
        s.buffers[r].output.assign(counts[r] * 4, 0xEE);
        s.params[r].counts = counts;  // on every rank, as for gather(v)
        if (r != root) continue;
        s.params[r].displs = displs;
        s.buffers[r].input.assign(extent(counts, displs) * 4, 0xEE);
        for (int i = 0; i < P; ++i) {
          for (std::uint64_t e = 0; e < counts[i]; ++e) {
            put(s.buffers[r].input, displs[i] + e, valueOf(i, 0, e));
          }
        }
      }
      break;
    }
    case Collective::kAlltoall:
    case Collective::kAlltoallv: {
      const bool v = coll == Collective::kAlltoallv;
      // What rank i sends rank j.
      auto count = [&](int i, int j) {
        return v ? (c == 0 ? 0 : static_cast<std::uint64_t>(i + 2 * j) % (c + 2)) : c;
      };
      for (int r = 0; r < P; ++r) {
        Counts sc(P), rc(P);
        for (int j = 0; j < P; ++j) {
          sc[j] = count(r, j);
          rc[j] = count(j, r);
        }
        const Counts sd = gapped(sc, v ? 1 : 0), rd = gapped(rc, v ? 2 : 0);
        ScheduleParams& p = s.params[r];
        p.counts = sc;
        p.displs = sd;
        p.recvCounts = rc;
        p.recvDispls = rd;
        if (v) {
          p.count = 0;
          // What collectives.cc gathers for alltoallv bruck (P^2 entries on every rank: not
          // at P = 1024, where the sweep leaves bruck out).
          for (int i = 0; i < P && P <= kMatrixMaxRanks; ++i) {
            for (int j = 0; j < P; ++j) p.countMatrix.push_back(count(i, j));
          }
        }
        s.buffers[r].input.assign(extent(sc, sd) * 4, 0xEE);
        s.buffers[r].output.assign(extent(rc, rd) * 4, 0xEE);
        s.expected[r] = s.buffers[r].output;
        for (int j = 0; j < P; ++j) {
          for (std::uint64_t e = 0; e < sc[j]; ++e)
            put(s.buffers[r].input, sd[j] + e, valueOf(r, j, e));
          for (std::uint64_t e = 0; e < rc[j]; ++e) put(s.expected[r], rd[j] + e, valueOf(j, r, e));
        }
      }
      break;
    }
    case Collective::kBarrier:
    case Collective::kSendRecv:
      for (int r = 0; r < P; ++r) s.params[r].count = 0;
      break;
  }
  s.label = label.str();
  return s;
}

class RegistrySweep : public ::testing::TestWithParam<std::size_t> {};

// Every algorithm x P x count with real bytes: the results, the counts against the formula.
TEST_P(RegistrySweep, ResultsAndCountsMatchReferenceAndFormula) {
  const AlgorithmInfo& info = algorithmRegistry()[GetParam()];
  if (info.shared) {
    GTEST_SKIP() << collectiveName(info.coll) << " " << info.name
                 << " works on shared memory, not through a schedule: the thread-rank suites "
                    "and bench_test run it";
  }
  if (info.cost == nullptr) {
    // Not a failure: the results are still checked below.
    std::cout << "[ NOTE ] " << collectiveName(info.coll) << " " << info.name
              << " has no cost formula yet (AlgorithmInfo::cost): counts not checked\n";
    RecordProperty("no_cost_formula", std::string(collectiveName(info.coll)) + " " + info.name);
  }
  int runs = 0, compared = 0;
  for (int P : kSizes) {
    if (info.coll == Collective::kAlltoallv && std::string_view(info.name) == "bruck" &&
        P > kMatrixMaxRanks) {
      std::cout << "[ NOTE ] alltoallv bruck not simulated at P=" << P << ": its " << P << " x "
                << P << " count matrix on every rank would take "
                << (static_cast<std::uint64_t>(P) * P * P * 8 >> 20) << " MiB\n";
      continue;
    }
    const std::vector<std::uint64_t> counts = countsFor(info.coll, P);
    const bool hierarchical = std::string_view(info.name) == "hierarchical";
    for (std::size_t run = 0; run < counts.size() * (hierarchical ? std::size(kLayouts) : 1);
         ++run) {
      const std::size_t ci = run % counts.size(), li = run / counts.size();
      const int variant = static_cast<int>(ci + li) + P;
      const Hosts hosts =
          kLayouts[hierarchical ? li : static_cast<std::size_t>(variant) % std::size(kLayouts)];
      // Above 64 ranks, three layouts keep the time down (allgather moves P^2 blocks).
      if (hierarchical && P > 64 && hosts != Hosts::kPairs && hosts != Hosts::kUneven &&
          hosts != Hosts::kInterleaved) {
        continue;
      }
      Scenario s = makeScenario(info, P, counts[ci], variant, hosts);
      SimResult result = simulate(
          info, P, [&](int r) { return s.params[r]; },
          [&](int r) { return std::move(s.buffers[r]); }, s.options);
      ++runs;
      ASSERT_TRUE(result.ok()) << s.label << "\n" << result.describeProblems();
      ASSERT_EQ(result.ranks.size(), static_cast<std::size_t>(P));
      int wrongRanks = 0, wrongCosts = 0;
      for (int r = 0; r < P; ++r) {
        const SimRankResult& rr = result.ranks[r];
        EXPECT_TRUE(rr.finished) << s.label << ": rank " << r;
        if (rr.output != s.expected[r] && ++wrongRanks <= 3) {
          const auto at = test::firstDifference(rr.output, s.expected[r], DataType::kUint8);
          ADD_FAILURE() << s.label << ": rank " << r
                        << "'s output differs from the reference at byte " << at << " ("
                        << rr.output.size() << " bytes, expected " << s.expected[r].size() << ")";
        }
        if (info.cost != nullptr) {
          const Cost formula = info.cost(s.params[r]);
          ++compared;
          if (formula != rr.cost && ++wrongCosts <= 3) {
            ADD_FAILURE() << s.label << ": rank " << r << " counted " << describe(rr.cost)
                          << ", the formula says " << describe(formula);
          }
        }
      }
      EXPECT_EQ(wrongRanks, 0) << s.label << ": ranks with a wrong output";
      EXPECT_EQ(wrongCosts, 0) << s.label << ": ranks whose counts differ from the formula";
      if (P > 1 && info.coll == Collective::kBarrier) {
        // Every rank must hear, directly or not, from someone before it leaves.
        for (int r = 0; r < P; ++r)
          EXPECT_GE(result.ranks[r].rounds, 1u) << s.label << " rank " << r;
      }
      if (HasFailure()) return;
    }
  }
  EXPECT_GT(runs, 0);
  if (info.cost != nullptr) {
    EXPECT_GT(compared, 0);
  }
}

std::string sweepName(const ::testing::TestParamInfo<std::size_t>& info) {
  const AlgorithmInfo& a = algorithmRegistry()[info.param];
  std::string name = std::string(collectiveName(a.coll)) + "_" + a.name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Registry, RegistrySweep,
                         ::testing::Range<std::size_t>(0, algorithmRegistry().size()), sweepName);

TEST(Simulator, OrderKeepingAlgorithmsApplyNonCommutativeOpsInRankOrder) {
  int checked = 0;
  for (const AlgorithmInfo& info : algorithmRegistry()) {
    if (!info.keepsOrder || info.shared) continue;
    for (int P : {2, 3, 5, 8, 13, 64}) {
      for (int root : {0, P - 1, P / 2}) {
        // One packed 2x2 matrix per element: any split of the vector falls on whole ones.
        // reduce_scatter: the vector holds P blocks of `count`, rank r gets block r.
        const std::uint64_t count = 29;
        const bool scatters = info.coll == Collective::kReduceScatter;
        const std::uint64_t n = scatters ? count * static_cast<std::uint64_t>(P) : count;
        std::vector<std::int64_t> expected(n);
        for (std::uint64_t i = 0; i < n; ++i) {
          auto product = static_cast<std::uint64_t>(test::matrixOf(0, i));
          for (int r = 1; r < P; ++r)
            product = test::matmul(product, static_cast<std::uint64_t>(test::matrixOf(r, i)));
          expected[i] = static_cast<std::int64_t>(product);
        }
        ScheduleParams params;
        params.coll = info.coll;
        params.size = P;
        params.count = count;
        if (scatters) {
          for (int q = 0; q < P; ++q) {
            params.counts.push_back(count);
            params.displs.push_back(static_cast<std::uint64_t>(q) * count);
          }
        }
        params.elementSize = 8;
        params.op = ReduceOpKind::kCustom;
        params.commutative = false;
        params.root = root;
        params.chunkBytes = 64;
        SimOptions options;
        options.dtype = DataType::kInt64;
        options.op = test::matmulOp();
        const bool rooted = info.coll == Collective::kReduce;
        SimResult result = simulate(
            info, params,
            [&](int r) {
              SimBuffers b;
              b.input.resize(n * 8);
              for (std::uint64_t i = 0; i < n; ++i) {
                const std::int64_t m = test::matrixOf(r, i);
                std::memcpy(&b.input[i * 8], &m, 8);
              }
              b.output.assign(count * 8, 0);
              return b;
            },
            options);
        ASSERT_TRUE(result.ok()) << result.describeProblems();
        for (int r = 0; r < P; ++r) {
          if (rooted && r != root) continue;
          std::vector<std::int64_t> got(count), want(count);
          std::memcpy(got.data(), result.ranks[r].output.data(), count * 8);
          const std::uint64_t first = scatters ? static_cast<std::uint64_t>(r) * count : 0;
          std::copy_n(expected.begin() + static_cast<std::ptrdiff_t>(first), count, want.begin());
          EXPECT_EQ(got, want) << collectiveName(info.coll) << " " << info.name << " P=" << P
                               << " root " << root << " rank " << r;
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0) << "no algorithm keeps rank order";
}

// The hierarchical algorithms cross hosts only where their files say: P = 8 on 4 hosts of 2
// ranks (hostOf = r / 2), one piece per message.
TEST(Simulator, HierarchicalAlgorithmsCrossHostsOnlyWhereTheySay) {
  const int P = 8, H = 4;
  const std::vector<int> hostOf = {0, 0, 1, 1, 2, 2, 3, 3};
  struct Traffic {
    std::vector<std::uint64_t> across, within, acrossBytes;  // sends per rank
    std::uint64_t largestAcross = 0;
  };
  auto traffic = [&](Collective coll, std::uint64_t count, int root) {
    const AlgorithmInfo* info = findAlgorithm(coll, "hierarchical");
    EXPECT_NE(info, nullptr);
    Traffic t;
    t.across.assign(P, 0);
    t.within.assign(P, 0);
    t.acrossBytes.assign(P, 0);
    for (int r = 0; r < P; ++r) {
      ScheduleParams p;
      p.coll = coll;
      p.rank = r;
      p.size = P;
      p.count = count;
      p.elementSize = 4;
      p.root = root;
      p.inPlace = coll == Collective::kBroadcast;
      p.hostOf = hostOf;
      const Schedule s = info->build(p);
      for (const Task& task : s.tasks()) {
        if (task.kind != TaskKind::kSend) continue;
        if (hostOf[task.peer] == hostOf[r]) {
          ++t.within[r];
        } else {
          ++t.across[r];
          t.acrossBytes[r] += task.bytes;
          t.largestAcross = std::max(t.largestAcross, task.bytes);
        }
      }
    }
    return t;
  };
  auto sum = [](const std::vector<std::uint64_t>& v) {
    return std::accumulate(v.begin(), v.end(), std::uint64_t{0});
  };
  // broadcast: root 3 -> one leader on each other host, then one message inside each host.
  Traffic b = traffic(Collective::kBroadcast, 1000, 3);
  EXPECT_EQ(sum(b.across), static_cast<std::uint64_t>(H - 1));
  EXPECT_EQ(sum(b.within), static_cast<std::uint64_t>(H));
  EXPECT_EQ(b.within[2], 0u) << "rank 3 leads host 1, not rank 2";
  EXPECT_EQ(b.within[3], 1u);
  // allgather: only the leaders (the even ranks) talk across hosts, each host's 2 blocks once
  // to every other leader along the ring.
  Traffic g = traffic(Collective::kAllgather, 100, 0);
  for (int r = 0; r < P; ++r) {
    EXPECT_EQ(g.across[r] > 0, r % 2 == 0) << "rank " << r;
  }
  EXPECT_EQ(g.acrossBytes[0], static_cast<std::uint64_t>(H - 1) * 2 * 100 * 4);
  // allreduce: sliced, every rank moves its half of the vector across hosts and nothing
  // larger than a slice; inside the host one reduce-scatter and one allgather message.
  Traffic a = traffic(Collective::kAllreduce, 1000, 0);
  for (int r = 0; r < P; ++r) {
    EXPECT_GT(a.across[r], 0u) << "rank " << r;
    EXPECT_EQ(a.within[r], 2u) << "rank " << r;
  }
  EXPECT_EQ(a.largestAcross, 500u * 4);
}

// Hand-built schedules that break the rules.
Schedule sched() { return Schedule("by hand"); }

SimOptions countOnly() {
  SimOptions o;
  o.moveBytes = false;
  return o;
}

const SimProblem* find(const SimResult& r, SimProblemKind kind) {
  for (const SimProblem& p : r.problems) {
    if (p.kind == kind) return &p;
  }
  return nullptr;
}

TEST(Simulator, ReportsADeadlockWithTheRanksAndSteps) {
  // Each rank receives before it sends: both wait forever.
  std::vector<Schedule> s(2, sched());
  for (int r = 0; r < 2; ++r) {
    TaskId got = s[r].recv(1 - r, 4, output(), 8);
    s[r].send(1 - r, 4, output(), 8, {got});
  }
  SimResult result = simulateSchedules(std::move(s), {}, countOnly());
  const SimProblem* p = find(result, SimProblemKind::kDeadlock);
  ASSERT_NE(p, nullptr) << result.describeProblems();
  EXPECT_EQ(p->rank, 0);
  EXPECT_EQ(p->peer, 1);
  EXPECT_EQ(p->step, 4u);
  EXPECT_NE(p->detail.find("rank 0 waits in recv from rank 1 (step 4"), std::string::npos)
      << p->detail;
  EXPECT_NE(p->detail.find("rank 1 waits in recv from rank 0 (step 4"), std::string::npos)
      << p->detail;
  EXPECT_NE(p->detail.find("2 of 2 ranks cannot finish"), std::string::npos) << p->detail;
  EXPECT_FALSE(result.ranks[0].finished);
}

TEST(Simulator, ReportsTheCycleOfALargerDeadlock) {
  // Rank r receives from r+1 before sending to r-1: a cycle through all three ranks.
  const int P = 3;
  std::vector<Schedule> s(P, sched());
  for (int r = 0; r < P; ++r) {
    TaskId got = s[r].recv((r + 1) % P, 0, output(), 0);
    s[r].send((r + P - 1) % P, 0, output(), 0, {got});
  }
  SimResult result = simulateSchedules(std::move(s), {}, countOnly());
  const SimProblem* p = find(result, SimProblemKind::kDeadlock);
  ASSERT_NE(p, nullptr) << result.describeProblems();
  for (const char* part : {"rank 0 waits in recv from rank 1", "rank 1 waits in recv from rank 2",
                           "rank 2 waits in recv from rank 0"}) {
    EXPECT_NE(p->detail.find(part), std::string::npos) << p->detail;
  }
}

TEST(Simulator, ASendCompletesOnlyOnceItsReceiveIsPosted) {
  // Both ranks send, then receive once their send completed: fine with buffering, a
  // deadlock with the rendezvous large messages use.
  std::vector<Schedule> s(2, sched());
  for (int r = 0; r < 2; ++r) {
    TaskId sent = s[r].send(1 - r, 0, output(), 1 << 20);
    s[r].recv(1 - r, 0, output(), 1 << 20, {sent});
  }
  SimResult result = simulateSchedules(std::move(s), {}, countOnly());
  const SimProblem* p = find(result, SimProblemKind::kDeadlock);
  ASSERT_NE(p, nullptr) << result.describeProblems();
  EXPECT_NE(p->detail.find("rank 0 waits in send to rank 1 (step 0, 1048576 bytes)"),
            std::string::npos)
      << p->detail;
}

TEST(Simulator, ReportsMessagesWhoseSidesDisagreeOnTheLength) {
  std::vector<Schedule> s(2, sched());
  s[0].send(1, 3, input(), 8);
  s[1].recv(0, 3, output(), 4);
  std::vector<SimBuffers> b(2);
  b[0].input = {1, 2, 3, 4, 5, 6, 7, 8};
  b[1].output.assign(4, 0);
  SimResult result = simulateSchedules(std::move(s), std::move(b), SimOptions{});
  const SimProblem* p = find(result, SimProblemKind::kLengthMismatch);
  ASSERT_NE(p, nullptr) << result.describeProblems();
  EXPECT_EQ(p->rank, 1);
  EXPECT_EQ(p->peer, 0);
  EXPECT_EQ(p->step, 3u);
  EXPECT_NE(p->detail.find("rank 1 receives 4 bytes from rank 0 at step 3, which sends 8"),
            std::string::npos)
      << p->detail;
  EXPECT_EQ(result.ranks[1].output, (Bytes{1, 2, 3, 4}));  // no more than it asked for
}

TEST(Simulator, ReportsLeftoverMessagesAndReceivesNobodySends) {
  std::vector<Schedule> s(2, sched());
  s[0].send(1, 0, output(), 0);
  s[0].send(1, 0, output(), 0);  // a second message on the same step: nobody takes it
  s[1].recv(0, 0, output(), 0);
  s[1].recv(0, 7, output(), 0);  // nobody sends step 7
  SimResult result = simulateSchedules(std::move(s), {}, countOnly());
  ASSERT_EQ(result.problems.size(), 2u) << result.describeProblems();
  const std::string text = result.describeProblems();
  EXPECT_NE(text.find("rank 0 sends 0 bytes to rank 1 at step 0 that rank 1 never receives"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rank 1 expects 0 bytes from rank 0 at step 7 that rank 0 never sends"),
            std::string::npos)
      << text;
  EXPECT_EQ(find(result, SimProblemKind::kDeadlock), nullptr);
}

TEST(Simulator, ReportsPeersOutsideTheWorldAndRangesOutsideTheBuffers) {
  std::vector<Schedule> s(2, sched());
  s[0].send(2, 0, output(), 0);
  s[1].copy(output(6), input(), 4);
  std::vector<SimBuffers> b(2);
  b[1].input.assign(4, 1);
  b[1].output.assign(8, 0);
  SimResult result = simulateSchedules(std::move(s), std::move(b), SimOptions{});
  const SimProblem* bad = find(result, SimProblemKind::kBadPeer);
  ASSERT_NE(bad, nullptr) << result.describeProblems();
  EXPECT_EQ(bad->peer, 2);
  const SimProblem* out = find(result, SimProblemKind::kOutOfBounds);
  ASSERT_NE(out, nullptr) << result.describeProblems();
  EXPECT_NE(out->detail.find("output bytes [6, 10) of a 8-byte buffer"), std::string::npos)
      << out->detail;
}

TEST(Simulator, RefusesParamsThatDoNotFitTheCall) {
  const AlgorithmInfo* ring = findAlgorithm(Collective::kAllreduce, "ring");
  ASSERT_NE(ring, nullptr);
  ScheduleParams p;
  p.size = 4;
  p.count = 4;
  p.elementSize = 4;
  SimOptions o;
  o.dtype = DataType::kFloat64;  // 8 bytes, not 4
  EXPECT_THROW(simulate(
                   *ring, p, [](int) { return SimBuffers{}; }, o),
               InvalidArgument);
  p.size = 0;
  EXPECT_THROW(simulate(*ring, p, nullptr, countOnly()), InvalidArgument);
  // Every reduce_scatter algorithm indexes counts by rank: without them, an error.
  for (const char* name : {"ring", "recursive_halving"}) {
    const AlgorithmInfo* rs = findAlgorithm(Collective::kReduceScatter, name);
    ASSERT_NE(rs, nullptr) << name;
    ScheduleParams q;
    q.coll = Collective::kReduceScatter;
    q.size = 4;
    q.count = 8;
    q.elementSize = 4;
    try {
      simulate(*rs, q, nullptr, countOnly());
      ADD_FAILURE() << name << ": no error without counts";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("counts has 0 entries for 4 ranks"), std::string::npos)
          << e.what();
    }
  }
}

// The time model on calls whose time is known in closed form.
constexpr double kAlpha = 10e-6, kBeta = 1 / 2.5e9, kGamma = 1 / 10e9;

double modeled(Collective coll, const char* name, int P, std::uint64_t bytes,
               bool incoming = true) {
  const AlgorithmInfo* info = findAlgorithm(coll, name);
  EXPECT_NE(info, nullptr) << name;
  ScheduleParams p;
  p.coll = coll;
  p.size = P;
  p.count = bytes;
  p.elementSize = 1;
  p.chunkBytes = std::uint64_t{1} << 40;  // one piece: the formulas below have no pipelining
  p.counts.assign(P, bytes);
  p.displs.assign(P, 0);
  SimOptions o = countOnly();
  o.model.serializeIncoming = incoming;
  SimResult r = simulate(*info, p, nullptr, o);
  EXPECT_TRUE(r.ok()) << r.describeProblems();
  return r.seconds;
}

TEST(Simulator, TimeModelMatchesClosedForms) {
  const std::uint64_t n = 1 << 20;
  const double hop = kAlpha + static_cast<double>(n) * kBeta;
  // The root's link sends P-1 messages one after the other.
  EXPECT_NEAR(modeled(Collective::kBroadcast, "one_to_all", 5, n), 4 * hop, 1e-12);
  // A binomial tree: one hop per level, the root's children served in turn.
  EXPECT_NEAR(modeled(Collective::kBroadcast, "binomial", 2, n), hop, 1e-12);
  EXPECT_NEAR(modeled(Collective::kBroadcast, "binomial", 4, n), 2 * hop, 1e-12);
  // The root receives P-1 messages: one at a time on its incoming link, or all at once.
  EXPECT_NEAR(modeled(Collective::kGather, "linear", 5, n), 4 * hop, 1e-12);
  EXPECT_NEAR(modeled(Collective::kGather, "linear", 5, n, /*incoming=*/false), hop, 1e-12);
  // One exchange of the vector and one reduction of it.
  EXPECT_NEAR(modeled(Collective::kAllreduce, "recursive_doubling", 2, n),
              hop + static_cast<double>(n) * kGamma, 1e-12);
  // 8 ranks: three exchanges and three reductions.
  EXPECT_NEAR(modeled(Collective::kAllreduce, "recursive_doubling", 8, n),
              3 * (hop + static_cast<double>(n) * kGamma), 1e-12);
  // Empty messages cost alpha: dissemination is ceil(log2 P) rounds.
  EXPECT_NEAR(modeled(Collective::kBarrier, "dissemination", 5, 0), 3 * kAlpha, 1e-12);
  // Ring allreduce, segments of n/P: 2(P-1) hops of a segment and P-1 reductions of one.
  const int P = 4;
  const double seg = static_cast<double>(n) / P;
  EXPECT_NEAR(modeled(Collective::kAllreduce, "ring", P, n),
              2 * (P - 1) * (kAlpha + seg * kBeta) + (P - 1) * seg * kGamma, 1e-9);
}

TEST(Simulator, CountsRoundsOnTheCriticalPath) {
  auto rounds = [](Collective coll, const char* name, int P, std::uint64_t count) {
    const AlgorithmInfo* info = findAlgorithm(coll, name);
    ScheduleParams p;
    p.coll = coll;
    p.size = P;
    p.count = count;
    p.counts.assign(P, count);
    p.displs.assign(P, 0);
    SimResult r = simulate(*info, p, nullptr, countOnly());
    EXPECT_TRUE(r.ok()) << r.describeProblems();
    return r.rounds;
  };
  EXPECT_EQ(rounds(Collective::kAllreduce, "ring", 8, 64), 14u);
  EXPECT_EQ(rounds(Collective::kAllreduce, "recursive_doubling", 8, 64), 3u);
  // Not a power of two: a message chain crosses the rounds in which its ends' nr differ, plus
  // the fold in and out; folded ranks 0..rem-1 are at most bitlen(rem-1) bits apart.
  EXPECT_EQ(rounds(Collective::kAllreduce, "recursive_doubling", 6, 64), 3u);  // 2-3-1-0
  EXPECT_EQ(rounds(Collective::kAllreduce, "recursive_doubling", 7, 64), 4u);  // 4-5-6-3-2
  EXPECT_EQ(rounds(Collective::kAllreduce, "halving_doubling", 16, 64), 8u);
  EXPECT_EQ(rounds(Collective::kAllgather, "ring", 5, 3), 4u);
  EXPECT_EQ(rounds(Collective::kBroadcast, "binomial", 9, 1), 3u);  // rank 7: 0-4-6-7
  EXPECT_EQ(rounds(Collective::kBarrier, "all_to_one", 7, 0), 2u);
  EXPECT_EQ(rounds(Collective::kBarrier, "dissemination", 17, 0), 5u);
}

// Count-only runs at the tool's largest case stay cheap and agree with the formulas.
TEST(Simulator, CountsAndTimesP1024At64MiBWithoutMovingBytes) {
  const int P = 1024;
  for (const char* name : {"ring", "halving_doubling", "recursive_doubling"}) {
    const AlgorithmInfo* info = findAlgorithm(Collective::kAllreduce, name);
    ASSERT_NE(info, nullptr);
    ScheduleParams p;
    p.size = P;
    p.elementSize = 4;
    p.count = (std::uint64_t{64} << 20) / 4;
    SimResult r = simulate(*info, p, nullptr, countOnly());
    ASSERT_TRUE(r.ok()) << r.describeProblems();
    for (int rank : {0, 1, P / 2, P - 1}) {
      ScheduleParams mine = p;
      mine.rank = rank;
      EXPECT_EQ(r.ranks[rank].cost, info->cost(mine)) << name << " rank " << rank;
      EXPECT_TRUE(r.ranks[rank].output.empty());
    }
    // No algorithm beats sending and receiving its own bytes once at full bandwidth.
    EXPECT_GT(r.seconds, static_cast<double>(r.ranks[0].cost.sendBytes) * kBeta) << name;
  }
}

}  // namespace
}  // namespace collx::algorithms
