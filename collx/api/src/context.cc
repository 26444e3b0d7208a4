#include "collx/context.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "collx/algorithms/settings.h"
#include "collx/base/config.h"
#include "collx/base/log.h"
#include "collx/rendezvous/prefix_store.h"
#include "collx/rendezvous/signed_store.h"
#include "collx/rendezvous/store.h"
#include "collx/rendezvous/tcp_store.h"
#include "collx/secure/job_secret.h"
#include "collx/settings.h"
#include "diagnostics/hang_report.h"
#include "diagnostics/process_probe.h"
#include "diagnostics/trace.h"
#include "faults.h"
#include "recovery.h"
#include "runtime.h"

namespace collx {

using rendezvous::Bytes;

namespace {

Bytes encodePeer(const PeerInfo& info) {
  std::string text = "host=" + info.hostname + "\nboot=" + info.bootId +
                     "\npid=" + std::to_string(info.pid) +
                     "\nlocal_rank=" + std::to_string(info.localRank) + "\n";
  if (!info.hostId.empty()) text += "host_id=" + info.hostId + "\n";
  if (!info.cpus.empty()) text += "cpus=" + info.cpus + "\n";
  if (info.startTime != 0) text += "start=" + std::to_string(info.startTime) + "\n";
  return rendezvous::toBytes(text);
}

PeerInfo decodePeer(int rank, const Bytes& bytes) {
  PeerInfo info;
  info.rank = rank;
  std::istringstream in(rendezvous::toString(bytes));
  std::string line;
  while (std::getline(in, line)) {
    std::size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq);
    std::string value = line.substr(eq + 1);
    try {
      if (key == "host") info.hostname = value;
      if (key == "boot") info.bootId = value;
      if (key == "pid") info.pid = std::stoll(value);
      if (key == "local_rank") info.localRank = std::stoi(value);
      if (key == "host_id") info.hostId = value;
      if (key == "cpus") info.cpus = value;
      if (key == "start") info.startTime = std::stoull(value);
    } catch (const std::exception&) {
      // A malformed field leaves the default; the record is informational.
    }
  }
  return info;
}

// This thread's CPUs (sched_getaffinity) as a list of ranges, "0-3,8"; empty when unknown.
std::string affinityList() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return {};
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    int last = c;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    out += (out.empty() ? "" : ",") + std::to_string(c);
    if (last > c) out += "-" + std::to_string(last);
    c = last;
  }
  return out;
}

// Adds the CPUs of such a list to `cpus`; false when it is empty or not such a list.
bool addCpuList(const std::string& list, std::set<int>& cpus) {
  std::istringstream in(list);
  std::string range;
  bool any = false;
  while (std::getline(in, range, ',')) {
    int first = 0, last = 0;
    char dash = 0;
    std::istringstream r(range);
    if (!(r >> first) || first < 0) return false;
    last = first;
    if (r >> dash && (dash != '-' || !(r >> last) || last < first || last - first > 65536)) {
      return false;
    }
    for (int c = first; c <= last; ++c) cpus.insert(c);
    any = true;
  }
  return any;
}

// Whether `peers`' ranks on the host of `peers[self]` outnumber the CPUs their affinity
// masks allow together (every online CPU when a rank did not say which: `known` false).
bool outnumberCpus(const std::vector<PeerInfo>& peers, int self, int& local, std::size_t& cores,
                   bool& known) {
  const PeerInfo& me = peers[static_cast<std::size_t>(self)];
  local = 0;
  known = true;
  std::set<int> cpus;
  for (const PeerInfo& peer : peers) {
    if (peer.hostname != me.hostname || peer.bootId != me.bootId) continue;
    ++local;
    known = addCpuList(peer.cpus, cpus) && known;
  }
  cores = known ? cpus.size() : std::max(1u, std::thread::hardware_concurrency());
  return static_cast<std::size_t>(local) > cores;
}

std::string describeClaimant(const PeerInfo& info) {
  return "pid " + std::to_string(info.pid) + " on host " + info.hostname;
}

std::string rankKey(int rank) { return "rank/" + std::to_string(rank); }

std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size() && i < 16; ++i) {
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  if (ranks.size() > 16) out += ", ... " + std::to_string(ranks.size() - 16) + " more";
  return out;
}

// Every rank's host index (hosts numbered in the order of their lowest rank) and the
// number of hosts: the same on every rank, from the same join records.
std::pair<std::vector<int>, int> hostLayout(const std::vector<PeerInfo>& peers) {
  std::map<std::string, int> index;
  std::vector<int> hostOf;
  hostOf.reserve(peers.size());
  for (const PeerInfo& peer : peers) {
    hostOf.push_back(
        index.emplace(hostIdentity(peer), static_cast<int>(index.size())).first->second);
  }
  return {std::move(hostOf), static_cast<int>(index.size())};
}

}  // namespace

namespace detail {
Bytes encodePeerInfo(const PeerInfo& info) { return encodePeer(info); }
PeerInfo decodePeerInfo(int rank, const Bytes& bytes) { return decodePeer(rank, bytes); }
}  // namespace detail

std::string hostIdentity(const PeerInfo& peer) {
  if (!peer.hostId.empty()) return "id\n" + peer.hostId;
  return "host\n" + peer.hostname + "\n" + peer.bootId;
}

PeerInfo localPeerInfo(int rank, int localRank) {
  PeerInfo info;
  info.rank = rank;
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0) info.hostname = host;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::getline(boot, info.bootId);
  info.pid = ::getpid();
  info.localRank = localRank;
  info.cpus = affinityList();
  info.startTime = detail::ownStartTime();
  return info;
}

