#include "shm_device.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <thread>

#include "collx/base/log.h"
#include "collx/transport/shm_segments.h"

namespace collx::transport::shm {

namespace {

using Clock = std::chrono::steady_clock;

// Bytes one pair reads from its ring (or copies from its peer) per progress() before the
// other pairs get a turn.
constexpr std::uint64_t kPairBudget = 32u << 20;
// How often a rank that does not sleep looks whether its peers' processes still exist.
constexpr std::chrono::milliseconds kLivenessPeriod(10);
// How long a rank that fails or closes waits for peers copying out of its buffers.
constexpr std::chrono::milliseconds kPullersGrace(1000);

std::string hex(std::uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(value));
  return buf;
}

bool parseHex(const std::string& text, std::uint64_t& out) {
  if (text.empty() || text.size() > 16) return false;
  char* end = nullptr;
  out = std::strtoull(text.c_str(), &end, 16);
  return end == text.c_str() + text.size();
}

bool parseDecimal(const std::string& text, std::uint64_t& out) {
  if (text.empty() || text.size() > 19) return false;
  char* end = nullptr;
  out = std::strtoull(text.c_str(), &end, 10);
  return end == text.c_str() + text.size();
}

// The doorbell of the rank whose process is `pid` and arena token `token`.
void bellAddress(pid_t pid, std::uint64_t token, sockaddr_un& address, socklen_t& length) {
  std::memset(&address, 0, sizeof(address));
  address.sun_family = AF_UNIX;
  std::string name = "collx-bell-" + std::to_string(pid) + "-" + hex(token);
  std::memcpy(address.sun_path + 1, name.data(), name.size());  // abstract: sun_path[0] = 0
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

int openPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) {
    // pidfd_open sets close-on-exec already (it is always O_CLOEXEC).
    return static_cast<int>(fd);
  }
#else
  (void)pid;
#endif
  return -1;  // an old kernel: kill(pid, 0) instead
}

}  // namespace

std::uint64_t ShmDevice::defaultRingBytes(int size) {
  // 1 MiB per peer, shrinking so that an arena's rings stay within 8 MiB (only the rings of
  // peers that really send are ever touched), and never below 64 KiB.
  const std::uint64_t peers = static_cast<std::uint64_t>(std::max(1, size - 1));
  std::uint64_t ring = 1u << 20;
  while (ring > (64u << 10) && ring * peers > (8u << 20)) ring /= 2;
  return ring;
}

ShmDevice::ShmDevice(LinkState& link, const JobMember& job, const ShmOptions& options)
    : link_(link),
      job_(job),
      options_(options),
      host_(hostId(options.hostId)),
      jobHash_(jobHash(job.jobId, job.generation)),
      ringBytes_(options.ringBytes > 0 ? options.ringBytes : defaultRingBytes(job.size)) {
  generation_ = job_.generation;
  // The sizes are within their settings' ranges: the Mesh validated its options.
  if (options_.posix) removeShmLeftovers();  // of ranks that were killed before
  arena_ = std::make_unique<Arena>(job.rank, job.size, jobHash_, job.generation, ringBytes_,
                                   options_.groupBytes, options_.posix);
  cmaProbe_ = arena_->token();
  arena_->header()->cmaProbe = reinterpret_cast<std::uint64_t>(&cmaProbe_);
  arena_->header()->eagerLimit =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(options_.eagerLimit, 0xFFFFFFFFu));

  bellFd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sendFd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (bellFd_ < 0 || sendFd_ < 0) {
    int err = errno;
    if (bellFd_ >= 0) ::close(bellFd_);
    if (sendFd_ >= 0) ::close(sendFd_);
    throw IoError(where(), std::string("cannot create the doorbell socket: ") + std::strerror(err));
  }
  sockaddr_un bell;
  socklen_t length;
  bellAddress(::getpid(), arena_->token(), bell, length);
  if (::bind(bellFd_, reinterpret_cast<sockaddr*>(&bell), length) != 0) {
    int err = errno;
    ::close(bellFd_);
    ::close(sendFd_);
    throw IoError(where(), std::string("cannot bind the doorbell socket: ") + std::strerror(err));
  }
  address_ = hex(host_) + "." + std::to_string(::getpid()) + "." + arena_->locator() + "." +
             std::to_string(arena_->layout().total) + "." + hex(arena_->token());
  COLLX_DEBUG(kShm, "rank {}: arena of {} bytes ({} per ring), address {}", job_.rank,
              arena_->layout().total, ringBytes_, address_);
}

