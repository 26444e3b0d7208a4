// The suites are hermetic: what the caller's environment says about collx changes no verdict.
#pragma once

namespace collx::test {

// True for the variables that steer collx: COLLX_*, and the launcher conventions that
// collx::init() falls back to (torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT, TORCHELASTIC_RUN_ID; Open MPI's OMPI_COMM_WORLD_*; Slurm's SLURM_*).
bool steersCollx(const char* name);

// Called by main() before anything reads the environment: removes every variable that
// steersCollx() from this process (so from every process it starts), then sets those the
// test asks for with --env=NAME=VALUE (or --env NAME=VALUE), which it removes from argv.
// ctest passes them so (the tcp: copies: --env=COLLX_TRANSPORT=tcp); by hand, e.g.
//   build/bin/collectives_test --env=COLLX_LOG_LEVEL=debug --gtest_filter=...
// When it drops COLLX_* variables from the caller it says so on stderr, naming them.
void makeHermetic(int& argc, char** argv);

}  // namespace collx::test
