#include "collx/transport/mesh.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <thread>

#include "collx/base/log.h"
#include "liveness.h"
#include "no_cancel.h"
#include "self_device.h"
#include "shm/shm_device.h"
#include "tcp/tcp_device.h"
#ifdef COLLX_HAVE_IBVERBS
#include "ibverbs/ib_device.h"
#endif

namespace collx::transport {

std::string describePlain(const MessageKey& key, const Fingerprint& fp) {
  return (key.space == Space::kPointToPoint ? "p2p tag "
                                            : "collective " + std::to_string(fp.coll) + " #") +
         std::to_string(key.seq) + " step " + std::to_string(key.step) + " dtype " +
         std::to_string(fp.dtype) + " count " + std::to_string(fp.count);
}

std::uint64_t jobHash(const std::string& job, std::int64_t generation) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : job) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h ^ static_cast<std::uint64_t>(generation) * 0x9e3779b97f4a7c15ull;
}

std::string LinkState::describe(const MessageKey& key, const Fingerprint& fp) const {
  return describer ? describer(key, fp) : describePlain(key, fp);
}

namespace {

// Up to this many descriptors, a progress() that does not wait tries each one directly.
constexpr std::size_t kDirectFds = 5;
// The longest a connect waits for its remote peers' first answers over UDP (probeLiveness).
constexpr std::chrono::seconds kProbeTime(2);

// "self;tcp=10.0.0.1:4000" -> {"self": "", "tcp": "10.0.0.1:4000"}
std::map<std::string, std::string> parseAddress(const std::string& blob) {
  std::map<std::string, std::string> out;
  std::size_t start = 0;
  while (start <= blob.size()) {
    std::size_t end = blob.find(';', start);
    if (end == std::string::npos) end = blob.size();
    std::string item = blob.substr(start, end - start);
    if (!item.empty()) {
      std::size_t eq = item.find('=');
      out[item.substr(0, eq)] = eq == std::string::npos ? "" : item.substr(eq + 1);
    }
    start = end + 1;
  }
  return out;
}

}  // namespace

