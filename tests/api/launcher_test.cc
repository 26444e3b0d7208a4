// collx-run as users run it: exit codes, failing and hanging ranks, signals, output tagging,
// multi-node on one host, and nothing left behind (processes, ports, files).
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "collx/rendezvous/tcp_store.h"
#include "util/sanitizer.h"
#include "util/test_util.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
using test::Process;
using test::RunResult;
using test::TempDir;

std::string launcher() { return test::binDir() + "/collx-run"; }

// (The caller's COLLX_* variables never reach a test: util/hermetic.h.)
std::map<std::string, std::string> cleanEnv() { return {{"COLLX_TIMEOUT", "20s"}}; }

RunResult runLauncher(std::vector<std::string> args, std::chrono::milliseconds timeout = 60s) {
  args.insert(args.begin(), launcher());
  return test::run(args, cleanEnv(), timeout);
}

// The CPUs this process may run on (and so collx-run, which binds among them).
unsigned allowedCpus() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return std::thread::hardware_concurrency();
  return static_cast<unsigned>(CPU_COUNT(&set));
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

std::vector<pid_t> readPids(const std::string& dir, const std::string& prefix) {
  std::vector<pid_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind(prefix, 0) != 0) continue;
    std::ifstream in(entry.path());
    pid_t pid = 0;
    if (in >> pid) pids.push_back(pid);
  }
  return pids;
}

// Every listed process is gone (reaped by someone or killed) within a moment.
void expectGone(const std::vector<pid_t>& pids) {
  auto deadline = std::chrono::steady_clock::now() + 3s;
  for (pid_t pid : pids) {
    while (test::processAlive(pid) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_FALSE(test::processAlive(pid)) << "pid " << pid << " outlived the job";
  }
}

TEST(LauncherTest, AnyProgramGetsItsRank) {
  RunResult r = runLauncher({"-n", "4", "--", "sh", "-c", "echo $COLLX_RANK"});
  EXPECT_EQ(r.code, 0) << r.err;
  auto out = lines(r.out);
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out, (std::vector<std::string>{"0", "1", "2", "3"}));
}

