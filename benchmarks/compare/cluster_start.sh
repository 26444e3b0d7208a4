#!/usr/bin/env bash
# Time from launch to the first collective on a real Slurm cluster of 4 namespace hosts x 2
# ranks (tests/cluster/cluster.sh), under each launcher, side by side in interleaved rounds:
#   srun      srun --mpi=pmix -N 4 -n 8 collx-bench ...     (collx's PMIx bootstrap)
#   mpirun    mpirun -np 8 collx-bench ... across the hosts  (PMIx; orteds through the agent)
#   collx-run one collx-run -n 2 per host (--nnodes 4 --node-rank i --master-addr node0):
#             its TCP store, its secret file
# The clock starts in this script just before the launch command and stops when rank 0's
# first collective (collx-bench --stamp: a 4-byte allreduce right after joining) returned;
# the hosts share this machine's clock. Also the job's whole wall time (to the launcher's
# exit), and, for scale, the wall time of the same launch running `true` instead of
# collx-bench (what the launcher itself costs). Prints each one's median, min and max in ms.
#
#   benchmarks/compare/cluster_start.sh [BUILD_DIR]      (root)
# Knobs: ROUNDS=10
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=$(cd "${1:-$root/build}/bin" && pwd)
ROUNDS=${ROUNDS:-10}
work=$(mktemp -d /tmp/collx-cluster-start.XXXXXX)
export COLLX_CLUSTER_DIR="$work/cluster" COLLX_CLUSTER_TAG="cxs$(($$ % 10000))" COLLX_CLUSTER_BASE=150
cluster="$root/tests/cluster/cluster.sh"
trap '"$cluster" down >/dev/null 2>&1; rm -rf "$work"' EXIT
"$cluster" up 4 >"$work/up.out" || { cat "$work/up.out"; exit 1; }
head -1 "$work/up.out"
(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/secret")
BENCH=("$bin/collx-bench" --stamp --sizes 4 -n 1 -w 0 --no-check)

# launch LAUNCHER OUT [PROGRAM...]: runs one job of PROGRAM (default: collx-bench); prints
# "<to first collective ms> <wall ms>" (the first is 0 for another program).
round=0  # counted by the main loop: launch runs in a subshell (< <(...))
launch() {
  local launcher=$1 out=$2 t0 t1 i
  shift 2
  local -a bench=("${@:-${BENCH[@]}}")
  t0=$EPOCHREALTIME
  case $launcher in
    srun) "$cluster" exec 0 timeout 60 srun --mpi=pmix -N 4 -n 8 "${bench[@]}" >"$out" 2>&1 ;;
    mpirun) timeout 60 "$cluster" mpirun -np 8 "${bench[@]}" >"$out" 2>&1 </dev/null ;;
    collx-run)
      local -a pids=()
      for ((i = 0; i < 4; i++)); do
        "$cluster" exec "$i" timeout 60 "$bin/collx-run" -n 2 --nnodes 4 --node-rank "$i" \
          --master-addr node0 --master-port $((24000 + round % 1000)) --job-id "cs$round" \
          --secret-file "$work/secret" --timeout 60s -- "${bench[@]}" >"$out.$i" 2>&1 &
        pids+=($!)
      done
      for pid in "${pids[@]}"; do wait "$pid"; done
      cat "$out".* >"$out"
      ;;
  esac
  t1=$EPOCHREALTIME
  local stamp=$t0
  if [ "${bench[0]}" = "${BENCH[0]}" ]; then
    stamp=$(sed -n 's/^# first collective returned at //p' "$out")
    [ -n "$stamp" ] || { echo "cluster_start: $launcher: no stamp:" >&2; cat "$out" >&2; exit 1; }
  fi
  awk -v a="$t0" -v s="$stamp" -v b="$t1" 'BEGIN { printf "%.1f %.1f\n", (s - a) * 1000, (b - a) * 1000 }'
}

declare -A first=() wall=() alone=()
launchers=(srun mpirun collx-run)
for ((r = 0; r < ROUNDS; r++)); do
  for l in "${launchers[@]}"; do
    round=$((round + 1))
    read -r f w < <(launch "$l" "$work/out")
    first[$l]+="$f "
    wall[$l]+="$w "
    round=$((round + 1))
    read -r f w < <(launch "$l" "$work/out" true)
    alone[$l]+="$w "
  done
done
stats() { tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{ v[NR] = $1 } END {
  printf "%8.1f (%.1f..%.1f)", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
echo "4 hosts x 2 ranks, $ROUNDS interleaved rounds; ms, median (min..max)"
printf "  %-10s %-28s %-28s %s\n" launcher "launch to first collective" "launch to exit" \
  "the launcher alone (true)"
for l in "${launchers[@]}"; do
  printf "  %-10s %-28s %-28s %s\n" "$l" "$(stats <<<"${first[$l]}")" "$(stats <<<"${wall[$l]}")" \
    "$(stats <<<"${alone[$l]}")"
done
