#include "tcp_device.h"

#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <algorithm>
#include <asio.hpp>
#include <cstring>
#include <map>

#include "collx/base/log.h"
#include "collx/secure/job_secret.h"
#include "collx/secure/tls.h"
#include "tcp_hello.h"

namespace collx::transport::tcp {

using asio::ip::tcp;

namespace {

// A connection between two ranks (the higher dials the lower, once per stream):
//   dialer -> acceptor  Hello: who, which stream, its eager limit, whether it holds the job's
//                       secret, and its nonce Nd
//   acceptor -> dialer  Ack: a status, its eager limit, its nonce Na and its proof
//                       Ma = HMAC(pair key, "acceptor" | job id | Hello | Na | its eager limit)
//   dialer -> acceptor  Proof: Md = HMAC(pair key, "dialer" | job id | Hello | Na | Ma)
//   acceptor -> dialer  Final: a status (kAckOk: the connection is the pair's stream)
// Each proof is bound to the job, the generation, both ranks, the stream and both nonces, so
// it is good for this one connection. The dialer checks Ma before it proves anything, and
// the acceptor gives the stream's slot only to a connection whose proof holds: a stranger
// is refused, logged with its address, and the job goes on. Without a secret on both sides
// the proofs are left zero. (The pair key is the job secret's: secure::Purpose::kPair.)
// With TLS (both hellos say kUsesTls), every connection then goes on in TLS: the dialer is
// the client, both show their certificates, and the acceptor's first sealed byte (kTlsReady)
// tells the dialer that its certificate was taken, so that a refusal fails the connect
// rather than the first message.
std::span<const std::uint8_t> bytesOf(const void* data, std::size_t size) {
  return {static_cast<const std::uint8_t*>(data), size};
}

secure::Tag acceptorProof(const secure::JobSecret& secret, const std::string& job,
                          const Hello& hello, const Ack& ack) {
  return secret.mac(secure::Purpose::kPair,
                    {"acceptor", job, bytesOf(&hello, sizeof hello), ack.nonce,
                     bytesOf(&ack.eagerLimit, sizeof ack.eagerLimit)});
}

secure::Tag dialerProof(const secure::JobSecret& secret, const std::string& job, const Hello& hello,
                        const Ack& ack) {
  return secret.mac(secure::Purpose::kPair,
                    {"dialer", job, bytesOf(&hello, sizeof hello), ack.nonce, ack.proof});
}

std::string hostPort(const asio::ip::address& address, std::uint16_t port) {
  std::string host = address.to_string();
  if (address.is_v6()) host = "[" + host + "]";
  return host + ":" + std::to_string(port);
}

bool isLoopback(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr) >> 24) == 127;
  }
  if (address->sa_family == AF_INET6) {
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);
  }
  return false;
}

// The first address (IPv4 first; IPv6 link-local ones skipped) of the interfaces `accept`
// takes, or ""; `names`, when given, receives every interface's name, comma-separated.
// Throws IoError when the interfaces cannot be listed.
template <typename Accept>
std::string firstAddress(Accept accept, const Where& where, std::string* names = nullptr) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    throw IoError(where, std::string("getifaddrs failed: ") + std::strerror(errno));
  }
  std::string v4, v6, seen;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (seen.find(std::string(i->ifa_name) + ",") == std::string::npos) {
      seen += std::string(i->ifa_name) + ",";
    }
    if (!accept(*i)) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (i->ifa_addr->sa_family == AF_INET && v4.empty()) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf,
                  sizeof(buf));
      v4 = buf;
    } else if (i->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      auto* a6 = reinterpret_cast<sockaddr_in6*>(i->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) continue;
      ::inet_ntop(AF_INET6, &a6->sin6_addr, buf, sizeof(buf));
      v6 = buf;
    }
  }
  ::freeifaddrs(list);
  if (names != nullptr) {
    if (!seen.empty()) seen.pop_back();
    *names = seen;
  }
  return !v4.empty() ? v4 : v6;
}

