// SelfDevice: a rank talking to itself. A send is copied at once (so a rank can send to
// itself before it posts the receive) and handed to the oldest receive with an equal key.
#pragma once

#include <deque>
#include <unordered_map>
#include <vector>

#include "collx/base/error.h"
#include "collx/transport/device.h"
#include "collx/transport/link.h"

namespace collx::transport {

class SelfPair final : public Pair {
 public:
  SelfPair(int rank, LinkState& link) : Pair(rank), link_(link) {}
  void post(Request& request) override;
  std::string describe() const override { return "self"; }
  void failAll(const Error& error) noexcept;

 private:
  struct Sent {
    Fingerprint fingerprint;
    std::vector<std::uint8_t> bytes;
  };
  void deliver(Request& recv, Sent& sent);
  LinkState& link_;
  std::unordered_map<MessageKey, std::deque<Sent>, MessageKeyHash> sent_;
  std::unordered_map<MessageKey, std::deque<Request*>, MessageKeyHash> recvs_;
};

class SelfDevice final : public Device {
 public:
  SelfDevice(int rank, LinkState& link) : rank_(rank), pair_(rank, link) {}
  const char* name() const override { return "self"; }
  std::string address() const override { return "self"; }
  bool canConnect(int peer, const std::string&) const override { return peer == rank_; }
  std::vector<Pair*> connect(const std::vector<int>&, const std::vector<std::string>&,
                             std::chrono::steady_clock::time_point) override {
    return {&pair_};
  }
  std::size_t addPollFds(std::vector<pollfd>&) override { return 0; }
  bool progress(const pollfd*, std::size_t) override { return false; }
  void failAll(const Error& error) noexcept override { pair_.failAll(error); }

 private:
  int rank_;
  SelfPair pair_;
};

}  // namespace collx::transport