Context::Context(Key, std::shared_ptr<rendezvous::Store> store, int rank, int size,
                 const ContextOptions& options)
    : rank_(rank),
      size_(size),
      localRank_(options.localRank),
      jobId_(options.jobId),
      generation_(options.generation),
      timeout_(options.timeout ? *options.timeout : rendezvous::kTimeout.get(Config::process())),
      hostId_(options.hostId.value_or(transport::kHostId.get(Config::process()).value_or(""))),
      leaveBarrier_(options.leaveBarrier || options.storeServer != nullptr),
      eraseKeys_(options.eraseKeys),
      server_(options.storeServer) {
  warnUnknownVariables();
  Where where{rank, "Context::create", -1};
  if (!store) throw InvalidArgument(where, "the store is null");
  if (size < 1) throw InvalidArgument(where, "size " + std::to_string(size) + " is not positive");
  if (rank < 0 || rank >= size) {
    throw InvalidArgument(
        where, "rank " + std::to_string(rank) + " is outside [0, " + std::to_string(size) + ")");
  }
  if (timeout_.count() <= 0) {
    throw InvalidArgument(
        where, "timeout must be positive, got " + std::to_string(timeout_.count()) + " ms");
  }
  rendezvous::StoreOptions storeOptions;
  storeOptions.timeout = timeout_;
  storeOptions.rank = rank;
  // With a secret, a store that others can write gets its values signed.
  store = rendezvous::SignedStore::wrapIfNeeded(std::move(store), options.secret);
  rootStore_ = store;
  store_ = std::make_shared<rendezvous::PrefixStore>(
      "collx/" + jobId_ + "/" + std::to_string(generation_), std::move(store), storeOptions);
}

std::shared_ptr<Context> Context::create(std::shared_ptr<rendezvous::Store> store, int rank,
                                         int size, const ContextOptions& options) {
  auto context = std::make_shared<Context>(Key{}, std::move(store), rank, size, options);
  context->join();
  context->connect(options);
  context->formed_ = true;
  return context;
}

void Context::join() {
  Where where{rank_, "join(job " + jobId_ + ", generation " + std::to_string(generation_) + ")",
              -1};
  const auto started = std::chrono::steady_clock::now();
  PeerInfo self = localPeerInfo(rank_, localRank_);
  self.hostId = hostId_;
  Bytes mine = encodePeer(self);
  Bytes claimed = store_->compareSet(rankKey(rank_), {}, mine);
  if (claimed != mine) {
    throw MismatchError(where, "rank " + std::to_string(rank_) + " is already taken by " +
                                   describeClaimant(decodePeer(rank_, claimed)) +
                                   ": two processes were given the same rank, or the store "
                                   "still holds an earlier job's keys (use a new COLLX_JOB_ID "
                                   "or COLLX_GENERATION, or a fresh store)");
  }
  Bytes size = rendezvous::toBytes(std::to_string(size_));
  Bytes agreed = store_->compareSet("world_size", {}, size);
  if (agreed != size) {
    throw MismatchError(where, "this rank was started with world size " + std::to_string(size_) +
                                   " but another rank joined with world size " +
                                   rendezvous::toString(agreed));
  }
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) keys.push_back(rankKey(r));
  std::vector<Bytes> records;
  try {
    records = store_->multiGet(keys, timeout_);
  } catch (const TimeoutError&) {
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (!store_->check({rankKey(r)})) missing.push_back(r);
    }
    throw TimeoutError(where, std::to_string(missing.size()) + " of " + std::to_string(size_) +
                                  " ranks did not join within " + std::to_string(timeout_.count()) +
                                  " ms: rank" + (missing.size() == 1 ? " " : "s ") +
                                  rankList(missing) + " (store " + store_->describe() + ")");
  }
  peers_.clear();
  for (int r = 0; r < size_; ++r) peers_.push_back(decodePeer(r, records[r]));
  COLLX_DEBUG(kRdzv, "rank {}: joined job {} generation {} as rank {} of {} in {} ms", rank_,
              jobId_, generation_, rank_, size_,
              std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - started)
                  .count());
}

namespace {

// ---- connect()'s steps ----

// The transport's settings: the environment over their defaults, then the options set in
// code over both.
transport::MeshOptions meshOptions(const ContextOptions& options, const Config& config,
                                   const Where& where) {
  transport::MeshOptions mesh = transport::MeshOptions::fromConfig(config);
  mesh.secret = options.secret;
  mesh.tls = options.tls;
  mesh.describer = detail::describeMessage;
  if (options.transport) mesh.transport = *options.transport;
  if (options.tcpStreams) mesh.tcp.streams = *options.tcpStreams;
  if (options.ifname) mesh.tcp.ifname = *options.ifname;
  mesh.tcp.routeHost = options.routeHost;
  if (options.shmDirect) {
    try {
      mesh.shm.direct =
          transport::directReadsNamed(*options.shmDirect, "ContextOptions::shmDirect");
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(where, e.detail());
    }
  }
  return mesh;
}

// Every rank's transport addresses through the store (one key per rank, one multiGet), then
// the connections, all within `timeout`.
// The places a mesh keeps for newcomers (mesh.formed up to mesh.size) publish nothing.
std::unique_ptr<transport::Mesh> connectMesh(const transport::MeshOptions& mesh,
                                             rendezvous::Store& store,
                                             std::chrono::milliseconds timeout,
                                             const Where& where) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto transports = std::make_unique<transport::Mesh>(mesh);
  store.set("transport/" + std::to_string(mesh.rank), transports->address());
  const int forming = mesh.formed > 0 ? mesh.formed : mesh.size;
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(forming));
  for (int r = 0; r < forming; ++r) keys.push_back("transport/" + std::to_string(r));
  std::vector<rendezvous::Bytes> blobs;
  try {
    blobs = store.multiGet(keys, timeout);
  } catch (const TimeoutError& e) {
    throw TimeoutError(where, "not every rank published its transport addresses within " +
                                  std::to_string(timeout.count()) + " ms: " + e.detail());
  }
  std::vector<std::string> addresses(static_cast<std::size_t>(mesh.size));
  for (std::size_t r = 0; r < blobs.size(); ++r) addresses[r] = rendezvous::toString(blobs[r]);
  transports->connect(addresses, deadline);
  return transports;
}

