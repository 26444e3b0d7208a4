#include "collx/bootstrap.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <mutex>
#include <sstream>

#include "collx/base/config.h"
#include "collx/base/error.h"
#include "collx/base/log.h"
#include "collx/context.h"
#include "collx/rendezvous/pmix_store.h"
#include "collx/rendezvous/signed_store.h"
#include "collx/rendezvous/store.h"
#include "collx/rendezvous/tcp_store.h"
#include "collx/secure/job_secret.h"
#include "collx/secure/tls.h"
#include "collx/transport/mesh.h"
#include "faults.h"
#include "recovery.h"

namespace collx {

const AutoSetting<kind::String> kStore(
    {.name = "COLLX_STORE",
     .component = "bootstrap",
     .automatic = "tcp://MASTER_ADDR:MASTER_PORT, hosted by rank 0; under PMIx, pmix://; for a "
                  "world of one, a store in this process",
     .help = "Rendezvous store: tcp://host:port, file:///path/to/shared/dir, "
             "redis[s]://[[user]:password@]host:port[/db], or pmix:// (under mpirun or srun "
             "--mpi=pmix: rank 0 hosts a TCP store and passes its address through PMIx; "
             "chosen by itself there when no store is set).",
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

// A job id's characters: letters, digits and - _ . :
bool isJobIdChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
         c == ':';
}

// A job id made of `text` (a PMIx namespace: "prterun-host-12@1", "slurm.pmix.12.0"): its
// other characters become '-', and it is cut to 200.
std::string jobIdOf(const std::string& text) {
  std::string out = text.substr(0, 200);
  for (char& c : out) {
    if (!isJobIdChar(c)) c = '-';
  }
  return out.empty() ? "default" : out;
}

void validateJobId(const std::string& jobId, const std::string& source) {
  if (jobId.empty() || jobId.size() > 200) {
    fail(source + ": a job id has 1..200 characters");
  }
  if (!std::all_of(jobId.begin(), jobId.end(), isJobIdChar)) {
    fail(source + ": a job id may contain letters, digits and - _ . : only");
  }
}

}  // namespace

const Setting<kind::Bool> kInsecure(
    {.name = "COLLX_INSECURE",
     .component = "security",
     .defaultValue = false,
     .help = "The job runs without a secret on purpose (collx-run --insecure sets it): each "
             "rank's warning that anyone who can reach the job can join it says so."});

const Setting<kind::Bool> kJoin(
    {.name = "COLLX_JOIN",
     .component = "bootstrap",
     .defaultValue = false,
     .help = "init() joins a running job as a newcomer (collx::join) instead of forming it: "
             "the job's ranks take it in with Context::grow() or reform(), in the place of a "
             "rank they lost; its rank and world size come from them. collx-run --on-failure "
             "replace sets it for the processes it starts in a failed rank's place."});

namespace {

// What Bootstrap::resolve learns on its way, besides the Bootstrap it fills: each step below
// reads the options and the configuration and writes `b`, each value with its origin.
struct Resolving {
  Resolving(const BootstrapOptions& o, const Config& c, Bootstrap& out)
      : options(o), config(c), b(out) {}

  const BootstrapOptions& options;
  const Config& config;
  Bootstrap& b;
  bool haveRank = false;
  std::chrono::milliseconds timeout{0};  // the deadline of the bootstrap's waits
  std::optional<std::string> masterAddr, masterPort, storeSetting;
  std::optional<std::string> pmixServer;  // the PMIx server the environment names
  bool pmixAsked = false;                 // COLLX_STORE=pmix:// (or the options' store)
  bool storeGiven = false;                // a store named other than through PMIx

