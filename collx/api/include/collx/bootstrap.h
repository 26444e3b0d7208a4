// Bootstrap: where a process learns its rank, the world size and the store.
//
// Each value is taken from the first of these that provides it (and a source that provides
// one of rank / world size must provide both):
//   1. BootstrapOptions set in code
//   2. collx:    COLLX_RANK, COLLX_WORLD_SIZE, COLLX_LOCAL_RANK           (collx-run sets them)
//   3. torchrun: RANK, WORLD_SIZE, LOCAL_RANK
//   4. PMIx:     the PMIx server's rank, job size and local rank, when the environment names
//                one (PMIX_NAMESPACE, PMIX_RANK, PMIX_SERVER_URI*: mpirun, srun --mpi=pmix)
//                and no store is given (below), or COLLX_STORE=pmix://
//   5. Open MPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   6. Slurm:    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
// The store: BootstrapOptions::store, else COLLX_STORE, else tcp://MASTER_ADDR:MASTER_PORT
// (rank 0 hosts that store, as torch's env:// does), else, under PMIx, a TCP store that rank
// 0 hosts and whose address it passes to the others through PMIx ("pmix://"), else, for a
// world of one, a store in this process. The job id: COLLX_JOB_ID, TORCHELASTIC_RUN_ID,
// SLURM_JOB_ID[.SLURM_STEP_ID], OMPI_MCA_ess_base_jobid, PMIx's namespace, else "default".
// The generation: COLLX_GENERATION (default 0).
// The job's secret: BootstrapOptions::secret, else COLLX_JOB_SECRET or COLLX_JOB_SECRET_FILE
// (collx-run sets one), else none: the job is unauthenticated, and init() says so once.
// With nothing set at all, the process is rank 0 of a world of one.
//
// A missing, malformed or contradictory value (a rank outside the world, half of a source)
// throws InvalidArgument naming the variable.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collx/base/setting.h"

namespace collx {

namespace secure {
class JobSecret;
class TlsContext;
}  // namespace secure

// The bootstrap's settings that other code asks about (the MPI bootstrap: whether a store or
// a job id was given). COLLX_RANK, COLLX_WORLD_SIZE, COLLX_LOCAL_RANK and COLLX_GENERATION
// are declared in bootstrap.cc too.
extern const AutoSetting<kind::String> kStore;
extern const AutoSetting<kind::String> kJobId;
// COLLX_JOIN: init() joins a running job as a newcomer (collx::join).
extern const Setting<kind::Bool> kJoin;
// COLLX_STORE's value that asks for the PMIx bootstrap (also chosen by itself under PMIx).
inline constexpr const char* kPmixStoreUrl = "pmix://";

namespace rendezvous {
class Store;
class TcpStoreServer;
}  // namespace rendezvous

struct BootstrapOptions {
  std::optional<int> rank;
  std::optional<int> worldSize;
  std::optional<int> localRank;
  // A store URL (tcp://host:port, file:///dir, redis://host:port[/db]) ...
  std::optional<std::string> store;
  // ... or a store object (e.g. one shared by an embedding framework); wins over `store`.
  std::shared_ptr<rendezvous::Store> storeObject;
  std::optional<std::string> jobId;
  std::optional<std::int64_t> generation;
  std::optional<std::chrono::milliseconds> timeout;
  // The job's secret (collx internal: secure::JobSecret), when given in code.
  std::shared_ptr<const secure::JobSecret> secret;
  // TLS for the TCP store and the ranks' tcp connections (collx internal:
  // secure::TlsContext), when given in code; else COLLX_TLS and its files.
  std::shared_ptr<const secure::TlsContext> tls;
};

// The resolved parameters, with where each came from ("COLLX_RANK=3", "options", ...).
struct Bootstrap {
  int rank = 0;
  int worldSize = 1;
  int localRank = -1;    // -1: not given
  std::string storeUrl;  // "" when storeObject was given; "pmix://": see viaPmix
  // MASTER_ADDR convention: rank 0 starts the TCP store server and keeps it up until every
  // rank's context has ended.
  bool rank0HostsStore = false;
  std::string jobId;
  std::int64_t generation = 0;
  std::chrono::milliseconds timeout{0};
  std::string launcher;  // "options", "collx", "torchrun", "pmix", "openmpi", "slurm", "none"
  // PMIx: rank 0 hosts a TCP store (as with MASTER_ADDR) and passes its address, and the
  // job's secret when none is set, to every rank through PMIx (init() does it).
  bool viaPmix = false;
  bool allLocal = false;      // PMIx: every rank runs on this host (the store listens on loopback)
  std::string pmixNamespace;  // PMIx: the job's namespace
  std::shared_ptr<const secure::JobSecret> secret;  // nullptr: the job is unauthenticated
  bool insecure = false;  // COLLX_INSECURE: without a secret on purpose (collx-run --insecure)
  std::shared_ptr<const secure::TlsContext> tls;            // nullptr: plain TCP (COLLX_TLS off)
  std::vector<std::pair<std::string, std::string>> origin;  // value name -> its source

  static Bootstrap resolve(const BootstrapOptions& options, const Config& config);
};

// For bootstraps that pass rank 0's store address to the others over a channel of their
// own (initFromMpi: MPI; init() under PMIx): the job's TCP store, started in this process
// with the job's `secret` and `tls` (either may be nullptr), on loopback when every rank
// runs on this host (`allLocal`), else on every interface; and the URL the others dial
// (on other hosts: transport::reachableAddress, which COLLX_IFNAME steers). Throws IoError
// as TcpStoreServer does.
struct JobStore {
  std::shared_ptr<rendezvous::TcpStoreServer> server;
  std::string url;
};
JobStore startJobStore(bool allLocal, std::shared_ptr<const secure::JobSecret> secret,
                       std::shared_ptr<const secure::TlsContext> tls);

// The job's secret as `config` gives it (COLLX_JOB_SECRET or COLLX_JOB_SECRET_FILE), or
// nullptr: for contexts made without the bootstrap (the PyTorch backend). Throws
// InvalidArgument as Bootstrap::resolve does.
std::shared_ptr<const secure::JobSecret> jobSecretOf(const Config& config);
// TLS as `config` gives it (COLLX_TLS=1 and its files), or nullptr: likewise.
std::shared_ptr<const secure::TlsContext> tlsOf(const Config& config);

}  // namespace collx