// The engine's settings; its hang reports append what `notes` holds about a call.
algorithms::EngineOptions engineOptionsFor(const ContextOptions& options, const Config& config,
                                           bool outnumbered,
                                           const std::shared_ptr<detail::HangNotes>& notes) {
  algorithms::EngineOptions engine = algorithms::engineOptions(config, outnumbered);
  if (options.traceBuffer) engine.traceBuffer = *options.traceBuffer;
  engine.hangNote = [notes](std::uint64_t id) {
    std::string text = notes->noteFor(id);
    return text.empty() ? text : "\n" + text;
  };
  engine.callCounters = detail::Runtime::callCounters();
  engine.onStep = detail::stepFaults();  // (COLLX_FAULT's collective steps; empty: none)
  return engine;
}

// The runtime the collectives run on: the engine over the connected transports, the hosts'
// layout and how algorithms are chosen (table or learned). Shared memory is settled after,
// once every rank agreed (agreeOnSharedMemory).
std::shared_ptr<detail::Runtime> makeRuntime(std::unique_ptr<transport::Mesh> transports,
                                             const algorithms::EngineOptions& engine,
                                             const ContextOptions& options, const Config& config,
                                             const std::vector<PeerInfo>& peers,
                                             std::chrono::milliseconds timeout,
                                             const Where& where) {
  const int rank = where.rank, size = static_cast<int>(peers.size());
  auto runtime = std::make_shared<detail::Runtime>();
  runtime->engine = std::make_unique<algorithms::Engine>(std::move(transports), engine);
  runtime->rank = rank;
  runtime->size = size;
  runtime->generation = runtime->engine->generation();
  runtime->timeout = timeout;
  std::tie(runtime->hostOf, runtime->hosts) = hostLayout(peers);
  runtime->chunkBytes = algorithms::kChunkBytes.get(config);
  try {
    runtime->policy = algorithms::SelectionPolicy::fromConfig(config, size == 1, runtime->hosts);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(where, e.detail());
  }
  const std::string selection = options.selection.value_or(algorithms::kSelection.get(config));
  if (selection != "table" && selection != "learn") {
    throw InvalidArgument(
        where, "ContextOptions::selection is '" + selection + "': it must be 'table' or 'learn'");
  }
  if (selection == "learn") {
    runtime->learner = std::make_unique<algorithms::Learner>(
        static_cast<int>(algorithms::kLearnTrials.get(config)));
  }
  if (!runtime->policy.rulesPath.empty()) {
    COLLX_DEBUG(kAlgo, "rank {}: selection: the rows of {} {} before the built-in table", rank,
                runtime->policy.rulesOrigin, runtime->policy.rulesPath);
  }
  return runtime;
}

// The shared-memory algorithms need every rank in one group; every rank must know whether
// all are, or some would take them and others not. Their waits must agree too whether ranks
// outnumber cores (the barrier takes another form then): no rank spins unless every rank
// does; and whether every rank can read every other's memory (direct reads in the group).
// One agreement settles those and whether every rank traces (returned).
bool agreeOnSharedMemory(detail::Runtime& runtime, const algorithms::EngineOptions& engine,
                         transport::DirectReads shmDirect, bool tracing) {
  if (runtime.size == 1) return true;
  transport::SharedGroup* group = runtime.engine->mesh().sharedGroup();
  const bool whole = group != nullptr && group->size() == runtime.size;
  constexpr std::uint8_t kWhole = 1, kSpins = 2, kReads = 4, kTraces = 8;
  const std::uint8_t all = detail::everyRank(
      runtime, static_cast<std::uint8_t>(
                   (whole ? kWhole : 0) | (engine.spin.count() > 0 ? kSpins : 0) |
                   (whole && group->canReadPeers() ? kReads : 0) | (tracing ? kTraces : 0)));
  if ((all & kWhole) && group != nullptr) {  // every rank's bit, this one's too
    runtime.group = group;
    runtime.policy.sharedMemory = true;
    const auto spin = (all & kSpins) ? engine.spin : std::chrono::microseconds(0);
    group->setPolicy(transport::WaitPolicy{spin, engine.yield});
    group->setDirectReads((all & kReads) ? shmDirect : transport::DirectReads::kNever);
    COLLX_DEBUG(kShm, "rank {}: shared-memory group of {}, direct reads: {}", runtime.rank,
                runtime.size, transport::kDirectReadsNames[static_cast<int>(group->directReads())]);
  }
  return (all & kTraces) != 0;
}

// The trace's clock, measured against rank 0's when every rank traces (rank 0 would wait
// for the others' pings otherwise), then the engine's tracer.
void startTracing(detail::Runtime& runtime, std::shared_ptr<algorithms::Tracer> tracer,
                  bool everyRankTraces) {
  algorithms::Tracer::Clock clock;
  if (everyRankTraces) {
    const auto started = std::chrono::steady_clock::now();
    clock = detail::measureClock(runtime);
    COLLX_DEBUG(kCore,
                "rank {}: clock offset to rank 0 {} ns ({}; round trip {} ns, {} rounds), in "
                "{} us",
                runtime.rank, clock.offsetNs, algorithms::Tracer::clockSourceName(clock.source),
                clock.roundTripNs, clock.rounds,
                std::chrono::duration_cast<std::chrono::microseconds>(
                    std::chrono::steady_clock::now() - started)
                    .count());
  } else {
    COLLX_WARN(kCore,
               "rank {}: tracing to {}, but not every rank traces: this trace's clock is not "
               "aligned with rank 0's",
               runtime.rank, tracer->path());
  }
  tracer->setClock(clock);
  runtime.tracePath = tracer->path();
  runtime.engine->setTracer(std::move(tracer));
}

}  // namespace

