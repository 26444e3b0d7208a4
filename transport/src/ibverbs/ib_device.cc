#include "ibverbs/ib_device.h"

#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "collx/base/hex.h"
#include "collx/base/log.h"

namespace collx::transport::ibverbs {

namespace {

constexpr int kBatch = 32;

// Credited receive slots per peer: fewer in large jobs, where every rank holds 2 x (slots + 2)
// slots for each of its peers (the same on every rank: both ends count on it).
int slotsFor(int size) { return size <= 64 ? 32 : size <= 512 ? 16 : 8; }
// Work requests per queue pair, for the completion queue's size (ib_pair.cc's caps).
int cqePerPair(int slots) { return 3 * (slots + IbPair::kSpareSlots) + 4; }

}  // namespace

IbDevice::IbDevice(LinkState& link, const JobMember& job, const IbOptions& options)
    : link_(link), job_(job), options_(options) {
  const Where where{job.rank, "ibverbs", -1};
  VerbsProbe probe = probeVerbs(options.library);
  if (!probe.usable())
    throw Unsupported(where, "RDMA verbs are not usable here: " + probe.unavailable);
  library_ = probe.library;
  const VerbsApi& api = library_->api();
  port_ = choosePort(listPorts(library_), HcaFilter::parse(options.hca), options.gidIndex);

  DeviceList list(library_);
  if (!list.ok() || port_.deviceIndex >= list.size()) {
    throw IoError(where, "device " + port_.device + " vanished");
  }
  auto need = [&](auto* raw, const char* what) {
    if (raw == nullptr) {
      throw IoError(where,
                    std::string(what) + " on " + port_.device + " failed: " + std::strerror(errno));
    }
    return raw;
  };
  context_ = Context(library_, need(api.openDevice(list[port_.deviceIndex]), "ibv_open_device"),
                     api.closeDevice, "device context");
  pd_ = ProtectionDomain(library_, need(api.allocPd(context_.get()), "ibv_alloc_pd"), api.deallocPd,
                         "protection domain");
  channel_ = CompletionChannel(
      library_, need(api.createCompChannel(context_.get()), "ibv_create_comp_channel"),
      api.destroyCompChannel, "completion channel");
  const int flags = ::fcntl(channel_->fd, F_GETFL);
  if (flags < 0 || ::fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    throw IoError(where,
                  std::string("fcntl on the completion channel failed: ") + std::strerror(errno));
  }
  ibv_device_attr attr{};
  int maxCqe = 65536;
  if (api.queryDevice(context_.get(), &attr) == 0 && attr.max_cqe > 0) maxCqe = attr.max_cqe;
  const int slots = slotsFor(job.size);
  const int cqe = static_cast<int>(
      std::min<std::int64_t>(maxCqe, std::int64_t{std::max(1, job.size - 1)} * cqePerPair(slots)));
  cq_ = CompletionQueue(
      library_,
      need(api.createCq(context_.get(), cqe, nullptr, channel_.get(), 0), "ibv_create_cq"),
      api.destroyCq, "completion queue");
  registrations_ = std::make_unique<Registrations>(library_, pd_.get(), options.mrCacheBytes);

  IbPairOptions pairOptions;
  pairOptions.eagerLimit = options.eagerLimit;
  pairOptions.slots = slots;
  pairOptions.maxWrite = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(port_.maxMessage > 0 ? port_.maxMessage : 1u << 30, 1u << 30));
  pairOptions.jobHash = jobHash(job.jobId, job.generation);
  pairOptions.generation = job.generation;
  pairOptions.jobId = job.jobId;
  pairOptions.secret = job.secret;
  pairs_.resize(static_cast<std::size_t>(job.size));

  // The address: "<lid>-<mtu>-<global>-<gid>/<qpn>.<psn>,..." by rank (self: 0.0).
  address_ = std::to_string(port_.lid) + "-" + std::to_string(static_cast<int>(port_.activeMtu)) +
             "-" + (port_.gidIndex >= 0 ? "1" : "0") + "-" + hexBytes(port_.gid.raw, 16) + "/";
  for (int peer = 0; peer < job.size; ++peer) {
    if (peer != job.rank) {
      pairs_[peer] = std::make_unique<IbPair>(peer, link_, library_, port_, pd_.get(), cq_.get(),
                                              *registrations_, pairOptions);
    }
    if (peer > 0) address_ += ",";
    address_ += peer == job.rank ? std::string("0.0")
                                 : std::to_string(pairs_[peer]->qpn()) + "." +
                                       std::to_string(pairs_[peer]->psn());
  }
  COLLX_DEBUG(kIbverbs, "rank {}: ibverbs on {}", job.rank, port_.describe());
}

