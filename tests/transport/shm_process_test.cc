// The shared-memory transport between real processes: CMA refused (the ring-copy fallback),
// jobs that mix shm and tcp, more ranks than cores, a rank killed during a ring copy, and
// arenas that nothing leaves behind: after kill -9 of a rank and of the launcher.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "collx/rendezvous/prefix_store.h"
#include "collx/rendezvous/store.h"
#include "collx/rendezvous/tcp_store.h"
#include "collx/secure/job_secret.h"
#include "collx/transport/mesh.h"
#include "collx/transport/shm_segments.h"
#include "util/sanitizer.h"
#include "util/test_util.h"
#include "util/worker_job.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
using test::Process;

// Ranks over a TCP store, each with its own environment (COLLX_TIMEOUT 60s unless given).
class Ranks : public test::WorkerJob {
 public:
  Ranks(int size, const std::vector<std::string>& args,
        const std::function<std::map<std::string, std::string>(int)>& envFor)
      : WorkerJob(
            size, "shm-process-test", [&](int) { return args; },
            [&](int r) {
              auto env = envFor(r);
              env.emplace("COLLX_TIMEOUT", "60s");
              return env;
            }) {}
  // Waits for every rank and expects exit code 0.
  void expectSuccess() {
    for (int r = 0; r < size(); ++r) {
      ASSERT_TRUE(rank(r).wait(120s)) << "rank " << r << " did not finish";
      EXPECT_EQ(rank(r).exitCode(), 0) << "rank " << r << ": " << rank(r).err();
    }
  }
};

bool says(Process& p, const std::string& text) { return p.out().find(text) != std::string::npos; }

TEST(ShmProcesses, ARankWhoseCmaIsRefusedReceivesThroughTheRing) {
  COLLX_SKIP_UNDER_TSAN("a process test that only repeats the thread suites' paths at length");
  // Rank 1 runs under a seccomp filter that refuses process_vm_readv (as container
  // runtimes do): it cannot read its peers' memory and asks for ring copies; the others
  // still read its memory directly. The shm broadcast reads no rank's buffer directly, even
  // asked to always: every rank agreed at connect that one cannot.
  Ranks job(3, {"sweep", "70001"}, [](int r) {
    std::map<std::string, std::string> env = {{"COLLX_TRANSPORT", "shm"},
                                              {"COLLX_SHM_DIRECT", "always"},
                                              {"COLLX_LOG_LEVEL", "warn,collx.shm=debug"}};
    if (r == 1) env["TEST_WORKER_DENY_CMA"] = "1";
    return env;
  });
  job.expectSuccess();
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(job.rank(r).err().find("direct reads: never"), std::string::npos)
        << job.rank(r).err();
  }
  EXPECT_TRUE(
      says(job.rank(1), "peer 0: shm pid " + std::to_string(job.rank(0).pid()) + ", ring copy"))
      << job.rank(1).out();
  EXPECT_TRUE(
      says(job.rank(1), "peer 2: shm pid " + std::to_string(job.rank(2).pid()) + ", ring copy"))
      << job.rank(1).out();
  EXPECT_TRUE(says(job.rank(0), "peer 1: shm pid " + std::to_string(job.rank(1).pid()) + ", cma"))
      << job.rank(0).out();
  EXPECT_TRUE(says(job.rank(0), "peer 2: shm pid " + std::to_string(job.rank(2).pid()) + ", cma"))
      << job.rank(0).out();
}

// Broadcasts, allgathers and allreduces (the sweep's largest: 280 KB) read other ranks'
// buffers directly.
TEST(ShmProcesses, LargeCollectivesReadOtherRanksBuffersWithProcessVmReadv) {
  Ranks job(3, {"sweep", "70001"}, [](int) {
    return std::map<std::string, std::string>{{"COLLX_TRANSPORT", "shm"},
                                              {"COLLX_SHM_DIRECT", "always"},
                                              {"COLLX_LOG_LEVEL", "warn,collx.shm=debug"}};
  });
  job.expectSuccess();
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(job.rank(r).err().find("direct reads: always"), std::string::npos)
        << job.rank(r).err();
  }
}

