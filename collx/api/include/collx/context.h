// Context: one rank's membership of a job: its rank, the world size, the store, the peers
// it joined with, and its connections to them (the transports) that collectives run over.
//
// Joining (Context::create) happens under "collx/<job id>/<generation>/" in the store: each
// rank claims "rank/<r>" with its host and pid (two processes claiming one rank is a
// MismatchError naming both), checks that all agree on the world size, and waits until every
// rank has joined (TimeoutError naming the ranks that did not). Then every rank publishes its
// transport addresses and connects to every peer over the best transport for the pair. A
// new context of the same job joins under a new generation, so a job can form again without
// restarting its processes.
//
// Collectives (collx/collectives.h) on one context must be called in the same order on every
// rank. A context may be used from several threads, but calls are then ordered by whoever
// issues them first; after any error the context fails every later call with that error.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collx/bootstrap.h"
#include "collx/flight_record.h"
#include "collx/stats.h"

namespace collx {

class Config;

namespace rendezvous {
class Store;
class TcpStoreServer;
}  // namespace rendezvous

namespace secure {
class JobSecret;
class TlsContext;
}  // namespace secure

namespace detail {
struct Runtime;
class HangReporter;
class HangNotes;
}  // namespace detail

struct ContextOptions {
  std::string jobId = "default";
  std::int64_t generation = 0;
  int localRank = -1;
  // Rank 0 waits, when its context ends, for the others to leave first (bounded by the
  // timeout): set when rank 0 hosts the store.
  bool leaveBarrier = false;
  // Every rank records in the store when its context ends, and the last to leave erases the
  // job's keys of this generation, so that a store shared by many jobs keeps nothing of this
  // one (a failed context erases nothing: the keys expire, COLLX_STORE_TTL; a store that
  // rank 0 hosts dies with it). False leaves them (the torch backend: torch's store belongs
  // to torch).
  bool eraseKeys = true;
  // A store server this context keeps running until every rank has left (rank 0 under the
  // MASTER_ADDR convention or an MPI bootstrap); implies leaveBarrier on this rank.
  std::shared_ptr<rendezvous::TcpStoreServer> storeServer;
  // Deadline of every blocking wait of this context; unset means COLLX_TIMEOUT.
  std::optional<std::chrono::milliseconds> timeout;
  // Transports; unset values come from COLLX_TRANSPORT, COLLX_TCP_STREAMS, COLLX_IFNAME.
  std::optional<std::string> transport;
  std::optional<int> tcpStreams;
  std::optional<std::string> ifname;
  // Whether the shared-memory broadcast, allgather and allreduce may read large data straight
  // out of the other ranks' buffers: "auto", "never" or "always"; unset means
  // COLLX_SHM_DIRECT.
  std::optional<std::string> shmDirect;
  // How calls choose their algorithm where nothing names one: "table" (the rules file and
  // the built-in table) or "learn" (each size class tries every algorithm, then keeps the
  // one the ranks agree is fastest); unset means COLLX_SELECTION.
  std::optional<std::string> selection;
  // A host (the store's) whose route picks the TCP interface when COLLX_IFNAME is unset.
  std::string routeHost;
  // This rank's host identity, overriding hostname + boot id (and COLLX_HOST_ID): ranks with
  // the same one are on one host for the shared-memory transport and the hierarchical
  // algorithms. Tests simulate several hosts in one process with it.
  std::optional<std::string> hostId;
  // The most ranks this job may grow to: grow() appends newcomers after the places of the
  // ranks lost are taken, up to this size (its places are kept in every rank's mesh, with
  // no connection until a newcomer takes one). Every rank of a job must give the same; at
  // most the first size: no place beyond. Unset means COLLX_MAX_SIZE.
  std::optional<int> maxSize;
  // Calls the flight recorder keeps (0: none); unset means COLLX_TRACE_BUFFER.
  std::optional<std::size_t> traceBuffer;
  // The directory this rank writes its Chrome trace to ("": none); unset means COLLX_TRACE.
  std::optional<std::string> traceDir;
  // The job's secret (Bootstrap::resolve: COLLX_JOB_SECRET or COLLX_JOB_SECRET_FILE), which
  // the job's connections prove; nullptr: the job is unauthenticated.
  std::shared_ptr<const secure::JobSecret> secret;
  // TLS on the tcp connections between ranks (Bootstrap::resolve: COLLX_TLS=1); nullptr:
  // plain TCP. Every rank of a job must agree.
  std::shared_ptr<const secure::TlsContext> tls;
};

// Why a rank was found failed, as far as the rank that says so knows (FailedRank).
enum class FailureCause {
  kKilled,       // its process ended or it closed its context: a connection or segment
                 // closed, its process's pidfd, its queue pair failed
  kStopped,      // it answered nothing for COLLX_PEER_TIMEOUT on this host, where its process
                 // still exists (SIGSTOP, a debugger)
  kUnreachable,  // it answered nothing for COLLX_PEER_TIMEOUT from another host: stopped, its
                 // host down, or the network between them cut (no one can tell these apart)
  kExcluded,     // it did not come to the agreement by the deadline, or an earlier one left
                 // it out
  kUnknown,      // another rank found it failed; this one saw nothing of it
};
// "killed", "stopped", "unreachable", "excluded", "unknown".
const char* failureCauseName(FailureCause cause) noexcept;

struct FailedRank {
  int rank = -1;  // in the context that agreed
  FailureCause cause = FailureCause::kUnknown;
  std::string why;  // what this rank saw: the error, or what the agreement found
};

// What Context::agree() returns, the same on every rank it returns to (but for `causes`).
struct Agreement {
  // The AND of the flags of every rank that took part (the failed ranks' are not in it).
  std::uint64_t flags = 0;
  // This context's ranks found failed, ascending: the ones that did not take part.
  std::vector<int> failed;
  // One per failed rank, in the same order: why, as this rank knows it (each rank tells
  // from what it saw, so two ranks may give a failure different causes).
  std::vector<FailedRank> causes;
};

// What one agreement costs one rank in store requests and in keys (each key set, read or
// erased), when nothing fails and no wait runs out (each wait that runs out adds a request:
// of one key for a rank that waits for the answer, of up to `size` for a reader). A context
// of fewer than COLLX_AGREE_COORDINATOR_FROM ranks has `size` readers; a larger one, one
// (the coordinator) and size - 1 ranks that wait for the answer. `round` > 1 adds the
// erasure of the round before. `coordinatorFrom` 0: as COLLX_AGREE_COORDINATOR_FROM says.
// collx-sim --agree prints it for P up to 65536.
struct AgreementCost {
  int readers = 0;
  std::uint64_t readerRequests = 0, readerKeys = 0;
  std::uint64_t waiterRequests = 0, waiterKeys = 0;  // 0 when every rank reads
  std::uint64_t storeKeys = 0;                       // every rank's keys together
};
AgreementCost agreementCost(int size, std::int64_t coordinatorFrom = 0, std::uint64_t round = 2);

class Context;

// What Context::reform() returns, the same on every rank it returns to (ranks of the old
// context in `failed` and `rankOf`, of the new one in `joined`).
struct Reformed {
  std::shared_ptr<Context> context;  // the new context (this rank's)
  std::vector<int> failed;           // the old context's ranks found failed, ascending
  std::vector<int> joined;           // the new context's ranks that newcomers took
  std::vector<int> rankOf;           // per old rank: its rank in the new context, -1 if failed
  std::vector<FailedRank> causes;    // per failed rank, as Agreement::causes (this rank's view)
};

// What a rank told the others when it joined.
struct PeerInfo {
  int rank = -1;
  std::string hostname;
  std::string bootId;  // /proc/sys/kernel/random/boot_id: tells hosts with equal names apart
  std::int64_t pid = 0;
  int localRank = -1;
  std::string hostId;  // ContextOptions::hostId or COLLX_HOST_ID; empty: hostname + boot id
  std::string cpus;    // the CPUs it may run on (sched_getaffinity), e.g. "0-3,8"; empty: unknown
  // The process's start time (field 22 of /proc/<pid>/stat, clock ticks after boot; 0:
  // unknown): with the host and pid, tells it from a later process that reused the pid.
  std::uint64_t startTime = 0;
};

// The identity every rank groups hosts by: the override when given, else hostname + boot id.
std::string hostIdentity(const PeerInfo& peer);

std::shared_ptr<Context> join(const BootstrapOptions& options);

class Context : public std::enable_shared_from_this<Context> {
  friend std::shared_ptr<Context> join(const BootstrapOptions& options);

