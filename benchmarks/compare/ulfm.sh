#!/usr/bin/env bash
# collx's recovery against Open MPI 5's ULFM, in one run on this machine: rank 1 killed
# (SIGKILL) mid-loop of 1 MiB allreduces; each survivor's time from its failed call's end to
# a correct 1 MiB allreduce on the shrunk group. ULFM: ulfm_shrink.c (MPIX_Comm_revoke,
# MPIX_Comm_shrink, the first MPI_Allreduce) under `mpirun --with-ft ulfm`, built and run in
# the Debian 13 root (tests/debian13/root.sh make: Open MPI 5.0.7), ob1 over tcp (btl
# tcp,self) or shared memory (btl sm,self); collx: benchmarks/recovery/figures.sh's shrink
# (collx-run, COLLX_TRANSPORT tcp or auto). Rounds interleaved (ULFM, then collx, per round).
#
#   benchmarks/compare/ulfm.sh BUILD_DIR [ROUNDS [P...]]   (defaults 5, 4 8)
#
# As root (the root's chroot). Prints a Markdown table: medians (min-max) over every survivor
# of every round, in ms, and the ratio ULFM / collx (above 1: collx recovers faster).
# MODE=stop: rank 1 stops (SIGSTOP) instead of dying; each survivor's time from the stop
# until its call fails (detected) and until its correct allreduce on the shrunk group.
# ULFM notices a stopped rank only with its heartbeat detector (off by default: its ranks
# then wait forever), here on with mpi_ft_detector_timeout = PEER_TIMEOUT (default 10, its
# own default; period a third of it, less a little, as it requires); collx with
# COLLX_PEER_TIMEOUT = COLLX_PEER (seconds; default PEER_TIMEOUT; collx's own default is 5).
set -uo pipefail
BUILD=$(cd "${1:?usage: ulfm.sh BUILD_DIR [ROUNDS [P...]]}" && pwd)
ROUNDS=${2:-5}
shift $(( $# >= 2 ? 2 : $# ))
SIZES=("$@")
[ ${#SIZES[@]} -eq 0 ] && SIZES=(4 8)
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT13="$HERE/../../tests/debian13/root.sh"
WORK=$(mktemp -d /tmp/collx-ulfm.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
in13() { COLLX_DEBIAN13_BIND="$WORK" "$ROOT13" run "$@"; }

in13 bash -c "mpicc -O2 -o '$WORK/ulfm_shrink' /src/benchmarks/compare/ulfm_shrink.c" || {
  echo "ulfm.sh: cannot build ulfm_shrink.c in the Debian 13 root (tests/debian13/root.sh make)" >&2
  exit 77
}
version=$(in13 bash -c "ompi_info --version 2>/dev/null | head -1")

MODE=${MODE:-kill}
PEER_TIMEOUT=${PEER_TIMEOUT:-10}
COLLX_PEER=${COLLX_PEER:-$PEER_TIMEOUT}
ulfm() {  # P btl
  if [ "$MODE" = stop ]; then
    local period
    period=$(awk -v t="$PEER_TIMEOUT" 'BEGIN {printf "%g", t / 3.3}')
    in13 bash -c "cd '$WORK' && timeout 120 mpirun --allow-run-as-root --oversubscribe \
      --with-ft ulfm --mca mpi_ft_detector true --mca mpi_ft_detector_timeout $PEER_TIMEOUT \
      --mca mpi_ft_detector_period $period -np $1 --mca btl $2,self \
      --mca btl_tcp_if_include lo ./ulfm_shrink stop 2>/dev/null" >"$WORK/stop.out"
    # (A rank left stopped, had the run timed out: the pids rank 0 wrote, if still ours.)
    local p
    for p in $(cat "$WORK/ulfm_shrink.pids" 2>/dev/null); do
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = ulfm_shrink ] && kill -KILL "$p"
    done
    rm -f "$WORK/ulfm_shrink.pids"
    # Per survivor: detected, and recovered (both from the stop), in ms.
    awk '/^ulfm stopped at/ {s = $4} /^ulfm rank .* detected at/ {d[$3] = $6}
      /^ulfm rank .* recovered in/ {r[$3] = $8}
      END {for (k in d) if (s != "") printf "%.0f %.0f\n", (d[k] - s) * 1e3, (d[k] - s) * 1e3 + r[k]}' \
      "$WORK/stop.out"
    return
  fi
  in13 bash -c "cd '$WORK' && timeout 120 mpirun --allow-run-as-root --oversubscribe \
    --with-ft ulfm -np $1 --mca btl $2,self --mca btl_tcp_if_include lo ./ulfm_shrink 2>/dev/null" |
    sed -n 's/^ulfm rank .* recovered in \([0-9.]*\) ms$/\1/p'
}
summary() {
  sort -n | awk '{v[NR]=$1} END {if (NR == 0) {print "-"; exit}
    m = NR % 2 ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; printf "%g (%g-%g) %g", m, v[1], v[NR], m}'
}

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs; ${version:-Open MPI 5}"
echo
if [ "$MODE" = stop ]; then
  echo "A rank stopped (SIGSTOP); ULFM's heartbeat detector at $PEER_TIMEOUT s, collx's liveness at $COLLX_PEER s."
  echo "Detected, then (after the slash) a correct allreduce on the shrunk group, from the stop:"
  echo
fi
echo "| P | transport | ULFM (ms) | collx (ms) | ULFM / collx |"
echo "|---|---|---|---|---|"
for P in "${SIZES[@]}"; do
  for pair in "tcp tcp" "sm auto"; do
    read -r btl transport <<<"$pair"
    : >"$WORK/u"; : >"$WORK/c"; : >"$WORK/ud"; : >"$WORK/cd"
    for ((r = 0; r < ROUNDS; r++)); do
      if [ "$MODE" = stop ]; then
        ulfm "$P" "$btl" >"$WORK/one"
        awk '{print $1}' "$WORK/one" >>"$WORK/ud"
        awk '{print $2}' "$WORK/one" >>"$WORK/u"
        PEER_TIMEOUT=${COLLX_PEER}s RAW=1 MODES=stop TRANSPORTS=$transport \
          "$HERE/../recovery/figures.sh" "$BUILD" 1 "$P" >"$WORK/one"
        awk '{print $4}' "$WORK/one" >>"$WORK/cd"
        awk '{print $5}' "$WORK/one" >>"$WORK/c"
        continue
      fi
      ulfm "$P" "$btl" >>"$WORK/u"
      RAW=1 MODES=shrink TRANSPORTS=$transport "$HERE/../recovery/figures.sh" "$BUILD" 1 "$P" |
        awk '{print $4}' >>"$WORK/c"
    done
    read -r um ur umed <<<"$(summary <"$WORK/u")"
    read -r cm cr cmed <<<"$(summary <"$WORK/c")"
    ratio=$(awk -v a="${umed:-0}" -v b="${cmed:-0}" 'BEGIN {if (b > 0 && a > 0) printf "%.2f", a / b; else print "-"}')
    name=$([ "$btl" = tcp ] && echo tcp || echo "shared memory")
    if [ "$MODE" = stop ]; then
      read -r udm udr _ <<<"$(summary <"$WORK/ud")"
      read -r cdm cdr _ <<<"$(summary <"$WORK/cd")"
      echo "| $P | $name | $udm $udr / $um $ur | $cdm $cdr / $cm $cr | $ratio |"
      continue
    fi
    echo "| $P | $name | $um $ur | $cm $cr | $ratio |"
  done
done