Mesh::Mesh(const MeshOptions& options) : options_(options) {
  link_.rank = options_.rank;
  link_.describer = options_.describer;
  const std::int64_t starts =
      options_.joinGeneration >= 0 ? options_.joinGeneration : options_.generation;
  link_.epoch = static_cast<std::uint8_t>(starts);
  generation_.store(starts, std::memory_order_release);
  try {
    options_.validate();
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(Where{options_.rank, "transport", -1}, e.detail());
  }
  const std::string& forced = options_.transport;
  devices_.push_back(std::make_unique<SelfDevice>(options_.rank, link_));
  // Shared memory and verbs are for the ranks that form the mesh (a newcomer joins over tcp).
  JobMember forming = options_;
  if (options_.formed > 0) forming.size = options_.formed;
  if ((forced == "auto" || forced == "shm") && forming.size > 1) {
    try {
      devices_.push_back(std::make_unique<shm::ShmDevice>(link_, forming, options_.shm));
    } catch (const IoError& e) {
      // No shared memory here (no memfd, no /dev/shm, ...): peers reach this rank over tcp.
      if (forced == "shm") throw;
      COLLX_WARN(kShm, "rank {}: no shared-memory transport: {}", options_.rank, e.what());
    }
  }
  if ((forced == "auto" || forced == "ibverbs") && forming.size > 1) {
#ifdef COLLX_HAVE_IBVERBS
    try {
      devices_.push_back(std::make_unique<ibverbs::IbDevice>(link_, forming, options_.ib));
    } catch (const Unsupported& e) {
      // No RDMA port here: peers on other hosts reach this rank over tcp.
      if (forced == "ibverbs") throw;
      COLLX_DEBUG(kIbverbs, "rank {}: no ibverbs transport: {}", options_.rank, e.what());
    } catch (const IoError& e) {
      if (forced == "ibverbs") throw;
      COLLX_WARN(kIbverbs, "rank {}: no ibverbs transport: {}", options_.rank, e.what());
    }
#else
    if (forced == "ibverbs") {
      throw Unsupported(Where{options_.rank, "transport", -1},
                        "COLLX_TRANSPORT=ibverbs: this collx was built without RDMA verbs "
                        "support (libibverbs-dev was missing when it was built, or verbs were "
                        "turned off)");
    }
#endif
  }
  if (forced == "auto" || forced == "tcp") {
    TcpOptions tcp = options_.tcp;
    tcp.peersListen = options_.joinGeneration >= 0;
    devices_.push_back(std::make_unique<tcp::TcpDevice>(link_, options_, tcp));
  }
  pairs_.assign(static_cast<std::size_t>(options_.size), nullptr);
  deviceOf_.assign(static_cast<std::size_t>(options_.size), nullptr);
  transportNames_.assign(static_cast<std::size_t>(options_.size), "");
  if (options_.size > 1 && options_.peerTimeout.count() > 0) {
    // On the address the tcp transport listens on, which the other hosts reach (with no tcp
    // device, the one it would take).
    std::string ip;
    for (const auto& device : devices_) {
      if (std::string(device->name()) != "tcp") continue;
      ip = device->address().substr(0, device->address().rfind(':'));
      if (ip.size() >= 2 && ip.front() == '[') ip = ip.substr(1, ip.size() - 2);
    }
    if (ip.empty()) ip = tcp::localAddress(options_.tcp, options_.rank);
    liveness_ = std::make_unique<Liveness>(options_.rank, options_.size,
                                           jobHash(options_.jobId, options_.generation),
                                           options_.secret, ip);
    watch_.assign(static_cast<std::size_t>(options_.size), Watch{});
    heardAt_.reset(new std::atomic<std::int64_t>[static_cast<std::size_t>(options_.size)]);
    for (int peer = 0; peer < options_.size; ++peer) heard(peer, Clock::now());
  }
  wakeFd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakeFd_ < 0) {
    throw IoError(Where{options_.rank, "transport", -1},
                  std::string("eventfd failed: ") + std::strerror(errno));
  }
}

Mesh::~Mesh() {
  devices_.clear();  // pairs say goodbye and close their sockets
  liveness_.reset();
  if (wakeFd_ >= 0) ::close(wakeFd_);
}

std::string Mesh::address() const {
  std::string out;
  for (const auto& device : devices_) {
    if (!out.empty()) out += ";";
    out += std::string(device->name()) + "=" + device->address();
  }
  if (liveness_) out += ";live=" + liveness_->address();
  return out;
}

