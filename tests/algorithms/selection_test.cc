// The selection table: a rules file (COLLX_RULES) over the built-in table, its errors, and
// its use by a real job.
#include "collx/algorithms/selection.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <memory>

#include "collx/base/config.h"
#include "collx/base/error.h"
#include "collx/base/units.h"
#include "util/sanitizer.h"
#include "util/test_util.h"

namespace collx::algorithms {
namespace {

TEST(Selection, BuiltInTableCoversEveryCollective) {
  Selection table;
  for (Collective coll : collectives()) {
    for (int ranks : {1, 2, 3, 8, 9, 64, 1024}) {
      for (std::uint64_t bytes : {0ull, 4ull, 65536ull, 1ull << 30}) {
        const auto* row = table.choose(coll, ranks, bytes);
        ASSERT_NE(row, nullptr) << collectiveName(coll) << " P=" << ranks << " " << bytes;
        EXPECT_EQ(row->algorithm->coll, coll);
        EXPECT_EQ(row->source, "default table");
      }
    }
  }
}

TEST(Selection, RulesComeFirstThenTheTable) {
  Selection s = Selection::fromJson(R"({
    "allreduce": [
      {"min_ranks": 4, "max_ranks": 8, "min_bytes": "1K", "max_bytes": "1M", "algorithm": "ring_chunked"},
      {"max_ranks": 2, "algorithm": "halving_doubling"}
    ],
    "broadcast": [{"algorithm": "one_to_all"}]
  })",
                                    "test rules");
  EXPECT_STREQ(s.choose(Collective::kAllreduce, 4, 1024)->algorithm->name, "ring_chunked");
  EXPECT_STREQ(s.choose(Collective::kAllreduce, 8, 1 << 20)->algorithm->name, "ring_chunked");
  EXPECT_EQ(s.choose(Collective::kAllreduce, 4, 1024)->source, "test rules, allreduce entry 1");
  EXPECT_STREQ(s.choose(Collective::kAllreduce, 2, 1ull << 30)->algorithm->name,
               "halving_doubling");
  // Outside every rule: the built-in table.
  const auto* fallback = s.choose(Collective::kAllreduce, 4, 1ull << 30);
  EXPECT_EQ(fallback->source, "default table");
  EXPECT_STREQ(s.choose(Collective::kBroadcast, 64, 4)->algorithm->name, "one_to_all");
  EXPECT_EQ(s.rows(Collective::kAllreduce).front().source, "test rules, allreduce entry 1");
}

