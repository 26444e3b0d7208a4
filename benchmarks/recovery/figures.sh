#!/usr/bin/env bash
# Recovery figures on this machine (docs/recovery.md): real jobs under collx-run, rank 1
# killed (SIGKILL) while every rank loops allreduces, over tcp and over shared memory
# (COLLX_TRANSPORT=auto on one host), at P = 4, 8, 16 (or the sizes given).
#
#   benchmarks/recovery/figures.sh BUILD_DIR [ROUNDS [P...]]   (defaults 3, 4 8 16)
#
# Two figures per cell, each the median over ROUNDS runs (min-max beside it), in ms:
#   shrink:  collx-test-worker shrink 262144 under --on-failure continue: each survivor's
#            time from the failed call's end to the end of a correct 1 MiB allreduce on the
#            shrunk context (agree, shrink, the first allreduce);
#   replace: collx-test-worker replace under --on-failure replace: each survivor's time from
#            the failed call's end until reform() returned with the replacement in rank 1's
#            place (the replacement's process start and join included), and the
#            replacement's own join (its init(), process start excluded).
# Prints a Markdown table, and the CPU it ran on. Knobs: TRANSPORTS="tcp auto", MODES="shrink
# replace", RAW=1 (instead of the table, one line per survivor: "P transport mode ms";
# benchmarks/compare/ulfm.sh takes those).
set -uo pipefail
BUILD=${1:?usage: figures.sh BUILD_DIR [ROUNDS [P...]]}
ROUNDS=${2:-3}
shift $(( $# >= 2 ? 2 : $# ))
SIZES=("$@")
[ ${#SIZES[@]} -eq 0 ] && SIZES=(4 8 16)
RUN="$BUILD/bin/collx-run"
WORKER="$BUILD/bin/collx-test-worker"
WORK=$(mktemp -d /tmp/collx-recovery-figures.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# The pid of the child of collx-run ($1) whose COLLX_RANK is $2.
rank_pid() {
  local pid
  for pid in $(pgrep -P "$1"); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "COLLX_RANK=$2"; then
      echo "$pid"
      return
    fi
  done
}

# One run: prints the survivors' figures (one per line), and "join N" lines for replace.
one() {  # P transport mode
  local P=$1 transport=$2 mode=$3 out="$WORK/run.out"
  local args=(--on-failure continue) work=(shrink 262144)
  if [ "$mode" = replace ]; then
    args=(--on-failure replace --max-replacements 1)
    work=(replace 65536 3)
  fi
  : >"$out"
  COLLX_TRANSPORT=$transport COLLX_TIMEOUT=30s "$RUN" -n "$P" "${args[@]}" --timeout 60s -t \
    -- "$WORKER" "${work[@]}" >"$out" 2>&1 &
  local launcher=$! i
  for ((i = 0; i < 600; i++)); do
    [ "$(grep -c '\] ready$' "$out")" -ge "$P" ] && break
    sleep 0.05
  done
  sleep 0.3
  kill -KILL "$(rank_pid "$launcher" 1)" 2>/dev/null
  wait "$launcher"
  if [ "$mode" = replace ]; then
    sed -n 's/^\[[0-9]*\] reformed .* in \([0-9]*\) ms$/\1/p' "$out"
    sed -n 's/^\[[0-9]*\] joined .* in \([0-9]*\) ms$/join \1/p' "$out"
  else
    sed -n 's/^\[[0-9]*\] shrunk .* recovered in \([0-9.]*\) ms$/\1/p' "$out"
  fi
}

# "median (min-max)" of the numbers on stdin.
summary() {
  sort -n | awk '{v[NR]=$1} END {if (NR == 0) {print "-"; exit}
    m = NR % 2 ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; printf "%g (%g-%g)", m, v[1], v[NR]}'
}

TRANSPORTS=${TRANSPORTS:-tcp auto}
MODES=${MODES:-shrink replace}
if [ "${RAW:-0}" = 1 ]; then
  for P in "${SIZES[@]}"; do
    for transport in $TRANSPORTS; do
      for ((r = 0; r < ROUNDS; r++)); do
        for mode in $MODES; do
          one "$P" "$transport" "$mode" | grep -v '^join' | sed "s/^/$P $transport $mode /"
        done
      done
    done
  done
  exit 0
fi
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs"
echo
echo "| P | transport | shrink: to a correct 1 MiB allreduce (ms) | replace: survivors' reform (ms) | replace: the newcomer's join (ms) |"
echo "|---|---|---|---|---|"
for P in "${SIZES[@]}"; do
  for transport in $TRANSPORTS; do
    shrink="$WORK/shrink" reform="$WORK/reform" joins="$WORK/joins"
    : >"$shrink"; : >"$reform"; : >"$joins"
    for ((r = 0; r < ROUNDS; r++)); do
      case " $MODES " in *" shrink "*) one "$P" "$transport" shrink >>"$shrink" ;; esac
      case " $MODES " in
        *" replace "*)
          one "$P" "$transport" replace >"$WORK/rep"
          grep -v '^join' "$WORK/rep" >>"$reform"
          sed -n 's/^join //p' "$WORK/rep" >>"$joins"
          ;;
      esac
    done
    name=$([ "$transport" = tcp ] && echo tcp || echo "shared memory")
    echo "| $P | $name | $(summary <"$shrink") | $(summary <"$reform") | $(summary <"$joins") |"
  done
done
