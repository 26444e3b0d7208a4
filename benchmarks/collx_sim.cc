// collx-sim: models one collective at a chosen P over a range of sizes, without a network.
//
//   collx-sim -c allreduce -P 64 -b 4 -e 64M -f 4 --alpha 10us --beta-gbps 2.5 --gamma-gbps 10
//
// Every algorithm of the registry for that collective runs in one process: the real
// schedules of all P ranks over the simulator's virtual transport (counting and timing
// only, no bytes move). Per size it prints each algorithm's modeled time under the
// alpha-beta-gamma model (collx/algorithms/simulator.h), the rounds on its critical path and
// the most messages and bytes any rank sends, and marks the algorithm the default selection
// table picks and the fastest modeled one. It is a model: use it to see how the algorithms
// scale with P and size, and where the table's thresholds sit against the model; measure
// with collx-bench before changing the table.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "collx/algorithms/registry.h"
#include "collx/algorithms/selection.h"
#include "collx/algorithms/settings.h"
#include "collx/algorithms/simulator.h"
#include "collx/base/config.h"
#include "collx/base/data_type.h"
#include "collx/base/error.h"
#include "collx/base/reduce_op.h"
#include "collx/base/units.h"
#include "collx/context.h"

namespace {

using collx::DataType;
using collx::algorithms::AlgorithmInfo;
using collx::algorithms::Collective;
using collx::algorithms::ScheduleParams;
using collx::algorithms::SimResult;

constexpr const char* kAbout =
    R"(Models one collective over P ranks in one process: every algorithm of the registry for it
runs its real schedules on all P ranks over a virtual transport (no bytes move), under an
alpha-beta-gamma model:
  - a message occupies its sender's outgoing link, and then its receiver's incoming link,
    for alpha + bytes * beta (a rank's messages queue one after the other);
  - a reduction costs gamma * bytes on the rank that runs it; copies are free;
  - the call's time is the last rank's finish.
Per size it prints each algorithm's modeled time, the rounds on its critical path (messages
on the longest chain of dependencies), the most messages and bytes any rank sends, and
marks the algorithm the default selection table picks (*) and the fastest modeled one (<).
)";

constexpr const char* kFooter =
    R"(A size is what the selection table looks at: count x element size, the count being the
whole vector (allreduce, reduce, broadcast) or one rank's block (allgather(v),
reduce_scatter, gather(v), scatter(v); alltoall(v): the block for each peer). The
v-collectives model equal blocks. Sizes are rounded down to whole elements.

Columns: time (us, modeled), x best (time / the fastest algorithm's at that size), rounds,
msgs/rank and bytes/rank (the most of any rank; the root of a rooted collective sends more).
The defaults are close to loopback TCP on a 2-core machine; for a cluster, e.g.
--alpha 2us --beta-gbps 12 --gamma-gbps 10.

exit codes: 0 every algorithm ran; 1 one failed (its problems on stderr); 2 bad arguments.
)";

struct Args {
  Collective coll = Collective::kAllreduce;
  int ranks = 8;
  std::vector<std::string> algorithms;
  collx::cli::SizeSweep sweep;
  std::vector<std::uint64_t> sizes;  // sweep.resolve()
  DataType dtype = DataType::kFloat32;
  collx::ReduceOpKind op = collx::ReduceOpKind::kSum;
  int root = 0;
  std::uint64_t chunkBytes = collx::algorithms::kChunkBytes.defaultValue();
  collx::algorithms::TimeModel model;
  std::uint64_t maxTasks = 50'000'000;
  bool agree = false;
};

void listAlgorithms() {
  for (Collective c : collx::algorithms::collectives()) {
    std::printf("%s:\n", collx::algorithms::collectiveName(c));
    for (const AlgorithmInfo& info : collx::algorithms::algorithmRegistry()) {
      if (info.coll != c) continue;
      std::printf("  %-20s %s%s\n", info.name, info.summary,
                  info.shared            ? " [shared memory: not simulated]"
                  : info.cost == nullptr ? " [no cost formula yet]"
                                         : "");
    }
  }
}

Collective parseCollective(const std::string& name, const collx::cli::CommandLine& cli) {
  for (Collective c : collx::algorithms::collectives()) {
    if (name == collx::algorithms::collectiveName(c)) return c;
  }
  std::string valid;
  for (Collective c : collx::algorithms::collectives()) {
    valid += (valid.empty() ? "" : ", ") + std::string(collx::algorithms::collectiveName(c));
  }
  cli.fail("unknown collective '" + name + "' (" + valid + ")");
}

