// The hang report with real processes: one rank of a job skips a call, calls another
// collective, sleeps in user code, is stopped or is killed, while the others wait in the
// call. The report (made by the library, through the job's store) must name that rank and
// the cause, be logged once per round, be written as JSON to COLLX_HANG_REPORT_DIR, go into
// the others' errors, and never hold a rank past its deadline. Over tcp, shared memory and
// ibverbs on the userspace verbs device.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "util/sanitizer.h"
#include "util/test_util.h"
#include "util/worker_job.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kCalls = 3;  // the hang is in call 2 (seq 2)

class HangJob : public test::WorkerJob {
 public:
  HangJob(int size, int odd, const std::string& what, const std::string& transport,
          const std::string& dir, const std::string& store = "")
      : WorkerJob(
            size, "hang-test",
            [](int) {
              return std::vector<std::string>{"hang", "1000", std::to_string(kCalls)};
            },
            [&](int) {
              std::map<std::string, std::string> env{{"COLLX_TIMEOUT", "6s"},
                                                     {"COLLX_TRANSPORT", transport},
                                                     {"COLLX_HANG_REPORT_AFTER", "2s"},
                                                     {"COLLX_HANG_REPORT_DIR", dir},
                                                     {"TEST_WORKER_HANG_RANK", std::to_string(odd)},
                                                     {"TEST_WORKER_HANG_CASE", what}};
              if (!store.empty()) env["COLLX_STORE"] = store;
              // A stopped rank's report rounds up to the deadline are the subject here:
              // liveness, which fails the others at the peer timeout instead, is off
              // (process_failure_test.cc's Liveness tests it).
              if (what == "stop") env["COLLX_PEER_TIMEOUT"] = "0";
#ifdef COLLX_VERBS_EMU_PATH
              if (transport == "ibverbs") env["COLLX_IBVERBS_LIBRARY"] = COLLX_VERBS_EMU_PATH;
#endif
              return env;
            }) {
  }
};

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

nlohmann::json readJson(const std::filesystem::path& file) {
  std::ifstream in(file);
  return nlohmann::json::parse(in);
}

class HangReports : public ::testing::TestWithParam<std::string> {
 protected:
  // Runs the case; returns the others' stderr joined. `code`: their exit code (11 timeout, 10
  // a dead peer); `line`: what the report says of rank `odd`; `cause`: its JSON cause.
  std::string expectReport(int size, int odd, const std::string& what, int code,
                           const std::string& line, const std::string& cause,
                           std::vector<int> waiting = {}) {
    if (waiting.empty()) {
      for (int r = 0; r < size; ++r) {
        if (r != odd) waiting.push_back(r);
      }
    }
    test::TempDir dir;
    HangJob job(size, odd, what, GetParam(), dir.path());
    EXPECT_TRUE(job.allReady());
    // The hang starts once every rank finished call 1.
    const auto start = Clock::now();
    std::string all;
    for (int r : waiting) {
      EXPECT_TRUE(job.rank(r).wait(20s)) << "rank " << r << " hangs: " << job.rank(r).err();
      const auto took = Clock::now() - start;
      // Nobody past its deadline (6 s) by more than the test's slack, reports or not.
      EXPECT_LT(took, 9500ms) << "rank " << r;
      // A dead peer fails the call at once, not at its deadline.
      if (code == 10) {
        EXPECT_LT(took, 5500ms) << "rank " << r;
      }
      EXPECT_EQ(job.rank(r).exitCode(), code) << "rank " << r << ": " << job.rank(r).err();
      const std::string& err = job.rank(r).err();
      // The error itself carries the job's diagnosis.
      EXPECT_NE(err.find("collx hang report"), std::string::npos) << "rank " << r << ": " << err;
      EXPECT_NE(err.find(line), std::string::npos) << "rank " << r << ": " << err;
      all += err;
    }
    // Rounds: after 2 s (c2.a) and before the deadline (c2.z) unless the call failed first;
    // each logged once over all ranks (the writer), each written as JSON.
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) files.push_back(e);
    std::sort(files.begin(), files.end());
    // A report 2 s into the call and one before its 6 s deadline; a call that failed at
    // 3.5 s (a dead peer) had only the first.
    // (Twice that where a rank stopped as soon as its part of call 1 was done: the ranks
    // still in call 1 make their own two.)
    EXPECT_GE(files.size(), code == 11 ? 2u : 1u) << all;
    EXPECT_LE(files.size(), code == 11 ? 4u : 2u) << all;
    // Every rank's log, the odd one's and those that got through too (any rank with a call
    // in flight may be the round's writer).
    std::string logs;
    for (int r = 0; r < size; ++r) {
      job.rank(r).signal(SIGKILL);
      EXPECT_TRUE(job.rank(r).wait(10s));
      logs += job.rank(r).err();
    }
    const int logged = count(logs, "[warning] collx hang report");
    EXPECT_EQ(logged, static_cast<int>(files.size())) << logs;
    for (const auto& file : files) {
      // Call 2 (seq 2), or call 1 where a rank stopped as soon as its part of it was done
      // while the other still waited for the end of it.
      EXPECT_TRUE(std::regex_search(file.filename().string(),
                                    std::regex("^collx-hang-hang-test-g0-c[12]\\.[az]\\.json$")))
          << file;
      const nlohmann::json report = readJson(file);
      EXPECT_EQ(report.at("size"), size);
      EXPECT_NE(report.at("text").get<std::string>().find(line), std::string::npos)
          << report.dump(2);
      bool named = false;
      for (const auto& rank : report.at("ranks")) {
        if (rank.at("rank") == odd) named = rank.at("cause") == cause;
      }
      EXPECT_TRUE(named) << "rank " << odd << " should be '" << cause << "': " << report.dump(2);
    }
    return all;
  }
};