void Mesh::connect(const std::vector<std::string>& addresses, Clock::time_point deadline) {
  const int n = options_.size;
  if (static_cast<int>(addresses.size()) != n) {
    throw InvalidArgument(
        Where{options_.rank, "connect", -1},
        std::to_string(addresses.size()) + " addresses for " + std::to_string(n) + " ranks");
  }
  // Each peer's transport: the first device, in priority order, that can reach it and
  // (where both sides must agree) confirms it.
  std::vector<std::map<std::string, std::string>> published(n);
  for (int peer = 0; peer < n; ++peer) published[peer] = parseAddress(addresses[peer]);
  std::vector<std::vector<int>> peersOf(devices_.size());
  std::vector<std::vector<std::string>> addressesOf(devices_.size());
  std::vector<bool> assigned(static_cast<std::size_t>(n), false);
  for (std::size_t d = 0; d < devices_.size(); ++d) {
    Device& device = *devices_[d];
    const std::string name = device.name();
    std::vector<int> candidates;
    std::vector<std::string> candidateAddresses;
    for (int peer = 0; peer < n; ++peer) {
      if (assigned[peer]) continue;
      bool allowed = name == "self" ? peer == options_.rank
                                    : options_.transport == "auto" || options_.transport == name;
      auto it = published[peer].find(name);
      if (!allowed || it == published[peer].end() || !device.canConnect(peer, it->second)) continue;
      candidates.push_back(peer);
      candidateAddresses.push_back(it->second);
    }
    for (int peer : device.confirm(candidates, candidateAddresses, deadline)) {
      auto at = std::find(candidates.begin(), candidates.end(), peer);
      if (at == candidates.end() || assigned[peer]) continue;
      peersOf[d].push_back(peer);
      addressesOf[d].push_back(
          candidateAddresses[static_cast<std::size_t>(at - candidates.begin())]);
      transportNames_[peer] = name;
      assigned[peer] = true;
    }
  }
  // A newcomer's mesh (options_.joinGeneration): the ranks lost before it came published
  // nothing, and are none of its peers; nor are the places kept for newcomers to come.
  const bool joining = options_.joinGeneration >= 0;
  const int formed = options_.formed > 0 ? options_.formed : n;
  for (int peer = 0; peer < n; ++peer) {
    const bool absent = (joining || peer >= formed) && addresses[peer].empty();
    if (!assigned[peer] && !absent) {
      throw IoError(Where{options_.rank, "connect", peer},
                    "no transport can reach rank " + std::to_string(peer) + " (it published '" +
                        addresses[peer] + "', COLLX_TRANSPORT=" + options_.transport + ")");
    }
  }
  for (std::size_t d = 0; d < devices_.size(); ++d) {
    if (peersOf[d].empty()) continue;
    std::vector<Pair*> pairs = devices_[d]->connect(peersOf[d], addressesOf[d], deadline);
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      pairs_[peersOf[d][i]] = pairs[i];
      deviceOf_[peersOf[d][i]] = devices_[d].get();
    }
  }
  if (liveness_) {
    std::vector<std::string> live(static_cast<std::size_t>(n));
    for (int peer = 0; peer < n; ++peer) {
      auto it = published[peer].find("live");
      if (it != published[peer].end()) live[static_cast<std::size_t>(peer)] = it->second;
    }
    liveness_->setPeers(live);
    liveAddresses_ = live;
    for (int peer = 0; peer < n; ++peer) {
      watch_[static_cast<std::size_t>(peer)].watched =
          peer != options_.rank && !live[static_cast<std::size_t>(peer)].empty();
    }
  }
  adoptSharedGroup();
  if (liveness_) probeLiveness(deadline);
}

void Mesh::adoptSharedGroup() {
  group_ = nullptr;
  for (auto& device : devices_) {
    if (SharedGroup* group = device->sharedGroup()) {
      group->setFailMesh([this](const Error& error) { fail(error); });
      group->setAbortCheck(&abortRequested_, &stopRequest_);
      if (liveness_) {
        group->setSilenceCheck([this](int peer, Clock::time_point heard, Clock::time_point now) {
          return silence(peer, heard, now);
        });
      }
      group_ = group;
    }
  }
}

std::string Mesh::describePeer(int peer) const {
  if (peer < 0 || peer >= options_.size || pairs_[peer] == nullptr) return "unconnected";
  return pairs_[peer]->describe();
}

std::vector<std::string> Mesh::transportNames() const { return transportNames_; }

void Mesh::post(Request& request) {
  if (failed_.load(std::memory_order_acquire)) std::rethrow_exception(failure());
  if (request.peer < 0 || request.peer >= options_.size || pairs_[request.peer] == nullptr) {
    throw InvalidArgument(Where{options_.rank, "post", request.peer},
                          "no connection to rank " + std::to_string(request.peer));
  }
  try {
    pairs_[request.peer]->post(request);
  } catch (const Error& e) {
    fail(e);
    throw;
  }
}

bool Mesh::applyAbort() noexcept {
  if (failed_.load(std::memory_order_acquire)) return true;
  if (!abortRequested_.load(std::memory_order_acquire)) return false;
  try {
    throwError(stopRequest_.kind, Where{options_.rank, "transport", stopRequest_.culprit},
               stopRequest_.reason);
  } catch (const Error& e) {
    fail(e);
  }
  return true;
}

