// collx-bench runs every algorithm of the registry: three real ranks through collx-run, a
// few sizes each, the checked call finding no wrong element. And collx-bench --stats with
// COLLX_TRACE set: the counters printed, a trace file per rank.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "collx/algorithms/registry.h"
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
