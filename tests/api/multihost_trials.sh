#!/usr/bin/env bash
# Recovery trials across hosts: HOSTS network-namespace hosts (tests/util/netns_hosts.sh),
# RANKS ranks on each (shared memory within a host, tcp between), one collx-run per host
# (--on-failure continue; node 0's store on host 0), every rank looping checked allreduces
# and shrinking after every failure (collx-test-worker elastic). Each trial injects one to
# three faults at random moments, some while the survivors still recover from the one
# before: SIGKILL of a rank, SIGSTOP of a rank (SIGCONT 2.5 s later), or a host's link cut
# at the bridge (no FIN, no RST; up again 2.5 s later). Host 0, which holds the store (the
# arbiter), is never cut.
#
# A trial passes when every host's collx-run ended within its bound; every rank that was
# not faulted ends with the same "done size=S generation=G", S no less than the ranks not
# faulted; a killed rank died of its signal; a stopped rank, and every rank of a cut host,
# exited with ExcludedError (17) or ended as a survivor (the others had not failed it yet);
# nothing is left (the job's processes, any host's /dev/shm). The hosts go at the end, and
# nothing of them may be left either.
#
#   multihost_trials.sh BUILD_DIR [TRIALS [SEED]]   (defaults 10, random; root)
#   HOSTS=4 RANKS=2 (per host)
#
# FIGURE=N instead of trials: N rounds of a recovery figure across the hosts: while every
# rank loops 1 MiB allreduces (collx-test-worker shrink), FAULT=kill (default) kills rank 1
# (SIGKILL), FAULT=stop stops it (SIGSTOP), FAULT=cut cuts the last host's link; each
# survivor's time to the end of a correct 1 MiB allreduce on the shrunk context (from its
# failed call's end for a kill, from the fault for a stop or a cut: that includes the
# detection, after COLLX_PEER_TIMEOUT, PEER_TIMEOUT=5s by default), one "recovered N ms"
# line per survivor, then their median (min-max).
#
# CUT_INSIDE=POINT instead: each trial kills rank 1 and lets the job's last rank cut
# its host's link itself at POINT of the recovery that follows (COLLX_FAULT=POINT:cut=eth0,
# e.g. agree.entered: after its entry is in the store; regroup.reformed), then checks the
# trial as any other (the survivors agree, the cut host's ranks are excluded).
#
# Exit codes: 0 passed, 1 failed, 77 skipped (not root, no namespaces, the subnet in use).
set -uo pipefail
# shellcheck source=../util/netns_hosts.sh
. "$(dirname "$0")/../util/netns_hosts.sh"

BUILD=${1:?usage: multihost_trials.sh BUILD_DIR [TRIALS [SEED]]}
TRIALS=${2:-10}
SEED=${3:-$RANDOM}
RANDOM=$SEED
HOSTS=${HOSTS:-4}
RANKS=${RANKS:-2}
P=$((HOSTS * RANKS))
RUN="$BUILD/bin/collx-run"
WORKER="$BUILD/bin/collx-test-worker"
ID=$$
PORT=$((20000 + ID % 20000))
WORK=$(mktemp -d "/tmp/collx-mh-trials-$ID.XXXXXX")
declare -a PIDS=()
export ENV_EXTRA=""

say() { echo "multihost_trials: $*"; }
[ -x "$RUN" ] && [ -x "$WORKER" ] || { say "FAILED: no collx-run or collx-test-worker in $BUILD/bin"; exit 1; }
hosts_init "$ID" "$HOSTS"
if why=$(hosts_unusable); then
  say "SKIPPED: $why"
  exit 77
fi
# Every process a job started here carries MARK in its environment (through ENV_EXTRA).
MARK="MH_TRIALS_MARK=$ID"
marked() {
  local env
  for env in /proc/[0-9]*/environ; do
    { tr '\0' '\n' <"$env"; } 2>/dev/null | grep -qx "$MARK" && { env=${env#/proc/}; echo "${env%/environ}"; }
  done
}
cleanup() {
  local pid
  for pid in $(marked); do kill -KILL "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  PIDS=()
  hosts_remove
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
why=$(hosts_create)
case $? in
  0) ;;
  2) say "SKIPPED: $why"; exit 77 ;;
  *) say "FAILED: $why"; exit 1 ;;