IbDevice::~IbDevice() {
  bool waiting = false;
  for (IbPair* pair : active_) {
    pair->sendGoodbye();
    waiting |= pair->sendsOutstanding() > 0;
  }
  if (waiting) drain(std::chrono::milliseconds(200));
  active_.clear();
  byQpn_.clear();
  pairs_.clear();  // queue pairs first
  consumeEvents();
  if (cq_ && unacked_ > 0) library_->api().ackCqEvents(cq_.get(), unacked_);
  unacked_ = 0;
}

bool IbDevice::parse(const std::string& text, Published* out) {
  const std::size_t slash = text.find('/');
  if (slash == std::string::npos) return false;
  unsigned lid = 0, mtu = 0, global = 0;
  char gid[33] = {};
  if (std::sscanf(text.c_str(), "%u-%u-%u-%32[0-9a-f]", &lid, &mtu, &global, gid) != 4)
    return false;
  if (mtu < IBV_MTU_256 || mtu > IBV_MTU_4096 || lid > 0xffff) return false;
  out->port.lid = static_cast<std::uint16_t>(lid);
  out->port.mtu = static_cast<ibv_mtu>(mtu);
  out->port.global = global != 0;
  if (!parseHexBytes(gid, out->port.gid.raw, 16)) return false;
  out->qps.clear();
  std::size_t at = slash + 1;
  while (at <= text.size()) {
    std::size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    unsigned long qpn = 0, psn = 0;
    if (std::sscanf(text.substr(at, end - at).c_str(), "%lu.%lu", &qpn, &psn) != 2) return false;
    out->qps.push_back(
        QpAddress{static_cast<std::uint32_t>(qpn), static_cast<std::uint32_t>(psn & 0xffffff)});
    at = end + 1;
  }
  return true;
}

bool IbDevice::canConnect(int peer, const std::string& peerAddress) const {
  Published published;
  if (peer < 0 || peer >= job_.size || pairs_[peer] == nullptr) return false;
  if (!parse(peerAddress, &published)) return false;
  if (static_cast<int>(published.qps.size()) != job_.size) return false;
  // Both InfiniBand (LIDs) or both addressed by GID.
  return published.port.global == (port_.gidIndex >= 0) && published.qps[job_.rank].qpn != 0;
}

std::vector<Pair*> IbDevice::connect(const std::vector<int>& peers,
                                     const std::vector<std::string>& addresses,
                                     std::chrono::steady_clock::time_point deadline) {
  const Where where{job_.rank, "connect", -1};
  std::vector<bool> chosen(pairs_.size(), false);
  for (std::size_t i = 0; i < peers.size(); ++i) {
    Published published;
    if (!parse(addresses[i], &published) || static_cast<int>(published.qps.size()) != job_.size) {
      throw InvalidArgument(Where{job_.rank, "connect", peers[i]},
                            "bad ibverbs address '" + addresses[i] + "'");
    }
    IbPair* pair = pairs_[peers[i]].get();
    chosen[peers[i]] = true;
    byQpn_[pair->qpn()] = pair;
    active_.push_back(pair);
    pair->start(published.port, published.qps[job_.rank]);
  }
  // The peers that another transport reaches need no queue pair.
  for (std::size_t peer = 0; peer < pairs_.size(); ++peer) {
    if (!chosen[peer]) pairs_[peer].reset();
  }
  auto allEstablished = [&] {
    return std::all_of(active_.begin(), active_.end(),
                       [](IbPair* pair) { return pair->established(); });
  };
  while (!allEstablished()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string missing;
      for (IbPair* pair : active_) {
        if (pair->established()) continue;
        missing += (missing.empty() ? "" : "; ") + std::string("rank ") +
                   std::to_string(pair->peer()) + " (" + pair->waitingFor() + ")";
      }
      throw TimeoutError(where, "could not connect over ibverbs within the timeout to " + missing);
    }
    if (pollOnce() > 0) continue;
    if (prepareToSleep()) {
      pollfd fd{channel_->fd, POLLIN, 0};
      ::poll(&fd, 1, 10);
      if (fd.revents & POLLIN) consumeEvents();
    }
    if (!stash_.empty()) {
      std::vector<ibv_wc> stash;
      stash.swap(stash_);
      for (const ibv_wc& wc : stash) dispatch(wc);
    }
  }
  std::vector<Pair*> out;
  out.reserve(peers.size());
  for (int peer : peers) out.push_back(pairs_[peer].get());
  COLLX_DEBUG(kIbverbs, "rank {}: connected to {} peers over ibverbs ({})", job_.rank, peers.size(),
              port_.describe());
  return out;
}