 public:
  // Joins `store` as `rank` of `size` (blocking, bounded by the timeout). The store is the
  // job's store; the context works in its own namespace inside it.
  static std::shared_ptr<Context> create(std::shared_ptr<rendezvous::Store> store, int rank,
                                         int size, const ContextOptions& options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  int localRank() const noexcept { return localRank_; }
  const std::string& jobId() const noexcept { return jobId_; }
  std::int64_t generation() const noexcept { return generation_; }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  // This context's namespace in the store ("collx/<job>/<generation>").
  const std::shared_ptr<rendezvous::Store>& store() const noexcept { return store_; }
  // Every rank's join record, indexed by rank.
  const std::vector<PeerInfo>& peers() const noexcept { return peers_; }
  // The transport of each peer ("self", "shm", "tcp"), indexed by rank, and a peer's connection
  // ("tcp 10.0.0.2:4321", "shm pid 1234, cma").
  std::vector<std::string> transports() const;
  std::string describePeer(int peer) const;
  // Whether every rank of this context shares memory with every other (one host, all pairs
  // over shm), so that the shared-memory algorithms ("shm") can run.
  bool sharedMemory() const noexcept;
  // Whether this host's ranks outnumber the CPUs they may run on together (their affinity
  // masks: taskset, a container's cpuset, collx-run's binding). Their waits then yield the
  // CPU at once instead of spinning first (COLLX_SPIN_US overrides).
  bool ranksOutnumberCpus() const noexcept { return outnumbered_; }
  // Thread-safe: wakes every call in flight, which fails with Aborted, as does every later
  // call.
  void abort(const std::string& why = "abort() was called");
  // Revokes this generation of the context (ULFM's MPIX_Comm_revoke), on every rank: every
  // call in flight and every later one fails with RevokedError, here and on every live rank
  // of the context (its sub-contexts too), whose error says that this rank revoked it, and
  // `why`. Any rank may call it, at any time, from any thread, as often as it likes: the
  // first revoke or failure is the one every rank reports. The ranks learn it over their
  // connections at once; the store's "revoked" key tells those that no connection reaches
  // (each rank's watcher looks at it every period of the hang report, 0.25-2 s). Writing
  // the key is bounded by the timeout; a store that fails is logged, the revoke stands.
  // Afterwards the context takes no more work: its survivors go on in a context of their
  // own (agree(), shrink()).
  void revoke(const std::string& why = "revoke() was called");
  // Agreement among the live ranks (ULFM's MPIX_Comm_agree), on a failed or revoked context
  // as on a healthy one: called by every live rank of the context (in the same order as its
  // other agreements), it returns to each of them the same Agreement: the AND of the flags
  // of the ranks that took part, and the ranks found failed. A rank is failed when its
  // process exited or its connection closed, when it answered nothing (no ping either) for
  // COLLX_PEER_TIMEOUT, when an error this rank saw names it as the one that broke (an
  // IoError), or when it had not come by the deadline (`timeout`, default this context's;
  // each rank waits at most that long). It goes through the store, which every rank already
  // trusts and which does not depend on any rank (the pairs may be what broke): each rank
  // writes its flags and the failures it knows, waits for every rank it does not know
  // failed, then proposes the result; the first proposal, taken atomically (compareSet),
  // is every rank's answer, so no rank coordinates and any rank may die at any point of it.
  // A rank the answer names as failed gets ExcludedError instead. Each rank waits for the
  // entries in one store request per slice (the store answers as soon as the last entry
  // came; slices of 1 ms at first, twice as long each time, up to 50 ms, between which it
  // looks for ranks lost and for an answer given): in all, 4 store requests per rank when
  // nothing more fails. Thread-safe
  // with this context's calls (it uses no connection). Throws the store's errors where the store
  // fails (a lost store ends the job).
  Agreement agree(std::uint64_t flags = ~std::uint64_t{0},
                  std::optional<std::chrono::milliseconds> timeout = {});
  // The survivors go on without the ranks that failed (ULFM's MPIX_Comm_shrink): called by
  // every live rank of a failed, revoked or healthy context (not a sub-context: shrink the
  // one it was split from), it agrees on who failed (agree(), so ExcludedError where the
  // others left this rank out), and returns a new context of the others: their ranks
  // renumbered in their order, a later generation (this one's + 1 the first time; a new
  // attempt after a failed one takes the next), its own namespace in the store. It opens no
  // connection and no shared-memory segment: the survivors' pairs go on, every frame says
  // its generation, and nothing of an older one is ever delivered (Mesh::reform). This
  // context is over once it returns: its calls, and those of its sub-contexts, fail with
  // RevokedError. Where the survivors are all on one host over shared memory, their
  // shared-memory group is made again in the same segments (its calls numbered apart from
  // the old generation's) and the shared-memory algorithms run; else the point-to-point
  // ones. A rank left out that still waits in an old shared-memory call fails with
  // ExcludedError once a survivor runs a call of the new generation. After a failure each rank
  // leaves the old generation before its entry in the agreement goes in; when every survivor did,
  // the agreement is also their meeting and nothing more is waited for once it answers (a
  // survivor lost after it is named by the first call of the new context: shrink() that
  // one again). Otherwise (a healthy context somewhere) the survivors meet in the new
  // generation after agreeing, and a survivor lost before all of them went on makes every
  // one throw IoError naming it (call shrink() again). Throws TimeoutError past `timeout`
  // (default this context's; the agreement and the meeting each wait at most that long),
  // Unsupported where a survivor is reached over ibverbs (its queue pairs cannot be reset
  // yet).
  std::shared_ptr<Context> shrink(std::optional<std::chrono::milliseconds> timeout = {});
  // Newcomers join the survivors (the grow; ULFM leaves it to MPI_Comm_spawn):
  // called by every live rank of a healthy context (not a sub-context), it agrees on who
  // takes part (as agree()), waits until `count` processes wait in collx::join() (up to
  // `timeout`, default this context's: then TimeoutError on every rank, and this context
  // goes on), and returns a new context of the ranks, then the newcomers appended, in the
  // next generation. Only the newcomers open connections (tcp, to every member; the
  // members' pairs go on); a newcomer takes the place in the mesh of a rank lost before, or
  // one kept beyond the job's first size (ContextOptions::maxSize, COLLX_MAX_SIZE), so at
  // most as many newcomers join as those places (InvalidArgument beyond). This context is
  // over once it returns, as after shrink();
  // IoError when a member or newcomer is lost meanwhile (every member throws it: call
  // grow() or shrink() again).
  std::shared_ptr<Context> grow(int count = 1,
                                std::optional<std::chrono::milliseconds> timeout = {});
  // Revoke, agree, shrink and grow in one call: every live rank calls it after an error (or
  // to check). A failed context is revoked (every pending call on every rank ends; a healthy
  // one is not, call revoke() first where some rank may be blocked), the live ranks agree on
  // who failed, and newcomers already waiting in collx::join(), or arriving within
  // `replacementWait` (default 0), take the failed ranks' places, so that the other ranks
  // keep their numbers (data shards stay where they were); failed ranks with no newcomer
  // are left out, the ranks after them renumbered. Returns the new context and what
  // changed. Errors as shrink() and grow().
  Reformed reform(std::optional<std::chrono::milliseconds> timeout = {},
                  std::optional<std::chrono::milliseconds> replacementWait = {});
  // The flight recorder: this context's last calls (COLLX_TRACE_BUFFER of them), oldest
  // first; empty when the recorder is off. Thread-safe, and it never blocks a call.
  std::vector<FlightEntry> flightRecord() const;
  // A hang report now: every rank's flight recorder summarized through the store (ranks
  // answer from a watcher thread, whatever they are doing) and joined into one diagnosis,
  // which it returns (and logs, and writes to COLLX_HANG_REPORT_DIR). Blocks up to a grace
  // (about a second); ranks that do not answer in time are reported as not responding.
  // With the recorder off (COLLX_TRACE_BUFFER=0): an InvalidArgument.
  std::string dumpState();
  // What this context has done since it connected: messages and bytes per peer and
  // transport, calls per collective and algorithm, failed calls, time spent waiting
  // (collx/stats.h). Thread-safe; it never blocks a call.
  ContextStats stats() const;
  // The trace file this rank writes (COLLX_TRACE), or "" when it writes none.
  std::string tracePath() const;

  // A sub-context of `ranks` (this context's ranks; a rank's place in the list is its rank
  // there), over this context's connections and without a new rendezvous, as NCCL's
  // ncclCommSplit: called by every rank in `ranks` (and no other) with the same list and the
  // same `name`; a name may come again, in the same order on every member. It costs two
  // rounds through the store (bounded by `timeout`, default this context's): the first rank
  // of the list takes the sub-context's number and publishes it, then every member says
  // whether its list is the one published. A list that differs fails the split on every
  // member with a MismatchError naming a rank whose list differs; a member that never comes
  // is a TimeoutError naming it. Its collectives have their own sequence, so they interleave
  // freely with this context's and other sub-contexts' on any thread (point-to-point tags
  // are its own too). Where its ranks share memory it has a shared-memory group of its own
  // in a slot of its members' shared memory (no new mapping or descriptor; the ack round
  // agrees on the slot; 8 live sub-groups per rank at most, COLLX_SPLIT_SHM), so that the
  // shared-memory algorithms run in it; else (or beyond 8) its collectives take the
  // point-to-point algorithms over the shared connections. It shares this context's fate: an
  // error or abort() on either fails both, and every sibling; the transport's errors name
  // this context's ranks (the mesh's), the API's the sub-context's. Its stats() are its
  // parent's counters (one set per connection, mapped to its ranks); it keeps its own flight
  // record, which the hang report does not cover (dumpState() reports the parent's). It
  // keeps its parent alive (the parent leaves the job when its last split is gone), and may
  // be split again.
  std::shared_ptr<Context> split(const std::vector<int>& ranks, const std::string& name,
                                 std::optional<std::chrono::milliseconds> timeout = {});
  // The context this one was split from (nullptr: none).
  const std::shared_ptr<Context>& parent() const noexcept { return parent_; }

  // Internal: the collectives' machinery.
  const std::shared_ptr<detail::Runtime>& runtime() const noexcept { return runtime_; }

 private:
  struct Key {};

 public:
  // Use create() or init().
  Context(Key, std::shared_ptr<rendezvous::Store> store, int rank, int size,
          const ContextOptions& options);
  // Use split().
  Context(Key, std::shared_ptr<Context> parent, std::vector<int> members, std::uint64_t subContext,
          std::chrono::milliseconds timeout);
  // Use shrink(), grow(), reform(): `members` in `generation`, each a rank of `old` or, for
  // -1 - i, the newcomer `newcomers[i]` (its place in the mesh, what it told).
  Context(Key, const Context& old, const std::vector<int>& members, std::int64_t generation,
          const std::vector<std::pair<int, PeerInfo>>& newcomers = {});
  // Internal (collx::join): a newcomer's connections and machinery, given its place.
  struct Newcomer;
  void connectNewcomer(const ContextOptions& options, const Newcomer& joining);

 private:
  void join();
  void connect(const ContextOptions& options);
  // The hang report's watcher for this context (connect, and a shrunk context, which takes
  // over the reporter of the context it came from: its store connection, not a new one).
  void startReporter(const Config& config, const detail::HangReporter* predecessor = nullptr);
  // A context of `members` of `from` (split, shrink): its peers renumbered, its local rank,
  // and a runtime over `from`'s engine with the members' mesh ranks and a recorder of its
  // own. (rank_, size_ and timeout_ set before.)
  void adoptMembers(const Context& from, const std::vector<int>& members,
                    const std::vector<std::pair<int, PeerInfo>>& newcomers = {});
  // shrink, grow and reform: the members of the next generation once `agreed` (with
  // `wanted` newcomers appended, or in the failed ranks' places when `inPlace`, waiting up
  // to `joinWait` for them; `wanted` < 0: as many as there are failed places).
  // `left`: the attempt and the pairs kept of a generation this rank left before agreeing
  // (shrink: the agreement was the meeting); null: regroup leaves it, and the members meet.
  struct Left;
  std::shared_ptr<Context> regroup(const Agreement& agreed, int wanted, bool inPlace,
                                   std::chrono::milliseconds joinWait,
                                   std::chrono::milliseconds wait, std::vector<int>* joined,
                                   const Left* left = nullptr);
  // agree(), calling `entering(failed)` (the ranks this rank knows failed, in order) just
  // before this rank's entry goes in.
  Agreement agreeEntering(std::uint64_t flags, std::chrono::milliseconds wait,
                          const std::function<void(const std::vector<int>&)>& entering);
  void leave() noexcept;
  // The last rank to leave: erases every key of this generation.
  void eraseKeys();

  int rank_;
  int size_;
  int localRank_;
  std::string jobId_;
  std::int64_t generation_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<rendezvous::Store> store_;
  // The job's store itself (signed where it must be), whose "collx/<job>/<generation>" is
  // store_: a shrunk context's namespace is made from it.
  std::shared_ptr<rendezvous::Store> rootStore_;
  std::vector<PeerInfo> peers_;
  std::string hostId_;  // the override this rank publishes (empty: none)
  std::shared_ptr<detail::Runtime> runtime_;
  std::shared_ptr<detail::HangReporter> reporter_;
  std::shared_ptr<detail::HangNotes> notes_;  // what the engine's hang notes say (shared)
  bool leaveBarrier_;
  bool eraseKeys_;
  bool formed_ = false;  // joined and connected: it erases when it is the last to leave
  bool outnumbered_ = false;
  // The store server this rank hosts, if any; it outlives the others' use of it.
  std::shared_ptr<rendezvous::TcpStoreServer> server_;
  // A sub-context's parent and its number (0: not a sub-context).
  std::shared_ptr<Context> parent_;
  std::uint64_t subContext_ = 0;
};

// A newcomer joins a running job whose survivors call grow() or reform(): through the job's
// store (`options.storeObject`, else COLLX_STORE, else tcp://MASTER_ADDR:MASTER_PORT) and
// job id (COLLX_JOB_ID...), with its secret and timeout as init() finds them; its rank and
// world size come from the survivors (any that the environment sets are ignored). Blocks
// until the survivors take it, up to the timeout (TimeoutError).
std::shared_ptr<Context> join(const BootstrapOptions& options = {});

// Bootstraps from the environment (see bootstrap.h) and joins: the usual way in. `used`,
// when given, receives the bootstrap as it was used (under PMIx: with the store rank 0
// started and the secret it passed).
std::shared_ptr<Context> init(const BootstrapOptions& options = {}, Bootstrap* used = nullptr);

// This process's join record: host name, boot id, pid, start time and CPUs.
PeerInfo localPeerInfo(int rank, int localRank);

}  // namespace collx