TEST(Selection, BadRulesNameTheEntryAndWhatIsWrong) {
  auto error = [](const char* text) {
    try {
      Selection::fromJson(text, "rules.json");
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error("{").find("not valid JSON: line 1, column 2"), std::string::npos);
  EXPECT_NE(error(R"({"allreduse": []})").find("unknown collective 'allreduse'"),
            std::string::npos);
  EXPECT_NE(error(R"({"allreduce": [{"algorithm": "magic"}]})")
                .find("allreduce entry 1: unknown allreduce algorithm 'magic' (valid: ring"),
            std::string::npos);
  EXPECT_NE(error(R"({"allreduce": [{"max_ranks": 0, "algorithm": "ring"}]})").find("max_ranks"),
            std::string::npos);
  EXPECT_NE(error(R"({"allreduce": [{"min_bytes": "2M", "max_bytes": "1M", "algorithm": "ring"}]})")
                .find("empty range"),
            std::string::npos);
  EXPECT_NE(
      error(R"({"allreduce": [{"speed": 3, "algorithm": "ring"}]})").find("unknown field 'speed'"),
      std::string::npos);
  EXPECT_NE(error(R"({"allreduce": [{"min_ranks": 2}]})").find("names no algorithm"),
            std::string::npos);
  EXPECT_NE(error("[]").find("must be an object"), std::string::npos);
  EXPECT_NE(error(R"({"allreduce": 3})").find("allreduce must be an array of rules"),
            std::string::npos);
  EXPECT_NE(error(R"({"allreduce": [3]})").find("allreduce entry 1 must be an object"),
            std::string::npos);
  EXPECT_NE(error(R"({"allreduce": [{"max_ranks": 2.5, "algorithm": "ring"}]})")
                .find("allreduce entry 1: max_ranks must be a whole number >= 1, not 2.5"),
            std::string::npos);
  EXPECT_NE(error(R"({"allreduce": [{"min_bytes": "2Q", "algorithm": "ring"}]})")
                .find("allreduce entry 1: min_bytes must be a byte count"),
            std::string::npos);
  EXPECT_NE(
      error(R"({"allreduce": [{"algorithm": "ring"}]} and more)").find("not valid JSON: line 1"),
      std::string::npos);
  // Whole numbers written as such, byte counts as numbers or with suffixes, "inf".
  Selection ok = Selection::fromJson(
      R"({"allreduce": [{"min_ranks": 4.0, "min_bytes": 1024, "max_bytes": "inf", "algorithm": "ring"}]})",
      "rules.json");
  EXPECT_EQ(ok.rows(Collective::kAllreduce).front().minRanks, 4);
  EXPECT_EQ(ok.rows(Collective::kAllreduce).front().minBytes, 1024u);
  EXPECT_EQ(ok.rows(Collective::kAllreduce).front().maxBytes, ~std::uint64_t{0});
  EXPECT_THROW(Selection::fromFile("/nonexistent/rules.json"), InvalidArgument);
}

// A rules file is outside input: its size, depth and number of rules are bounded, and an
// error repeats only the start of a long value.
TEST(Selection, RulesFilesHaveBounds) {
  COLLX_SKIP_UNDER_SANITIZERS(
      "it parses rules files of up to 1 MiB; the fuzzer (tests/fuzz/fuzz_rules_json.cc) runs "
      "that parser under ASan");
  auto error = [](const std::string& text) {
    try {
      Selection::fromJson(text, "rules.json");
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // Depth: the rules' own three levels and a little more are parsed, nine are refused.
  std::string deep = R"({"allreduce": [{"algorithm": "ring", "x": )";
  EXPECT_NE(error(deep + "[[[[[1]]]]]}]}").find("unknown field 'x'"), std::string::npos);
  EXPECT_NE(error(deep + "[[[[[[1]]]]]]}]}").find("nested more than 8 levels deep"),
            std::string::npos);
  EXPECT_NE(error(std::string(100000, '[')).find("nested more than 8 levels deep"),
            std::string::npos);
  // Count: 10000 rules are taken, 10001 are not.
  auto rules = [](std::size_t n) {
    std::string text = R"({"allreduce": [)";
    for (std::size_t i = 0; i < n; ++i)
      text += std::string(i ? "," : "") + R"({"algorithm":"ring"})";
    return text + "]}";
  };
  EXPECT_EQ(
      Selection::fromJson(rules(kMaxRules), "rules.json").rows(Collective::kAllreduce)[9999].source,
      "rules.json, allreduce entry 10000");
  EXPECT_NE(error(rules(kMaxRules + 1)).find("more than 10000 rules"), std::string::npos);
  // Size: the text, and a file (refused from its size, before it is read).
  std::string big =
      R"({"allreduce": [{"algorithm": "ring"}]})" + std::string(kMaxRulesFileBytes, ' ');
  EXPECT_NE(error(big).find("more than the 1 MiB a rules file may have"), std::string::npos);
  test::TempDir dir;
  const std::string path = dir.path() + "/big.json";
  std::ofstream(path) << big;
  try {
    Selection::fromFile(path);
    ADD_FAILURE() << "a file over 1 MiB was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("the file has " + std::to_string(big.size()) +
                                         " bytes, more than the 1 MiB"),
              std::string::npos)
        << e.what();
  }
  // Echoes: at most 80 bytes of a value, field or name, then its length.
  const std::string longName(5000, 'q');
  for (const std::string& text :
       {R"({")" + longName + R"(": []})",
        R"({"allreduce": [{"algorithm": ")" + longName + R"("}]})",
        R"({"allreduce": [{")" + longName + R"(": 1, "algorithm": "ring"}]})",
        R"({"allreduce": [{"min_bytes": ")" + longName + R"(", "algorithm": "ring"}]})"}) {
    const std::string message = error(text);
    EXPECT_NE(message.find(std::string(80, 'q') + "... (5000 bytes)"), std::string::npos)
        << message.substr(0, 300);
    EXPECT_EQ(message.find(std::string(81, 'q')), std::string::npos);
    EXPECT_LT(message.size(), 1000u);
  }
  // A value that is not a string, shown as JSON: cut the same way.
  const std::string array =
      error(R"({"allreduce": [{"min_ranks": [")" + longName + R"("], "algorithm": "ring"}]})");
  EXPECT_NE(array.find(R"(not [")" + std::string(78, 'q') + "... (5004 bytes)"), std::string::npos)
      << array.substr(0, 300);
  // A number beyond a double: refused as JSON, not an exception of the JSON library (found
  // by fuzz_rules_json).
  EXPECT_NE(error("1e999").find("not valid JSON"), std::string::npos);
  EXPECT_NE(
      error(R"({"allreduce": [{"min_bytes": 5e400, "algorithm": "ring"}]})").find("not valid JSON"),
      std::string::npos);
  const std::string brokenJson = R"({"allreduce": ")" + longName;
  EXPECT_LT(error(brokenJson).size(), 1000u);
  EXPECT_NE(error(brokenJson).find("not valid JSON"), std::string::npos);
}

// A frame's collective byte comes from a peer: names for values beyond the enum stay in
// bounds (describeMessage uses them in errors; fuzz_frames feeds it every byte).
TEST(Selection, NamesOfUnknownCollectivesStayInBounds) {
  for (int value : {0, 15, 99, 200, 255}) {
    EXPECT_STREQ(collectiveName(static_cast<Collective>(value)), "collective") << value;
  }
}

TEST(Selection, ByteSizes) {
  EXPECT_EQ(parseBytes("64K", "X"), 65536u);
  EXPECT_EQ(parseBytes("1M", "X"), 1u << 20);
  EXPECT_EQ(parseBytes("1.5MiB", "X"), 3u << 19);
  EXPECT_EQ(parseBytes("3", "X"), 3u);
  EXPECT_EQ(parseBytes("2k", "X"), 2048u);
  EXPECT_THROW(parseBytes("x", "X"), InvalidArgument);
  EXPECT_THROW(parseBytes("", "X"), InvalidArgument);
  EXPECT_THROW(parseBytes("4Q", "X"), InvalidArgument);
  EXPECT_THROW(parseBytes("1.2.3K", "X"), InvalidArgument);
  EXPECT_THROW(parseBytes("-4", "X"), InvalidArgument);
  EXPECT_THROW(parseBytes("99999999T", "X"), InvalidArgument);
  EXPECT_EQ(formatBytes(65536), "64 KiB");
  EXPECT_EQ(formatBytes(1000), "1000 B");
  EXPECT_EQ(formatBytes(~std::uint64_t{0}), "inf");
}

TEST(Selection, RowsForSharedMemoryOrNotAndForOneHost) {
  Selection s = Selection::fromJson(R"({
    "allreduce": [
      {"max_bytes": "64K", "shared_memory": true, "max_hosts": 1, "algorithm": "ring_chunked"},
      {"max_bytes": "64K", "shared_memory": false, "max_hosts": 1, "algorithm": "knomial"}
    ]
  })",
                                    "tuned");
  EXPECT_STREQ(s.choose(Collective::kAllreduce, 4, 1024, /*shared=*/true)->algorithm->name,
               "ring_chunked");
  EXPECT_STREQ(s.choose(Collective::kAllreduce, 4, 1024, /*shared=*/false)->algorithm->name,
               "knomial");
  EXPECT_EQ(s.rows(Collective::kAllreduce)[0].maxHosts, 1);
  // Through select(): the job's shared memory and its hosts.
  SelectionPolicy policy;
  auto rules = std::make_shared<const Selection>(s);
  policy.rules = rules;
  policy.table = rules.get();
  UniformCall call;
  call.ranks = 4;
  call.count = 256;
  policy.sharedMemory = true;
  EXPECT_STREQ(defaultChoice(call, policy).algorithm->name, "ring_chunked");
  policy.sharedMemory = false;
  EXPECT_STREQ(defaultChoice(call, policy).algorithm->name, "knomial");
  EXPECT_EQ(std::string(defaultChoice(call, policy).source), "tuned, allreduce entry 2");
  policy.hosts = 2;  // 2 hosts of 2 ranks: the rows are for one host; the host rule decides
  EXPECT_STREQ(defaultChoice(call, policy).algorithm->name, "hierarchical");
  // A shared-memory algorithm in a row for other transports cannot run there.
  EXPECT_THROW(
      Selection::fromJson(R"({"allreduce": [{"shared_memory": false, "algorithm": "shm"}]})", "x"),
      InvalidArgument);
  EXPECT_THROW(
      Selection::fromJson(R"({"allreduce": [{"shared_memory": 1, "algorithm": "ring"}]})", "x"),
      InvalidArgument);
  EXPECT_THROW(
      Selection::fromJson(R"({"allreduce": [{"max_hosts": 0, "algorithm": "ring"}]})", "x"),
      InvalidArgument);
}

