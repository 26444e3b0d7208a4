#include "liveness.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "collx/base/error.h"
#include "collx/base/log.h"
#include "no_cancel.h"

namespace collx::transport {

namespace {

constexpr char kMagic[4] = {'C', 'X', 'L', 'V'};
constexpr std::uint8_t kVersion = 1;
constexpr std::uint8_t kPing = 1, kPong = 2;

// "1.2.3.4:5" or "[::1]:5" as a socket address; false when it is neither.
bool parseAddress(const std::string& text, sockaddr_storage& out, socklen_t& length) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 >= text.size()) return false;
  std::string host = text.substr(0, colon);
  const std::string port = text.substr(colon + 1);
  char* end = nullptr;
  const unsigned long number = std::strtoul(port.c_str(), &end, 10);
  if (*end != '\0' || number == 0 || number > 65535) return false;
  out = {};
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&out);
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<std::uint16_t>(number));
    length = sizeof(sockaddr_in6);
    return ::inet_pton(AF_INET6, host.c_str(), &a6->sin6_addr) == 1;
  }
  auto* a4 = reinterpret_cast<sockaddr_in*>(&out);
  a4->sin_family = AF_INET;
  a4->sin_port = htons(static_cast<std::uint16_t>(number));
  length = sizeof(sockaddr_in);
  return ::inet_pton(AF_INET, host.c_str(), &a4->sin_addr) == 1;
}

std::int64_t nanosecondsOf(Liveness::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

struct Liveness::Datagram {
  char magic[4];
  std::uint8_t version;
  std::uint8_t kind;
  std::uint16_t reserved;
  std::uint32_t from;
  std::uint32_t to;
  std::uint64_t job;
  std::uint64_t seq;
  secure::Tag tag;  // zero without a secret
};

Liveness::Liveness(int rank, int size, std::uint64_t job,
                   std::shared_ptr<const secure::JobSecret> secret, const std::string& ip)
    : rank_(rank),
      size_(size),
      job_(job),
      secret_(std::move(secret)),
      pinged_(new std::atomic<std::uint64_t>[static_cast<std::size_t>(size)]),
      answered_(new std::atomic<std::uint64_t>[static_cast<std::size_t>(size)]),
      answeredAt_(new std::atomic<std::int64_t>[static_cast<std::size_t>(size)]),
      pingedAt_(new std::atomic<std::int64_t>[static_cast<std::size_t>(size)]),
      firstUnanswered_(new std::atomic<std::int64_t>[static_cast<std::size_t>(size)]) {
  const Where where{rank, "liveness", -1};
  for (int p = 0; p < size; ++p) {
    pinged_[p].store(0, std::memory_order_relaxed);
    answered_[p].store(0, std::memory_order_relaxed);
    answeredAt_[p].store(0, std::memory_order_relaxed);
    pingedAt_[p].store(0, std::memory_order_relaxed);
    firstUnanswered_[p].store(0, std::memory_order_relaxed);
  }
  sockaddr_storage local{};
  socklen_t length = 0;
  const bool v6 = ip.find(':') != std::string::npos;
  if (!parseAddress(v6 ? "[" + ip + "]:1" : ip + ":1", local, length)) {
    throw IoError(where, "bad local address '" + ip + "'");
  }
  if (v6) {
    reinterpret_cast<sockaddr_in6*>(&local)->sin6_port = 0;
  } else {
    reinterpret_cast<sockaddr_in*>(&local)->sin_port = 0;
  }
  fd_ = ::socket(local.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw IoError(where, std::string("socket(UDP) failed: ") + std::strerror(errno));
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&local), length) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&local), &length) != 0) {
    const int e = errno;
    ::close(fd_);
    throw IoError(where, "cannot bind a UDP socket to " + ip + ": " + std::strerror(e));
  }
  const unsigned port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&local)->sin6_port
                                 : reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  address_ = (v6 ? "[" + ip + "]" : ip) + ":" + std::to_string(port);
  stopFd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (stopFd_ < 0) {
    const int e = errno;
    ::close(fd_);
    throw IoError(where, std::string("eventfd failed: ") + std::strerror(e));
  }
  peers_.assign(static_cast<std::size_t>(size), sockaddr_storage{});
  peerLengths_.assign(static_cast<std::size_t>(size), 0);
  thread_ = std::thread([this] { loop(); });
}

Liveness::~Liveness() {
  std::uint64_t one = 1;
  ssize_t ignored = ::write(stopFd_, &one, sizeof(one));
  (void)ignored;
  if (thread_.joinable()) thread_.join();
  ::close(stopFd_);
  ::close(fd_);
}

void Liveness::setPeers(const std::vector<std::string>& addresses) {
  for (int p = 0; p < size_ && p < static_cast<int>(addresses.size()); ++p) {
    const auto i = static_cast<std::size_t>(p);
    if (p == rank_ || !parseAddress(addresses[i], peers_[i], peerLengths_[i])) {
      peerLengths_[i] = 0;
    }
  }
}

void Liveness::fillTag(Datagram& d) const {
  d.tag = {};
  if (!secret_) return;
  d.tag = secret_->mac(
      secure::Purpose::kPair,
      {"liveness", std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(&d),
                                                 offsetof(Datagram, tag))});
}

bool Liveness::tagOk(const Datagram& d) const {
  if (!secret_) return true;
  return secret_->verify(
      secure::Purpose::kPair,
      {"liveness", std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(&d),
                                                 offsetof(Datagram, tag))},
      d.tag);
}

