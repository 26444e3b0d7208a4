// ShmDevice: the shared-memory transport of one context: this rank's arena (arena.h), its
// doorbell, and a ShmPair per peer on the same host.
//
// Locality: a peer is a candidate when its published host id (hostname + boot id, or
// COLLX_HOST_ID) equals ours; it becomes an shm pair only when both sides' probes succeed
// (each maps the other's arena and checks its magic, token, rank, job and generation, and
// reaches its doorbell) and each has read the other's verdict, so both choose the same
// transport. Everything else falls through to tcp.
//
// Waiting: shared memory has no descriptor to poll. Each rank has a doorbell, an abstract
// unix datagram socket ("\0collx-bell-<pid>-<token>"). Before the mesh sleeps in poll(),
// prepareToSleep() sets `sleeping` in the arena and looks once more at every ring; a peer
// that publishes something looks at `sleeping` afterwards and, if set, clears it and sends
// one datagram. Both sides fence between their store and their load, so a wakeup is never
// lost, and a rank that is busy polling costs its peers nothing. A producer blocked on a
// full ring is rung the same way when its consumer frees room.
//
// Peer death: a pidfd per peer process (pidfd_open), polled while sleeping and looked at
// every 10 ms otherwise (kill(pid, 0) where pidfds are missing); a peer that exited without
// closing its context fails the mesh with "rank N died or was killed".
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "arena.h"
#include "collx/transport/device.h"
#include "collx/transport/link.h"
#include "collx/transport/options.h"
#include "shm_group.h"
#include "shm_pair.h"

namespace collx::transport::shm {

class ShmDevice final : public Device {
 public:
  // Creates this rank's arena and doorbell. Throws IoError.
  ShmDevice(LinkState& link, const JobMember& job, const ShmOptions& options);
  // Tells every peer this rank closes (a peer still waiting for it then fails), waits
  // briefly for peers copying from this rank's buffers, and lets go of the arena.
  ~ShmDevice() override;

  const char* name() const override { return "shm"; }
  std::string address() const override { return address_; }
  bool canConnect(int peer, const std::string& peerAddress) const override;
  std::vector<int> confirm(const std::vector<int>& peers, const std::vector<std::string>& addresses,
                           std::chrono::steady_clock::time_point deadline) override;
  std::vector<Pair*> connect(const std::vector<int>& peers,
                             const std::vector<std::string>& addresses,
                             std::chrono::steady_clock::time_point deadline) override;
  bool prepareToSleep() override;
  std::size_t addPollFds(std::vector<pollfd>& fds) override;
  bool progress(const pollfd* results, std::size_t count) override;
  void failAll(const Error& error) noexcept override;
  SharedGroup* sharedGroup() override { return group_.get(); }

  // The ring size used for a world of `size` ranks when COLLX_SHM_RING_BYTES is unset.
  static std::uint64_t defaultRingBytes(int size);

  // A peer's address as it published it: "<host id hex>.<pid>.<locator>.<bytes>.<token hex>".
  struct Published {
    std::uint64_t host = 0;
    pid_t pid = 0;
    std::string locator;
    std::uint64_t bytes = 0;
    std::uint64_t token = 0;
  };
  // Reads an address from the store (outside input): false when it is not one, or its arena
  // size is outside [the smallest layout, kMaxArenaBytes]. Pure.
  static bool parse(const std::string& text, Published& out);

 private:
  bool probe(int peer, const Published& published, PeerView& view, std::string& why) const;
  bool alive(pid_t pid, int pidfd) const;

 public:
  std::string gone(int peer) const override;
  // The pairs of the peers kept reset themselves (the others stay dead); the group is made
  // again of the members kept (a re-formed ShmGroup in the same memory), the old one kept,
  // failed, with this device.
  void reform(std::int64_t generation, const std::vector<bool>& keep) override;
  void leaveOut(const std::vector<int>& peers) override;

 private:
  void checkLiveness();
  void drainBell() noexcept;
  void letGo(State state) noexcept;
  // group_ made again of the members `keep` names, for `generation`.
  void remakeGroup(std::int64_t generation, const std::vector<bool>& keep);
  Where where(int peer = -1) const { return Where{link_.rank, "shm", peer}; }

  LinkState& link_;
  JobMember job_;
  std::int64_t generation_ = 0;  // its pairs': the job's, then each reform()'s
  ShmOptions options_;
  std::uint64_t host_;
  std::uint64_t jobHash_;
  std::uint64_t ringBytes_;
  std::unique_ptr<Arena> arena_;
  std::uint64_t cmaProbe_ = 0;  // peers read it with process_vm_readv to test CMA
  int bellFd_ = -1;
  int sendFd_ = -1;
  std::string address_;

  struct Confirmed {
    PeerView view;
    int pidfd = -1;
  };
  std::map<int, Confirmed> confirmed_;
  std::vector<std::unique_ptr<ShmPair>> pairs_;
  std::unique_ptr<ShmGroup> group_;
  std::vector<std::unique_ptr<ShmGroup>> retired_;  // the old generations' (sub-groups' makers)
  std::vector<int> pidfds_;  // per pair; -1 for a thread of this process or without pidfd
  bool armed_ = false;
  std::chrono::steady_clock::time_point nextCheck_{};
  std::vector<pollfd> checks_;
};

}  // namespace collx::transport::shm
