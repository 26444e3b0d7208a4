#!/bin/sh
# hermetic.sh [NAME=VALUE ...] -- COMMAND [ARGS...]
# Runs COMMAND without the caller's variables that steer collx (COLLX_*, and the launcher
# conventions collx::init() falls back to: the names of steersCollx() in hermetic.cc), with
# only the NAME=VALUE settings the test asks for. ctest runs the suites that are not gtest
# binaries through it, so that the caller's environment changes no verdict.
for name in $(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p'); do
  case $name in
    COLLX_* | OMPI_COMM_WORLD_* | SLURM_* | PMIX_* | RANK | WORLD_SIZE | LOCAL_RANK | MASTER_ADDR | \
      MASTER_PORT | TORCHELASTIC_RUN_ID | OMPI_MCA_ess_base_jobid)
      unset "$name"
      ;;
  esac
done
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case $1 in
    *=*) export "$1" ;;
    *)
      echo "hermetic.sh: expected NAME=VALUE or --, got '$1'" >&2
      exit 2
      ;;
  esac
  shift
done
[ "$1" = "--" ] && shift
[ $# -gt 0 ] || {
  echo "usage: hermetic.sh [NAME=VALUE ...] -- COMMAND [ARGS...]" >&2
  exit 2
}
exec "$@"