TEST_P(HangReports, ARankThatSkipsTheCallIsNamed) {
  expectReport(4, 3, "skip", 11, "rank 3: has not called allreduce#2", "not_called");
}

TEST_P(HangReports, ARankBusyInUserCodeIsNamed) {
  expectReport(4, 1, "sleep", 11, "rank 1: has not called allreduce#2", "not_called");
}

TEST_P(HangReports, ARankThatCalledAnotherCollectiveIsAMismatch) {
  // The others reduce to rank 0 over a binomial tree, rank 5 (a leaf) broadcasts over one:
  // the leaves 1, 2, 3, 6 and 7 are through (they only send), rank 4 waits for rank 5 and
  // rank 0 for rank 4; no message crosses between 4 and 5, so only the report can tell.
  const std::string all =
      expectReport(8, 5, "other", 11, "now in broadcast#2 (root 0) since", "mismatch", {0, 4});
  EXPECT_NE(all.find("rank 5: last completed allreduce#1; now in broadcast#2"), std::string::npos)
      << all;
  EXPECT_NE(all.find("it called a different collective (mismatch)"), std::string::npos) << all;
}

TEST_P(HangReports, AStoppedRankIsNotRespondingAndStopped) {
  for (int size : {2, 8}) {
    SCOPED_TRACE("P=" + std::to_string(size));
    expectReport(size, size - 1, "stop", 11,
                 "rank " + std::to_string(size - 1) + ": not responding", "stopped");
  }
}

TEST_P(HangReports, AKilledRankFailsTheOthersEarlyWithTheReportBefore) {
  // Rank 2 dies 3.5 s after the others entered the call: they fail at once (a dead peer),
  // well before their deadline, and their errors carry the report made at 2 s.
  const std::string all =
      expectReport(4, 2, "kill", 10, "rank 2: has not called allreduce#2", "not_called");
  EXPECT_NE(all.find("rank 2 died or was killed"), std::string::npos) << all;
}

TEST(HangReportsWithoutAStore, EachRankReportsItsOwnViewBeforeItsDeadline) {
  // The job's store (a server process of its own) stops answering once the ranks are in the
  // call that hangs: the rounds cannot be joined, and each rank's error still carries a
  // report, saying so, made from what it knows; nobody is held past its deadline.
  test::Process server({test::binDir() + "/collx-test-store-helper", "serve", "0"});
  const auto until = Clock::now() + 10s;
  while (server.out().find('\n') == std::string::npos && Clock::now() < until) server.wait(10ms);
  const std::string url = server.out().substr(0, server.out().find('\n'));
  ASSERT_EQ(url.rfind("tcp://127.0.0.1:", 0), 0u) << server.out() << server.err();
  test::TempDir dir;
  HangJob job(3, 2, "skip", "tcp", dir.path(), url);
  ASSERT_TRUE(job.allReady());
  auto done = [&](int r) { return job.rank(r).out().find("call 1 done") != std::string::npos; };
  while (!(done(0) && done(1) && done(2)) && Clock::now() < until + 20s) {
    for (int r = 0; r < 3; ++r) job.rank(r).wait(5ms);
  }
  ASSERT_TRUE(done(0) && done(1) && done(2));
  server.signal(SIGSTOP);
  const auto start = Clock::now();
  for (int r : {0, 1}) {
    EXPECT_TRUE(job.rank(r).wait(20s)) << "rank " << r;
    EXPECT_LT(Clock::now() - start, 9500ms) << "rank " << r;
    EXPECT_EQ(job.rank(r).exitCode(), 11) << job.rank(r).err();
    const std::string& err = job.rank(r).err();
    EXPECT_NE(err.find("collx hang report"), std::string::npos) << err;
    EXPECT_NE(err.find("the store (" + url), std::string::npos) << err;
    EXPECT_NE(
        err.find("did not answer within 1000 ms: this is the view of rank " + std::to_string(r)),
        std::string::npos)
        << err;
    EXPECT_NE(err.find("rank 2: unknown (the store did not answer)"), std::string::npos) << err;
  }
  job.rank(2).signal(SIGKILL);
  server.signal(SIGCONT);
}

const std::vector<std::string> kTransports = {"tcp", "shm",
#ifdef COLLX_VERBS_EMU_PATH
                                              "ibverbs"
#endif
};

// Under ThreadSanitizer over tcp only: the report's rounds are the same over every transport,
// and shm's and ibverbs' own paths are the thread suites' (ASan runs all three).
std::vector<std::string> transportsUnderTest() {
  if (test::kSanitizer == test::Sanitizer::kThread) return {"tcp"};
  return kTransports;
}

INSTANTIATE_TEST_SUITE_P(Transports, HangReports, ::testing::ValuesIn(transportsUnderTest()),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace collx
