// collx-bench runs every algorithm of the registry: three real ranks through collx-run, a
// few sizes each, the checked call finding no wrong element. Then -a all, --plot (a real PNG
// and SVG through matplotlib), the plotting script's comparison mode and
// benchmarks/compare/run.sh's picture, the progress line (on a terminal only), and
// collx-bench --stats with COLLX_TRACE set: the counters printed, a trace file per rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "collx/algorithms/registry.h"
#include "collx/algorithms/selection.h"
#include "util/sanitizer.h"
#include "util/test_util.h"

namespace collx {
namespace {

using namespace std::chrono_literals;

class BenchEveryAlgorithm : public ::testing::TestWithParam<std::size_t> {};

TEST_P(BenchEveryAlgorithm, RunsCheckedThroughCollxRun) {
  const algorithms::AlgorithmInfo& info = algorithms::algorithmRegistry()[GetParam()];
  const std::string coll = algorithms::collectiveName(info.coll);
  test::TempDir dir;
  const std::string json = dir.path() + "/result.json";
  const bool barrier = info.coll == algorithms::Collective::kBarrier;
  test::Process job({test::binDir() + "/collx-run", "-n", "3", "--timeout", "60s", "--",
                     test::binDir() + "/collx-bench", "-c", coll, "-a", info.name, "--sizes",
                     "12,3K,96K", "-n", "3", "-r", "1", "--json", json});
  ASSERT_TRUE(job.wait(90s)) << coll << " " << info.name << " did not finish";
  ASSERT_EQ(job.exitCode(), 0) << job.out() << job.err();
  std::ifstream in(json);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(text.str());  // throws on bad JSON
  EXPECT_EQ(doc.at("collective"), coll) << text.str();
  EXPECT_EQ(doc.at("P"), 3) << text.str();
  EXPECT_EQ(doc.at("algorithm"), info.name) << text.str();
  const std::vector<std::uint64_t> sizes =
      barrier ? std::vector<std::uint64_t>{0} : std::vector<std::uint64_t>{12, 3072, 98304};
  ASSERT_EQ(doc.at("results").size(), sizes.size()) << text.str();
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const nlohmann::json& row = doc.at("results")[i];
    // A size is rounded down to whole blocks of whole elements: at most P * 8 bytes less.
    EXPECT_LE(row.at("size").get<std::uint64_t>(), sizes[i]) << row;
    EXPECT_GT(row.at("size").get<std::uint64_t>() + 3 * 8, sizes[i]) << row;
    EXPECT_EQ(row.at("wrong"), 0) << row;
    EXPECT_EQ(row.at("algorithm"), info.name) << row;
    EXPECT_GT(row.at("time_us").get<double>(), 0.0) << row;
  }
}

std::string nameOf(const ::testing::TestParamInfo<std::size_t>& p) {
  const auto& info = algorithms::algorithmRegistry()[p.param];
  std::string name = std::string(algorithms::collectiveName(info.coll)) + "_" + info.name;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Registry, BenchEveryAlgorithm,
                         ::testing::Range<std::size_t>(0, algorithms::algorithmRegistry().size()),
                         nameOf);

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

// The rows of collx-bench's CSV (after its comment line and header), split at commas.
std::vector<std::vector<std::string>> csvRows(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  std::string line;
  bool header = false;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (!header) {
      EXPECT_EQ(line,
                "size,count,dtype,time_us,p50_us,p99_us,algbw_gbps,busbw_gbps,wrong,algorithm");
      header = true;
      continue;
    }
    std::vector<std::string> cells;
    std::stringstream row(line);
    std::string cell;
    while (std::getline(row, cell, ',')) cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}

// Every algorithm of `coll` that collx-bench -a all runs on P ranks for `count` elements (a
// commutative op; on one host, every rank over shared memory, unless `sharedMemory` is false:
// over TCP): the registry's, in its order.
std::vector<std::string> eligibleHere(algorithms::Collective coll, int P, std::uint64_t count = 1,
                                      bool sharedMemory = true) {
  algorithms::SelectionPolicy policy;
  policy.sharedMemory = sharedMemory;
  algorithms::UniformCall call;
  call.coll = coll;
  call.ranks = P;
  call.count = count;
  std::vector<std::string> names;
  for (const auto* info : algorithms::eligibleAlgorithms(algorithms::paramsOf(call, 0), policy)) {
    names.emplace_back(info->name);
  }
  return names;
}

// --plot needs Python with matplotlib (dev.sh installs python3-matplotlib): without it these
// tests fail, saying so, rather than skip.
class BenchPlot : public ::testing::Test {
 protected:
  void SetUp() override {
    COLLX_SKIP_UNDER_TSAN(
        "collx-bench's plots and rules files: the tool's threads are collx's own, which the "
        "thread suites run");
    const test::RunResult r =
        test::run({COLLX_PLOT_PYTHON, "-c", "import matplotlib"}, {}, std::chrono::seconds(120));
    ASSERT_EQ(r.code, 0) << COLLX_PLOT_PYTHON << " cannot import matplotlib (apt-get install "
                         << "python3-matplotlib; ./dev.sh installs it): " << r.err;
  }
  test::TempDir dir_;
};

TEST_F(BenchPlot, AllAlgorithmsCsvRowsAndPng) {
  const std::string csv = dir_.path() + "/all.csv";
  const std::string png = dir_.path() + "/all.png";
  test::Process job({test::binDir() + "/collx-run", "-n", "3", "--timeout", "100s", "--",
                     test::binDir() + "/collx-bench", "-c", "allreduce", "-a", "all", "--sizes",
                     "12,3K", "-n", "3", "--csv", csv, "--plot", png},
                    {{"TMPDIR", dir_.path()}});
  ASSERT_TRUE(job.wait(std::chrono::seconds(110))) << job.out() << job.err();
  ASSERT_EQ(job.exitCode(), 0) << job.out() << job.err();
  EXPECT_NE(job.out().find("# plot: " + png), std::string::npos) << job.out();
  // One row per algorithm and size, algorithm after algorithm, each right.
  const std::vector<std::string> algos = eligibleHere(algorithms::Collective::kAllreduce, 3);
  ASSERT_NE(std::find(algos.begin(), algos.end(), "ring"), algos.end());
  ASSERT_NE(std::find(algos.begin(), algos.end(), "shm"), algos.end());
  const auto rows = csvRows(csv);
  ASSERT_EQ(rows.size(), algos.size() * 2) << readFile(csv);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), 10u) << readFile(csv);
    EXPECT_EQ(rows[i][0], i % 2 == 0 ? "12" : "3072") << readFile(csv);
    EXPECT_EQ(rows[i][8], "0") << "#wrong\n" << readFile(csv);
    EXPECT_EQ(rows[i][9], algos[i / 2]) << readFile(csv);
  }
  const std::string picture = readFile(png);
  ASSERT_GT(picture.size(), 1000u);
  EXPECT_EQ(picture.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  // The results went to the script through a temporary JSON file, removed afterwards.
  std::set<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
    left.insert(e.path().filename().string());
  }
  EXPECT_EQ(left, (std::set<std::string>{"all.csv", "all.png"}));
}

