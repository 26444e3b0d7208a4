// Process supervision for collx-run: spawn the local ranks, forward signals, tag their
// output, and fail the job as a whole when one rank fails.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace collx::run {

struct RankSpec {
  int rank = 0;
  std::vector<std::string> env;  // "NAME=value" entries added to (or replacing) the inherited ones
  int cpu = -1;                  // >= 0: the rank runs bound to this CPU
};

struct SuperviseOptions {
  std::string programPath;        // resolved with findProgram()
  std::vector<std::string> argv;  // argv[0] is the program as the user wrote it
  std::vector<RankSpec> ranks;
  std::optional<std::chrono::milliseconds> timeout;  // bound on the whole job
  std::chrono::milliseconds grace{5000};             // SIGTERM -> SIGKILL delay when stopping ranks
  bool tagOutput = false;                            // prefix every output line with "[rank] "
  // A rank that fails does not stop the others (collx-run --on-failure continue): they go on
  // without it (Context::shrink); supervise() then returns 0 when some rank exited 0.
  bool keepGoing = false;
  // A rank that fails is started again, at most this many times in all (collx-run
  // --on-failure replace): the new process has COLLX_JOIN=1, so that collx::init() joins the
  // running job in the failed rank's place (the survivors take it in Context::reform()).
  // Beyond it, failures are handled as keepGoing says.
  int replacements = 0;
  std::vector<int>* pids = nullptr;  // when set, receives every rank's pid as it starts
};

// Blocks the signals supervise() handles, in the calling thread and every thread it starts
// later: call it first in main(), before any thread exists (the store server's), so that
// the signals reach supervise() and not another thread.
void blockHandledSignals();

// Runs the ranks to completion and returns collx-run's exit code: 0 when every rank exited
// 0 (with keepGoing: when any did); the failing rank's code (128 + signal when killed) when
// one failed; 124 when the
// timeout stopped the job; 128 + signal when collx-run was interrupted. Every rank's process
// group is killed before it returns, so nothing a rank started outlives the job.
int supervise(const SuperviseOptions& options);

// The path execve() should run for `name` (searched in PATH unless it contains '/'), or "".
std::string findProgram(const std::string& name);

}  // namespace collx::run
