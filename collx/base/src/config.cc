#include "collx/base/config.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "collx/base/error.h"

extern char** environ;

namespace collx {

// The table. Each layer's variables live here so that collx-info and the typo check know
// every one of them; the code that reads a variable reads it through Config.
const std::vector<ConfigVar>& configVars() {
  static const std::vector<ConfigVar> kVars = {
      {"COLLX_RANK", "",
       "This process's rank in [0, COLLX_WORLD_SIZE). Set by collx-run; otherwise taken from "
       "torchrun (RANK), Open MPI (OMPI_COMM_WORLD_RANK) or Slurm (SLURM_PROCID)."},
      {"COLLX_WORLD_SIZE", "",
       "Number of ranks in the job. Set by collx-run; otherwise WORLD_SIZE, "
       "OMPI_COMM_WORLD_SIZE or SLURM_NTASKS."},
      {"COLLX_LOCAL_RANK", "",
       "Rank among the processes of this host (informational only: collx detects locality "
       "itself). Otherwise LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID."},
      {"COLLX_STORE", "",
       "Rendezvous store: tcp://host:port, file:///path/to/shared/dir or redis://host:port[/db]. "
       "Otherwise tcp://MASTER_ADDR:MASTER_PORT, hosted by rank 0."},
      {"COLLX_JOB_ID", "",
       "Job id that namespaces this job's keys in the store. Set by collx-run; otherwise "
       "TORCHELASTIC_RUN_ID, SLURM_JOB_ID.SLURM_STEP_ID, or 'default'."},
      {"COLLX_GENERATION", "0",
       "Generation of the job to join; a new context of the same job joins a new generation."},
      {"COLLX_TIMEOUT", "300s",
       "Deadline of every blocking wait: store operations, connecting, collectives "
       "(e.g. 30s, 500ms, 2m; a plain number is seconds)."},
      {"COLLX_TRANSPORT", "auto",
       "Transport for every peer: 'auto' (the best per pair: self, then shm between ranks on "
       "one host, then tcp), 'tcp' or 'shm' (every peer must then be on this host)."},
      {"COLLX_IFNAME", "",
       "Network interface for TCP (e.g. eth0); unset: the interface that routes to the store's "
       "host, else to this host's name."},
      {"COLLX_TCP_STREAMS", "1",
       "TCP connections per peer; messages larger than COLLX_TCP_EAGER_LIMIT are striped over "
       "them (1..64)."},
      {"COLLX_TCP_EAGER_LIMIT", "262144",
       "Largest message (bytes) sent at once without waiting for the receiver; larger ones wait "
       "until the receiver is ready and land straight in its buffer. Measured: 256 KiB beats "
       "64 KiB by 20% for 128-256 KiB messages on loopback, 1 MiB gains nothing more."},
      {"COLLX_TCP_BUFFER", "0",
       "Socket send and receive buffer size (bytes); 0 leaves them to the kernel's autotuning, "
       "which grows them to net.ipv4.tcp_wmem/tcp_rmem as bandwidth needs."},
      {"COLLX_SHM_EAGER_LIMIT", "262144",
       "Shared memory: largest message (bytes) copied through the ring at once (capped at half "
       "a ring); larger ones are copied once, straight from the sender's buffer "
       "(process_vm_readv), when the receiver posts its buffer. Measured with 2 ranks: two "
       "memcpys through the ring beat one process_vm_readv up to 256 KiB (a 128 KiB "
       "allreduce 18 us instead of 31-43 us)."},
      {"COLLX_SHM_GROUP_BYTES", "262144",
       "Shared memory: payload bytes of each of a rank's 4 group buffers, which collectives "
       "working on shared memory directly (algorithm shm) write and every rank of the host "
       "reads; large collectives go through them in pieces of this size (a multiple of 64, "
       "the same on every rank)."},
      {"COLLX_SHM_RING_BYTES", "",
       "Shared memory: bytes of each ring (one per sender and receiver on a host; a power of "
       "two, at least 4096); unset: 1 MiB, halved until a rank's rings total at most 8 MiB, "
       "at least 64 KiB. Only the rings of peers that send are ever touched."},
      {"COLLX_SHM_CMA", "1",
       "Shared memory: 1 copies large messages straight from the sender's memory "
       "(process_vm_readv, or memcpy between threads of one process) where permitted; 0 "
       "copies them through the ring in pieces (as when CMA is refused, e.g. by seccomp or "
       "ptrace restrictions). Measured on a VM whose process_vm_readv copies at 10 GB/s "
       "(memcpy: 35-50): 0 was up to 20% faster for 1-16 MiB allreduces with a core per rank, "
       "1 up to 1.5x faster with 4 ranks on 2 cores (the receiver copies while the sender "
       "is not scheduled)."},
      {"COLLX_SHM_DIRECT", "auto",
       "Shared memory: how the shm broadcast (from 64 KiB), allgather (from 16 KiB gathered) "
       "and allreduce (from 256 KiB) move their data. 'auto': through the ranks' group "
       "buffers, or as single copies out of the other ranks' own buffers (process_vm_readv), "
       "whichever the leading rank measured faster lately for that size (trying the other one "
       "call in 16; when ranks outnumber cores, broadcast from 4 MiB, allgather from 1 MiB and "
       "allreduce from 32 MiB, up to 4 ranks); a broadcast that reads directly chooses again "
       "between the whole vector and a head read directly while the root passes the tail "
       "through its group buffers (whole when ranks outnumber cores). 'never' or 'always' one "
       "way ('always': a broadcast splits, unless ranks outnumber cores). "
       "Direct reads need every rank able to read every other's memory (COLLX_SHM_CMA=1 and "
       "the probe passing everywhere). Measured on a 2-vCPU VM whose cores hand data to each "
       "other 2-5x slower at times: P=2 allreduce of 64 MiB 9-10 ms through the buffers in a "
       "good period, 45 in a slow one, 15-20 read directly in either."},
      {"COLLX_SHM_ARENA", "memfd",
       "Shared memory: 'memfd' (an anonymous file peers open through /proc/<pid>/fd; nothing "
       "is ever left behind) or 'posix' (/dev/shm/collx-*, unlinked once every peer mapped "
       "it; leftovers of killed ranks are removed by collx-run and by the next context)."},
      {"COLLX_HOST_ID", "",
       "This host's identity for choosing shared memory (ranks with equal ids probe each "
       "other's arenas); unset: hostname + /proc/sys/kernel/random/boot_id. Meant for tests "
       "that simulate several hosts on one machine."},
      {"COLLX_CHUNK_BYTES", "1048576",
       "Pipelining granularity (bytes) of the chunked algorithms (ring, binomial broadcast)."},
      {"COLLX_SPIN_US", "",
       "Microseconds a waiting call polls before it sleeps; unset: 50 when this host's ranks do "
       "not outnumber the CPUs their affinity masks allow together, else 0."},
      {"COLLX_YIELD_US", "",
       "Microseconds a waiting call keeps polling after COLLX_SPIN_US, yielding the core between "
       "polls, before it sleeps; unset: 1000."},
      {"COLLX_TORCH_EAGER_BYTES", "65536",
       "PyTorch backend: a collective whose buffers hold at most this many bytes runs to "
       "completion on the calling thread (its work handle is complete when returned) instead "
       "of in the background; torch waits on it at once anyway, and the hand-off between "
       "threads costs more than a small call. 0: every call in the background."},
      {"COLLX_RULES", "",
       "A JSON rules file of the selection table's shape ({\"allreduce\": [{\"min_ranks\": 1, "
       "\"max_bytes\": \"64K\", \"algorithm\": \"ring\"}, ...]}) whose rows are tried "
       "before the built-in table; collx-info prints the table in effect."},
      {"COLLX_ALLREDUCE_ALGO", "",
       "allreduce algorithm for every call (collx-bench -a list lists them all); unset: chosen "
       "per size."},
      {"COLLX_ALLGATHER_ALGO", "", "allgather algorithm for every call; unset: chosen per size."},
      {"COLLX_ALLGATHERV_ALGO", "", "allgatherv algorithm for every call; unset: chosen per size."},
      {"COLLX_REDUCE_SCATTER_ALGO", "",
       "reduce_scatter algorithm for every call; unset: chosen per size."},
      {"COLLX_REDUCE_ALGO", "", "reduce algorithm for every call; unset: chosen per size."},
      {"COLLX_BROADCAST_ALGO", "", "broadcast algorithm for every call; unset: chosen per size."},
      {"COLLX_GATHER_ALGO", "", "gather algorithm for every call; unset: chosen per size."},
      {"COLLX_GATHERV_ALGO", "", "gatherv algorithm for every call; unset: chosen per size."},
      {"COLLX_SCATTER_ALGO", "", "scatter algorithm for every call; unset: chosen per size."},
      {"COLLX_SCATTERV_ALGO", "", "scatterv algorithm for every call; unset: chosen per size."},
      {"COLLX_ALLTOALL_ALGO", "", "alltoall algorithm for every call; unset: chosen per size."},
      {"COLLX_ALLTOALLV_ALGO", "", "alltoallv algorithm for every call; unset: chosen per size."},
      {"COLLX_BARRIER_ALGO", "", "barrier algorithm for every call; unset: chosen per size."},
      {"COLLX_LOG_LEVEL", "warn",
       "Log levels: a default and per-logger overrides, e.g. 'info,collx.rdzv=debug'. Levels: "
       "trace debug info warn error off. Loggers: collx collx.rdzv collx.tcp collx.shm "
       "collx.ibverbs collx.algo collx.run."},
  };
  return kVars;
}

const ConfigVar* findConfigVar(std::string_view name) noexcept {
  for (const ConfigVar& var : configVars()) {
    if (name == var.name) return &var;
  }
  return nullptr;
}

namespace {

const ConfigVar& requireVar(std::string_view name) {
  const ConfigVar* var = findConfigVar(name);
  if (var == nullptr) {
    throw std::logic_error("collx: " + std::string(name) + " is not in the configuration table");
  }
  return *var;
}

[[noreturn]] void badValue(std::string_view what, std::string_view text,
                           const std::string& expected) {
  throw InvalidArgument(Where{-1, "config", -1},
                        std::string(what) + "='" + std::string(text) + "': expected " + expected);
}

std::size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

Config::Config(Environment env) : env_(std::move(env)) {
  std::erase_if(env_, [](const auto& entry) { return entry.second.empty(); });
}

Config Config::fromProcessEnvironment() {
  Environment env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view item(*entry);
    std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
  }
  return Config(std::move(env));
}

const Config& Config::process() {
  static const Config config = fromProcessEnvironment();
  return config;
}

std::optional<std::string> Config::env(std::string_view name) const {
  auto it = env_.find(name);
  if (it == env_.end()) return std::nullopt;
  return it->second;
}

bool Config::isSet(std::string_view name) const {
  requireVar(name);
  return env_.find(name) != env_.end();
}

std::string Config::getString(std::string_view name) const {
  const ConfigVar& var = requireVar(name);
  auto it = env_.find(name);
  return it != env_.end() ? it->second : std::string(var.defaultValue);
}

std::optional<std::int64_t> Config::getInt(std::string_view name, std::int64_t min,
                                           std::int64_t max) const {
  std::string text = getString(name);
  if (text.empty()) return std::nullopt;
  return parseInt(text, min, max, name);
}

std::chrono::milliseconds Config::getDuration(std::string_view name) const {
  return parseDuration(getString(name), name);
}

bool Config::getBool(std::string_view name) const {
  std::string text = getString(name);
  std::string lower;
  for (char c : text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower.empty() || lower == "0" || lower == "false" || lower == "no" || lower == "off") {
    return false;
  }
  badValue(name, text, "a boolean (1/0, true/false, yes/no, on/off)");
}

std::vector<std::string> Config::unknownVariables() const {
  std::vector<std::string> unknown;
  for (const auto& [name, value] : env_) {
    if (name.rfind("COLLX_", 0) != 0 || findConfigVar(name) != nullptr) continue;
    std::string entry = name;
    std::size_t best = 4;
    for (const ConfigVar& var : configVars()) {
      std::size_t distance = editDistance(name, var.name);
      if (distance < best) {
        best = distance;
        entry = name + " (did you mean " + var.name + "?)";
      }
    }
    unknown.push_back(entry);
  }
  return unknown;
}

}  // namespace collx