void Context::connect(const ContextOptions& options) {
  const Config& config = Config::process();
  const Where where{rank_, "connect", -1};
  transport::MeshOptions mesh = meshOptions(options, config, where);
  mesh.rank = rank_;
  mesh.size = size_;
  const int maxSize = options.maxSize.value_or(static_cast<int>(detail::kMaxSize.get(config)));
  if (maxSize > size_) {
    mesh.size = maxSize;  // places kept for newcomers that grow() appends
    mesh.formed = size_;
  }
  mesh.jobId = jobId_;
  mesh.generation = generation_;
  mesh.shm.hostId = hostId_;
  // Spinning while waiting (and TCP's short writes) pay off when this rank has a core to
  // itself: when this host's ranks do not outnumber the CPUs that their affinity masks allow
  // together (a container's cpuset may allow far fewer than the host has online; when a rank
  // did not say, every online CPU counts).
  int local = 0;
  std::size_t cores = 0;
  bool known = true;
  outnumbered_ = outnumberCpus(peers_, rank_, local, cores, known);
  COLLX_DEBUG(kShm, "rank {}: {} ranks on this host, {} CPUs{}", rank_, local, cores,
              known ? "" : " (online; some rank did not say which it may use)");
  // Ranks that run at once on their own cores exchange both ways at once: short writes let
  // both directions of a connection move (tcp_pair.cc, kWriteBytes). Ranks that take turns
  // on cores write more per turn instead.
  mesh.tcp.shortWrites = !outnumbered_;
  auto transports = connectMesh(mesh, *store_, timeout_, where);

  notes_ = std::make_shared<detail::HangNotes>();
  const algorithms::EngineOptions engine = engineOptionsFor(options, config, outnumbered_, notes_);
  // A trace (COLLX_TRACE): its file is made now, so that a directory it cannot write fails
  // here; its clock is measured once every rank agreed that all of them trace.
  std::shared_ptr<algorithms::Tracer> tracer;
  if (const auto dir = detail::traceDirectory(options.traceDir, config)) {
    tracer = std::make_shared<algorithms::Tracer>(
        *dir,
        algorithms::Tracer::Identity{rank_, size_, peers_[static_cast<std::size_t>(rank_)].hostname,
                                     jobId_, generation_});
  }
  runtime_ = makeRuntime(std::move(transports), engine, options, config, peers_, timeout_, where);
  const bool everyRankTraces =
      agreeOnSharedMemory(*runtime_, engine, mesh.shm.direct, tracer != nullptr);
  if (tracer) startTracing(*runtime_, std::move(tracer), everyRankTraces);
  // What the library sent while connecting is not the user's.
  runtime_->engine->resetStats();
  COLLX_DEBUG(kTcp, "rank {}: connected to {} peers{}", rank_, size_ - 1,
              runtime_->group ? ", all over shared memory" : "");

  startReporter(config);
}

void Context::connectNewcomer(const ContextOptions& options, const Newcomer& joining) {
  const Config& config = Config::process();
  const Where where{rank_,
                    "join(job " + jobId_ + ", generation " + std::to_string(generation_) + ")", -1};
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  // Over tcp to every member (the members' shared memory takes no peer after it formed).
  transport::MeshOptions mesh = meshOptions(options, config, where);
  mesh.rank = joining.slot;
  mesh.size = joining.meshSize;
  mesh.jobId = jobId_;
  mesh.generation = joining.formed;
  mesh.joinGeneration = generation_;
  mesh.transport = "tcp";
  mesh.shm.hostId = hostId_;
  auto transports = std::make_unique<transport::Mesh>(mesh);
  // An outcome other than "ok" (recovery.h): this attempt is over for every member alike.
  auto failed = [&](const std::string& outcome) {
    std::string word, why;
    int who = -1;
    if (!detail::parseOutcome(outcome, size_, word, who, why)) {
      throw MismatchError(where,
                          "the store holds a malformed outcome: '" + outcome.substr(0, 200) + "'");
    }
    throw IoError(Where{rank_, where.op, who},
                  who == rank_ ? "this newcomer could not join: " + why
                               : "rank " + std::to_string(who) + " of the new context " +
                                     (word == "failed" ? "could not go on" : "was lost") +
                                     " before it formed (" + why + "); the members try again");
  };
  // Every member says where it is first (its address blob), then the connections.
  const std::string published = detail::meet(
      *store_, "grow", rank_, size_, transports->address(), "", [](int) { return std::string(); },
      timeout_);
  if (published != "ok") failed(published);
  std::string failure;
  try {
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) keys.push_back(detail::readyKey("grow", r));
    }
    const std::vector<Bytes> blobs = store_->multiGet(keys, timeout_);
    std::vector<std::string> addresses(static_cast<std::size_t>(joining.meshSize));
    for (int r = 0, k = 0; r < size_; ++r) {
      const auto at = static_cast<std::size_t>(joining.slots[static_cast<std::size_t>(r)]);
      addresses[at] = r == rank_ ? transports->address()
                                 : rendezvous::toString(blobs[static_cast<std::size_t>(k++)]);
    }
    transports->connect(addresses, deadline);
    detail::faultAt("join.connected", rank_);
  } catch (const Error& e) {
    failure = e.what();
  }
  PeerInfo self = localPeerInfo(rank_, -1);
  self.hostId = hostId_;
  const auto met = std::chrono::steady_clock::now();
  const std::string outcome = detail::meet(
      *store_, "shrink", rank_, size_, rendezvous::toString(encodePeer(self)), failure,
      [&](int r) { return transports->lost(joining.slots[static_cast<std::size_t>(r)], met); },
      timeout_);
  if (outcome != "ok") failed(outcome);
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) keys.push_back(detail::readyKey("shrink", r));
  const std::vector<Bytes> records = store_->multiGet(keys, timeout_);
  peers_.clear();
  for (int r = 0; r < size_; ++r) {
    peers_.push_back(decodePeer(r, records[static_cast<std::size_t>(r)]));
  }
  int local = 0;
  for (int r = 0; r < rank_; ++r) {
    local += hostIdentity(peers_[static_cast<std::size_t>(r)]) == hostIdentity(self);
  }
  localRank_ = local;
  std::size_t cores = 0;
  bool known = true;
  int onHost = 0;
  outnumbered_ = outnumberCpus(peers_, rank_, onHost, cores, known);
  notes_ = std::make_shared<detail::HangNotes>();
  const algorithms::EngineOptions engine = engineOptionsFor(options, config, outnumbered_, notes_);
  runtime_ = makeRuntime(std::move(transports), engine, options, config, peers_, timeout_, where);
  runtime_->meshRanks = joining.slots;
  runtime_->engine->resetStats();
  COLLX_DEBUG(kCore, "rank {}: joined job {} in generation {} as rank {} of {} (place {} of {})",
              rank_, jobId_, generation_, rank_, size_, joining.slot, joining.meshSize);
  startReporter(config);
}

