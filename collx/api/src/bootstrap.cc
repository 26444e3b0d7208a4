#include "collx/bootstrap.h"

#include <cctype>

#include "collx/base/config.h"
#include "collx/base/error.h"
#include "collx/rendezvous/store.h"
#include "collx/rendezvous/tcp_store.h"
#include "collx/secure/job_secret.h"
#include "collx/secure/tls.h"

namespace collx {

const AutoSetting<kind::String> kStore(
    {.name = "COLLX_STORE",
     .component = "bootstrap",
     .automatic = "tcp://MASTER_ADDR:MASTER_PORT, hosted by rank 0; for a world of one, a store "
                  "in this process",
     .help = "Rendezvous store: tcp://host:port, file:///path/to/shared/dir or "
             "redis://[[user]:password@]host:port[/db].",
     .shown = [](std::string_view url) { return rendezvous::hidePassword(url); }});

const AutoSetting<kind::String> kJobId(
    {.name = "COLLX_JOB_ID",
     .component = "bootstrap",
     .automatic = "TORCHELASTIC_RUN_ID, SLURM_JOB_ID.SLURM_STEP_ID, OMPI_MCA_ess_base_jobid, or "
                  "'default'",
     .help = "Job id that namespaces this job's keys in the store (1..200 letters, digits and "
             "- _ . :). Set by collx-run."});

namespace {

// Rank, world size and local rank, from collx-run or (the same ranges) another launcher.
constexpr std::int64_t kMaxRanks = std::int64_t{1} << 24;

const AutoSetting<kind::Integer> kRank(
    {.name = "COLLX_RANK",
     .component = "bootstrap",
     .automatic = "RANK (torchrun), OMPI_COMM_WORLD_RANK (Open MPI) or SLURM_PROCID (Slurm); "
                  "with none set, rank 0 of 1",
     .range = {0, kMaxRanks},
     .help = "This process's rank in [0, COLLX_WORLD_SIZE). Set by collx-run."});

const AutoSetting<kind::Integer> kWorldSize(
    {.name = "COLLX_WORLD_SIZE",
     .component = "bootstrap",
     .automatic = "WORLD_SIZE, OMPI_COMM_WORLD_SIZE or SLURM_NTASKS",
     .range = {1, kMaxRanks},
     .help = "Number of ranks in the job. Set by collx-run."});

const AutoSetting<kind::Integer> kLocalRank(
    {.name = "COLLX_LOCAL_RANK",
     .component = "bootstrap",
     .automatic = "LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID",
     .range = {0, kMaxRanks},
     .help = "Rank among the processes of this host (informational only: collx detects "
             "locality itself)."});

const Setting<kind::Integer> kGeneration(
    {.name = "COLLX_GENERATION",
     .component = "bootstrap",
     .defaultValue = 0,
     .range = {0, std::int64_t{1} << 62},
     .help = "Generation of the job to join; a new context of the same job joins a new "
             "generation."});

struct RankSource {
  const char* launcher;
  const char* rankVar;
  const char* sizeVar;
  const char* localRankVar;
};

const Where kWhere{-1, "bootstrap", -1};

[[noreturn]] void fail(const std::string& detail) { throw InvalidArgument(kWhere, detail); }

std::string show(const std::string& name, const std::string& value) {
  return name + "='" + value + "'";
}

// `text` of variable `name`, read as `setting` reads its own (its kind and range).
int parseRankVar(const AutoSetting<kind::Integer>& setting, const std::string& name,
                 const std::string& text) {
  try {
    return static_cast<int>(setting.parse(text, name));
  } catch (const InvalidArgument& e) {
    fail(e.detail());
  }
}

// Where a setting's value came from: "COLLX_GENERATION=3" or "default".
std::string originOf(const SettingInfo& setting, const Config& config) {
  if (config.env(setting.name())) return setting.name() + "=" + setting.valueText(config);
  return "default";
}

void validateJobId(const std::string& jobId, const std::string& source) {
  if (jobId.empty() || jobId.size() > 200) {
    fail(source + ": a job id has 1..200 characters");
  }
  for (char c : jobId) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' &&
        c != ':') {
      fail(source + ": a job id may contain letters, digits and - _ . : only");
    }
  }
}

}  // namespace

const Setting<kind::Bool> kInsecure(
    {.name = "COLLX_INSECURE",
     .component = "security",
     .defaultValue = false,
     .help = "The job runs without a secret on purpose (collx-run --insecure sets it): each "
             "rank's warning that anyone who can reach the job can join it says so."});