ShmDevice::~ShmDevice() {
  letGo(State::kClosed);
  pairs_.clear();
  for (int fd : pidfds_) {
    if (fd >= 0) ::close(fd);
  }
  for (auto& [rank, c] : confirmed_) {
    if (c.pidfd >= 0) ::close(c.pidfd);
  }
  if (bellFd_ >= 0) ::close(bellFd_);
  if (sendFd_ >= 0) ::close(sendFd_);
  arena_.reset();
}

bool ShmDevice::parse(const std::string& text, Published& out) {
  // "<host id hex>.<pid>.<locator>.<bytes>.<token hex>"
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    std::size_t dot = text.find('.', start);
    parts.push_back(text.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  std::uint64_t pid = 0;
  if (parts.size() != 5 || !parseHex(parts[0], out.host) || !parseDecimal(parts[1], pid) ||
      pid == 0 || pid > 0x7fffffff || parts[2].empty() || !parseDecimal(parts[3], out.bytes) ||
      !parseHex(parts[4], out.token)) {
    return false;
  }
  // The size before anything is mapped: at least an arena's smallest layout, at most
  // kMaxArenaBytes. The locator: "fd<N>" or "n<name>" (no '/').
  if (out.bytes < Layout::of(1, 4096, 0).total || out.bytes > kMaxArenaBytes ||
      parts[2].size() > 255 || parts[2].find('/') != std::string::npos) {
    return false;
  }
  for (char c : parts[2]) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return false;
  }
  out.pid = static_cast<pid_t>(pid);
  out.locator = parts[2];
  return true;
}

bool ShmDevice::canConnect(int peer, const std::string& peerAddress) const {
  Published published;
  return peer != job_.rank && parse(peerAddress, published) && published.host == host_;
}

bool ShmDevice::probe(int peer, const Published& published, PeerView& view,
                      std::string& why) const {
  view.rank = peer;
  view.pid = published.pid;
  view.samePid = published.pid == ::getpid();
  view.mapping =
      mapPeerArena(published.pid, published.locator, published.token, published.bytes, why);
  if (!view.mapping) return false;
  const PeerExpectation expect{peer, job_.size, jobHash_, job_.generation, options_.groupBytes};
  const ArenaHeader& h = *view.mapping->header();
  if (!validatePeerHeader(h, expect, published.bytes, view.layout, why)) return false;
  bellAddress(published.pid, published.token, view.bell, view.bellLength);
  // A datagram of no bytes: reaches the doorbell only within the same network namespace.
  if (::sendto(sendFd_, "", 0, MSG_DONTWAIT | MSG_NOSIGNAL,
               reinterpret_cast<const sockaddr*>(&view.bell), view.bellLength) != 0 &&
      errno != EAGAIN) {
    why = std::string("its doorbell is unreachable: ") + std::strerror(errno);
    return false;
  }
  view.cma = false;
  if (options_.cma) {
    if (view.samePid) {
      view.cma = true;
    } else {
      std::uint64_t value = 0;
      iovec local{&value, sizeof(value)};
      iovec remote{reinterpret_cast<void*>(h.cmaProbe), sizeof(value)};
      ssize_t got = ::process_vm_readv(published.pid, &local, 1, &remote, 1, 0);
      view.cma = got == static_cast<ssize_t>(sizeof(value)) && value == published.token;
      if (!view.cma) {
        COLLX_INFO(kShm,
                   "rank {}: cannot read rank {}'s memory (process_vm_readv: {}); large "
                   "messages from it are copied through the ring",
                   job_.rank, peer, got < 0 ? std::strerror(errno) : "wrong value");
      }
    }
  }
  return true;
}

bool ShmDevice::alive(pid_t pid, int pidfd) const {
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
  }
  return pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH;
}

