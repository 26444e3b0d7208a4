#include "launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "collx/base/units.h"
#include "diagnostics/process_probe.h"

extern char** environ;

namespace collx::run {

namespace {

using Clock = std::chrono::steady_clock;

void say(const std::string& text) {
  std::string line = "collx-run: " + text + "\n";
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

void writeAll(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own output is gone: nothing better to do
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")";
  }
  return "ended with status " + std::to_string(status);
}

int exitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// One output stream of one rank, split into lines and tagged.
struct Stream {
  int fd = -1;
  int target = STDOUT_FILENO;
  std::string tag;
  std::string partial;

  void pump() {
    char buf[65536];
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      finish();
      return;
    }
    partial.append(buf, static_cast<std::size_t>(n));
    std::size_t start = 0, newline;
    std::string out;
    while ((newline = partial.find('\n', start)) != std::string::npos) {
      out += tag;
      out.append(partial, start, newline - start + 1);
      start = newline + 1;
    }
    partial.erase(0, start);
    if (partial.size() > (1u << 20)) {  // a very long line: pass it on in pieces
      out += tag + partial + "\n";
      partial.clear();
    }
    if (!out.empty()) writeAll(target, out.data(), out.size());
  }

  void finish() {
    if (!partial.empty()) {
      std::string out = tag + partial + "\n";
      writeAll(target, out.data(), out.size());
      partial.clear();
    }
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  Stream out, err;
};

const int kSignals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1};

// Whether process `pid` catches `sig` (SigCgt in /proc/<pid>/status): a collx rank does
// (SIGUSR1: its hang report), a shell that wraps one does not, and would die of it.
bool catches(pid_t pid, int sig) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    const std::uint64_t mask = std::stoull(line.substr(7), nullptr, 16);
    return (mask >> (sig - 1)) & 1;
  }
  return false;
}

// The processes of the job: those whose process group is one of `groups` (each rank leads
// its own group, which holds it and what it started). One pass over /proc for all of them.
std::vector<pid_t> processesIn(const std::vector<pid_t>& groups) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    const pid_t pid = std::stoi(name);
    const std::optional<detail::ProcStat> stat = detail::readProcStat(pid);
    if (stat && std::find(groups.begin(), groups.end(), stat->pgrp) != groups.end()) {
      out.push_back(pid);
    }
  }
  return out;
}

sigset_t handledSet() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kSignals) sigaddset(&set, sig);
  return set;
}

// The mask the process had before blockHandledSignals(): what the ranks get.
sigset_t gOriginalMask;
bool gBlocked = false;

// The execve() environment of one rank: the inherited one with `extra` replacing entries of
// the same name. Built before fork(): the child only makes async-signal-safe calls.
std::vector<std::string> buildEnvironment(const std::vector<std::string>& extra) {
  std::map<std::string, std::string> entries;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    entries[entry.substr(0, entry.find('='))] = entry;
  }
  for (const std::string& entry : extra) entries[entry.substr(0, entry.find('='))] = entry;
  std::vector<std::string> out;
  out.reserve(entries.size());
  for (auto& [name, entry] : entries) out.push_back(std::move(entry));
  return out;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size());
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

void blockHandledSignals() {
  if (gBlocked) return;
  sigset_t set = handledSet();
  ::pthread_sigmask(SIG_BLOCK, &set, &gOriginalMask);
  gBlocked = true;
}

std::string findProgram(const std::string& name) {
  auto executable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
  };
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return executable(name) ? name : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    std::size_t colon = dirs.find(':', start);
    if (colon == std::string::npos) colon = dirs.size();
    std::string dir = dirs.substr(start, colon - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (executable(candidate)) return candidate;
    start = colon + 1;
  }
  return "";
}

