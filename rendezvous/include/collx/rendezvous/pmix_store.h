// PMIx: the process-management interface that mpirun (Open MPI) and srun --mpi=pmix (Slurm)
// give every process they start: a server on the process's host, named by PMIX_NAMESPACE,
// PMIX_RANK and PMIX_SERVER_URI*, that knows the job (rank, size, local ranks) and keeps
// what each process puts for the others.
//
// PmixStore is a Store over it, for values one rank (the writer) gives every other:
//   set   = PMIx_Put (global scope) + PMIx_Commit, on the writer only;
//   get / wait / multiGet = PMIx_Get of the writer's key, bounded by the deadline: the
//           server fetches the writer's data from its host when it is committed (direct
//           modex), so no fence is needed and no rank waits for the others;
//   check = PMIx_Get that asks no other host (PMIX_IMMEDIATE): what this host holds now.
// PMIx offers no atomic update and no deletion of what was put: add, compareSet and erase
// throw Unsupported, and reopen() returns nullptr. A value is put under the process that
// put it, so only the writer may set. collx's bootstrap uses a PmixStore only to pass rank
// 0's TCP store address (and, when none is set, the job's secret) to every rank; the ranks
// then meet at that TCP store, which offers every operation (collx/api/src/context.cc).
//
// Built with PMIx (COLLX_WITH_PMIX, Debian's libpmix-dev) or not: without it, pmixBuilt()
// is false and everything else throws Unsupported. The first use connects (PMIx_Init);
// pmixDisconnect() ends the connection (PMIx_Finalize), and so does exit (mpirun reports a
// process that exits connected as failed). collx's bootstrap disconnects once its job has
// formed: a process that dies while connected makes Slurm's PMIx plugin kill the whole job
// step at once, before the other ranks can say which rank they lost.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "collx/rendezvous/store.h"

namespace collx {
class Config;
}

namespace collx::rendezvous {

// Whether this build has PMIx.
bool pmixBuilt();

// When `config`'s environment names a PMIx server (PMIX_NAMESPACE, PMIX_RANK and a
// PMIX_SERVER_URI* variable: what mpirun and srun --mpi=pmix set), how it names it
// ("PMIX_NAMESPACE=..., PMIX_RANK=..."); else nullopt.
std::optional<std::string> pmixServerIn(const Config& config);

// This process's place in its PMIx job, as its server says.
struct PmixJob {
  std::string nspace;   // the job's PMIx namespace
  int rank = 0;         // PMIX_RANK
  int size = 1;         // PMIX_JOB_SIZE
  int localRank = -1;   // PMIX_LOCAL_RANK (-1: not given)
  int localSize = -1;   // PMIX_LOCAL_SIZE: the job's processes on this host (-1: not given)
  std::string version;  // the PMIx library's version
};

// Connects this process to its PMIx server (the first call; later ones reuse the
// connection) and reads its job, each query bounded by `timeout`. Throws IoError naming the
// server's variables when it cannot connect, TimeoutError, or Unsupported without PMIx.
PmixJob pmixJob(std::chrono::milliseconds timeout);

// Ends this process's connection to its PMIx server, if it has one (PMIx counts the
// connections of a process: an MPI library's stays). A later pmixJob() or PmixStore
// connects again; a PmixStore made before fails with an IoError when used after.
void pmixDisconnect();

// Rank 0's `value` on every rank of this process's PMIx job: rank 0 puts it under `scope`
// (each scope once per job) and returns it; every other rank returns it once it is there
// (their `value` is not used), or throws TimeoutError at options' timeout.
std::string pmixRank0Value(const std::string& scope, const std::string& value,
                           const StoreOptions& options);

class PmixStore final : public Store {
 public:
  // Keys are read from rank `writer` of this process's PMIx job; `scope` prefixes every key
  // (the PMIx key is "collx." + scope + key, hashed when longer than PMIx allows), so that
  // stores of different scopes never see each other's values. Connects as pmixJob() does.
  PmixStore(const StoreOptions& options, int writer, std::string scope);
  ~PmixStore() override;

  std::string describe() const override;
  // This process's place in the job, as the store read it when it connected.
  const PmixJob& job() const noexcept { return job_; }

 protected:
  void doSet(const std::string& key, const Bytes& value) override;
  std::vector<std::string> doWait(const std::vector<std::string>& keys,
                                  Clock::time_point deadline) override;
  std::vector<std::string> doMultiGet(const std::vector<std::string>& keys,
                                      Clock::time_point deadline,
                                      std::vector<Bytes>& values) override;
  std::int64_t doAdd(const std::string& key, std::int64_t delta) override;
  Bytes doCompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool doCheck(const std::vector<std::string>& keys) override;
  bool doErase(const std::string& key) override;

 private:
  std::string pmixKey(const std::string& key) const;
  [[noreturn]] void unsupported(const char* op) const;

  PmixJob job_;
  int writer_;
  std::string scope_;
};

}  // namespace collx::rendezvous