// collx-tune: a real (short) tuning run into the default place, then a job that follows the
// rules it wrote, and collx-info that shows them.
TEST_F(BenchPlot, TuneWritesRulesThatJobsThenFollow) {
  const std::string home = dir_.path();
  const std::map<std::string, std::string> env{
      {"HOME", home}, {"XDG_CONFIG_HOME", ""}, {"COLLX_RULES", ""}, {"COLLX_ALLREDUCE_ALGO", ""}};
  test::Process tune({test::binDir() + "/collx-tune", "-n", "2", "-c", "allreduce,barrier",
                      "--sizes", "4,64K", "--min-time", "0.01", "-r", "2"},
                     env);
  ASSERT_TRUE(tune.wait(std::chrono::seconds(300))) << tune.out() << tune.err();
  ASSERT_EQ(tune.exitCode(), 0) << tune.out() << tune.err();
  const std::string rules = home + "/.config/collx/rules.json";
  EXPECT_NE(tune.out().find("to " + rules), std::string::npos) << tune.out();
  for (const char* row : {"| shm | 2 | allreduce | 4 |", "| shm | 2 | allreduce | 65536 |",
                          "| tcp | 2 | allreduce | 65536 |", "| tcp | 2 | barrier | 0 |"}) {
    EXPECT_NE(tune.out().find(row), std::string::npos) << row << "\n" << tune.out();
  }
  EXPECT_NE(tune.out().find("worst regret: built-in"), std::string::npos) << tune.out();
  EXPECT_NE(tune.out().find("slower than the fastest in every one of 2 rounds (*): built-in "),
            std::string::npos)
      << tune.out();
  EXPECT_EQ(readFile(home + "/.config/collx/collx-tune_allreduce.png").substr(0, 4),
            std::string("\x89PNG", 4));
  // The rows are the fastest algorithm of each point, by the median over the rounds.
  const auto table = algorithms::Selection::fromFile(rules);
  const auto measured =
      nlohmann::json::parse(readFile(home + "/.config/collx/collx-tune-results/measurements.json"));
  int checked = 0;
  for (const auto& point : measured) {
    if (point["collective"] != "allreduce") continue;
    std::string fastest;
    double best = 1e300;
    for (const auto& [algorithm, times] : point["times_us"].items()) {
      std::vector<double> t = times.get<std::vector<double>>();
      const double median = (t[0] + t[1]) / 2;
      if (median < best) best = median, fastest = algorithm;
    }
    const bool shared = point["transport"] == "shm";
    const auto* row = table.choose(algorithms::Collective::kAllreduce, 2,
                                   point["size"].get<std::uint64_t>(), shared);
    ASSERT_NE(row, nullptr);
    EXPECT_FALSE(row->builtIn) << point.dump();
    EXPECT_EQ(row->algorithm->name, fastest) << point.dump();
    EXPECT_EQ(row->maxHosts, 1);
    EXPECT_EQ(row->sharedOnly, shared);
    // A built-in pick above 1.05 that lost to the fastest in both rounds is listed, and
    // only such a pick.
    const std::string pick = point["builtin"].get<std::string>();
    const auto& times = point["times_us"];
    bool lostEvery = pick != fastest && times.contains(pick);
    for (int r = 0; lostEvery && r < 2; ++r) {
      lostEvery = times[pick][r].get<double>() > times[fastest][r].get<double>();
    }
    if (lostEvery) {
      const auto& t = times[pick];
      lostEvery = (t[0].get<double>() + t[1].get<double>()) / 2 > 1.05 * best;
    }
    const std::string listed = "collx-tune:   built-in " + point["transport"].get<std::string>() +
                               " P=2 allreduce " + std::to_string(point["size"].get<int>()) + ": " +
                               pick + " ";
    EXPECT_EQ(tune.out().find(listed) != std::string::npos, lostEvery) << listed << tune.out();
    ++checked;
  }
  EXPECT_EQ(checked, 4);  // 2 sizes, 2 transports
  // A job and collx-info find the file in its default place.
  std::map<std::string, std::string> jobEnv = env;
  jobEnv["COLLX_LOG_LEVEL"] = "warn,collx.algo=debug";
  jobEnv["COLLX_TRANSPORT"] = "tcp";
  test::RunResult job = test::run({test::binDir() + "/collx-run", "-n", "2", "--",
                                   test::binDir() + "/collx-bench", "--sizes", "64K", "-n", "2"},
                                  jobEnv, std::chrono::seconds(60));
  EXPECT_EQ(job.code, 0) << job.err;
  EXPECT_NE(job.err.find("(from rules file " + rules + ", allreduce entry"), std::string::npos)
      << job.err;
  test::RunResult info = test::run({test::binDir() + "/collx-info"}, env);
  EXPECT_NE(info.out.find("rules file: " + rules + " (found in a default place"), std::string::npos)
      << info.out;
}