Args parseArgs(int argc, char** argv, collx::cli::CommandLine& cli) {
  Args a;
  std::string algorithmList;
  std::string collective = "allreduce";
  cli.text("-c,--collective", collective, "NAME",
           "allreduce (default), allgather, allgatherv, reduce_scatter, reduce, broadcast, "
           "gather, gatherv, scatter, scatterv, alltoall, alltoallv, barrier");
  cli.integer("-P,--ranks", a.ranks, 1, 65536, "N", "the number of ranks (default 8), 1..65536");
  cli.text("-a,--algorithm", algorithmList, "LIST",
           "only these algorithms, comma separated (default: all of the collective's); \"list\" "
           "prints every algorithm of every collective");
  a.sweep.addOptions(cli);
  cli.dataType("--dtype,-d", a.dtype,
               "int8 uint8 int32 int64 float16 bfloat16 float32 (default) float64");
  cli.reduceOp("--op,-o", a.op,
               "sum (default) prod min max avg band bor bxor (reducing collectives)");
  cli.integer("--root,-r", a.root, 0, 65535, "R",
              "the root of reduce, broadcast, gather(v), scatter(v) (default 0)");
  cli.custom("--chunk", "SIZE",
             "pipelining granularity of the chunked algorithms (default " +
                 collx::algorithms::kChunkBytes.defaultText() + ", as COLLX_CHUNK_BYTES)",
             [&a](const std::string& text, const std::string& what) {
               a.chunkBytes = collx::parseBytes(text, what);
               if (a.chunkBytes == 0) throw CLI::ValidationError(what + " must be at least 1 byte");
             });
  cli.custom("--alpha", "TIME",
             "time per message (default 10us); units ns, us, ms, s (a plain number is seconds)",
             [&a](const std::string& text, const std::string& what) {
               a.model.alpha =
                   std::chrono::duration<double>(collx::parseDurationNs(text, what)).count();
             });
  double betaGbps = 0, gammaGbps = 0;  // 0: the model's default
  cli.positive("--beta-gbps", betaGbps, "X",
               "link bandwidth in GB/s (1e9 bytes/s): beta = 1/X (default 2.5)");
  cli.positive("--gamma-gbps", gammaGbps, "X",
               "reduction throughput in GB/s: gamma = 1/X (default 10)");
  bool senderQueueOnly = false;
  cli.flag("--sender-queue-only", senderQueueOnly,
           "receivers take any number of messages at once (only a sender's messages queue), "
           "instead of one at a time");
  cli.bytes("--max-tasks", a.maxTasks, "N",
            "skip a run whose schedules hold more tasks over all ranks than N (default 50M: "
            "about 3 GB of memory)");
  cli.flag("--agree", a.agree,
           "instead: what one agreement (agree, shrink, grow, reform) costs in store requests "
           "and keys per rank and at the store, for P = 2, 4, ..., 65536 (see "
           "COLLX_AGREE_COORDINATOR_FROM)");
  cli.parse(argc, argv);

  if (algorithmList == "list") {
    listAlgorithms();
    std::exit(0);
  }
  if (betaGbps > 0) a.model.beta = 1.0 / (betaGbps * 1e9);
  if (gammaGbps > 0) a.model.gamma = 1.0 / (gammaGbps * 1e9);
  if (senderQueueOnly) a.model.serializeIncoming = false;
  a.coll = parseCollective(collective, cli);
  if (a.root >= a.ranks) {
    cli.fail("--root " + std::to_string(a.root) + " is outside [0, " + std::to_string(a.ranks) +
             ")");
  }
  const bool reduces = a.coll == Collective::kAllreduce || a.coll == Collective::kReduce ||
                       a.coll == Collective::kReduceScatter;
  if (!reduces && a.op != collx::ReduceOpKind::kSum) {
    cli.fail(std::string("--op applies to reducing collectives, not ") +
             collx::algorithms::collectiveName(a.coll));
  }
  if (reduces) {
    try {
      collx::ReduceOp(a.op).validate(a.dtype, collx::Where{-1, "collx-sim", -1});
    } catch (const collx::Error& e) {
      cli.fail(e.detail());
    }
  }
  std::stringstream list(algorithmList);
  std::string name;
  while (std::getline(list, name, ',')) {
    if (name.empty()) continue;
    if (collx::algorithms::findAlgorithm(a.coll, name) == nullptr) {
      cli.fail("unknown " + std::string(collx::algorithms::collectiveName(a.coll)) +
               " algorithm '" + name + "' (" + collx::algorithms::algorithmNames(a.coll) + ")");
    }
    if (collx::algorithms::findAlgorithm(a.coll, name)->shared) {
      cli.fail(std::string(collx::algorithms::collectiveName(a.coll)) + " " + name +
               " works on shared memory, not through a schedule: collx-sim cannot model it");
    }
    a.algorithms.push_back(name);
  }
  if (a.algorithms.empty()) {
    for (const AlgorithmInfo& info : collx::algorithms::algorithmRegistry()) {
      if (info.coll == a.coll && !info.shared) a.algorithms.push_back(info.name);
    }
  }
  a.sizes = a.sweep.resolve(cli);
  if (a.coll == Collective::kBarrier) a.sizes = {0};
  return a;
}