TEST(Selection, RulesFileFromTheDefaultPlacesUnlessCollxRulesSaysOtherwise) {
  test::TempDir dir;
  const std::string xdg = dir.path() + "/xdg";
  const std::string home = dir.path() + "/home";
  ASSERT_EQ(std::system(("mkdir -p " + xdg + "/collx " + home + "/.config/collx").c_str()), 0);
  const std::string rules = R"({"allreduce": [{"algorithm": "ring_chunked"}]})";
  std::ofstream(home + "/.config/collx/rules.json") << rules;
  auto found = [](Config::Environment env) {
    std::string origin;
    std::string path = Selection::rulesPath(Config(std::move(env)), &origin);
    return path.empty() ? std::string("none") : origin + " " + path;
  };
  EXPECT_EQ(found({{"HOME", home}}), "rules file " + home + "/.config/collx/rules.json");
  // XDG_CONFIG_HOME takes the place of ~/.config: its place holds no file yet, and ~/.config's
  // is not read.
  EXPECT_EQ(found({{"HOME", home}, {"XDG_CONFIG_HOME", xdg}}).find(home), std::string::npos);
  std::ofstream(xdg + "/collx/rules.json") << rules;
  EXPECT_EQ(found({{"HOME", home}, {"XDG_CONFIG_HOME", xdg}}),
            "rules file " + xdg + "/collx/rules.json");
  EXPECT_EQ(found({{"HOME", home}, {"COLLX_RULES", "none"}}), "none");
  EXPECT_EQ(found({{"HOME", home}, {"COLLX_RULES", "/x/r.json"}}), "COLLX_RULES /x/r.json");
  const SelectionPolicy policy =
      SelectionPolicy::fromConfig(Config(Config::Environment{{"HOME", home}}), false, 1);
  EXPECT_EQ(policy.rulesPath, home + "/.config/collx/rules.json");
  ASSERT_NE(policy.rules, nullptr);
  EXPECT_EQ(policy.table->rows(Collective::kAllreduce).front().source,
            "rules file " + home + "/.config/collx/rules.json, allreduce entry 1");
}