// -a all asks the job: over TCP the ranks share no memory, so the shm algorithm is not run.
TEST(BenchAll, RunsOnlyWhatCanRunInThisJob) {
  test::TempDir dir;
  const std::string csv = dir.path() + "/tcp.csv";
  test::Process job({test::binDir() + "/collx-run", "-n", "2", "--timeout", "60s", "--",
                     test::binDir() + "/collx-bench", "-c", "allreduce", "-a", "all", "--sizes",
                     "64", "-n", "2", "--csv", csv},
                    {{"COLLX_TRANSPORT", "tcp"}});
  ASSERT_TRUE(job.wait(std::chrono::seconds(70))) << job.out() << job.err();
  ASSERT_EQ(job.exitCode(), 0) << job.out() << job.err();
  std::vector<std::string> ran;
  for (const auto& row : csvRows(csv)) ran.push_back(row.at(9));
  // 64 B: 16 floats; over TCP the ranks share no memory.
  EXPECT_EQ(ran, eligibleHere(algorithms::Collective::kAllreduce, 2, /*count=*/16,
                              /*sharedMemory=*/false))
      << readFile(csv);
  EXPECT_EQ(std::find(ran.begin(), ran.end(), "shm"), ran.end()) << readFile(csv);
  EXPECT_NE(std::find(ran.begin(), ran.end(), "ring"), ran.end()) << readFile(csv);
}

