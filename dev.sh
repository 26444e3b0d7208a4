#!/usr/bin/env bash
# collx's two entry points (the README's two commands):
#   ./dev.sh bench   install what is missing, build, and run collx's main job: collx-bench
#                    (allreduce, 4 B to 64 MiB) over 4 local ranks through collx-run on its
#                    embedded TCP store
#   ./dev.sh test    install what is missing, check the sources' layout (clang-format-14),
#                    build, run the whole test suite (ctest: the C++ suites and the pytest
#                    suites of the Python module and the PyTorch backend) and beside it, at
#                    nice 19, check the libraries' sources with clang-tidy-22 (.clang-tidy),
#                    then the Python and torch suites again in a Debian 13 root (torch 2.6,
#                    Python 3.13, numpy 2; tests/debian13/), then the concurrency suites under
#                    AddressSanitizer+UBSan and ThreadSanitizer (less what each test's
#                    declaration leaves out there), then each fuzz harness for a few
#                    seconds (clang-14, libFuzzer; tests/fuzz/README.md); prints each
#                    stage's time at the end
#   ./dev.sh tidy    install what is missing, configure, and run only the clang-tidy check
# Debian 12, as root (apt-get installs with --no-install-recommends; nothing is downloaded
# at build time). Knobs: BUILD_DIR (default build), JOBS (default nproc), SANITIZERS=0 to
# skip the sanitizer builds, FUZZ=0 to skip the fuzz smoke, DEBIAN13=0 to skip the Debian 13
# stage (DEBIAN13=1: fail where its root cannot be made; unset: say so and go on;
# COLLX_DEBIAN13_ROOT: where the root is kept, default /var/cache/collx/trixie, made once from
# Debian's archive by mmdebstrap, 1.7 GB).
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
  # The format check (.clang-format), the test command's first stage, and clang-tidy
  # (.clang-tidy) after the Release build.
  clang-format-14 clang-tidy-22
  # The Debian 13 root (tests/debian13/root.sh).
  mmdebstrap
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

configure() {  # dir [extra cmake args...]
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPython3_EXECUTABLE=/usr/bin/python3 "$@" >"$dir.configure.log" 2>&1 \
    || { cat "$dir.configure.log" >&2; exit 1; }
  grep -E '^-- collx' "$dir.configure.log" >&2 || true
}

configure_and_build() {  # dir [extra cmake args...]
  say "building in $1"
  configure "$@"
  cmake --build "$1" -j "$JOBS"
}

# Seconds since the test command started, and each stage's time (printed at the end).
STARTED=$SECONDS
STAGES=()
stage_done() {  # name start-seconds
  local s=$((SECONDS - $2))
  STAGES+=("$(printf '%-52s %3d.%d min' "$1" $((s / 60)) $((s % 60 / 6)))")
}

bench() {
  install_deps
  # The main job needs the launcher and the benchmark only, not the test suites.
  say "building collx-run and collx-bench in $BUILD_DIR"
  configure "$BUILD_DIR"
  cmake --build "$BUILD_DIR" -j "$JOBS" --target collx-run collx-bench
  say "main job: collx-run -n 4 -- collx-bench -c allreduce -b 4 -e 64M -f 4 (TCP store in collx-run)"
  "$BUILD_DIR/bin/collx-run" -n 4 --timeout 600s -- \
    "$BUILD_DIR/bin/collx-bench" -c allreduce -b 4 -e 64M -f 4
}

# Every C++ source as .clang-format lays it out (`git clang-format-14` formats a change before
# a commit); lists the files that are not and fails.
check_format() {
  local files=()
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -t files < <(git ls-files -- '*.cc' '*.h')
  else
    mapfile -t files < <(find collx transport rendezvous algorithms tests benchmarks python \
      examples -name '*.cc' -o -name '*.h')
  fi
  say "format: clang-format-14 --dry-run --Werror over ${#files[@]} sources"
  if ! clang-format-14 --dry-run --Werror "${files[@]}" 2>/dev/null; then
    clang-format-14 --dry-run "${files[@]}" 2>&1 | grep -oE '^[^: ]+:[0-9]+:[0-9]+: ' \
      | cut -d: -f1 | sort | uniq -c >&2
    echo "dev.sh: these files are not laid out as .clang-format says (occurrences):" \
      "run clang-format-14 -i on them" >&2
    exit 1
  fi
}

