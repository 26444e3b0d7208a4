#!/usr/bin/env bash
# Recovery trials: random faults injected into real jobs under collx-run, which the survivors
# must go through by shrinking (collx-test-worker elastic: checked allreduces, a shrink after
# every failure). Each trial picks a world size, a transport and one to three faults (SIGKILL
# mostly; SIGSTOP then SIGCONT, after which that rank must learn it was excluded), each at a
# random moment, some while the survivors are still recovering from the one before. A trial
# passes when collx-run exits 0 within its bound, every rank that was not faulted ends with
# the same "done size=S generation=G" (S: the ranks left), every killed rank died of its
# signal, every stopped rank exited with ExcludedError (17) or went on as a survivor when the
# others had not failed it yet, and nothing of the job is left (processes, /dev/shm).
#
#   recovery_trials.sh BUILD_DIR [TRIALS [MAX_P [SEED [MODE]]]]   (defaults 20, 8, random, shrink)
#
# MODE replace (or TRIALS_MODE=replace): the same faults under collx-run --on-failure
# replace, whose replacements join the survivors (collx-test-worker replace: reform() after
# every failure, waiting up to 10 s for them): a trial then passes when every rank, a
# replacement where it was faulted, ends with the same "done size=P generation=G".
#
# TRIALS_TRANSPORTS (default "tcp shm"): the transports a trial picks from; "ibverbs" runs
# over the userspace verbs device (BUILD_DIR/lib/libcollx_verbs_emu.so; shrink mode only,
# since newcomers join over tcp).
#
# Prints one line per trial and a summary; exits 1 on the first trial that fails, showing
# its output. The test command runs a few trials (ctest: recovery_trials); run it with more
# for the full set.
set -uo pipefail

BUILD=${1:?usage: recovery_trials.sh BUILD_DIR [TRIALS [MAX_P [SEED [MODE]]]]}
TRIALS=${2:-20}
MAX_P=${3:-8}
SEED=${4:-$RANDOM}
RANDOM=$SEED
MODE=${5:-${TRIALS_MODE:-shrink}}
case "$MODE" in
  shrink) worker_mode=elastic ;;
  replace) worker_mode=replace ;;
  *) echo "recovery_trials.sh: TRIALS_MODE is '$MODE': shrink or replace" >&2; exit 2 ;;