bool Mesh::progress(std::chrono::microseconds wait, bool tryDirect) {
  if (applyAbort()) std::rethrow_exception(failure());
  if (wait.count() > 0) {
    // Devices signalled through memory arm their doorbells, or say that there is no need.
    for (auto& device : devices_) {
      if (!device->prepareToSleep()) {
        wait = std::chrono::microseconds(0);
        break;
      }
    }
  }
  fds_.clear();
  fds_.push_back(pollfd{wakeFd_, POLLIN, 0});
  fdCounts_.clear();
  for (auto& device : devices_) fdCounts_.push_back(device->addPollFds(fds_));
  int ready;
  if (tryDirect && wait.count() == 0 && fds_.size() <= kDirectFds) {
    // Just looking, at a handful of sockets: trying each one is cheaper than asking poll()
    // first (one system call when a message is there instead of two).
    for (std::size_t i = 1; i < fds_.size(); ++i) fds_[i].revents = fds_[i].events;
    fds_[0].revents = 0;
    ready = 1;
  } else {
    int timeoutMs = wait.count() > 0 ? static_cast<int>((wait.count() + 999) / 1000) : 0;
    ready = detail::pollNoCancel(fds_.data(), fds_.size(), timeoutMs);
  }
  if (ready < 0 && errno != EINTR) {
    IoError error(Where{options_.rank, "transport", -1},
                  std::string("poll failed: ") + std::strerror(errno));
    fail(error);
    throw error;
  }
  if (liveness_ && wait.count() > 0) {
    // (Only where the call went to sleep: a spinning call heard from its peers just now.)
    const Clock::time_point now = Clock::now();
    if (now >= nextCheck_) checkLiveness(now);
  }
  bool moved = false;
  if (ready > 0 && (fds_[0].revents & POLLIN)) {
    std::uint64_t value;
    ssize_t ignored = detail::readNoCancel(wakeFd_, &value, sizeof(value));
    (void)ignored;
    moved = true;
  }
  try {
    std::size_t at = 1;
    for (std::size_t d = 0; d < devices_.size(); ++d) {
      moved |= devices_[d]->progress(fds_.data() + at, fdCounts_[d]);
      at += fdCounts_[d];
    }
  } catch (const Error& e) {
    fail(e);
    throw;
  }
  return moved;
}

Clock::duration Mesh::livenessPeriod() const noexcept {
  // An eighth of the timeout (at most every 10 ms).
  return std::max<Clock::duration>(options_.peerTimeout / 8, std::chrono::milliseconds(10));
}

void Mesh::checkLiveness(Clock::time_point now) {
  // A wait's silence counts from the look that last saw something arrive: looking at most
  // every 100 ms keeps a failure's notice within 0.2 s of the peer timeout (pings still go
  // every livenessPeriod()).
  nextCheck_ = now + std::min<Clock::duration>(livenessPeriod(), std::chrono::milliseconds(100));
  for (int peer = 0; peer < options_.size; ++peer) {
    Pair* pair = pairs_[static_cast<std::size_t>(peer)];
    Watch& w = watch_[static_cast<std::size_t>(peer)];
    if (pair == nullptr) {
      w.busy = false;
      continue;
    }
    // What arrived since the last look, waited for or not, is the peer's last sign of life
    // (lost() counts from it).
    const std::uint64_t arrivals = pair->arrivals();
    if (arrivals != w.seen) {
      w.seen = arrivals;
      heard(peer, now);
    }
    if (!pair->busy()) {
      w.busy = false;
      continue;
    }
    if (!w.busy || arrivals != w.arrivals) {
      // A wait that starts now, or something arrived since the last look.
      w.busy = true;
      w.arrivals = arrivals;
      w.heard = now;
      continue;
    }
    const std::string silent = silence(peer, w.heard, now);
    if (!silent.empty()) {
      IoError error(Where{options_.rank, "transport", peer}, silent);
      fail(error);
      throw error;
    }
  }
}

