#!/usr/bin/env bash
# Side by side, in one run: collx-bench against the peers of ../shared/peers (Gloo, Open MPI
# over TCP, torch.distributed's gloo backend, and MPICH 4.0 over UCX, built here from the
# same mpi_bench.c with mpicc.mpich) and this machine's loopback TCP limit
# (tcp_exchange), for one collective at P=2 and P=4; on request, Debian 13's peers too
# (mpi5: Open MPI 5.0, mpich42: MPICH 4.2 over UCX, gloo13: Debian 13's Gloo), the same
# mpi_bench.c and gloo_bench.cc built and run inside the Debian 13 root of
# tests/debian13/root.sh (as root; OUT_DIR is bound at its own path there; without the root
# they are skipped, and run.sh says so). Writes CSVs (results.csv: one row per
# implementation, P and size, the impl column naming each), machine.txt (the CPU model, core
# count, date, load, the knobs, the peers' versions and this run's limits), a ratio table
# (ratios.md, headed by the CPU and core count) and a picture (benchmarks/plot/collx_plot.py:
# busbw and time against size, one line per implementation, a row of panels per P). On a
# terminal it shows its progress on stderr (one line, rewritten; nothing in a pipe or a log).
#
#   benchmarks/compare/run.sh [BUILD_DIR] [OUT_DIR]
# Knobs: PS="2 4", SIZES=..., COLL=allreduce, ONLY="collx gloo mpi mpich torch limits" (also
#        "base", below, and Debian 13's "mpi5 mpich42 gloo13", which need
#        `tests/debian13/root.sh make` once and COLLX_DEBIAN13_ROOT if the root is not at
#        /var/cache/collx/trixie; mpich and mpich42: only where ranks fit the cores: their
#        ranks poll without ever yielding, so with more ranks than cores their figures mean
#        nothing; run.sh skips them there and says so),
#        MIN_TIME=0.3, REPEAT=1 (rounds; every implementation runs once per round and the
#        table takes each one's best round: the machine is noisy), PER_SIZE=0 (1: every
#        implementation runs one size at a time, back to back, so that each round's figures
#        of a size come from the same few seconds: the table then also gives the median
#        over rounds of each round's ratio), PEERS=path/to/shared/peers,
#        TRANSPORT=tcp (collx's COLLX_TRANSPORT: tcp against the peers' TCP; shm or auto take
#        shared memory between local ranks, and Open MPI and MPICH then run on their
#        shared-memory defaults; Gloo has TCP only),
#        BASE=path/to/another/build (its collx-bench runs right after this build's, in the
#        same rounds, as the peer "base": a change against the tree before it; ONLY must
#        include "base", which it does by default when BASE is set), BASE_ENV="NAME=VALUE
#        ..." (variables for the base's runs only: BASE=build BASE_ENV=COLLX_TRACE_BUFFER=0
#        prices a feature against itself turned off in one tree), BASE_ARGS="..."
#        (collx-bench options for the base's runs only: BASE=build BASE_ARGS="--rotate 256M"
#        gives collx's figures with cold buffers beside its usual ones), TIME_STAT=middle
#        (collx-bench --time-stat for collx and base: the mean of each rank's middle half of
#        calls instead of the median the peers take, finer than a 10 ns clock tick; for
#        collx against collx),
#        PLOT=OUT_DIR/compare.png (the picture, .png or .svg; PLOT=none draws none; needs
#        python3-matplotlib), PEER_TIMEOUT=300 (seconds a run of MPICH or of a Debian 13 peer
#        may take before it is stopped and left out)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
out=${2:-$build/compare}
mkdir -p "$out"
out=$(cd "$out" && pwd)  # (absolute: Debian 13's peers see it at the same path)
PEERS=${PEERS:-$root/../shared/peers}
PS=${PS:-"2 4"}
SIZES=${SIZES:-4,64,1024,16384,65536,262144,1048576,4194304,16777216,67108864}
COLL=${COLL:-allreduce}
TRANSPORT=${TRANSPORT:-tcp}
MIN_TIME=${MIN_TIME:-0.3}
BASE=${BASE:-}
if [ -n "$BASE" ]; then
  BASE=$(cd "$BASE" && pwd)
  ONLY=${ONLY:-"collx base"}
