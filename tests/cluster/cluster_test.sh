#!/usr/bin/env bash
# collx on a real Slurm cluster of 4 simulated hosts (tests/cluster/cluster.sh: each host a
# network, UTS and mount namespace of its own, bridged; slurmctld, one slurmd per host, a
# munged), 2 ranks per host, launched by srun and by Open MPI's mpirun (its rsh launcher,
# with mpirun_agent.sh in place of ssh):
#   (a) srun -N 4 -n 8 collx-bench: allreduce (the default, hierarchical across the hosts)
#       and broadcast (hierarchical): P=8 on 4 hosts, shm and tcp peers, no wrong element
#   (b) the same allreduce under mpirun across the 4 hosts; no orted left afterwards
#   (c) a rank killed (SIGKILL) on node2 in the middle of a long run, under srun and under
#       mpirun: every other rank fails with an IoError naming the dead rank, within a few
#       seconds, and srun/mpirun exit non-zero
#   (d) the Python module under srun: collx.init() and an allreduce, checked on every rank;
#       with the torch backend built, init_process_group("collx") with nothing set too
#   (e) plain srun (no PMIx) with Slurm's variables and a given store, as before PMIx
# and afterwards an empty /dev/shm on every host. Before collx, the cluster itself: srun and
# mpirun place 2 tasks on each host, and srun --mpi=pmix's and mpirun's tasks have their
# PMIX_RANK, PMIX_NAMESPACE and PMIX_SERVER_URI*. The cluster is this run's own (its own
# state directory, namespace and link names, addresses 198.51.100.200+i), so a user's
# cluster (cluster.sh up) or tests/api/multihost_test.sh can run alongside; it is torn down in
# a trap, also on failure or interrupt, and nothing of it may be left: no process,
# namespace, link or file. (The cluster of an earlier run killed by SIGKILL, which runs no
# trap, is torn down at the start of the next.)
#
# How collx finds its peers: with nothing set (the default, CLUSTER_TEST_LAUNCH=pmix),
# through the PMIx server that `srun --mpi=pmix` and mpirun give every task: rank and size
# from PMIx, rank 0's TCP store passed through it (collx-info --rendezvous must say
# "launcher pmix" on every rank). CLUSTER_TEST_LAUNCH=explicit runs the same checks with
# plain srun and mpirun, Slurm's and Open MPI's rank variables, an explicit file store in
# the cluster's state directory (the hosts share the filesystem), COLLX_JOB_ID and a secret
# file: the way for a Slurm without its PMIx plugin (srun_job and mpirun_job are the two
# places that differ).
#
# usage: cluster_test.sh BIN_DIR       (root; BIN_DIR has collx-bench; the Python package is
#                                       looked for in BIN_DIR/../python)
#   CLUSTER_TEST_LAUNCH=pmix (default) | explicit     see above
#   KEEP=DIR    copy the run's outputs and the cluster's logs to DIR before tearing down
# Exit codes: 0 passed, 1 failed, 77 skipped (not root, no namespaces, Slurm or munge not
# installable, the test subnet in use here): ctest's SKIP_RETURN_CODE, with the reason printed.
set -uo pipefail

BIN=${1:?usage: cluster_test.sh BIN_DIR}
BIN=$(cd "$BIN" 2>/dev/null && pwd) || { echo "cluster_test: FAILED: no directory $1"; exit 1; }
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CLUSTER="$HERE/cluster.sh"
# shellcheck source=../util/bench_output.sh
. "$HERE/../util/bench_output.sh"
LAUNCH=${CLUSTER_TEST_LAUNCH:-pmix}
HOSTS=4
RANKS=2
P=$((HOSTS * RANKS))
ID=$$
TAG="cxt$((ID % 100000))"
BASE=200
LIMIT=60 # seconds for any one srun/mpirun
WORK=$(mktemp -d "/tmp/collx-cluster-test-$ID.XXXXXX")
CDIR="$WORK/cluster"
T0=$EPOCHREALTIME

say() { echo "cluster_test: $*"; }
# Seconds since $1 (an $EPOCHREALTIME), to a tenth.
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
skip() {
  say "SKIPPED: $*"
  exit 77
}
fail() {
  say "FAILED: $*"
  exit 1
}

# cluster.sh for this run's cluster (CL: a command, not a function, so that `run` starts no
# subshell and $! is cluster.sh itself).
CL=(env COLLX_CLUSTER_DIR="$CDIR" COLLX_CLUSTER_TAG="$TAG" COLLX_CLUSTER_BASE="$BASE" "$CLUSTER")
cl() { "${CL[@]}" "$@"; }