void Context::startReporter(const Config& config, const detail::HangReporter* predecessor) {
  detail::HangReporter::Setup report;
  report.predecessor = predecessor;
  report.recorder = runtime_->recorder ? runtime_->recorder : runtime_->engine->recorder();
  report.store = store_;
  report.notes = notes_;
  report.peers = peers_;
  for (int peer = 0; peer < size_; ++peer) {
    report.connections.push_back(runtime_->engine->mesh().describePeer(runtime_->meshRank(peer)));
  }
  report.job = jobId_;
  report.generation = generation_;
  report.rank = rank_;
  report.size = size_;
  std::weak_ptr<detail::Runtime> weak = runtime_;
  report.healthy = [weak] {
    auto runtime = weak.lock();
    return runtime && !runtime->isOver() && runtime->engine->failure() == nullptr;
  };
  report.revoked = [weak](int rank, const std::string& text) {
    if (auto runtime = weak.lock(); runtime && !runtime->isOver()) {
      // (The record names the mesh's rank, as the transport's errors do.)
      const bool self = rank == runtime->meshRank(runtime->rank);
      runtime->engine->stop(ErrorKind::kRevoked, self ? -1 : rank, text);
    }
  };
  reporter_ = detail::HangReporter::start(std::move(report), config);
}

// ---- sub-contexts -----------------------------------------------------------------------