TEST(LauncherTest, EnvironmentIsSetConsistently) {
  RunResult r =
      runLauncher({"-n", "3", "-t", "sh", "-c",
                   "echo $COLLX_WORLD_SIZE $COLLX_LOCAL_RANK $COLLX_STORE $COLLX_JOB_ID"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::set<std::string> stores, jobs;
  std::regex line(R"(\[(\d)\] 3 (\d) (tcp://127\.0\.0\.1:\d+) (run-[0-9a-f]+))");
  int matched = 0;
  for (const std::string& l : lines(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, line)) << l;
    EXPECT_EQ(m[1], m[2]);  // rank == local rank on one node
    stores.insert(m[3]);
    jobs.insert(m[4]);
    ++matched;
  }
  EXPECT_EQ(matched, 3);
  EXPECT_EQ(stores.size(), 1u);
  EXPECT_EQ(jobs.size(), 1u);
  // The store was collx-run's own and is gone with it.
  int port = std::stoi(stores.begin()->substr(stores.begin()->rfind(':') + 1));
  EXPECT_FALSE(test::portOpen(port));
}

// What torchrun sets, beside collx's own variables: an unchanged torch script's env://
// rendezvous meets at MASTER_ADDR:MASTER_PORT, a port of its own (not collx's store).
TEST(LauncherTest, SetsTorchrunsVariables) {
  const std::string show =
      "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR "
      "$MASTER_PORT $COLLX_RANK $COLLX_STORE";
  RunResult r = runLauncher({"-n", "3", "--", "sh", "-c", show});
  ASSERT_EQ(r.code, 0) << r.err;
  std::regex line(R"((\d) 3 (\d) 3 0 127\.0\.0\.1 (\d+) (\d) tcp://127\.0\.0\.1:(\d+))");
  std::set<std::string> ranks, masterPorts;
  for (const std::string& l : lines(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, line)) << l;
    EXPECT_EQ(m[1], m[2]);  // RANK == LOCAL_RANK on one node
    EXPECT_EQ(m[1], m[4]);  // RANK == COLLX_RANK
    EXPECT_NE(m[3], m[5]);  // torch's store is not collx's
    ranks.insert(m[1]);
    masterPorts.insert(m[3]);
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1", "2"})) << r.out;
  EXPECT_EQ(masterPorts.size(), 1u) << r.out;
  // collx-run binds it itself: a port no bind to port 0 gets (test::serverPort says why).
  const std::string port = std::to_string(test::serverPort());
  RunResult given = runLauncher({"-n", "2", "--torch-port", port, "--", "sh", "-c", show});
  ASSERT_EQ(given.code, 0) << given.err;
  for (const std::string& l : lines(given.out)) {
    EXPECT_NE(l.find(" 127.0.0.1 " + port + " "), std::string::npos) << l;
  }
}

// With several nodes, node 0 picks MASTER_ADDR (its address toward the store, here loopback)
// and MASTER_PORT and shares them: every node's ranks get the same, and their own GROUP_RANK.
TEST(LauncherTest, NodesAgreeOnTorchsMaster) {
  rendezvous::TcpStoreServer store;  // the store both launchers use (--store: neither starts one)
  const std::string port = std::to_string(store.port());
  const std::string show =
      "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT";
  std::vector<std::unique_ptr<Process>> nodes;
  for (int node = 0; node < 2; ++node) {
    nodes.push_back(std::make_unique<Process>(
        std::vector<std::string>{launcher(), "-n", "2", "--nnodes", "2", "--node-rank",
                                 std::to_string(node), "--store", store.url(), "--job-id",
                                 "torch-master-test", "--insecure", "--", "sh", "-c", show},
        cleanEnv()));
  }
  std::regex line(R"((\d) 4 (\d) 2 (\d) 127\.0\.0\.1 (\d+))");
  std::set<std::string> ranks, masterPorts;
  for (int node = 0; node < 2; ++node) {
    ASSERT_TRUE(nodes[node]->wait(30s));
    ASSERT_EQ(nodes[node]->exitCode(), 0) << nodes[node]->err();
    for (const std::string& l : lines(nodes[node]->out())) {
      std::smatch m;
      ASSERT_TRUE(std::regex_match(l, m, line)) << l;
      EXPECT_EQ(std::stoi(m[1]), 2 * node + std::stoi(m[2])) << l;
      EXPECT_EQ(m[3], std::to_string(node)) << l;
      ranks.insert(m[1]);
      masterPorts.insert(m[4]);
    }
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1", "2", "3"}));
  EXPECT_EQ(masterPorts.size(), 1u);
  EXPECT_EQ(masterPorts.count(port), 0u);  // not the store's port
}

TEST(LauncherTest, TagsEveryLineOfStdoutAndStderr) {
  RunResult r = runLauncher(
      {"-n", "2", "--tag-output", "--", "sh", "-c", "printf 'a\\nb\\npartial'; echo oops >&2"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto out = lines(r.out);
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out, (std::vector<std::string>{"[0] a", "[0] b", "[0] partial", "[1] a", "[1] b",
                                           "[1] partial"}));
  auto err = lines(r.err);
  std::sort(err.begin(), err.end());
  EXPECT_EQ(err, (std::vector<std::string>{"[0] oops", "[1] oops"}));
}

// --bind core gives local rank i the i-th CPU collx-run may use; none leaves the mask whole;
// more ranks than CPUs cannot be bound (auto then leaves them unbound).
TEST(LauncherTest, BindPutsEachRankOnItsOwnCpu) {
  const unsigned cpus = allowedCpus();
  if (cpus < 2) GTEST_SKIP() << "binding two ranks needs two CPUs; this machine has " << cpus;
  const std::string show =
      "grep Cpus_allowed_list /proc/self/status | sed \"s/^/$COLLX_LOCAL_RANK /\"";
  RunResult bound = runLauncher({"-n", "2", "--bind", "core", "--", "sh", "-c", show});
  ASSERT_EQ(bound.code, 0) << bound.err;
  auto out = lines(bound.out);
  std::sort(out.begin(), out.end());
  ASSERT_EQ(out.size(), 2u) << bound.out;
  // Each line: "<local rank> Cpus_allowed_list:\t<one cpu>", the two CPUs different.
  std::string cpu0 = out[0].substr(out[0].find('\t') + 1),
              cpu1 = out[1].substr(out[1].find('\t') + 1);
  EXPECT_EQ(cpu0.find_first_of(",-"), std::string::npos) << out[0];
  EXPECT_EQ(cpu1.find_first_of(",-"), std::string::npos) << out[1];
  EXPECT_NE(cpu0, cpu1);
  RunResult free = runLauncher({"-n", "2", "--bind", "none", "--", "sh", "-c", show});
  ASSERT_EQ(free.code, 0) << free.err;
  for (const std::string& line : lines(free.out)) {
    EXPECT_NE(line.find_first_of(",-"), std::string::npos) << "not bound: " << line;
  }
  // auto leaves a lone rank unbound (every such job would take the first CPU).
  RunResult alone = runLauncher({"-n", "1", "--", "sh", "-c", show});
  ASSERT_EQ(alone.code, 0) << alone.err;
  for (const std::string& line : lines(alone.out)) {
    EXPECT_NE(line.find_first_of(",-"), std::string::npos) << "a lone rank bound: " << line;
  }
  RunResult tooMany = runLauncher({"-n", std::to_string(cpus + 1), "--bind", "core", "--", "true"});
  EXPECT_EQ(tooMany.code, 2);
  EXPECT_NE(tooMany.err.find("CPUs to bind them to"), std::string::npos) << tooMany.err;
}

// More ranks than CPUs: spread (and auto, with one node over shared memory) binds local
// rank i to CPU i mod N, so rank N shares rank 0's CPU and the CPUs carry ranks evenly;
// auto over tcp leaves them unbound.
TEST(LauncherTest, SpreadSharesTheCpusEvenlyAmongMoreRanks) {
  const unsigned cpus = allowedCpus();
  if (cpus < 2) GTEST_SKIP() << "spreading ranks needs two CPUs; this machine has " << cpus;
  const std::string show =
      "grep Cpus_allowed_list /proc/self/status | sed \"s/^/$COLLX_LOCAL_RANK /\"";
  const std::string n = std::to_string(cpus + 1);
  auto env = cleanEnv();
  for (const char* mode : {"spread", "auto"}) {
    RunResult r = test::run({launcher(), "-n", n, "--bind", mode, "--", "sh", "-c", show}, env);
    ASSERT_EQ(r.code, 0) << mode << ": " << r.err;
    std::map<int, std::string> cpuOf;  // local rank -> its one CPU
    for (const std::string& line : lines(r.out)) {
      const std::string cpu = line.substr(line.find('\t') + 1);
      EXPECT_EQ(cpu.find_first_of(",-"), std::string::npos) << mode << " did not bind: " << line;
      cpuOf[std::stoi(line)] = cpu;
    }
    ASSERT_EQ(cpuOf.size(), cpus + 1) << r.out;
    std::set<std::string> distinct;
    for (unsigned i = 0; i < cpus; ++i) distinct.insert(cpuOf[static_cast<int>(i)]);
    EXPECT_EQ(distinct.size(), cpus) << mode << ": the first " << cpus << " share a CPU\n" << r.out;
    EXPECT_EQ(cpuOf[static_cast<int>(cpus)], cpuOf[0]) << mode << "\n" << r.out;
  }
  env["COLLX_TRANSPORT"] = "tcp";
  RunResult tcp = test::run({launcher(), "-n", n, "--", "sh", "-c", show}, env);
  ASSERT_EQ(tcp.code, 0) << tcp.err;
  for (const std::string& line : lines(tcp.out)) {
    EXPECT_NE(line.find_first_of(",-"), std::string::npos) << "bound over tcp: " << line;
  }
}

// A rank's join record carries the CPUs it may run on; ranks that outnumber the CPUs they
// may run on together know it (their waits then yield at once): here 2 ranks that taskset
// keeps on one CPU, against 2 ranks with a CPU each (the count of online CPUs, 2 or more,
// would say they do not).
TEST(LauncherTest, RanksKnowWhetherTheyOutnumberTheirCpus) {
  if (allowedCpus() < 2) GTEST_SKIP() << "needs two CPUs; this process may use " << allowedCpus();
  cpu_set_t set;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  int first = 0;
  while (!CPU_ISSET(first, &set)) ++first;
  const std::string info = test::binDir() + "/collx-info";
  auto count = [](const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
      ++n;
    }
    return n;
  };
  RunResult own = runLauncher({"-n", "2", "--bind", "core", "--", info, "--rendezvous"});
  ASSERT_EQ(own.code, 0) << own.err;
  EXPECT_EQ(count(own.out, "ranks do not outnumber the CPUs"), 2u) << own.out;
  EXPECT_EQ(count(own.out, "(cpus " + std::to_string(first) + ")"), 2u) << own.out;
  RunResult one =
      runLauncher({"-n", "2", "--bind", "none", "--", "sh", "-c",
                   "exec taskset -c " + std::to_string(first) + " " + info + " --rendezvous"});
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(count(one.out, "ranks outnumber the CPUs"), 2u) << one.out;
  EXPECT_EQ(count(one.out, "(cpus " + std::to_string(first) + ")"), 4u) << one.out;
}

TEST(LauncherTest, RanksRendezvousThroughTheStore) {
  RunResult r = runLauncher({"-n", "4", "--", test::binDir() + "/collx-info", "--rendezvous"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.out.find("rank " + std::to_string(rank) + " of 4"), std::string::npos) << r.out;
  }
}

// Every algorithm, dtype, op and count in real processes through collx-run.
TEST(LauncherTest, CollectivesSweepInProcesses) {
  COLLX_SKIP_UNDER_TSAN("a process test that only repeats the thread suites' paths at length");
  for (int P : {2, 3, 4, 5}) {
    RunResult r = runLauncher({"-n", std::to_string(P), "--timeout", "120s", "--",
                               test::binDir() + "/collx-test-worker", "sweep", "70001"},
                              180s);
    EXPECT_EQ(r.code, 0) << "P=" << P << "\n" << r.err;
    EXPECT_EQ(lines(r.out).size(), static_cast<std::size_t>(P)) << r.out;
  }
}

#ifdef COLLX_VERBS_EMU_PATH
// The same over RDMA verbs, on the userspace verbs device: every rank's peers are ibverbs.
TEST(LauncherTest, CollectivesSweepInProcessesOverIbverbs) {
  COLLX_SKIP_UNDER_SANITIZERS(
      "the sweep over the emulated verbs device repeats at length what the ibverbs suites "
      "run under it (the sweep over shm and tcp: CollectivesSweepInProcesses)");
  auto env = cleanEnv();
  env["COLLX_TRANSPORT"] = "ibverbs";
  env["COLLX_IBVERBS_LIBRARY"] = COLLX_VERBS_EMU_PATH;
  for (int P : {2, 3, 8}) {
    RunResult r = test::run({launcher(), "-n", std::to_string(P), "--timeout", "120s", "--",
                             test::binDir() + "/collx-test-worker", "sweep", "70001"},
                            env, 180s);
    EXPECT_EQ(r.code, 0) << "P=" << P << "\n" << r.err;
    EXPECT_EQ(lines(r.out).size(), static_cast<std::size_t>(P)) << r.out;
  }
}
#endif

TEST(LauncherTest, AlgorithmFromTheEnvironmentIsUsedAndUnknownOnesRefused) {
  auto env = cleanEnv();
  env["COLLX_ALLREDUCE_ALGO"] = "halving_doubling";
  env["COLLX_LOG_LEVEL"] = "warn,collx.algo=debug";
  RunResult r = test::run(
      {launcher(), "-n", "2", "--", test::binDir() + "/collx-test-worker", "count", "1000"}, env,
      60s);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("halving_doubling (from COLLX_ALLREDUCE_ALGO)"), std::string::npos) << r.err;
  env["COLLX_ALLREDUCE_ALGO"] = "bogus";
  RunResult bad = test::run(
      {launcher(), "-n", "2", "--", test::binDir() + "/collx-test-worker", "count", "1000"}, env,
      60s);
  EXPECT_EQ(bad.code, 14) << bad.err;
  EXPECT_NE(bad.err.find("COLLX_ALLREDUCE_ALGO='bogus': expected one of ring, ring_chunked, "
                         "halving_doubling"),
            std::string::npos)
      << bad.err;
}

// The launcher and every rank warn of a COLLX_* variable that is no setting, and of none
// that is, whichever layer declares it (the algorithms', the PyTorch backend's).
TEST(LauncherTest, WarnsOfUnknownVariablesOnly) {
  auto env = cleanEnv();
  env["COLLX_SPIN_US"] = "0";
  env["COLLX_CHUNK_BYTES"] = "64K";
  env["COLLX_ALLREDUCE_ALGO"] = "ring";
  env["COLLX_TORCH_EAGER_BYTES"] = "0";
  env["COLLX_SHM_DIRCT"] = "always";
  RunResult r = test::run(
      {launcher(), "-n", "2", "--", test::binDir() + "/collx-test-worker", "count", "1000"}, env,
      60s);
  EXPECT_EQ(r.code, 0) << r.err;
  const std::string warning =
      "environment variable COLLX_SHM_DIRCT (did you mean COLLX_SHM_DIRECT?) is not a collx "
      "variable; ignored";
  std::size_t warnings = 0;
  for (std::size_t at = r.err.find(warning); at != std::string::npos;
       at = r.err.find(warning, at + 1)) {
    ++warnings;
  }
  EXPECT_EQ(warnings, 3u) << "collx-run and both ranks, once each:\n" << r.err;
  for (const char* declared :
       {"COLLX_SPIN_US", "COLLX_CHUNK_BYTES", "COLLX_ALLREDUCE_ALGO", "COLLX_TORCH_EAGER_BYTES"}) {
    EXPECT_EQ(r.err.find(std::string("variable ") + declared), std::string::npos) << r.err;
  }
}

// collx-run makes a secret for a job on one node and gives it to the ranks in their
// environment only: not on theirs or collx-run's command line, and collx ranks do not warn
// that the job is open.
TEST(LauncherTest, AJobOnOneNodeGetsASecretThroughTheEnvironmentOnly) {
  const std::string check =
      "s=$COLLX_JOB_SECRET; "
      "for p in $$ $PPID; do case \"$(tr '\\0' ' ' < /proc/$p/cmdline)\" in "
      "*\"$s\"*) echo LEAK;; esac; done; echo ${#s}";
  RunResult r = runLauncher({"-n", "2", "--", "sh", "-c", check});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(lines(r.out), (std::vector<std::string>{"64", "64"})) << r.out;
  RunResult job =
      runLauncher({"-n", "2", "--", test::binDir() + "/collx-test-worker", "count", "100"});
  EXPECT_EQ(job.code, 0) << job.err;
  EXPECT_EQ(job.err.find("unauthenticated"), std::string::npos) << job.err;
}

TEST(LauncherTest, SecretFileInsecureAndSeveralNodes) {
  TempDir dir;
  const std::string file = dir.path() + "/secret";
  std::ofstream(file) << "a secret shared by every node\n";
  ::chmod(file.c_str(), 0644);
  RunResult open = runLauncher({"-n", "1", "--secret-file", file, "--", "true"});
  EXPECT_EQ(open.code, 2) << open.err;
  EXPECT_NE(open.err.find("chmod 600 " + file), std::string::npos) << open.err;
  EXPECT_EQ(open.err.find("a secret shared"), std::string::npos) << open.err;
  ::chmod(file.c_str(), 0600);
  // The ranks get the file's path, never the secret.
  RunResult byFile = runLauncher({"-n", "2", "--secret-file", file, "--", "sh", "-c",
                                  "echo \"$COLLX_JOB_SECRET_FILE [$COLLX_JOB_SECRET]\""});
  EXPECT_EQ(byFile.code, 0) << byFile.err;
  EXPECT_EQ(lines(byFile.out), (std::vector<std::string>{file + " []", file + " []"}));
  // Several nodes: a secret, or --insecure.
  RunResult nodes =
      runLauncher({"-n", "1", "--nnodes", "2", "--master-addr", "127.0.0.1", "--", "true"});
  EXPECT_EQ(nodes.code, 2) << nodes.err;
  EXPECT_NE(nodes.err.find("--secret-file"), std::string::npos) << nodes.err;
  EXPECT_NE(nodes.err.find("--insecure"), std::string::npos) << nodes.err;
  // --insecure: no secret, and each collx rank says once that the job is open.
  RunResult insecure = runLauncher(
      {"-n", "2", "--insecure", "--", "sh", "-c", "echo \"[$COLLX_JOB_SECRET] $COLLX_INSECURE\""});
  EXPECT_EQ(insecure.code, 0) << insecure.err;
  EXPECT_EQ(lines(insecure.out), (std::vector<std::string>{"[] 1", "[] 1"}));
  RunResult job = runLauncher(
      {"-n", "2", "--insecure", "--", test::binDir() + "/collx-test-worker", "count", "100"});
  EXPECT_EQ(job.code, 0) << job.err;
  std::size_t warnings = 0;
  for (std::size_t at = job.err.find("runs without a secret (--insecure)"); at != std::string::npos;
       at = job.err.find("runs without a secret", at + 1)) {
    ++warnings;
  }
  EXPECT_EQ(warnings, 2u) << job.err;
  RunResult both = runLauncher({"-n", "1", "--insecure", "--secret-file", file, "--", "true"});
  EXPECT_EQ(both.code, 2) << both.err;
}

TEST(LauncherTest, LogLinesCarryTheRankAndHonourPerLoggerLevels) {
  auto env = cleanEnv();
  env["COLLX_LOG_LEVEL"] = "warn,collx.rdzv=debug";
  RunResult r = test::run(
      {launcher(), "-n", "2", "--", test::binDir() + "/collx-info", "--rendezvous"}, env, 60s);
  ASSERT_EQ(r.code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(std::regex_search(
        r.err,
        std::regex("\\[rank " + std::to_string(rank) + "\\] \\[collx\\.rdzv\\] \\[debug\\] rank " +
                   std::to_string(rank) + ": joined job run-[0-9a-f]+ generation 0")))
        << r.err;
  }
  env["COLLX_LOG_LEVEL"] = "warn";
  RunResult quiet = test::run(
      {launcher(), "-n", "2", "--", test::binDir() + "/collx-info", "--rendezvous"}, env, 60s);
  ASSERT_EQ(quiet.code, 0) << quiet.err;
  EXPECT_EQ(quiet.err.find("[debug]"), std::string::npos) << quiet.err;
}

TEST(LauncherTest, FileStoreJobDirectoryIsRemoved) {
  TempDir dir;
  RunResult r = runLauncher({"-n", "3", "--store", "file://" + dir.path(), "--",
                             test::binDir() + "/collx-info", "--rendezvous"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("rank 2 of 3"), std::string::npos);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(LauncherTest, FailingRankStopsTheOthersAndIsNamed) {
  TempDir dir;
  auto start = std::chrono::steady_clock::now();
  RunResult r = runLauncher({"-n", "4", "--grace", "2s", "--", "sh", "-c",
                             "echo $$ > " + dir.path() +
                                 "/pid.$COLLX_RANK; "
                                 "if [ $COLLX_RANK = 2 ]; then sleep 0.3; exit 3; fi; sleep 30"});
  EXPECT_EQ(r.code, 3);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(rank 2 \(pid \d+\) exited with code 3)")))
      << r.err;
  EXPECT_NE(r.err.find("stopping ranks 0,1,3"), std::string::npos) << r.err;
  auto pids = readPids(dir.path(), "pid.");
  EXPECT_EQ(pids.size(), 4u);
  expectGone(pids);
}

TEST(LauncherTest, RankKilledBySignalIsReported) {
  RunResult r = runLauncher(
      {"-n", "2", "--", "sh", "-c", "if [ $COLLX_RANK = 1 ]; then kill -9 $$; fi; sleep 30"});
  EXPECT_EQ(r.code, 128 + 9);
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("killed by signal 9"), std::string::npos) << r.err;
}

TEST(LauncherTest, TimeoutStopsAHangingJob) {
  auto start = std::chrono::steady_clock::now();
  RunResult r = runLauncher({"-n", "2", "--timeout", "1s", "--", "sleep", "30"});
  EXPECT_EQ(r.code, 124);
  EXPECT_NE(r.err.find("exceeded --timeout 1000 ms"), std::string::npos) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(LauncherTest, RankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  TempDir dir;
  auto start = std::chrono::steady_clock::now();
  RunResult r = runLauncher({"-n", "2", "--timeout", "500ms", "--grace", "500ms", "--", "sh", "-c",
                             "trap '' TERM; echo $$ > " + dir.path() +
                                 "/pid.$COLLX_RANK; while true; do sleep 0.05; done"});
  EXPECT_EQ(r.code, 124);
  EXPECT_NE(r.err.find("SIGKILL"), std::string::npos) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  expectGone(readPids(dir.path(), "pid."));
}

TEST(LauncherTest, SignalsAreForwardedToEveryRank) {
  TempDir dir;
  Process p({launcher(), "-n", "3", "--", "sh", "-c",
             "trap 'echo $COLLX_RANK > " + dir.path() +
                 "/term.$COLLX_RANK; exit 0' TERM; "
                 "sleep 30 & echo $! > " +
                 dir.path() + "/child.$COLLX_RANK; wait"},
            cleanEnv());
  // Wait until every rank has started its child.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (readPids(dir.path(), "child.").size() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(readPids(dir.path(), "child.").size(), 3u);
  p.signal(SIGTERM);
  ASSERT_TRUE(p.wait(15s));
  EXPECT_EQ(p.exitCode(), 128 + SIGTERM);
  EXPECT_NE(p.err().find("forwarded to every rank"), std::string::npos) << p.err();
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(std::filesystem::exists(dir.path() + "/term." + std::to_string(rank)))
        << "rank " << rank << " did not get SIGTERM";
  }
  // The ranks' own children (sleep) do not outlive the job either.
  expectGone(readPids(dir.path(), "child."));
}

TEST(LauncherTest, Sigusr1MakesAHangReportAndTheJobGoesOn) {
  // Rank 1 sleeps in user code while the others wait in an allreduce (no automatic report:
  // COLLX_HANG_REPORT_AFTER=0, and a long timeout); SIGUSR1 to collx-run makes one at once.
  auto env = cleanEnv();
  env["COLLX_HANG_REPORT_AFTER"] = "0";
  env["COLLX_TIMEOUT"] = "60s";
  env["TEST_WORKER_HANG_RANK"] = "1";
  env["TEST_WORKER_HANG_CASE"] = "sleep";
  Process p(
      {launcher(), "-n", "4", "--", test::binDir() + "/collx-test-worker", "hang", "100", "3"},
      env);
  auto lines = [&](const std::string& what) {
    int n = 0;
    for (std::size_t at = p.out().find(what); at != std::string::npos;
         at = p.out().find(what, at + 1)) {
      ++n;
    }
    return n;
  };
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (lines("call 1 done") < 4 && std::chrono::steady_clock::now() < deadline) p.wait(20ms);
  ASSERT_EQ(lines("call 1 done"), 4) << p.out() << p.err();
  std::this_thread::sleep_for(300ms);  // in call 2 now, waiting for rank 1
  const auto signalled = std::chrono::steady_clock::now();
  p.signal(SIGUSR1);
  while (p.err().find("has not called") == std::string::npos &&
         std::chrono::steady_clock::now() < signalled + 10s) {
    p.wait(20ms);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, 3s) << p.err();
  EXPECT_NE(p.err().find("rank 1: has not called allreduce#2"), std::string::npos) << p.err();
  EXPECT_NE(p.err().find("forwarded to 4 process(es)"), std::string::npos) << p.err();
  EXPECT_FALSE(p.wait(500ms)) << "the job should go on: " << p.err();
  p.signal(SIGTERM);
  ASSERT_TRUE(p.wait(15s));
  EXPECT_EQ(p.exitCode(), 128 + SIGTERM);
}

TEST(LauncherTest, Sigusr1SparesRanksThatDoNotHandleIt) {
  // A shell (SIGUSR1's default: it dies) is not sent the signal; the job ends normally.
  Process p({launcher(), "-n", "2", "--", "sh", "-c", "echo up; sleep 2"}, cleanEnv());
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (p.out().find("up\nup") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    p.wait(20ms);
  }
  ASSERT_NE(p.out().find("up\nup"), std::string::npos) << p.out();
  p.signal(SIGUSR1);
  ASSERT_TRUE(p.wait(15s));
  EXPECT_EQ(p.exitCode(), 0) << p.err();
  EXPECT_NE(p.err().find("forwarded to 0 process(es)"), std::string::npos) << p.err();
}

TEST(LauncherTest, BackgroundChildrenOfASuccessfulJobAreCleanedUp) {
  TempDir dir;
  RunResult r = runLauncher({"-n", "2", "--", "sh", "-c",
                             "sleep 60 & echo $! > " + dir.path() + "/child.$COLLX_RANK; exit 0"});
  EXPECT_EQ(r.code, 0) << r.err;
  auto pids = readPids(dir.path(), "child.");
  EXPECT_EQ(pids.size(), 2u);
  expectGone(pids);
}

TEST(LauncherTest, KillingTheLauncherTakesTheRanksWithIt) {
  TempDir dir;
  Process p({launcher(), "-n", "2", "--", "sh", "-c",
             "echo $$ > " + dir.path() + "/pid.$COLLX_RANK; exec sleep 30"},
            cleanEnv());
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (readPids(dir.path(), "pid.").size() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  auto pids = readPids(dir.path(), "pid.");
  ASSERT_EQ(pids.size(), 2u);
  ::kill(p.pid(), SIGKILL);
  ASSERT_TRUE(p.wait(5s));
  expectGone(pids);
}

TEST(LauncherTest, TwoNodesOnOneHost) {
  // Node 0's launcher binds it itself (test::serverPort: not a released port-0 port).
  const std::string port = std::to_string(test::serverPort());
  // Node 1's ranks use the store half a second after node 0's ranks are done: node 0's
  // launcher must keep its store up for them.
  const std::string script =
      "\"$1\" --rendezvous && if [ $COLLX_RANK -ge 2 ]; then "
      "\"$2\" \"$COLLX_STORE\" set late-$COLLX_RANK x 500; fi";
  auto env = cleanEnv();
  env["COLLX_JOB_SECRET"] = "both nodes' secret, for this test";  // several nodes need one
  std::vector<std::unique_ptr<Process>> nodes;
  for (int node = 1; node >= 0; --node) {  // node 1 first: it must wait for node 0's store
    nodes.push_back(std::make_unique<Process>(
        std::vector<std::string>{
            launcher(), "-n", "2", "--nnodes", "2", "--node-rank", std::to_string(node),
            "--master-addr", "127.0.0.1", "--master-port", port, "--", "/bin/sh", "-c", script,
            "sh", test::binDir() + "/collx-info", test::binDir() + "/collx-test-store-helper"},
        env));
    std::this_thread::sleep_for(200ms);
  }
  std::string all;
  for (auto& node : nodes) {
    ASSERT_TRUE(node->wait(30s));
    EXPECT_EQ(node->exitCode(), 0) << node->err();
    all += node->out();
  }
  std::set<std::string> jobs;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(all.find("rank " + std::to_string(rank) + " of 4"), std::string::npos) << all;
  }
  std::regex job(R"(job (run-[0-9a-f]+))");
  for (auto it = std::sregex_iterator(all.begin(), all.end(), job); it != std::sregex_iterator();
       ++it) {
    jobs.insert((*it)[1]);
  }
  EXPECT_EQ(jobs.size(), 1u) << all;
}

TEST(LauncherTest, BadArgumentsAreClearErrors) {
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string mentions;
  };
  const Case cases[] = {
      {{"--", "true"}, 2, "-n P (the number of ranks) is required"},
      {{"-n", "0", "true"}, 2, "-n='0'"},
      {{"-n", "2"}, 2, "no program to run"},
      {{"-n", "2", "--frobnicate", "true"}, 2, "unknown option '--frobnicate'"},
      {{"-n", "2", "--timeout", "soon", "true"}, 2, "--timeout='soon'"},
      {{"-n", "2", "--store", "tcp://nohost", "true"}, 2, "port is missing"},
      {{"-n", "2", "--nnodes", "2", "true"}, 2, "--master-addr"},
      {{"-n", "2", "--nnodes", "2", "--node-rank", "2", "--master-addr", "x", "true"},
       2,
       "--node-rank 2 is not below --nnodes 2"},
      {{"-n", "2", "--", "no-such-program-xyz"}, 127, "'no-such-program-xyz' not found in PATH"},
  };
  for (const Case& c : cases) {
    RunResult r = runLauncher(c.args, 20s);
    EXPECT_EQ(r.code, c.code) << c.mentions << "\n" << r.err;
    EXPECT_NE(r.err.find(c.mentions), std::string::npos) << r.err;
  }
  RunResult help = runLauncher({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("usage: collx-run -n P"), std::string::npos);
  EXPECT_NE(help.out.find("--timeout"), std::string::npos);
}

TEST(LauncherTest, CollxInfoPrintsTheConfigurationTable) {
  RunResult r = test::run({test::binDir() + "/collx-info"},
                          {{"COLLX_TIMEOUT", "42s"}, {"COLLX_TIMOUT", "1"}});
  EXPECT_EQ(r.code, 0) << r.err;
  // Settings with their type and range, default and the value in effect (settings_test
  // checks that every declaration is listed).
  for (const char* name : {"COLLX_RANK", "COLLX_WORLD_SIZE", "COLLX_STORE", "COLLX_TIMEOUT",
                           "COLLX_LOG_LEVEL", "COLLX_JOB_ID", "COLLX_GENERATION"}) {
    EXPECT_NE(r.out.find(std::string("    ") + name + ": "), std::string::npos) << name;
  }
  EXPECT_NE(r.out.find("COLLX_TIMEOUT: duration, at least 1ms; default: 300s; in effect: 42s "
                       "(environment)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("COLLX_TCP_STREAMS: integer in [1, 64]; default: 1; in effect: 1\n"),
            std::string::npos)
      << r.out;
  // (Long lines wrap.)
  EXPECT_NE(r.out.find("COLLX_SHM_RING_BYTES: bytes in [4KiB, 1GiB], a power of two; default:"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("halved until a rank's rings total at most 8MiB"), std::string::npos)
      << r.out;
  RunResult invalid = test::run({test::binDir() + "/collx-info"}, {{"COLLX_TCP_STREAMS", "100"}});
  EXPECT_EQ(invalid.code, 0) << invalid.err;
  EXPECT_NE(invalid.out.find("in effect: invalid:"), std::string::npos) << invalid.out;
  EXPECT_NE(invalid.out.find("COLLX_TCP_STREAMS='100': expected an integer in [1, 64]"),
            std::string::npos)
      << invalid.out;
  EXPECT_NE(r.out.find("COLLX_TIMOUT (did you mean COLLX_TIMEOUT?)"), std::string::npos);
  EXPECT_NE(r.out.find("tcp store"), std::string::npos);
  RunResult bad = test::run({test::binDir() + "/collx-info", "--bogus"});
  EXPECT_EQ(bad.code, 2);
  RunResult help = test::run({test::binDir() + "/collx-info", "--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("--rendezvous"), std::string::npos);
}

}  // namespace
}  // namespace collx
