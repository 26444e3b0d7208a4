// Traces (ContextOptions::traceDir, COLLX_TRACE): each rank's file over tcp and shared memory
// (named by job, generation and rank, mode 0600, valid JSON, one span per call with its
// name and sequence number, every step inside its call, the clock offset to rank 0), and
// collx-trace merge on such files: the slowest rank of a call named, truncated and malformed
// files, a missing directory, no files. (COLLX_TRACE through collx-run: bench_test.)
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "collx/algorithms/tracer.h"
#include "collx/collx.h"
#include "util/test_util.h"
#include "util/world.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using test::World;

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Span {
  std::string name;
  json args;
  double begin = 0;
  double end = -1;
};

// One rank's trace, read back: its call spans by id (in the order they began), its steps.
struct RankTrace {
  json events;
  std::vector<std::string> callOrder;
  std::map<std::string, Span> calls;
  std::vector<Span> steps;  // transfers and X spans, each with args.call
  json collx;               // the "collx" metadata event's args
  std::string processName;
};

RankTrace parseTrace(const std::string& path) {
  RankTrace t;
  t.events = json::parse(readFile(path));  // throws on invalid JSON
  EXPECT_TRUE(t.events.is_array());
  std::map<std::string, Span> transfers;
  for (const json& e : t.events) {
    const std::string ph = e.at("ph");
    EXPECT_TRUE(e.contains("pid"));
    if (ph == "M") {
      if (e.at("name") == "collx") t.collx = e.at("args");
      if (e.at("name") == "process_name") t.processName = e.at("args").at("name");
      continue;
    }
    const double ts = e.at("ts").get<double>();
    const std::string cat = e.at("cat");
    if (ph == "b" || ph == "e") {
      const std::string id = e.at("id");
      auto& spans = cat == "call" ? t.calls : transfers;
      if (ph == "b") {
        EXPECT_EQ(spans.count(id), 0u) << "span id " << id << " begins twice";
        spans[id] = Span{e.at("name"), e.value("args", json::object()), ts, -1};
        if (cat == "call") t.callOrder.push_back(id);
      } else {
        EXPECT_EQ(spans.count(id), 1u) << "span id " << id << " ends without a begin";
        spans[id].end = ts;
      }
    } else if (ph == "X") {
      t.steps.push_back(Span{e.at("name"), e.at("args"), ts, ts + e.at("dur").get<double>()});
    }
  }
  for (auto& [id, span] : transfers) t.steps.push_back(span);
  return t;
}

// collx-trace, run to its end.
struct Tool {
  int code = -1;
  std::string out, err;
};

Tool collxTrace(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {test::binDir() + "/collx-trace"};
  argv.insert(argv.end(), args.begin(), args.end());
  test::Process p(argv);
  EXPECT_TRUE(p.wait(60s)) << "collx-trace did not finish";
  return Tool{p.exitCode(), p.out(), p.err()};
}

class TraceFiles : public ::testing::TestWithParam<const char*> {};

