#!/usr/bin/env bash
# A rank killed inside the recovery itself (COLLX_FAULT), in real jobs under collx-run:
#  1. --on-failure continue, collx-test-worker elastic: rank 1 is killed; while the
#     survivors shrink, rank 2 kills itself once the old generation ended on it
#     (regroup.reformed): the attempt fails on every survivor alike, the next one goes on
#     without both, and ranks 0 and 3 end with the same "done size=2".
#  2. --on-failure replace, collx-test-worker replace: rank 1 is killed; while the survivors
#     re-form, rank 2 kills itself right after its entry in the agreement (agree.entered):
#     the attempt fails, replacements come for both, and all 4 ranks end with the same
#     "done size=4".
#  3. --on-failure replace: rank 1 is killed; rank 0 kills itself once the members and rank
#     1's replacement published their addresses (regroup.met), before that newcomer dials
#     it: the newcomer
#     learns at once that rank 0 is gone (its dial is refused; not at its connect deadline,
#     30 s, past the survivors' wait for replacements, 10 s), joins the next attempt with
#     rank 0's replacement, and all 4 ranks end with the same "done size=4".
#  4. --on-failure continue, every agreement through a coordinator
#     (COLLX_AGREE_COORDINATOR_FROM=2): rank 1 is killed; rank 0, the coordinator, kills
#     itself right after its entry in the agreement: rank 2 takes its part once it sees rank
#     0 lost, the attempt fails (rank 0 is gone), the next goes on without both, and ranks 2
#     and 3 end with the same "done size=2".
#   fault_inside_recovery.sh BUILD_DIR
set -uo pipefail
BUILD=${1:?usage: fault_inside_recovery.sh BUILD_DIR}
RUN="$BUILD/bin/collx-run"
WORKER="$BUILD/bin/collx-test-worker"
WORK=$(mktemp -d /tmp/collx-fault-inside.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
failed=0

trial() {  # name fault done-size done-count collx-run-args... -- worker-args...
  local name=$1 fault=$2 size=$3 count=$4 out="$WORK/$1.out"
  shift 4
  # shellcheck disable=SC2086 # (TRIAL_ENV: words of NAME=VALUE)
  env ${TRIAL_ENV:-} COLLX_FAULT="$fault" COLLX_PEER_TIMEOUT=1s COLLX_TIMEOUT=30s \
    "$RUN" -n 4 --timeout 90s -t "$@" \
    >"$out" 2>&1 &
  local launcher=$! i pid
  for ((i = 0; i < 400; i++)); do
    [ "$(grep -c '\] ready$' "$out")" -ge 4 ] && break
    sleep 0.05
  done
  for pid in $(pgrep -P "$launcher"); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "COLLX_RANK=1"; then
      kill -KILL "$pid"
    fi
  done
  wait "$launcher"
  local code=$? problem=""
  [ "$code" = 0 ] || problem="collx-run exited $code"
  grep -q "COLLX_FAULT: kill at ${fault%%:*}" "$out" || problem="$problem; the fault did not fire"
  local finals
  finals=$(grep -oE '^\[[0-9]+\] done size=[0-9]+ generation=[0-9]+' "$out" | sed 's/^\[[0-9]*\] //' | sort | uniq -c)
  echo "$finals" | grep -qE "^ *$count done size=$size generation=[0-9]+$" ||
    problem="$problem; expected $count ranks done with size $size, got: $finals"
  if [ -n "$problem" ]; then
    echo "$name: FAILED: $problem"
    tail -n 40 "$out"
    failed=1
  else
    echo "$name: ok ($(echo $finals))"
  fi
}

trial shrink "regroup.reformed:kill:2" 2 2 --on-failure continue -- "$WORKER" elastic 4096 5
trial replace "agree.entered:kill:2" 4 4 --on-failure replace --max-replacements 6 -- \
  "$WORKER" replace 4096 5
trial replace-dialed "regroup.met:kill:0" 4 4 --on-failure replace --max-replacements 6 -- \
  "$WORKER" replace 4096 5
TRIAL_ENV=COLLX_AGREE_COORDINATOR_FROM=2 trial coordinator "agree.entered:kill:0" 2 2 \
  --on-failure continue -- "$WORKER" elastic 4096 5
exit $failed