esac
SECRET=$WORK/secret
(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$SECRET")

# "rank pid" of every process of job $1 that is a rank (COLLX_RANK in its environment).
job_ranks() {
  local env pid vars
  for env in /proc/[0-9]*/environ; do
    vars=$({ tr '\0' '\n' <"$env"; } 2>/dev/null) || continue
    grep -qx "COLLX_JOB_ID=$1" <<<"$vars" || continue
    pid=${env#/proc/}
    pid=${pid%/environ}
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$WORKER")" ] || continue
    echo "$(sed -n 's/^COLLX_RANK=//p' <<<"$vars") $pid"
  done
}

# Starts job $1 (worker arguments after it) on every host; its outputs in $WORK/$1.<host>.
start_job() {  # JOB WORKER-ARGS...
  local job=$1 i
  shift
  PIDS=()
  for ((i = 0; i < HOSTS; i++)); do
    HOST_RUN_TIMEOUT=100 host_run "$i" "$WORK/$job.$i" "$WORK/$job.shm.$i" \
      "$RUN" -n "$RANKS" --nnodes "$HOSTS" --node-rank "$i" --master-addr "$(host_addr 0)" \
      --master-port $((PORT + ${job##*-})) --job-id "$job" --timeout 60s \
      --secret-file "$SECRET" --on-failure continue -t -- "$WORKER" "$@" &
    PIDS+=($!)
  done
}

# Waits for every host's collx-run; "host code" lines in $WORK/$1.codes.
wait_job() {  # JOB
  local i
  : >"$WORK/$1.codes"
  for ((i = 0; i < HOSTS; i++)); do
    wait "${PIDS[$i]}"
    echo "$i $?" >>"$WORK/$1.codes"
  done
  PIDS=()
}

# Every rank made its first call (at most 20 s).
await_ready() {  # JOB
  local i
  for ((i = 0; i < 400; i++)); do
    [ "$(cat "$WORK/$1".[0-9]* 2>/dev/null | grep -c '\] ready$')" -ge "$P" ] && return 0
    sleep 0.05
  done
  return 1
}

if [ -n "${FIGURE:-}" ]; then
  FAULT=${FAULT:-kill}
  lost=1
  [ "$FAULT" = cut ] && lost=$RANKS
  : >"$WORK/figure"
  for ((round = 1; round <= FIGURE; round++)); do
    job="mtf$ID-$round"
    ENV_EXTRA="$MARK COLLX_TIMEOUT=30s COLLX_PEER_TIMEOUT=${PEER_TIMEOUT:-5s}"
    start_job "$job" shrink 262144
    await_ready "$job" || { say "FAILED: round $round: not every rank got ready"; exit 1; }
    sleep 0.3
    pid=$(job_ranks "$job" | awk '$1 == 1 {print $2}')
    at=$(date +%s.%N)
    case "$FAULT" in
      kill) kill -KILL "$pid" ;;
      stop) kill -STOP "$pid" ;;
      cut) host_link $((HOSTS - 1)) down ;;
      *) say "FAILED: FAULT is '$FAULT': kill, stop or cut"; exit 1 ;;
    esac
    if [ "$FAULT" != kill ]; then
      # The faulted rank (host) back once every survivor recovered: a stopped rank killed,
      # a cut host's link up (its ranks then learn that they were excluded).
      for ((i = 0; i < 1200; i++)); do
        [ "$(cat "$WORK/$job".[0-9]* | grep -c '\] shrunk ')" -ge $((P - lost)) ] && break
        sleep 0.05
      done
      [ "$FAULT" = stop ] && kill -KILL "$pid"
      [ "$FAULT" = cut ] && host_link $((HOSTS - 1)) up
    fi
    wait_job "$job"
    [ -z "${SHOW:-}" ] || cat "$WORK/$job".[0-9]*
    # Killed: from the failed call's end. Stopped or cut: from the fault ("failed at T", the
    # wall clock, then the recovery after it).
    cat "$WORK/$job".[0-9]* | awk -v kind="$FAULT" -v at="$at" '
      match($0, /^\[[0-9]+\] failed at [0-9.]+/) { split(substr($0, 2), w, "]"); t[w[1]] = $4 + 0 }
      match($0, /^\[[0-9]+\] shrunk .* recovered in [0-9.]+ ms$/) {
        split(substr($0, 2), w, "]"); ms = $NF == "ms" ? $(NF - 1) : $NF
        if (kind != "kill") ms += (t[w[1]] - at) * 1000
        printf "%.1f\n", ms }' | tee -a "$WORK/figure" | sed "s/^/round $round: recovered /;s/$/ ms/"
    got=$(cat "$WORK/$job".[0-9]* | grep -c '\] shrunk ')
    if [ "$got" != $((P - lost)) ]; then
      say "FAILED: round $round: $got survivors recovered, not $((P - lost))"
      cat "$WORK/$job".[0-9]*
      exit 1
    fi
  done
  sort -n "$WORK/figure" | awk -v h="$HOSTS" -v r="$RANKS" -v f="$FAULT" '{v[NR]=$1} END {
    m = NR % 2 ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2
    printf "%s across %d hosts x %d ranks: to a correct 1 MiB allreduce %g ms median (%g-%g), %d survivors\n", f, h, r, m, v[1], v[NR], NR}'
  exit 0