TEST_P(TraceFiles, EveryRankWritesItsCallsAndTheirSteps) {
  const std::string transport = GetParam();
  test::TempDir dir;
  const std::string traceDir = dir.path() + "/traces";  // made by the first rank
  ContextOptions options;
  options.transport = transport;
  options.traceDir = traceDir;
  options.jobId = "job/7";
  std::vector<std::string> paths(3);
  bool shared = false;
  {
    World world(3, options);
    shared = world.context(0).sharedMemory();
    world.runOk([&paths, shared](int rank, Context& ctx) {
      paths[static_cast<std::size_t>(rank)] = ctx.tracePath();
      std::vector<float> a(3000, 1.0f), b(3000);
      AllreduceOptions ring;
      ring.algorithm = "ring";
      allreduce(ctx, a.data(), b.data(), a.size(), DataType::kFloat32, ring);
      std::vector<std::int32_t> v(7, rank);
      broadcast(ctx, v.data(), v.size(), DataType::kInt32, 1);
      barrier(ctx);
      // Nonblocking, then (shared memory) the shm algorithm, blocking and nonblocking.
      allreduceAsync(ctx, a.data(), b.data(), 30, DataType::kFloat32, ring).wait();
      if (shared) {
        AllreduceOptions shm;
        shm.algorithm = "shm";
        allreduce(ctx, a.data(), b.data(), 10, DataType::kFloat32, shm);
        allreduceAsync(ctx, a.data(), b.data(), 10, DataType::kFloat32, shm).wait();
      }
    });
  }  // the contexts close: the files are complete
  const std::vector<std::string> names = {"allreduce", "broadcast", "barrier",
                                          "allreduce", "allreduce", "allreduce"};
  const std::size_t calls = shared ? 6 : 4;
  if (transport == "shm") {
    EXPECT_TRUE(shared);
  }
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::string path = paths[static_cast<std::size_t>(rank)];
    EXPECT_EQ(path, traceDir + "/collx-trace-job_7-g0-r" + std::to_string(rank) + ".json");
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0) << path;
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    const RankTrace t = parseTrace(path);
    EXPECT_EQ(t.processName.rfind("rank " + std::to_string(rank) + " (", 0), 0u) << t.processName;
    ASSERT_TRUE(t.collx.is_object());
    EXPECT_EQ(t.collx.at("rank"), rank);
    EXPECT_EQ(t.collx.at("size"), 3);
    EXPECT_EQ(t.collx.at("job"), "job/7");
    // One host, one steady clock: nothing to measure.
    EXPECT_EQ(t.collx.at("clock_source"), rank == 0 ? "rank 0" : "same host as rank 0");
    EXPECT_EQ(t.collx.at("clock_rounds"), 0);
    EXPECT_EQ(t.collx.at("clock_offset_us").get<double>(), 0.0);
    ASSERT_EQ(t.callOrder.size(), calls);
    for (std::size_t i = 0; i < calls; ++i) {
      const Span& call = t.calls.at(t.callOrder[i]);
      EXPECT_EQ(call.name, names[i]);
      EXPECT_EQ(call.args.at("seq"), i);
      EXPECT_GE(call.end, call.begin) << call.name << " never ended";
    }
    const Span& ring = t.calls.at(t.callOrder[0]);
    EXPECT_EQ(ring.args.at("algorithm"), "ring");
    EXPECT_EQ(ring.args.at("dtype"), "float32");
    EXPECT_EQ(ring.args.at("count"), 3000);
    EXPECT_EQ(ring.args.at("bytes"), 12000);
    EXPECT_EQ(t.calls.at(t.callOrder[1]).args.at("root"), 1);
    // Every step inside its call, and the ring's messages: 2 reduce-scatter and 2 allgather
    // steps, each a send to the right and a receive from the left, and its reductions.
    std::map<std::string, int> perKind;
    for (const Span& step : t.steps) {
      const std::string callId = step.args.at("call");
      ASSERT_EQ(t.calls.count(callId), 1u) << step.name;
      const Span& call = t.calls.at(callId);
      EXPECT_GE(step.begin, call.begin) << step.name << " of " << call.name;
      EXPECT_LE(step.end, call.end) << step.name << " of " << call.name;
      EXPECT_GE(step.end, step.begin) << step.name;
      if (callId == t.callOrder[0]) ++perKind[step.name];
    }
    EXPECT_EQ(perKind["send to " + std::to_string((rank + 1) % 3)], 4);
    EXPECT_EQ(perKind["recv from " + std::to_string((rank + 2) % 3)], 4);
    EXPECT_EQ(perKind["reduce"], 2);
    int asyncSteps = 0;
    for (const Span& step : t.steps) asyncSteps += step.args.at("call") == t.callOrder[3];
    EXPECT_GE(asyncSteps, 8) << "the nonblocking ring's sends and receives";
    if (shared) {
      for (std::size_t call : {4, 5}) {
        int shmSpans = 0;
        for (const Span& step : t.steps) {
          shmSpans += step.name == "shm allreduce" && step.args.at("call") == t.callOrder[call];
        }
        EXPECT_EQ(shmSpans, 1) << "call " << call;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, TraceFiles, ::testing::Values("tcp", "shm"));

// Ranks on another host than rank 0 (simulated: host ids) measure their clock against rank
// 0's by ping-pong; the one they share here is the same clock, so the offset found is within
// half the round trip of its sample.
TEST(TraceClock, RanksOnOtherHostsMeasureTheirOffsetToRankZero) {
  test::TempDir dir;
  ContextOptions options;
  options.traceDir = dir.path();
  std::vector<std::string> paths(4);
  {
    World world(4, options, {"host-a", "host-b", "host-a", "host-b"});
    world.runOk([&paths](int rank, Context& ctx) {
      paths[static_cast<std::size_t>(rank)] = ctx.tracePath();
      CollectiveOptions dissemination;
      dissemination.algorithm = "dissemination";
      barrier(ctx, dissemination);
      // The clock's messages are not the user's: 2 rounds of one message at P=4.
      EXPECT_EQ(ctx.stats().messagesSent, 2u) << "rank " << rank;
      EXPECT_EQ(ctx.stats().messagesReceived, 2u) << "rank " << rank;
    });
  }
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const RankTrace t = parseTrace(paths[static_cast<std::size_t>(rank)]);
    const json& c = t.collx;
    const double offset = c.at("clock_offset_us"), trip = c.at("clock_round_trip_us");
    if (rank % 2 == 1) {
      EXPECT_EQ(c.at("clock_source"), "measured");
      EXPECT_GE(c.at("clock_rounds"), 8);
      EXPECT_LE(c.at("clock_rounds"), 64);
      EXPECT_GT(trip, 0.0);
      EXPECT_LE(std::abs(offset), trip / 2 + 1.0) << c;
    } else {
      EXPECT_EQ(c.at("clock_source"), rank == 0 ? "rank 0" : "same host as rank 0");
      EXPECT_EQ(offset, 0.0);
    }
    ASSERT_EQ(t.callOrder.size(), 1u) << "the clock's messages are no call of the trace";
  }
}