else
  ONLY=${ONLY:-"collx gloo mpi mpich torch limits"}
fi
REPEAT=${REPEAT:-1}
BASE_ENV=${BASE_ENV:-}
BASE_ARGS=${BASE_ARGS:-}
TIME_STAT=${TIME_STAT:-}
PER_SIZE=${PER_SIZE:-0}
PLOT=${PLOT:-$out/compare.png}
plot_script=$here/../plot/collx_plot.py
# The picture needs matplotlib: found out now rather than after every round has run.
if [ "$PLOT" != none ] && ! /usr/bin/python3 "$plot_script" --check; then
  echo "run.sh: PLOT needs python3-matplotlib (or PLOT=none)" >&2
  exit 2
fi
ONLY_ASKED=$ONLY
want() { [[ " $ONLY " == *" $1 "* ]]; }

# The peers build in a scratch copy (the shared folder is read-only), each what is asked
# for (the limits and Open MPI need no libgloo-dev).
work=$out/peers
targets=()
want gloo && targets+=(bin/gloo_bench)
want mpi && targets+=(bin/mpi_bench)
want limits && targets+=(limits)
if want gloo || want mpi || want mpich || want torch || want limits; then
  if [ ! -f "$work/Makefile" ]; then
    rm -rf "$work" && cp -r "$PEERS" "$work" && rm -rf "$work/results"
  fi
  if [ ${#targets[@]} -gt 0 ] && ! make -s -C "$work" "${targets[@]}" > "$work/build.log" 2>&1
  then
    cat "$work/build.log" >&2
    echo "run.sh: building the peers' ${targets[*]} in $work failed (above; their packages:" \
      "$PEERS/README.md)" >&2
    exit 1
  fi
fi
# MPICH (Debian's mpich: 4.0 over UCX) runs the same mpi_bench.c, built with its own mpicc.
if want mpich && [ ! -x "$work/bin/mpich_bench" ]; then
  if command -v mpicc.mpich >/dev/null; then
    mpicc.mpich -O3 -Wall -o "$work/bin/mpich_bench" "$work/mpi_bench.c" -lm
  else
    echo "run.sh: mpich is not installed (apt-get install mpich): skipping it" >&2
  fi
fi
# Debian 13's peers: ../shared/peers' sources built in the Debian 13 root by its own mpicc
# (Open MPI 5, MPICH 4.2) and against its libgloo, into OUT_DIR/peers13, and run there
# (tests/debian13/root.sh run: proc, sys, dev mounted in a namespace of the command's own,
# OUT_DIR bound at the same path, a clean environment: each command names its variables).
root13=$root/tests/debian13/root.sh
work13=$out/peers13
IN13=(env COLLX_DEBIAN13_BIND="$out" "$root13" run)
PACKAGES13=(make g++ openmpi-bin libopenmpi-dev mpich libmpich-dev libgloo-dev)
asked13=()
for impl in gloo13 mpi5 mpich42; do want "$impl" && asked13+=("$impl"); done
if [ ${#asked13[@]} -gt 0 ]; then
  dir13=$("$root13" path)
  why=""
  if [ "$(id -u)" != 0 ]; then
    why="they run in the Debian 13 root ($dir13), which takes root (chroot, mounts)"
  elif [ ! -f "$dir13/etc/debian_version" ]; then
    why="there is no Debian 13 root at $dir13"
  else
    # shellcheck disable=SC2016  # (dpkg-query's fields)
    have=$(chroot "$dir13" dpkg-query -W -f='${db:Status-Status}\n' "${PACKAGES13[@]}" \
      2>/dev/null | grep -cx installed || true)
    [ "$have" = ${#PACKAGES13[@]} ] ||
      why="the Debian 13 root at $dir13 lacks some of: ${PACKAGES13[*]}"
  fi
  if [ -n "$why" ]; then
    echo "run.sh: skipping ${asked13[*]}: $why (make it, or add them: tests/debian13/root.sh" \
      "make, as root)" >&2
    for impl in "${asked13[@]}"; do ONLY=" $ONLY "; ONLY=${ONLY// $impl / }; done
    asked13=()
  elif [ ! -x "$work13/bin/gloo_bench" ] || [ ! -x "$work13/bin/mpi5_bench" ] ||
       [ ! -x "$work13/bin/mpich42_bench" ]; then
    rm -rf "$work13" && cp -r "$PEERS" "$work13" && rm -rf "$work13/results" "$work13/bin"
    # shellcheck disable=SC2016  # ($1: sh's, in the root)
    if ! "${IN13[@]}" sh -c 'cd "$1" && make -s bin/gloo_bench &&
        mpicc.openmpi -O3 -Wall -o bin/mpi5_bench mpi_bench.c -lm &&
        mpicc.mpich -O3 -Wall -o bin/mpich42_bench mpi_bench.c -lm' sh "$work13" \
        > "$work13/build.log" 2>&1; then
      cat "$work13/build.log" >&2
      echo "run.sh: building Debian 13's peers in $dir13 failed (above)" >&2
      exit 1
    fi
  fi
fi
cpus=$(nproc)
# MPICH's ranks never yield: on a machine that something else keeps busy, one of its calls
# can take minutes. Each of its runs gets this long (seconds), then is stopped and left out.
PEER_TIMEOUT=${PEER_TIMEOUT:-300}
chunks=$SIZES
[ "$PER_SIZE" = 1 ] && chunks=$(echo "$SIZES" | tr ',' ' ')
# Progress on a terminal: one step is one implementation's run of one chunk of sizes.
steps_total=0
for P in $PS; do
  for impl in collx base gloo gloo13 mpi mpi5 mpich mpich42 torch; do
    want "$impl" || continue
    [ "$impl" = base ] && [ -z "$BASE" ] && continue
    [ "$impl" = mpich ] && { [ ! -x "$work/bin/mpich_bench" ] || [ "$P" -gt "$cpus" ]; } && continue
    [ "$impl" = mpich42 ] && [ "$P" -gt "$cpus" ] && continue
    steps_total=$((steps_total + REPEAT * $(echo "$chunks" | wc -w)))
  done
done
steps_done=0
human() { (($1 < 60)) && echo "${1}s" || printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
progress() {  # what the next step runs
  steps_done=$((steps_done + 1))
  [ -t 2 ] || return 0
  local left="?" elapsed=$SECONDS
  ((steps_done > 1)) && left="~$(human $((elapsed * (steps_total - steps_done + 1) / (steps_done - 1))))"
  printf '\rrun.sh: step %d of %d (%s), elapsed %s, remaining %s\033[K' "$steps_done" \
    "$steps_total" "$1" "$(human "$elapsed")" "$left" >&2
}
clear_progress() { [ -t 2 ] && printf '\r\033[K' >&2 || true; }  # before other output
SECONDS=0
csv=$out/results.csv
echo "impl,transport,collective,algorithm,P,bytes,time_us,algbw_GBps,busbw_GBps,correct,round" > "$csv"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca oob_tcp_if_include lo
        --mca btl_tcp_if_include lo --mca pml ob1 --mca btl tcp,self)
# Open MPI 5 (PRRTE): no oob_tcp_if_include lo ("No network interfaces were found for
# out-of-band communications"); as root, PRRTE also wants the two variables.
MPIRUN5=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi
         --allow-run-as-root --oversubscribe)
MPIRUN5_TCP=(--mca btl_tcp_if_include lo --mca pml ob1 --mca btl tcp,self)
: > "$out/limits.txt"
# The machine, with every result: what it is, when, how loaded; the peers' versions; at the
# end, this run's limits (limits.txt).
versions() {  # [chroot dir] packages...: "package version, ..." of those installed
  local pre=()
  [ "$1" = / ] || pre=(chroot "$1")
  shift
  # shellcheck disable=SC2016  # (dpkg-query's fields)
  "${pre[@]}" dpkg-query -W -f='${db:Status-Status} ${Package} ${Version}\n' "$@" 2>/dev/null \
    | sed -n 's/^installed //p' | paste -sd, - | sed 's/,/, /g' || true
}
{
  model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
  [ -n "$model" ] || model=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
  cpuid=$(lscpu 2>/dev/null | awk -F': *' '/^CPU family:/ {f=$2} /^Model:/ {m=$2}
    /^Stepping:/ {s=$2} /^Hypervisor vendor:/ {h=", under " $2}
    END {if (f != "") printf "family %s, model %s, stepping %s%s", f, m, s, h}')
  echo "cpu: ${model:-unknown}${cpuid:+ ($cpuid)}"
  echo "cores: $cpus (nproc; $(lscpu 2>/dev/null | awk -F': *' '/^Socket\(s\):/ {s=$2}
    /^Core\(s\) per socket:/ {c=$2} /^Thread\(s\) per core:/ {t=$2}
    END {printf "%s socket(s), %s core(s) each, %s thread(s) per core", s, c, t}'))"
  echo "memory: $(awk '/^MemTotal:/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "date: $(date '+%Y-%m-%d %H:%M:%S %z') (start)"
  echo "system: $(. /etc/os-release && echo "$PRETTY_NAME"), Linux $(uname -r) $(uname -m)"
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5 and 15 min, at the start)"
  echo "collx: $build (commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'))"
  knobs="COLL=$COLL TRANSPORT=$TRANSPORT PS=\"$PS\" SIZES=$SIZES MIN_TIME=$MIN_TIME"
  knobs+=" REPEAT=$REPEAT PER_SIZE=$PER_SIZE ONLY=\"$ONLY_ASKED\"${BASE:+ BASE=$BASE}"
  knobs+="${BASE_ENV:+ BASE_ENV=\"$BASE_ENV\"}${BASE_ARGS:+ BASE_ARGS=\"$BASE_ARGS\"}${TIME_STAT:+ TIME_STAT=$TIME_STAT}"
  echo "run: $knobs"
  echo "peers, Debian 12: $(versions / openmpi-bin mpich libgloo0 libgloo-dev python3-torch)"
  if [ ${#asked13[@]} -gt 0 ]; then
    echo "peers, Debian 13 ($dir13, debian_version $(cat "$dir13/etc/debian_version")):" \
      "$(versions "$dir13" openmpi-bin mpich libgloo-dev)"
  fi
} > "$out/machine.txt"
for round in $(seq 1 "$REPEAT"); do
for P in $PS; do
  if want limits && [ "$P" = 2 ]; then
    clear_progress
    if [ "$TRANSPORT" = tcp ]; then
      "$work/bin/tcp_exchange" $((32 << 20)) 9 0 | tee -a "$out/limits.txt"
      "$work/bin/tcp_exchange" $((32 << 20)) 9 1 | tee -a "$out/limits.txt"
    else  # shared memory's limits: memcpy bandwidth, a float32 sum loop's (built for this
      # CPU, as collx's kernels pick theirs), a flag's round trip between 2 cores, and how
      # fast the 2 cores hand data to each other this round (collx-handoff-probe)
      "$work/bin/memcpy_bw" 64 20 | tee -a "$out/limits.txt"
      "$work/bin/reduce_bw_native" 64 20 | tee -a "$out/limits.txt"
      "$work/bin/pingpong_shm" 200000 1 | tee -a "$out/limits.txt"
      if [ -x "$build/bin/collx-handoff-probe" ]; then
        "$build/bin/collx-handoff-probe" 5 | tail -1 | sed "s/^/round $round: /" | tee -a "$out/limits.txt"
      fi
    fi
  fi
  for chunk in $chunks; do
    # collx, and the same bench from the BASE build: one function, two trees.
    run_collx() {  # impl build_dir
      local impl=$1 dir=$2
      # The peers all reduce in place (MPI_IN_PLACE, Gloo's and torch's in-place tensors).
      local inplace
      inplace=$([ "$COLL" = allreduce ] && echo --in-place || true)
      # The peers' allgather sizes are per rank, collx-bench's the whole gathered buffer.
      local sizes=$chunk
      if [ "$COLL" = allgather ]; then
        sizes=$(echo "$chunk" | tr ',' '\n' \
          | awk -v P="$P" '{printf "%s%d", (NR > 1 ? "," : ""), $1 * P}')
      fi
      local extra=() stat=()
      [ "$impl" = base ] && [ -n "$BASE_ENV" ] && read -r -a extra <<< "$BASE_ENV"
      local args=()
      [ "$impl" = base ] && [ -n "$BASE_ARGS" ] && read -r -a args <<< "$BASE_ARGS"
      [ -n "$TIME_STAT" ] && stat=(--time-stat "$TIME_STAT")
      # (its stderr to a file: collx-bench's own progress line would fight this one)
      progress "round $round, P=$P, $impl, sizes $chunk"
      if ! env "${extra[@]}" COLLX_TRANSPORT=$TRANSPORT "$dir/bin/collx-run" -n "$P" -- \
        "$dir/bin/collx-bench" -c "$COLL" --sizes "$sizes" --min-time "$MIN_TIME" $inplace \
        "${stat[@]}" "${args[@]}" --csv "$out/${impl}_p$P.csv" > "$out/${impl}_p$P.txt" 2> "$out/${impl}_p$P.err"; then
        clear_progress
        cat "$out/${impl}_p$P.err" >&2
        echo "run.sh: $impl at P=$P failed (above; its table: $out/${impl}_p$P.txt)" >&2
        exit 1
      fi
      # into the peers' CSV shape
      grep -v '^#' "$out/${impl}_p$P.csv" | tail -n +2 \
        | while IFS=, read -r size count dtype t p50 p99 alg bus wrong algo; do
          ok=$([ "$wrong" = 0 ] && echo 1 || echo 0)
          echo "$impl,$TRANSPORT,$COLL,default,$P,$size,$t,$alg,$bus,$ok,$round"
        done >> "$csv"
    }
    want collx && run_collx collx "$build"
    want base && [ -n "$BASE" ] && run_collx base "$BASE"
    if want gloo; then
      progress "round $round, P=$P, gloo, sizes $chunk"
      "$work/bin/gloo_bench" -p "$P" --colls "$COLL" --sizes "$chunk" --min-time "$MIN_TIME" \
        2> "$out/gloo_p$P.log" | grep '^gloo,' | sed "s/\$/,$round/" >> "$csv" || true
    fi
    if want gloo13; then
      progress "round $round, P=$P, Debian 13's gloo, sizes $chunk"
      timeout -k 5 "$PEER_TIMEOUT" "${IN13[@]}" "$work13/bin/gloo_bench" -p "$P" \
        --colls "$COLL" --sizes "$chunk" --min-time "$MIN_TIME" 2> "$out/gloo13_p$P.log" \
        | grep '^gloo,' | sed "s/^gloo,/gloo13,/; s/\$/,$round/" >> "$csv" || true
    fi
    if want mpi; then
      progress "round $round, P=$P, Open MPI, sizes $chunk"
      if [ "$TRANSPORT" = tcp ]; then
        "${MPIRUN[@]}" -np "$P" "$work/bin/mpi_bench" --transport tcp --colls "$COLL" \
          --sizes "$chunk" --min-time "$MIN_TIME" 2> "$out/mpi_p$P.log" \
          | grep '^ompi,' | sed "s/\$/,$round/" >> "$csv" || true
      else
        mpirun --allow-run-as-root --oversubscribe -np "$P" "$work/bin/mpi_bench" --transport shm \
          --colls "$COLL" --sizes "$chunk" --min-time "$MIN_TIME" 2> "$out/mpi_p$P.log" \
          | grep '^ompi,' | sed "s/\$/,$round/" >> "$csv" || true
      fi
    fi
    if want mpi5; then
      progress "round $round, P=$P, Open MPI 5, sizes $chunk"
      tcp5=()
      [ "$TRANSPORT" = tcp ] && tcp5=("${MPIRUN5_TCP[@]}")
      timeout -k 5 "$PEER_TIMEOUT" "${IN13[@]}" "${MPIRUN5[@]}" "${tcp5[@]}" -np "$P" \
        "$work13/bin/mpi5_bench" --transport "$([ "$TRANSPORT" = tcp ] && echo tcp || echo shm)" \
        --colls "$COLL" --sizes "$chunk" --min-time "$MIN_TIME" 2> "$out/mpi5_p$P.log" \
        | grep '^ompi,' | sed "s/^ompi,/mpi5,/; s/\$/,$round/" >> "$csv" || true
    fi
    if want mpich && [ -x "$work/bin/mpich_bench" ]; then
      if [ "$P" -gt "$cpus" ]; then
        clear_progress
        echo "run.sh: P=$P > $cpus CPUs: MPICH's ranks poll without yielding, skipped" >&2
      elif [ "$TRANSPORT" = tcp ]; then
        progress "round $round, P=$P, MPICH, sizes $chunk"
        UCX_TLS=tcp,self MPIR_CVAR_NOLOCAL=1 timeout -k 5 "$PEER_TIMEOUT" \
          mpiexec.mpich -n "$P" "$work/bin/mpich_bench" \
          --transport tcp --colls "$COLL" --sizes "$chunk" --min-time "$MIN_TIME" \
          2> "$out/mpich_p$P.log" | grep '^ompi,' | sed "s/^ompi,/mpich,/; s/\$/,$round/" \
          >> "$csv" || true
      else
        progress "round $round, P=$P, MPICH, sizes $chunk"
        timeout -k 5 "$PEER_TIMEOUT" mpiexec.mpich -n "$P" "$work/bin/mpich_bench" \
          --transport shm --colls "$COLL" \
          --sizes "$chunk" --min-time "$MIN_TIME" 2> "$out/mpich_p$P.log" \
          | grep '^ompi,' | sed "s/^ompi,/mpich,/; s/\$/,$round/" >> "$csv" || true
      fi
    fi
    if want mpich42; then
      if [ "$P" -gt "$cpus" ]; then
        clear_progress
        echo "run.sh: P=$P > $cpus CPUs: MPICH 4.2's ranks poll without yielding, skipped" >&2
      else
        progress "round $round, P=$P, MPICH 4.2, sizes $chunk"
        # Debian 13's MPICH is ch4:ucx: over TCP, UCX's tcp and no shared memory between ranks.
        env13=()
        [ "$TRANSPORT" = tcp ] && env13=(UCX_TLS=tcp,self MPIR_CVAR_NOLOCAL=1)
        timeout -k 5 "$PEER_TIMEOUT" "${IN13[@]}" env "${env13[@]}" mpiexec.mpich -n "$P" \
          "$work13/bin/mpich42_bench" \
          --transport "$([ "$TRANSPORT" = tcp ] && echo tcp || echo shm)" --colls "$COLL" \
          --sizes "$chunk" --min-time "$MIN_TIME" 2> "$out/mpich42_p$P.log" \
          | grep '^ompi,' | sed "s/^ompi,/mpich42,/; s/\$/,$round/" >> "$csv" || true
      fi
    fi
    if want torch; then
      progress "round $round, P=$P, torch.distributed gloo, sizes $chunk"
      /usr/bin/python3 "$work/torch_bench.py" -p "$P" --colls "$COLL" --sizes "$chunk" \
        --min-time "$MIN_TIME" 2> "$out/torch_p$P.log" \
        | grep '^torch,' | sed "s/\$/,$round/" >> "$csv" || true
    fi
  done
done
done
clear_progress
{
  echo "date: $(date '+%Y-%m-%d %H:%M:%S %z') (end, after $(human $SECONDS))"
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5 and 15 min, at the end)"
  if [ -s "$out/limits.txt" ]; then
    echo "limits (this run's, as limits.txt):"
    sed 's/^/  /' "$out/limits.txt"
  else
    echo "limits: none measured in this run (ONLY has no \"limits\")"
  fi
} >> "$out/machine.txt"
/usr/bin/python3 "$here/ratios.py" "$csv" "$COLL" | tee "$out/ratios.md"
if [ "$PLOT" != none ]; then
  # (the base with options of its own is named by them)
  /usr/bin/python3 "$plot_script" compare "$PLOT" "$csv" --collective "$COLL" \
    ${BASE_ARGS:+--base-label "collx with $BASE_ARGS"}
  echo "run.sh: the picture: $PLOT" >&2
fi