std::string Mesh::silence(int peer, Clock::time_point heard, Clock::time_point now) noexcept {
  if (!liveness_ || peer < 0 || peer >= options_.size ||
      !watch_[static_cast<std::size_t>(peer)].watched) {
    return {};
  }
  const auto timeout = options_.peerTimeout;
  const auto silent = now - std::max(heard, liveness_->lastAnswer(peer));
  if (silent >= timeout) {
    // Silent for the timeout, and pings unanswered for a while (several of them: one lost
    // datagram does not fail a peer). A wait pings from a quarter of the timeout on, so its
    // pings have long gone unanswered here; the recovery asks of peers it had no reason to
    // ping before, and pings them quickly now.
    const auto grace = std::min<Clock::duration>(timeout / 4, std::chrono::milliseconds(250));
    if (liveness_->unansweredFor(peer, now) < grace) {
      liveness_->pingIfDue(peer, now,
                           std::max<Clock::duration>(grace / 5, std::chrono::milliseconds(1)));
      return {};
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(silent).count();
    try {
      return "rank " + std::to_string(peer) + " (" + describePeer(peer) +
             ") has answered nothing for " + std::to_string(ms / 1000) + "." +
             std::to_string(ms % 1000 / 100) + " s while this rank waited on it " +
             "(COLLX_PEER_TIMEOUT=" + std::to_string(timeout.count()) +
             "ms): it is stopped, its host is down, or the network between them is cut";
    } catch (...) {
      return "a peer answered nothing for the peer timeout";  // out of memory
    }
  }
  if (silent >= timeout / 4) liveness_->pingIfDue(peer, now, livenessPeriod());
  return {};
}

void Mesh::probeLiveness(Clock::time_point deadline) {
  // Peers on other hosts (over tcp or ibverbs) that published a liveness address: each must
  // answer a PING once, or a firewall that drops UDP between the hosts would make a peer that
  // is only busy look silent. Peers that never answer are left to their connections and the
  // calls' deadlines, and the log says so.
  std::vector<int> probed;
  for (int peer = 0; peer < options_.size; ++peer) {
    const std::string& name = transportNames_[static_cast<std::size_t>(peer)];
    if (watch_[static_cast<std::size_t>(peer)].watched && name != "self" && name != "shm") {
      probed.push_back(peer);
    }
  }
  if (probed.empty()) return;
  const auto started = Clock::now();
  const auto until =
      std::min(deadline, started + std::min<Clock::duration>(options_.peerTimeout, kProbeTime));
  auto pause = std::chrono::microseconds(100);
  while (true) {
    const auto now = Clock::now();
    std::erase_if(probed,
                  [&](int peer) { return liveness_->lastAnswer(peer) != Clock::time_point{}; });
    if (probed.empty() || now >= until) break;
    for (int peer : probed) liveness_->pingIfDue(peer, now, std::chrono::milliseconds(50));
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, until - now));
    pause = std::min(pause * 2, std::chrono::microseconds(10000));
  }
  if (probed.empty()) return;
  std::string names;
  for (std::size_t i = 0; i < probed.size(); ++i) {
    watch_[static_cast<std::size_t>(probed[i])].watched = false;
    if (i < 8) {
      names += (i ? ", " : "") + std::to_string(probed[i]) + " (" + describePeer(probed[i]) + ")";
    }
  }
  if (probed.size() > 8) names += ", ... " + std::to_string(probed.size() - 8) + " more";
  COLLX_WARN(kTcp,
             "rank {}: liveness: no answer over UDP within {} ms from rank{} {}: a firewall may "
             "drop UDP between these hosts. A wait on {} ends only when its connection breaks "
             "or at the call's deadline (COLLX_TIMEOUT), not after COLLX_PEER_TIMEOUT; allow "
             "UDP to the ranks' addresses as TCP is allowed, or set COLLX_PEER_TIMEOUT=0 to "
             "turn liveness off",
             options_.rank,
             std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count(),
             probed.size() == 1 ? "" : "s", names, probed.size() == 1 ? "it" : "them");
}

std::string Mesh::lost(int peer, Clock::time_point since) noexcept {
  if (peer < 0 || peer >= options_.size || peer == options_.rank) return {};
  try {
    if (Device* device = deviceOf_[static_cast<std::size_t>(peer)]) {
      std::string why = device->gone(peer);
      if (!why.empty()) return why;
    }
  } catch (...) {
    // Out of memory for the words: the other signs still tell.
  }
  return silence(peer, std::max(since, lastHeard(peer)), Clock::now());
}