// The call of `count` elements (blocks: equal for the v-collectives).
collx::algorithms::UniformCall callOf(const Args& a, std::uint64_t count) {
  collx::algorithms::UniformCall call;
  call.coll = a.coll;
  call.ranks = a.ranks;
  call.count = count;
  call.dtype = a.dtype;
  call.op = a.op;
  call.root = a.root;
  call.chunkBytes = a.chunkBytes;
  return call;
}

// Rank r's params for a call of `count` elements.
ScheduleParams paramsOf(const Args& a, std::uint64_t count, int rank) {
  return collx::algorithms::paramsOf(callOf(a, count), rank);
}

std::string formatBytes(std::uint64_t b) {
  char text[32];
  if (b >= (1ull << 30) && b % (1ull << 30) == 0) {
    std::snprintf(text, sizeof text, "%lluG", static_cast<unsigned long long>(b >> 30));
  } else if (b >= (1ull << 20) && b % (1ull << 20) == 0) {
    std::snprintf(text, sizeof text, "%lluM", static_cast<unsigned long long>(b >> 20));
  } else if (b >= 1024 && b % 1024 == 0) {
    std::snprintf(text, sizeof text, "%lluK", static_cast<unsigned long long>(b >> 10));
  } else {
    std::snprintf(text, sizeof text, "%llu", static_cast<unsigned long long>(b));
  }
  return text;
}

std::string formatTime(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", seconds * 1e6);
  return text;
}

struct Row {
  std::string algorithm;
  bool ran = false;
  std::string note;
  double seconds = 0;
  std::uint64_t rounds = 0, messages = 0, bytes = 0;
};

// --agree: the agreement's store traffic, from the same accounting as the library's
// (collx::agreementCost), by P; the setting's choice beside both ways.
int runAgree() {
  std::printf(
      "collx-sim: one agreement's store traffic (nothing failed, no wait ran out; a wait that\n"
      "runs out adds a request: of one key for a rank that waits for the answer, of up to P\n"
      "keys for a reader). Requests/keys per rank; store keys: every rank's together, as\n"
      "COLLX_AGREE_COORDINATOR_FROM chooses, then with every rank reading, then coordinated.\n\n");
  std::printf("%7s %8s %16s %16s %14s | %16s %16s\n", "P", "readers", "reader req/keys",
              "waiter req/keys", "store keys", "all read: store", "coordinated");
  for (std::int64_t p = 2; p <= 65536; p *= 2) {
    const int P = static_cast<int>(p);
    const collx::AgreementCost cost = collx::agreementCost(P);
    const collx::AgreementCost all = collx::agreementCost(P, p + 1);
    const collx::AgreementCost one = collx::agreementCost(P, 1);
    char reader[32], waiter[32];
    std::snprintf(reader, sizeof reader, "%llu/%llu",
                  static_cast<unsigned long long>(cost.readerRequests),
                  static_cast<unsigned long long>(cost.readerKeys));
    std::snprintf(waiter, sizeof waiter, "%llu/%llu",
                  static_cast<unsigned long long>(cost.waiterRequests),
                  static_cast<unsigned long long>(cost.waiterKeys));
    std::printf("%7d %8d %16s %16s %14llu | %16llu %16llu\n", P, cost.readers, reader,
                cost.readers == P ? "-" : waiter, static_cast<unsigned long long>(cost.storeKeys),
                static_cast<unsigned long long>(all.storeKeys),
                static_cast<unsigned long long>(one.storeKeys));
  }
  return 0;
}

