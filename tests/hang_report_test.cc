// The hang report's parts that need no round over the store: the process probe on real
// processes, and the start time in the join record.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <thread>

#include "process_probe.h"
#include "util/test_util.h"
#include "util/world.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
using detail::ProcessState;

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

}  // namespace
}  // namespace collx
