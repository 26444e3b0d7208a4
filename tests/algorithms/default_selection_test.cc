// The default algorithm is chosen in one place (algorithms::select): what collx-sim marks as
// the default for a call (algorithms::defaultChoice over its description of the call) is what
// a real call through the API selects, for every collective, P, size and data type, in jobs
// with and without shared memory, on one host and on several. A real call here runs in
// select-only mode (detail::Runtime::selectOnly): it goes through the API's own checks and
// its own description of the call (its counts, its byte measure's inputs) and stops once it
// chose, so 1 GiB calls cost nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "collx/algorithms/selection.h"
#include "collx/base/config.h"
#include "collx/collx.h"
#include "runtime.h"
#include "util/test_util.h"
#include "util/world.h"

namespace collx {
namespace {

using algorithms::Collective;

// Sizes in bytes from 0 to 1 GiB: every power of two and its neighbours, where the table's
// rows begin and end.
std::vector<std::uint64_t> sizes() {
  std::vector<std::uint64_t> out = {0, 1, 2, 3, 4, 5, 8};
  for (int k = 4; k <= 30; ++k) {
    const std::uint64_t b = std::uint64_t{1} << k;
    for (std::uint64_t s : {b - 4, b - 1, b, b + 4}) out.push_back(s);
  }
  return out;
}

// Addresses that are never touched (a select-only call moves nothing).
void* fakeInput() { return reinterpret_cast<void*>(std::uintptr_t{1} << 40); }
void* fakeOutput() { return reinterpret_cast<void*>(std::uintptr_t{1} << 42); }

// The algorithm this rank's call of `coll` with `count` elements (per rank block for the
// blockwise collectives, equal blocks for the v-collectives) selects, through the API.
std::string realChoice(Context& ctx, Collective coll, std::uint64_t count, DataType dtype) {
  detail::Runtime& rt = *ctx.runtime();
  rt.selectOnly = true;
  rt.selected = nullptr;
  const int P = ctx.size();
  const Counts equal(static_cast<std::size_t>(P), count);
  Counts displs(static_cast<std::size_t>(P));
  for (int i = 0; i < P; ++i)
    displs[static_cast<std::size_t>(i)] = static_cast<std::uint64_t>(i) * count;
  void* in = fakeInput();
  void* out = fakeOutput();
  const int root = 0;
  switch (coll) {
    case Collective::kAllreduce:
      allreduce(ctx, in, out, count, dtype);
      break;
    case Collective::kAllgather:
      allgather(ctx, in, out, count, dtype);
      break;
    case Collective::kAllgatherv:
      allgatherv(ctx, in, count, out, equal, displs, dtype);
      break;
    case Collective::kReduceScatter:
      reduceScatter(ctx, in, out, count, dtype);
      break;
    case Collective::kReduce:
      reduce(ctx, in, out, count, dtype, root);
      break;
    case Collective::kBroadcast:
      broadcast(ctx, out, count, dtype, root);
      break;
    case Collective::kGather:
      gather(ctx, in, out, count, dtype, root);
      break;
    case Collective::kGatherv:
      gatherv(ctx, in, count, out, equal, displs, dtype, root);
      break;
    case Collective::kScatter:
      scatter(ctx, in, out, count, dtype, root);
      break;
    case Collective::kScatterv:
      scatterv(ctx, in, equal, displs, out, count, dtype, root);
      break;
    case Collective::kAlltoall:
      alltoall(ctx, in, out, count, dtype);
      break;
    case Collective::kAlltoallv:
      alltoallv(ctx, in, equal, displs, out, equal, displs, dtype);
      break;
    case Collective::kBarrier:
      barrier(ctx);
      break;
    case Collective::kSendRecv:
      break;
  }
  rt.selectOnly = false;
  return rt.selected != nullptr ? rt.selected->name : "(none)";
}

struct Job {
  std::string name;
  int size;
  std::string transport;             // "auto": ranks on one host share memory; "tcp"
  std::vector<std::string> hostIds;  // several simulated hosts; empty: one
  int hosts;
  bool sharedMemory;  // what the context must report
};

std::vector<Job> jobs() {
  std::vector<Job> out;
  for (int P = 1; P <= 16; ++P) {
    out.push_back({"shm", P, "auto", {}, 1, true});
    if (P > 1) out.push_back({"tcp", P, "tcp", {}, 1, false});
    if (P > 2) {  // two hosts: ranks 0..P/2-1 on one, the others on the other
      std::vector<std::string> ids;
      for (int r = 0; r < P; ++r) ids.push_back(r < P / 2 ? "hostA" : "hostB");
      out.push_back({"two_hosts", P, "auto", ids, 2, false});
    }
    if (P > 1 && P <= 4) {  // one rank per host: the host rule does not apply
      std::vector<std::string> ids;
      for (int r = 0; r < P; ++r) ids.push_back("host" + std::to_string(r));
      out.push_back({"one_per_host", P, "auto", ids, P, false});
    }
  }
  for (int P : {33, 64}) {  // allgather's table splits by bytes only from 32 ranks on
    out.push_back({"shm", P, "auto", {}, 1, true});
    out.push_back({"tcp", P, "tcp", {}, 1, false});
    std::vector<std::string> ids;
    for (int r = 0; r < P; ++r) ids.push_back("host" + std::to_string(r % 3));
    out.push_back({"three_hosts", P, "auto", ids, 3, false});
  }
  return out;
}

class DefaultSelection : public ::testing::TestWithParam<Job> {};

TEST_P(DefaultSelection, CollxSimMarksWhatARealCallSelects) {
  const Job& job = GetParam();
  COLLX_NEED_FILES_FOR(job.size);
  ContextOptions options;
  options.transport = job.transport;
  test::World world(job.size, options, job.hostIds);
  ASSERT_EQ(world.context(0).sharedMemory(), job.sharedMemory) << job.name;
  // What collx-sim knows of the job: the settings, as it reads them, and the job's shape.
  const algorithms::SelectionPolicy policy =
      algorithms::SelectionPolicy::fromConfig(Config::process(), job.sharedMemory, job.hosts);
  // Every call of the grid, and collx-sim's mark for it.
  struct Case {
    Collective coll;
    DataType dtype;
    std::uint64_t bytes;
    std::uint64_t count;
    std::string marked;
  };
  std::vector<Case> cases;
  for (Collective coll : algorithms::collectives()) {
    for (DataType dtype : {DataType::kFloat32, DataType::kUint8}) {
      const std::uint64_t es = dataTypeSize(dtype);
      for (std::uint64_t bytes : sizes()) {
        if (coll == Collective::kBarrier && bytes > 0) break;
        if (bytes % es != 0) continue;
        // collx-sim's sizes are one call's count x element size.
        algorithms::UniformCall call;
        call.coll = coll;
        call.ranks = job.size;
        call.count = bytes / es;
        call.dtype = dtype;
        cases.push_back({coll, dtype, bytes, call.count,
                         algorithms::defaultChoice(call, policy).algorithm->name});
      }
    }
  }
  std::vector<std::string> wrong(static_cast<std::size_t>(job.size));
  world.runOk([&](int rank, Context& ctx) {
    std::string& mine = wrong[static_cast<std::size_t>(rank)];
    for (const Case& c : cases) {
      const std::string real = realChoice(ctx, c.coll, c.count, c.dtype);
      if (real != c.marked && mine.size() < 2000) {
        std::ostringstream line;
        line << algorithms::collectiveName(c.coll) << " " << dataTypeName(c.dtype) << " " << c.bytes
             << " bytes: the call selects " << real << ", collx-sim marks " << c.marked << "; ";
        mine += line.str();
      }
    }
  });
  const auto compared = cases.size();
  EXPECT_GT(compared, 13u * 100u);
  for (int r = 0; r < job.size; ++r) {
    EXPECT_EQ(wrong[static_cast<std::size_t>(r)], "")
        << job.name << " P=" << job.size << " rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Jobs, DefaultSelection, ::testing::ValuesIn(jobs()), [](const auto& p) {
  return p.param.name + "_P" + std::to_string(p.param.size);
});

// collx-sim itself puts its mark where defaultChoice() says (for the job it models: one host,
// no shared memory), at sizes where the allgather and reduce_scatter tables split by the
// whole buffer, not by one rank's block.
TEST(CollxSim, MarksTheDefaultChoice) {
  const algorithms::SelectionPolicy policy =
      algorithms::SelectionPolicy::fromConfig(Config::process(), false, 1);
  int checked = 0;
  for (Collective coll : {Collective::kAllgather, Collective::kReduceScatter,
                          Collective::kAllreduce, Collective::kAlltoall, Collective::kBroadcast}) {
    for (int P : {4, 33}) {
      for (std::uint64_t bytes :
           {std::uint64_t{64}, std::uint64_t{2048}, std::uint64_t{65536}, std::uint64_t{262144}}) {
        test::RunResult r =
            test::run({test::binDir() + "/collx-sim", "-c", algorithms::collectiveName(coll), "-P",
                       std::to_string(P), "--sizes", std::to_string(bytes)},
                      {}, std::chrono::seconds(60));
        ASSERT_EQ(r.code, 0) << r.err;
        algorithms::UniformCall call;
        call.coll = coll;
        call.ranks = P;
        call.count = bytes / 4;
        const std::string want = algorithms::defaultChoice(call, policy).algorithm->name;
        std::string marked;
        std::istringstream lines(r.out);
        for (std::string line; std::getline(lines, line);) {
          std::istringstream words(line);
          std::vector<std::string> w;
          for (std::string x; words >> x;) w.push_back(x);
          bool star = false;
          for (const auto& x : w) star |= x == "*";
          if (!star) continue;
          for (const auto& x : w) {
            if (algorithms::findAlgorithm(coll, x) != nullptr) marked = x;
          }
        }
        EXPECT_EQ(marked, want) << algorithms::collectiveName(coll) << " P=" << P << " " << bytes
                                << " bytes:\n"
                                << r.out;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 40);
}

}  // namespace
}  // namespace collx