// auto: rank 0 (member 0) alternates for the first 6 allreduces of 1.2 MB, then says at
// debug level which way it takes and why; the other rank decides nothing. (shm named: the
// table gives that size at P = 2 to ring_chunked.)
TEST(ShmProcesses, AutoSaysWhichWayItTakesForASizeAndWhy) {
  Ranks job(2, {"loop", "300000", "10"}, [](int) {
    return std::map<std::string, std::string>{{"COLLX_TRANSPORT", "shm"},
                                              {"COLLX_ALLREDUCE_ALGO", "shm"},
                                              {"COLLX_SHM_DIRECT", "auto"},
                                              {"COLLX_LOG_LEVEL", "warn,collx.shm=debug"}};
  });
  job.expectSuccess();
  const std::string said = "shm allreduce of 2^20 to 2^21 bytes: ";
  EXPECT_NE(job.rank(0).err().find(said), std::string::npos) << job.rank(0).err();
  EXPECT_NE(job.rank(0).err().find("(the median of the last 3 calls: "), std::string::npos)
      << job.rank(0).err();
  EXPECT_EQ(job.rank(1).err().find(said), std::string::npos) << job.rank(1).err();
}

TEST(ShmProcesses, CmaTurnedOffCopiesEverythingThroughTheRing) {
  COLLX_SKIP_UNDER_TSAN("a process test that only repeats the thread suites' paths at length");
  Ranks job(3, {"sweep", "70001"}, [](int) {
    return std::map<std::string, std::string>{
        {"COLLX_TRANSPORT", "shm"}, {"COLLX_SHM_CMA", "0"}, {"COLLX_SHM_RING_BYTES", "65536"}};
  });
  job.expectSuccess();
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(says(job.rank(r), "peer " + std::to_string((r + 1) % 3) + ": shm pid " +
                                      std::to_string(job.rank((r + 1) % 3).pid()) + ", ring copy"))
        << job.rank(r).out();
  }
}

TEST(ShmProcesses, TwoSimulatedHostsUseShmWithinAndTcpAcross) {
  COLLX_SKIP_UNDER_TSAN("a process test that only repeats the thread suites' paths at length");
  Ranks job(4, {"sweep", "70001"}, [](int r) {
    return std::map<std::string, std::string>{{"COLLX_HOST_ID", r < 2 ? "host-a" : "host-b"}};
  });
  job.expectSuccess();
  for (int r = 0; r < 4; ++r) {
    for (int p = 0; p < 4; ++p) {
      if (p == r) continue;
      const std::string expected =
          "peer " + std::to_string(p) + ": " + ((p < 2) == (r < 2) ? "shm pid" : "tcp ");
      EXPECT_TRUE(says(job.rank(r), expected)) << "rank " << r << ": " << job.rank(r).out();
    }
  }
}

TEST(ShmProcesses, EightRanksOnTwoCoresProgress) {
  COLLX_SKIP_UNDER_TSAN("a process test that only repeats the thread suites' paths at length");
  // More ranks than cores: waiting ranks yield and sleep (their doorbells wake them), so the
  // rank being waited for gets a core.
  auto start = std::chrono::steady_clock::now();
  test::RunResult r = test::run({test::binDir() + "/collx-run", "-n", "8", "--timeout", "120s",
                                 "--", test::binDir() + "/collx-test-worker", "sweep", "70001"},
                                {{"COLLX_TRANSPORT", "shm"},
                                 {"COLLX_JOB_ID", ""},
                                 {"COLLX_STORE", ""},
                                 {"COLLX_TIMEOUT", "60s"}},
                                180s);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 90s);
}

// Three ranks looping with `env`: rank 1 is killed, and ranks 0 and 2 end with an IoError
// that names it, within 15 s.
void expectKilledRankNamed(const std::map<std::string, std::string>& env) {
  Ranks job(3, {"loop", "70000", "0"}, [&](int) { return env; });
  ASSERT_TRUE(job.allReady());
  auto killed = std::chrono::steady_clock::now();
  job.rank(1).signal(SIGKILL);
  for (int r : {0, 2}) {
    ASSERT_TRUE(job.rank(r).wait(20s)) << "rank " << r << " did not notice";
    EXPECT_EQ(job.rank(r).exitCode(), 10) << "rank " << r << ": " << job.rank(r).err();
    EXPECT_NE(job.rank(r).err().find("(peer rank 1)"), std::string::npos) << job.rank(r).err();
    EXPECT_NE(job.rank(r).err().find("rank 1 died or was killed"), std::string::npos)
        << job.rank(r).err();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 15s);
}