esac
RUN="$BUILD/bin/collx-run"
WORKER="$BUILD/bin/collx-test-worker"
WORK=$(mktemp -d /tmp/collx-trials.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

echo "recovery trials ($MODE): $TRIALS, P up to $MAX_P, seed $SEED"
faults_total=0
kills_total=0
stops_total=0
started=$SECONDS

# The rank (COLLX_RANK in its environment) of each child process of collx-run.
rank_pids() {  # launcher-pid
  local pid
  for pid in $(pgrep -P "$1"); do
    local rank
    rank=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^COLLX_RANK=//p')
    [ -n "$rank" ] && echo "$rank $pid"
  done
}

for ((trial = 1; trial <= TRIALS; trial++)); do
  P=$((3 + RANDOM % (MAX_P - 2)))
  read -r -a choices <<<"${TRIALS_TRANSPORTS:-tcp shm}"
  transport=${choices[$((RANDOM % ${#choices[@]}))]}
  # (A newcomer joins over tcp: with replacements, the ranks within the host keep shared
  # memory among themselves, and tcp for the newcomers.)
  [ "$MODE" = replace ] && [ "$transport" = shm ] && transport=auto
  nfaults=$((1 + RANDOM % 3))
  ((nfaults > P - 2)) && nfaults=$((P - 2))
  out="$WORK/trial$trial.out"
  shm_before=$(ls /dev/shm 2>/dev/null | grep -c '^collx' || true)
  : >"$out"
  if [ "$MODE" = replace ]; then
    # (A replacement that came to an attempt that failed exits, and is replaced again.)
    policy=(--on-failure replace --max-replacements $((3 * nfaults)))
  else
    policy=(--on-failure continue)
  fi
  COLLX_IBVERBS_LIBRARY="$BUILD/lib/libcollx_verbs_emu.so" \
    COLLX_TRANSPORT=$transport COLLX_PEER_TIMEOUT=1s COLLX_TIMEOUT=30s \
    "$RUN" -n "$P" "${policy[@]}" --timeout 90s -t -- \
    "$WORKER" $worker_mode 4096 6 >"$out" 2>&1 &
  launcher=$!
  # Every rank made its first call.
  for ((i = 0; i < 400; i++)); do
    [ "$(grep -c '\] ready$' "$out")" -ge "$P" ] && break
    sleep 0.05
  done
  declare -A pid_of=()
  while read -r rank pid; do pid_of[$rank]=$pid; done < <(rank_pids "$launcher")
  # The faults: distinct ranks, each at a random moment (0-1.2 s apart).
  ranks=($(seq 0 $((P - 1)) | shuf --random-source=<(yes "$SEED$trial")))
  declare -A fault=()
  for ((f = 0; f < nfaults; f++)); do
    r=${ranks[$f]}
    sleep "0.$((RANDOM % 12))"
    if [ $((RANDOM % 5)) = 0 ]; then
      fault[$r]=stop
      kill -STOP "${pid_of[$r]}" 2>/dev/null
      ((stops_total++))
    else
      fault[$r]=kill
      kill -KILL "${pid_of[$r]}" 2>/dev/null
      ((kills_total++))
    fi
    ((faults_total++))
  done
  # Stopped ranks resume after the others failed them (the peer timeout is 1 s).
  sleep 2.5
  for r in "${!fault[@]}"; do
    [ "${fault[$r]}" = stop ] && kill -CONT "${pid_of[$r]}" 2>/dev/null
  done
  wait "$launcher"
  code=$?
  problem=""
  [ "$code" = 0 ] || problem="collx-run exited $code"
  # The survivors agree on the size and generation they ended in.
  finals=$(grep -oE '^\[[0-9]+\] done size=[0-9]+ generation=[0-9]+' "$out" | sed 's/^\[[0-9]*\] //' | sort -u)
  done_ranks=$(grep -cE '^\[[0-9]+\] done ' "$out")
  excluded=$(grep -c 'ExcludedError' "$out")
  expected_done=$((P - nfaults))
  [ "$MODE" = replace ] && expected_done=$P
  [ "$(echo "$finals" | grep -c .)" = 1 ] || problem="$problem; the survivors disagree: $finals"
  for r in $(seq 0 $((P - 1))); do
    if [ -z "${fault[$r]:-}" ]; then
      grep -qE "^\[$r\] done " "$out" || problem="$problem; rank $r (not faulted) did not finish"
    elif [ "${fault[$r]}" = kill ]; then
      grep -qE "^collx-run: rank $r \(pid [0-9]+\) was killed by signal 9" "$out" ||
        problem="$problem; rank $r was not reported killed"
    else  # stopped: excluded (ExcludedError, exit code 17), or still a survivor
      grep -qE "^collx-run: rank $r \(pid [0-9]+\) exited with code 17|^\[$r\] done " "$out" ||
        problem="$problem; rank $r, stopped and resumed, was neither excluded nor a survivor"
    fi
  done
  size=$(echo "$finals" | sed -n 's/^done size=\([0-9]*\) .*/\1/p')
  # A stopped rank is excluded, unless the others had not yet failed it when it resumed.
  if [ -n "$size" ] && [ "$size" -lt "$expected_done" ]; then
    problem="$problem; ended with $size ranks, fewer than the $expected_done not faulted"
  fi
  if [ "$MODE" = replace ] && [ "$done_ranks" != "$P" ]; then
    problem="$problem; $done_ranks ranks finished, not $P"
  fi
  if pgrep -f "$WORKER $worker_mode 4096 6\$" >/dev/null; then problem="$problem; ranks outlived the job"; fi
  shm_after=$(ls /dev/shm 2>/dev/null | grep -c '^collx' || true)
  [ "$shm_after" -le "$shm_before" ] || problem="$problem; /dev/shm segments left"
  faults_desc=""
  for r in "${!fault[@]}"; do faults_desc="$faults_desc ${fault[$r]}:$r"; done
  printf 'trial %3d: P=%d %s faults:%s -> %s (%d excluded)%s\n' "$trial" "$P" "$transport" \
    "$faults_desc" "${finals:-none}" "$excluded" "${problem:+  FAILED: $problem}"
  if [ -n "$problem" ]; then
    echo "---- trial $trial output (seed $SEED) ----"
    tail -n 60 "$out"
    exit 1
  fi
  unset pid_of fault
done
echo "recovery trials: $TRIALS passed ($faults_total faults: $kills_total kills, $stops_total" \
  "stops) in $((SECONDS - started)) s, seed $SEED"