std::shared_ptr<Context> Context::split(const std::vector<int>& ranks, const std::string& name,
                                        std::optional<std::chrono::milliseconds> timeout) {
  Where where{rank_, "split(" + name + ")", -1};
  if (!runtime_) throw InvalidArgument(where, "the context has no transports");
  if (name.empty()) throw InvalidArgument(where, "the name is empty");
  const std::chrono::milliseconds wait = timeout.value_or(timeout_);
  if (wait.count() <= 0) {
    throw InvalidArgument(
        where, "the timeout must be positive, got " + std::to_string(wait.count()) + " ms");
  }
  if (ranks.empty()) throw InvalidArgument(where, "the list of ranks is empty");
  std::vector<bool> seen(static_cast<std::size_t>(size_));
  for (int r : ranks) {
    if (r < 0 || r >= size_) {
      throw InvalidArgument(
          where, "rank " + std::to_string(r) + " is outside [0, " + std::to_string(size_) + ")");
    }
    if (seen[static_cast<std::size_t>(r)]) {
      throw InvalidArgument(where, "rank " + std::to_string(r) + " is listed twice");
    }
    seen[static_cast<std::size_t>(r)] = true;
  }
  if (!seen[static_cast<std::size_t>(rank_)]) {
    throw InvalidArgument(
        where, "this rank is not among the ranks " + rankList(ranks) + ": only they call split()");
  }
  if (const std::exception_ptr failed = runtime_->engine->failure()) {
    try {
      std::rethrow_exception(failed);
    } catch (const Error& e) {
      throw Error(e.kind(), where, "the context failed earlier: " + std::string(e.what()));
    }
  }
  // The k-th split of this name on this rank (every member makes its splits of a name in
  // the same order): its keys are its own, however soon the name comes again.
  std::uint64_t k;
  {
    std::lock_guard<std::mutex> lock(runtime_->splitMutex);
    k = ++runtime_->splits[name];
  }
  const std::string base = "split/" + std::to_string(subContext_) + "/";
  const std::string round = std::to_string(k) + "/" + name;
  const std::string record = base + "record/" + round, done = base + "done/" + round;
  auto ackKey = [&](int r) { return base + "ack/" + std::to_string(r) + "/" + round; };
  std::string list;
  for (int r : ranks) list += (list.empty() ? "" : ",") + std::to_string(r);
  // The first rank of the list takes a number that no sub-context of the job has and
  // publishes it with the list (or why it could not); the others read it. Every member then
  // says whether its list is the one published, and reads what the others said: a list that
  // differs fails the split on every member, naming a rank whose list differs. The last to
  // leave erases the keys.
  const int first = ranks.front();
  std::string published;
  if (first == rank_) {
    const auto made = static_cast<std::uint64_t>(store_->add("split/next", 1));
    const std::string mine = made > transport::kMaxSubContext
                                 ? "error the job has made " + std::to_string(made - 1) +
                                       " sub-contexts, the most it can"
                                 : std::to_string(made) + " " + list;
    // (Taken already: another rank took itself for the first, its list's first differs.)
    published = rendezvous::toString(store_->compareSet(record, {}, rendezvous::toBytes(mine)));
  } else {
    try {
      published = rendezvous::toString(store_->get(record, wait));
    } catch (const TimeoutError&) {
      throw TimeoutError(Where{rank_, where.op, first},
                         "rank " + std::to_string(first) +
                             ", the first of the list, did not publish the sub-context within " +
                             std::to_string(wait.count()) + " ms");
    }
  }
  const std::size_t space = published.find(' ');
  const std::string head = published.substr(0, space);
  const std::string theirs = space == std::string::npos ? "" : published.substr(space + 1);
  std::uint64_t number = 0;
  if (head != "error") {
    try {
      number = std::stoull(head);
    } catch (const std::exception&) {
      // Not a number: 0, which the checks below report as a malformed record.
    }
  }
  std::string problem;  // this rank's verdict, "" if it agrees
  if (head == "error") {
    problem = theirs;
  } else if (number == 0 || number > transport::kMaxSubContext) {
    problem = "the store holds a malformed split record: " + published;
  } else if (theirs != list) {
    problem = "this rank splits ranks [" + list + "], the published list is [" + theirs + "]";
  }
  // Where the members share memory, a shared-memory group of their own in a slot that every
  // member offers (the lowest), as NCCL's split keeps its intra-node transport: the verdict
  // "ok" carries the slots this member offers and whether it would spin in a context of just
  // these ranks and can read every member's memory (every member must agree on both).
  transport::SharedGroup* shared = runtime_->engine->mesh().sharedGroup();
  std::vector<int> meshRanks;
  meshRanks.reserve(ranks.size());
  for (int r : ranks) meshRanks.push_back(runtime_->meshRank(r));
  transport::SlotOffer offer;
  // Its waits poll as a context of just its ranks would: whether they outnumber their CPUs.
  std::vector<PeerInfo> members;
  members.reserve(ranks.size());
  for (int r : ranks) members.push_back(peers_[static_cast<std::size_t>(r)]);
  int local = 0;
  std::size_t cores = 0;
  bool known = true;
  const bool outnumbered = outnumberCpus(
      members, static_cast<int>(std::find(ranks.begin(), ranks.end(), rank_) - ranks.begin()),
      local, cores, known);
  const std::chrono::microseconds spin =
      algorithms::engineOptions(Config::process(), outnumbered).spin;
  const bool spins = spin.count() > 0;
  if (problem.empty() && shared != nullptr && ranks.size() > 1 &&
      kSplitSharedMemory.get(Config::process())) {
    offer = shared->offerSlots(meshRanks);
  }
  constexpr unsigned kSpins = 1, kReads = 2;
  // The slots offered go back when the split fails; for good when this member cannot know
  // what the others concluded (they may use one).
  struct Offered {
    transport::SharedGroup* group;
    std::uint32_t slots;
    bool forGood = true;
    ~Offered() {
      if (group != nullptr && slots != 0) group->withdrawSlots(slots, forGood);
    }
  } offered{shared, offer.slots};
  store_->set(ackKey(rank_), problem.empty() ? "ok " + std::to_string(offer.slots) + " " +
                                                   std::to_string((spins ? kSpins : 0) |
                                                                  (offer.canRead ? kReads : 0))
                                             : problem);
  // Every member's verdict (a member that never comes: a TimeoutError naming it).
  std::vector<std::string> acks;
  acks.reserve(ranks.size());
  for (int r : ranks) acks.push_back(ackKey(r));
  std::vector<Bytes> verdicts;
  try {
    verdicts = store_->multiGet(acks, wait);
  } catch (const TimeoutError&) {
    std::vector<int> missing;
    for (int r : ranks) {
      if (!store_->check({ackKey(r)})) missing.push_back(r);
    }
    throw TimeoutError(Where{rank_, where.op, missing.empty() ? -1 : missing.front()},
                       "rank" + std::string(missing.size() == 1 ? " " : "s ") + rankList(missing) +
                           " of the list did not come within " + std::to_string(wait.count()) +
                           " ms");
  }
  offered.forGood = false;  // every member reads the same verdicts
  if (store_->add(done, 1) == static_cast<std::int64_t>(ranks.size())) {
    for (const std::string& key : acks) store_->erase(key);
    store_->erase(record);
    store_->erase(done);
  }
  std::uint32_t slots = ~std::uint32_t{0};
  unsigned flags = kSpins | kReads;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const std::string verdict = rendezvous::toString(verdicts[i]);
    if (verdict.rfind("ok", 0) == 0) {
      unsigned long long theirSlots = 0, theirFlags = 0;
      if (std::sscanf(verdict.c_str(), "ok %llu %llu", &theirSlots, &theirFlags) != 2) {
        theirSlots = theirFlags = 0;
      }
      slots &= static_cast<std::uint32_t>(theirSlots);
      flags &= static_cast<unsigned>(theirFlags);
      continue;
    }
    if (head == "error") throw InvalidArgument(where, theirs);
    throw MismatchError(
        Where{rank_, where.op, ranks[i] == rank_ ? first : ranks[i]},
        ranks[i] == rank_ ? problem : "rank " + std::to_string(ranks[i]) + ": " + verdict);
  }
  auto sub = std::make_shared<Context>(Key{}, shared_from_this(), ranks, number, wait);
  sub->runtime_->spinUs = static_cast<std::int32_t>(std::min<std::int64_t>(spin.count(), 1 << 30));
  if (slots != 0 && shared != nullptr) {
    const int slot = std::countr_zero(slots);
    offered.slots = 0;
    std::unique_ptr<transport::SharedGroup> group = shared->subGroup(meshRanks, slot, offer.slots);
    const algorithms::EngineOptions engine =
        algorithms::engineOptions(Config::process(), (flags & kSpins) == 0);
    group->setPolicy(transport::WaitPolicy{
        (flags & kSpins) != 0 ? engine.spin : std::chrono::microseconds(0), engine.yield});
    group->setDirectReads((flags & kReads) != 0 ? runtime_->engine->mesh().options().shm.direct
                                                : transport::DirectReads::kNever);
    detail::Runtime& rt = *sub->runtime_;
    rt.group = group.get();
    rt.lane = slot + 1;
    rt.policy.sharedMemory = true;
    runtime_->engine->addSharedGroup(rt.lane, std::move(group));
  }
  COLLX_DEBUG(kCore, "rank {}: sub-context {} \"{}\" of ranks [{}]: rank {} of {}{}", rank_, number,
              name, list, sub->rank(), sub->size(),
              sub->runtime_->lane > 0
                  ? ", shared-memory group in slot " + std::to_string(sub->runtime_->lane - 1)
                  : std::string());
  return sub;
}

