// Bootstrapping a collx context from an MPI communicator (optional: the collx::mpi target,
// built when MPI is found). MPI is used once, to agree on a store; collx never uses MPI for
// communication.
#pragma once

#include <mpi.h>

#include <memory>

#include "collx/bootstrap.h"
#include "collx/context.h"

namespace collx {

// Collective over `comm`: every rank of it must call. Rank and world size come from `comm`.
// The store is options.store or COLLX_STORE when given; otherwise rank 0 of `comm` starts a
// TCP store (listening on 127.0.0.1 when every rank shares its host, else on every interface,
// advertised under its host name) and sends its address to the others with MPI_Bcast. The job id is
// options.jobId, else COLLX_JOB_ID, else a fresh id made by rank 0. Throws like init().
std::shared_ptr<Context> initFromMpi(MPI_Comm comm, const BootstrapOptions& options = {});

}  // namespace collx
