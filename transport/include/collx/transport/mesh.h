// Mesh: every pair of one context (one per peer, each over the transport chosen for it),
// and the progress loop that drives them. It sits on top of the media (tcp, shm, ibverbs,
// self), which include only what they share (link.h, options.h) and never this header.
//
// Threading: post() and progress() are called by one thread at a time, the one driving
// progress (the engine serializes them); wakeup() and abort() may be called from any
// thread. After the first error the mesh is failed for good: every request in flight ends
// with that error, and later posts throw it.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "collx/base/error.h"
#include "collx/transport/device.h"
#include "collx/transport/link.h"
#include "collx/transport/message.h"
#include "collx/transport/options.h"
#include "collx/transport/pair.h"
#include "collx/transport/request.h"
#include "collx/transport/shared_group.h"

namespace collx::transport {

class Liveness;

class Mesh {
 public:
  // Creates the devices (a TCP listener bound and listening). Blocking only briefly.
  explicit Mesh(const MeshOptions& options);
  ~Mesh();
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  // This rank's address for peers: opaque, moved through the store by the API layer.
  std::string address() const;
  // Connects to every peer given every rank's address (indexed by rank), choosing each
  // pair's transport. Blocking, bounded by `deadline`: TimeoutError names the peers that
  // are missing, IoError those that cannot be reached.
  void connect(const std::vector<std::string>& addresses, Clock::time_point deadline);

  int rank() const noexcept { return options_.rank; }
  int size() const noexcept { return options_.size; }
  const MeshOptions& options() const noexcept { return options_; }
  // "self", "shm pid 1234, cma", "tcp 127.0.0.1:40123": for error messages and benchmark
  // headers.
  std::string describePeer(int peer) const;
  // The ranks this one shares memory with (this one among them), for collectives that work
  // on it directly; nullptr when there are none. Its failed waits fail the mesh.
  SharedGroup* sharedGroup() const noexcept { return group_; }
  // Transport names per peer ("self", "shm", "tcp"), indexed by rank.
  std::vector<std::string> transportNames() const;
  LinkState& link() noexcept { return link_; }

  // Posts a request on its peer's pair (see Pair::post). Throws the mesh's error if failed.
  void post(Request& request);

  // One round: waits up to `wait` for anything to happen (0: just looks), then moves what
  // can move. Returns true when anything happened. On a transport error, fails every
  // request in flight and throws it.
  // `tryDirect`: with no wait and few sockets, read each directly instead of polling first
  // (fewer system calls while spinning hard; more while spinning lightly).
  bool progress(std::chrono::microseconds wait, bool tryDirect = true);

  // Thread-safe: makes a progress() that is waiting return at once.
  void wakeup() noexcept;
  // Thread-safe: fails the mesh with Aborted; wakes a waiting progress().
  void abort(const std::string& why) noexcept;
  // Thread-safe: as abort(), with an error of `kind` naming `culprit` (-1: none) and saying
  // `why` (the driving thread fails the mesh with it, which tells every peer). The first
  // abort() or stop() wins.
  void stop(ErrorKind kind, int culprit, const std::string& why) noexcept;

  // The error that failed the mesh, if any (thread-safe).
  std::exception_ptr failure() const;
  // Failed, or abort() was called (thread-safe, two loads).
  bool stopped() const noexcept {
    return failed_.load(std::memory_order_acquire) ||
           abortRequested_.load(std::memory_order_acquire);
  }
  // Fails the mesh with Aborted if abort() was called, as the next progress() would (the
  // driver only); true when the mesh has failed, for that or another reason.
  bool applyAbort() noexcept;
  // Fails every request in flight with `error` and poisons the mesh (first error wins).
  void fail(const Error& error) noexcept;
  // The survivors of a failure go on over the same connections (Context::shrink): every
  // request has ended (the mesh fails first if it had not), the pairs with the peers `keep`
  // says (by rank; this rank's too) start afresh in `generation` (their frames carry it, mod
  // 256, and a frame of another is read and dropped), the others stay dead and are neither
  // read nor polled again; the mesh is healthy again, with no shared-memory group. Its ranks
  // keep their numbers (the new context maps its own onto them). The driving thread only,
  // with nothing in flight. Over ibverbs the kept queue pairs are reset and parked.
  void reform(std::int64_t generation, const std::vector<bool>& keep);
  // After reform(), once every member of the new generation has re-formed as well (they met
  // in the store): the devices may send to their peers again (ibverbs: the queue pairs'
  // HELLOs). The driving thread only.
  void resume();
  // After reform(): the pairs with `peers` (mesh ranks) end after all, as if reform() had
  // left them out (their requests fail with `error`; nothing of them is read again); the
  // mesh stays healthy. The driving thread only.
  void drop(const std::vector<int>& peers, const Error& error);
  // Context::grow, on a survivor: newcomers fill the places (mesh ranks) of peers that a
  // reform() left out. First joinAddress(): this rank's address blob for them (over tcp; a
  // new listener when `listen`, for newcomers of higher rank, who dial it); then admit():
  // the connections with the newcomers at `slots` given their blobs (tcp, both ways as
  // connect() makes them: the higher rank dials), blocking until `deadline`. The driving
  // thread only, with nothing in flight. Unsupported without a tcp transport.
  std::string joinAddress(bool listen);
  void admit(const std::vector<int>& slots, const std::vector<std::string>& addresses,
             Clock::time_point deadline);
  // Frames of an older generation that the pairs read and dropped (for tests).
  std::uint64_t staleFrames() const noexcept;
  // The generation the pairs carry: the mesh's, then the last reform()'s (any thread).
  std::int64_t generation() const noexcept { return generation_.load(std::memory_order_acquire); }

