// IbDevice: the RDMA verbs transport of one context: one port (ib_port.h), one protection
// domain, one completion queue with its completion channel, and an IbPair (an RC queue pair)
// per peer.
//
// Addresses: a rank creates a queue pair for every peer when the device is made, and
// publishes, through the store like every transport's address, its port's address (LID, GID,
// MTU) and each queue pair's number and first PSN. connect() moves the chosen peers' queue
// pairs to RTS and waits for both HELLOs of each (ib_pair.h); the others are destroyed.
//
// Progress: the caller's thread polls the completion queue; before the mesh sleeps in poll(),
// the queue is armed (ibv_req_notify_cq) and the channel's descriptor wakes it at the next
// completion, so that a waiting rank uses no CPU.
//
// Destruction, on every path: queue pairs, then the completion queue (its events
// acknowledged), the channel, the registrations, the protection domain, the context.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "collx/transport/device.h"
#include "collx/transport/link.h"
#include "collx/transport/options.h"
#include "ibverbs/ib_pair.h"
#include "ibverbs/ib_port.h"
#include "ibverbs/registrations.h"
#include "ibverbs/verbs_api.h"

namespace collx::transport::ibverbs {

class IbDevice final : public Device {
 public:
  // Loads the verbs library, picks the port, opens it and creates a queue pair per peer.
  // Throws Unsupported (no library, no usable port: the sentence says why) or IoError.
  IbDevice(LinkState& link, const JobMember& job, const IbOptions& options);
  ~IbDevice() override;

  const char* name() const override { return "ibverbs"; }
  std::string address() const override { return address_; }
  bool canConnect(int peer, const std::string& peerAddress) const override;
  std::vector<Pair*> connect(const std::vector<int>& peers,
                             const std::vector<std::string>& addresses,
                             std::chrono::steady_clock::time_point deadline) override;
  bool prepareToSleep() override;
  std::size_t addPollFds(std::vector<pollfd>& fds) override;
  bool progress(const pollfd* results, std::size_t count) override;
  void failAll(const Error& error) noexcept override;
  // The kept peers' queue pairs start again in `generation` (ib_pair.h), parked until
  // resume().
  void reform(std::int64_t generation, const std::vector<bool>& keep) override;
  void resume() override;

 private:
  struct Published {
    PortAddress port;
    std::vector<QpAddress> qps;  // by rank
  };
  static bool parse(const std::string& text, Published* out);

  // Polls the completion queue once (up to a batch) and hands each completion to its pair.
  // Returns how many there were.
  int pollOnce();
  void dispatch(const ibv_wc& wc);
  // Best effort, bounded: polls until every pair's SENDs (but those to `skip`, a rank known
  // failed) completed or `budget` passed, accounting completions without acting on them
  // (closing or failing).
  void drain(std::chrono::milliseconds budget, int skip = -1) noexcept;
  void consumeEvents() noexcept;

  LinkState& link_;
  JobMember job_;
  IbOptions options_;
  std::shared_ptr<const VerbsLibrary> library_;
  PortChoice port_;
  Context context_;
  ProtectionDomain pd_;
  CompletionChannel channel_;
  CompletionQueue cq_;
  std::unique_ptr<Registrations> registrations_;
  std::vector<std::unique_ptr<IbPair>> pairs_;  // by rank; null: self, or not connected here
  std::unordered_map<std::uint32_t, IbPair*> byQpn_;
  std::vector<IbPair*> active_;  // the connected pairs
  std::string address_;
  bool armed_ = false;
  unsigned unacked_ = 0;       // channel events not yet acknowledged
  std::vector<ibv_wc> stash_;  // polled while preparing to sleep, handled by progress()
};

}  // namespace collx::transport::ibverbs
