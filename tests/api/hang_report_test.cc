// The hang report's parts that need no round over the store: the process probe on real
// processes, the start time in the join record, the summaries and their JSON, and the
// diagnosis on synthetic summaries (each cause, merged rank lists, point to point, malformed
// input).
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "diagnostics/hang_diagnosis.h"
#include "diagnostics/process_probe.h"
#include "util/test_util.h"
#include "util/world.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
using detail::Cause;
using detail::Diagnosis;
using detail::ProcessState;
using detail::Summary;
using detail::SummaryCall;

// A record of a child that sleeps, on this host.
class ProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    here_ = localPeerInfo(0, 0);
    ASSERT_NE(here_.startTime, 0u) << "no start time in /proc/self/stat";
    child_ = std::make_unique<test::Process>(std::vector<std::string>{"/bin/sleep", "60"});
    peer_ = here_;
    peer_.rank = 1;
    peer_.pid = child_->pid();
    // Its start time as /proc tells it (the child wrote no join record).
    auto stat = detail::readProcStat(child_->pid());
    ASSERT_TRUE(stat.has_value());
    peer_.startTime = stat->startTime;
  }
  ProcessState probe() const { return detail::probeProcess(peer_, here_); }
  // Signals are delivered asynchronously: the state the probe reports within 5 s.
  ProcessState becomes(ProcessState wanted) const {
    ProcessState state = probe();
    for (int i = 0; i < 500 && state != wanted; ++i) {
      std::this_thread::sleep_for(10ms);
      state = probe();
    }
    return state;
  }

  PeerInfo here_;
  PeerInfo peer_;
  std::unique_ptr<test::Process> child_;
};

TEST_F(ProbeTest, RunningStoppedAndGone) {
  EXPECT_EQ(probe(), ProcessState::kRunning);  // sleeping is alive
  child_->signal(SIGSTOP);
  EXPECT_EQ(becomes(ProcessState::kStopped), ProcessState::kStopped);
  child_->signal(SIGCONT);
  EXPECT_EQ(becomes(ProcessState::kRunning), ProcessState::kRunning);
  child_->signal(SIGKILL);
  ASSERT_TRUE(child_->wait(10s));  // reaped
  EXPECT_EQ(probe(), ProcessState::kGone);
}

TEST_F(ProbeTest, KilledButNotReapedIsAZombie) {
  child_->signal(SIGKILL);  // the Process reaps it only when it goes away
  EXPECT_EQ(becomes(ProcessState::kZombie), ProcessState::kZombie);
}

TEST_F(ProbeTest, AnotherStartTimeIsAnotherProcess) {
  peer_.startTime += 1;  // the pid was reused by a later process
  EXPECT_EQ(probe(), ProcessState::kGone);
  peer_.startTime = 0;  // a record without a start time: the pid alone decides
  EXPECT_EQ(probe(), ProcessState::kRunning);
}

TEST_F(ProbeTest, OtherHostsCannotBeTold) {
  PeerInfo elsewhere = peer_;
  elsewhere.hostname = here_.hostname + "-other";
  EXPECT_EQ(detail::probeProcess(elsewhere, here_), ProcessState::kOtherHost);
  elsewhere = peer_;
  elsewhere.bootId = "another-boot";  // same name, another kernel (or a reboot)
  EXPECT_EQ(detail::probeProcess(elsewhere, here_), ProcessState::kOtherHost);
  elsewhere.bootId.clear();  // a record without a boot id: the name decides
  EXPECT_EQ(detail::probeProcess(elsewhere, here_), ProcessState::kRunning);
  elsewhere.pid = 0;
  EXPECT_EQ(detail::probeProcess(elsewhere, here_), ProcessState::kOtherHost);
  EXPECT_EQ(detail::hostProbe()(peer_), ProcessState::kRunning);
}

TEST(ProcStat, ParsesItsOwnRecord) {
  auto stat = detail::readProcStat(::getpid());
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ(stat->state, 'R');  // it is reading, so running
  EXPECT_EQ(stat->pgrp, ::getpgrp());
  EXPECT_EQ(stat->startTime, detail::ownStartTime());
  EXPECT_FALSE(detail::readProcStat(0).has_value());
  EXPECT_FALSE(detail::readProcStat(-1).has_value());
}

// Every rank's join record carries its start time, so that a report can tell a dead rank
// from a later process with its pid.
TEST(JoinRecord, CarriesTheStartTime) {
  test::World world(3);
  const std::uint64_t start = detail::ownStartTime();
  ASSERT_NE(start, 0u);
  for (int r = 0; r < world.size(); ++r) {
    for (const PeerInfo& peer : world.context(r).peers()) {
      EXPECT_EQ(peer.startTime, start) << "rank " << r << " peer " << peer.rank;
    }
  }
}

