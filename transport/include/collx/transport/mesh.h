// Mesh: every pair of one context (one per peer, each over the transport chosen for it),
// and the progress loop that drives them.
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
#include "collx/base/setting.h"
#include "collx/transport/device.h"
#include "collx/transport/message.h"
#include "collx/transport/pair.h"
#include "collx/transport/request.h"
#include "collx/transport/shared_group.h"

namespace collx::secure {
class JobSecret;
class TlsContext;
}  // namespace collx::secure

namespace collx::transport {

using Clock = std::chrono::steady_clock;

// COLLX_HOST_ID, which the API also reads (its join record names the host); the transport's
// other settings are declared in mesh_options.cc and read through MeshOptions::fromConfig.
extern const AutoSetting<kind::String> kHostId;

// The address others on other hosts dial to reach a TCP service of this host (rank 0's
// store, when a bootstrap passes its address over MPI or PMIx): the address of the
// interface COLLX_IFNAME names in `config`, when set; else this host's name when it resolves to an
// address other than loopback; else its first interface address that is not loopback (IPv4 first);
// else its name. (A host whose /etc/hosts maps its own name to 127.0.1.1, as Debian's does, is
// reached by its interface's address.)
std::string reachableAddress(const Config& config);

struct MeshOptions {
  // The transport's settings at their declared defaults (mesh_options.cc).
  MeshOptions();
  // The environment over those defaults (explicit options, set afterwards, win over both).
  static MeshOptions fromConfig(const Config& config);
  // Throws InvalidArgument naming the setting when a value set in code lies outside its
  // setting's range (the Mesh checks its options with it).
  void validate() const;

  int rank = 0;
  int size = 1;
  std::string jobId = "default";
  std::int64_t generation = 0;
  // The job's secret, which every tcp connection between ranks proves both ways before it
  // is used; nullptr: none (then no rank of the job may have one).
  std::shared_ptr<const secure::JobSecret> secret;
  // TLS for the tcp connections between ranks (COLLX_TLS=1), after the secret's proofs;
  // nullptr: plain TCP (then no rank of the job may use TLS).
  std::shared_ptr<const secure::TlsContext> tls;
  Describer describer;
  // "auto" (the best transport per peer: self, shm within a host, ibverbs between hosts
  // that both have a usable RDMA port, tcp) or a transport name that every pair must use
  // ("tcp", "shm", "ibverbs").
  std::string transport;
  // TCP: streams per peer, the interface to use ("" = the one that routes to routeHost),
  // the size up to which messages are sent eagerly.
  int tcpStreams;
  std::string ifname;
  std::string routeHost;
  std::uint64_t eagerLimit;
  // Socket buffer size per direction; 0 leaves it to the kernel's autotuning, which grows
  // the buffers up to net.ipv4.tcp_wmem / tcp_rmem as bandwidth needs (setting a size turns
  // autotuning off and is capped by net.core.wmem_max / rmem_max).
  int tcpBufferBytes;
  // Whether this rank has a core to itself (its host's ranks do not outnumber their CPUs),
  // so that the peers of a connection send at the same time: then each sendmsg writes at
  // most 256 KiB (tcp_pair.cc). Not a setting: the API layer decides it from the join.
  bool tcpShortWrites = true;
  // Shared memory: bytes per ring (a power of two; 0: from the world size), the largest
  // message copied through the ring eagerly, whether large messages may be copied straight
  // from the sender's memory (CMA), a named /dev/shm arena instead of a memfd, and an
  // override of this host's identity (tests simulate several hosts with it).
  std::uint64_t shmRingBytes;
  std::uint64_t shmEagerLimit;
  // Payload bytes of each of the group buffers that collectives working on shared memory
  // directly use (SharedGroup; a multiple of 64).
  std::uint64_t shmGroupBytes;
  bool shmCma;
  bool shmPosix;
  // Whether the shared group's large collectives may read peers' buffers directly (the API
  // applies it once every rank agreed that they all can).
  DirectReads shmDirect;
  std::string hostId;
  // RDMA verbs: the library to load ("" = libibverbs.so.1), the devices and ports allowed
  // (COLLX_IB_HCA's syntax), the GID index (none: chosen), the eager limit, the bytes of user
  // buffers kept registered.
  std::string ibverbsLibrary;
  std::string ibHca;
  std::optional<int> ibGidIndex;
  std::uint64_t ibEagerLimit;
  std::uint64_t ibMrCacheBytes;
};

// COLLX_SHM_DIRECT's word `word` (given in code, named `what` in errors) as DirectReads.
DirectReads directReadsNamed(std::string_view word, std::string_view what);

// A hash of a job id and generation: what the transports write into their handshakes and
// arenas, so that a connection or arena of another job (or generation) is refused.
std::uint64_t jobHash(const std::string& job, std::int64_t generation);

// State every pair of a mesh shares.
struct LinkState {
  int rank = 0;
  Describer describer;
  // Collectives in progress on this rank (sequence number, fingerprint): a message of one
  // of them with another fingerprint is a mismatch at once, whatever its step. Few are in
  // flight at a time, so a flat list beats a hash map (no allocation per call).
  std::vector<std::pair<std::uint64_t, Fingerprint>> active;

  void addActive(std::uint64_t seq, const Fingerprint& fp) { active.emplace_back(seq, fp); }
  void removeActive(std::uint64_t seq) {
    for (std::size_t i = 0; i < active.size(); ++i) {
      if (active[i].first == seq) {
        active[i] = active.back();
        active.pop_back();
        return;
      }
    }
  }
  const Fingerprint* findActive(std::uint64_t seq) const {
    for (const auto& [s, fp] : active) {
      if (s == seq) return &fp;
    }
    return nullptr;
  }

  std::string describe(const MessageKey& key, const Fingerprint& fp) const;
};

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

 private:
  MeshOptions options_;
  LinkState link_;
  std::vector<std::unique_ptr<Device>> devices_;  // in priority order: self, shm, tcp
  std::vector<Pair*> pairs_;                      // by peer rank
  std::vector<std::string> transportNames_;
  SharedGroup* group_ = nullptr;
  std::vector<pollfd> fds_;
  std::vector<std::size_t> fdCounts_;  // per device, into fds_
  int wakeFd_ = -1;
  std::atomic<bool> abortRequested_{false};
  std::string abortReason_;
  mutable std::mutex failureMutex_;
  std::exception_ptr failure_;
  std::atomic<bool> failed_{false};
};

}  // namespace collx::transport