Context::Context(Key, std::shared_ptr<Context> parent, std::vector<int> members,
                 std::uint64_t subContext, std::chrono::milliseconds timeout)
    : rank_(static_cast<int>(std::find(members.begin(), members.end(), parent->rank_) -
                             members.begin())),
      size_(static_cast<int>(members.size())),
      localRank_(-1),
      jobId_(parent->jobId_),
      generation_(parent->generation_),
      timeout_(timeout),
      store_(parent->store_),
      rootStore_(parent->rootStore_),
      hostId_(parent->hostId_),
      leaveBarrier_(false),
      eraseKeys_(false),
      formed_(true),
      outnumbered_(parent->outnumbered_),
      subContext_(subContext) {
  adoptMembers(*parent, members);
  const detail::Runtime& above = *parent->runtime_;
  runtime_->generation = above.generation;
  // No group of its own on shared memory: the point-to-point algorithms only, even for a
  // sub-context of one rank (the engine's shared-memory runner works on the parent's group).
  runtime_->policy =
      algorithms::SelectionPolicy::fromConfig(Config::process(), false, runtime_->hosts);
  runtime_->policy.subContext = true;
  runtime_->seqBase = subContext << transport::kSubContextShift;
  parent_ = std::move(parent);
}

Context::Context(Key, const Context& old, const std::vector<int>& members, std::int64_t generation,
                 const std::vector<std::pair<int, PeerInfo>>& newcomers)
    : rank_(
          static_cast<int>(std::find(members.begin(), members.end(), old.rank_) - members.begin())),
      size_(static_cast<int>(members.size())),
      localRank_(-1),
      jobId_(old.jobId_),
      generation_(generation),
      timeout_(old.timeout_),
      rootStore_(old.rootStore_),
      hostId_(old.hostId_),
      notes_(old.notes_),
      leaveBarrier_(old.leaveBarrier_),
      eraseKeys_(old.eraseKeys_),
      formed_(true),
      outnumbered_(old.outnumbered_),
      server_(old.server_) {
  rendezvous::StoreOptions storeOptions;
  storeOptions.timeout = timeout_;
  storeOptions.rank = rank_;
  store_ = std::make_shared<rendezvous::PrefixStore>(
      "collx/" + jobId_ + "/" + std::to_string(generation_), rootStore_, storeOptions);
  adoptMembers(old, members, newcomers);
  const detail::Runtime& above = *old.runtime_;
  runtime_->generation = above.engine->generation();
  runtime_->policy =
      algorithms::SelectionPolicy::fromConfig(Config::process(), size_ == 1, runtime_->hosts);
  runtime_->spinUs = above.spinUs;
  // The shared-memory group that the reform made of the members kept on this host, where it
  // holds every member (each member knows the same: the same members kept, on one host, all
  // over shared memory); else the point-to-point algorithms, over shared memory's pairs
  // within a host (a newcomer joined over tcp, say).
  transport::SharedGroup* group = runtime_->engine->mesh().sharedGroup();
  if (size_ > 1 && group != nullptr && group->size() == size_ &&
      group->generation() == runtime_->generation) {
    bool ordered = true;
    for (int r = 0; r < size_; ++r) ordered &= group->rankOf(r) == runtime_->meshRank(r);
    if (ordered) {
      runtime_->group = group;
      runtime_->policy.sharedMemory = true;
    }
  }
  COLLX_DEBUG(kShm, "rank {}: generation {}: {}", rank_, generation_,
              runtime_->group ? "shared-memory group of " + std::to_string(size_)
                              : std::string("no shared-memory group"));
}

void Context::adoptMembers(const Context& from, const std::vector<int>& members,
                           const std::vector<std::pair<int, PeerInfo>>& newcomers) {
  for (int r : members) {
    PeerInfo peer = r >= 0 ? from.peers_[static_cast<std::size_t>(r)]
                           : newcomers[static_cast<std::size_t>(-1 - r)].second;
    peer.rank = static_cast<int>(peers_.size());
    peers_.push_back(std::move(peer));
  }
  // Its local rank: its place among the members on its host.
  int local = 0;
  for (int r = 0; r < rank_; ++r) {
    local += hostIdentity(peers_[static_cast<std::size_t>(r)]) ==
             hostIdentity(peers_[static_cast<std::size_t>(rank_)]);
  }
  localRank_ = local;
  const detail::Runtime& above = *from.runtime_;
  runtime_ = std::make_shared<detail::Runtime>();
  runtime_->engine = above.engine;
  runtime_->rank = rank_;
  runtime_->size = size_;
  runtime_->timeout = timeout_;
  runtime_->chunkBytes = above.chunkBytes;
  std::tie(runtime_->hostOf, runtime_->hosts) = hostLayout(peers_);
  if (above.learner) {
    runtime_->learner = std::make_unique<algorithms::Learner>(
        static_cast<int>(algorithms::kLearnTrials.get(Config::process())));
  }
  for (int r : members) {
    runtime_->meshRanks.push_back(r >= 0 ? above.meshRank(r)
                                         : newcomers[static_cast<std::size_t>(-1 - r)].first);
  }
  // Its sequence numbers are its own: a recorder of its own (the engine's holds the others).
  if (const auto& recorder = above.engine->recorder()) {
    runtime_->recorder = std::make_shared<algorithms::Recorder>(recorder->capacity());
  }
  runtime_->tracePath = above.tracePath;
}