// The address of interface `name`, IPv4 preferred.
std::string interfaceAddress(const std::string& name, const Where& where) {
  std::string names;
  std::string address =
      firstAddress([&name](const ifaddrs& i) { return name == i.ifa_name; }, where, &names);
  if (!address.empty()) return address;
  throw InvalidArgument(
      where,
      "COLLX_IFNAME=" + name + ": no such interface with an address (interfaces: " + names + ")");
}

// The local address whose route reaches `host` (no packet is sent: a UDP connect only
// asks the kernel for the route).
std::string routeTo(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* list = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &list) != 0) return "";
  std::string result;
  for (addrinfo* ai = list; ai != nullptr && result.empty(); ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      sockaddr_storage local{};
      socklen_t len = sizeof(local);
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
        char buf[INET6_ADDRSTRLEN] = {};
        if (local.ss_family == AF_INET) {
          ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&local)->sin_addr, buf, sizeof(buf));
        } else {
          ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr, buf,
                      sizeof(buf));
        }
        result = buf;
      }
    }
    ::close(fd);
  }
  ::freeaddrinfo(list);
  return result;
}

// Whether `host` resolves (here) to an address other than loopback.
bool resolvesBeyondLoopback(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &list) != 0) return false;
  bool found = false;
  for (addrinfo* ai = list; ai != nullptr && !found; ai = ai->ai_next) {
    found = !isLoopback(ai->ai_addr);
  }
  ::freeaddrinfo(list);
  return found;
}

// This host's first interface address that is up and not loopback, or "".
std::string upInterfaceAddress(const Where& where) {
  return firstAddress(
      [](const ifaddrs& i) { return (i.ifa_flags & IFF_UP) != 0 && !isLoopback(i.ifa_addr); },
      where);
}

// This host's name, when it resolves (here) to more than loopback, else "".
std::string routableHostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "";
  return resolvesBeyondLoopback(name) ? std::string(name) : "";
}

std::string chooseLocalAddress(const TcpOptions& options, const Where& where) {
  if (!options.ifname.empty()) return interfaceAddress(options.ifname, where);
  if (!options.routeHost.empty()) {
    std::string routed = routeTo(options.routeHost);
    if (!routed.empty()) return routed;
  }
  // No store address to route toward (a file store in a shared directory, PMIx, ranks in
  // one process): an address that ranks on other hosts can reach, as reachableAddress()
  // picks it. A host name that resolves to loopback only (Debian's 127.0.1.1) would send
  // them to their own host.
  const std::string name = routableHostName();
  if (!name.empty()) {
    std::string routed = routeTo(name);
    if (!routed.empty()) return routed;
  }
  std::string address = upInterfaceAddress(where);
  return address.empty() ? "127.0.0.1" : address;
}

void configureSocket(int fd, int bufferBytes) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  if (bufferBytes > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufferBytes, sizeof(bufferBytes));
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufferBytes, sizeof(bufferBytes));
  }
}

}  // namespace

struct TcpDevice::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
};

TcpDevice::TcpDevice(LinkState& link, const JobMember& job, const TcpOptions& options)
    : link_(link), job_(job), options_(options), impl_(std::make_unique<Impl>()) {
  listenOn(chooseLocalAddress(options_, Where{job.rank, "tcp listen", -1}));
  COLLX_DEBUG(kTcp, "rank {}: listening on {}", job_.rank, address_);
}

void TcpDevice::listenOn(const std::string& ip) {
  Where where{job_.rank, "tcp listen", -1};
  asio::error_code ec;
  auto address = asio::ip::make_address(ip, ec);
  if (ec) throw IoError(where, "bad local address '" + ip + "'");
  tcp::endpoint endpoint(address, 0);
  asio::error_code ignored;
  impl_->acceptor.close(ignored);
  impl_->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl_->acceptor.bind(endpoint, ec);
  if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw IoError(where, "cannot listen on " + ip + ": " + ec.message());
  address_ = hostPort(address, impl_->acceptor.local_endpoint().port());
}

TcpDevice::~TcpDevice() {
  for (auto& pair : pairs_) pair->sendGoodbye();
}

bool TcpDevice::canConnect(int, const std::string& peerAddress) const {
  return !peerAddress.empty();
}

