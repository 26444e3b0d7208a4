#!/usr/bin/env bash
# collx's two entry points (the README's two commands):
#   ./dev.sh bench   install what is missing, build, and run collx's main job: collx-bench
#                    (allreduce, 4 B to 64 MiB) over 4 local ranks through collx-run on its
#                    embedded TCP store
#   ./dev.sh test    install what is missing, build, and run the whole test suite (ctest:
#                    the C++ suites and the pytest suites of the Python module and the
#                    PyTorch backend), then the concurrency suites again under
#                    AddressSanitizer+UBSan and ThreadSanitizer, then each fuzz harness
#                    for a few seconds (clang-14, libFuzzer; tests/fuzz/README.md)
# Debian 12, as root (apt-get installs with --no-install-recommends; nothing is downloaded
# at build time). Knobs: BUILD_DIR (default build), JOBS (default nproc), SANITIZERS=0 to
# skip the sanitizer builds, FUZZ=0 to skip the fuzz smoke.
set -euo pipefail
cd "$(dirname "$0")"

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
PACKAGES=(
  g++ cmake ninja-build pkg-config
  libasio-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libssl-dev openssl
  libgtest-dev libgmock-dev libbenchmark-dev
  libhiredis-dev redis-server
  libopenmpi-dev openmpi-bin libpmix-dev
  # A real Slurm in namespace hosts, for the cluster tests (tests/cluster/README.md).
  slurmctld slurmd slurm-client munge
  libibverbs-dev
  python3-dev pybind11-dev python3-numpy python3-pytest python3-matplotlib
  python3-torch libtorch-dev
  # The fuzz harnesses: libFuzzer's runtime is in libclang-rt-14-dev, which clang-14 only
  # recommends.
  clang-14 libfuzzer-14-dev libclang-rt-14-dev
)

say() { printf '\033[1m== %s %s\033[0m\n' "$(date +%T)" "$*" >&2; }

install_deps() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    if [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" != installed ]; then
      missing+=("$p")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then
    echo "dev.sh: these Debian packages are missing: ${missing[*]}" >&2
    echo "dev.sh: run as root, or: sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # A fresh machine has no package lists yet: update once when the install cannot proceed.
  if ! apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}"; then
    apt-get -o DPkg::Lock::Timeout=600 update
    apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}"
  fi
}

configure_and_build() {  # dir [extra cmake args...]
  local dir=$1; shift
  say "building in $dir"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPython3_EXECUTABLE=/usr/bin/python3 "$@" >"$dir.configure.log" 2>&1 \
    || { cat "$dir.configure.log" >&2; exit 1; }
  grep -E '^-- collx' "$dir.configure.log" >&2 || true
  cmake --build "$dir" -j "$JOBS"
}

bench() {
  install_deps
  configure_and_build "$BUILD_DIR"
  say "main job: collx-run -n 4 -- collx-bench -c allreduce -b 4 -e 64M -f 4 (TCP store in collx-run)"
  "$BUILD_DIR/bin/collx-run" -n 4 --timeout 600s -- \
    "$BUILD_DIR/bin/collx-bench" -c allreduce -b 4 -e 64M -f 4
}

run_tests() {
  install_deps
  configure_and_build "$BUILD_DIR"
  say "test suite"
  ctest --test-dir "$BUILD_DIR" -j "$JOBS" --output-on-failure --timeout 600
  if [ "${SANITIZERS:-1}" = 1 ]; then
    # The suites that touch concurrency, processes and sockets, under the sanitizers.
    for sanitize in address,undefined thread; do
      local dir="$BUILD_DIR-${sanitize%%,*}"
      # Without the Python module: an instrumented extension needs the sanitizer runtime
      # preloaded into the interpreter, and its suites (label python) do not run here.
      configure_and_build "$dir" -DCMAKE_BUILD_TYPE=Debug -DCOLLX_SANITIZE="$sanitize" \
        -DCOLLX_WITH_PYTHON=OFF -DCOLLX_WITH_TORCH=OFF
      say "concurrency and process suites under -fsanitize=$sanitize"
      # The world sizes beyond P in {1,2,3,4,5,7,8} run in the Release suite only, and so do
      # the suites' copies over the emulated verbs device beyond P=4 (their larger worlds
      # repeat the engine's paths, which the shm and tcp copies cover; the medium's own are
      # all there at P=2..4), the rules file's bounds (parses of up to 1 MiB, which the
      # fuzzer runs under ASan) and the sweep of every collective in processes over verbs.
      # TSan (3-5x slower) runs P in {1,2,3,4,5} and leaves to ASan the process tests that
      # only repeat its paths at length (a sweep of every collective, 8 ranks on 2 cores,
      # simulated hosts, the CMA fallbacks, the hang reports beyond tcp), the hierarchical
      # layouts and the 64 MiB store values: CI has 30 minutes.
      local sizes='6|9|10|11|12|13|14|15|16|17|32|64'
      local heavy='^ibverbs:.*/P(5|7|8)([_ ]|$)|Selection[.]RulesFilesHaveBounds|CollectivesSweepInProcessesOverIbverbs'
      if [ "$sanitize" = thread ]; then
        sizes="$sizes|7|8"
        heavy="$heavy|CollectivesSweepInProcesses|ShmProcesses[.](EightRanks|TwoSimulatedHosts|CmaTurnedOff|ARankWhoseCma)|^multihost\$|SixtyFourMebibyteValue|HangReports[.].*/(shm|ibverbs)|^Layouts/"
      fi
      ctest --test-dir "$dir" -j "$JOBS" --output-on-failure --timeout 600 -L 'concurrency|process' \
        -E "/P($sizes)([_ ]|\$)|$heavy"
    done
  fi
  if [ "${FUZZ:-1}" != 0 ]; then
    # Every parser of outside input under libFuzzer with ASan+UBSan, 4 s each from its seeds
    # (tests/fuzz/README.md; tests/fuzz/run.sh runs them for longer). Only the libraries the
    # harnesses need are built (COLLX_FUZZ leaves out the tools).
    configure_and_build "$BUILD_DIR-fuzz" -DCMAKE_BUILD_TYPE=Debug \
      -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DCOLLX_FUZZ=ON \
      -DCOLLX_BUILD_TESTS=OFF -DCOLLX_BUILD_BENCHMARKS=OFF -DCOLLX_WITH_PYTHON=OFF \
      -DCOLLX_WITH_TORCH=OFF -DCOLLX_WITH_MPI=OFF -DCOLLX_WITH_IBVERBS=OFF
    say "fuzz smoke: each harness for 4 s"
    ctest --test-dir "$BUILD_DIR-fuzz" -L fuzz -j "$JOBS" --output-on-failure
  fi
  say "all tests passed"
}

case "${1:-}" in
  bench) bench ;;
  test) run_tests ;;
  *)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