# Runs "$@" in the background and waits for it: a signal to this script is handled at once
# (bash runs a trap only after a foreground child ends), and cleanup ends it.
CHILD=""
run() {
  "$@" &
  CHILD=$!
  wait "$CHILD"
  local code=$?
  CHILD=""
  return $code
}

# Tears the cluster down and removes $WORK; safe to call twice.
cleanup() {
  if [ -n "$CHILD" ]; then
    # cluster.sh up tears down what it made on SIGTERM; srun and mpirun stop their jobs.
    kill -TERM "$CHILD" 2>/dev/null
    local t
    for ((t = 0; t < 100 && $(kill -0 "$CHILD" 2>/dev/null && echo 1 || echo 0); t++)); do sleep 0.1; done
    kill -KILL "$CHILD" 2>/dev/null
    CHILD=""
  fi
  if [ -d "$WORK" ]; then
    if [ -n "${KEEP:-}" ]; then
      mkdir -p "$KEEP" && cp -r "$WORK"/. "$KEEP"/ 2>/dev/null
    fi
    cl down >"$WORK/down.out" 2>&1 || cat "$WORK/down.out"
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The clusters of earlier runs that were killed before their trap could run (SIGKILL, as a
# test driver's timeout may send): each run's directory names its pid; one whose process is
# gone or no longer this script is torn down.
echo "$ID $(cut -d' ' -f22 /proc/$ID/stat)" >"$WORK/owner"
for owner in /tmp/collx-cluster-test-*/owner; do
  [ -f "$owner" ] || continue
  read -r opid ostart <"$owner" 2>/dev/null || continue
  [ "$opid" = "$ID" ] && continue
  if [ "$(cut -d' ' -f22 "/proc/$opid/stat" 2>/dev/null)" != "$ostart" ]; then
    say "removing the cluster of an earlier run that was killed (pid $opid): $(dirname "$owner")"
    COLLX_CLUSTER_DIR="$(dirname "$owner")/cluster" "$CLUSTER" down >/dev/null 2>&1
    rm -rf "$(dirname "$owner")"
  fi
done

[ -x "$BIN/collx-bench" ] || fail "no collx-bench in $BIN"
[ "$LAUNCH" = explicit ] || [ "$LAUNCH" = pmix ] || fail "CLUSTER_TEST_LAUNCH=$LAUNCH: explicit or pmix"

# ---- the cluster ----
t=$EPOCHREALTIME
run "${CL[@]}" up "$HOSTS" >"$WORK/up.out" 2>&1
code=$?
[ "$code" = 77 ] && skip "$(grep -m1 'cannot:' "$WORK/up.out" | sed 's/^cluster: cannot: //')"
[ "$code" = 0 ] || fail "cluster.sh up $HOSTS:
$(cat "$WORK/up.out")"
TIMES="up $(since "$t")s"
say "$(head -1 "$WORK/up.out" | sed 's/^cluster: //')"

STORE="$CDIR/store"
SECRET="$CDIR/secret"
(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$SECRET")

# ---- the two launchers: where explicit and pmix differ ----
RUN=0
# The environment that tells collx its store (explicit), as NAME=VALUE words in JOB_ENV.
job_env() {
  RUN=$((RUN + 1))
  JOB_ENV=()
  if [ "$LAUNCH" = explicit ]; then
    JOB_ENV=(COLLX_STORE="file://$STORE" COLLX_JOB_ID="ct$ID-$RUN" COLLX_JOB_SECRET_FILE="$SECRET")
  fi
}

# srun_job NAME CMD...: srun -N 4 -n 8 CMD from host 0, output (stdout and stderr) in
# $WORK/NAME.out; returns srun's exit code (124: $LIMIT seconds passed).
srun_job() {
  local name=$1 t=$EPOCHREALTIME code
  shift
  job_env
  local -a mpi=()
  [ "$LAUNCH" = pmix ] && mpi=(--mpi=pmix)
  run "${CL[@]}" exec 0 env "${JOB_ENV[@]}" timeout "$LIMIT" srun "${mpi[@]}" -N "$HOSTS" -n "$P" "$@" \
    >"$WORK/$name.out" 2>&1
  code=$?
  TIMES+=", $name $(since "$t")s"
  return $code
}

# mpirun_job NAME CMD...: mpirun -np 8 CMD from host 0 across the hosts (the hostfile
# node0..node3 slots=2, mpirun_agent.sh), output in $WORK/NAME.out; mpirun's exit code.
mpirun_job() {
  local name=$1 t=$EPOCHREALTIME code var
  shift
  job_env
  local -a pass=()
  for var in "${JOB_ENV[@]}"; do pass+=(-x "${var%%=*}"); done
  # timeout signals cluster.sh, which has become (exec) mpirun in host 0: mpirun stops its
  # orteds and ranks.
  run env "${JOB_ENV[@]}" COLLX_CLUSTER_DIR="$CDIR" timeout "$LIMIT" "$CLUSTER" mpirun -np "$P" \
    "${pass[@]}" "$@" >"$WORK/$name.out" 2>&1 </dev/null
  code=$?
  TIMES+=", $name $(since "$t")s"
  return $code
}

# ---- checks ----

# check_run NAME ALGO: collx-bench's output: P ranks on HOSTS hosts, shm and tcp peers seen
# from rank 0, #wrong 0 on every size, ALGO in the algo column.
check_run() {
  local name=$1 algo=$2 line
  line=$(check_bench "$WORK/$name.out" "$name" "$P" "$HOSTS" "shm tcp" "$algo") || fail "$line"
  say "ok: $name ($line)"
}

# No orted of this cluster may outlive its mpirun (its command line names the cluster's
# directory, through the agent's --cluster-dir).
check_no_orted() {
  local name=$1 try pids
  for ((try = 0; try < 60; try++)); do
    pids=$(grep -l -F -- "$CDIR" /proc/[0-9]*/cmdline 2>/dev/null | while read -r f; do
      p=${f#/proc/}
      p=${p%/cmdline}
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = orted ] && echo "$p"
    done)
    [ -z "$pids" ] && return 0
    sleep 0.05
  done
  fail "$name: orted left behind: $pids"
}

# The kill test's wrapper: runs collx-bench; the task of rank VICTIM kills it with SIGKILL
# 1 s after rank 0 printed its table's head (the job formed and timing its calls; rank 0's
# output goes through a file for that, and is printed at the end). Each task then notes
# when its collx-bench ended, and waits (at most 8 s) until every task's has, so that a
# launcher that stops a job at its first failed task (mpirun) cannot end the others before
# they report.
cat >"$WORK/kill_rank.sh" <<'EOF'
#!/bin/sh
# usage: kill_rank.sh VICTIM DIR P PROGRAM ARGS...
victim=$1 dir=$2 size=$3
shift 3
rank=${SLURM_PROCID:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-unknown}}}
if [ "$rank" = 0 ]; then
  "$@" >"$dir/stdout.0" &
else
  "$@" &
fi
pid=$!
if [ "$rank" = "$victim" ]; then
  n=0
  until grep -q '^# *size' "$dir/stdout.0" 2>/dev/null || [ $n -ge 300 ]; do
    sleep 0.1
    n=$((n + 1))
  done
  sleep 1
  echo "kill_rank: SIGKILL to rank $rank (pid $pid) on $(hostname)" >&2
  date +%s.%N >"$dir/killed"
  kill -KILL "$pid"
fi
wait "$pid"
code=$?
date +%s.%N >"$dir/ended.$rank"
[ "$rank" = 0 ] && cat "$dir/stdout.0"
n=0
while [ "$(ls "$dir" | grep -c '^ended\.')" -lt "$size" ] && [ $n -lt 80 ]; do
  sleep 0.1
  n=$((n + 1))
done
exit $code
EOF
chmod +x "$WORK/kill_rank.sh"

# kill_test NAME LAUNCHER: rank 5 (node2's second) killed; every other rank must fail with
# an IoError that names rank 5, within 8 s of the kill, and the launcher exit non-zero.
VICTIM=5
kill_test() {
  local name=$1 launcher=$2 code r
  local dir="$WORK/$name.d"
  mkdir -p "$dir"
  "$launcher" "$name" "$WORK/kill_rank.sh" "$VICTIM" "$dir" "$P" \
    "$BIN/collx-bench" -c allreduce --sizes 65536 -w 1 -n 1000000
  code=$?
  local out="$WORK/$name.out"
  [ "$code" = 124 ] && fail "$name: still running after ${LIMIT}s:
$(cat "$out")"
  [ "$code" != 0 ] || fail "$name: ${launcher%_job} exited 0 after rank $VICTIM was killed:
$(cat "$out")"
  grep -q "kill_rank: SIGKILL to rank $VICTIM .* on node2" "$out" ||
    fail "$name: rank $VICTIM was not killed on node2: $(cat "$out")"
  # (collx ends its PMIx connection once the job has formed: a task that dies connected
  # makes Slurm's mpi/pmix kill the whole step at once, before the others could report.)
  local reported=0
  for ((r = 0; r < P; r++)); do
    [ "$r" = "$VICTIM" ] && continue
    grep -qE "IoError: rank $r: .*rank $VICTIM\b" "$out" ||
      fail "$name: rank $r printed no IoError naming rank $VICTIM:
$(cat "$out")"
    reported=$((reported + 1))
  done
  local slowest
  slowest=$(cat "$dir"/ended.* | awk -v k="$(cat "$dir/killed")" '{ d = $1 - k; if (d > m) m = d } END { printf "%.2f", m }')
  awk -v s="$slowest" 'BEGIN { exit !(s < 8) }' || fail "$name: the last rank failed ${slowest}s after the kill"
  local others="the $reported others failed with an IoError naming it"
  say "ok: $name: rank $VICTIM killed on node2; $others, the last ${slowest}s after; ${launcher%_job} exited $code"
}

# ---- the cluster itself, before collx: srun and mpirun place 2 tasks on each host, and
# PMIx (srun --mpi=pmix; mpirun's orteds) gives every task its rank, namespace and server.
# check_placement NAME PMIX: $WORK/NAME.out has "<rank> <hostname> <PMIX_RANK> <PMIX_NAMESPACE>
# <PMIX_SERVER_URI*>" from each task.
check_placement() {
  local name=$1 pmix=$2 r line
  local out="$WORK/$name.out"
  for ((r = 0; r < P; r++)); do
    line=$(grep -E "^task $r " "$out") || fail "$name: no line from task $r:
$(cat "$out")"
    # shellcheck disable=SC2086
    set -- $line
    [ "$3" = "node$((r / RANKS))" ] || fail "$name: task $r ran on $3, not node$((r / RANKS))"
    if [ "$pmix" = 1 ] && { [ "$4" != "$r" ] || [ "$5" = - ] || [ "$6" = - ]; }; then
      fail "$name: task $r has PMIX_RANK=$4 PMIX_NAMESPACE=$5 PMIX_SERVER_URI*=$6"
    fi
  done
  say "ok: $name: 2 tasks on each of node0..node$((HOSTS - 1))$([ "$pmix" = 1 ] && echo ", each with its PMIX_RANK, PMIX_NAMESPACE and PMIX_SERVER_URI*")"
}
# shellcheck disable=SC2016
SHOW='echo "task ${SLURM_PROCID:-$OMPI_COMM_WORLD_RANK} $(hostname) ${PMIX_RANK:--} ${PMIX_NAMESPACE:--} ${PMIX_SERVER_URI41:-${PMIX_SERVER_URI4:-${PMIX_SERVER_URI3:-${PMIX_SERVER_URI2:--}}}}"'
t=$EPOCHREALTIME
run "${CL[@]}" exec 0 timeout "$LIMIT" srun -N "$HOSTS" -n "$P" sh -c "$SHOW" >"$WORK/srun-placement.out" 2>&1 ||
  fail "srun -N $HOSTS -n $P: exit $?: $(cat "$WORK/srun-placement.out")"
check_placement srun-placement 0
run "${CL[@]}" exec 0 timeout "$LIMIT" srun --mpi=pmix -N "$HOSTS" -n "$P" sh -c "$SHOW" >"$WORK/srun-pmix.out" 2>&1 ||
  fail "srun --mpi=pmix -N $HOSTS -n $P: exit $?: $(cat "$WORK/srun-pmix.out")"
check_placement srun-pmix 1
if command -v mpirun >/dev/null 2>&1; then
  run env COLLX_CLUSTER_DIR="$CDIR" timeout "$LIMIT" "$CLUSTER" mpirun -np "$P" sh -c "$SHOW" \
    >"$WORK/mpirun-pmix.out" 2>&1 </dev/null || fail "mpirun -np $P: exit $?: $(cat "$WORK/mpirun-pmix.out")"
  check_placement mpirun-pmix 1
fi
TIMES+=", placement $(since "$t")s"

# ---- the PMIx store across hosts: a get from node0's rank, two init()s in a row (each
# connecting to PMIx again after the last one's disconnect), under srun and mpirun ----
if [ "$LAUNCH" = pmix ] && [ -x "$BIN/pmix_store_check" ]; then
  for launcher in srun_job mpirun_job; do
    [ "$launcher" = mpirun_job ] && ! command -v mpirun >/dev/null 2>&1 && continue
    name=${launcher%_job}-pmix-store
    "$launcher" "$name" "$BIN/pmix_store_check" || fail "$name: exit $?:
$(cat "$WORK/$name.out")"
    [ "$(grep -c "pmix store checks passed" "$WORK/$name.out")" = "$P" ] ||
      fail "$name: not every rank passed: $(cat "$WORK/$name.out")"
    say "ok: $name: the PMIx store and two init()s in a row on all $P ranks"
  done
fi

# ---- (a) srun ----
srun_job srun-info "$BIN/collx-info" --rendezvous ||
  fail "srun-info: srun exited $?:
$(cat "$WORK/srun-info.out")"
want=$([ "$LAUNCH" = pmix ] && echo "launcher pmix, store tcp://node0:" || echo "launcher slurm, store file://")
[ "$(grep -c "of $P: job .*, $want" "$WORK/srun-info.out")" = "$P" ] ||
  fail "srun-info: every rank should say '$want':
$(cat "$WORK/srun-info.out")"
say "ok: srun-info: every rank's collx-info --rendezvous says '$want...'"
srun_job srun-allreduce "$BIN/collx-bench" -c allreduce --sizes 4,65536,4194304 -w 1 -n 3 ||
  fail "srun-allreduce: srun exited $?:
$(cat "$WORK/srun-allreduce.out")"
check_run srun-allreduce hierarchical
srun_job srun-broadcast "$BIN/collx-bench" -c broadcast -a hierarchical --sizes 4,65536,4194304 -w 1 -n 3 ||
  fail "srun-broadcast: srun exited $?:
$(cat "$WORK/srun-broadcast.out")"
check_run srun-broadcast hierarchical

# ---- (b) mpirun ----
if command -v mpirun >/dev/null 2>&1; then
  MPI=1
  mpirun_job mpirun-allreduce "$BIN/collx-bench" -c allreduce --sizes 4,65536,4194304 -w 1 -n 3 ||
    fail "mpirun-allreduce: mpirun exited $?:
$(cat "$WORK/mpirun-allreduce.out")"
  check_run mpirun-allreduce hierarchical
  check_no_orted mpirun-allreduce
else
  MPI=0
  say "no mpirun here (Debian: openmpi-bin): the mpirun checks are left out"
fi

# ---- (c) a rank killed ----
kill_test srun-kill srun_job
if [ "$MPI" = 1 ]; then
  kill_test mpirun-kill mpirun_job
  check_no_orted mpirun-kill
fi

# ---- (d) the Python module ----
# every_rank_said NAME WHO RESULT: each rank r printed "WHO rank r of P on <its host>: RESULT"
# in NAME's output (2 ranks a host: rank r on node r/2).
every_rank_said() {
  local name=$1 who=$2 result=$3 r
  for ((r = 0; r < P; r++)); do
    grep -qE "^$who rank $r of $P on node$((r / RANKS)): $result" "$WORK/$name.out" ||
      fail "$name: rank $r did not report '$result' on node$((r / RANKS)):
$(cat "$WORK/$name.out")"
  done
}
PYDIR=""
for d in "$BIN/../python" "$(dirname "$BIN")/python"; do
  if [ -f "$d/collx/__init__.py" ] && ls "$d"/collx/_collx*.so >/dev/null 2>&1; then
    PYDIR=$(cd "$d" && pwd)
    break
  fi
done
if [ -z "$PYDIR" ]; then
  say "no Python module next to $BIN (../python/collx/_collx*.so): the Python check is left out"
elif ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  say "no numpy for /usr/bin/python3: the Python check is left out"
else
  cat >"$WORK/allreduce.py" <<'EOF'
import socket
import sys

import numpy as np

import collx

ctx = collx.init()
x = np.full(1000, ctx.rank + 1, dtype=np.float32)
ctx.allreduce(x)
want = ctx.size * (ctx.size + 1) // 2
ok = bool((x == want).all())
print(f"python rank {ctx.rank} of {ctx.size} on {socket.gethostname()}: allreduce "
      f"{'ok' if ok else 'WRONG'} ({x[0]}, expected {want}), transports {ctx.transports}",
      flush=True)
ctx.close()
sys.exit(0 if ok else 1)
EOF
  srun_job srun-python env PYTHONPATH="$PYDIR" /usr/bin/python3 "$WORK/allreduce.py" ||
    fail "srun-python: srun exited $?:
$(cat "$WORK/srun-python.out")"
  every_rank_said srun-python python "allreduce ok"
  say "ok: srun-python: collx.init() and allreduce right on all $P ranks ($PYDIR)"
  if [ "$LAUNCH" = pmix ] && ls "$PYDIR"/collx/_collx_torch*.so >/dev/null 2>&1; then
    # torch.distributed with none of torch's variables: collx.torch's env:// through PMIx.
    cat >"$WORK/torch_allreduce.py" <<'EOF'
import os
import socket

import torch
import torch.distributed as dist

import collx.torch  # noqa: F401

assert not any(v in os.environ for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))
dist.init_process_group("collx")
t = torch.full((1000,), float(dist.get_rank() + 1))
dist.all_reduce(t)
n = dist.get_world_size()
ok = bool((t == n * (n + 1) / 2).all())
print(f"torch rank {dist.get_rank()} of {n} on {socket.gethostname()}: all_reduce "
      f"{'ok' if ok else 'WRONG'}", flush=True)
