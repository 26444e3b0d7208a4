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
#  5. --on-failure continue over tcp, ring allreduces: no rank is killed from outside; rank 2
#     kills itself as its allreduce of sequence number 50 or later posts its step 3
#     (allreduce.seq50.step3), mid-collective: ranks 0, 1 and 3 end with the same
#     "done size=3".
#  6. the same over shared memory (the shm algorithm's call is one step, 0): rank 3 stops
#     itself (SIGSTOP) there, and the others find it silent after COLLX_PEER_TIMEOUT (1 s)
#     and end with the same "done size=3".
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
  # (KILL= : no rank is killed from outside)
  for pid in $(pgrep -P "$launcher"); do
    if [ -n "${KILL-1}" ] && tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null |
      grep -qx "COLLX_RANK=${KILL-1}"; then
      kill -KILL "$pid"
    fi
  done
  # A rank that stopped itself resumes once the others are done (then it learns that it was
  # excluded), so that the job can end.
  (
    for ((i = 0; i < 1800; i++)); do
      [ "$(grep -c '\] done size=' "$out")" -ge "$count" ] && break
      sleep 0.05
    done
    pkill -CONT -P "$launcher"
  ) &
  local resumer=$!
  wait "$launcher"
  local code=$? problem=""
  kill "$resumer" 2>/dev/null
  wait "$resumer" 2>/dev/null
  [ "$code" = 0 ] || problem="collx-run exited $code"
  local action=${fault#*:}
  grep -q "COLLX_FAULT: ${action%%:*} at ${fault%%:*}" "$out" ||
    problem="$problem; the fault did not fire"
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
TRIAL_ENV="COLLX_TRANSPORT=tcp COLLX_ALLREDUCE_ALGO=ring" KILL='' trial step \
  "allreduce.seq50.step3:kill:2" 3 3 --on-failure continue -- "$WORKER" elastic 65536 5
TRIAL_ENV="COLLX_ALLREDUCE_ALGO=shm" KILL='' trial shm-step "allreduce.seq50.step0:stop:3" 3 3 \
  --on-failure continue -- "$WORKER" elastic 4096 5
exit $failed
