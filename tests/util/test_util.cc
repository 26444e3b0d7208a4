#include "test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <utility>

extern char** environ;

namespace collx::test {

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (setenv(name, value, 1) != 0) throw std::runtime_error(std::string("setenv ") + name);
}

ScopedEnv::~ScopedEnv() { unsetenv(name_); }

TempDir::TempDir() {
  char pattern[] = "/tmp/collx-test-XXXXXX";
  if (::mkdtemp(pattern) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Process::Process(const std::vector<std::string>& argv,
                 const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    std::size_t eq = entry.find('=');
    merged[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [name, value] : env) {
    if (value.empty()) {
      merged.erase(name);
    } else {
      merged[name] = value;
    }
  }
  std::vector<std::string> envStrings;
  for (const auto& [name, value] : merged) envStrings.push_back(name + "=" + value);
  std::vector<char*> envp, args;
  for (auto& s : envStrings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argvCopy = argv;
  for (auto& s : argvCopy) args.push_back(s.data());
  args.push_back(nullptr);

  int outPipe[2], errPipe[2];
  if (::pipe2(outPipe, O_CLOEXEC) != 0 || ::pipe2(errPipe, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe failed");
  }
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::setpgid(0, 0);
    ::dup2(outPipe[1], 1);
    ::dup2(errPipe[1], 2);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ::setpgid(pid_, pid_);
  ::close(outPipe[1]);
  ::close(errPipe[1]);
  outFd_ = outPipe[0];
  errFd_ = errPipe[0];
}

Process::~Process() {
  if (!done_ && pid_ > 0) {
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
  }
  if (outFd_ >= 0) ::close(outFd_);
  if (errFd_ >= 0) ::close(errFd_);
}

void Process::signal(int sig) const {
  if (!done_) ::kill(pid_, sig);
}

void Process::pump(int timeoutMs) {
  struct pollfd fds[2] = {{outFd_, POLLIN, 0}, {errFd_, POLLIN, 0}};
  int n = (outFd_ >= 0 ? 1 : 0);
  (void)n;
  if (outFd_ < 0 && errFd_ < 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(timeoutMs));
    return;
  }
  fds[0].fd = outFd_;
  fds[1].fd = errFd_;
  if (::poll(fds, 2, timeoutMs) <= 0) return;
  for (int i = 0; i < 2; ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char buf[65536];
    ssize_t got = ::read(fds[i].fd, buf, sizeof(buf));
    if (got > 0) {
      (i == 0 ? out_ : err_).append(buf, static_cast<std::size_t>(got));
    } else {
      ::close(fds[i].fd);
      (i == 0 ? outFd_ : errFd_) = -1;
    }
  }
}

bool Process::wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done_) {
    pid_t got = ::waitpid(pid_, &status_, WNOHANG);
    if (got == pid_) {
      done_ = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    pump(10);
  }
  // Drain what is left in the pipes (bounded: a grandchild might hold them open).
  auto drainUntil = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while ((outFd_ >= 0 || errFd_ >= 0) && std::chrono::steady_clock::now() < drainUntil) pump(10);
  return true;
}

int Process::exitCode() const {
  if (!done_) return -1;
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

bool Process::killedBySignal(int sig) const {
  return done_ && WIFSIGNALED(status_) && WTERMSIG(status_) == sig;
}

RunResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
              std::chrono::milliseconds timeout) {
  Process p(argv, env);
  if (!p.wait(timeout)) {
    throw std::runtime_error("'" + argv[0] + "' did not finish within " +
                             std::to_string(timeout.count()) + " ms; output so far:\n" + p.out() +
                             "\n" + p.err());
  }
  return {p.exitCode(), p.out(), p.err()};
}

std::string binDir() {
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return ".";
  path[n] = '\0';
  return std::filesystem::path(path).parent_path().string();
}

char processState(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return '\0';
  std::string content;
  std::getline(stat, content);
  std::size_t close = content.rfind(')');
  if (close == std::string::npos || close + 2 >= content.size()) return '\0';
  return content[close + 2];
}

bool processAlive(pid_t pid) {
  char state = processState(pid);
  return state != '\0' && state != 'Z' && state != 'X';
}

bool waitForProcessState(pid_t pid, char state, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (processState(pid) != state) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

bool portOpen(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool open = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return open;
}

namespace {

// The ports serverPort() picks from: [first, last], outside the ephemeral range.
std::pair<int, int> serverPortRange() {
  int low = 32768, high = 60999;  // Linux's defaults
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  range >> low >> high;
  if (low - 1 >= 20000 + 1000) return {20000, low - 1};
  if (high + 1 + 1000 <= 65535) return {high + 1, 65535};
  throw std::runtime_error("serverPort: no room outside the ephemeral ports " +
                           std::to_string(low) + "-" + std::to_string(high));
}

bool bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_ANY);  // conflicts with a bind to any address
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

int serverPort() {
  static const std::pair<int, int> range = serverPortRange();
  const int span = range.second - range.first + 1;
  // Spread by pid (parallel suites start far apart), then one step per call.
  static std::atomic<int> next{static_cast<int>((static_cast<long>(::getpid()) * 7919) % span)};
  for (int tries = 0; tries < span; ++tries) {
    const int port = range.first + next.fetch_add(1) % span;
    if (bindable(port)) return port;
  }
  throw std::runtime_error("serverPort: no bindable port in " + std::to_string(range.first) + "-" +
                           std::to_string(range.second));
}

ClosedPort::ClosedPort() {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    if (fd_ >= 0) ::close(fd_);
    throw std::runtime_error(std::string("ClosedPort: ") + std::strerror(err));
  }
  port_ = ntohs(addr.sin_port);
}

ClosedPort::~ClosedPort() { ::close(fd_); }

RedisServer::RedisServer(const std::vector<std::string>& extraArgs, const RedisTls* tls) {
  const char* candidates[] = {"/usr/bin/redis-server", "/usr/local/bin/redis-server"};
  std::string binary;
  for (const char* c : candidates) {
    if (::access(c, X_OK) == 0) binary = c;
  }
  if (binary.empty()) {
    why_ = "redis-server is not installed (apt-get install redis-server)";
    return;
  }
  for (int attempt = 0; attempt < 5 && !process_; ++attempt) {
    port_ = serverPort();
    std::vector<std::string> argv{binary,   "--port",       std::to_string(port_),
                                  "--bind", "127.0.0.1",    "--save",
                                  "",       "--appendonly", "no",
                                  "--dir",  dir_.path(),    "--daemonize",
                                  "no"};
    if (tls != nullptr) {
      tlsPort_ = serverPort();
      argv.insert(argv.end(), {"--tls-port", std::to_string(tlsPort_), "--tls-cert-file", tls->cert,
                               "--tls-key-file", tls->key, "--tls-ca-cert-file", tls->ca,
                               "--tls-auth-clients", tls->authClients ? "yes" : "no"});
    }
    argv.insert(argv.end(), extraArgs.begin(), extraArgs.end());
    auto p = std::make_unique<Process>(argv);
    auto up = [&] { return portOpen(port_) && (tls == nullptr || portOpen(tlsPort_)); };
    for (int i = 0; i < 200 && !up(); ++i) {
      if (p->wait(std::chrono::milliseconds(10))) break;  // exited: port taken (serverPort), retry
    }
    if (!p->exited() && up()) process_ = std::move(p);
  }
  if (!process_) why_ = "redis-server did not start";
}

RedisServer::~RedisServer() {
  if (process_) {
    process_->signal(SIGTERM);
    if (!process_->wait(std::chrono::seconds(5))) process_->signal(SIGKILL);
  }
}

LargeBuffer::LargeBuffer(std::uint64_t bytes) : size_(bytes) {
  data_ = ::mmap(nullptr, bytes == 0 ? 1 : bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data_ == MAP_FAILED) {
    throw std::runtime_error("mmap of " + std::to_string(bytes) +
                             " bytes: " + std::strerror(errno));
  }
  ::madvise(data_, bytes, MADV_HUGEPAGE);  // advice only: without it, 4 KiB pages
}

LargeBuffer::~LargeBuffer() { ::munmap(data_, size_ == 0 ? 1 : size_); }

namespace {

std::uint64_t mix(std::uint64_t word, std::uint64_t seed) {
  std::uint64_t x = word * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull + 1;
  x = (x ^ (x >> 31)) * 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}

}  // namespace

void patternBytes(std::uint64_t seed, std::uint64_t first, void* out, std::uint64_t n) {
  auto* p = static_cast<std::uint8_t*>(out);
  std::uint64_t j = first;
  const std::uint64_t end = first + n;
  for (; j < end && j % 8 != 0; ++j)
    *p++ = static_cast<std::uint8_t>(mix(j / 8, seed) >> (8 * (j % 8)));
  for (; j + 8 <= end; j += 8, p += 8) {
    std::uint64_t w = mix(j / 8, seed);
    std::memcpy(p, &w, 8);
  }
  for (; j < end; ++j) *p++ = static_cast<std::uint8_t>(mix(j / 8, seed) >> (8 * (j % 8)));
}

std::int64_t firstMismatch(const void* data, std::uint64_t n, const Expected& expected) {
  constexpr std::size_t kBlock = 64 * 1024;
  std::vector<std::uint8_t> want(kBlock);
  const auto* p = static_cast<const std::uint8_t*>(data);
  for (std::uint64_t at = 0; at < n; at += kBlock) {
    const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(kBlock, n - at));
    expected(at, want.data(), len);
    if (std::memcmp(p + at, want.data(), len) == 0) continue;
    for (std::size_t i = 0; i < len; ++i) {
      if (p[at + i] != want[i]) return static_cast<std::int64_t>(at + i);
    }
  }
  return -1;
}

std::int64_t firstPatternMismatch(const void* data, std::uint64_t n, std::uint64_t seed,
                                  std::uint64_t first) {
  return firstMismatch(data, n, [&](std::uint64_t at, std::uint8_t* out, std::size_t len) {
    patternBytes(seed, first + at, out, len);
  });
}

}  // namespace collx::test