TEST_F(BenchPlot, SvgHasTheAxesAndOneLegendEntryPerAlgorithm) {
  const std::string json = dir_.path() + "/run.json";
  const std::string svg = dir_.path() + "/run.svg";
  test::Process job({test::binDir() + "/collx-run", "-n", "2", "--timeout", "100s", "--",
                     test::binDir() + "/collx-bench", "-c", "broadcast", "-a", "all", "--sizes",
                     "4,1K,64K", "-n", "3", "--json", json, "--plot", svg});
  ASSERT_TRUE(job.wait(std::chrono::seconds(110))) << job.out() << job.err();
  ASSERT_EQ(job.exitCode(), 0) << job.out() << job.err();
  const nlohmann::json doc = nlohmann::json::parse(readFile(json));
  EXPECT_EQ(doc.at("algorithm"), "all");
  std::set<std::string> ran;
  for (const auto& row : doc.at("results")) {
    EXPECT_EQ(row.at("wrong"), 0) << row;
    ran.insert(row.at("algorithm").get<std::string>());
  }
  const std::vector<std::string> algos = eligibleHere(algorithms::Collective::kBroadcast, 2);
  EXPECT_EQ(ran, std::set<std::string>(algos.begin(), algos.end()));
  EXPECT_EQ(doc.at("results").size(), algos.size() * 3);
  const std::string text = readFile(svg);
  ASSERT_NE(text.find("<svg"), std::string::npos) << text.substr(0, 200);
  // The x axis of both panels; the y axis of each.
  EXPECT_EQ(occurrences(text, ">size (B)</text>"), 2u);
  EXPECT_EQ(occurrences(text, ">busbw (GB/s)</text>"), 1u);
  EXPECT_EQ(occurrences(text, ">time (us)</text>"), 1u);
  EXPECT_NE(text.find(">collx-bench broadcast, P=2, shm, float32</text>"), std::string::npos);
  for (const std::string& name : algos) {
    EXPECT_EQ(occurrences(text, ">" + name + "</text>"), 1u) << "legend entry " << name;
  }
}

// --time-stat middle: each rank's mean of its middle half of calls, which cannot exceed the
// 99th percentile of the slowest rank's calls; another statistic is refused before running.
TEST(BenchTimeStat, MiddleMeanStaysWithinTheCallsAndOtherStatsAreRefused) {
  test::TempDir dir;
  const std::string json = dir.path() + "/result.json";
  test::Process job({test::binDir() + "/collx-run", "-n", "2", "--timeout", "60s", "--",
                     test::binDir() + "/collx-bench", "--sizes", "4,64K", "-n", "40", "--time-stat",
                     "middle", "--json", json});
  ASSERT_TRUE(job.wait(90s));
  ASSERT_EQ(job.exitCode(), 0) << job.out() << job.err();
  std::ifstream in(json);
  const nlohmann::json doc = nlohmann::json::parse(in);
  ASSERT_EQ(doc.at("results").size(), 2u) << doc;
  for (const nlohmann::json& row : doc.at("results")) {
    EXPECT_GT(row.at("time_us").get<double>(), 0.0) << row;
    EXPECT_LE(row.at("time_us").get<double>(), row.at("p99_us").get<double>()) << row;
  }
  test::Process bad({test::binDir() + "/collx-bench", "--time-stat", "mean"});
  ASSERT_TRUE(bad.wait(30s));
  EXPECT_EQ(bad.exitCode(), 2) << bad.out() << bad.err();
  EXPECT_NE(bad.err().find("median or middle"), std::string::npos) << bad.err();
}

// --json - and --json /dev/stdout: the JSON alone on stdout (a program reads it as it
// comes), the table and everything else on stderr.
TEST(BenchJson, StdoutCarriesTheJsonAloneAndTheTableGoesToStderr) {
  for (const char* target : {"-", "/dev/stdout"}) {
    test::Process job({test::binDir() + "/collx-run", "-n", "2", "--timeout", "60s", "--",
                       test::binDir() + "/collx-bench", "--sizes", "4,1K", "-n", "5", "--json",
                       target});
    ASSERT_TRUE(job.wait(90s)) << target;
    ASSERT_EQ(job.exitCode(), 0) << target << job.out() << job.err();
    nlohmann::json doc;
    ASSERT_NO_THROW(doc = nlohmann::json::parse(job.out())) << target << ": " << job.out();
    EXPECT_EQ(doc.at("collective"), "allreduce") << doc;
    EXPECT_EQ(doc.at("results").size(), 2u) << doc;
    EXPECT_NE(job.err().find("allreduce float32 op sum, P=2"), std::string::npos) << job.err();
    EXPECT_NE(job.err().find("#wrong"), std::string::npos) << job.err();
  }
}

