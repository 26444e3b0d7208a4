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
#   stop:    (only when MODES names it) rank 1 stops itself (SIGSTOP, COLLX_FAULT at its
#            100th allreduce, its first transfer) instead: each survivor's time from the stop (the
#            COLLX_FAULT line's clock) until its call failed naming a silent rank (after
#            COLLX_PEER_TIMEOUT, default 5 s; PEER_TIMEOUT=1s sets it), and until its
#            correct 1 MiB allreduce on the shrunk context.
# Prints a Markdown table, and the CPU it ran on. Knobs: TRANSPORTS="tcp auto", MODES="shrink
# replace" (and stop), RAW=1 (instead of the table, one line per survivor: "P transport mode
# ms"; benchmarks/compare/ulfm.sh takes those; stop: "P transport stop detected-ms
# recovered-ms").
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
  local fault=""
  [ "$mode" = stop ] && fault=allreduce.seq100:stop:1
  : >"$out"
  COLLX_FAULT=$fault COLLX_PEER_TIMEOUT=${PEER_TIMEOUT:-5s} COLLX_TRANSPORT=$transport \
    COLLX_TIMEOUT=30s "$RUN" -n "$P" "${args[@]}" --timeout 60s -t \
    -- "$WORKER" "${work[@]}" >"$out" 2>&1 &
  local launcher=$! i
  for ((i = 0; i < 600; i++)); do
    [ "$(grep -c '\] ready$' "$out")" -ge "$P" ] && break
    sleep 0.05
  done
  if [ "$mode" = stop ]; then
    # The stopped rank is killed once every survivor is done (it would wait out its own
    # deadline otherwise).
    for ((i = 0; i < 1200; i++)); do
      [ "$(grep -c '\] shrunk ' "$out")" -ge $((P - 1)) ] && break
      sleep 0.05
    done
  else
    sleep 0.3
  fi
  kill -KILL "$(rank_pid "$launcher" 1)" 2>/dev/null
  wait "$launcher"
  if [ "$mode" = stop ]; then
    local stamp stopped
    stamp=$(sed -n 's/^\[1\] \[\([0-9-]* [0-9:.]*\)\].*COLLX_FAULT: stop at.*/\1/p' "$out" | head -1)
    [ -n "$stamp" ] || return 0
    stopped=$(date -d "$stamp" +%s.%N)
    # "[r] failed at T: ..." then "[r] shrunk ... recovered in N ms", per survivor
    local r at rec
    for r in $(sed -n 's/^\[\([0-9]*\)\] failed at .*/\1/p' "$out"); do
      at=$(sed -n "s/^\[$r\] failed at \([0-9.]*\):.*/\1/p" "$out" | head -1)
      rec=$(sed -n "s/^\[$r\] shrunk .* recovered in \([0-9.]*\) ms$/\1/p" "$out" | head -1)
      [ -n "$rec" ] || continue
      awk -v a="$at" -v s="$stopped" -v n="$rec" 'BEGIN {printf "%.0f %.0f\n", (a - s) * 1e3, (a - s) * 1e3 + n}'
    done
    return 0
  fi
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
stops=0
case " $MODES " in *" stop "*) stops=1 ;; esac
head="| P | transport | shrink: to a correct 1 MiB allreduce (ms) | replace: survivors' reform (ms) | replace: the newcomer's join (ms) |"
rule="|---|---|---|---|---|"
if [ $stops = 1 ]; then
  head="$head stop: detected (ms) | stop: to a correct 1 MiB allreduce (ms) |"
  rule="$rule---|---|"
fi
echo "$head"
echo "$rule"
for P in "${SIZES[@]}"; do
  for transport in $TRANSPORTS; do
    shrink="$WORK/shrink" reform="$WORK/reform" joins="$WORK/joins" stop="$WORK/stop"
    : >"$shrink"; : >"$reform"; : >"$joins"; : >"$stop"
    for ((r = 0; r < ROUNDS; r++)); do
      case " $MODES " in *" shrink "*) one "$P" "$transport" shrink >>"$shrink" ;; esac
      case " $MODES " in
        *" replace "*)
          one "$P" "$transport" replace >"$WORK/rep"
          grep -v '^join' "$WORK/rep" >>"$reform"
          sed -n 's/^join //p' "$WORK/rep" >>"$joins"
          ;;
      esac
      [ $stops = 1 ] && one "$P" "$transport" stop >>"$stop"
    done
    name=$([ "$transport" = tcp ] && echo tcp || echo "shared memory")
    row="| $P | $name | $(summary <"$shrink") | $(summary <"$reform") | $(summary <"$joins") |"
    if [ $stops = 1 ]; then
      row="$row $(awk '{print $1}' "$stop" | summary) | $(awk '{print $2}' "$stop" | summary) |"
    fi
    echo "$row"
  done
done
