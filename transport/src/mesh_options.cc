// The transport's settings, declared once, and MeshOptions read from them: the declared
// defaults (MeshOptions()), the environment over them (fromConfig), and the ranges that
// values set in code must keep too (validate).
#include <algorithm>
#include <iterator>

#include "collx/base/units.h"
#include "collx/transport/options.h"

namespace collx::transport {

const AutoSetting<kind::String> kHostId(
    {.name = "COLLX_HOST_ID",
     .component = "transport.shm",
     .automatic = "hostname + /proc/sys/kernel/random/boot_id",
     .help = "This host's identity for choosing shared memory (ranks with equal ids probe each "
             "other's arenas). Meant for tests that simulate several hosts on one machine."});

namespace {

const Setting<kind::Choice> kTransport(
    {.name = "COLLX_TRANSPORT",
     .component = "transport",
     .defaultValue = "auto",
     .range = {"auto", "tcp", "shm", "ibverbs"},
     .help = "Transport for every peer: 'auto' (the best per pair: self, then shm between ranks "
             "on one host, then ibverbs between hosts whose ranks both have a usable RDMA port, "
             "then tcp), 'tcp', 'shm' (every peer must then be on this host) or 'ibverbs' (an "
             "Unsupported error, saying why, where no RDMA port is usable)."});

const Setting<kind::Duration> kPeerTimeout(
    {.name = "COLLX_PEER_TIMEOUT",
     .component = "transport",
     .defaultValue = std::chrono::seconds(5),
     .range = {std::chrono::milliseconds(0)},
     .help = "A peer that a call waits on and that answers nothing for this long (no message, "
             "and no answer to the liveness pings each rank's thread makes over UDP: a stopped "
             "process, a host that lost power, a cut link) has failed, and every rank's error "
             "names it. A peer that is slow but runs still answers. Watched: every wait on a peer "
             "(tcp, ibverbs, shared memory's pairs and its collectives' waits within a host). A "
             "peer on another host that answers no ping when the ranks connect (a firewall "
             "dropping UDP) is not watched, and the log says so. 0: off (then only the call's "
             "COLLX_TIMEOUT ends such a wait)."});

const Setting<kind::Integer> kTcpStreams(
    {.name = "COLLX_TCP_STREAMS",
     .component = "transport.tcp",
     .defaultValue = 1,
     .range = {1, 64},
     .help = "TCP connections per peer; messages larger than COLLX_TCP_EAGER_LIMIT are striped "
             "over them."});

const AutoSetting<kind::String> kIfname(
    {.name = "COLLX_IFNAME",
     .component = "transport.tcp",
     .automatic = "the interface that routes to the store's host; with no store host (a "
                  "file:// store, PMIx) the one this host's name routes to when the name "
                  "resolves beyond loopback, else the first interface that is up and not "
                  "loopback",
     .help = "Network interface for TCP (e.g. eth0)."});

const Setting<kind::Bytes> kTcpBuffer(
    {.name = "COLLX_TCP_BUFFER",
     .component = "transport.tcp",
     .defaultValue = 0,
     .range = {0, std::uint64_t{1} << 30},
     .help = "Socket send and receive buffer size; 0 leaves them to the kernel's autotuning, "
             "which grows them to net.ipv4.tcp_wmem/tcp_rmem as bandwidth needs."});

const Setting<kind::Bytes> kTcpEagerLimit(
    {.name = "COLLX_TCP_EAGER_LIMIT",
     .component = "transport.tcp",
     .defaultValue = 256 * kKiB,
     .range = {0, std::uint64_t{1} << 30},
     .help = "Largest message sent at once without waiting for the receiver (a pair uses the "
             "smaller of its ends' limits); larger ones wait until the receiver is ready and land "
             "straight in its buffer. Eager messages cost the receiver a copy out of its early "
             "buffer, announced ones a round trip."});

const Setting<kind::Bytes> kShmEagerLimit(
    {.name = "COLLX_SHM_EAGER_LIMIT",
     .component = "transport.shm",
     .defaultValue = 256 * kKiB,
     .range = {0, std::uint64_t{1} << 30},
     .help = "Shared memory: largest message copied through the ring at once (capped at half a "
             "ring; a pair uses the smaller of its ends' limits); larger ones are copied once, "
             "straight from the sender's buffer (process_vm_readv), when the receiver posts its "
             "buffer. Up to the limit two copies through the ring cost less than setting up the "
             "single copy."});

const Setting<kind::Bytes> kShmGroupBytes(
    {.name = "COLLX_SHM_GROUP_BYTES",
     .component = "transport.shm",
     .defaultValue = 256 * kKiB,
     .range = kind::Bytes::Range::multiplesOf(64, 4096, std::uint64_t{1} << 30),
     .help = "Shared memory: payload bytes of each of a rank's 4 group buffers, which "
             "collectives working on shared memory directly (algorithm shm) write and every rank "
             "of the host reads; large collectives go through them in pieces of this size (the "
             "same on every rank)."});

const AutoSetting<kind::Bytes> kShmRingBytes(
    {.name = "COLLX_SHM_RING_BYTES",
     .component = "transport.shm",
     .automatic = "1MiB, halved until a rank's rings total at most 8MiB, at least 64KiB",
     .range = kind::Bytes::Range::powersOfTwo(4096, std::uint64_t{1} << 30),
     .help = "Shared memory: bytes of each ring (one per sender and receiver on a host). Only "
             "the rings of peers that send are ever touched."});

const Setting<kind::Bool> kShmCma(
    {.name = "COLLX_SHM_CMA",
     .component = "transport.shm",
     .defaultValue = true,
     .help = "Shared memory: 1 copies large messages straight from the sender's memory "
             "(process_vm_readv, or memcpy between threads of one process) where permitted; 0 "
             "copies them through the ring in pieces (as when CMA is refused, e.g. by seccomp or "
             "ptrace restrictions). Which is faster depends on the machine's process_vm_readv "
             "against memcpy, and on whether ranks have cores of their own: a single copy lets "
             "the receiver copy while the sender is not scheduled."});

const Setting<kind::Choice> kShmDirect(
    {.name = "COLLX_SHM_DIRECT",
     .component = "transport.shm",
     .defaultValue = kDirectReadsNames[static_cast<int>(DirectReads::kAuto)],
     .range = kind::Choice::Range(std::vector<std::string>(std::begin(kDirectReadsNames),
                                                           std::end(kDirectReadsNames))),
     .help = "Shared memory: how the shm broadcast (from 64 KiB), allgather (from 16 KiB "
             "gathered) and allreduce (from 256 KiB) move their data. 'auto': through the ranks' "
             "group buffers, or as single copies out of the other ranks' own buffers "
             "(process_vm_readv), whichever the leading rank measured faster lately for that size "
             "(trying the other one call in 16; when ranks outnumber cores, broadcast from 4 MiB, "
             "allgather from 1 MiB and allreduce from 32 MiB, up to 4 ranks); a broadcast that "
             "reads directly chooses again between the whole vector and a head read directly "
             "while the root passes the tail through its group buffers (whole when ranks "
             "outnumber cores). 'never' or 'always' one way ('always': a broadcast splits, unless "
             "ranks outnumber cores). Direct reads need every rank able to read every other's "
             "memory (COLLX_SHM_CMA=1 and the probe passing everywhere). Where cores hand data to "
             "each other slowly at times, reading directly is the steadier way."});

const Setting<kind::Choice> kShmArena(
    {.name = "COLLX_SHM_ARENA",
     .component = "transport.shm",
     .defaultValue = "memfd",
     .range = {"memfd", "posix"},
     .help = "Shared memory: 'memfd' (an anonymous file peers open through /proc/<pid>/fd; "
             "nothing is ever left behind) or 'posix' (/dev/shm/collx-*, unlinked once every peer "
             "mapped it; leftovers of killed ranks are removed by collx-run and by the next "
             "context)."});

const AutoSetting<kind::String> kIbverbsLibrary(
    {.name = "COLLX_IBVERBS_LIBRARY",
     .component = "transport.ibverbs",
     .automatic = "libibverbs.so.1 (rdma-core)",
     .help = "The verbs library to load instead of rdma-core's libibverbs, e.g. the userspace "
             "test device tests/verbs_emu builds (libcollx_verbs_emu.so)."});

const AutoSetting<kind::String> kIbHca(
    {.name = "COLLX_IB_HCA",
     .component = "transport.ibverbs",
     .automatic = "the first ACTIVE port with an address peers can reach",
     .help = "RDMA devices and ports to use, as NCCL_IB_HCA: 'mlx5_0:1', a list 'mlx5_0,mlx5_1' "
             "(names match as prefixes; '=' first: exact names), or '^mlx5_2' to exclude. "
             "collx-info lists the devices and ports here."});

const AutoSetting<kind::Integer> kIbGidIndex(
    {.name = "COLLX_IB_GID_INDEX",
     .component = "transport.ibverbs",
     .automatic = "RoCE: the first RoCE v2 GID of an IPv4 address, else of an IPv6 one; "
                  "InfiniBand: none (LID)",
     .range = {0, 255},
     .help = "RoCE: the index of the GID (this host's address on the RDMA port) to use."});

const Setting<kind::Bytes> kIbEagerLimit(
    {.name = "COLLX_IB_EAGER_LIMIT",
     .component = "transport.ibverbs",
     .defaultValue = 16 * kKiB,
     .range = {0, 1u << 20},
     .help = "RDMA: largest message sent at once (a SEND into a receive buffer the peer posted "
             "ahead; a pair uses the smaller of its ends' limits); larger ones wait until the "
             "receiver is ready and land in its buffer by RDMA WRITE WITH IMMEDIATE. Each peer "
             "costs 2 x 34 buffers (18 beyond 64 ranks, 10 beyond 512) of this size plus 80 bytes "
             "(at least 1 KiB each)."});

const Setting<kind::Bytes> kIbMrCache(
    {.name = "COLLX_IB_MR_CACHE",
     .component = "transport.ibverbs",
     .defaultValue = std::uint64_t{1} << 30,
     .range = {0, std::uint64_t{1} << 50},
     .help = "RDMA: bytes of user buffers kept registered (pinned) between calls; the least "
             "recently used go first. 0 registers a buffer for each message and releases it "
             "after."});

// Reads every transport setting from `config` into `o`.
void read(MeshOptions& o, const Config& config) {
  o.transport = kTransport.get(config);
  o.peerTimeout = kPeerTimeout.get(config);
  o.tcp.streams = static_cast<int>(kTcpStreams.get(config));
  o.tcp.ifname = kIfname.get(config).value_or("");
  o.tcp.bufferBytes = static_cast<int>(kTcpBuffer.get(config));
  o.tcp.eagerLimit = kTcpEagerLimit.get(config);
  o.shm.ringBytes = kShmRingBytes.get(config).value_or(0);
  o.shm.eagerLimit = kShmEagerLimit.get(config);
  o.shm.groupBytes = kShmGroupBytes.get(config);
  o.shm.cma = kShmCma.get(config);
  o.shm.posix = kShmArena.get(config) == "posix";
  o.shm.direct = directReadsNamed(kShmDirect.get(config), kShmDirect.name());
  o.shm.hostId = kHostId.get(config).value_or("");
  o.ib.library = kIbverbsLibrary.get(config).value_or("");
  o.ib.hca = kIbHca.get(config).value_or("");
  o.ib.gidIndex = kIbGidIndex.get(config).has_value()
                      ? std::optional<int>(static_cast<int>(*kIbGidIndex.get(config)))
                      : std::nullopt;
  o.ib.eagerLimit = kIbEagerLimit.get(config);
  o.ib.mrCacheBytes = kIbMrCache.get(config);
}

}  // namespace

MeshOptions::MeshOptions() { read(*this, Config(Config::Environment{})); }

MeshOptions MeshOptions::fromConfig(const Config& config) {
  MeshOptions options;
  read(options, config);
  return options;
}

void MeshOptions::validate() const {
  kTransport.check(transport, kTransport.name());
  kPeerTimeout.check(peerTimeout, kPeerTimeout.name());
  kTcpStreams.check(tcp.streams, kTcpStreams.name());
  kTcpBuffer.check(static_cast<std::uint64_t>(tcp.bufferBytes), kTcpBuffer.name());
  kTcpEagerLimit.check(tcp.eagerLimit, kTcpEagerLimit.name());
  if (shm.ringBytes != 0) kShmRingBytes.check(shm.ringBytes, kShmRingBytes.name());
  kShmEagerLimit.check(shm.eagerLimit, kShmEagerLimit.name());
  kShmGroupBytes.check(shm.groupBytes, kShmGroupBytes.name());
  if (ib.gidIndex) kIbGidIndex.check(*ib.gidIndex, kIbGidIndex.name());
  kIbEagerLimit.check(ib.eagerLimit, kIbEagerLimit.name());
  kIbMrCache.check(ib.mrCacheBytes, kIbMrCache.name());
  if (formed < 0 || formed > size) {
    throw InvalidArgument(Where{rank, "transport", -1},
                          "the mesh is formed by " + std::to_string(formed) + " of its " +
                              std::to_string(size) + " ranks: it must be 1 to " +
                              std::to_string(size) + " (0: all)");
  }
}

DirectReads directReadsNamed(std::string_view word, std::string_view what) {
  const std::string checked = kShmDirect.check(std::string(word), what);
  const auto* names = std::begin(kDirectReadsNames);
  return static_cast<DirectReads>(std::find(names, std::end(kDirectReadsNames), checked) - names);
}

}  // namespace collx::transport