void Mesh::heard(int peer, Clock::time_point now) noexcept {
  heardAt_[static_cast<std::size_t>(peer)].store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count(),
      std::memory_order_relaxed);
}

Clock::time_point Mesh::lastHeard(int peer) const noexcept {
  if (!heardAt_) return {};
  return Clock::time_point(std::chrono::nanoseconds(
      heardAt_[static_cast<std::size_t>(peer)].load(std::memory_order_relaxed)));
}

void Mesh::reform(std::int64_t generation, const std::vector<bool>& keep) {
  const int n = options_.size;
  if (static_cast<int>(keep.size()) != n) {
    throw InvalidArgument(
        Where{options_.rank, "reform", -1},
        std::to_string(keep.size()) + " flags for " + std::to_string(n) + " ranks");
  }
  if (!failed_.load(std::memory_order_acquire)) {
    fail(RevokedError(Where{options_.rank, "transport", -1},
                      "generation " + std::to_string(generation_.load()) +
                          " is over: the job goes on in generation " + std::to_string(generation)));
  }
  link_.epoch = static_cast<std::uint8_t>(generation);
  link_.active.clear();
  // Each device keeps the peers it reaches (a newcomer in a lost rank's place is the tcp
  // device's, not the shared memory's of the rank it replaced).
  for (auto& device : devices_) {
    std::vector<bool> mine(keep.size(), false);
    for (int peer = 0; peer < n; ++peer) {
      mine[static_cast<std::size_t>(peer)] =
          keep[static_cast<std::size_t>(peer)] &&
          deviceOf_[static_cast<std::size_t>(peer)] == device.get();
    }
    device->reform(generation, mine);
  }
  for (int peer = 0; peer < n; ++peer) {
    Pair* pair = pairs_[static_cast<std::size_t>(peer)];
    if (pair != nullptr && keep[static_cast<std::size_t>(peer)]) pair->reset();
  }
  for (Watch& w : watch_) w.busy = false;
  // The members kept, re-formed (the group of the old generation stays with its device,
  // failed).
  adoptSharedGroup();
  {
    std::lock_guard<std::mutex> lock(failureMutex_);
    failure_ = nullptr;
  }
  stopRequest_ = StopRequest{};
  stopClaimed_.store(false, std::memory_order_release);
  abortRequested_.store(false, std::memory_order_release);
  failed_.store(false, std::memory_order_release);
  generation_.store(generation, std::memory_order_release);
  COLLX_DEBUG(kTcp, "rank {}: transport: generation {} goes on with {} of {} ranks", options_.rank,
              generation, std::count(keep.begin(), keep.end(), true), n);
}

void Mesh::resume() {
  for (auto& device : devices_) device->resume();
}

void Mesh::drop(const std::vector<int>& peers, const Error& error) {
  for (int peer : peers) {
    if (peer < 0 || peer >= options_.size || peer == options_.rank) continue;
    if (Pair* pair = pairs_[static_cast<std::size_t>(peer)]) pair->drop(error);
  }
  for (auto& device : devices_) device->leaveOut(peers);
  adoptSharedGroup();
}

std::string Device::listenAgain() {
  throw Unsupported(Where{-1, "grow", -1},
                    std::string("the ") + name() + " transport takes no peer after connecting");
}

namespace {
Device* tcpDeviceOf(const std::vector<std::unique_ptr<Device>>& devices, int rank) {
  for (const auto& device : devices) {
    if (std::string(device->name()) == "tcp") return device.get();
  }
  throw Unsupported(Where{rank, "grow", -1},
                    "a newcomer joins over tcp, and this rank has no tcp transport "
                    "(COLLX_TRANSPORT is not auto or tcp)");
}
}  // namespace

std::string Mesh::joinAddress(bool listen) {
  Device* tcp = tcpDeviceOf(devices_, options_.rank);
  std::string out = "tcp=" + (listen ? tcp->listenAgain() : tcp->address());
  if (liveness_) out += ";live=" + liveness_->address();
  return out;
}