std::vector<Pair*> TcpDevice::connect(const std::vector<int>& peers,
                                      const std::vector<std::string>& addresses,
                                      std::chrono::steady_clock::time_point deadline) {
  const int self = job_.rank;
  const int streams = options_.streams;
  const std::uint64_t job = jobHash(job_.jobId, job_.generation);
  Where where{self, "connect (tcp)", -1};
  std::map<int, std::size_t> index;
  for (std::size_t i = 0; i < peers.size(); ++i) index[peers[i]] = i;
  std::vector<std::vector<int>> fds(peers.size(), std::vector<int>(streams, -1));
  std::vector<std::string> lastError(peers.size());
  // Both ends of a pair send eagerly up to the smaller of their eager limits, so that each
  // knows which messages the other announces.
  std::vector<std::uint64_t> eagerLimits(peers.size(), options_.eagerLimit);
  std::size_t needOut = 0, needIn = 0, doneOut = 0, doneIn = 0;
  for (int peer : peers) (peer < self ? needOut : needIn) += static_cast<std::size_t>(streams);
  std::string fatal;  // a refusal that retrying cannot fix

  asio::io_context& io = impl_->io;
  io.restart();
  asio::steady_timer timer(io);
  timer.expires_at(deadline);
  timer.async_wait([&](const asio::error_code& ec) {
    if (!ec) io.stop();
  });
  auto finished = [&] {
    if ((doneOut == needOut && doneIn == needIn) || !fatal.empty()) io.stop();
  };

  // Outgoing: this rank dials every lower rank, once per stream, retrying until the deadline.
  const std::shared_ptr<const secure::JobSecret>& secret = job_.secret;
  std::function<void(std::size_t, int)> dial = [&](std::size_t i, int stream) {
    auto socket = std::make_shared<tcp::socket>(io);
    auto hello = std::make_shared<Hello>();
    std::memset(hello.get(), 0, sizeof(Hello));
    std::memcpy(hello->magic, kHelloMagic, 4);
    hello->version = kHelloVersion;
    hello->job = job;
    hello->generation = job_.generation;
    hello->from = self;
    hello->to = peers[i];
    hello->stream = static_cast<std::uint32_t>(stream);
    hello->streams = static_cast<std::uint32_t>(streams);
    hello->eagerLimit = options_.eagerLimit;
    hello->flags = (secret ? kHoldsSecret : 0) | (job_.tls ? kUsesTls : 0);
    if (secret) hello->nonce = secure::randomNonce();
    auto ack = std::make_shared<Ack>();
    auto proof = std::make_shared<secure::Tag>();
    auto verdict = std::make_shared<std::uint32_t>(kAckOk);
    auto retry = [&, i, stream](const std::string& why) {
      lastError[i] = why;
      auto wait = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(50));
      wait->async_wait([&, wait, i, stream](const asio::error_code& ec) {
        if (!ec) dial(i, stream);
      });
    };
    auto refused = [&, i](std::uint32_t status) {
      fatal = "rank " + std::to_string(peers[i]) + " (" + addresses[i] +
              ") refused the connection: " + ackText(status);
      finished();
    };
    // The last step: the acceptor's verdict on this rank's proof.
    auto readVerdict = [&, socket, ack, verdict, i, stream, retry, refused] {
      asio::async_read(*socket, asio::buffer(verdict.get(), sizeof(std::uint32_t)),
                       [&, socket, ack, verdict, i, stream, retry, refused](
                           const asio::error_code& ec, std::size_t) {
                         if (ec) return retry("no answer to the proof: " + ec.message());
                         if (*verdict != kAckOk) return refused(*verdict);
                         eagerLimits[i] = std::min(eagerLimits[i], ack->eagerLimit);
                         fds[i][stream] = socket->release();
                         ++doneOut;
                         finished();
                       });
    };
    tcp::endpoint endpoint = parseEndpoint(addresses[i], where);
    socket->async_connect(endpoint, [&, socket, hello, ack, proof, i, retry, refused,
                                     readVerdict](const asio::error_code& ec) {
      if (ec == asio::error::connection_refused && options_.peersListen) {
        fatal = "rank " + std::to_string(peers[i]) + " (" + addresses[i] +
                ") refused the connection: nothing listens there any more, it is gone (it "
                "listened before it published that address)";
        return finished();
      }
      if (ec) return retry(ec.message());
      asio::async_write(
          *socket, asio::buffer(hello.get(), sizeof(Hello)),
          [&, socket, hello, ack, proof, i, retry, refused, readVerdict](
              const asio::error_code& ec2, std::size_t) {
            if (ec2) return retry(ec2.message());
            asio::async_read(
                *socket, asio::buffer(ack.get(), sizeof(Ack)),
                [&, socket, hello, ack, proof, i, retry, refused, readVerdict](
                    const asio::error_code& ec3, std::size_t) {
                  if (ec3) return retry("no answer to the hello: " + ec3.message());
                  if (!isCollxAck(*ack)) {
                    fatal = "what listens at " + addresses[i] + " for rank " +
                            std::to_string(peers[i]) + " is not a collx rank";
                    return finished();
                  }
                  if (ack->status != kAckOk) return refused(ack->status);
                  if (secret) {
                    // The acceptor proves the secret first: this rank proves nothing to a stranger.
                    if (!secure::sameBytes(acceptorProof(*secret, job_.jobId, *hello, *ack),
                                           ack->proof)) {
                      fatal =
                          "rank " + std::to_string(peers[i]) + " at " + addresses[i] +
                          " could not prove that it holds the job's secret: the ranks were given "
                          "different secrets, or something else listens there";
                      return finished();
                    }
                    *proof = dialerProof(*secret, job_.jobId, *hello, *ack);
                  }
                  asio::async_write(
                      *socket, asio::buffer(proof->data(), proof->size()),
                      [proof, retry, readVerdict](const asio::error_code& ec4, std::size_t) {
                        if (ec4) return retry(ec4.message());
                        readVerdict();
                      });
                });
          });
    });
  };
  for (std::size_t i = 0; i < peers.size(); ++i) {
    if (peers[i] < self) {
      for (int s = 0; s < streams; ++s) dial(i, s);
    }
  }

  // Incoming: every higher rank dials us. Anything else that connects is refused and logged,
  // and takes no stream's slot: a slot goes to a connection only once its proof holds.
  // Connections still in their handshake when connecting ends (a stranger's, a duplicate's)
  // are closed then: nobody would ever answer them.
  std::vector<std::weak_ptr<tcp::socket>> handshakes;
  std::function<void()> acceptNext = [&] {
    impl_->acceptor.async_accept([&](const asio::error_code& ec, tcp::socket accepted) {
      if (ec) {
        if (ec != asio::error::operation_aborted) acceptNext();
        return;
      }
      auto socket = std::make_shared<tcp::socket>(std::move(accepted));
      handshakes.push_back(socket);
      auto hello = std::make_shared<Hello>();
      std::string from = "unknown";
      asio::error_code ignored;
      auto remote = socket->remote_endpoint(ignored);
      if (!ignored) from = hostPort(remote.address(), remote.port());
      asio::async_read(
          *socket, asio::buffer(hello.get(), sizeof(Hello)),
          [&, socket, hello, from](const asio::error_code& ec2, std::size_t) {
            if (ec2) {
              COLLX_WARN(kTcp, "rank {}: dropped a connection from {} that sent no hello: {}", self,
                         from, ec2.message());
              return;
            }
            auto refuse = [&, socket, from](std::uint32_t status, const std::string& why) {
              COLLX_WARN(kTcp, "rank {}: refused a connection from {}: {}", self, from, why);
              if (status == 0xFFFFFFFFu) return;  // not even a collx hello: just close
              auto ack = std::make_shared<Ack>();
              std::memset(ack.get(), 0, sizeof(Ack));
              std::memcpy(ack->magic, kHelloMagic, 4);
              ack->status = status;
              asio::async_write(*socket, asio::buffer(ack.get(), sizeof(Ack)),
                                [socket, ack](const asio::error_code&, std::size_t) {});
            };
            auto it = index.find(hello->from);
            const HelloExpectation expect{job,
                                          job_.generation,
                                          self,
                                          static_cast<std::uint32_t>(streams),
                                          secret != nullptr,
                                          job_.tls != nullptr};
            const HelloVerdict verdict = checkHello(*hello, expect, it != index.end());
            if (verdict.status != kAckOk) return refuse(verdict.status, verdict.why);
            auto ack = std::make_shared<Ack>();
            std::memset(ack.get(), 0, sizeof(Ack));
            std::memcpy(ack->magic, kHelloMagic, 4);
            ack->status = kAckOk;
            ack->eagerLimit = options_.eagerLimit;
            if (secret) {
              ack->nonce = secure::randomNonce();
              ack->proof = acceptorProof(*secret, job_.jobId, *hello, *ack);
            }
            auto proof = std::make_shared<secure::Tag>();
            const std::size_t peerIndex = it->second;
            asio::async_write(
                *socket, asio::buffer(ack.get(), sizeof(Ack)),
                [&, socket, hello, ack, proof, from, peerIndex](const asio::error_code& ec3,
                                                                std::size_t) {
                  if (ec3) return;
                  asio::async_read(
                      *socket, asio::buffer(proof->data(), proof->size()),
                      [&, socket, hello, ack, proof, from, peerIndex](const asio::error_code& ec4,
                                                                      std::size_t) {
                        if (ec4) {
                          COLLX_WARN(kTcp,
                                     "rank {}: dropped a connection from {} that sent no proof: {}",
                                     self, from, ec4.message());
                          return;
                        }
                        auto status = std::make_shared<std::uint32_t>(kAckOk);
                        auto answer = [socket, status](std::uint32_t value) {
                          *status = value;
                          asio::async_write(
                              *socket, asio::buffer(status.get(), sizeof(std::uint32_t)),
                              [socket, status](const asio::error_code&, std::size_t) {});
                        };
                        if (secret && !secure::sameBytes(
                                          dialerProof(*secret, job_.jobId, *hello, *ack), *proof)) {
                          COLLX_WARN(
                              kTcp,
                              "rank {}: refused a connection from {} (it says it is rank {}): it "
                              "failed the job secret's challenge",
                              self, from, hello->from);
                          return answer(kAckAuthFailed);
                        }
                        int* slot = &fds[peerIndex][hello->stream];
                        if (*slot != -1) {
                          COLLX_WARN(
                              kTcp,
                              "rank {}: refused a connection from {}: a second connection from "
                              "rank {} stream {}",
                              self, from, hello->from, hello->stream);
                          return answer(kAckDuplicate);
                        }
                        *slot = -2;  // reserved until the verdict is out
                        eagerLimits[peerIndex] =
                            std::min(eagerLimits[peerIndex], hello->eagerLimit);
                        asio::async_write(
                            *socket, asio::buffer(status.get(), sizeof(std::uint32_t)),
                            [&, socket, status, slot](const asio::error_code& ec5, std::size_t) {
                              if (ec5) {
                                *slot = -1;
                                return;
                              }
                              *slot = socket->release();
                              ++doneIn;
                              finished();
                            });
                      });
                });
          });
      if (doneIn < needIn) acceptNext();
    });
  };
  if (needIn > 0) acceptNext();
  if (needOut + needIn > 0) io.run();
  timer.cancel();
  asio::error_code ignored;
  impl_->acceptor.close(ignored);  // every expected connection is in (or we give up)
  for (const auto& weak : handshakes) {
    if (auto socket = weak.lock(); socket && socket->is_open()) socket->close(ignored);
  }
  io.restart();
  io.poll();  // let cancelled handlers run and release their sockets

  auto closeAll = [&] {
    for (auto& row : fds) {
      for (int& fd : row) {
        if (fd >= 0) ::close(fd);
        fd = -1;
      }
    }
  };
  if (!fatal.empty()) {
    closeAll();
    throw IoError(where, fatal);
  }
  if (doneOut != needOut || doneIn != needIn) {
    std::string missing;
    for (std::size_t i = 0; i < peers.size(); ++i) {
      int have = 0;
      for (int fd : fds[i]) have += fd >= 0 ? 1 : 0;
      if (have == streams) continue;
      missing += (missing.empty() ? "" : "; ") + std::string("rank ") + std::to_string(peers[i]);
      if (peers[i] < self) {
        missing += " (" + addresses[i] + ": " +
                   (lastError[i].empty() ? std::string("no answer") : lastError[i]) + ")";
      } else {
        missing += " (never connected to " + address_ + ")";
      }
    }
    closeAll();
    throw TimeoutError(where, "could not connect within the timeout to " + missing);
  }
  for (const auto& row : fds) {
    for (int fd : row) configureSocket(fd, options_.bufferBytes);
  }
  options_.peersListen = true;  // (a later connect() is admit()'s: see TcpOptions)
  std::vector<std::vector<std::unique_ptr<secure::TlsStream>>> tls;
  if (job_.tls) {
    try {
      tls = startTls(peers, addresses, fds, deadline);
    } catch (...) {
      closeAll();
      throw;
    }
  }
  std::vector<Pair*> out;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    TcpPairOptions pairOptions;
    pairOptions.limits.eagerLimit = eagerLimits[i];
    pairOptions.shortWrites = options_.shortWrites;
    pairs_.push_back(std::make_unique<TcpPair>(
        peers[i], link_, fds[i],
        job_.tls ? std::move(tls[i]) : std::vector<std::unique_ptr<secure::TlsStream>>{},
        pairOptions, addresses[i]));
    out.push_back(pairs_.back().get());
  }
  COLLX_DEBUG(kTcp, "rank {}: connected to {} peers over {} stream(s) each", self, peers.size(),
              streams);
  return out;
}

