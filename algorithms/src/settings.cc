// The algorithms layer's settings, declared once: how waiting calls wait (read where the
// API fills EngineOptions: engineOptions), the chunked algorithms' granularity, and the
// selection's overrides (COLLX_RULES, COLLX_<COLL>_ALGO).
#include "collx/algorithms/settings.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <stdexcept>

#include "collx/algorithms/engine.h"
#include "collx/algorithms/registry.h"

namespace collx::algorithms {

namespace {

// Polling this long before sleeping pays off when a rank has a core of its own.
constexpr std::int64_t kSpinWithCoreUs = 50;

const AutoSetting<kind::Integer> kSpinUs(
    {.name = "COLLX_SPIN_US",
     .component = "algorithms.engine",
     .automatic = "50 when this host's ranks do not outnumber the CPUs their affinity masks "
                  "allow together, else 0",
     .range = {0, 1000000},
     .help = "Microseconds a waiting call polls before it sleeps. Spinning takes the core a "
             "peer may need when ranks outnumber cores."});

// Yield-polling after the spin, also with a core per rank: when other processes take a
// core, a peer's answer often comes after the spin, and sleeping in poll() then costs a
// wakeup per message (benchmarks/README.md has the measurement).
const Setting<kind::Integer> kYieldUs(
    {.name = "COLLX_YIELD_US",
     .component = "algorithms.engine",
     .defaultValue = 1000,
     .range = {0, 10000000},
     .help = "Microseconds a waiting call keeps polling after COLLX_SPIN_US, yielding the core "
             "between polls, before it sleeps: a peer's answer that comes after the spin then "
             "costs no wakeup."});

const Setting<kind::Integer> kTraceBuffer(
    {.name = "COLLX_TRACE_BUFFER",
     .component = "algorithms.engine",
     .defaultValue = 1024,
     .range = {0, 1 << 20},
     .help = "Calls each context's flight recorder keeps (rounded up to a power of two): what "
             "each is, its state and what it waits for (Context::flightRecord, the hang "
             "report). 0 turns the recorder off, and with it the hang report."});

std::vector<std::string> algorithmsOf(Collective coll) {
  std::vector<std::string> names;
  for (const AlgorithmInfo& info : algorithmRegistry()) {
    if (info.coll == coll) names.emplace_back(info.name);
  }
  return names;
}

AutoSetting<kind::Choice>::Declaration algorithmDeclaration(const char* name, Collective coll) {
  return {.name = name,
          .component = "algorithms.selection",
          .automatic = "chosen per call: COLLX_RULES, then the built-in table",
          // The registry is not built while declarations register: its names are asked later.
          .range = kind::Choice::Range([coll] { return algorithmsOf(coll); }),
          .help = std::string(collectiveName(coll)) +
                  " algorithm for every call (collx-bench -a list describes them)."};
}

// In the order of collectives().
const AutoSetting<kind::Choice> kAlgorithmSettings[] = {
    AutoSetting<kind::Choice>(algorithmDeclaration("COLLX_ALLREDUCE_ALGO", Collective::kAllreduce)),
    AutoSetting<kind::Choice>(algorithmDeclaration("COLLX_ALLGATHER_ALGO", Collective::kAllgather)),
    AutoSetting<kind::Choice>(
        algorithmDeclaration("COLLX_ALLGATHERV_ALGO", Collective::kAllgatherv)),
    AutoSetting<kind::Choice>(
        algorithmDeclaration("COLLX_REDUCE_SCATTER_ALGO", Collective::kReduceScatter)),
    AutoSetting<kind::Choice>(algorithmDeclaration("COLLX_REDUCE_ALGO", Collective::kReduce)),
    AutoSetting<kind::Choice>(algorithmDeclaration("COLLX_BROADCAST_ALGO", Collective::kBroadcast)),
    AutoSetting<kind::Choice>(algorithmDeclaration("COLLX_GATHER_ALGO", Collective::kGather)),
    AutoSetting<kind::Choice>(algorithmDeclaration("COLLX_GATHERV_ALGO", Collective::kGatherv)),
    AutoSetting<kind::Choice>(algorithmDeclaration("COLLX_SCATTER_ALGO", Collective::kScatter)),
    AutoSetting<kind::Choice>(algorithmDeclaration("COLLX_SCATTERV_ALGO", Collective::kScatterv)),
    AutoSetting<kind::Choice>(algorithmDeclaration("COLLX_ALLTOALL_ALGO", Collective::kAlltoall)),
    AutoSetting<kind::Choice>(algorithmDeclaration("COLLX_ALLTOALLV_ALGO", Collective::kAlltoallv)),
    AutoSetting<kind::Choice>(algorithmDeclaration("COLLX_BARRIER_ALGO", Collective::kBarrier)),
};

}  // namespace

const Setting<kind::Bytes> kChunkBytes(
    {.name = "COLLX_CHUNK_BYTES",
     .component = "algorithms",
     .defaultValue = 1u << 20,
     .range = {4096, std::uint64_t{1} << 30},
     .help = "Pipelining granularity of the chunked algorithms (ring, binomial broadcast, "
             "chain): a rank forwards a piece while the next one arrives."});

const AutoSetting<kind::String> kRules(
    {.name = "COLLX_RULES",
     .component = "algorithms.selection",
     .automatic = "the first of $XDG_CONFIG_HOME/collx/rules.json (~/.config/collx/rules.json) "
                  "and /etc/collx/rules.json that exists (collx-tune writes there), else the "
                  "built-in table alone",
     .help = "A JSON rules file of the selection table's shape ({\"allreduce\": [{\"min_ranks\": "
             "1, \"max_bytes\": \"64K\", \"shared_memory\": true, \"algorithm\": \"ring\"}, "
             "...]}) whose rows are tried before the built-in table, or none (the built-in "
             "table alone, whatever the default places hold); collx-info prints the table in "
             "effect."});

EngineOptions engineOptions(const Config& config, bool outnumbered) {
  EngineOptions options;
  options.spin =
      std::chrono::microseconds(kSpinUs.get(config).value_or(outnumbered ? 0 : kSpinWithCoreUs));
  options.yield = std::chrono::microseconds(kYieldUs.get(config));
  options.traceBuffer = static_cast<std::size_t>(kTraceBuffer.get(config));
  return options;
}

const AutoSetting<kind::Choice>& algorithmSetting(Collective coll) {
  std::string name = std::string("COLLX_") + collectiveName(coll) + "_ALGO";
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const AutoSetting<kind::Choice>& setting : kAlgorithmSettings) {
    if (setting.name() == name) return setting;
  }
  throw std::logic_error(std::string("collx: no COLLX_<COLL>_ALGO setting for ") +
                         collectiveName(coll));
}

}  // namespace collx::algorithms