int supervise(const SuperviseOptions& options) {
  // Signals arrive through a signalfd; ranks get the original mask and dispositions back.
  blockHandledSignals();
  sigset_t handled = handledSet();
  const sigset_t original = gOriginalMask;
  int sigfd = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigfd < 0) {
    say(std::string("cannot create a signalfd: ") + std::strerror(errno));
    return 1;
  }
  const pid_t launcher = ::getpid();

  std::vector<Rank> ranks(options.ranks.size());
  std::vector<std::string> argvStrings = options.argv;
  std::vector<char*> argv = pointers(argvStrings);
  int exitCode = 0;
  bool stopping = false;
  // keepGoing: the first failure's code, and whether any rank exited 0.
  int firstFailure = 0;
  bool anyOk = false;
  Clock::time_point killAt = Clock::time_point::max();
  auto jobDeadline = options.timeout ? Clock::now() + *options.timeout : Clock::time_point::max();

  auto signalGroups = [&](int sig) {
    for (Rank& r : ranks) {
      if (r.pid > 0) ::kill(-r.pid, sig);  // the rank's process group: it and its children
    }
  };
  auto runningRanks = [&] {
    std::vector<int> list;
    for (const Rank& r : ranks) {
      if (r.running) list.push_back(r.rank);
    }
    return list;
  };
  auto stop = [&](int sig, int code, const std::string& why) {
    if (stopping) return;
    stopping = true;
    exitCode = code;
    const std::vector<int> running = runningRanks();
    if (!running.empty()) {
      say(why + "; stopping rank" + (running.size() > 1 ? "s " : " ") + rankRanges(running) +
          " (SIGKILL after " + std::to_string(options.grace.count()) + " ms)");
    } else {
      say(why);
    }
    signalGroups(sig);
    killAt = Clock::now() + options.grace;
  };

  // CPU sets are made before fork(): the child only makes async-signal-safe calls.
  std::vector<cpu_set_t> sets(ranks.size());
  std::vector<const cpu_set_t*> cpuSets(ranks.size(), nullptr);
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const int cpu = options.ranks[i].cpu;
    if (cpu < 0 || cpu >= CPU_SETSIZE) continue;
    CPU_ZERO(&sets[i]);
    CPU_SET(cpu, &sets[i]);
    cpuSets[i] = &sets[i];
  }
  // Starts rank i's process (again, for a replacement: with `extra` in its environment).
  auto spawn = [&](std::size_t i, const std::vector<std::string>& extra) {
    Rank& r = ranks[i];
    r.rank = options.ranks[i].rank;
    std::vector<std::string> env = options.ranks[i].env;
    env.insert(env.end(), extra.begin(), extra.end());
    std::vector<std::string> envStrings = buildEnvironment(env);
    std::vector<char*> envp = pointers(envStrings);
    int outPipe[2] = {-1, -1}, errPipe[2] = {-1, -1};
    if (options.tagOutput) {
      if (::pipe2(outPipe, O_CLOEXEC) != 0 || ::pipe2(errPipe, O_CLOEXEC) != 0) {
        say(std::string("cannot create pipes: ") + std::strerror(errno));
        stop(SIGKILL, 1, "cannot start rank " + std::to_string(r.rank));
        return false;
      }
    }
    pid_t pid = ::fork();
    if (pid < 0) {
      say(std::string("cannot fork: ") + std::strerror(errno));
      stop(SIGKILL, 1, "cannot start rank " + std::to_string(r.rank));
      return false;
    }
    if (pid == 0) {
      // Child: async-signal-safe calls only (the launcher has other threads).
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the launcher died: so do we
      if (::getppid() != launcher) ::_exit(126);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int sig : kSignals) ::sigaction(sig, &dfl, nullptr);
      ::sigaction(SIGPIPE, &dfl, nullptr);
      ::pthread_sigmask(SIG_SETMASK, &original, nullptr);
      if (options.tagOutput) {
        ::dup2(outPipe[1], STDOUT_FILENO);
        ::dup2(errPipe[1], STDERR_FILENO);
      }
      if (cpuSets[i] != nullptr) ::sched_setaffinity(0, sizeof(cpu_set_t), cpuSets[i]);
      ::execve(options.programPath.c_str(), argv.data(), envp.data());
      const char msg[] = "collx-run: execve failed\n";
      ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
      (void)ignored;
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here, so that it is in place before we ever signal it
    r.pid = pid;
    if (options.pids != nullptr) options.pids->push_back(static_cast<int>(pid));
    r.running = true;
    if (options.tagOutput) {
      ::close(outPipe[1]);
      ::close(errPipe[1]);
      r.out.finish();  // (a replaced rank's: what it left is out)
      r.err.finish();
      std::string tag = "[" + std::to_string(r.rank) + "] ";
      r.out = Stream{outPipe[0], STDOUT_FILENO, tag, {}};
      r.err = Stream{errPipe[0], STDERR_FILENO, tag, {}};
      ::fcntl(r.out.fd, F_SETFL, O_NONBLOCK);
      ::fcntl(r.err.fd, F_SETFL, O_NONBLOCK);
    }
    return true;
  };
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (!spawn(i, {})) break;
  }
  int replaced = 0;

  auto anyRunning = [&] {
    return std::any_of(ranks.begin(), ranks.end(), [](const Rank& r) { return r.running; });
  };
  auto reap = [&] {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (Rank& r : ranks) {
        if (r.pid != pid || !r.running) continue;
        r.running = false;
        r.status = status;
        bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        anyOk |= !failed;
        if (failed && !stopping && replaced < options.replacements) {
          // A replacement in its place, which joins the running job (collx::join).
          ++replaced;
          const std::size_t i = static_cast<std::size_t>(&r - ranks.data());
          say("rank " + std::to_string(r.rank) + " (pid " + std::to_string(pid) + ") " +
              describeStatus(status) + "; starting a replacement (" + std::to_string(replaced) +
              " of at most " + std::to_string(options.replacements) +
              ", --max-replacements), which joins the others (COLLX_JOIN=1)");
          if (spawn(i, {"COLLX_JOIN=1"})) break;  // (r.pid is the new process's now)
        } else if (failed && !stopping && options.keepGoing) {
          if (firstFailure == 0) firstFailure = exitCodeOf(status);
          const std::vector<int> left = runningRanks();
          say("rank " + std::to_string(r.rank) + " (pid " + std::to_string(pid) + ") " +
              describeStatus(status) +
              (left.empty() ? std::string()
                            : "; rank" + std::string(left.size() > 1 ? "s " : " ") +
                                  rankRanges(left) + " go on without it (--on-failure continue)"));
        } else if (failed && !stopping) {
          stop(SIGTERM, exitCodeOf(status),
               "rank " + std::to_string(r.rank) + " (pid " + std::to_string(pid) + ") " +
                   describeStatus(status));
        }
      }
    }
  };

  // Pipes stay readable a little after the ranks end (a grandchild may hold them).
  Clock::time_point drainUntil = Clock::time_point::max();
  while (true) {
    bool ranksLeft = anyRunning();
    if (!ranksLeft && drainUntil == Clock::time_point::max()) {
      signalGroups(SIGKILL);  // whatever the ranks left behind in their groups
      drainUntil = Clock::now() + std::chrono::milliseconds(500);
    }
    std::vector<pollfd> fds{{sigfd, POLLIN, 0}};
    std::vector<Stream*> streams;
    for (Rank& r : ranks) {
      for (Stream* s : {&r.out, &r.err}) {
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          streams.push_back(s);
        }
      }
    }
    if (!ranksLeft && (streams.empty() || Clock::now() >= drainUntil)) break;

    Clock::time_point next = std::min({jobDeadline, killAt, drainUntil});
    // Wake at least every 200 ms: reaping does not depend on SIGCHLD alone.
    int waitMs = 200;
    if (next != Clock::time_point::max()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now());
      waitMs = static_cast<int>(std::clamp<std::int64_t>(left.count() + 1, 0, waitMs));
    }
    int rc = ::poll(fds.data(), fds.size(), waitMs);
    if (rc < 0 && errno != EINTR) {
      say(std::string("poll failed: ") + std::strerror(errno));
      stop(SIGKILL, 1, "internal error");
    }
    if (rc > 0 && (fds[0].revents & POLLIN)) {
      signalfd_siginfo info;
      while (::read(sigfd, &info, sizeof(info)) == sizeof(info)) {
        int sig = static_cast<int>(info.ssi_signo);
        if (sig == SIGCHLD) continue;  // reaped below
        if (sig == SIGUSR1) {
          // Not a stop: the ranks that handle it make a hang report, and the job goes on.
          std::vector<pid_t> groups;
          for (const Rank& r : ranks) {
            if (r.running) groups.push_back(r.pid);
          }
          int told = 0;
          for (pid_t pid : processesIn(groups)) {
            if (catches(pid, SIGUSR1) && ::kill(pid, SIGUSR1) == 0) ++told;
          }
          say("received SIGUSR1: forwarded to " + std::to_string(told) +
              " process(es) of the job that handle it (collx ranks make a hang report)");
          continue;
        }
        if (stopping) {
          say(std::string("received ") + ::strsignal(sig) + " again; killing every rank now");
          signalGroups(SIGKILL);
          continue;
        }
        // Forward the signal itself, then escalate after the grace period.
        stop(sig, 128 + sig,
             std::string("received signal ") + std::to_string(sig) + " (" + ::strsignal(sig) +
                 "), forwarded to every rank");
      }
    }
    for (std::size_t i = 0; i < streams.size(); ++i) {
      if (fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) streams[i]->pump();
    }
    reap();
    auto now = Clock::now();
    if (now >= jobDeadline && !stopping) {
      stop(SIGTERM, 124,
           "the job exceeded --timeout " + std::to_string(options.timeout->count()) + " ms");
    }
    if (now >= killAt) {
      const std::vector<int> left = runningRanks();
      if (!left.empty()) {
        say(std::string(left.size() > 1 ? "ranks " : "rank ") + rankRanges(left) +
            " still running after the grace period: SIGKILL");
      }
      signalGroups(SIGKILL);
      killAt = Clock::time_point::max();
    }
  }
  for (Rank& r : ranks) {
    r.out.finish();
    r.err.finish();
  }
  ::close(sigfd);
  if (options.keepGoing && !stopping) return anyOk ? 0 : firstFailure;
  return exitCode;
}

}  // namespace collx::run