// Only rank 1 traces: no rank waits for a measurement, and its file says its clock is not
// aligned with rank 0's.
TEST(TraceClock, ARankThatAloneTracesIsNotAligned) {
  test::TempDir dir;
  auto store = std::make_shared<rendezvous::HashStore>();
  std::vector<std::shared_ptr<Context>> contexts(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      ContextOptions options;
      options.transport = "tcp";
      options.timeout = 30s;
      if (rank == 1) options.traceDir = dir.path();
      contexts[static_cast<std::size_t>(rank)] = Context::create(store, rank, 2, options);
      barrier(*contexts[static_cast<std::size_t>(rank)]);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(contexts[0] && contexts[1]);
  EXPECT_EQ(contexts[0]->tracePath(), "");
  const std::string path = contexts[1]->tracePath();
  contexts.clear();
  const RankTrace t = parseTrace(path);
  EXPECT_EQ(t.collx.at("clock_source"), "not aligned");
  EXPECT_EQ(t.callOrder.size(), 1u);
}

// The tracer alone with a buffer of 4 events: it writes whenever the buffer fills, so what a
// rank that dies leaves (no closing bracket) still holds its earlier calls, and
// collx-trace reads it, saying it was not closed.
TEST(Tracer, WritesWhenItsBufferFillsAndClosesTheArrayLast) {
  test::TempDir dir;
  algorithms::Tracer::Identity id;
  id.rank = 0;
  id.size = 1;
  id.host = "a \"quoted\" host";
  std::string path;
  {
    algorithms::Tracer tracer(dir.path() + "/deep/er", id, 4);
    path = tracer.path();
    tracer.setClock({});
    for (std::uint64_t seq = 0; seq < 5; ++seq) {
      algorithms::Tracer::Call call;
      call.collective = "barrier";
      call.algorithm = "dissemination";
      call.seq = seq;
      const std::uint64_t span = tracer.beginCall(call, algorithms::Tracer::nowNs());
      tracer.endCall(span, "barrier", seq == 4, algorithms::Tracer::nowNs());
    }
    // 10 events: 8 written (two full buffers), 2 still buffered.
    const std::string partial = readFile(path);
    EXPECT_EQ(partial.find("\n]"), std::string::npos);
    std::size_t begins = 0;
    for (std::size_t at = 0; (at = partial.find("\"ph\":\"b\"", at)) != std::string::npos; ++at) {
      ++begins;
    }
    EXPECT_EQ(begins, 4u) << partial;
    const Tool t = collxTrace({"merge", dir.path() + "/deep/er"});
    EXPECT_EQ(t.code, 0) << t.out << t.err;
    EXPECT_NE(t.err.find("no closing bracket"), std::string::npos) << t.err;
    EXPECT_NE(t.out.find("total: 4 calls"), std::string::npos) << t.out;
  }
  const RankTrace t = parseTrace(path);  // complete now: valid JSON
  EXPECT_EQ(t.processName, "rank 0 (a \"quoted\" host)");
  ASSERT_EQ(t.callOrder.size(), 5u);
  const json last = t.events.back();
  EXPECT_EQ(last.at("ph"), "e");
  EXPECT_EQ(last.at("args").at("failed"), true);
}

// Three ranks over tcp, rank 2 entering the second call 200 ms after the others.
std::vector<std::string> writeLateRankTraces(const std::string& dir) {
  ContextOptions options;
  options.transport = "tcp";
  options.traceDir = dir;
  std::vector<std::string> paths(3);
  World world(3, options);
  world.runOk([&paths](int rank, Context& ctx) {
    paths[static_cast<std::size_t>(rank)] = ctx.tracePath();
    std::vector<float> a(100, 1.0f), b(100);
    allreduce(ctx, a.data(), b.data(), a.size(), DataType::kFloat32);
    if (rank == 2) std::this_thread::sleep_for(200ms);
    allreduce(ctx, a.data(), b.data(), a.size(), DataType::kFloat32);
    barrier(ctx);
  });
  return paths;
}

// The row of `call` in collx-trace merge's table.
std::string rowOf(const std::string& out, const std::string& call) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  " + call + " ", 0) == 0) return line;
  }
  return "";
}