# clang-tidy-22 as .clang-tidy says (bug patterns, performance, the static analyzer) over the
# libraries' and tools' sources in $1's compile_commands.json (the tests, benchmarks and
# Python module are left out); lists each finding once and fails on any.
check_tidy() {
  local dir=$1 log="$1/clang-tidy.log"
  local files="$PWD/(collx|transport|rendezvous|algorithms)/"
  local n
  n=$(grep -cE "\"file\": \"$files" "$dir/compile_commands.json" || true)
  say "clang-tidy-22 over $n sources ($log)"
  if ! run-clang-tidy-22 -quiet -p "$dir" -j "$JOBS" "^$files" 2>&1 \
      | sed 's/\x1b\[[0-9;]*m//g' >"$log"; then
    grep -E '^/.*: (warning|error): ' "$log" | sort -u >&2 || tail -n 30 "$log" >&2
    echo "dev.sh: clang-tidy found the above (the whole output: $log); fix them, or turn" \
      "a check off in .clang-tidy saying why" >&2
    exit 1
  fi
}

tidy() {
  install_deps
  configure "$BUILD_DIR"
  check_tidy "$BUILD_DIR"
}

# Background work beside a test stage: "$@" at nice 19 in a process group of its own (so
# that a failing stage stops all of it), its output in the file given first.
BESIDE=""
start_beside() {  # log command...
  local log=$1
  shift
  set -m
  (renice -n 19 -p "$BASHPID" >/dev/null && "$@") >"$log" 2>&1 &
  BESIDE=$!
  BESIDE_LOG=$log
  set +m
}
stop_beside() {
  [ -n "$BESIDE" ] || return 0
  kill -TERM -- "-$BESIDE" 2>/dev/null || true
  wait "$BESIDE" 2>/dev/null || true
  BESIDE=""
}
await_beside() {  # what
  local rc=0
  wait "$BESIDE" || rc=$?
  BESIDE=""
  if [ $rc != 0 ]; then
    tail -n 60 "$BESIDE_LOG" >&2
    echo "dev.sh: $1 failed (its whole output: $BESIDE_LOG)" >&2
    exit 1
  fi
}

# The sanitizer builds (address,undefined; thread) and the fuzz build, and their tests.
step_dir() { [ "$1" = fuzz ] && echo "$BUILD_DIR-fuzz" || echo "$BUILD_DIR-${1%%,*}"; }
build_step() {  # address,undefined | thread | fuzz
  if [ "$1" = fuzz ]; then
    # Only the libraries the harnesses need are built (COLLX_FUZZ leaves out the tools).
    configure_and_build "$(step_dir fuzz)" -DCMAKE_BUILD_TYPE=Debug \
      -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DCOLLX_FUZZ=ON \
      -DCOLLX_BUILD_TESTS=OFF -DCOLLX_BUILD_BENCHMARKS=OFF -DCOLLX_WITH_PYTHON=OFF \
      -DCOLLX_WITH_TORCH=OFF -DCOLLX_WITH_MPI=OFF -DCOLLX_WITH_IBVERBS=OFF
    return
  fi
  # Without the Python module: an instrumented extension needs the sanitizer runtime
  # preloaded into the interpreter, and its suites (label python) do not run here. A
  # sanitizer build leaves out of `all` what no suite below runs (COLLX_SANITIZE: the
  # unit suites, the fuzz replays, the simulator and the micro benchmarks). Line tables
  # (-g1) are what a sanitizer's report needs (file and line of each frame); full debug
  # information made the builds slower to compile and link.
  configure_and_build "$(step_dir "$1")" -DCMAKE_BUILD_TYPE=Debug -DCOLLX_SANITIZE="$1" \
    -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DCMAKE_C_FLAGS_DEBUG=-g1 \
    -DCOLLX_WITH_PYTHON=OFF -DCOLLX_WITH_TORCH=OFF
}
test_step() {  # address,undefined | thread | fuzz
  if [ "$1" = fuzz ]; then
    # Every parser of outside input under libFuzzer with ASan+UBSan, 4 s each from its seeds
    # (tests/fuzz/README.md; tests/fuzz/run.sh runs them for longer).
    say "fuzz smoke: each harness for 4 s"
    ctest --test-dir "$(step_dir fuzz)" -L fuzz -j "$JOBS" --output-on-failure
    return
  fi
  # The suites that touch concurrency, processes and sockets. What a sanitizer build leaves
  # to the Release suite is chosen where each test is declared (tests/util/sanitizer.h):
  # world sizes left out of the instantiation, tests that skip saying why, and the ctest
  # entries labelled no_tsan (the whole command's stage times: CONTRIBUTING.md).
  local selection=(-L 'concurrency|process')
  [ "$1" = thread ] && selection+=(-LE no_tsan)
  say "concurrency and process suites under -fsanitize=$1"
  ctest --test-dir "$(step_dir "$1")" -j "$JOBS" --output-on-failure --timeout 600 \
    "${selection[@]}"
}

