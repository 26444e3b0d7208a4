// Liveness: whether a peer this rank waits for still answers, on every medium.
//
// A peer that stops answering without closing its connections (SIGSTOP, a host that loses
// power, a cut link) would otherwise be noticed only at the call's deadline. Each rank of a
// mesh keeps a UDP socket and a thread that answers PINGs with PONGs; the thread runs
// whatever the rank's own threads do, so a rank busy outside collx still answers. The mesh
// (Mesh::progress, while a call sleeps) pings a peer that a request has waited on with
// nothing heard from it for a quarter of COLLX_PEER_TIMEOUT, every eighth of it; a peer
// silent (no arrival, no PONG) for the whole timeout has failed, and the error names it.
//
// Datagrams carry the job's hash (job and generation), both ranks and a sequence number, and,
// when the job has a secret, an HMAC-SHA256 tag under the pair purpose's key: a PONG proves
// that the peer's process of this job and generation runs. A datagram that does not parse,
// names another job or rank, or fails its tag is dropped (counted for tests).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collx/secure/job_secret.h"

namespace collx::transport {

class Liveness {
 public:
  using Clock = std::chrono::steady_clock;

  // Binds a UDP socket to `ip` (the address this rank's TCP listener uses, or loopback) on a
  // free port and starts the answering thread. Throws IoError.
  Liveness(int rank, int size, std::uint64_t job, std::shared_ptr<const secure::JobSecret> secret,
           const std::string& ip);
  ~Liveness();
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  // "ip:port" ("[v6]:port"), for the mesh's address blob.
  const std::string& address() const noexcept { return address_; }
  // Every rank's published address (as address() gives it; "" where a rank published none:
  // it is never pinged). Before ping(); not thread-safe.
  void setPeers(const std::vector<std::string>& addresses);

  // Sends a PING to `peer` (any thread; best effort: a lost datagram is the next one's job).
  void ping(int peer) noexcept;
  // ping(peer) unless a PING went to it less than `period` before `now` (any thread; of
  // threads that find it due at once, one pings).
  void pingIfDue(int peer, Clock::time_point now, Clock::duration period) noexcept;
  // When `peer` last answered a PING (Clock::time_point{} if never). Any thread.
  Clock::time_point lastAnswer(int peer) const noexcept;
  // How long the first PING sent to `peer` after its last answer has gone unanswered at
  // `now` (zero when every PING was answered, or none was sent). Any thread; it may say less
  // than the truth while an answer and a PING cross, never more.
  Clock::duration unansweredFor(int peer, Clock::time_point now) const noexcept;
  // Datagrams dropped because they did not parse, named another job or rank, failed their
  // tag, or answered no PING (for tests).
  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }

 private:
  struct Datagram;
  void loop();
  void answer(const Datagram& d, const sockaddr_storage& from, socklen_t fromLength);
  void fillTag(Datagram& d) const;
  bool tagOk(const Datagram& d) const;

  const int rank_;
  const int size_;
  const std::uint64_t job_;
  std::shared_ptr<const secure::JobSecret> secret_;
  int fd_ = -1;
  int stopFd_ = -1;
  std::string address_;
  std::vector<sockaddr_storage> peers_;
  std::vector<socklen_t> peerLengths_;
  // Per peer: the last PING's sequence number (written by pingers), the last answered one
  // and its time in nanoseconds of Clock (by the thread).
  std::unique_ptr<std::atomic<std::uint64_t>[]> pinged_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> answered_;
  std::unique_ptr<std::atomic<std::int64_t>[]> answeredAt_;
  std::unique_ptr<std::atomic<std::int64_t>[]> pingedAt_;         // pingIfDue's, in ns of Clock
  std::unique_ptr<std::atomic<std::int64_t>[]> firstUnanswered_;  // ping()'s, in ns of Clock
  std::atomic<std::uint64_t> dropped_{0};
  std::thread thread_;
};

}  // namespace collx::transport