// ---- the diagnosis, on synthetic summaries --------------------------------------------------

constexpr std::uint64_t kBig = 4194304;

SummaryCall allreduce(std::uint64_t seq, std::uint64_t count = kBig) {
  SummaryCall c;
  c.id = seq + 100;
  c.seq = seq;
  c.collective = "allreduce";
  c.algorithm = "ring";
  c.dtype = "float32";
  c.op = "sum";
  c.count = count;
  c.state = "running";
  c.sinceMs = 61'000;
  return c;
}

SummaryCall waitingFor(SummaryCall c, int peer, std::uint32_t step = 3, std::uint32_t steps = 14,
                       std::string via = "") {
  c.state = "waiting";
  c.waitPeer = peer;
  c.waitWhat = "recv";
  c.waitBytes = 1 << 20;
  c.step = step;
  c.steps = steps;
  c.waitVia = std::move(via);
  return c;
}

SummaryCall pointToPoint(const char* what, int peer, std::uint64_t tag) {
  SummaryCall c;
  c.id = 7;
  c.seq = tag;
  c.p2p = true;
  c.collective = what;
  c.dtype = "int32";
  c.count = 100;
  c.peer = peer;
  c.state = "waiting";
  c.waitPeer = peer;
  c.waitWhat = what;
  c.sinceMs = 2'000;
  return c;
}

// A rank in `calls`, having completed allreduce#(first call's seq - 1).
Summary busy(int rank, std::vector<SummaryCall> calls) {
  Summary s;
  s.rank = rank;
  s.round = "c812.a";
  std::uint64_t seq = 0;
  for (const SummaryCall& c : calls) {
    if (!c.p2p) seq = std::max(seq, c.seq + 1);
  }
  s.nextSeq = seq;
  if (seq >= 2) {
    s.lastSeq = calls.front().seq - 1;
    s.lastCollective = "allreduce";
  }
  s.inFlight = static_cast<std::uint32_t>(calls.size());
  s.calls = std::move(calls);
  return s;
}

// A rank outside collx for `idleMs`, its last call allreduce#(nextSeq - 1).
Summary idle(int rank, std::uint64_t nextSeq, std::int64_t idleMs = 61'000) {
  Summary s;
  s.rank = rank;
  s.round = "c812.a";
  s.nextSeq = nextSeq;
  s.idleMs = idleMs;
  if (nextSeq > 0) {
    s.lastSeq = nextSeq - 1;
    s.lastCollective = "allreduce";
  }
  return s;
}

std::vector<PeerInfo> peersOf(int size) {
  std::vector<PeerInfo> peers(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    peers[r].rank = r;
    peers[r].hostname = "node" + std::to_string(r / 4);
    peers[r].pid = 1000 + r;
  }
  return peers;
}

detail::ReportInfo job() {
  detail::ReportInfo info;
  info.job = "7f3a";
  info.round = "c812.a";
  info.trigger = "after";
  return info;
}

// A probe that must not be asked (every rank answered).
const detail::Probe kNoProbe = [](const PeerInfo& peer) {
  ADD_FAILURE() << "probed rank " << peer.rank;
  return ProcessState::kOtherHost;
};

using Summaries = std::vector<std::optional<Summary>>;