TEST(ShmProcesses, ARankKilledDuringARingCopyIsNamedByTheOthers) {
  expectKilledRankNamed(
      {{"COLLX_TRANSPORT", "shm"}, {"COLLX_SHM_CMA", "0"}, {"COLLX_SHM_RING_BYTES", "16384"}});
}

TEST(ShmProcesses, ARankKilledWhileOthersReadItsBufferDirectlyIsNamedByTheOthers) {
  // 280 KB broadcasts read out of the root's buffer, from each rank in turn, allgathers of
  // 280 KB a rank read out of every rank's buffer, and allreduces of 280 KB that read every
  // rank's input and output: rank 1 dies as a rank whose buffer the others read, or as a
  // reader they wait for.
  expectKilledRankNamed(
      {{"COLLX_TRANSPORT", "shm"}, {"COLLX_SHM_DIRECT", "always"}, {"TEST_WORKER_DIRECT", "1"}});
}

// A rank killed while it reads another's buffer (process_vm_readv) dies holding that
// rank's count of readers (`pulling`, arena.h), which nothing takes back: the owner, failing,
// must not wait out its readers' grace (1 s) for it. Rank 1 spends most of its time reading
// 8 MiB halves of rank 0's 16 MiB allreduces; killed three times, at 0.3-0.5 s, rank 0 fails
// naming it, and never waits for a reader that is dead. (Ring allreduces over the pairs,
// whose large messages the receiver copies out of the sender's buffer.)
TEST(ShmProcesses, ARankKilledWhileReadingAnothersBufferDoesNotHoldItsFailure) {
  COLLX_SKIP_UNDER_TSAN("a process test of the real path: the thread suites cover the rest");
  for (int round = 0; round < 3; ++round) {
    Ranks job(2, {"loop", "4194304", "0"}, [](int) {
      return std::map<std::string, std::string>{{"COLLX_TRANSPORT", "shm"},
                                                {"COLLX_ALLREDUCE_ALGO", "ring"}};
    });
    ASSERT_TRUE(job.allReady());
    std::this_thread::sleep_for(std::chrono::milliseconds(300 + 100 * round));
    const auto killed = std::chrono::steady_clock::now();
    job.rank(1).signal(SIGKILL);
    ASSERT_TRUE(job.rank(0).wait(20s)) << "rank 0 did not notice";
    const auto took = std::chrono::steady_clock::now() - killed;
    EXPECT_EQ(job.rank(0).exitCode(), 10) << job.rank(0).err();
    EXPECT_NE(job.rank(0).err().find("rank 1 died or was killed"), std::string::npos)
        << job.rank(0).err();
    EXPECT_EQ(job.rank(0).err().find("is still copying from this rank's buffers"),
              std::string::npos)
        << "round " << round << ": " << job.rank(0).err();
    EXPECT_LT(took, 900ms) << "round " << round << ": " << job.rank(0).err();
  }
}

// ---- nothing left behind ------------------------------------------------------------------

std::vector<std::string> segments() {
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(transport::kShmDirectory)) {
    while (dirent* e = ::readdir(dir)) {
      if (std::string(e->d_name).rfind(transport::kShmPrefix, 0) == 0) names.push_back(e->d_name);
    }
    ::closedir(dir);
  }
  return names;
}

bool hasSegmentOf(pid_t pid) {
  for (const std::string& name : segments()) {
    if (name.find("-" + std::to_string(pid) + "-r") != std::string::npos) return true;
  }
  return false;
}