double millisIn(const std::string& text, int nth) {
  static const std::regex kMs(R"(([0-9]+\.[0-9]+) ms)");
  int i = 0;
  for (std::sregex_iterator it(text.begin(), text.end(), kMs), end; it != end; ++it, ++i) {
    if (i == nth) return std::stod((*it)[1]);
  }
  return -1;
}

TEST(TraceMerge, NamesTheRankThatEnteredLastAndTheWait) {
  test::TempDir dir;
  writeLateRankTraces(dir.path());
  const std::string merged = dir.path() + "/merged.json";
  const Tool t = collxTrace({"merge", dir.path(), "-o", merged, "--top", "0"});
  ASSERT_EQ(t.code, 0) << t.out << t.err;
  EXPECT_EQ(t.err, "");
  EXPECT_NE(t.out.find("merged 3 ranks' traces (job default, generation 0)"), std::string::npos)
      << t.out;
  const std::string late = rowOf(t.out, "allreduce#1");
  ASSERT_NE(late, "") << t.out;
  EXPECT_NE(late.find("rank 2"), std::string::npos) << late;
  // Ranks 0 and 1 waited about 200 ms each: mean and max.
  EXPECT_GE(millisIn(late, 0), 150.0) << late;
  EXPECT_LT(millisIn(late, 0), 5000.0) << late;
  EXPECT_GE(millisIn(late, 1), millisIn(late, 0)) << late;
  EXPECT_NE(rowOf(t.out, "allreduce#0"), "") << t.out;
  EXPECT_NE(rowOf(t.out, "barrier#2"), "") << t.out;
  EXPECT_NE(t.out.find("total: 3 calls"), std::string::npos) << t.out;
  // Over the three calls, the two others waited about 200 ms each for rank 2.
  std::string total = t.out.substr(t.out.find("total: "));
  EXPECT_GE(millisIn(total, 0), 300.0) << total;
  const json all = json::parse(readFile(merged));
  std::set<int> pids;
  for (const json& e : all) pids.insert(e.at("pid").get<int>());
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2}));

  // --top 1: only the call waited for longest.
  const Tool top = collxTrace({"merge", dir.path(), "-o", merged, "--top", "1"});
  ASSERT_EQ(top.code, 0) << top.out << top.err;
  EXPECT_NE(rowOf(top.out, "allreduce#1"), "") << top.out;
  EXPECT_EQ(rowOf(top.out, "allreduce#0"), "") << top.out;
}