std::vector<int> ShmDevice::confirm(const std::vector<int>& peers,
                                    const std::vector<std::string>& addresses,
                                    Clock::time_point deadline) {
  const Layout& layout = arena_->layout();
  std::uint8_t* verdicts = arena_->mapping()->verdicts(layout);
  // Every verdict first, then the waits: each side decides before it waits for the other.
  std::map<int, Confirmed> pending;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    const int peer = peers[i];
    Published published;
    PeerView view;
    std::string why;
    bool ok = parse(addresses[i], published) && probe(peer, published, view, why);
    atomic(verdicts[peer]).store(ok ? kVerdictYes : kVerdictNo, std::memory_order_release);
    if (!ok) {
      COLLX_INFO(kShm,
                 "rank {}: rank {} seems to be on this host but its arena does not work "
                 "from here ({}): using the next transport",
                 job_.rank, peer, why);
      continue;
    }
    Confirmed c;
    c.pidfd = view.samePid ? -1 : openPidfd(view.pid);
    c.view = std::move(view);
    pending.emplace(peer, std::move(c));
  }
  std::vector<int> out;
  auto pause = std::chrono::microseconds(20);
  while (!pending.empty()) {
    for (auto it = pending.begin(); it != pending.end();) {
      const int peer = it->first;
      Confirmed& c = it->second;
      std::uint8_t* theirs = c.view.mapping->verdicts(c.view.layout);
      const auto verdict = atomic(theirs[job_.rank]).load(std::memory_order_acquire);
      if (verdict == kVerdictUnknown) {
        if (!alive(c.view.pid, c.pidfd)) {
          throw IoError(where(peer), "rank " + std::to_string(peer) + " (pid " +
                                         std::to_string(c.view.pid) +
                                         ") died during the shared-memory handshake: rank " +
                                         std::to_string(peer) + " died or was killed");
        }
        ++it;
        continue;
      }
      if (verdict == kVerdictYes) {
        out.push_back(peer);
        confirmed_.emplace(peer, std::move(c));
      } else {
        COLLX_INFO(kShm, "rank {}: rank {} cannot use this rank's arena: using the next transport",
                   job_.rank, peer);
        if (c.pidfd >= 0) ::close(c.pidfd);
      }
      it = pending.erase(it);
    }
    if (pending.empty()) break;
    if (Clock::now() >= deadline) {
      std::string missing;
      for (auto& [peer, c] : pending) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(peer);
        if (c.pidfd >= 0) ::close(c.pidfd);
      }
      throw TimeoutError(
          where(pending.begin()->first),
          "rank(s) " + missing + " did not answer the shared-memory handshake within the timeout");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(2));
  }
  // Whoever maps this arena has done so: the name (or descriptor) can go.
  arena_->seal();
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<Pair*> ShmDevice::connect(const std::vector<int>& peers,
                                      const std::vector<std::string>&, Clock::time_point) {
  ShmPairOptions pairOptions;
  pairOptions.cma = options_.cma;
  std::vector<Pair*> out;
  std::vector<GroupMember> members;
  GroupMember self;
  self.rank = job_.rank;
  self.pid = ::getpid();
  self.mapping = arena_->mapping();
  self.layout = arena_->layout();
  members.push_back(self);
  for (int peer : peers) {
    auto it = confirmed_.find(peer);
    if (it == confirmed_.end()) {
      throw InvalidArgument(
          where(peer), "rank " + std::to_string(peer) + " was not confirmed for shared memory");
    }
    const PeerView& view = it->second.view;
    members.push_back(GroupMember{peer, view.pid, view.samePid, it->second.pidfd, view.mapping,
                                  view.layout, view.cma, view.bell, view.bellLength});
    pairs_.push_back(std::make_unique<ShmPair>(link_, pairOptions, *arena_->mapping(),
                                               arena_->layout(), it->second.view, sendFd_));
    pidfds_.push_back(it->second.pidfd);
    it->second.pidfd = -1;
    out.push_back(pairs_.back().get());
  }
  confirmed_.clear();
  if (!pairs_.empty()) {
    std::sort(members.begin(), members.end(),
              [](const GroupMember& a, const GroupMember& b) { return a.rank < b.rank; });
    int index = 0;
    while (members[static_cast<std::size_t>(index)].rank != job_.rank) ++index;
    group_ = std::make_unique<ShmGroup>(link_, std::move(members), index, options_.groupBytes,
                                        sendFd_, -1, nullptr, job_.generation);
  }
  COLLX_DEBUG(kShm, "rank {}: {} peer(s) over shared memory", job_.rank, pairs_.size());
  return out;
}