  // Whether liveness watches `peer` (liveness.h): on, the peer published a liveness address
  // and, on another host, answered a ping at connect.
  bool watched(int peer) const noexcept;
  // The recovery's failure detector (Context::agree): why `peer` is lost for certain (its
  // process exited, its connection closed, or nothing was heard of it since `since`, no
  // answer to the pings this sends either, for the peer timeout), else "". "Heard" is the
  // later of `since` and what the mesh last saw arrive from the peer: pass {} to count from
  // that alone. A silent peer is failed only once its pings have gone unanswered for a
  // quarter of the timeout, at most 0.25 s. Any thread; on a failed mesh too (it reads
  // nothing, it only looks).
  std::string lost(int peer, Clock::time_point since) noexcept;

 private:
  // While a call sleeps in progress(): fails the mesh naming a peer that requests wait on
  // and that has been silent for options_.peerTimeout, pinging it before (liveness.h).
  void checkLiveness(Clock::time_point now);
  // A wait on `peer` that heard nothing of it since `heard`: the error's text when that and
  // its last answer to a ping are the peer timeout ago, else "" (pinging it from a quarter
  // of the timeout, every livenessPeriod()). "" for a peer that is not watched. Any thread.
  std::string silence(int peer, Clock::time_point heard, Clock::time_point now) noexcept;
  Clock::duration livenessPeriod() const noexcept;
  // At the end of connect(): pings every peer on another host until each answered once, for
  // at most a couple of seconds; the peers that never did are no longer watched (logged).
  void probeLiveness(Clock::time_point deadline);

  MeshOptions options_;
  LinkState link_;
  std::vector<std::unique_ptr<Device>> devices_;  // in priority order: self, shm, tcp
  std::vector<Pair*> pairs_;                      // by peer rank
  std::vector<Device*> deviceOf_;                 // by peer rank: the device of its pair
  std::vector<std::string> transportNames_;
  SharedGroup* group_ = nullptr;
  // group_ from the devices' (at connect and at reform), wired to this mesh's failure,
  // abort and liveness.
  void adoptSharedGroup();
  std::vector<std::string> liveAddresses_;  // every peer's liveness address ("" none)
  std::vector<pollfd> fds_;
  std::vector<std::size_t> fdCounts_;  // per device, into fds_
  int wakeFd_ = -1;
  std::atomic<std::int64_t> generation_{0};
  std::atomic<bool> abortRequested_{false};  // set (release) once stopRequest_ is
  std::atomic<bool> stopClaimed_{false};
  StopRequest stopRequest_;
  mutable std::mutex failureMutex_;
  std::exception_ptr failure_;
  std::atomic<bool> failed_{false};
  // Liveness (nullptr when off): per peer, whether it is watched at all, whether requests
  // were in flight at the last check, the arrivals count then, and when the peer was last
  // heard of (an arrival, or the start of the wait).
  struct Watch {
    bool watched = false;
    bool busy = false;
    std::uint64_t arrivals = 0;
    Clock::time_point heard{};
    std::uint64_t seen = 0;  // arrivals at the last look, busy or not
  };
  // When a look (checkLiveness) last saw something arrive from each peer, or it connected:
  // written by the driving thread, read by lost() on any.
  void heard(int peer, Clock::time_point now) noexcept;
  Clock::time_point lastHeard(int peer) const noexcept;
  std::unique_ptr<std::atomic<std::int64_t>[]> heardAt_;
  std::unique_ptr<Liveness> liveness_;
  std::vector<Watch> watch_;
  Clock::time_point nextCheck_{};
};

}  // namespace collx::transport