std::string Context::dumpState() {
  if (parent_) return parent_->dumpState();
  if (!reporter_) {
    throw InvalidArgument(Where{rank_, "dumpState", -1},
                          "the flight recorder is off (COLLX_TRACE_BUFFER=0): there is nothing "
                          "to report");
  }
  return reporter_->dumpState();
}

std::string Context::tracePath() const { return runtime_ ? runtime_->tracePath : std::string(); }

std::vector<std::string> Context::transports() const {
  if (!runtime_) return {};
  std::vector<std::string> names = runtime_->engine->mesh().transportNames();
  if (runtime_->meshRanks.empty()) return names;
  std::vector<std::string> mine;
  for (int r : runtime_->meshRanks) mine.push_back(names[static_cast<std::size_t>(r)]);
  return mine;
}

bool Context::sharedMemory() const noexcept { return runtime_ && runtime_->sharedMemory(); }

std::string Context::describePeer(int peer) const {
  if (!runtime_) return "unconnected";
  if (peer < 0 || peer >= size_) return "no rank " + std::to_string(peer);
  return runtime_->engine->mesh().describePeer(runtime_->meshRank(peer));
}

void Context::abort(const std::string& why) {
  if (runtime_) runtime_->engine->abort(why);
}

void Context::revoke(const std::string& why) {
  if (!runtime_) return;
  detail::faultAt("revoke", rank_);
  // The rank that revokes, in the mesh's terms (a sub-context's rank is not the others').
  const int meshRank = runtime_->meshRank(rank_);
  const std::string text = "rank " + std::to_string(meshRank) + " revoked generation " +
                           std::to_string(generation_) + " of job " + jobId_ + ": " + why;
  runtime_->engine->stop(ErrorKind::kRevoked, -1, text);
  try {
    store_->compareSet(detail::kRevokedKey, {},
                       rendezvous::toBytes(detail::formatRevoked(meshRank, text)));
  } catch (const Error& e) {
    COLLX_WARN(kCore,
               "rank {}: revoke: the store did not take the record ({}); the ranks "
               "that a connection reaches know it all the same",
               rank_, e.what());
  }
}

// How long the host of a failed job's store waits for another rank to leave.
constexpr std::chrono::seconds kFailedLeaveGrace{3};

// Leaving. When rank 0 hosts the store (leaveBarrier_ on every rank), every rank adds 1 to
// "left" and the host keeps the store up until all have (bounded by the timeout); the keys die
// with the store. Otherwise, with eraseKeys_, a context that has not failed adds 1 too, and the
// one that makes it `size` is the last: it erases the generation's keys. A failed context
// erases nothing, nor does one that never formed (the store may be what failed): the keys
// expire (COLLX_STORE_TTL).
void Context::leave() noexcept {
  if (size_ == 1) return;
  // A generation the survivors left (shrink): nobody waits for it, its keys expire.
  if (runtime_ && runtime_->isOver()) return;
  const bool failed = !formed_ || (runtime_ && runtime_->engine->failure() != nullptr);
  if (!leaveBarrier_ && (!eraseKeys_ || failed)) return;
  try {
    const std::int64_t left = store_->add("left", 1);
    if (!leaveBarrier_) {
      if (left == size_) eraseKeys();
      return;
    }
    if (!server_) return;
    // This rank hosts the store: keep it up until every rank has left (or the timeout). A
    // failed job's host waits only while ranks still arrive: the ranks that failed with it
    // leave at once, and one that died never will.
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + timeout_;
    auto lastArrival = start;
    auto step = std::chrono::milliseconds(1);
    std::int64_t seen = left;
    for (std::int64_t now; (now = store_->add("left", 0)) < size_; seen = now) {
      const auto t = std::chrono::steady_clock::now();
      if (now != seen) lastArrival = t;
      if (t >= deadline || (failed && t - lastArrival >= kFailedLeaveGrace)) {
        COLLX_WARN(kRdzv,
                   "rank {}: stopping the store after {} ms although only {} of {} ranks have "
                   "left{}",
                   rank_, std::chrono::duration_cast<std::chrono::milliseconds>(t - start).count(),
                   now, size_,
                   failed ? " (the job failed, and no rank has left for "
                            "a while: the others died with it or will find the store gone)"
                          : "; the others will lose it");
        return;
      }
      rendezvous::detail::backoffSleep(step, deadline, std::chrono::milliseconds(50));
    }
  } catch (const std::exception& e) {
    COLLX_WARN(kRdzv, "rank {}: leaving job {}: {}", rank_, jobId_, e.what());
  }
}

void Context::eraseKeys() {
  std::vector<std::string> keys{"world_size"};
  for (int r = 0; r < size_; ++r) {
    keys.push_back(rankKey(r));
    keys.push_back("transport/" + std::to_string(r));
  }
  keys.push_back("split/next");
  // The entries of the last agreement (each rank erased those of the rounds before).
  if (const std::uint64_t rounds = runtime_ ? runtime_->agreements.load() : 0; rounds > 0) {
    for (int r = 0; r < size_; ++r) keys.push_back(detail::agreeEntryKey(0, rounds, r));
  }
  for (const std::string& key : keys) store_->erase(key);
  detail::HangReporter::eraseKeys(*store_, size_);
  store_->erase("left");
  COLLX_DEBUG(kRdzv, "rank {}: the last to leave job {} generation {}: erased its keys", rank_,
              jobId_, generation_);
}

Context::~Context() {
  if (reporter_) reporter_->stop();
  // A sub-context's shared-memory group goes once its calls in flight end.
  if (runtime_ && runtime_->lane > 0) runtime_->engine->removeSharedGroup(runtime_->lane);
  leave();
}

}  // namespace collx