run_tests() {
  install_deps
  trap stop_beside EXIT  # nothing started beside a stage outlives the command
  local t=$SECONDS
  check_format
  configure_and_build "$BUILD_DIR"
  stage_done "Release build" $t
  # clang-tidy runs beside the Release suite at the lowest priority: the suite keeps about a
  # third of the cores idle (its ranks wait on each other, on sockets and on processes), which
  # tidy takes, while the suite's processes keep theirs. Its own process group, so that a
  # failing suite stops it too.
  say "test suite, and clang-tidy beside it (nice 19; its output: $BUILD_DIR/tidy.out)"
  t=$SECONDS
  start_beside "$BUILD_DIR/tidy.out" check_tidy "$BUILD_DIR"
  ctest --test-dir "$BUILD_DIR" -j "$JOBS" --output-on-failure --timeout 600 ||
    { stop_beside; exit 1; }
  stage_done "Release tests (clang-tidy beside them)" $t
  await_beside "clang-tidy"
  stage_done "clang-tidy, to its end (from the suite's start)" $t
  if [ "${DEBIAN13:-1}" != 0 ]; then
    # The Python and torch suites again on Debian 13's torch 2.6, Python 3.13 and numpy 2,
    # in a Debian 13 root kept between runs (tests/debian13/README.md).
    t=$SECONDS
    local rc=0
    tests/debian13/root.sh make || rc=$?
    if [ $rc = 77 ] && [ -z "${DEBIAN13:-}" ]; then
      # Not this machine's fault alone (no network to Debian's archive, say): said loudly,
      # and in the stage times. DEBIAN13=1 makes it a failure.
      say "Debian 13 stage SKIPPED: tests/debian13/root.sh could not make the root (above)"
      STAGES+=("Debian 13 stage SKIPPED: no root (tests/debian13/root.sh make exited 77)")
    elif [ $rc != 0 ]; then
      exit $rc
    else
      stage_done "Debian 13 root (made or checked)" $t
      t=$SECONDS
      # Bounded as ctest bounds the Debian 12 suites: a rank that hangs ends the stage.
      JOBS=$JOBS timeout -k 30 1800 tests/debian13/root.sh run bash /src/tests/debian13/suite.sh
      stage_done "Debian 13 build, suites and pip install" $t
    fi
  fi
  # The sanitizer builds and the fuzz build: each next build runs beside the previous
  # stage's tests, at nice 19 (as clang-tidy beside the Release suite, above).
  local steps=()
  [ "${SANITIZERS:-1}" = 1 ] && steps+=(address,undefined thread)
  [ "${FUZZ:-1}" != 0 ] && steps+=(fuzz)
  local i
  for ((i = 0; i < ${#steps[@]}; i++)); do
    local step=${steps[$i]} next=${steps[$((i + 1))]:-}
    if [ "$i" = 0 ]; then
      t=$SECONDS
      build_step "$step"
      stage_done "$step build" $t
    else
      await_beside "the $step build"
      stage_done "$step build, to its end (from the tests before)" $t
    fi
    t=$SECONDS
    if [ -n "$next" ]; then
      say "building for $next beside the tests (nice 19; its output: $(step_dir "$next").log)"
      start_beside "$(step_dir "$next").log" build_step "$next"
    fi
    test_step "$step" || { stop_beside; exit 1; }
    stage_done "$step tests${next:+ ($next build beside them)}" $t
  done
  stage_done "all" $STARTED
  say "stage times:"
  printf '   %s\n' "${STAGES[@]}" >&2
  say "all tests passed"
}

case "${1:-}" in
  bench) bench ;;
  test) run_tests ;;
  tidy) tidy ;;
  *)
    sed -n '2,/^set -e/{/^set -e/!p}' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
