// Helpers shared by the test suites: temporary directories, child processes, a Redis server.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace collx::test {

// Sets an environment variable for the scope (read by what is made meanwhile: a context's
// settings, the verbs emulator's device).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// A fresh directory under /tmp, removed with its contents when this goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A child process with its stdout and stderr captured.
class Process {
 public:
  // Starts argv[0] (a path) with the current environment plus `env` (NAME -> value; an empty
  // value unsets NAME). The child is in its own process group.
  Process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {});
  // Kills the process group if still running.
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) const;
  // Waits for the exit; false when `timeout` passed first (the child keeps running).
  bool wait(std::chrono::milliseconds timeout);
  // Collected so far (all of it after wait() returned true).
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }
  bool exited() const { return done_; }
  // Exit code, or 128 + signal when killed by a signal; -1 before exit.
  int exitCode() const;
  bool killedBySignal(int sig) const;

 private:
  void pump(int timeoutMs);
  pid_t pid_ = -1;
  int outFd_ = -1;
  int errFd_ = -1;
  bool done_ = false;
  int status_ = 0;
  std::string out_;
  std::string err_;
};

// Runs to completion (or kills it after `timeout` and fails the test).
struct RunResult {
  int code;
  std::string out;
  std::string err;
};
RunResult run(const std::vector<std::string>& argv,
              const std::map<std::string, std::string>& env = {},
              std::chrono::milliseconds timeout = std::chrono::seconds(60));

// Where the build put collx's tools and test helpers (bin/ of the build tree).
std::string binDir();

// True when a process with this pid exists (and is not a zombie).
bool processAlive(pid_t pid);
// Its state letter in /proc/<pid>/stat ('R', 'S', 'T' stopped, 'Z', ...); '\0' when none.
char processState(pid_t pid);
// Waits up to `timeout` for the process to be in `state` (signals arrive asynchronously).
bool waitForProcessState(pid_t pid, char state, std::chrono::milliseconds timeout);

// True when something accepts TCP connections on 127.0.0.1:port.
bool portOpen(int port);

// A port for a process that binds it itself later (a store server, torchrun's MASTER_PORT,
// redis-server), where a ClosedPort cannot serve: a port released after a bind to port 0 is
// one the kernel hands to the next bind to port 0 or outgoing connection anywhere on the host
// (a parallel test's store, a client socket) before the child gets to bind it. So the port
// comes from below the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range,
// 32768-60999 by default; above it when there is no room below), which no port-0 bind and no
// connection ever gets: only another caller of this function could take it. The candidates
// start at a place spread by this process's pid and move on with every call (two calls of one
// process never get the same port), and each is checked bindable (on every address, nothing
// in TIME_WAIT) when returned. What is left (a parallel suite's child binding the same port
// between the check and this one's bind) makes the child's bind fail, which RedisServer
// retries with another port.
int serverPort();

// A port on 127.0.0.1 that refuses connections for as long as this object lives: it is bound
// and never listened on, so no other process (another test running in parallel) can take it.
class ClosedPort {
 public:
  ClosedPort();
  ~ClosedPort();
  ClosedPort(const ClosedPort&) = delete;
  ClosedPort& operator=(const ClosedPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Gigabytes of anonymous memory on transparent huge pages where the kernel allows them
// (madvise), so that touching it costs a fault per 2 MiB, not per 4 KiB. Zero-filled.
class LargeBuffer {
 public:
  explicit LargeBuffer(std::uint64_t bytes);
  ~LargeBuffer();
  LargeBuffer(const LargeBuffer&) = delete;
  LargeBuffer& operator=(const LargeBuffer&) = delete;
  template <typename T = std::int8_t>
  T* data() const {
    return static_cast<T*>(data_);
  }
  std::uint64_t size() const { return size_; }

 private:
  void* data_;
  std::uint64_t size_;
};

// Gigabytes of test data made and checked at memory speed, still catching a lost, repeated or
// shifted byte anywhere: byte j of pattern `seed` is byte j % 8 (little-endian) of a 64-bit
// mix of (j / 8, seed). patternBytes writes bytes first .. first + n - 1 of it to `out`.
void patternBytes(std::uint64_t seed, std::uint64_t first, void* out, std::uint64_t n);

// What a buffer should hold from byte `first` on, written `len` bytes at a time into `out`.
using Expected = std::function<void(std::uint64_t first, std::uint8_t* out, std::size_t len)>;
// The index of the first byte of data[0, n) that differs from `expected`, or -1. Compares
// 64 KiB blocks (memcmp).
std::int64_t firstMismatch(const void* data, std::uint64_t n, const Expected& expected);
// The same for pattern `seed` from byte `first` on.
std::int64_t firstPatternMismatch(const void* data, std::uint64_t n, std::uint64_t seed,
                                  std::uint64_t first = 0);

// A redis-server started on a free port for the lifetime of this object, or unavailable()
// with the reason (redis-server not installed).
// A Redis server's TLS: its certificate and key, and the CA of its clients' certificates
// (which it asks for when authClients).
struct RedisTls {
  std::string cert;
  std::string key;
  std::string ca;
  bool authClients = true;
};

class RedisServer {
 public:
  // redis-server on 127.0.0.1 and a free port, with `extraArgs` ("--requirepass", "pw", ...);
  // with `tls`, also a TLS port (tlsPort()) beside the plain one.
  explicit RedisServer(const std::vector<std::string>& extraArgs = {},
                       const RedisTls* tls = nullptr);
  ~RedisServer();
  bool available() const { return process_ != nullptr; }
  const std::string& whyUnavailable() const { return why_; }
  int port() const { return port_; }
  int tlsPort() const { return tlsPort_; }

 private:
  std::unique_ptr<Process> process_;
  int port_ = 0;
  int tlsPort_ = 0;
  std::string why_;
  TempDir dir_;
};

}  // namespace collx::test