// --rotate SIZE: the calls cycle through as many page-aligned sets of buffers as fill SIZE
// bytes per rank (at least one), said in the header and in each JSON row; results stay right.
TEST(BenchRotate, CyclesThroughTheSetsThatFillTheBytesGiven) {
  COLLX_SKIP_UNDER_TSAN(
      "collx-bench's buffer rotation: the tool's threads are collx's own, which the thread "
      "suites run");
  test::TempDir dir;
  const std::string json = dir.path() + "/result.json";
  test::Process job({test::binDir() + "/collx-run", "-n", "2", "--timeout", "60s", "--",
                     test::binDir() + "/collx-bench", "--sizes", "4,64K,1M", "-n", "20", "--rotate",
                     "1M", "--json", json});
  ASSERT_TRUE(job.wait(90s));
  ASSERT_EQ(job.exitCode(), 0) << job.out() << job.err();
  EXPECT_NE(job.out().find("sets that fill 1048576 bytes per rank"), std::string::npos)
      << job.out();
  std::ifstream in(json);
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc.at("rotate_bytes").get<std::uint64_t>(), 1u << 20);
  ASSERT_EQ(doc.at("results").size(), 3u) << doc;
  // Input and output of each set: a page each at 4 B (128 sets in 1 MiB), 64 KiB each at
  // 64 KiB (8 sets), 1 MiB each at 1 MiB (one set of 2 MiB).
  const std::uint64_t want[] = {128, 8, 1};
  for (std::size_t i = 0; i < 3; ++i) {
    const nlohmann::json& row = doc.at("results")[i];
    EXPECT_EQ(row.at("buffer_sets").get<std::uint64_t>(), want[i]) << row;
    EXPECT_EQ(row.at("wrong").get<std::uint64_t>(), 0u) << row;
  }
}

