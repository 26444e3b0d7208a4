// Run under mpirun: every rank bootstraps collx from MPI_COMM_WORLD and checks what it sees
// against MPI itself. Exits non-zero (naming the rank and the check) on any mismatch.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "collx/mpi.h"

namespace {
int failures = 0;
void expect(bool ok, int rank, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "rank %d: check failed: %s\n", rank, what);
    ++failures;
  }
}
}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  try {
    auto context = collx::initFromMpi(MPI_COMM_WORLD);
    expect(context->rank() == rank, rank, "collx rank == MPI rank");
    expect(context->size() == size, rank, "collx size == MPI size");
    expect(context->jobId().rfind("mpi-", 0) == 0, rank, "a job id made by rank 0");
    expect(static_cast<int>(context->peers().size()) == size, rank, "one peer record per rank");
    // Every rank agrees on the peers: compare rank 0's pid as seen by all.
    long long pid0 = context->peers()[0].pid;
    long long root = pid0;
    MPI_Bcast(&root, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    expect(root == pid0, rank, "all ranks see rank 0's pid alike");
    expect(context->peers()[rank].pid == ::getpid(), rank, "own record carries own pid");
    // A second context over a sub-communicator: even ranks only.
    MPI_Comm even;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &even);
    if (rank % 2 == 0) {
      auto sub = collx::initFromMpi(even);
      expect(sub->size() == (size + 1) / 2, rank, "sub-communicator size");
      expect(sub->rank() == rank / 2, rank, "sub-communicator rank");
      expect(sub->jobId() != context->jobId(), rank, "a new job id for the new communicator");
    }
    MPI_Comm_free(&even);
    std::printf("rank %d of %d: collx job %s ok\n", context->rank(), context->size(),
                context->jobId().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    ++failures;
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
