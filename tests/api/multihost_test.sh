#!/usr/bin/env bash
# Several hosts simulated on this machine: each "host" is a network namespace with a veth
# pair to a bridge (198.51.100.0/24, TEST-NET-2), and its ranks run inside `unshare --uts
# --mount` with a hostname of their own and a /dev/shm of their own (a tmpfs), so that collx
# sees hosts with different identities: shared memory within a host, TCP (and, with
# VERBS_EMU, RDMA verbs on the userspace verbs device) between hosts.
# One collx-run per host (--nnodes N --node-rank I --master-addr <host 0>), 2 ranks each,
# runs collx-bench: the hierarchical allreduce, broadcast and allgather, the defaults, and
# a run with named /dev/shm arenas, a ring with the hosts meeting through a directory they
# share (a file:// store: no store address to route toward), ring and hierarchical in TLS
# (COLLX_TLS=1). Every run
# must report N hosts, shm and tcp peers and no wrong element; afterwards no namespace,
# link, process or /dev/shm file may be left.
#
# usage: multihost_test.sh BIN_DIR [HOSTS]     (root; ctest runs it with label "process")
#   VERBS_EMU=<libcollx_verbs_emu.so>   also runs with RDMA verbs between the hosts, on the
#               userspace verbs device (tests/verbs_emu), and shared memory within
#   MEASURE=1   instead of the checks: allreduce ring against hierarchical at 4 B, 64 KiB,
#               4 MiB and 64 MiB (RATE=1gbit also limits each host's link with tbf)
# Exit codes: 0 passed, 1 failed, 77 skipped (not root, no ip/unshare/namespaces, or the
# test subnet in use here): ctest's SKIP_RETURN_CODE, with the reason printed.
set -uo pipefail
# shellcheck source=util/bench_output.sh
. "$(dirname "$0")/../util/bench_output.sh"
# shellcheck source=util/netns_hosts.sh
. "$(dirname "$0")/../util/netns_hosts.sh"

BIN=${1:?usage: multihost_test.sh BIN_DIR [HOSTS]}
HOSTS=${2:-2}
RANKS=2
ID=$$
hosts_init "$ID" "$HOSTS"
NET=$NH_NET
PREFIX=$NH_PREFIX
PORT=$((20000 + ID % 20000))
WORK=$(mktemp -d "/tmp/collx-multihost-$ID.XXXXXX")
declare -a PIDS=()

say() { echo "multihost_test: $*"; }
skip() {
  say "SKIPPED: $*"
  exit 77
}
fail() {
  say "FAILED: $*"
  exit 1
}

if why=$(hosts_unusable); then skip "$why"; fi
[ -x "$BIN/collx-run" ] && [ -x "$BIN/collx-bench" ] || fail "no collx-run or collx-bench in $BIN"

# Removes what this run created, by name and pid only; safe to call twice.
cleanup() {
  for pid in "${PIDS[@]}"; do
    kill -0 "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null
  done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  PIDS=()
  hosts_remove
  [ -n "${KEEP:-}" ] && cp -r "$WORK" "$KEEP"
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

why=$(hosts_create "${RATE:-}")
case $? in
  0) ;;
  2) skip "$why" ;;
  *) fail "$why" ;;
esac