std::vector<std::vector<std::unique_ptr<secure::TlsStream>>> TcpDevice::startTls(
    const std::vector<int>& peers, const std::vector<std::string>& addresses,
    const std::vector<std::vector<int>>& fds, std::chrono::steady_clock::time_point deadline) {
  using Status = secure::TlsStream::Status;
  constexpr std::uint8_t kTlsReady = 0xC1;
  const int self = job_.rank;
  Where where{self, "connect (tcp, TLS)", -1};
  struct Shake {
    std::size_t peer;
    int fd;
    secure::TlsStream* tls;
    bool client;
    int phase = 0;  // 0: the handshake; 1: the acceptor's ready byte, the dialer's wait for it
    short want = POLLOUT;
  };
  std::vector<std::vector<std::unique_ptr<secure::TlsStream>>> out(peers.size());
  std::vector<Shake> shakes;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    const bool client = peers[i] < self;  // this rank dialed it
    for (int fd : fds[i]) {
      out[i].push_back(std::make_unique<secure::TlsStream>(
          job_.tls, fd,
          client ? secure::TlsStream::Role::kClient : secure::TlsStream::Role::kServer));
      shakes.push_back(Shake{i, fd, out[i].back().get(), client});
    }
  }
  auto refuse = [&](const Shake& h, const std::string& why) {
    throw IoError(Where{self, where.op, peers[h.peer]}, "TLS with rank " +
                                                            std::to_string(peers[h.peer]) + " (" +
                                                            addresses[h.peer] + ") failed: " + why);
  };
  // One step of a connection; true when it is done.
  auto step = [&](Shake& h) {
    while (true) {
      if (h.phase == 0) {
        const Status status = h.tls->handshakeStep();
        if (status == Status::kWantRead || status == Status::kWantWrite) {
          h.want = status == Status::kWantRead ? POLLIN : POLLOUT;
          return false;
        }
        if (status != Status::kOk) refuse(h, h.tls->error());
        h.phase = 1;
        if (!h.client) h.tls->write(&kTlsReady, 1);
        continue;
      }
      if (!h.client) {
        const Status status = h.tls->flush();
        if (status == Status::kOk) return true;
        if (status != Status::kWantWrite) refuse(h, h.tls->error());
        h.want = POLLOUT;
        return false;
      }
      std::uint8_t ready = 0;
      Status status = Status::kOk;
      if (h.tls->read(&ready, 1, status) == 1) {
        if (ready != kTlsReady) refuse(h, "its first TLS byte is not a collx rank's");
        return true;
      }
      if (status != Status::kWantRead) refuse(h, h.tls->error());
      h.want = POLLIN;
      return false;
    }
  };
  std::vector<Shake*> open;
  for (Shake& h : shakes) {
    if (!step(h)) open.push_back(&h);
  }
  std::vector<pollfd> polled;
  while (!open.empty()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      refuse(*open.front(), "the TLS handshake did not finish within the timeout");
    }
    polled.clear();
    for (Shake* h : open) polled.push_back(pollfd{h->fd, h->want, 0});
    ::poll(polled.data(), polled.size(),
           static_cast<int>(std::min<std::int64_t>(left.count(), 1000)));
    std::vector<Shake*> still;
    for (std::size_t k = 0; k < open.size(); ++k) {
      if (polled[k].revents == 0 || !step(*open[k])) still.push_back(open[k]);
    }
    open.swap(still);
  }
  static std::once_flag logged;
  std::call_once(logged, [&] {
    std::string kernel;
    if (!shakes.empty() && !shakes.front().tls->kernelSend() &&
        !secure::kernelTlsAvailable(&kernel)) {
      kernel = " (" + kernel + ")";
    } else {
      kernel.clear();
    }
    COLLX_INFO(kTcp, "rank {}: TLS on the tcp connections between ranks: {}{}", self,
               shakes.empty() ? std::string("none here") : shakes.front().tls->describe(), kernel);
  });
  return out;
}