void Mesh::admit(const std::vector<int>& slots, const std::vector<std::string>& addresses,
                 Clock::time_point deadline) {
  const Where where{options_.rank, "grow", -1};
  if (slots.size() != addresses.size()) {
    throw InvalidArgument(where, std::to_string(addresses.size()) + " addresses for " +
                                     std::to_string(slots.size()) + " newcomers");
  }
  Device* tcp = tcpDeviceOf(devices_, options_.rank);
  std::vector<std::string> tcpAddresses, live;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const int slot = slots[i];
    if (slot < 0 || slot >= options_.size || slot == options_.rank) {
      throw InvalidArgument(where, "no place " + std::to_string(slot) +
                                       " for a newcomer in a mesh of " +
                                       std::to_string(options_.size));
    }
    auto published = parseAddress(addresses[i]);
    auto it = published.find("tcp");
    if (it == published.end() || it->second.empty()) {
      throw IoError(Where{options_.rank, "grow", slot},
                    "the newcomer at rank " + std::to_string(slot) +
                        " published no tcp address ('" + addresses[i].substr(0, 200) + "')");
    }
    tcpAddresses.push_back(it->second);
    auto l = published.find("live");
    live.push_back(l == published.end() ? std::string() : l->second);
  }
  std::vector<Pair*> pairs = tcp->connect(slots, tcpAddresses, deadline);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const auto at = static_cast<std::size_t>(slots[i]);
    pairs_[at] = pairs[i];
    deviceOf_[at] = tcp;
    transportNames_[at] = "tcp";
    if (liveness_) {
      liveAddresses_.resize(static_cast<std::size_t>(options_.size));
      liveAddresses_[at] = live[i];
      watch_[at] = Watch{};
      watch_[at].watched = !live[i].empty();
      heard(slots[i], Clock::now());
    }
  }
  if (liveness_) liveness_->setPeers(liveAddresses_);
  COLLX_DEBUG(kTcp, "rank {}: transport: {} newcomer(s) joined in generation {}", options_.rank,
              slots.size(), generation_.load());
}

std::uint64_t Mesh::staleFrames() const noexcept {
  std::uint64_t n = 0;
  for (const Pair* pair : pairs_) n += pair != nullptr ? pair->staleFrames() : 0;
  return n;
}

bool Mesh::watched(int peer) const noexcept {
  return liveness_ && peer >= 0 && peer < options_.size &&
         watch_[static_cast<std::size_t>(peer)].watched;
}

void Mesh::wakeup() noexcept {
  std::uint64_t one = 1;
  ssize_t ignored = ::write(wakeFd_, &one, sizeof(one));
  (void)ignored;
}

void Mesh::abort(const std::string& why) noexcept { stop(ErrorKind::kAborted, -1, why); }

void Mesh::stop(ErrorKind kind, int culprit, const std::string& why) noexcept {
  // The first request wins; a later one changes nothing (the mesh fails once).
  bool unclaimed = false;
  if (!stopClaimed_.compare_exchange_strong(unclaimed, true, std::memory_order_acq_rel)) return;
  try {
    stopRequest_.reason = why;
  } catch (...) {
    // Out of memory: the error says less.
  }
  stopRequest_.kind = kind;
  stopRequest_.culprit = culprit;
  abortRequested_.store(true, std::memory_order_release);
  wakeup();
}

std::exception_ptr Mesh::failure() const {
  if (!failed_.load(std::memory_order_acquire)) return nullptr;  // set after failure_
  std::lock_guard<std::mutex> lock(failureMutex_);
  return failure_;
}

void Mesh::fail(const Error& error) noexcept {
  {
    std::lock_guard<std::mutex> lock(failureMutex_);
    if (failure_) return;
    try {
      throwError(error.kind(), error.where(), error.detail());
    } catch (...) {
      failure_ = std::current_exception();
    }
  }
  failed_.store(true, std::memory_order_release);
  COLLX_DEBUG(kTcp, "rank {}: transport failed: {}", options_.rank, error.what());
  for (auto& device : devices_) device->failAll(error);
}

}  // namespace collx::transport
