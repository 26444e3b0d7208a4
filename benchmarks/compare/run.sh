#!/usr/bin/env bash
# Side by side, in one run: collx-bench against the peers of ../shared/peers (Gloo, Open MPI
# over TCP, torch.distributed's gloo backend, and MPICH 4.0 over UCX, built here from the
# same mpi_bench.c with mpicc.mpich) and this machine's loopback TCP limit
# (tcp_exchange), for one collective at P=2 and P=4. Writes CSVs, a ratio table and a
# picture (benchmarks/plot/collx_plot.py: busbw and time against size, one line per
# implementation, a row of panels per P). On a terminal it shows its progress on stderr (one
# line, rewritten; nothing in a pipe or a log).
#
#   benchmarks/compare/run.sh [BUILD_DIR] [OUT_DIR]
# Knobs: PS="2 4", SIZES=..., COLL=allreduce, ONLY="collx gloo mpi mpich torch limits" (mpich:
#        only where ranks fit the cores: its ranks poll without ever yielding, so with more
#        ranks than cores its figures mean nothing; run.sh skips it there and says so),
#        MIN_TIME=0.3, REPEAT=1 (rounds; every implementation runs once per round and the
#        table takes each one's best round: the machine is noisy), PER_SIZE=0 (1: every
#        implementation runs one size at a time, back to back, so that each round's figures
#        of a size come from the same few seconds: the table then also gives the median
#        over rounds of each round's ratio), PEERS=path/to/shared/peers,
#        TRANSPORT=tcp (collx's COLLX_TRANSPORT: tcp against the peers' TCP; shm or auto take
#        shared memory between local ranks, and Open MPI then runs on its shared-memory default),
#        BASE=path/to/another/build (its collx-bench runs right after this build's, in the
#        same rounds, as the peer "base": a change against the tree before it; ONLY must
#        include "base", which it does by default when BASE is set), BASE_ENV="NAME=VALUE
#        ..." (variables for the base's runs only: BASE=build BASE_ENV=COLLX_TRACE_BUFFER=0
#        prices a feature against itself turned off in one tree), TIME_STAT=middle
#        (collx-bench --time-stat for collx and base: the mean of each rank's middle half of
#        calls instead of the median the peers take, finer than a 10 ns clock tick; for
#        collx against collx),
#        PLOT=OUT_DIR/compare.png (the picture, .png or .svg; PLOT=none draws none; needs
#        python3-matplotlib)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
out=${2:-$build/compare}
mkdir -p "$out"
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
TIME_STAT=${TIME_STAT:-}
PER_SIZE=${PER_SIZE:-0}
PLOT=${PLOT:-$out/compare.png}
plot_script=$here/../plot/collx_plot.py
# The picture needs matplotlib: found out now rather than after every round has run.
if [ "$PLOT" != none ] && ! /usr/bin/python3 "$plot_script" --check; then
  echo "run.sh: PLOT needs python3-matplotlib (or PLOT=none)" >&2
  exit 2
fi
want() { [[ " $ONLY " == *" $1 "* ]]; }

# The peers build in a scratch copy (the shared folder is read-only).
work=$out/peers
if { want gloo || want mpi || want mpich || want torch || want limits; } &&
   [ ! -x "$work/bin/gloo_bench" ]; then
  rm -rf "$work" && cp -r "$PEERS" "$work" && rm -rf "$work/results"
  make -s -C "$work" all >/dev/null
fi
# MPICH (Debian's mpich: 4.0 over UCX) runs the same mpi_bench.c, built with its own mpicc.
if want mpich && [ ! -x "$work/bin/mpich_bench" ]; then
  if command -v mpicc.mpich >/dev/null; then
    mpicc.mpich -O3 -Wall -o "$work/bin/mpich_bench" "$work/mpi_bench.c" -lm
  else
    echo "run.sh: mpich is not installed (apt-get install mpich): skipping it" >&2
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
  for impl in collx base gloo mpi mpich torch; do
    want "$impl" || continue
    [ "$impl" = base ] && [ -z "$BASE" ] && continue
    [ "$impl" = mpich ] && { [ ! -x "$work/bin/mpich_bench" ] || [ "$P" -gt "$cpus" ]; } && continue
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
: > "$out/limits.txt"
for round in $(seq 1 "$REPEAT"); do
for P in $PS; do
  if want limits && [ "$P" = 2 ]; then
    clear_progress
    if [ "$TRANSPORT" = tcp ]; then
      "$work/bin/tcp_exchange" $((32 << 20)) 9 0 | tee -a "$out/limits.txt"
      "$work/bin/tcp_exchange" $((32 << 20)) 9 1 | tee -a "$out/limits.txt"
    else  # shared memory's limits: memcpy bandwidth, a flag's round trip between 2 cores,
      # and how fast the 2 cores hand data to each other this round (collx-handoff-probe)
      "$work/bin/memcpy_bw" 64 20 | tee -a "$out/limits.txt"
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
      [ -n "$TIME_STAT" ] && stat=(--time-stat "$TIME_STAT")
      # (its stderr to a file: collx-bench's own progress line would fight this one)
      progress "round $round, P=$P, $impl, sizes $chunk"
      if ! env "${extra[@]}" COLLX_TRANSPORT=$TRANSPORT "$dir/bin/collx-run" -n "$P" -- \
        "$dir/bin/collx-bench" -c "$COLL" --sizes "$sizes" --min-time "$MIN_TIME" $inplace \
        "${stat[@]}" --csv "$out/${impl}_p$P.csv" > "$out/${impl}_p$P.txt" 2> "$out/${impl}_p$P.err"; then
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
/usr/bin/python3 "$here/ratios.py" "$csv" "$COLL" | tee "$out/ratios.md"
if [ "$PLOT" != none ]; then
  /usr/bin/python3 "$plot_script" compare "$PLOT" "$csv" --collective "$COLL"
  echo "run.sh: the picture: $PLOT" >&2
fi