bool ShmDevice::prepareToSleep() {
  if (pairs_.empty()) return true;
  auto sleeping = atomic(arena_->header()->sleeping);
  sleeping.store(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (auto& pair : pairs_) {
    // (A dead pair is a peer that a reform left out: nothing of it is read again.)
    if (!pair->dead() && pair->wouldWake()) {
      sleeping.store(0, std::memory_order_relaxed);
      return false;
    }
  }
  if (group_ && group_->expectationMet()) {  // the use a call waits for is there
    sleeping.store(0, std::memory_order_relaxed);
    return false;
  }
  armed_ = true;
  return true;
}

std::size_t ShmDevice::addPollFds(std::vector<pollfd>& fds) {
  if (!armed_) return 0;
  fds.push_back(pollfd{bellFd_, POLLIN, 0});
  for (std::size_t i = 0; i < pairs_.size(); ++i) {
    const bool watch = pidfds_[i] >= 0 && !pairs_[i]->exited() && !pairs_[i]->dead();
    fds.push_back(pollfd{watch ? pidfds_[i] : -1, POLLIN, 0});
  }
  return 1 + pairs_.size();
}

void ShmDevice::drainBell() noexcept {
  char byte;
  while (::recv(bellFd_, &byte, sizeof(byte), MSG_DONTWAIT) >= 0) {
  }
}

bool ShmDevice::progress(const pollfd* results, std::size_t count) {
  bool moved = false;
  bool deaths = false;
  if (armed_) {
    armed_ = false;
    atomic(arena_->header()->sleeping).store(0, std::memory_order_relaxed);
    if (count > 0 && (results[0].revents & POLLIN)) {
      drainBell();
      moved = true;
    }
    for (std::size_t i = 1; i < count; ++i) deaths |= results[i].revents != 0;
  }
  for (auto& pair : pairs_) {
    if (pair->dead()) continue;
    std::uint64_t budget = kPairBudget;
    moved |= pair->progress(budget);
  }
  const auto now = Clock::now();
  if (deaths || now >= nextCheck_) {
    nextCheck_ = now + kLivenessPeriod;
    checkLiveness();
  }
  return moved;
}

std::string ShmDevice::gone(int peer) const {
  for (std::size_t i = 0; i < pairs_.size(); ++i) {
    const ShmPair& pair = *pairs_[i];
    if (pair.peer() != peer) continue;
    if (!pair.samePid() && !alive(pair.peerPid(), pidfds_[i])) {
      return "rank " + std::to_string(peer) + " (pid " + std::to_string(pair.peerPid()) +
             ") exited: it died or was killed";
    }
    if (pair.peerClosedArena()) return "rank " + std::to_string(peer) + " closed its context";
    return {};
  }
  return {};
}

void ShmDevice::checkLiveness() {
  checks_.clear();
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < pairs_.size(); ++i) {
    ShmPair& pair = *pairs_[i];
    if (pair.exited() || pair.samePid() || pair.dead()) continue;
    if (pidfds_[i] >= 0) {
      checks_.push_back(pollfd{pidfds_[i], POLLIN, 0});
      which.push_back(i);
    } else if (::kill(pair.peerPid(), 0) != 0 && errno == ESRCH) {
      pair.peerExited();
    }
  }
  if (checks_.empty()) return;
  if (::poll(checks_.data(), checks_.size(), 0) <= 0) return;
  for (std::size_t k = 0; k < checks_.size(); ++k) {
    if (checks_[k].revents != 0) pairs_[which[k]]->peerExited();
  }
}

