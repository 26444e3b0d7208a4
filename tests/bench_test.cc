// collx-bench runs every algorithm of the registry: three real ranks through collx-run, a
// few sizes each, the checked call finding no wrong element.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "collx/algorithms/registry.h"
#include "util/test_util.h"

namespace collx {
namespace {

using namespace std::chrono_literals;

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

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
  const std::size_t sizes = barrier ? 1 : 3;
  EXPECT_EQ(occurrences(text.str(), "\"wrong\": 0,"), sizes) << text.str();
  EXPECT_EQ(occurrences(text.str(), "\"algorithm\": \"" + std::string(info.name) + "\"}"), sizes)
      << text.str();
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

}  // namespace
}  // namespace collx