fi

say "$TRIALS trials, $HOSTS hosts x $RANKS ranks, seed $SEED"
faults_total=0 kills=0 stops=0 cuts=0
started=$SECONDS
for ((trial = 1; trial <= TRIALS; trial++)); do
  job="mt$ID-$trial"
  transport=$([ $((RANDOM % 3)) = 0 ] && echo tcp || echo auto)
  ENV_EXTRA="$MARK COLLX_TRANSPORT=$transport COLLX_PEER_TIMEOUT=1s COLLX_TIMEOUT=30s"
  # (The job's last rank: after a loss no process holds that rank again, so the entry fires
  # in no later generation, whose ranks COLLX_FAULT's RANK names.)
  cutter=$((P - 1))
  [ -z "${CUT_INSIDE:-}" ] || ENV_EXTRA+=" COLLX_FAULT=$CUT_INSIDE:cut=eth0:$cutter"
  t0=$SECONDS
  start_job "$job" elastic 4096 6
  if ! await_ready "$job"; then
    say "FAILED: trial $trial: not every rank got ready"
    cat "$WORK/$job".[0-9]*
    exit 1
  fi
  declare -A pid_of=() fault=() cut=()
  while read -r rank pid; do pid_of[$rank]=$pid; done < <(job_ranks "$job")
  # The faults: at most P - 2 ranks lost, each at a random moment (0-1.2 s apart).
  nfaults=$((1 + RANDOM % 3))
  lost=0
  desc=""
  if [ -n "${CUT_INSIDE:-}" ]; then
    # Rank 1 killed; the cut comes from inside, at the point named, when its rank gets there.
    nfaults=0
    sleep "0.$((RANDOM % 12))"
    fault[1]=kill
    kill -KILL "${pid_of[1]}" 2>/dev/null
    kills=$((kills + 1))
    h=$((HOSTS - 1))
    for ((i = 0; i < 200; i++)); do
      grep -q "COLLX_FAULT: cut=eth0 at $CUT_INSIDE" "$WORK/$job.$h" && break
      sleep 0.05
    done
    grep -q "COLLX_FAULT: cut=eth0 at $CUT_INSIDE" "$WORK/$job.$h" ||
      { say "FAILED: trial $trial: rank $cutter never cut its link at $CUT_INSIDE"; cat "$WORK/$job.$h"; exit 1; }
    cut[$h]=1
    for ((r = h * RANKS; r < (h + 1) * RANKS; r++)); do fault[$r]=cut; done
    lost=$((1 + RANKS))
    desc=" kill:1 cut:host$h@$CUT_INSIDE"
    cuts=$((cuts + 1))
    faults_total=$((faults_total + 2))
  fi
  for ((f = 0; f < nfaults; f++)); do
    sleep "0.$((RANDOM % 12))"
    kind=$((RANDOM % 10))
    if [ "$kind" -lt 3 ] && [ "$HOSTS" -gt 2 ]; then
      h=$((1 + RANDOM % (HOSTS - 1)))
      hit=0
      for ((r = h * RANKS; r < (h + 1) * RANKS; r++)); do [ -z "${fault[$r]:-}" ] && hit=$((hit + 1)); done
      if [ -z "${cut[$h]:-}" ] && [ $((lost + hit)) -le $((P - 2)) ]; then
        host_link "$h" down
        cut[$h]=1
        for ((r = h * RANKS; r < (h + 1) * RANKS; r++)); do [ -n "${fault[$r]:-}" ] || fault[$r]=cut; done
        lost=$((lost + hit))
        desc+=" cut:host$h"
        cuts=$((cuts + 1))
        faults_total=$((faults_total + 1))
      fi
      continue
    fi
    [ $((lost + 1)) -le $((P - 2)) ] || continue
    for ((try = 0; try < 20; try++)); do
      r=$((RANDOM % P))
      [ -z "${fault[$r]:-}" ] && break
    done
    [ -z "${fault[$r]:-}" ] || continue
    if [ "$kind" -lt 5 ]; then
      fault[$r]=stop
      kill -STOP "${pid_of[$r]}" 2>/dev/null
      stops=$((stops + 1))
    else
      fault[$r]=kill
      kill -KILL "${pid_of[$r]}" 2>/dev/null
      kills=$((kills + 1))
    fi
    lost=$((lost + 1))
    desc+=" ${fault[$r]}:$r"
    faults_total=$((faults_total + 1))
  done
  # Stopped ranks resume, and cut links come back, after the others failed them (the peer
  # timeout is 1 s).
  sleep 2.5
  for r in "${!fault[@]}"; do
    [ "${fault[$r]}" = stop ] && kill -CONT "${pid_of[$r]}" 2>/dev/null
  done
  for h in "${!cut[@]}"; do host_link "$h" up; done
  wait_job "$job"
  took=$((SECONDS - t0))
  out=$(cat "$WORK/$job".[0-9]*)
  problem=""
  while read -r h code; do
    # A host with a survivor ends 0; one whose every rank was faulted does not.
    has_survivor=0
    for ((r = h * RANKS; r < (h + 1) * RANKS; r++)); do
      grep -qE "^\[$r\] done " <<<"$out" && has_survivor=1
    done
    if [ "$has_survivor" = 1 ] && [ "$code" != 0 ]; then problem+="; host $h's collx-run exited $code"; fi
    [ "$code" = 124 ] && problem+="; host $h's collx-run hit its timeout"
  done <"$WORK/$job.codes"
  finals=$(grep -oE '^\[[0-9]+\] done size=[0-9]+ generation=[0-9]+' <<<"$out" | sed 's/^\[[0-9]*\] //' | sort -u)
  [ "$(grep -c . <<<"$finals")" = 1 ] || problem+="; the survivors disagree: $finals"
  for ((r = 0; r < P; r++)); do
    case "${fault[$r]:-}" in
      "") grep -qE "^\[$r\] done " <<<"$out" || problem+="; rank $r (not faulted) did not finish" ;;
      kill) grep -qE "^collx-run: rank $r \(pid [0-9]+\) was killed by signal 9" <<<"$out" ||
        problem+="; rank $r was not reported killed" ;;
      *) grep -qE "^collx-run: rank $r \(pid [0-9]+\) exited with code 17|^\[$r\] done " <<<"$out" ||
        problem+="; rank $r (${fault[$r]}) was neither excluded nor a survivor" ;;
    esac
  done
  if [ -n "${CUT_INSIDE:-}" ]; then
    # The cut took: the last host's ranks were excluded, none went on as a survivor.
    for ((r = (HOSTS - 1) * RANKS; r < P; r++)); do
      grep -qE "^collx-run: rank $r \(pid [0-9]+\) exited with code 17" <<<"$out" ||
        problem+="; rank $r (its host cut at $CUT_INSIDE) was not excluded"
    done
  fi
  size=$(sed -n 's/^done size=\([0-9]*\) .*/\1/p' <<<"$finals")
  [ -n "$size" ] && [ "$size" -lt $((P - lost)) ] && problem+="; ended with $size ranks, fewer than the $((P - lost)) not faulted"
  [ -n "$(marked)" ] && problem+="; processes outlived the job: $(marked | tr '\n' ' ')"
  for ((h = 0; h < HOSTS; h++)); do
    [ -s "$WORK/$job.shm.$h" ] && problem+="; host $h left in /dev/shm: $(tr '\n' ' ' <"$WORK/$job.shm.$h")"
  done
  printf 'trial %3d: %s faults:%s -> %s (%d excluded, %d s)%s\n' "$trial" "$transport" "$desc" \
    "${finals:-none}" "$(grep -c 'exited with code 17' <<<"$out")" "$took" "${problem:+  FAILED: $problem}"
  if [ -n "$problem" ]; then
    echo "---- trial $trial output (seed $SEED) ----"
    for ((h = 0; h < HOSTS; h++)); do echo "-- host $h"; tail -n 40 "$WORK/$job.$h"; done
    exit 1
  fi
  rm -f "$WORK/$job".*
  unset pid_of fault cut
done
cleanup
trap - EXIT
left=$(hosts_leftover)
[ -z "$left" ] || { say "FAILED: left behind:$left"; exit 1; }
say "$TRIALS passed ($faults_total faults: $kills kills, $stops stops, $cuts cut links) in $((SECONDS - started)) s, seed $SEED; nothing left behind"
