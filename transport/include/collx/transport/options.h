// The transport's options: who this rank is in which job (JobMember, which every medium
// needs), each medium's own (TcpOptions, ShmOptions, IbOptions: a device receives only its
// own), and MeshOptions, all of them together as the mesh and the API set them. Their
// settings are declared once, in mesh_options.cc.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "collx/base/setting.h"
#include "collx/transport/message.h"
#include "collx/transport/shared_group.h"

namespace collx::secure {
class JobSecret;
class TlsContext;
}  // namespace collx::secure

namespace collx::transport {

// COLLX_HOST_ID, which the API also reads (its join record names the host); the transport's
// other settings are declared in mesh_options.cc and read through MeshOptions::fromConfig.
extern const AutoSetting<kind::String> kHostId;

// The address others on other hosts dial to reach a TCP service of this host (rank 0's
// store, when a bootstrap passes its address over MPI or PMIx): the address of the
// interface COLLX_IFNAME names in `config`, when set; else this host's name when it resolves
// to an address other than loopback; else its first interface address that is not loopback
// (IPv4 first); else its name. (A host whose /etc/hosts maps its own name to 127.0.1.1, as
// Debian's does, is reached by its interface's address.)
std::string reachableAddress(const Config& config);

// The address a rank's TCP transport listens on and publishes when nothing gives it a host
// to route toward (a file:// store in a shared directory, PMIx, ranks in one process): the
// interface COLLX_IFNAME names; else the one this host's name routes to, when the name
// resolves to more than loopback; else the first interface address that is up and not
// loopback; else 127.0.0.1. (With a tcp:// or redis:// store, the one that routes to it.)
std::string unroutedTcpAddress(const Config& config);

// Who this rank is, in which job, and what proves it: what every medium needs.
struct JobMember {
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
};

struct TcpOptions {
  // Streams per peer, the interface to use ("" = the one that routes to routeHost, or with
  // no routeHost as unroutedTcpAddress() says), the size up to which messages are sent
  // eagerly.
  int streams;
  std::string ifname;
  std::string routeHost;
  std::uint64_t eagerLimit;
  // Socket buffer size per direction; 0 leaves it to the kernel's autotuning, which grows
  // the buffers up to net.ipv4.tcp_wmem / tcp_rmem as bandwidth needs (setting a size turns
  // autotuning off and is capped by net.core.wmem_max / rmem_max).
  int bufferBytes;
  // Whether this rank has a core to itself (its host's ranks do not outnumber their CPUs),
  // so that the peers of a connection send at the same time: then each sendmsg writes at
  // most 256 KiB (tcp_pair.cc). Not a setting: the API layer decides it from the join.
  bool shortWrites = true;
  // Whether every peer of this device's first connect() listens already (a newcomer's:
  // the members published their addresses only once they listened): then a refused dial
  // means the peer is gone, and connect() fails at once instead of dialing again until its
  // deadline. Every later connect() (admit(): the newcomers published theirs listening)
  // counts so too. Not a setting: the mesh decides it.
  bool peersListen = false;
};

struct ShmOptions {
  // Bytes per ring (a power of two; 0: from the world size), the largest message copied
  // through the ring eagerly, whether large messages may be copied straight from the
  // sender's memory (CMA), a named /dev/shm arena instead of a memfd, and an override of
  // this host's identity (tests simulate several hosts with it).
  std::uint64_t ringBytes;
  std::uint64_t eagerLimit;
  // Payload bytes of each of the group buffers that collectives working on shared memory
  // directly use (SharedGroup; a multiple of 64).
  std::uint64_t groupBytes;
  bool cma;
  bool posix;
  // Whether the shared group's large collectives may read peers' buffers directly (the API
  // applies it once every rank agreed that they all can).
  DirectReads direct;
  std::string hostId;
};

struct IbOptions {
  // The library to load ("" = libibverbs.so.1), the devices and ports allowed (COLLX_IB_HCA's
  // syntax), the GID index (none: chosen), the eager limit, the bytes of user buffers kept
  // registered.
  std::string library;
  std::string hca;
  std::optional<int> gidIndex;
  std::uint64_t eagerLimit;
  std::uint64_t mrCacheBytes;
};

struct MeshOptions : JobMember {
  // The transport's settings at their declared defaults (mesh_options.cc).
  MeshOptions();
  // The environment over those defaults (explicit options, set afterwards, win over both).
  static MeshOptions fromConfig(const Config& config);
  // Throws InvalidArgument naming the setting when a value set in code lies outside its
  // setting's range (the Mesh checks its options with it).
  void validate() const;

  Describer describer;
  // "auto" (the best transport per peer: self, shm within a host, ibverbs between hosts
  // that both have a usable RDMA port, tcp) or a transport name that every pair must use
  // ("tcp", "shm", "ibverbs").
  std::string transport;
  // COLLX_PEER_TIMEOUT: a peer that a request has waited on and that answered nothing (no
  // message, no liveness PONG) for this long has failed (liveness.h); 0 turns it off.
  std::chrono::milliseconds peerTimeout{0};
  // A newcomer joining survivors that went on (Context::grow): the generation its pairs
  // start in (their frames carry it). `generation` stays the one the job's mesh was formed
  // in, which the hellos and liveness prove. -1: `generation`. With it, a peer that
  // published no address is no peer of this mesh (a rank lost before).
  std::int64_t joinGeneration = -1;
  // The ranks that form the mesh (0: `size`); the places from it to `size` are kept for
  // newcomers that a grow() appends (ContextOptions::maxSize): those ranks publish nothing
  // when the mesh connects, have no pair until a newcomer takes one (over tcp), and the
  // shared-memory and verbs devices are made for the ranks that form it.
  int formed = 0;
  TcpOptions tcp;
  ShmOptions shm;
  IbOptions ib;
};

// COLLX_SHM_DIRECT's word `word` (given in code, named `what` in errors) as DirectReads.
DirectReads directReadsNamed(std::string_view word, std::string_view what);

}  // namespace collx::transport