bool TcpDevice::prepareToSleep() {
  for (auto& pair : pairs_) {
    // TLS records read already wait to be opened (not a dead pair's: a reform left it out).
    if (!pair->dead() && pair->readPending()) return false;
  }
  return true;
}

std::size_t TcpDevice::addPollFds(std::vector<pollfd>& fds) {
  std::size_t added = 0;
  for (auto& pair : pairs_) added += pair->addPollFds(fds);
  return added;
}

bool TcpDevice::progress(const pollfd* results, std::size_t count) {
  bool moved = false;
  std::size_t at = 0;
  const std::size_t streams = static_cast<std::size_t>(options_.streams);
  for (auto& pair : pairs_) {
    if (at + streams > count) break;
    // (A dead pair is a peer that a reform left out: nothing of it is read again.)
    if (!pair->dead()) moved |= pair->progress(results + at, streams);
    at += streams;
  }
  return moved;
}

std::string TcpDevice::gone(int peer) const {
  // (The newest pair with `peer`: a newcomer took the place of a rank whose pair is dead.)
  for (auto it = pairs_.rbegin(); it != pairs_.rend(); ++it) {
    if ((*it)->peer() == peer) return (*it)->gone();
  }
  return {};
}

std::string TcpDevice::listenAgain() {
  const std::string ip = address_.substr(0, address_.rfind(':'));
  listenOn(ip.size() >= 2 && ip.front() == '[' ? ip.substr(1, ip.size() - 2) : ip);
  COLLX_DEBUG(kTcp, "rank {}: listening on {} for newcomers", job_.rank, address_);
  return address_;
}

void TcpDevice::failAll(const Error& error) noexcept {
  // Every peer learns why this rank fails (so that a rank killed elsewhere is named in
  // every rank's error, not the neighbour that noticed first), then everything stops.
  for (auto& pair : pairs_) pair->sendError(error.kind(), error.detail(), error.peer());
  for (auto& pair : pairs_) pair->failAll(error);
}

std::string localAddress(const TcpOptions& options, int rank) {
  return chooseLocalAddress(options, Where{rank, "tcp address", -1});
}

}  // namespace collx::transport::tcp

namespace collx::transport {

std::string reachableAddress(const Config& config) {
  const std::string ifname = MeshOptions::fromConfig(config).tcp.ifname;
  if (!ifname.empty()) return tcp::interfaceAddress(ifname, Where{-1, "reachable address", -1});
  std::string name = tcp::routableHostName();
  if (!name.empty()) return name;
  std::string address = tcp::upInterfaceAddress(Where{-1, "reachable address", -1});
  if (!address.empty()) return address;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

std::string unroutedTcpAddress(const Config& config) {
  TcpOptions options = MeshOptions::fromConfig(config).tcp;
  options.routeHost.clear();
  return tcp::localAddress(options, -1);
}

}  // namespace collx::transport