TEST(TraceMerge, DropsATruncatedLastEventAndRejectsAMalformedOne) {
  test::TempDir dir;
  const std::vector<std::string> paths = writeLateRankTraces(dir.path());
  // Rank 1 "crashed" while writing: no closing bracket, its last event cut in half.
  std::string text = readFile(paths[1]);
  const std::size_t close = text.rfind("\n]");
  ASSERT_NE(close, std::string::npos);
  text.resize(close);
  text.resize(text.size() - 25);
  std::ofstream(paths[1], std::ios::trunc) << text;
  Tool t = collxTrace({"merge", dir.path()});
  ASSERT_EQ(t.code, 0) << t.out << t.err;
  EXPECT_NE(t.err.find("collx-trace-default-g0-r1.json: dropped its last event"), std::string::npos)
      << t.err;
  EXPECT_NE(t.err.find("no closing bracket"), std::string::npos) << t.err;
  EXPECT_NE(rowOf(t.out, "allreduce#1").find("rank 2"), std::string::npos) << t.out;
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/collx-trace-default-g0-merged.json"));

  // A line in the middle that is not an event: an error naming the file and the line.
  const std::size_t second = text.find("\n", text.find("\n") + 1);
  text.insert(second + 1, "{\"ph\": oops\n");
  std::ofstream(paths[1], std::ios::trunc) << text;
  t = collxTrace({"merge", dir.path()});
  EXPECT_EQ(t.code, 1) << t.out << t.err;
  EXPECT_NE(t.err.find("collx-trace-default-g0-r1.json: line 3 is not a JSON event"),
            std::string::npos)
      << t.err;

  // Not a trace at all.
  std::ofstream(paths[1], std::ios::trunc) << "hello";
  t = collxTrace({"merge", dir.path()});
  EXPECT_EQ(t.code, 1);
  EXPECT_NE(t.err.find("not a trace event file"), std::string::npos) << t.err;
}

TEST(TraceMerge, ClearErrorsWithoutTraces) {
  test::TempDir dir;
  Tool t = collxTrace({"merge", dir.path() + "/missing"});
  EXPECT_EQ(t.code, 1);
  EXPECT_NE(t.err.find("missing: no such directory"), std::string::npos) << t.err;
  t = collxTrace({"merge", dir.path()});
  EXPECT_EQ(t.code, 1);
  EXPECT_NE(t.err.find("no trace files"), std::string::npos) << t.err;
  t = collxTrace({"split", dir.path()});
  EXPECT_EQ(t.code, 2);
  EXPECT_NE(t.err.find("unknown command 'split'"), std::string::npos) << t.err;
  t = collxTrace({"--help"});
  EXPECT_EQ(t.code, 0);
  for (const char* option : {"--output", "--top", "--job", "--generation"}) {
    EXPECT_NE(t.out.find(option), std::string::npos) << option << "\n" << t.out;
  }
}

}  // namespace
}  // namespace collx