void Liveness::ping(int peer) noexcept {
  if (peer < 0 || peer >= size_ || peerLengths_[static_cast<std::size_t>(peer)] == 0) return;
  Datagram d{};
  std::memcpy(d.magic, kMagic, sizeof(kMagic));
  d.version = kVersion;
  d.kind = kPing;
  d.from = static_cast<std::uint32_t>(rank_);
  d.to = static_cast<std::uint32_t>(peer);
  d.job = job_;
  d.seq = pinged_[peer].fetch_add(1, std::memory_order_relaxed) + 1;
  // The first PING after the last answer starts the unanswered time (an answer that comes
  // after this look makes it look answered: unansweredFor() errs short).
  const std::int64_t sentAt = nanosecondsOf(Clock::now());
  std::int64_t first = firstUnanswered_[peer].load(std::memory_order_relaxed);
  if (first <= answeredAt_[peer].load(std::memory_order_acquire)) {
    firstUnanswered_[peer].compare_exchange_strong(first, sentAt, std::memory_order_relaxed);
  }
  try {
    fillTag(d);
  } catch (...) {
    return;  // no tag, no ping: the next one tries again
  }
  const auto i = static_cast<std::size_t>(peer);
  ssize_t ignored = ::sendto(fd_, &d, sizeof(d), MSG_DONTWAIT | MSG_NOSIGNAL,
                             reinterpret_cast<const sockaddr*>(&peers_[i]), peerLengths_[i]);
  (void)ignored;
}

void Liveness::pingIfDue(int peer, Clock::time_point now, Clock::duration period) noexcept {
  if (peer < 0 || peer >= size_) return;
  const std::int64_t at = nanosecondsOf(now);
  std::int64_t last = pingedAt_[peer].load(std::memory_order_relaxed);
  if (last != 0 && at - last < std::chrono::nanoseconds(period).count()) return;
  if (!pingedAt_[peer].compare_exchange_strong(last, at, std::memory_order_relaxed)) return;
  ping(peer);
}

Liveness::Clock::time_point Liveness::lastAnswer(int peer) const noexcept {
  if (peer < 0 || peer >= size_) return {};
  return Clock::time_point(
      std::chrono::nanoseconds(answeredAt_[peer].load(std::memory_order_acquire)));
}

Liveness::Clock::duration Liveness::unansweredFor(int peer, Clock::time_point now) const noexcept {
  if (peer < 0 || peer >= size_) return {};
  const std::int64_t first = firstUnanswered_[peer].load(std::memory_order_relaxed);
  if (first == 0 || first <= answeredAt_[peer].load(std::memory_order_acquire)) return {};
  return std::max<Clock::duration>(now - Clock::time_point(std::chrono::nanoseconds(first)),
                                   Clock::duration::zero());
}

void Liveness::answer(const Datagram& d, const sockaddr_storage& from, socklen_t fromLength) {
  Datagram reply = d;
  reply.kind = kPong;
  reply.from = static_cast<std::uint32_t>(rank_);
  reply.to = d.from;
  try {
    fillTag(reply);
  } catch (...) {
    return;
  }
  ssize_t ignored = ::sendto(fd_, &reply, sizeof(reply), MSG_DONTWAIT | MSG_NOSIGNAL,
                             reinterpret_cast<const sockaddr*>(&from), fromLength);
  (void)ignored;
}

void Liveness::loop() {
  pollfd fds[2] = {{stopFd_, POLLIN, 0}, {fd_, POLLIN, 0}};
  while (true) {
    const int ready = detail::pollNoCancel(fds, 2, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      COLLX_WARN(kTcp, "rank {}: liveness: poll failed: {}", rank_, std::strerror(errno));
      return;
    }
    if ((fds[0].revents & POLLIN) != 0) return;
    if ((fds[1].revents & POLLIN) == 0) continue;
    while (true) {
      Datagram d{};
      sockaddr_storage from{};
      socklen_t fromLength = sizeof(from);
      const ssize_t n = ::recvfrom(fd_, &d, sizeof(d), MSG_DONTWAIT | MSG_TRUNC,
                                   reinterpret_cast<sockaddr*>(&from), &fromLength);
      if (n < 0) break;  // EAGAIN: all read
      const bool valid =
          n == static_cast<ssize_t>(sizeof(d)) &&
          std::memcmp(d.magic, kMagic, sizeof(kMagic)) == 0 && d.version == kVersion &&
          d.job == job_ && d.to == static_cast<std::uint32_t>(rank_) &&
          d.from < static_cast<std::uint32_t>(size_) &&
          d.from != static_cast<std::uint32_t>(rank_) && (d.kind == kPing || d.kind == kPong);
      bool ok = false;
      try {
        ok = valid && tagOk(d);
      } catch (...) {
        ok = false;
      }
      if (!ok) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      const int peer = static_cast<int>(d.from);
      if (d.kind == kPing) {
        answer(d, from, fromLength);
        continue;
      }
      // A PONG counts when it answers a PING sent and is newer than the last one counted
      // (a replayed or duplicated one does not).
      if (d.seq == 0 || d.seq > pinged_[peer].load(std::memory_order_relaxed) ||
          d.seq <= answered_[peer].load(std::memory_order_relaxed)) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      answered_[peer].store(d.seq, std::memory_order_relaxed);
      answeredAt_[peer].store(nanosecondsOf(Clock::now()), std::memory_order_release);
    }
  }
}

}  // namespace collx::transport