TEST(BenchPlotArguments, BadExtensionFailsBeforeRunning) {
  test::TempDir dir;
  for (const std::string name : {"out.pdf", "out", "out.png.txt"}) {
    const std::string path = dir.path() + "/" + name;
    const test::RunResult r =
        test::run({test::binDir() + "/collx-bench", "--sizes", "4", "-n", "1", "--plot", path});
    EXPECT_EQ(r.code, 2) << name << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find("--plot='" + path + "'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(".png or .svg"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "") << "ran before failing";
    EXPECT_FALSE(std::filesystem::exists(path));
  }
  const test::RunResult barrier =
      test::run({test::binDir() + "/collx-bench", "-c", "barrier", "--plot", "b.png"});
  EXPECT_EQ(barrier.code, 2) << barrier.err;
  EXPECT_EQ(barrier.out, "");
  const test::RunResult nodir =
      test::run({test::binDir() + "/collx-bench", "--plot", dir.path() + "/missing/b.svg"});
  EXPECT_EQ(nodir.code, 2) << nodir.err;
  EXPECT_NE(nodir.err.find("no directory"), std::string::npos) << nodir.err;
  EXPECT_EQ(nodir.out, "");
}

// Without its Python or without matplotlib, --plot fails with exit code 4 before the sweep,
// on every rank, saying what is missing.
TEST(BenchPlotArguments, MissingPythonOrMatplotlibFailsBeforeTheSweep) {
  test::TempDir dir;
  const std::string png = dir.path() + "/never.png";
  test::Process noPython({test::binDir() + "/collx-run", "-n", "2", "--timeout", "60s", "--",
                          test::binDir() + "/collx-bench", "--sizes", "4,1K", "--plot", png,
                          "--plot-python", "/nonexistent/python3"});
  ASSERT_TRUE(noPython.wait(std::chrono::seconds(70)));
  EXPECT_EQ(noPython.exitCode(), 4) << noPython.out() << noPython.err();
  EXPECT_NE(noPython.err().find("cannot run /nonexistent/python3"), std::string::npos)
      << noPython.err();
  EXPECT_NE(noPython.err().find("--plot-python names another Python"), std::string::npos)
      << noPython.err();
  EXPECT_EQ(noPython.out().find("#wrong"), std::string::npos) << "the sweep ran";
  // A matplotlib that cannot be imported (first on PYTHONPATH).
  std::filesystem::create_directories(dir.path() + "/fake/matplotlib");
  std::ofstream(dir.path() + "/fake/matplotlib/__init__.py")
      << "raise ImportError('no matplotlib here')\n";
  test::Process noMatplotlib({test::binDir() + "/collx-run", "-n", "2", "--timeout", "60s", "--",
                              test::binDir() + "/collx-bench", "--sizes", "4,1K", "--plot", png},
                             {{"PYTHONPATH", dir.path() + "/fake"}});
  ASSERT_TRUE(noMatplotlib.wait(std::chrono::seconds(70)));
  EXPECT_EQ(noMatplotlib.exitCode(), 4) << noMatplotlib.out() << noMatplotlib.err();
  EXPECT_NE(noMatplotlib.err().find("cannot import matplotlib"), std::string::npos)
      << noMatplotlib.err();
  EXPECT_NE(noMatplotlib.err().find("python3-matplotlib"), std::string::npos) << noMatplotlib.err();
  EXPECT_EQ(noMatplotlib.out().find("#wrong"), std::string::npos) << "the sweep ran";
  EXPECT_FALSE(std::filesystem::exists(png));
}

// The script's second mode: benchmarks/compare/run.sh's CSV, one line per implementation
// (its best algorithm in each round, the median round, a band from the fastest to the
// slowest round where there are several), a row of panels per P; wrong results left out.
TEST_F(BenchPlot, CompareModeDrawsOneLinePerImplementation) {
  const std::string csv = dir_.path() + "/results.csv";
  std::ofstream(csv)
      << "impl,transport,collective,algorithm,P,bytes,time_us,algbw_GBps,busbw_GBps,correct,"
         "round\n"
         "collx,tcp,allreduce,default,2,4,5.0,0.0008,0.0008,1,1\n"
         "collx,tcp,allreduce,default,2,65536,15.0,4.3,4.3,1,1\n"
         "collx,tcp,allreduce,default,2,4,9.0,0.0004,0.0004,1,2\n"
         "collx,tcp,allreduce,default,2,65536,17.0,3.8,3.8,1,2\n"
         "collx,tcp,allreduce,default,4,4,20.0,0.0002,0.0003,1,1\n"
         "collx,tcp,allreduce,default,4,65536,60.0,1.1,1.6,1,1\n"
         "gloo,tcp,allreduce,ring,2,4,65.0,0.0001,0.0001,1,1\n"
         "gloo,tcp,allreduce,bcube,2,4,60.0,0.0001,0.0001,1,1\n"
         "gloo,tcp,allreduce,ring,2,65536,80.0,0.8,0.8,1,1\n"
         "ompi,tcp,allreduce,default,2,4,6.0,0.0007,0.0007,1,1\n"
         "ompi,tcp,allreduce,default,2,65536,20.0,3.3,3.3,1,1\n"
         "ompi,tcp,allreduce,default,4,4,34.0,0.0001,0.0002,1,1\n"
         "torch,gloo-tcp,allreduce,default,4,65536,400.0,0.2,0.2,1,1\n"
         "mpich,tcp,allreduce,default,4,4,1.0,0.0040,0.0060,0,1\n"
         "collx,tcp,broadcast,default,2,4,3.0,0.0013,0.0013,1,1\n";
  const std::string svg = dir_.path() + "/compare.svg";
  const test::RunResult r = test::run(
      {COLLX_PLOT_PYTHON, COLLX_PLOT_SCRIPT, "compare", svg, csv, "--collective", "allreduce"}, {},
      std::chrono::seconds(120));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string text = readFile(svg);
  for (const char* label :
       {">collx over tcp</text>", ">Gloo over tcp</text>", ">Open MPI over tcp</text>",
        ">torch.distributed (gloo) over tcp</text>"}) {
    EXPECT_EQ(occurrences(text, label), 1u) << label;
  }
  EXPECT_EQ(occurrences(text, "MPICH"), 0u) << "a wrong result was drawn";
  EXPECT_EQ(occurrences(text, ">P=2: busbw (higher is better)</text>"), 1u);
  EXPECT_EQ(occurrences(text, ">P=4: time (lower is better)</text>"), 1u);
  EXPECT_EQ(occurrences(text, ">size (B)</text>"), 4u);
  // collx ran 2 rounds at P=2: its band in both P=2 panels; one round elsewhere: none.
  EXPECT_EQ(occurrences(text, "fill: #1f77b4; fill-opacity: 0.13"), 2u);
  EXPECT_EQ(occurrences(text, "fill-opacity: 0.13"), 2u);
  EXPECT_NE(text.find(">lines: the median over 2 rounds"), std::string::npos);
  // Two collectives in the file and none named; a format that is not png or svg.
  const test::RunResult which =
      test::run({COLLX_PLOT_PYTHON, COLLX_PLOT_SCRIPT, "compare", svg, csv});
  EXPECT_EQ(which.code, 1) << which.err;
  EXPECT_NE(which.err.find("--collective"), std::string::npos) << which.err;
  const test::RunResult pdf =
      test::run({COLLX_PLOT_PYTHON, COLLX_PLOT_SCRIPT, "compare", dir_.path() + "/c.pdf", csv});
  EXPECT_EQ(pdf.code, 2) << pdf.err;
  EXPECT_NE(pdf.err.find(".png or .svg"), std::string::npos) << pdf.err;
}

// benchmarks/compare/run.sh with collx alone, two sizes: its CSV, ratio table and picture.
TEST_F(BenchPlot, CompareRunShDrawsItsResults) {
  const std::string out = dir_.path() + "/compare";
  test::Process job(
      {"/bin/bash", COLLX_SOURCE_DIR "/benchmarks/compare/run.sh", test::binDir() + "/..", out},
      {{"ONLY", "collx"},
       {"PS", "2"},
       {"SIZES", "4,65536"},
       {"MIN_TIME", "0.02"},
       {"PLOT", out + "/compare.png"}});
  ASSERT_TRUE(job.wait(std::chrono::seconds(110))) << job.out() << job.err();
  ASSERT_EQ(job.exitCode(), 0) << job.out() << job.err();
  const std::string csv = readFile(out + "/results.csv");
  EXPECT_EQ(occurrences(csv, "\ncollx,tcp,allreduce,"), 2u) << csv;
  EXPECT_NE(job.out().find("| 2 | 65536 |"), std::string::npos) << job.out();
  EXPECT_EQ(readFile(out + "/compare.png").substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(job.err().find('\r'), std::string::npos) << "progress without a terminal";
}

// What the shell command prints on a pseudo-terminal: script(1) (util-linux) runs it on one
// and copies what it prints to its own stdout.
test::RunResult onTerminal(const std::string& command) {
  return test::run({"/usr/bin/script", "-qec", command, "/dev/null"}, {{"SHELL", "/bin/sh"}},
                   std::chrono::seconds(110));
}

// The progress line: on a terminal (rank 0 alone), never in a pipe.
TEST(BenchProgress, QuietWhenStderrIsNotATerminal) {
  test::Process job({test::binDir() + "/collx-run", "-n", "2", "--timeout", "60s", "--",
                     test::binDir() + "/collx-bench", "-c", "broadcast", "-a", "all", "--sizes",
                     "4,64,1K", "-n", "3"});
  ASSERT_TRUE(job.wait(std::chrono::seconds(70)));
  ASSERT_EQ(job.exitCode(), 0) << job.out() << job.err();
  EXPECT_EQ(job.err(), "");
  EXPECT_EQ(job.out().find('\r'), std::string::npos) << job.out();
  EXPECT_EQ(job.out().find("size 1 of"), std::string::npos) << job.out();
}

TEST(BenchProgress, ShownOnATerminalByRankZeroOnly) {
  // The table goes to a file, so what comes through the terminal is stderr.
  test::TempDir dir;
  const std::string table = dir.path() + "/table.txt";
  const std::string command = test::binDir() + "/collx-run -n 2 --timeout 60s -- " +
                              test::binDir() +
                              "/collx-bench -c broadcast -a all --sizes 4,64,1K -n 3 > " + table;
  const test::RunResult job = onTerminal(command);
  ASSERT_EQ(job.code, 0) << job.out << job.err;
  const std::string& shown = job.out;
  const std::vector<std::string> algos = eligibleHere(algorithms::Collective::kBroadcast, 2);
  const std::string m = std::to_string(algos.size());
  const std::string first =
      "\rcollx-bench: size 1 of 3 (algorithm 1 of " + m + ": " + algos[0] + ")";
  EXPECT_EQ(occurrences(shown, first), 1u) << "printed by rank 0 alone, once:\n" << shown;
  EXPECT_NE(shown.find("size 3 of 3 (algorithm " + m + " of " + m + ": " + algos.back() + ")"),
            std::string::npos)
      << shown;
  EXPECT_NE(shown.find(", elapsed "), std::string::npos) << shown;
  EXPECT_NE(shown.find(", remaining ~"), std::string::npos) << shown;
  // Erased at the end: the last thing on the terminal is an empty line.
  EXPECT_GE(shown.size(), 4u);
  EXPECT_EQ(shown.substr(shown.size() - 4), "\r\x1b[K") << shown;
  const std::string rows = readFile(table);
  EXPECT_EQ(rows.find('\r'), std::string::npos) << rows;
  EXPECT_EQ(occurrences(rows, "\n  "), algos.size() * 3) << "table rows\n" << rows;
}

// benchmarks/compare/run.sh shows its steps on a terminal as well (and collx-bench's own
// line stays out of it: its stderr goes to a file).
TEST(BenchProgress, RunShShowsItsStepsOnATerminal) {
  test::TempDir dir;
  const std::string command =
      "ONLY=collx PS=2 SIZES=4,1024 PER_SIZE=1 MIN_TIME=0.02 PLOT=none "
      "/bin/bash " COLLX_SOURCE_DIR "/benchmarks/compare/run.sh " +
      test::binDir() + "/.. " + dir.path() + "/out > /dev/null";
  const test::RunResult job = onTerminal(command);
  ASSERT_EQ(job.code, 0) << job.out << job.err;
  const std::string& shown = job.out;
  EXPECT_NE(shown.find("\rrun.sh: step 1 of 2 (round 1, P=2, collx, sizes 4), elapsed "),
            std::string::npos)
      << shown;
  EXPECT_NE(shown.find("\rrun.sh: step 2 of 2 (round 1, P=2, collx, sizes 1024), elapsed "),
            std::string::npos)
      << shown;
  EXPECT_EQ(shown.find("collx-bench: size"), std::string::npos) << shown;
}

TEST(BenchStats, PrintsRankZerosCountersAndEveryRankTraces) {
  test::TempDir dir;
  const std::string traces = dir.path() + "/traces";
  test::Process job({test::binDir() + "/collx-run", "-n", "2", "--timeout", "60s", "--",
                     test::binDir() + "/collx-bench", "-c", "allreduce", "-a", "ring", "--sizes",
                     "64", "-n", "5", "-w", "2", "--stats"},
                    {{"COLLX_TRACE", traces}, {"COLLX_TRANSPORT", "tcp"}});
  ASSERT_TRUE(job.wait(90s));
  ASSERT_EQ(job.exitCode(), 0) << job.out() << job.err();
  const std::string& out = job.out();
  EXPECT_NE(out.find("# stats of rank 0 (Context::stats):"), std::string::npos) << out;
  EXPECT_NE(out.find("#     transport tcp: sent "), std::string::npos) << out;
  EXPECT_NE(out.find("#     peer 1 (tcp): sent "), std::string::npos) << out;
  // The checked call, the first, 2 warmup, 1 estimate and 5 timed calls: all ring.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(#     allreduce ring: ([0-9]+) calls)")))
      << out;
  EXPECT_EQ(std::stoi(m[1]), 10) << out;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(# +([0-9]+) calls \(0 failed\))"))) << out;
  EXPECT_GT(std::stoi(m[1]), 10) << "collx-bench's own agreement calls count too\n" << out;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(traces)) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(std::regex_match(name, std::regex(R"(collx-trace-.+-g0-r[01]\.json)"))) << name;
    std::ifstream in(entry.path());
    const nlohmann::json events = nlohmann::json::parse(in);  // throws on bad JSON
    int ringCalls = 0, clocks = 0;
    for (const nlohmann::json& e : events) {
      if (e.at("ph") == "b" && e.at("cat") == "call" &&
          e.at("args").value("algorithm", "") == "ring") {
        ++ringCalls;
      }
      if (e.at("ph") == "M" && e.at("name") == "collx") {
        EXPECT_EQ(e.at("args").at("clock_source"),
                  name.find("-r0.json") != std::string::npos ? "rank 0" : "same host as rank 0")
            << name;
        ++clocks;
      }
    }
    EXPECT_EQ(ringCalls, 10) << name;
    EXPECT_EQ(clocks, 1) << name;
    ++files;
  }
  EXPECT_EQ(files, 2);
  test::Process merge({test::binDir() + "/collx-trace", "merge", traces});
  ASSERT_TRUE(merge.wait(60s));
  EXPECT_EQ(merge.exitCode(), 0) << merge.out() << merge.err();
  EXPECT_NE(merge.out().find("merged 2 ranks' traces"), std::string::npos) << merge.out();
}

}  // namespace
}  // namespace collx