int IbDevice::pollOnce() {
  ibv_wc wc[kBatch];
  const int n = VerbsApi::pollCq(cq_.get(), kBatch, wc);
  if (n < 0) {
    throw IoError(Where{job_.rank, "ibverbs", -1}, "ibv_poll_cq failed (" + std::to_string(n) +
                                                       "): the completion queue of " +
                                                       port_.device + " overflowed or broke");
  }
  for (int i = 0; i < n; ++i) dispatch(wc[i]);
  return n;
}

void IbDevice::dispatch(const ibv_wc& wc) {
  auto it = byQpn_.find(wc.qp_num);
  if (it != byQpn_.end()) it->second->onCompletion(wc);
}

void IbDevice::consumeEvents() noexcept {
  if (!channel_) return;
  const VerbsApi& api = library_->api();
  for (;;) {
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    if (api.getCqEvent(channel_.get(), &cq, &context) != 0) break;
    ++unacked_;
    armed_ = false;
  }
  if (unacked_ > 0) {
    api.ackCqEvents(cq_.get(), unacked_);
    unacked_ = 0;
  }
}

bool IbDevice::prepareToSleep() {
  if (!stash_.empty()) return false;
  if (!armed_) {
    if (int rc = VerbsApi::reqNotifyCq(cq_.get(), false); rc != 0) {
      throw IoError(Where{job_.rank, "ibverbs", -1},
                    std::string("ibv_req_notify_cq failed: ") + std::strerror(rc));
    }
    armed_ = true;
  }
  // What completed before the queue was armed raises no event: look once more.
  ibv_wc wc[kBatch];
  const int n = VerbsApi::pollCq(cq_.get(), kBatch, wc);
  if (n > 0) {
    stash_.assign(wc, wc + n);
    return false;
  }
  return true;
}

std::size_t IbDevice::addPollFds(std::vector<pollfd>& fds) {
  fds.push_back(pollfd{channel_->fd, POLLIN, 0});
  return 1;
}

bool IbDevice::progress(const pollfd* results, std::size_t count) {
  bool moved = false;
  if (armed_ && count > 0 && (results[0].revents & POLLIN)) consumeEvents();
  if (!stash_.empty()) {
    std::vector<ibv_wc> stash;
    stash.swap(stash_);
    for (const ibv_wc& wc : stash) dispatch(wc);
    moved = true;
  }
  for (int batch = 0; batch < 16 && pollOnce() > 0; ++batch) moved = true;
  const auto now = std::chrono::steady_clock::now();
  for (IbPair* pair : active_) pair->afterProgress(now);
  return moved;
}

void IbDevice::drain(std::chrono::milliseconds budget, int skip) noexcept {
  const auto until = std::chrono::steady_clock::now() + budget;
  for (;;) {
    bool outstanding = false;
    for (IbPair* pair : active_) {
      outstanding |= pair->peer() != skip && pair->sendsOutstanding() > 0;
    }
    if (!outstanding || std::chrono::steady_clock::now() >= until) return;
    ibv_wc wc[kBatch];
    const int n = VerbsApi::pollCq(cq_.get(), kBatch, wc);
    if (n < 0) return;
    for (int i = 0; i < n; ++i) {
      auto it = byQpn_.find(wc[i].qp_num);
      if (it != byQpn_.end()) it->second->drainCompletion(wc[i]);
    }
    if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void IbDevice::failAll(const Error& error) noexcept {
  // Every peer learns why this rank fails (as over tcp), then everything stops.
  for (IbPair* pair : active_) pair->sendError(error.kind(), error.detail(), error.peer());
  // (Not waiting for the culprit's: a dead peer's queue pair answers only after its retries,
  // half a second; the others' matter, and their SENDs complete at once.)
  drain(std::chrono::milliseconds(100), error.kind() == ErrorKind::kIo ? error.peer() : -1);
  for (IbPair* pair : active_) pair->failAll(error);
}

void IbDevice::reform(std::int64_t generation, const std::vector<bool>& keep) {
  for (IbPair* pair : active_) {
    const auto peer = static_cast<std::size_t>(pair->peer());
    if (peer < keep.size() && keep[peer]) pair->reformTo(generation);
  }
}

void IbDevice::resume() {
  for (IbPair* pair : active_) pair->resume();
}

}  // namespace collx::transport::ibverbs
