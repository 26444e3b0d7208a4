#include "arena.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <mutex>
#include <unordered_map>

#include "collx/base/copy.h"
#include "collx/base/error.h"
#include "collx/base/log.h"
#include "collx/transport/shm_segments.h"

namespace collx::transport::shm {

namespace {

// MFD_NOEXEC_SEAL (Linux 6.3): newer kernels warn about memfds that could be made executable.
constexpr unsigned kMfdNoexecSeal = 0x0008U;

std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex(std::uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

// Arenas of this process by token: thread ranks share one mapping of each.
struct Registry {
  std::mutex mutex;
  std::unordered_map<std::uint64_t, std::weak_ptr<Mapping>> arenas;
};

Registry& registry() {
  static Registry* instance = new Registry();  // never destroyed: used by destructors at exit
  return *instance;
}

}  // namespace

Layout Layout::of(int size, std::uint64_t ringBytes, std::uint64_t groupBytes) noexcept {
  Layout l;
  bool overflow = size < 0;
  // n rounded up to whole cache lines (or pages), noting an overflow.
  auto up = [&overflow](std::uint64_t n, std::size_t unit) -> std::size_t {
    std::size_t out = 0;
    overflow |= __builtin_add_overflow(n, unit - 1, &out);
    return out / unit * unit;
  };
  auto add = [&overflow](std::size_t a, std::size_t b) {
    std::size_t out = 0;
    overflow |= __builtin_add_overflow(a, b, &out);
    return out;
  };
  auto mul = [&overflow](std::size_t a, std::size_t b) {
    std::size_t out = 0;
    overflow |= __builtin_mul_overflow(a, b, &out);
    return out;
  };
  const auto ranks = static_cast<std::size_t>(size < 0 ? 0 : size);
  l.verdicts = sizeof(ArenaHeader);
  l.rings = up(l.verdicts + ranks, kLine);
  l.ringStride = add(sizeof(RingControl), up(ringBytes, kLine));
  l.group = add(l.rings, mul(l.ringStride, ranks));
  l.groupBuffers = add(l.group, sizeof(GroupControl));
  l.groupStride = add(kLine, up(groupBytes, kLine));
  l.slots = up(add(l.groupBuffers, mul(l.groupStride, kGroupBuffers)), kLine);
  l.slotStride = add(sizeof(SlotControl) + sizeof(GroupControl), mul(l.groupStride, kGroupBuffers));
  l.total = up(add(l.slots, mul(l.slotStride, kSlots)), 4096);
  if (overflow) l.total = 0;
  return l;
}

bool validatePeerHeader(const ArenaHeader& h, const PeerExpectation& expect,
                        std::uint64_t publishedBytes, Layout& layout, std::string& why) {
  if (h.magic != kArenaMagic || h.version != kArenaVersion) {
    why = "its arena is not a collx arena of version " + std::to_string(kArenaVersion);
    return false;
  }
  if (h.rank != expect.rank || h.size != expect.size || h.job != expect.job ||
      h.generation != expect.generation) {
    why =
        "its arena belongs to rank " + std::to_string(h.rank) + " of " + std::to_string(h.size) +
        (h.job != expect.job || h.generation != expect.generation ? " of another job or generation"
                                                                  : "");
    return false;
  }
  if (h.ringBytes < 4096 || h.ringBytes > kMaxRingBytes || (h.ringBytes & (h.ringBytes - 1)) != 0) {
    why = "its rings of " + std::to_string(h.ringBytes) +
          " bytes are not a power of two in [4KiB, 1GiB]";
    return false;
  }
  if (h.groupBytes != expect.groupBytes) {
    why = "its group buffers hold " + std::to_string(h.groupBytes) + " bytes, this rank's " +
          std::to_string(expect.groupBytes) + " (COLLX_SHM_GROUP_BYTES differs)";
    return false;
  }
  layout = Layout::of(expect.size, h.ringBytes, h.groupBytes);
  if (layout.total == 0 || layout.total != publishedBytes) {
    why = "its arena's size does not match its layout";
    return false;
  }
  return true;
}

Mapping::~Mapping() {
  if (base_ != nullptr && ::munmap(base_, bytes_) != 0) {
    COLLX_WARN(kShm, "munmap of a {}-byte arena failed: {}", bytes_, std::strerror(errno));
  }
}

std::uint64_t randomToken() {
  std::uint64_t value = 0;
  if (::getrandom(&value, sizeof(value), GRND_NONBLOCK) == static_cast<ssize_t>(sizeof(value))) {
    return value;
  }
  static std::atomic<std::uint64_t> counter{0};
  auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return fnv1a(std::to_string(now) + "/" + std::to_string(::getpid()) + "/" +
               std::to_string(counter.fetch_add(1)));
}

std::string pidNamespace() {
  char buf[64] = {};
  ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string text(buf, static_cast<std::size_t>(n));  // "pid:[4026531836]"
  std::string digits;
  for (char c : text) {
    if (c >= '0' && c <= '9') digits += c;
  }
  return digits;
}

std::uint64_t hostId(const std::string& override) {
  if (!override.empty()) return fnv1a("override\n" + override);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot);
  return fnv1a(std::string(host) + "\n" + boot);
}

Arena::Arena(int rank, int size, std::uint64_t job, std::int64_t generation,
             std::uint64_t ringBytes, std::uint64_t groupBytes, bool posix)
    : token_(randomToken()), layout_(Layout::of(size, ringBytes, groupBytes)) {
  Where where{rank, "shm arena", -1};
  // The settings' ranges keep a real arena far from this.
  if (layout_.total == 0) {
    throw InvalidArgument(where, "an arena for " + std::to_string(size) + " ranks, rings of " +
                                     std::to_string(ringBytes) + " bytes and group buffers of " +
                                     std::to_string(groupBytes) + " bytes does not fit in memory");
  }
  if (posix) {
    std::string ns = pidNamespace();
    name_ = std::string("/") + kShmPrefix + (ns.empty() ? "0" : ns) + "-" +
            std::to_string(::getpid()) + "-r" + std::to_string(rank) + "-" + hex(token_);
    fd_ = ::shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      int err = errno;
      name_.clear();
      throw IoError(where, "shm_open(" + name_ + ") failed: " + std::strerror(err));
    }
  } else {
    fd_ = static_cast<int>(::memfd_create("collx-shm", MFD_CLOEXEC | kMfdNoexecSeal));
    if (fd_ < 0 && errno == EINVAL) fd_ = ::memfd_create("collx-shm", MFD_CLOEXEC);
    if (fd_ < 0) throw IoError(where, std::string("memfd_create failed: ") + std::strerror(errno));
  }
  auto cleanup = [&] {
    if (!name_.empty()) ::shm_unlink(name_.c_str());
    name_.clear();
    ::close(fd_);
    fd_ = -1;
  };
  if (::ftruncate(fd_, static_cast<off_t>(layout_.total)) != 0) {
    int err = errno;
    cleanup();
    throw IoError(where, "sizing a " + std::to_string(layout_.total) +
                             "-byte shared-memory arena failed: " + std::strerror(err));
  }
  void* base = ::mmap(nullptr, layout_.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    cleanup();
    throw IoError(where, "mapping a " + std::to_string(layout_.total) +
                             "-byte shared-memory arena failed: " + std::strerror(err));
  }
  mapping_ = std::make_shared<Mapping>(base, layout_.total);
  ArenaHeader* h = mapping_->header();
  h->magic = kArenaMagic;
  h->version = kArenaVersion;
  h->rank = rank;
  h->size = size;
  h->pid = ::getpid();
  h->job = job;
  h->generation = generation;
  h->failedIn = -1;
  h->token = token_;
  h->ringBytes = ringBytes;
  h->groupBytes = groupBytes;
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().arenas[token_] = mapping_;
}