TEST(SelectionInAJob, RulesFileDecidesAndCollxInfoShowsIt) {
  test::TempDir dir;
  std::string path = dir.path() + "/rules.json";
  std::ofstream(path) << R"({"allreduce": [{"max_bytes": "1M", "algorithm": "ring_chunked"}]})";
  std::map<std::string, std::string> env = {{"COLLX_RULES", path},
                                            {"COLLX_LOG_LEVEL", "warn,collx.algo=debug"},
                                            {"COLLX_ALLREDUCE_ALGO", ""},
                                            {"COLLX_STORE", ""},
                                            {"COLLX_JOB_ID", ""}};
  test::RunResult r = test::run({test::binDir() + "/collx-run", "-n", "2", "--",
                                 test::binDir() + "/collx-test-worker", "count", "1000"},
                                env, std::chrono::seconds(60));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("ring_chunked (from COLLX_RULES " + path + ", allreduce entry 1)"),
            std::string::npos)
      << r.err;
  test::RunResult info = test::run({test::binDir() + "/collx-info"}, {{"COLLX_RULES", path}});
  EXPECT_EQ(info.code, 0) << info.err;
  EXPECT_NE(info.out.find("-> ring_chunked         (COLLX_RULES " + path), std::string::npos)
      << info.out;
  std::ofstream(path) << R"({"allreduce": [{"algorithm": "nope"}]})";
  test::RunResult bad = test::run({test::binDir() + "/collx-run", "-n", "2", "--",
                                   test::binDir() + "/collx-test-worker", "count", "1000"},
                                  env, std::chrono::seconds(60));
  EXPECT_EQ(bad.code, 14) << bad.err;
  EXPECT_NE(bad.err.find("unknown allreduce algorithm 'nope'"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace collx::algorithms
