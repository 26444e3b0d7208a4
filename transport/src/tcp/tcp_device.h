// TcpDevice: the TCP transport of one context: a listener, and a TcpPair per peer over
// `streams` connections each. Connecting uses Asio (resolve, connect and accept bounded by
// the deadline, a hello that proves the connection comes from a rank of this job and
// generation); the data path then runs on the raw sockets under the mesh's poll loop,
// because Asio's reactor keeps every socket armed for readability and would wake a thread
// on every message even while the caller polls for it itself.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collx/transport/device.h"
#include "collx/transport/link.h"
#include "collx/transport/options.h"
#include "tcp_pair.h"

namespace collx::transport::tcp {

// The IP address a TcpDevice with `options` listens on (without the port).
std::string localAddress(const TcpOptions& options, int rank);

class TcpDevice final : public Device {
 public:
  // Picks the local address (COLLX_IFNAME, else the one that routes to options.routeHost,
  // else as unroutedTcpAddress() in options.h says) and listens on it. Throws IoError /
  // InvalidArgument.
  TcpDevice(LinkState& link, const JobMember& job, const TcpOptions& options);
  ~TcpDevice() override;

  const char* name() const override { return "tcp"; }
  std::string address() const override { return address_; }
  bool canConnect(int peer, const std::string& peerAddress) const override;
  std::vector<Pair*> connect(const std::vector<int>& peers,
                             const std::vector<std::string>& addresses,
                             std::chrono::steady_clock::time_point deadline) override;
  bool prepareToSleep() override;
  std::size_t addPollFds(std::vector<pollfd>& fds) override;
  bool progress(const pollfd* results, std::size_t count) override;
  void failAll(const Error& error) noexcept override;
  std::string gone(int peer) const override;
  // A new listener on the same address (connect() closed the last one), for newcomers.
  std::string listenAgain() override;

 private:
  struct Impl;
  // (Re)opens the listener on `ip` at a free port; address_ says where. Throws IoError.
  void listenOn(const std::string& ip);
  // TLS on every connection of `fds` (rows as `peers`), handshakes all at once until
  // `deadline`; throws IoError naming the peer and OpenSSL's reason.
  std::vector<std::vector<std::unique_ptr<secure::TlsStream>>> startTls(
      const std::vector<int>& peers, const std::vector<std::string>& addresses,
      const std::vector<std::vector<int>>& fds, std::chrono::steady_clock::time_point deadline);

  LinkState& link_;
  JobMember job_;
  TcpOptions options_;
  std::string address_;  // "ip:port" ("[v6]:port")
  std::unique_ptr<Impl> impl_;
  std::vector<std::unique_ptr<TcpPair>> pairs_;
};

}  // namespace collx::transport::tcp