Bootstrap Bootstrap::resolve(const BootstrapOptions& options, const Config& config) {
  Bootstrap b;
  auto env = [&](const char* name) { return config.env(name); };

  // ---- rank and world size ----
  bool haveRank = false;
  if (options.rank || options.worldSize) {
    if (!options.rank || !options.worldSize) {
      fail(std::string("BootstrapOptions sets ") + (options.rank ? "rank" : "worldSize") +
           " but not " + (options.rank ? "worldSize" : "rank"));
    }
    b.rank = *options.rank;
    b.worldSize = *options.worldSize;
    b.launcher = "options";
    b.origin.emplace_back("rank", "options");
    b.origin.emplace_back("world size", "options");
    if (b.worldSize < 1)
      fail("BootstrapOptions::worldSize=" + std::to_string(b.worldSize) + " must be at least 1");
    if (b.rank < 0 || b.rank >= b.worldSize) {
      fail("BootstrapOptions::rank=" + std::to_string(b.rank) + " is outside [0, " +
           std::to_string(b.worldSize) + ")");
    }
    haveRank = true;
  }
  const RankSource rankSources[] = {
      {"collx", kRank.name().c_str(), kWorldSize.name().c_str(), kLocalRank.name().c_str()},
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  };
  for (const RankSource& source : rankSources) {
    if (haveRank) break;
    auto rank = env(source.rankVar);
    auto size = env(source.sizeVar);
    if (!rank && !size) continue;
    if (!rank) fail(show(source.sizeVar, *size) + " is set but " + source.rankVar + " is not");
    if (!size) fail(show(source.rankVar, *rank) + " is set but " + source.sizeVar + " is not");
    b.worldSize = parseRankVar(kWorldSize, source.sizeVar, *size);
    b.rank = parseRankVar(kRank, source.rankVar, *rank);
    if (b.rank >= b.worldSize) {
      fail(show(source.rankVar, *rank) + " is not below " + show(source.sizeVar, *size));
    }
    b.launcher = source.launcher;
    b.origin.emplace_back("rank", std::string(source.rankVar) + "=" + *rank);
    b.origin.emplace_back("world size", std::string(source.sizeVar) + "=" + *size);
    if (auto local = env(source.localRankVar)) {
      b.localRank = parseRankVar(kLocalRank, source.localRankVar, *local);
      if (b.localRank >= b.worldSize) {
        fail(show(source.localRankVar, *local) + " is not below " + show(source.sizeVar, *size));
      }
      b.origin.emplace_back("local rank", std::string(source.localRankVar) + "=" + *local);
    }
    haveRank = true;
  }
  if (options.localRank) {
    b.localRank = *options.localRank;
    if (b.localRank < 0 || b.localRank >= b.worldSize) {
      fail("BootstrapOptions::localRank=" + std::to_string(b.localRank) + " is outside [0, " +
           std::to_string(b.worldSize) + ")");
    }
    b.origin.emplace_back("local rank", "options");
  }

  // ---- store ----
  auto masterAddr = env("MASTER_ADDR");
  auto masterPort = env("MASTER_PORT");
  if (options.storeObject) {
    b.origin.emplace_back("store", "options (store object)");
  } else if (options.store) {
    rendezvous::StoreUrl::parse(*options.store);
    b.storeUrl = *options.store;
    b.origin.emplace_back("store", "options");
  } else if (auto url = kStore.get(config)) {
    try {
      rendezvous::StoreUrl::parse(*url);
    } catch (const InvalidArgument& e) {
      fail(kStore.name() + ": " + e.detail());
    }
    b.storeUrl = *url;
    b.origin.emplace_back("store", originOf(kStore, config));
  } else if (masterAddr || masterPort) {
    if (!masterAddr) fail(show("MASTER_PORT", *masterPort) + " is set but MASTER_ADDR is not");
    if (!masterPort) fail(show("MASTER_ADDR", *masterAddr) + " is set but MASTER_PORT is not");
    if (masterAddr->empty()) fail("MASTER_ADDR is empty");
    int port = 0;
    try {
      port = static_cast<int>(parseInt(*masterPort, 1, 65535, "MASTER_PORT"));
    } catch (const InvalidArgument& e) {
      fail(e.detail());
    }
    b.storeUrl = rendezvous::tcpUrl(*masterAddr, static_cast<std::uint16_t>(port));
    b.rank0HostsStore = true;
    b.origin.emplace_back("store", "MASTER_ADDR=" + *masterAddr + ", MASTER_PORT=" + *masterPort +
                                       " (hosted by rank 0)");
  } else if (b.worldSize == 1) {
    b.storeUrl = "hash://";
    b.origin.emplace_back("store", "in-process (world of one)");
  } else {
    fail("no store for a world of " + std::to_string(b.worldSize) +
         " ranks: set COLLX_STORE (tcp://host:port, file:///shared/dir) or MASTER_ADDR and "
         "MASTER_PORT, or launch through collx-run");
  }
  if (!haveRank) {
    if (!b.storeUrl.empty() && b.storeUrl != "hash://") {
      fail("a store is given (" + b.origin.back().second +
           ") but no rank: set COLLX_RANK and COLLX_WORLD_SIZE (or launch through collx-run, "
           "torchrun, mpirun or srun)");
    }
    b.launcher = "none";
    b.origin.emplace_back("rank", "default (nothing set: rank 0 of 1)");
  }

  // ---- job id, generation, timeout ----
  if (options.jobId) {
    validateJobId(*options.jobId, "BootstrapOptions::jobId='" + *options.jobId + "'");
    b.jobId = *options.jobId;
    b.origin.emplace_back("job id", "options");
  } else {
    struct JobSource {
      const char* var;
      const char* stepVar;
    };
    const JobSource jobSources[] = {
        {kJobId.name().c_str(), nullptr},
        {"TORCHELASTIC_RUN_ID", nullptr},
        {"SLURM_JOB_ID", "SLURM_STEP_ID"},
        {"OMPI_MCA_ess_base_jobid", nullptr},
    };
    b.jobId = "default";
    std::string origin = "default";
    for (const JobSource& source : jobSources) {
      auto value = env(source.var);
      if (!value) continue;
      std::string jobId = *value;
      origin = std::string(source.var) + "=" + *value;
      if (source.stepVar != nullptr) {
        if (auto step = env(source.stepVar)) {
          jobId += "." + *step;
          origin += ", " + std::string(source.stepVar) + "=" + *step;
        }
      }
      validateJobId(jobId, origin);
      b.jobId = jobId;
      break;
    }
    b.origin.emplace_back("job id", origin);
  }
  if (options.generation) {
    try {
      b.generation = kGeneration.check(*options.generation, "BootstrapOptions::generation");
    } catch (const InvalidArgument& e) {
      fail(e.detail());
    }
    b.origin.emplace_back("generation", "options");
  } else {
    try {
      b.generation = kGeneration.get(config);
    } catch (const InvalidArgument& e) {
      fail(e.detail());
    }
    b.origin.emplace_back("generation", originOf(kGeneration, config));
  }
  try {
    if (options.timeout) {
      b.timeout = rendezvous::kTimeout.check(*options.timeout, "BootstrapOptions::timeout");
      b.origin.emplace_back("timeout", "options");
    } else {
      b.timeout = rendezvous::kTimeout.get(config);
      b.origin.emplace_back("timeout", originOf(rendezvous::kTimeout, config));
    }
  } catch (const InvalidArgument& e) {
    fail(e.detail());
  }
  // ---- the job's secret ----
  try {
    b.secret = options.secret ? options.secret : secure::JobSecret::fromConfig(config);
    b.insecure = kInsecure.get(config);
  } catch (const InvalidArgument& e) {
    fail(e.detail());
  }
  b.origin.emplace_back(
      "secret", !b.secret ? (b.insecure ? "none (COLLX_INSECURE=1)" : "none (unauthenticated)")
                : options.secret ? "options"
                                 : b.secret->origin());
  // ---- TLS ----
  try {
    b.tls = options.tls ? options.tls : secure::TlsContext::fromConfig(config);
  } catch (const InvalidArgument& e) {
    fail(e.detail());
  }
  b.origin.emplace_back("tls", !b.tls        ? "off"
                               : options.tls ? "options (" + b.tls->describe() + ")"
                                             : "COLLX_TLS=1 (" + b.tls->describe() + ")");
  return b;
}

std::shared_ptr<const secure::JobSecret> jobSecretOf(const Config& config) {
  return secure::JobSecret::fromConfig(config);
}

std::shared_ptr<const secure::TlsContext> tlsOf(const Config& config) {
  return secure::TlsContext::fromConfig(config);
}

}  // namespace collx