bool waitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// A job of two ranks whose rank 1 is this test: it publishes a real arena but never
// connects, so rank 0 (under collx-run, node 0 of 2) holds its named arena open while it
// waits in the shared-memory handshake. Returns rank 0's pid.
class HalfJob {
 public:
  // The job's secret (a job on two nodes needs one), which this test's store client proves.
  static constexpr const char* kSecret = "the half job's secret, for this test";
  explicit HalfJob(const std::string& arena) {
    // collx-run binds it itself (test::serverPort: not a released port-0 port).
    const std::string port = std::to_string(test::serverPort());
    job_ = "shm-cleanup-" + std::to_string(::getpid()) + "-" + arena;
    launcher_ = std::make_unique<Process>(
        std::vector<std::string>{test::binDir() + "/collx-run", "-n", "1", "--nnodes", "2",
                                 "--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port",
                                 port, "--job-id", job_, "--",
                                 test::binDir() + "/collx-test-worker", "count", "10"},
        std::map<std::string, std::string>{{"COLLX_SHM_ARENA", arena},
                                           {"COLLX_TIMEOUT", "60s"},
                                           {"COLLX_STORE", ""},
                                           {"COLLX_JOB_ID", ""},
                                           {"COLLX_JOB_SECRET", kSecret}});
    rendezvous::StoreOptions options;
    options.timeout = 30s;
    options.secret = secure::JobSecret::fromText(kSecret, "test");
    store_ = std::make_shared<rendezvous::PrefixStore>(
        "collx/" + job_ + "/0", rendezvous::openStore("tcp://127.0.0.1:" + port, options), options);
    // Rank 0's join record names its pid.
    std::string record = rendezvous::toString(store_->get("rank/0"));
    rank0_ = std::stoi(record.substr(record.find("pid=") + 4));
    store_->set("rank/1",
                "host=fake\nboot=fake\npid=" + std::to_string(::getpid()) + "\nlocal_rank=1\n");
    transport::MeshOptions mesh;
    mesh.rank = 1;
    mesh.size = 2;
    mesh.jobId = job_;
    mesh.transport = "shm";
    fake_ = std::make_unique<transport::Mesh>(mesh);
    store_->set("transport/1", fake_->address());
  }
  Process& launcher() { return *launcher_; }
  pid_t rank0() const { return rank0_; }

 private:
  std::string job_;
  std::unique_ptr<Process> launcher_;
  std::shared_ptr<rendezvous::Store> store_;
  std::unique_ptr<transport::Mesh> fake_;
  pid_t rank0_ = 0;
};

TEST(ShmCleanup, CollxRunRemovesTheArenaOfARankKilledWithKill9) {
  HalfJob job("posix");
  ASSERT_TRUE(waitFor([&] { return hasSegmentOf(job.rank0()); }, 20s))
      << "rank 0 (pid " << job.rank0() << ") never created its arena: " << job.launcher().err();
  ::kill(job.rank0(), SIGKILL);
  // collx-run removes it once the rank exited (then, as node 0, it keeps the store up for
  // node 1, which never comes: the test ends it).
  EXPECT_TRUE(waitFor([&] { return !hasSegmentOf(job.rank0()); }, 10s))
      << "collx-run left rank 0's arena in /dev/shm: " << job.launcher().err();
  job.launcher().wait(1ms);
  EXPECT_NE(job.launcher().err().find("was killed by signal 9"), std::string::npos)
      << job.launcher().err();
}

TEST(ShmCleanup, TheNextCollxRunRemovesTheArenasOfAKilledLauncher) {
  HalfJob job("posix");
  ASSERT_TRUE(waitFor([&] { return hasSegmentOf(job.rank0()); }, 20s))
      << "rank 0 (pid " << job.rank0() << ") never created its arena";
  job.launcher().signal(SIGKILL);  // its ranks die with it (and cannot clean up)
  ASSERT_TRUE(job.launcher().wait(5s));
  ASSERT_TRUE(waitFor([&] { return !test::processAlive(job.rank0()); }, 10s));
  test::RunResult next = test::run({test::binDir() + "/collx-run", "-n", "1", "--", "/bin/true"},
                                   {{"COLLX_JOB_ID", ""}, {"COLLX_STORE", ""}}, 30s);
  EXPECT_EQ(next.code, 0) << next.err;
  EXPECT_FALSE(hasSegmentOf(job.rank0())) << "the next collx-run left the dead rank's arena";
}

TEST(ShmCleanup, MemfdArenasLeaveNothingEvenWhenEverythingIsKilled) {
  HalfJob job("memfd");  // the default
  // Rank 0 waits in the handshake with its arena open; /dev/shm has nothing of it.
  ASSERT_TRUE(waitFor(
      [&] {
        std::ifstream maps("/proc/" + std::to_string(job.rank0()) + "/maps");
        std::string text((std::istreambuf_iterator<char>(maps)), {});
        return text.find("memfd:collx-shm") != std::string::npos;
      },
      20s))
      << "rank 0 never mapped its arena";
  EXPECT_FALSE(hasSegmentOf(job.rank0()));
  job.launcher().signal(SIGKILL);
  ASSERT_TRUE(job.launcher().wait(5s));
  ASSERT_TRUE(waitFor([&] { return !test::processAlive(job.rank0()); }, 10s));
  EXPECT_FALSE(hasSegmentOf(job.rank0()));
}

}  // namespace
}  // namespace collx