int run(const Args& a) {
  if (a.agree) return runAgree();
  collx::algorithms::SimOptions options;
  options.moveBytes = false;
  options.dtype = a.dtype;
  options.op = a.op;
  options.model = a.model;
  const std::size_t es = collx::dataTypeSize(a.dtype);
  const bool rooted = a.coll == Collective::kReduce || a.coll == Collective::kBroadcast ||
                      a.coll == Collective::kGather || a.coll == Collective::kGatherv ||
                      a.coll == Collective::kScatter || a.coll == Collective::kScatterv;
  std::printf(
      "collx-sim: %s of %s%s over P=%d ranks%s; alpha %s us, beta 1/%.3g GB/s, gamma "
      "1/%.3g GB/s, chunk %s, %s\n",
      collx::algorithms::collectiveName(a.coll), collx::dataTypeName(a.dtype),
      a.coll == Collective::kAllreduce || a.coll == Collective::kReduce ||
              a.coll == Collective::kReduceScatter
          ? (std::string(" (") + collx::reduceOpKindName(a.op) + ")").c_str()
          : "",
      a.ranks, rooted ? (", root " + std::to_string(a.root)).c_str() : "",
      formatTime(a.model.alpha).c_str(), 1e-9 / a.model.beta, 1e-9 / a.model.gamma,
      formatBytes(a.chunkBytes).c_str(),
      a.model.serializeIncoming ? "one message at a time per link" : "only senders queue");
  std::printf("* = the default selection table's pick, < = the fastest modeled\n\n");
  std::printf("%10s  %-20s %12s %8s %7s %10s %12s\n", "size", "algorithm", "time(us)", "x best",
              "rounds", "msgs/rank", "bytes/rank");
  // The default is what the library chooses (COLLX_RULES and COLLX_<COLL>_ALGO included) for
  // a job of one host whose ranks do not share memory, which is what the model is.
  const collx::algorithms::SelectionPolicy policy = collx::algorithms::SelectionPolicy::fromConfig(
      collx::Config::process(), /*sharedMemory=*/false, /*hosts=*/1);
  const auto started = std::chrono::steady_clock::now();
  int failures = 0;
  for (std::uint64_t size : a.sizes) {
    const std::uint64_t count = size / es;
    const char* pick = collx::algorithms::defaultChoice(callOf(a, count), policy).algorithm->name;
    std::vector<Row> rows;
    for (const std::string& name : a.algorithms) {
      const AlgorithmInfo& info = *collx::algorithms::findAlgorithm(a.coll, name);
      Row row;
      row.algorithm = name;
      // Rank 0's schedule, times P, estimates the memory a run takes.
      const std::uint64_t estimate =
          info.build(paramsOf(a, count, 0)).tasks().size() * static_cast<std::uint64_t>(a.ranks);
      if (estimate > a.maxTasks) {
        row.note = "skipped: about " + std::to_string(estimate / 1000000) + "M tasks (--max-tasks)";
        rows.push_back(row);
        continue;
      }
      SimResult result = collx::algorithms::simulate(
          info, a.ranks, [&](int r) { return paramsOf(a, count, r); }, nullptr, options);
      if (!result.ok()) {
        ++failures;
        row.note = "FAILED: " + result.problems.front().detail;
        std::fprintf(stderr, "collx-sim: %s %s at %s bytes:\n%s", collectiveName(a.coll),
                     name.c_str(), formatBytes(size).c_str(), result.describeProblems().c_str());
        rows.push_back(row);
        continue;
      }
      row.ran = true;
      row.seconds = result.seconds;
      row.rounds = result.rounds;
      for (const auto& rank : result.ranks) {
        row.messages = std::max(row.messages, rank.cost.sends);
        row.bytes = std::max(row.bytes, rank.cost.sendBytes);
      }
      rows.push_back(row);
    }
    double best = -1;
    for (const Row& r : rows) {
      if (r.ran && (best < 0 || r.seconds < best)) best = r.seconds;
    }
    bool first = true;
    for (const Row& r : rows) {
      std::string marks;
      if (pick != nullptr && r.algorithm == pick) marks += " *";
      if (r.ran && r.seconds == best) marks += " <";
      const std::string sizeText = first ? formatBytes(count * es) : "";
      first = false;
      if (!r.ran) {
        std::printf("%10s  %-20s %s%s\n", sizeText.c_str(), r.algorithm.c_str(), r.note.c_str(),
                    marks.c_str());
        continue;
      }
      std::printf("%10s  %-20s %12s %8.2f %7llu %10llu %12llu%s\n", sizeText.c_str(),
                  r.algorithm.c_str(), formatTime(r.seconds).c_str(),
                  best > 0 ? r.seconds / best : 1.0, static_cast<unsigned long long>(r.rounds),
                  static_cast<unsigned long long>(r.messages),
                  static_cast<unsigned long long>(r.bytes), marks.c_str());
    }
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("\n(simulated in %.1f s)\n", took);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  collx::cli::CommandLine cli("collx-sim", "collx-sim [options]", kAbout, kFooter);
  try {
    return run(parseArgs(argc, argv, cli));
  } catch (const collx::Error& e) {
    std::fprintf(stderr, "collx-sim: %s\n", e.what());
    return 1;
  }
}