// The example, word for word.
TEST(Diagnose, AnotherCollectiveIsAMismatch) {
  Summaries s(8);
  for (int r = 0; r < 8; ++r) {
    if (r != 5) s[r] = busy(r, {waitingFor(allreduce(812), 5, 3, 14, "tcp 10.0.0.5:4321")});
  }
  SummaryCall other = allreduce(812);
  other.collective = "broadcast";
  other.algorithm = "binomial";
  other.op = "";
  other.root = 0;
  s[5] = busy(5, {other});
  Diagnosis d = detail::diagnose(s, peersOf(8), kNoProbe, job());
  EXPECT_EQ(d.text,
            "collx hang report, job 7f3a, 8 ranks, 61 s into allreduce#812 (ring, float32 x "
            "4194304):\n"
            "  ranks 0-4,6,7: in allreduce#812, step 4/14, waiting for rank 5 (tcp "
            "10.0.0.5:4321)\n"
            "  rank 5: last completed allreduce#811; now in broadcast#812 (root 0) since 61 s: it "
            "called a different collective (mismatch)");
  ASSERT_EQ(d.ranks.size(), 8u);
  EXPECT_EQ(d.ranks[5].cause, Cause::kMismatch);
  EXPECT_EQ(d.ranks[0].cause, Cause::kWaiting);
  EXPECT_EQ(d.ranks[0].text, "in allreduce#812, step 4/14, waiting for rank 5 (tcp 10.0.0.5:4321)");
  ASSERT_TRUE(d.call.has_value());
  EXPECT_EQ(d.call->seq, 812u);
  EXPECT_EQ(d.callMs, 61'000);
}

// Over a ring every waiter names its neighbour; the report names the rank that did not call.
TEST(Diagnose, RingNeighboursWaitButTheRankThatDidNotCallIsNamed) {
  Summaries s(4);
  s[0] = busy(0, {waitingFor(allreduce(12), 3, 0, 6)});
  s[1] = busy(1, {waitingFor(allreduce(12), 0, 1, 6)});
  s[3] = busy(3, {waitingFor(allreduce(12), 2, 0, 6)});
  s[2] = idle(2, 12);
  Diagnosis d = detail::diagnose(s, peersOf(4), kNoProbe, job());
  EXPECT_EQ(d.ranks[2].cause, Cause::kNotCalled);
  EXPECT_EQ(d.text,
            "collx hang report, job 7f3a, 4 ranks, 61 s into allreduce#12 (ring, float32 x "
            "4194304):\n"
            "  ranks 0,1,3: in allreduce#12, steps 1-2/6, waiting for ranks 0,2,3\n"
            "  rank 2: has not called allreduce#12: last completed allreduce#11, outside collx "
            "for 61 s (skipped the call, or busy in user code)");
  // Each rank's own line keeps its own peer.
  EXPECT_EQ(d.ranks[1].text, "in allreduce#12, step 2/6, waiting for rank 0");
  for (int r : {0, 1, 3}) EXPECT_EQ(d.ranks[r].cause, Cause::kWaiting) << r;
}

TEST(Diagnose, SameCollectiveOtherArgumentsIsAMismatch) {
  Summaries s(3);
  s[0] = busy(0, {waitingFor(allreduce(812, 300), 2)});
  s[1] = busy(1, {waitingFor(allreduce(812, 300), 2)});
  s[2] = busy(2, {waitingFor(allreduce(812, 100), 0)});
  Diagnosis d = detail::diagnose(s, peersOf(3), kNoProbe, job());
  EXPECT_EQ(d.call->count, 300u);  // what most ranks called
  EXPECT_EQ(d.ranks[2].cause, Cause::kMismatch);
  EXPECT_EQ(d.ranks[2].text,
            "called allreduce#812 float32 x 100 where the others have float32 x 300 (mismatch)");

  s[2] = busy(2, {allreduce(812, 300)});
  s[2]->calls[0].dtype = "float64";
  s[2]->calls[0].op = "max";
  d = detail::diagnose(s, peersOf(3), kNoProbe, job());
  EXPECT_EQ(d.ranks[2].text,
            "called allreduce#812 float64 x 300, op max where the others have float32 x 300, op "
            "sum (mismatch)");

  // Another root, and another algorithm (a rank with other settings).
  for (int r = 0; r < 3; ++r) {
    SummaryCall b = allreduce(40, 64);
    b.collective = "broadcast";
    b.algorithm = r == 1 ? "ring" : "binomial";
    b.op = "";
    b.root = r == 2 ? 1 : 0;
    s[r] = busy(r, {b});
  }
  d = detail::diagnose(s, peersOf(3), kNoProbe, job());
  EXPECT_EQ(d.header,
            "collx hang report, job 7f3a, 3 ranks, 61 s into broadcast#40 (binomial, float32 x "
            "64, root 0):");
  EXPECT_EQ(d.ranks[0].cause, Cause::kWaiting);
  EXPECT_EQ(d.ranks[1].text,
            "called broadcast#40 algorithm ring where the others have algorithm binomial "
            "(mismatch)");
  EXPECT_EQ(d.ranks[2].text, "called broadcast#40 root 1 where the others have root 0 (mismatch)");
}

TEST(Diagnose, ARankStillInAnEarlierCallIsBehind) {
  Summaries s(4);
  for (int r : {0, 1, 3}) s[r] = busy(r, {waitingFor(allreduce(812), 2)});
  SummaryCall barrier = waitingFor(allreduce(811), 3, 1, 2);
  barrier.collective = "barrier";
  barrier.algorithm = "dissemination";
  barrier.op = "";
  s[2] = busy(2, {barrier});
  Diagnosis d = detail::diagnose(s, peersOf(4), kNoProbe, job());
  EXPECT_EQ(d.call->seq, 812u);  // where most ranks are, not the lowest seq in flight
  EXPECT_EQ(d.ranks[2].cause, Cause::kBehind);
  EXPECT_EQ(d.ranks[2].text, "still in barrier#811 since 61 s, step 2/2, waiting for rank 3");
  EXPECT_NE(d.text.find("\n  ranks 0,1,3: in allreduce#812, step 4/14, waiting for rank 2\n"),
            std::string::npos)
      << d.text;
}

TEST(Diagnose, ARankPastTheCallIsDone) {
  Summaries s(4);
  for (int r : {0, 1}) s[r] = busy(r, {waitingFor(allreduce(812), 3)});
  s[2] = busy(2, {waitingFor(allreduce(813), 0, 0, 3)});
  s[2]->calls[0].collective = "allgather";
  s[2]->calls[0].sinceMs = 1'000;
  s[3] = idle(3, 813, 5'000);
  Diagnosis d = detail::diagnose(s, peersOf(4), kNoProbe, job());
  EXPECT_EQ(d.ranks[2].cause, Cause::kDone);
  EXPECT_EQ(d.ranks[2].text,
            "completed #812; now in allgather#813 since 1.0 s, step 1/3, "
            "waiting for rank 0");
  EXPECT_EQ(d.ranks[3].cause, Cause::kDone);
  EXPECT_EQ(d.ranks[3].text, "completed #812, outside collx for 5.0 s");
}

TEST(Diagnose, AFailedRankSaysWhy) {
  Summaries s(2);
  s[0] = busy(0, {waitingFor(allreduce(5), 1)});
  s[1] = idle(1, 6);
  s[1]->failed = "rank 1: allreduce(ring, seq 5): lost the connection to rank 0";
  Diagnosis d = detail::diagnose(s, peersOf(2), kNoProbe, job());
  EXPECT_EQ(d.ranks[1].cause, Cause::kFailed);
  EXPECT_EQ(d.ranks[1].text,
            "failed: rank 1: allreduce(ring, seq 5): lost the connection to rank 0");
}

// A rank that published nothing: the probe tells what became of its process.
TEST(Diagnose, NotRespondingRanksAreProbed) {
  struct Case {
    ProcessState state;
    Cause cause;
    std::string text;
  };
  const std::vector<Case> cases = {
      {ProcessState::kRunning, Cause::kNotResponding,
       "not responding: pid 1003 on host node0 is running, but its collx watcher did not "
       "answer"},
      {ProcessState::kStopped, Cause::kStopped,
       "not responding: pid 1003 on host node0 is stopped (SIGSTOP or a debugger)"},
      {ProcessState::kZombie, Cause::kDead,
       "not responding: pid 1003 on host node0 is dead (zombie)"},
      {ProcessState::kGone, Cause::kDead, "not responding: pid 1003 on host node0 is dead"},
      {ProcessState::kOtherHost, Cause::kNotResponding,
       "not responding: pid 1003 on host node0 (dead, stopped, or stuck outside collx)"},
  };
  for (const Case& c : cases) {
    Summaries s(4);
    for (int r = 0; r < 3; ++r) s[r] = busy(r, {waitingFor(allreduce(812), 3)});
    int asked = 0;
    auto probe = [&](const PeerInfo& peer) {
      ++asked;
      EXPECT_EQ(peer.pid, 1003);
      return c.state;
    };
    Diagnosis d = detail::diagnose(s, peersOf(4), probe, job());
    EXPECT_EQ(asked, 1);
    EXPECT_EQ(d.ranks[3].cause, c.cause) << detail::processStateName(c.state);
    EXPECT_EQ(d.ranks[3].text, c.text);
    EXPECT_EQ(d.ranks[3].host, "node0");
    EXPECT_EQ(d.ranks[3].pid, 1003);
    EXPECT_FALSE(d.ranks[3].summary.has_value());
    EXPECT_NE(d.text.find("\n  rank 3: " + c.text), std::string::npos) << d.text;
  }
  // No join record to probe.
  Summaries s(2);
  s[0] = idle(0, 3);
  Diagnosis d = detail::diagnose(s, {}, kNoProbe, job());
  EXPECT_EQ(d.ranks[1].text, "not responding (no join record)");
  EXPECT_EQ(d.header, "collx hang report, job 7f3a, 2 ranks, no collective in flight:");
}

TEST(Diagnose, AStoreThatDidNotAnswerLeavesTheLocalView) {
  Summaries s(3);
  s[1] = busy(1, {waitingFor(allreduce(9), 0)});
  detail::ReportInfo info = job();
  info.storeProblem = "the store (tcp://10.0.0.1:29500) did not answer within 1000 ms";
  info.generation = 2;
  Diagnosis d = detail::diagnose(
      s, peersOf(3), [](const PeerInfo&) { return ProcessState::kOtherHost; }, info);
  EXPECT_EQ(d.text,
            "collx hang report, job 7f3a gen 2, 3 ranks, 61 s into allreduce#9 (ring, float32 x "
            "4194304):\n"
            "  the store (tcp://10.0.0.1:29500) did not answer within 1000 ms: this is the view "
            "of rank 1\n"
            "  rank 0: unknown (the store did not answer): pid 1000 on host node0\n"
            "  rank 1: in allreduce#9, step 4/14, waiting for rank 0\n"
            "  rank 2: unknown (the store did not answer): pid 1002 on host node0");
  // What the probe saw of a rank on this host still counts.
  d = detail::diagnose(
      s, peersOf(3),
      [](const PeerInfo& p) {
        return p.rank == 2 ? ProcessState::kStopped : ProcessState::kRunning;
      },
      info);
  EXPECT_EQ(d.ranks[0].text, "unknown (the store did not answer): pid 1000 on host node0");
  EXPECT_EQ(d.ranks[2].text,
            "not responding: pid 1002 on host node0 is stopped (SIGSTOP or a "
            "debugger)");
}

TEST(Diagnose, PointToPointCallsInFlight) {
  // Only point-to-point calls: each says whom it waits for; tags that do not match are named.
  Summaries s(3);
  s[0] = busy(0, {pointToPoint("send", 1, 7)});
  s[1] = busy(1, {pointToPoint("recv", 0, 8)});
  s[2] = idle(2, 4, 3'000);
  Diagnosis d = detail::diagnose(s, peersOf(3), kNoProbe, job());
  EXPECT_EQ(d.header, "collx hang report, job 7f3a, 3 ranks, no collective in flight:");
  EXPECT_EQ(d.ranks[0].cause, Cause::kMismatch);
  EXPECT_EQ(d.ranks[0].text,
            "in send to rank 1 (tag 7, int32 x 100) since 2.0 s, waiting for rank 1: rank 1's "
            "send/recv with rank 0 has tag 8 (mismatch)");
  EXPECT_EQ(d.ranks[1].cause, Cause::kMismatch);
  EXPECT_EQ(d.ranks[2].cause, Cause::kDone);
  EXPECT_EQ(d.ranks[2].text, "last completed allreduce#3, outside collx for 3.0 s");

  // A receiver that never posted its recv is the one named.
  s[1] = idle(1, 4, 61'000);
  d = detail::diagnose(s, peersOf(3), kNoProbe, job());
  EXPECT_EQ(d.ranks[0].cause, Cause::kWaiting);
  EXPECT_EQ(d.ranks[0].text,
            "in send to rank 1 (tag 7, int32 x 100) since 2.0 s, waiting for rank 1");
  EXPECT_EQ(d.ranks[1].cause, Cause::kNotCalled);
  EXPECT_EQ(d.ranks[1].text,
            "has not called the send/recv rank 0 waits for (tag 7): last completed allreduce#3, "
            "outside collx for 61 s");

  // During a collective: a rank stuck in a recv has not called it, and says where it is.
  Summaries t(3);
  t[0] = busy(0, {waitingFor(allreduce(20), 1)});
  t[2] = busy(2, {waitingFor(allreduce(20), 1)});
  t[1] = idle(1, 20);
  t[1]->idleMs = -1;
  t[1]->inFlight = 1;
  t[1]->calls = {pointToPoint("recv", 2, 5)};
  d = detail::diagnose(t, peersOf(3), kNoProbe, job());
  EXPECT_EQ(d.ranks[1].cause, Cause::kNotCalled);
  EXPECT_EQ(d.ranks[1].text,
            "has not called allreduce#20: last completed allreduce#19; now in recv from rank 2 "
            "(tag 5) since 2.0 s, waiting for rank 2");
}

TEST(Diagnose, RankRanges) {
  EXPECT_EQ(detail::rankRanges({}), "");
  EXPECT_EQ(detail::rankRanges({5}), "5");
  EXPECT_EQ(detail::rankRanges({6, 7}), "6,7");
  EXPECT_EQ(detail::rankRanges({0, 1, 2, 3, 4, 6, 7}), "0-4,6,7");
  EXPECT_EQ(detail::rankRanges({0, 2, 4}), "0,2,4");
  EXPECT_EQ(detail::rankRanges({9, 3, 1, 2, 2}), "1-3,9");
  EXPECT_EQ(detail::rankRanges({0, 1, 2, 10, 11, 12, 13, 20}), "0-2,10-13,20");
}

// Lines are merged across many ranks: a 64-rank job with one culprit reads in three lines.
TEST(Diagnose, LargeJobsReadInAFewLines) {
  Summaries s(64);
  for (int r = 0; r < 64; ++r) s[r] = busy(r, {waitingFor(allreduce(3), 17, 0, 126)});
  s[17] = idle(17, 3);
  s[40].reset();
  Diagnosis d = detail::diagnose(
      s, peersOf(64), [](const PeerInfo&) { return ProcessState::kStopped; }, job());
  EXPECT_EQ(d.text,
            "collx hang report, job 7f3a, 64 ranks, 61 s into allreduce#3 (ring, float32 x "
            "4194304):\n"
            "  ranks 0-16,18-39,41-63: in allreduce#3, step 1/126, waiting for rank 17\n"
            "  rank 17: has not called allreduce#3: last completed allreduce#2, outside collx for "
            "61 s (skipped the call, or busy in user code)\n"
            "  rank 40: not responding: pid 1040 on host node10 is stopped (SIGSTOP or a "
            "debugger)");
}

// ---- summaries and their JSON --------------------------------------------------------------

algorithms::CallRecord record(std::uint64_t id, std::uint64_t seq, algorithms::CallState state) {
  algorithms::CallRecord r;
  r.id = id;
  r.seq = seq;
  r.fingerprint = transport::Fingerprint{1 /* allreduce */, 6 /* float32 */, 0 /* sum */, -1, 1024};
  r.algorithm = "ring";
  r.state = state;
  r.admittedNs = 1'000'000'000;
  r.timeoutMs = 30'000;
  return r;
}

TEST(Summary, FromTheRecorder) {
  using algorithms::CallState;
  using algorithms::WaitKind;
  std::vector<algorithms::CallRecord> records;
  records.push_back(record(1, 10, CallState::kCompleted));
  records.back().endedUs = 500;
  records.push_back(record(2, 11, CallState::kFailed));  // failed: not "last completed"
  records.push_back(record(3, 12, CallState::kRunning));
  records.back().waitKind = WaitKind::kRecv;
  records.back().waitPeer = 2;
  records.back().step = 5;
  records.back().steps = 14;
  records.back().waitBytes = 4096;
  records.push_back(record(4, 7, CallState::kQueued));
  records.back().space = transport::Space::kPointToPoint;
  records.back().fingerprint.coll = 5;
  records.back().algorithm = "";
  records.back().peer = 3;
  records.push_back(record(5, 13, CallState::kRunning));
  records.back().waitKind = WaitKind::kShared;
  records.back().waitPeer = 1;
  records.push_back(record(6, 0, CallState::kFree));  // never written: ignored
  detail::SummaryInput input;
  input.rank = 2;
  input.round = "u1";
  input.nextSeq = 3;  // the counter as read: the records hold later calls
  input.failure = "first line\nsecond line";
  input.describePeer = [](int peer) { return "tcp 10.0.0." + std::to_string(peer) + ":4321"; };
  const std::int64_t now = 4'000'000'000;
  Summary s = detail::summarize(records, now, input);
  EXPECT_EQ(s.rank, 2);
  EXPECT_EQ(s.round, "u1");
  EXPECT_EQ(s.nextSeq, 14u);
  EXPECT_EQ(s.failed, "first line");
  ASSERT_TRUE(s.lastSeq.has_value());
  EXPECT_EQ(*s.lastSeq, 10u);
  EXPECT_EQ(s.lastCollective, "allreduce");
  EXPECT_EQ(s.idleMs, -1);  // calls are in flight
  EXPECT_EQ(s.inFlight, 3u);
  ASSERT_EQ(s.calls.size(), 3u);
  const SummaryCall& c = s.calls[0];
  EXPECT_EQ(c.seq, 12u);
  EXPECT_FALSE(c.p2p);
  EXPECT_EQ(c.collective, "allreduce");
  EXPECT_EQ(c.algorithm, "ring");
  EXPECT_EQ(c.dtype, "float32");
  EXPECT_EQ(c.op, "sum");
  EXPECT_EQ(c.count, 1024u);
  EXPECT_EQ(c.state, "waiting");
  EXPECT_EQ(c.step, 5u);
  EXPECT_EQ(c.steps, 14u);
  EXPECT_EQ(c.waitPeer, 2);
  EXPECT_EQ(c.waitWhat, "recv");
  EXPECT_EQ(c.waitBytes, 4096u);
  EXPECT_EQ(c.waitVia, "tcp 10.0.0.2:4321");
  EXPECT_EQ(c.sinceMs, 3'000);
  const SummaryCall& p = s.calls[1];
  EXPECT_TRUE(p.p2p);
  EXPECT_EQ(p.collective, "send/recv");  // queued: nothing says which yet
  EXPECT_EQ(p.op, "");
  EXPECT_EQ(p.peer, 3);
  EXPECT_EQ(p.state, "queued");
  EXPECT_EQ(s.calls[2].waitVia, "shared memory");
  EXPECT_EQ(s.calls[2].waitWhat, "shm");

  // Nothing in flight: idle since the last end.
  records.resize(2);
  s = detail::summarize(records, now, input);
  EXPECT_EQ(s.idleMs, 2'999);  // since the later end: the completed call's, 0.5 ms in
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.nextSeq, 12u);
  // Nothing at all.
  s = detail::summarize({}, now, input);
  EXPECT_EQ(s.idleMs, -1);
  EXPECT_FALSE(s.lastSeq.has_value());
  EXPECT_EQ(s.nextSeq, 3u);
}

TEST(Summary, JsonRoundTripWithinTwoKibibytes) {
  Summary s = busy(
      3, {waitingFor(allreduce(812), 5, 3, 14, "tcp 10.0.0.5:4321"), pointToPoint("send", 1, 9)});
  s.idleMs = -1;
  s.failed = "";
  const std::string json = detail::summaryJson(s);
  EXPECT_LE(json.size(), detail::kMaxSummaryBytes);
  Summary back = detail::parseSummary(json, 3);
  EXPECT_EQ(detail::summaryJson(back), json);
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.nextSeq, 813u);
  EXPECT_EQ(*back.lastSeq, 811u);
  ASSERT_EQ(back.calls.size(), 2u);
  EXPECT_EQ(back.calls[0].waitVia, "tcp 10.0.0.5:4321");
  EXPECT_EQ(back.calls[0].step, 3u);
  EXPECT_TRUE(back.calls[1].p2p);
  EXPECT_EQ(back.calls[1].collective, "send");

  // The largest summary: four calls with the longest texts, a long failure full of escapes.
  Summary big;
  big.rank = 63;
  big.round = std::string(64, 'r');
  big.failed = std::string(400, '\x01');
  big.inFlight = 1000;
  for (int i = 0; i < 4; ++i) {
    SummaryCall c = waitingFor(allreduce(~0ull - 4 + i), 1 << 30, ~0u, ~0u, std::string(96, 'v'));
    c.collective = c.algorithm = c.dtype = c.op = std::string(32, 'n');
    c.waitBytes = c.count = c.id = ~0ull;
    big.calls.push_back(c);
  }
  const std::string bigJson = detail::summaryJson(big);
  EXPECT_LE(bigJson.size(), detail::kMaxSummaryBytes);
  Summary bigBack = detail::parseSummary(bigJson, 63);
  EXPECT_GE(bigBack.calls.size(), 1u);  // dropped from the end to fit, never all
  EXPECT_EQ(bigBack.inFlight, 1000u);
}

TEST(Summary, MalformedJsonIsAClearError) {
  const std::string good = detail::summaryJson(busy(2, {waitingFor(allreduce(5), 1)}));
  auto error = [](const std::string& json, int rank = 2) {
    try {
      detail::parseSummary(json, rank, 0);
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error(good), "accepted");
  const std::string prefix = "rank 0: hang report (peer rank 2): its summary is malformed: ";
  EXPECT_EQ(error("{\"rank\": 2,").rfind(prefix + "not JSON: line 1, column 12: syntax error", 0),
            0u)
      << error("{\"rank\": 2,");
  EXPECT_NE(error("").find("not JSON"), std::string::npos);
  EXPECT_EQ(error("[1, 2]"), prefix + "the summary must be an object, not array");
  EXPECT_EQ(error(good, 3),
            "rank 0: hang report (peer rank 3): its summary is malformed: it is rank 2's");
  EXPECT_EQ(error(std::string(3000, ' ')), prefix + "3000 bytes, more than a summary's 2048");
  // One field spoiled at a time: {what the good summary holds, what replaces it, the error}.
  const std::vector<std::array<std::string, 3>> spoiled = {
      {"\"rank\":2", "\"rank\":\"2\"", "'rank' must be an integer in [-1, 2147483647], not \"2\""},
      {"\"next_seq\":6,", "", "'next_seq' is missing"},
      {"\"seq\":5,", "\"seq\":-5,",
       "'calls[0].seq' must be an integer in [0, 18446744073709551615], not -5"},
      {"\"state\":\"waiting\"", "\"state\":\"dancing\"",
       "'calls[0].state' must be queued, running or waiting, not 'dancing'"},
      {"\"p2p\":false", "\"p2p\":0", "'calls[0].p2p' must be true or false, not 0"},
      {"\"wait_peer\":1", "\"wait_peer\":-7",
       "'calls[0].wait_peer' must be an integer in [-1, 2147483647], not -7"},
      {"\"last\":{\"seq\":4,", "\"last\":{\"seq\":4.5,",
       "'last.seq' must be an integer in [0, 18446744073709551615], not 4.5"},
      {"\"calls\":[", "\"calls\":[1,2,3,4,", "'calls' must be an array of at most 4 calls"},
      {"\"id\":105,", "\"id\":105,\"extra\":[],", ""},  // unknown fields are ignored
  };
  for (const auto& [from, to, expected] : spoiled) {
    std::string json = good;
    const std::size_t at = json.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    json.replace(at, from.size(), to);
    EXPECT_EQ(error(json), expected.empty() ? "accepted" : prefix + expected) << json;
  }
}

TEST(Report, JsonDocumentAndFile) {
  Summaries s(3);
  s[0] = busy(0, {waitingFor(allreduce(12), 2)});
  s[1] = busy(1, {waitingFor(allreduce(12), 2)});
  detail::ReportInfo info = job();
  info.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'764'063'280'123));
  Diagnosis d = detail::diagnose(
      s, peersOf(3), [](const PeerInfo&) { return ProcessState::kGone; }, info);
  auto doc = nlohmann::json::parse(detail::reportJson(d));
  EXPECT_EQ(doc["job"], "7f3a");
  EXPECT_EQ(doc["generation"], 0);
  EXPECT_EQ(doc["round"], "c812.a");
  EXPECT_EQ(doc["trigger"], "after");
  EXPECT_EQ(doc["time"], "2025-11-25T09:34:40.123Z");
  EXPECT_EQ(doc["size"], 3);
  EXPECT_EQ(doc["call"]["seq"], 12);
  EXPECT_EQ(doc["call"]["collective"], "allreduce");
  EXPECT_EQ(doc["call"]["algorithm"], "ring");
  EXPECT_EQ(doc["call"]["dtype"], "float32");
  EXPECT_EQ(doc["call"]["count"], kBig);
  ASSERT_EQ(doc["ranks"].size(), 3u);
  EXPECT_EQ(doc["ranks"][2]["cause"], "dead");
  EXPECT_EQ(doc["ranks"][2]["host"], "node0");
  EXPECT_EQ(doc["ranks"][2]["pid"], 1002);
  EXPECT_TRUE(doc["ranks"][2]["summary"].is_null());
  EXPECT_EQ(doc["ranks"][0]["cause"], "waiting");
  EXPECT_EQ(doc["ranks"][0]["summary"]["calls"][0]["wait_peer"], 2);
  EXPECT_EQ(doc["text"], d.text);

  test::TempDir dir;
  d.info.round = "u1/../x";  // not a path: unsafe characters are replaced
  const std::string path = detail::writeReport(dir.path() + "/reports", d);
  EXPECT_EQ(path, dir.path() + "/reports/collx-hang-7f3a-g0-u1_.._x.json");
  std::ifstream in(path);
  EXPECT_EQ(nlohmann::json::parse(in)["round"], "u1/../x");
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path() + "/reports")) {
    ++files;
    EXPECT_EQ(entry.path().string(), path);  // no temporary left behind
  }
  EXPECT_EQ(files, 1);
  EXPECT_THROW(detail::writeReport("/proc/collx-cannot-exist", d), IoError);
}

TEST(Diagnose, CauseNames) {
  EXPECT_STREQ(detail::causeName(Cause::kWaiting), "waiting");
  EXPECT_STREQ(detail::causeName(Cause::kMismatch), "mismatch");
  EXPECT_STREQ(detail::causeName(Cause::kNotCalled), "not_called");
  EXPECT_STREQ(detail::causeName(Cause::kBehind), "behind");
  EXPECT_STREQ(detail::causeName(Cause::kDone), "done");
  EXPECT_STREQ(detail::causeName(Cause::kFailed), "failed");
  EXPECT_STREQ(detail::causeName(Cause::kNotResponding), "not_responding");
  EXPECT_STREQ(detail::causeName(Cause::kStopped), "stopped");
  EXPECT_STREQ(detail::causeName(Cause::kDead), "dead");
}

}  // namespace
}  // namespace collx
