#include <algorithm>
#include <array>
#include <cstring>
#include <random>

#include "collx/base/config.h"
#include "collx/base/error.h"
#include "collx/base/log.h"
#include "collx/mpi.h"
#include "collx/rendezvous/store.h"
#include "collx/rendezvous/tcp_store.h"
#include "collx/secure/job_secret.h"

namespace collx {

namespace {

constexpr int kMaxText = 512;

void check(int rc, int rank, const char* call) {
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(rc, text, &length);
    throw IoError(Where{rank, "initFromMpi", -1},
                  std::string(call) + " failed: " + std::string(text, length));
  }
}

// Rank 0's string, on every rank (at most kMaxText bytes).
std::string broadcast(MPI_Comm comm, int rank, const std::string& value) {
  std::array<char, kMaxText> buffer{};
  std::strncpy(buffer.data(), value.c_str(), buffer.size() - 1);
  check(MPI_Bcast(buffer.data(), kMaxText, MPI_CHAR, 0, comm), rank, "MPI_Bcast");
  return std::string(buffer.data());
}

}  // namespace

std::shared_ptr<Context> initFromMpi(MPI_Comm comm, const BootstrapOptions& options) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    throw InvalidArgument(Where{-1, "initFromMpi", -1}, "MPI is not initialized (call MPI_Init)");
  }
  int rank = 0, size = 0;
  check(MPI_Comm_rank(comm, &rank), -1, "MPI_Comm_rank");
  check(MPI_Comm_size(comm, &size), rank, "MPI_Comm_size");
  const Config& config = Config::process();

  BootstrapOptions resolved = options;
  resolved.rank = rank;
  resolved.worldSize = size;
  // The job's secret: the environment's, else one rank 0 makes and sends over MPI (a channel
  // the job trusts already), so that a job under mpirun is authenticated with nothing set.
  if (!resolved.secret) {
    std::string text;
    try {
      resolved.secret = secure::JobSecret::fromConfig(config);
    } catch (const Error& e) {
      text = std::string("error:") + e.detail();  // every rank fails alike, below
    }
    int given = resolved.secret ? 1 : 0;
    int allGiven = 0;
    check(MPI_Allreduce(&given, &allGiven, 1, MPI_INT, MPI_MIN, comm), rank, "MPI_Allreduce");
    if (!text.empty()) throw InvalidArgument(Where{rank, "initFromMpi", -1}, text.substr(6));
    if (!allGiven) {
      text = rank == 0 ? secure::newSecretText() : std::string();
      text = broadcast(comm, rank, text);
      resolved.secret = secure::JobSecret::fromText(text, "rank 0's, sent over MPI");
      std::fill(text.begin(), text.end(), '\0');
    }
  }
  // TLS (COLLX_TLS=1), read by every rank before any of them waits for another: a rank whose
  // files are wrong fails every rank alike instead of leaving them in a broadcast.
  if (!resolved.tls) {
    std::string error;
    try {
      resolved.tls = tlsOf(config);
    } catch (const Error& e) {
      error = e.detail();
    }
    int ok = error.empty() ? 1 : 0;
    int allOk = 0;
    check(MPI_Allreduce(&ok, &allOk, 1, MPI_INT, MPI_MIN, comm), rank, "MPI_Allreduce");
    if (!error.empty()) throw InvalidArgument(Where{rank, "initFromMpi", -1}, error);
    if (!allOk) {
      throw InvalidArgument(Where{rank, "initFromMpi", -1},
                            "another rank's TLS settings (COLLX_TLS_*) are wrong: see its error");
    }
  }
  std::shared_ptr<rendezvous::TcpStoreServer> server;
  if (!options.storeObject && !options.store && !kStore.isSet(config)) {
    // Rank 0 hosts the store; loopback only when the whole communicator shares its host.
    MPI_Comm local;
    check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local), rank,
          "MPI_Comm_split_type");
    int localSize = 0;
    MPI_Comm_size(local, &localSize);
    MPI_Comm_free(&local);
    int sameHost = localSize == size ? 1 : 0;
    int allSameHost = 0;
    check(MPI_Allreduce(&sameHost, &allSameHost, 1, MPI_INT, MPI_MIN, comm), rank, "MPI_Allreduce");
    std::string url;
    if (rank == 0) {
      try {
        JobStore job = startJobStore(allSameHost != 0, resolved.secret, resolved.tls);
        server = std::move(job.server);
        url = job.url;
      } catch (const Error& e) {
        url = std::string("error:") + e.what();  // tell the others instead of leaving them hanging
      }
    }
    url = broadcast(comm, rank, url);
    if (url.rfind("error:", 0) == 0) {
      throw IoError(Where{rank, "initFromMpi", -1},
                    "rank 0 could not start the store: " + url.substr(6));
    }
    resolved.store = url;
  }
  if (!options.jobId && !kJobId.isSet(config)) {
    std::string jobId;
    if (rank == 0) {
      std::random_device device;
      std::uniform_int_distribution<unsigned> digit(0, 15);
      jobId = "mpi-";
      for (int i = 0; i < 12; ++i) jobId += "0123456789abcdef"[digit(device)];
    }
    resolved.jobId = broadcast(comm, rank, jobId);
  }

  Bootstrap b = Bootstrap::resolve(resolved, config);
  log::setProcessRank(b.rank);
  rendezvous::StoreOptions storeOptions;
  storeOptions.timeout = b.timeout;
  storeOptions.rank = b.rank;
  storeOptions.secret = b.secret;
  storeOptions.tls = b.tls;
  std::shared_ptr<rendezvous::Store> store =
      options.storeObject ? options.storeObject : rendezvous::openStore(b.storeUrl, storeOptions);
  ContextOptions contextOptions;
  contextOptions.jobId = b.jobId;
  contextOptions.generation = b.generation;
  contextOptions.localRank = b.localRank;
  contextOptions.timeout = b.timeout;
  contextOptions.leaveBarrier = resolved.store.has_value() && !options.store;
  contextOptions.storeServer = std::move(server);
  contextOptions.secret = b.secret;
  contextOptions.tls = b.tls;
  return Context::create(store, b.rank, b.worldSize, contextOptions);
}

}  // namespace collx