Arena::~Arena() {
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().arenas.erase(token_);
  }
  seal();
}

std::string Arena::locator() const {
  if (!name_.empty()) return "n" + name_.substr(1);
  return "fd" + std::to_string(fd_);
}

void Arena::seal() noexcept {
  if (!name_.empty()) {
    if (::shm_unlink(name_.c_str()) != 0 && errno != ENOENT) {
      COLLX_WARN(kShm, "shm_unlink({}) failed: {}", name_, std::strerror(errno));
    }
    name_.clear();
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::shared_ptr<Mapping> mapPeerArena(pid_t pid, const std::string& locator, std::uint64_t token,
                                      std::size_t bytes, std::string& why) {
  if (pid == ::getpid()) {
    std::lock_guard<std::mutex> lock(registry().mutex);
    auto it = registry().arenas.find(token);
    std::shared_ptr<Mapping> found = it == registry().arenas.end() ? nullptr : it->second.lock();
    if (!found) why = "its arena is not (or no longer) in this process";
    return found;
  }
  int fd = -1;
  std::string path;
  if (locator.rfind("fd", 0) == 0) {
    path = "/proc/" + std::to_string(pid) + "/fd/" + locator.substr(2);
    fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  } else if (locator.rfind('n', 0) == 0 && locator.find('/') == std::string::npos) {
    path = "/" + locator.substr(1);
    fd = ::shm_open(path.c_str(), O_RDWR | O_CLOEXEC, 0);
  } else {
    why = "bad arena locator '" + locator + "'";
    return nullptr;
  }
  if (fd < 0) {
    why = "cannot open " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes) {
    why = path + " is not a " + std::to_string(bytes) + "-byte arena";
    ::close(fd);
    return nullptr;
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  if (base == MAP_FAILED) {
    why = "cannot map " + path + ": " + std::strerror(err);
    return nullptr;
  }
  auto mapping = std::make_shared<Mapping>(base, bytes);
  const ArenaHeader* h = mapping->header();
  if (h->magic != kArenaMagic || h->version != kArenaVersion || h->token != token ||
      h->pid != pid) {
    why = path + " does not hold the arena that was announced (magic, version, token or pid)";
    return nullptr;
  }
  return mapping;
}

bool readProcessMemory(pid_t pid, bool samePid, std::uint64_t address, void* dst,
                       std::uint64_t bytes, int& err) {
  if (samePid) {
    copyBytes(dst, reinterpret_cast<const void*>(address), bytes);
    return true;
  }
  auto* to = static_cast<std::uint8_t*>(dst);
  while (bytes > 0) {
    iovec local{to, bytes};
    iovec remote{reinterpret_cast<void*>(address), bytes};
    const ssize_t got = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      err = got < 0 ? errno : EFAULT;
      return false;
    }
    to += got;
    address += static_cast<std::uint64_t>(got);
    bytes -= static_cast<std::uint64_t>(got);
  }
  return true;
}

}  // namespace collx::transport::shm

namespace collx::transport {

namespace {

// The process no longer runs: it does not exist, or it is a zombie (exited, not yet reaped:
// an orphan whose launcher was killed waits for init to reap it).
bool processGone(int pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  if (!stat || !std::getline(stat, content)) return false;
  std::size_t close = content.rfind(')');
  if (close == std::string::npos || close + 2 >= content.size()) return false;
  const char state = content[close + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace

std::vector<std::string> removeShmLeftovers(const std::vector<int>& exitedPids) noexcept {
  std::vector<std::string> removed;
  try {
    const std::string ns = shm::pidNamespace();
    if (ns.empty()) return removed;
    const std::string mine = std::string(kShmPrefix) + ns + "-";
    DIR* dir = ::opendir(kShmDirectory);
    if (dir == nullptr) return removed;
    std::vector<std::string> names;
    while (dirent* entry = ::readdir(dir)) {
      std::string name = entry->d_name;
      if (name.rfind(mine, 0) == 0) names.push_back(name);
    }
    ::closedir(dir);
    for (const std::string& name : names) {
      // collx-<pidns>-<pid>-r<rank>-<token>
      std::size_t start = mine.size();
      std::size_t end = name.find('-', start);
      if (end == std::string::npos || end == start) continue;
      int pid = 0;
      try {
        pid = std::stoi(name.substr(start, end - start));
      } catch (const std::exception&) {
        continue;
      }
      if (pid <= 0) continue;
      bool gone;
      if (exitedPids.empty()) {
        gone = processGone(pid);
      } else {
        gone = std::find(exitedPids.begin(), exitedPids.end(), pid) != exitedPids.end();
      }
      if (!gone) continue;
      std::string path = std::string(kShmDirectory) + "/" + name;
      if (::unlink(path.c_str()) == 0) removed.push_back(path);
    }
  } catch (const std::exception&) {
    // Best effort: a sweep never fails its caller.
  }
  for (const std::string& path : removed) {
    COLLX_INFO(kShm, "removed {}, left by a rank that no longer runs", path);
  }
  return removed;
}

}  // namespace collx::transport