dist.destroy_process_group()
raise SystemExit(0 if ok else 1)
EOF
    srun_job srun-torch env PYTHONPATH="$PYDIR" OMP_NUM_THREADS=1 /usr/bin/python3 "$WORK/torch_allreduce.py" ||
      fail "srun-torch: srun exited $?:
$(cat "$WORK/srun-torch.out")"
    every_rank_said srun-torch torch "all_reduce ok"
    say "ok: srun-torch: init_process_group(\"collx\") with nothing set and all_reduce right on all $P ranks"
  fi
fi

# Without PMIx (plain srun), collx works as before PMIx: Slurm's variables and a given store.
if [ "$LAUNCH" = pmix ]; then
  t=$EPOCHREALTIME
  run "${CL[@]}" exec 0 env COLLX_STORE="file://$STORE" COLLX_JOB_ID="ct$ID-plain" \
    COLLX_JOB_SECRET_FILE="$SECRET" timeout "$LIMIT" srun -N "$HOSTS" -n "$P" \
    "$BIN/collx-info" --rendezvous >"$WORK/srun-plain.out" 2>&1 ||
    fail "srun-plain: srun exited $?:
$(cat "$WORK/srun-plain.out")"
  TIMES+=", srun-plain $(since "$t")s"
  [ "$(grep -c "of $P: job ct$ID-plain .*, launcher slurm, store file://" "$WORK/srun-plain.out")" = "$P" ] ||
    fail "srun-plain: every rank should take Slurm's variables and the file store:
$(cat "$WORK/srun-plain.out")"
  say "ok: srun-plain: without --mpi=pmix, every rank took Slurm's variables and the given store"
fi

# Every host's /dev/shm empty after all of that (killed ranks included).
for ((i = 0; i < HOSTS; i++)); do
  left=$(cl exec "$i" ls -A /dev/shm) || fail "cannot list host $i's /dev/shm"
  [ -z "$left" ] || fail "host $i's /dev/shm has: $(tr '\n' ' ' <<<"$left")"
done

# ---- down: nothing of this run may be left ----
t=$EPOCHREALTIME
cleanup
TIMES+=", down $(since "$t")s"
trap - EXIT
leftover=""
grep -q "^collx-$TAG-" <<<"$(ip netns list 2>/dev/null)" &&
  leftover+=" namespaces($(ip netns list | grep "^collx-$TAG-" | cut -d' ' -f1 | tr '\n' ' '))"
grep -qE "(^| )${TAG}[hbn]" <<<"$(ip -o link show 2>/dev/null)" &&
  leftover+=" links($(ip -o link show | grep -oE "${TAG}[hbn][^:@]*" | tr '\n' ' '))"
# (One grep over every process's command line and environment, NUL-separated entries.)
for f in $(grep -lzE -e "$WORK" -e "^COLLX_JOB_ID=ct$ID-" /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null); do
  p=${f#/proc/}
  leftover+=" process(${p%%/*}: $(tr '\0' ' ' <"/proc/${p%%/*}/cmdline" 2>/dev/null | cut -c1-80))"
done
[ -e "$WORK" ] && leftover+=" $WORK"
[ -z "$leftover" ] || fail "left behind:$leftover"
say "timings: $TIMES; total $(since "$T0")s"
say "passed: $HOSTS hosts x $RANKS ranks under Slurm ($LAUNCH)$([ "$MPI" = 1 ] && echo " and mpirun"); nothing left behind"
exit 0