# Runs `collx-bench ARGS` on every host at once (extra environment in ENV_EXTRA); host 0's
# output in $WORK/<name>.0, and each host's /dev/shm after its ranks ended in
# $WORK/<name>.shm.<i>. Returns the first non-zero exit code.
# The job's secret, one file every host reads (the hosts share this filesystem).
SECRET=$WORK/secret
(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$SECRET")

RUN=0
run_bench() {
  local name=$1
  shift
  RUN=$((RUN + 1))
  local port=$((PORT + RUN))
  # FILE_STORE=1: the hosts meet through a directory they share (a file:// store, as on an
  # NFS home) instead of node 0's TCP store: no store address to route toward.
  local meet=(--master-addr "$NET.10" --master-port "$port")
  if [ "${FILE_STORE:-0}" = 1 ]; then
    mkdir -p "$WORK/store-$RUN"
    meet=(--store "file://$WORK/store-$RUN")
  fi
  PIDS=()
  for ((i = 0; i < HOSTS; i++)); do
    host_run "$i" "$WORK/$name.$i" "$WORK/$name.shm.$i" \
      "$BIN/collx-run" -n "$RANKS" --nnodes "$HOSTS" --node-rank "$i" \
      "${meet[@]}" --job-id "mh$ID-$RUN" --timeout 40s \
      --secret-file "$SECRET" -- \
      "$BIN/collx-bench" "$@" &
    PIDS+=($!)
  done
  [ -z "${CUT_AFTER:-}" ] || cut_link "$CUT_AFTER"
  local first=0 code
  for pid in "${PIDS[@]}"; do
    wait "$pid"
    code=$?
    [ "$first" = 0 ] && first=$code
  done
  PIDS=()
  return "$first"
}

# CUT_AFTER=S: S seconds after the last host's ranks have connected to every rank of the
# other hosts (their established TCP connections, as ss counts them in its namespace), that
# host's link goes down at the bridge (no FIN, no RST reaches anyone: a cut cable); CUT_AT
# receives the time (date +%s.%N).
cut_link() {
  local want=$((RANKS * RANKS * (HOSTS - 1))) have=0 try
  for ((try = 0; try < 600; try++)); do
    have=$(ip netns exec "$PREFIX-$((HOSTS - 1))" ss -Htn state established 2>/dev/null | wc -l)
    [ "$have" -ge "$want" ] && break
    sleep 0.05
  done
  [ "$have" -ge "$want" ] ||
    fail "cut-link: host $((HOSTS - 1))'s ranks never made their $want connections ($have)"
  sleep "$1"
  CUT_AT=$(date +%s.%N)
  host_link $((HOSTS - 1)) down || fail "cannot take host $((HOSTS - 1))'s link down"
}

# Checks a run's output on host 0: N hosts, P ranks, shm and $XPORT (tcp) peers, #wrong 0 on every
# size, the algorithm column, and empty /dev/shm on every host.
check_run() {
  local name=$1 algo=$2 line
  line=$(check_bench "$WORK/$name.0" "$name" $((HOSTS * RANKS)) "$HOSTS" "shm $XPORT" "$algo") ||
    fail "$line"
  for ((i = 0; i < HOSTS; i++)); do
    [ -s "$WORK/$name.shm.$i" ] && fail "$name: host $i left in /dev/shm: $(tr '\n' ' ' <"$WORK/$name.shm.$i")"
  done
  say "ok: $name ($line)"
}

bench() {
  local name=$1
  shift
  if ! run_bench "$name" "$@"; then
    local printed="" i
    for ((i = 0; i < HOSTS; i++)); do
      printed+="
host $i printed:
$(cat "$WORK/$name.$i" 2>/dev/null)"
    done
    fail "$name: collx-run exited non-zero on a host;$printed"
  fi
}

export ENV_EXTRA=""
XPORT=tcp
if [ "${MEASURE:-0}" = 1 ]; then
  say "$HOSTS hosts x $RANKS ranks, links: ${RATE:-veth, unlimited}"
  for algo in ring hierarchical; do
    bench "measure-$algo" -c allreduce -a "$algo" --sizes 4,64K,4M,64M
    grep -E '^#|^ +[0-9]' "$WORK/measure-$algo.0"
  done
else
  SIZES=4,65536,4194304
  for coll in allreduce broadcast allgather; do
    bench "$coll-hierarchical" -c "$coll" -a hierarchical --sizes "$SIZES" -w 1 -n 3
    check_run "$coll-hierarchical" hierarchical
  done
  # The defaults across hosts: hierarchical on every rank (collectives.cc: acrossHosts).
  bench allreduce-default -c allreduce --sizes "$SIZES" -w 1 -n 3
  check_run allreduce-default hierarchical
  # Named arenas in each host's /dev/shm: unlinked once mapped, none left.
  ENV_EXTRA="COLLX_SHM_ARENA=posix"
  bench allreduce-posix-arenas -c allreduce -a hierarchical --in-place --sizes 4,65536 -w 1 -n 3
  check_run allreduce-posix-arenas hierarchical
  ENV_EXTRA=""
  # Hosts that meet through a shared directory, with no COLLX_IFNAME: each rank publishes an
  # address the other hosts reach (its eth0's; its host name resolves to nothing here), not
  # loopback. A rank that published loopback would leave its peers waiting out the connect
  # deadline (20 s here).
  FILE_STORE=1 ENV_EXTRA="COLLX_TIMEOUT=20s"
  bench allreduce-file-store -c allreduce -a ring --sizes "$SIZES" -w 1 -n 3
  check_run allreduce-file-store ring
  FILE_STORE=0 ENV_EXTRA=""
  # A cut link: 1 s into a loop of 4 MiB ring allreduces, the last host's link goes down. The
  # other hosts' ranks fail at COLLX_PEER_TIMEOUT (1 s here) after they last heard from it,
  # far before the 30 s deadline, naming a rank of the lost host (a rank whose ring
  # neighbour noticed first learns it from that neighbour). The hosts meet through the
  # shared directory: with node 0's TCP store, node 0's collx-run would keep it up for the
  # lost node for minutes after the job failed.
  lost="$(((HOSTS - 1) * RANKS))"
  FILE_STORE=1 ENV_EXTRA="COLLX_TIMEOUT=30s COLLX_PEER_TIMEOUT=1s" CUT_AFTER=1
  if run_bench cut-link -c allreduce -a ring --sizes 4194304 -w 1 -n 100000; then
    fail "cut-link: the job went on without the lost host"
  fi
  FILE_STORE=0 ENV_EXTRA="" CUT_AFTER=""
  ended=$(date +%s.%N)
  # Each other host's collx-run stops its ranks once the first of them fails: that one's
  # error, and any other rank's that came before its stop, must name a rank of the lost host.
  for ((i = 0; i < HOSTS - 1; i++)); do
    errors=$(grep -E "collx-bench: [A-Za-z]+Error" "$WORK/cut-link.$i") ||
      fail "cut-link: no rank of host $i failed with an error; it printed:
$(cat "$WORK/cut-link.$i")"
    while IFS= read -r line; do
      echo "$line" | grep -qE "IoError: .*rank ($lost|$((lost + 1))) \(tcp [^)]*\) has answered nothing" ||
        fail "cut-link: an error on host $i names no rank of the lost host: $line"
    done <<<"$errors"
  done
  took=$(awk -v a="$CUT_AT" -v b="$ended" 'BEGIN { printf "%.1f", b - a }')
  # Every host's collx-run returned (the lost host's ranks fail too: they hear nothing from
  # the others) within the peer timeout and the launchers' slack, not at the 30 s deadline.
  awk -v t="$took" 'BEGIN { exit !(t < 10) }' ||
    fail "cut-link: the job ended ${took}s after the cut (COLLX_PEER_TIMEOUT=1s)"
  host_link $((HOSTS - 1)) up
  say "ok: cut-link (every other host's errors named a rank of host $((HOSTS - 1)); ended ${took}s after the cut)"
  # TLS between the hosts (COLLX_TLS=1: node 0's store and every tcp connection across hosts),
  # one CA and certificate made by docs/running.md's OpenSSL lines; ring and hierarchical, so
  # both the ring's cross-host pairs and the leaders' carry data.
  sh "$(dirname "$0")/../util/make_tls_certs.sh" "$WORK/pki" ||
    fail "openssl could not make the TLS certificates"
  ENV_EXTRA="COLLX_TLS=1 COLLX_TLS_CERT=$WORK/pki/node.pem COLLX_TLS_KEY=$WORK/pki/node.key"
  ENV_EXTRA+=" COLLX_TLS_CA=$WORK/pki/ca.pem COLLX_LOG_LEVEL=warn,collx.tcp=info"
  for algo in ring hierarchical; do
    bench "allreduce-tls-$algo" -c allreduce -a "$algo" --sizes "$SIZES" -w 1 -n 3
    check_run "allreduce-tls-$algo" "$algo"
    grep -q "TLS on the tcp connections between ranks: TLSv1.3" "$WORK/allreduce-tls-$algo.0" ||
      fail "allreduce-tls-$algo: host 0's ranks did not say that TLS carried their connections"
  done
  ENV_EXTRA=""
  if [ -n "${VERBS_EMU:-}" ]; then
    # RDMA verbs between the hosts, on the userspace verbs device (each host's device has
    # its eth0 address as GID, its wire runs over the bridge), shared memory within.
    ENV_EXTRA="COLLX_IBVERBS_LIBRARY=$VERBS_EMU"
    XPORT=ibverbs
    bench allreduce-ibverbs-hierarchical -c allreduce -a hierarchical --sizes "$SIZES" -w 1 -n 3
    check_run allreduce-ibverbs-hierarchical hierarchical
    bench allgather-ibverbs-ring -c allgather -a ring --sizes "$SIZES" -w 1 -n 3
    check_run allgather-ibverbs-ring ring
    ENV_EXTRA=""
    XPORT=tcp
  fi
fi

# Nothing of this run may be left behind.
cleanup
trap - EXIT
leftover=$(hosts_leftover)
for env in /proc/[0-9]*/environ; do
  if { tr '\0' '\n' <"$env"; } 2>/dev/null | grep -q "^COLLX_JOB_ID=mh$ID-"; then
    leftover+=" process(${env//[^0-9]/})"
  fi
done
[ -d "$WORK" ] && leftover+=" $WORK"
[ -z "$leftover" ] || fail "left behind:$leftover"
say "passed: $HOSTS hosts x $RANKS ranks; nothing left behind"
exit 0