void ShmDevice::letGo(State state) noexcept {
  ArenaHeader* h = arena_->header();
  std::uint32_t open = static_cast<std::uint32_t>(State::kOpen);
  atomic(h->state).compare_exchange_strong(open, static_cast<std::uint32_t>(state),
                                           std::memory_order_seq_cst);
  // Peers that began copying from this rank's buffers before they saw the new state finish
  // first: after this, nobody reads them. A peer that died while it copied never takes its
  // count back: once one of them is gone, nobody is waited for (the live ones' calls fail
  // with this rank's anyway, and reading what this rank's memory then holds harms nothing of
  // this rank's).
  const auto start = Clock::now();
  const auto until = start + kPullersGrace;
  auto nextLook = start;
  while (atomic(h->pulling).load(std::memory_order_seq_cst) != 0) {
    const auto now = Clock::now();
    if (now >= until) {
      COLLX_WARN(kShm, "rank {}: a peer is still copying from this rank's buffers after {} ms",
                 job_.rank, kPullersGrace.count());
      break;
    }
    if (now >= nextLook) {
      nextLook = now + std::chrono::milliseconds(1);
      bool gone = false;
      for (std::size_t i = 0; i < pairs_.size() && !gone; ++i) {
        gone = !pairs_[i]->samePid() && !alive(pairs_[i]->peerPid(), pidfds_[i]);
      }
      if (gone) {
        COLLX_DEBUG(kShm,
                    "rank {}: a peer that died may have been copying from this rank's "
                    "buffers; the others are not waited for",
                    job_.rank);
        break;
      }
    }
    std::this_thread::yield();
  }
  for (auto& pair : pairs_) pair->ring();
}

void ShmDevice::remakeGroup(std::int64_t generation, const std::vector<bool>& keep) {
  // From the group made at connect (every peer of this host's), the members kept, in the
  // same memory, numbering their uses from the generation's first: a member left out that
  // still waits in an old group reads no use of the new one as its own (it sees a later use,
  // or a later generation's call, and fails: left out).
  const ShmGroup* first = retired_.empty() ? group_.get() : retired_.front().get();
  if (first == nullptr) return;
  std::vector<GroupMember> members;
  int self = -1;
  for (const GroupMember& m : first->members()) {
    if (m.rank != job_.rank && (m.rank < 0 || m.rank >= static_cast<int>(keep.size()) ||
                                !keep[static_cast<std::size_t>(m.rank)])) {
      continue;
    }
    if (m.rank == job_.rank) self = static_cast<int>(members.size());
    members.push_back(m);
  }
  std::unique_ptr<ShmGroup> group;
  if (members.size() > 1 && self >= 0 && generation > first->generation()) {
    group = std::make_unique<ShmGroup>(
        link_, std::move(members), self, options_.groupBytes, sendFd_, -1, nullptr, generation,
        static_cast<std::uint64_t>(generation) << SharedGroup::kGenerationShift);
    group->setPolicy(first->policy());
    group->setDirectReads(first->directReads());
  }
  if (group_) retired_.push_back(std::move(group_));
  group_ = std::move(group);
}

void ShmDevice::leaveOut(const std::vector<int>& peers) {
  if (!group_) return;
  const bool member = std::any_of(peers.begin(), peers.end(), [&](int peer) {
    return std::find(group_->ranks().begin(), group_->ranks().end(), peer) != group_->ranks().end();
  });
  if (!member) return;
  // Made again without them, for the same generation (no call of it ran in this one yet).
  std::vector<bool> keep(static_cast<std::size_t>(job_.size), false);
  for (int rank : group_->ranks()) {
    if (std::find(peers.begin(), peers.end(), rank) == peers.end()) {
      keep[static_cast<std::size_t>(rank)] = true;
    }
  }
  remakeGroup(group_->generation(), keep);
}

void ShmDevice::reform(std::int64_t generation, const std::vector<bool>& keep) {
  remakeGroup(generation, keep);
  generation_ = generation;
  // Open again: the peers that go on read this rank's state as they wait on it. (The last
  // error stays: a peer still in the failed generation reads it, see failedIn.)
  ArenaHeader* h = arena_->header();
  atomic(h->state).store(static_cast<std::uint32_t>(State::kOpen), std::memory_order_seq_cst);
}

void ShmDevice::failAll(const Error& error) noexcept {
  ArenaHeader* h = arena_->header();
  if (atomic(h->state).load(std::memory_order_acquire) ==
      static_cast<std::uint32_t>(State::kOpen)) {
    // Every peer learns why (the state, stored after these, publishes them).
    publishError(*h, static_cast<std::uint32_t>(error.kind()), error.peer(), error.detail());
    atomic(h->failedIn).store(generation_, std::memory_order_relaxed);
  }
  letGo(State::kFailed);
  for (auto& pair : pairs_) pair->failAll(error);
  if (group_) group_->failed(error);
}

}  // namespace collx::transport::shm