  std::optional<std::string> env(const char* name) const { return config.env(name); }
};

// BootstrapOptions::rank and worldSize, both or neither.
void rankFromOptions(Resolving& r) {
  const BootstrapOptions& options = r.options;
  Bootstrap& b = r.b;
  if (!options.rank && !options.worldSize) return;
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
  r.haveRank = true;
}

// The bootstrap's deadline (its origin is recorded with the others', at the end).
void readTimeout(Resolving& r) {
  try {
    r.timeout = r.options.timeout
                    ? rendezvous::kTimeout.check(*r.options.timeout, "BootstrapOptions::timeout")
                    : rendezvous::kTimeout.get(r.config);
  } catch (const InvalidArgument& e) {
    fail(e.detail());
  }
}

// PMIx gives rank, size and the way to a store, when the environment names its server and
// no store is given otherwise (or when COLLX_STORE=pmix:// asks for it).
void findPmix(Resolving& r) {
  r.masterAddr = r.env("MASTER_ADDR");
  r.masterPort = r.env("MASTER_PORT");
  r.storeSetting = kStore.get(r.config);
  const BootstrapOptions& options = r.options;
  r.pmixAsked = options.store
                    ? *options.store == kPmixStoreUrl
                    : !options.storeObject && r.storeSetting && *r.storeSetting == kPmixStoreUrl;
  r.storeGiven =
      options.storeObject || options.store || r.storeSetting || r.masterAddr || r.masterPort;
  r.pmixServer = rendezvous::pmixServerIn(r.config);
  if (r.pmixAsked && !r.pmixServer) {
    fail(kStore.name() + "=" + kPmixStoreUrl +
         " but the environment names no PMIx server (PMIX_NAMESPACE, PMIX_RANK, "
         "PMIX_SERVER_URI*): launch with mpirun or srun --mpi=pmix");
  }
  if (r.pmixAsked && !rendezvous::pmixBuilt()) {
    fail(kStore.name() + "=" + kPmixStoreUrl + " but this collx was built without PMIx " +
         "(install libpmix-dev and configure with COLLX_WITH_PMIX=ON)");
  }
}

// Rank and size from PMIx's server, or (with COLLX_STORE=pmix://) checked against it.
void rankFromPmix(Resolving& r, const RankSource& source) {
  Bootstrap& b = r.b;
  if (!(r.pmixAsked || (!r.haveRank && !r.storeGiven && r.pmixServer && rendezvous::pmixBuilt()))) {
    return;
  }
  const rendezvous::PmixJob job = rendezvous::pmixJob(r.timeout);
  const std::string from = "PMIx (namespace " + job.nspace + ")";
  if (r.haveRank && (b.rank != job.rank || b.worldSize != job.size)) {
    fail("rank " + std::to_string(b.rank) + " of " + std::to_string(b.worldSize) + " (" +
         b.origin.front().second + ") is not PMIx's rank " + std::to_string(job.rank) + " of " +
         std::to_string(job.size) + ", which " + kStore.name() + "=" + kPmixStoreUrl +
         " relies on");
  }
  if (!r.haveRank) {
    b.rank = job.rank;
    b.worldSize = job.size;
    b.launcher = source.launcher;
    b.origin.emplace_back("rank", from + ": PMIX_RANK " + std::to_string(job.rank));
    b.origin.emplace_back("world size", from + ": PMIX_JOB_SIZE " + std::to_string(job.size));
    if (job.localRank >= 0 && job.localRank < job.size) {
      b.localRank = job.localRank;
      b.origin.emplace_back("local rank",
                            from + ": PMIX_LOCAL_RANK " + std::to_string(job.localRank));
    }
    r.haveRank = true;
  }
  b.viaPmix = r.pmixAsked || job.size > 1;  // a world of one keeps its store in-process
  b.allLocal = job.localSize == job.size;
  b.pmixNamespace = job.nspace;
}

// Rank, size and local rank from a launcher's variables.
void rankFromVariables(Resolving& r, const RankSource& source) {
  Bootstrap& b = r.b;
  if (r.haveRank) return;
  auto rank = r.env(source.rankVar);
  auto size = r.env(source.sizeVar);
  if (!rank && !size) return;
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
  if (auto local = r.env(source.localRankVar)) {
    b.localRank = parseRankVar(kLocalRank, source.localRankVar, *local);
    if (b.localRank >= b.worldSize) {
      fail(show(source.localRankVar, *local) + " is not below " + show(source.sizeVar, *size));
    }
    b.origin.emplace_back("local rank", std::string(source.localRankVar) + "=" + *local);
  }
  r.haveRank = true;
}

// Every launcher in turn, collx's own first. (PMIx is not skipped once a rank is known:
// COLLX_STORE=pmix:// still meets PMIx's rank.)
void rankFromLaunchers(Resolving& r) {
  const RankSource rankSources[] = {
      {"collx", kRank.name().c_str(), kWorldSize.name().c_str(), kLocalRank.name().c_str()},
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"pmix", nullptr, nullptr, nullptr},  // PMIx's server, not variables
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  };
  for (const RankSource& source : rankSources) {
    if (source.rankVar == nullptr) {
      rankFromPmix(r, source);
    } else {
      rankFromVariables(r, source);
    }
  }
}

void localRankFromOptions(Resolving& r) {
  Bootstrap& b = r.b;
  if (!r.options.localRank) return;
  b.localRank = *r.options.localRank;
  if (b.localRank < 0 || b.localRank >= b.worldSize) {
    fail("BootstrapOptions::localRank=" + std::to_string(b.localRank) + " is outside [0, " +
         std::to_string(b.worldSize) + ")");
  }
  b.origin.emplace_back("local rank", "options");
}

// The store: PMIx's, the options', COLLX_STORE, torchrun's MASTER_ADDR and MASTER_PORT, an
// in-process one for a world of one; else an error that says what to set.
void chooseStore(Resolving& r) {
  const BootstrapOptions& options = r.options;
  Bootstrap& b = r.b;
  if (b.viaPmix) {
    b.storeUrl = kPmixStoreUrl;
    b.rank0HostsStore = true;
    b.origin.emplace_back(
        "store", std::string(r.pmixAsked ? kStore.name() + "=" + kPmixStoreUrl + ": " : "") +
                     "PMIx: a TCP store hosted by rank 0, its address passed "
                     "through PMIx (" +
                     *r.pmixServer + ")");
  } else if (options.storeObject) {
    b.origin.emplace_back("store", "options (store object)");
  } else if (options.store) {
    rendezvous::StoreUrl::parse(*options.store);
    b.storeUrl = *options.store;
    b.origin.emplace_back("store", "options");
  } else if (r.storeSetting) {
    try {
      rendezvous::StoreUrl::parse(*r.storeSetting);
    } catch (const InvalidArgument& e) {
      fail(kStore.name() + ": " + e.detail());
    }
    b.storeUrl = *r.storeSetting;
    b.origin.emplace_back("store", originOf(kStore, r.config));
  } else if (r.masterAddr || r.masterPort) {
    const auto& masterAddr = r.masterAddr;
    const auto& masterPort = r.masterPort;
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
    std::string why = "no store for a world of " + std::to_string(b.worldSize) +
                      " ranks: set COLLX_STORE (tcp://host:port, file:///shared/dir) or "
                      "MASTER_ADDR and MASTER_PORT, or launch through collx-run, mpirun or srun "
                      "--mpi=pmix";
    if (r.pmixServer && !rendezvous::pmixBuilt()) {
      why += " (the environment names a PMIx server, " + *r.pmixServer +
             ", but this collx was built without PMIx: install libpmix-dev and rebuild)";
    } else if (b.launcher == "slurm") {
      why +=
          " (srun gives no PMIx server here: srun --mpi=pmix gives one; srun --mpi=list "
          "shows what this Slurm offers)";
    }
    fail(why);
  }
}

// No launcher and no options: rank 0 of 1, unless a store says there are others.
void rankWithoutLauncher(Resolving& r) {
  Bootstrap& b = r.b;
  if (r.haveRank) return;
  if (!b.storeUrl.empty() && b.storeUrl != "hash://") {
    fail("a store is given (" + b.origin.back().second +
         ") but no rank: set COLLX_RANK and COLLX_WORLD_SIZE (or launch through collx-run, "
         "torchrun, mpirun or srun)");
  }
  b.launcher = "none";
  b.origin.emplace_back("rank", "default (nothing set: rank 0 of 1)");
}

// The options' job id, else the first launcher's (Slurm's with its step), else PMIx's
// namespace, else "default".
void chooseJobId(Resolving& r) {
  Bootstrap& b = r.b;
  if (r.options.jobId) {
    validateJobId(*r.options.jobId, "BootstrapOptions::jobId='" + *r.options.jobId + "'");
    b.jobId = *r.options.jobId;
    b.origin.emplace_back("job id", "options");
    return;
  }
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
  if (!b.pmixNamespace.empty()) {  // the last resort before "default"
    b.jobId = jobIdOf(b.pmixNamespace);
    origin = "PMIx namespace " + b.pmixNamespace;
  }
  for (const JobSource& source : jobSources) {
    auto value = r.env(source.var);
    if (!value) continue;
    std::string jobId = *value;
    origin = std::string(source.var) + "=" + *value;
    if (source.stepVar != nullptr) {
      if (auto step = r.env(source.stepVar)) {
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

void chooseGeneration(Resolving& r) {
  Bootstrap& b = r.b;
  try {
    b.generation = r.options.generation
                       ? kGeneration.check(*r.options.generation, "BootstrapOptions::generation")
                       : kGeneration.get(r.config);
  } catch (const InvalidArgument& e) {
    fail(e.detail());
  }
  b.origin.emplace_back("generation",
                        r.options.generation ? "options" : originOf(kGeneration, r.config));
}

// The job's secret and TLS: the options', else the configuration's.
void chooseSecurity(Resolving& r) {
  const BootstrapOptions& options = r.options;
  Bootstrap& b = r.b;
  try {
    b.secret = options.secret ? options.secret : secure::JobSecret::fromConfig(r.config);
    b.insecure = kInsecure.get(r.config);
  } catch (const InvalidArgument& e) {
    fail(e.detail());
  }
  b.origin.emplace_back(
      "secret", !b.secret ? (b.insecure ? "none (COLLX_INSECURE=1)" : "none (unauthenticated)")
                : options.secret ? "options"
                                 : b.secret->origin());
  try {
    b.tls = options.tls ? options.tls : secure::TlsContext::fromConfig(r.config);
  } catch (const InvalidArgument& e) {
    fail(e.detail());
  }
  b.origin.emplace_back("tls", !b.tls        ? "off"
                               : options.tls ? "options (" + b.tls->describe() + ")"
                                             : "COLLX_TLS=1 (" + b.tls->describe() + ")");
}

}  // namespace

Bootstrap Bootstrap::resolve(const BootstrapOptions& options, const Config& config) {
  Bootstrap b;
  Resolving r{options, config, b};
  rankFromOptions(r);
  readTimeout(r);
  findPmix(r);
  rankFromLaunchers(r);
  localRankFromOptions(r);
  chooseStore(r);
  rankWithoutLauncher(r);
  chooseJobId(r);
  chooseGeneration(r);
  b.timeout = r.timeout;
  b.origin.emplace_back("timeout",
                        options.timeout ? "options" : originOf(rendezvous::kTimeout, config));
  chooseSecurity(r);
  return b;
}

JobStore startJobStore(bool allLocal, std::shared_ptr<const secure::JobSecret> secret,
                       std::shared_ptr<const secure::TlsContext> tls) {
  const Config& config = Config::process();
  auto options = rendezvous::TcpStoreServer::Options::fromConfig(config);
  options.host = allLocal ? "127.0.0.1" : "0.0.0.0";
  options.secret = std::move(secret);
  options.tls = std::move(tls);
  JobStore out;
  out.server = std::make_shared<rendezvous::TcpStoreServer>(options);
  out.url = allLocal ? out.server->url()
                     : rendezvous::tcpUrl(transport::reachableAddress(config), out.server->port());
  return out;
}

std::shared_ptr<const secure::JobSecret> jobSecretOf(const Config& config) {
  return secure::JobSecret::fromConfig(config);
}

std::shared_ptr<const secure::TlsContext> tlsOf(const Config& config) {
  return secure::TlsContext::fromConfig(config);
}

// init(): the bootstrap resolved, then the meeting (PMIx's, or the store's) and the context.

namespace {

// Once per process: a job without a secret is open to whoever can reach it.
void warnUnauthenticated(const Bootstrap& b) {
  static std::once_flag once;
  std::call_once(once, [&b] {
    if (b.insecure) {
      COLLX_WARN(kCore,
                 "rank {}: job {} runs without a secret (--insecure): anyone who can reach its "
                 "store or its ranks' ports can join it, read its keys or break it",
                 b.rank, b.jobId);
      return;
    }
    COLLX_WARN(kCore,
               "rank {}: job {} is unauthenticated: anyone who can reach its store or its ranks' "
               "ports can join it, read its keys or break it. Give every rank the same secret: "
               "{}, then COLLX_JOB_SECRET_FILE=~/.collx-secret (collx-run makes one by itself "
               "for a job on one node)",
               b.rank, b.jobId, secure::kMakeSecretFile);
  });
}

// The PMIx bootstrap (b.viaPmix): rank 0 starts the job's TCP store and passes its address,
// and a secret it made when the job has none, to the others through PMIx. Returns rank 0's
// server (nullptr elsewhere) and sets b.storeUrl (and b.secret).
std::shared_ptr<rendezvous::TcpStoreServer> meetThroughPmix(Bootstrap& b) {
  // Every init() of the job's ranks is a new meeting with a scope of its own: init() is
  // called by every rank alike, so the n-th of one rank meets the n-th of the others.
  static std::atomic<int> meetings{0};
  const std::string scope = "bootstrap." + std::to_string(meetings++) + ".";
  rendezvous::StoreOptions options;
  options.timeout = b.timeout;
  options.rank = b.rank;
  const Where where{b.rank, "init (PMIx)", -1};
  // Rank 0's value: "store <url>\n" and then "secret <text>\n" (a secret it made),
  // "secret-held\n" (its own, from its environment) or nothing (COLLX_INSECURE); or
  // "error <why>", so that the others fail at once.
  std::shared_ptr<rendezvous::TcpStoreServer> server;
  std::string value, error, secretText;
  if (b.rank == 0) {
    try {
      const bool ownSecret = b.secret != nullptr;
      if (!b.secret && !b.insecure) {
        secretText = secure::newSecretText();
        b.secret = secure::JobSecret::fromText(secretText, "rank 0's, passed through PMIx");
      }
      JobStore job = startJobStore(b.allLocal, b.secret, b.tls);
      server = std::move(job.server);
      b.storeUrl = job.url;
      value = "store " + b.storeUrl + "\n" +
              (ownSecret  ? "secret-held\n"
               : b.secret ? "secret " + secretText + "\n"
                          : "");
    } catch (const Error& e) {
      error = e.detail();
      value = "error " + error;
    }
  }
  try {
    value = rendezvous::pmixRank0Value(scope, value, options);
  } catch (const TimeoutError& e) {
    if (b.rank == 0) throw;  // its own PMIx did not answer: the error says so
    throw TimeoutError(where, "rank 0 did not pass its store's address through PMIx (" +
                                  e.detail() +
                                  "): it failed before, or it does not take its store from "
                                  "PMIx (COLLX_STORE or MASTER_ADDR set on its host only?)");
  }
  std::fill(secretText.begin(), secretText.end(), '\0');
  if (b.rank == 0) {
    std::fill(value.begin(), value.end(), '\0');
    if (!error.empty()) throw IoError(where, "rank 0 could not start the store: " + error);
    return server;
  }
  if (value.rfind("error ", 0) == 0) {
    throw IoError(where, "rank 0 could not start the store: " + value.substr(6));
  }
  std::istringstream lines(value);
  std::fill(value.begin(), value.end(), '\0');
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("store ", 0) == 0) b.storeUrl = line.substr(6);
    if (line.rfind("secret ", 0) == 0 && !b.secret) {
      b.secret = secure::JobSecret::fromText(line.substr(7), "rank 0's, passed through PMIx");
    }
    if (line == "secret-held" && !b.secret) {
      throw InvalidArgument(where,
                            "rank 0 has the job's secret from its environment "
                            "(COLLX_JOB_SECRET or COLLX_JOB_SECRET_FILE) and this rank has "
                            "none: give every rank the same one (mpirun -x COLLX_JOB_SECRET, "
                            "or a file every host reads)");
    }
    std::fill(line.begin(), line.end(), '\0');
  }
  if (b.storeUrl.empty() || b.storeUrl == kPmixStoreUrl) {
    throw IoError(where, "rank 0's value in PMIx names no store");
  }
  return nullptr;
}

// The store this rank meets the others through: the caller's, or one opened at b.storeUrl,
// which rank 0 hosts itself under torchrun's convention (MASTER_ADDR:MASTER_PORT). `server`:
// the server this process hosts, if any (PMIx's meeting may have started it already).
std::shared_ptr<rendezvous::Store> openStore(const Bootstrap& b,
                                             std::shared_ptr<rendezvous::Store> store,
                                             std::shared_ptr<rendezvous::TcpStoreServer>& server) {
  if (store) return store;
  if (b.rank0HostsStore && b.rank == 0 && !server) {
    rendezvous::StoreUrl url = rendezvous::StoreUrl::parse(b.storeUrl);
    auto serverOptions = rendezvous::TcpStoreServer::Options::fromConfig(Config::process());
    serverOptions.secret = b.secret;
    serverOptions.tls = b.tls;
    bool loopback = url.host == "localhost" || url.host.rfind("127.", 0) == 0 || url.host == "::1";
    serverOptions.host =
        loopback ? url.host : (url.host.find(':') != std::string::npos ? "::" : "0.0.0.0");
    serverOptions.port = url.port;
    try {
      server = std::make_shared<rendezvous::TcpStoreServer>(serverOptions);
    } catch (const IoError& e) {
      throw IoError(Where{b.rank, "init", -1},
                    "rank 0 hosts the store at MASTER_ADDR:MASTER_PORT but cannot: " + e.detail());
    }
  }
  rendezvous::StoreOptions storeOptions;
  storeOptions.timeout = b.timeout;
  storeOptions.rank = b.rank;
  storeOptions.secret = b.secret;
  storeOptions.tls = b.tls;
  return rendezvous::openStore(b.storeUrl, storeOptions);
}

// The context's options from what the bootstrap resolved.
ContextOptions contextOptionsOf(const Bootstrap& b,
                                std::shared_ptr<rendezvous::TcpStoreServer> server) {
  ContextOptions options;
  options.jobId = b.jobId;
  options.generation = b.generation;
  options.localRank = b.localRank;
  options.timeout = b.timeout;
  options.leaveBarrier = b.rank0HostsStore;
  if (!b.storeUrl.empty()) {
    rendezvous::StoreUrl url = rendezvous::StoreUrl::parse(b.storeUrl);
    if (url.scheme == "tcp" || url.scheme == "redis" || url.scheme == "rediss") {
      options.routeHost = url.host;
    }
  }
  options.storeServer = std::move(server);
  options.secret = b.secret;
  options.tls = b.tls;
  return options;
}

}  // namespace

std::shared_ptr<Context> join(const BootstrapOptions& options) {
  // The store, job, secret and timeout as init() finds them; as a rank other than 0, so that
  // it never hosts the store (the job's is up), and of no world of its own.
  BootstrapOptions asked = options;
  asked.rank = 1;
  asked.worldSize = 2;
  asked.localRank.reset();
  Bootstrap b = Bootstrap::resolve(asked, Config::process());
  std::shared_ptr<rendezvous::TcpStoreServer> none;
  std::shared_ptr<rendezvous::Store> store = openStore(b, options.storeObject, none);
  std::shared_ptr<rendezvous::Store> root = rendezvous::SignedStore::wrapIfNeeded(store, b.secret);
  Where where{-1, "join(job " + b.jobId + ")", -1};
  // An attempt that fails (a member or another newcomer lost meanwhile: an IoError on all
  // of them alike) is tried again with a new ticket while the timeout lasts: the members try
  // again too.
  const auto deadline = std::chrono::steady_clock::now() + b.timeout;
  for (int attempt = 1;; ++attempt) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    const std::int64_t ticket = root->add(detail::joinsKey(b.jobId, "count"), 1);
    detail::faultAt("join.ticket", -1);
    const std::string planKey = detail::joinsKey(b.jobId, std::to_string(ticket) + "/plan");
    std::string text;
    try {
      text = rendezvous::toString(root->get(planKey, std::max(left, std::chrono::milliseconds(1))));
    } catch (const TimeoutError&) {
      throw TimeoutError(where, "no survivors took this newcomer (ticket " +
                                    std::to_string(ticket) + ", attempt " +
                                    std::to_string(attempt) + ") within " +
                                    std::to_string(b.timeout.count()) +
                                    " ms: the job's ranks take newcomers in Context::grow() or "
                                    "reform() (store " +
                                    store->describe() + ")");
    }
    detail::Plan plan;
    if (!detail::decodePlan(text, plan)) {
      throw MismatchError(where, "the store holds a malformed plan: '" + text.substr(0, 200) + "'");
    }
    Context::Newcomer joining;
    joining.formed = plan.formed;
    joining.meshSize = plan.meshSize;
    joining.slots = plan.place;
    int rank = -1;
    for (std::size_t i = 0; i < plan.ticket.size(); ++i) {
      if (plan.ticket[i] == ticket) rank = static_cast<int>(i);
    }
    if (rank < 0) {
      throw MismatchError(where, "the plan that took ticket " + std::to_string(ticket) +
                                     " has no place for it: '" + text.substr(0, 200) + "'");
    }
    joining.slot = plan.place[static_cast<std::size_t>(rank)];
    log::setProcessRank(rank);
    ContextOptions contextOptions = contextOptionsOf(b, nullptr);
    contextOptions.generation = plan.next;
    // (A member that hosts the store waits for every rank of the new context to leave.)
    contextOptions.leaveBarrier = true;
    try {
      auto context = std::make_shared<Context>(Context::Key{}, store, rank,
                                               static_cast<int>(plan.place.size()), contextOptions);
      context->connectNewcomer(contextOptions, joining);
      context->formed_ = true;
      return context;
    } catch (const IoError& e) {
      if (std::chrono::steady_clock::now() >= deadline) throw;
      COLLX_WARN(kRdzv, "join(job {}): attempt {} failed, trying again: {}", b.jobId, attempt,
                 e.what());
    }
  }
}

std::shared_ptr<Context> init(const BootstrapOptions& options, Bootstrap* used) {
  if (kJoin.get(Config::process())) return join(options);
  Bootstrap b = Bootstrap::resolve(options, Config::process());
  log::setProcessRank(b.rank);
  std::shared_ptr<rendezvous::TcpStoreServer> server;
  if (!options.storeObject && b.viaPmix) {
    server = meetThroughPmix(b);
    for (auto& [what, origin] : b.origin) {
      if (what == "store") origin = b.storeUrl + " (" + origin + ")";
      if (what == "secret" && b.secret) origin = b.secret->origin();
    }
  }
  if (used != nullptr) *used = b;
  std::shared_ptr<rendezvous::Store> store = openStore(b, options.storeObject, server);
  if (!b.secret && b.worldSize > 1) warnUnauthenticated(b);
  auto context =
      Context::create(store, b.rank, b.worldSize, contextOptionsOf(b, std::move(server)));
  // Every rank has read rank 0's address: PMIx is done with (rendezvous/pmix_store.h).
  if (b.viaPmix) rendezvous::pmixDisconnect();
  return context;
}

}  // namespace collx
