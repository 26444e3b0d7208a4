#!/usr/bin/env bash
# collx under a real mpirun with nothing set: the PMIx bootstrap (rank and size from the
# PMIx server mpirun gives every process, rank 0's TCP store passed through PMIx) on this
# host. Checks:
#   - mpirun -np 4 collx-bench: P=4, every size right, shm between the ranks;
#   - collx-info --rendezvous says where each value came from (launcher pmix, the store
#     rank 0 started, the secret it passed);
#   - an explicit store (COLLX_STORE) still wins: Open MPI's variables give the rank;
#   - COLLX_STORE=pmix:// with TLS (with_tls.sh): the store and the ranks' connections in TLS;
#   - a rank killed mid-run: a rank fails with an IoError naming it, mpirun reports it and
#     exits non-zero;
#   - PMIx variables that name no server: a clear IoError at once;
#   - with PYTHON_DIR: the Python module (collx.init()) and, with TORCH=1, the torch backend
#     (init_process_group("collx") with none of torch's variables) under mpirun.
# usage: pmix_test.sh BIN_DIR [PYTHON_DIR]     (TORCH=1 for the torch check)
# Exit codes: 0 passed, 1 failed, 77 skipped (no mpirun, or collx built without PMIx).
set -uo pipefail

BIN=${1:?usage: pmix_test.sh BIN_DIR [PYTHON_DIR]}
PYDIR=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=util/bench_output.sh
. "$HERE/../util/bench_output.sh"
WORK=$(mktemp -d /tmp/collx-pmix-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

say() { echo "pmix_test: $*"; }
skip() {
  say "SKIPPED: $*"
  exit 77
}
fail() {
  say "FAILED: $*"
  exit 1
}

command -v mpirun >/dev/null 2>&1 || skip "no mpirun (Debian's openmpi-bin)"
features=$("$BIN/collx-info") || fail "collx-info failed"
grep -q "PMIx bootstrap and store  *yes" <<<"$features" ||
  skip "this collx was built without PMIx: $(grep "PMIx bootstrap" <<<"$features")"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 COLLX_TIMEOUT=30s
MPIRUN=(timeout -k 10 120 mpirun --oversubscribe --mca btl self --mca oob_tcp_if_include lo)

# 1. collx-bench with nothing set.
out=$WORK/bench
"${MPIRUN[@]}" -np 4 "$BIN/collx-bench" -c allreduce --sizes 4,65536,1048576 >"$out" 2>&1 ||
  fail "mpirun -np 4 collx-bench: exit $?: $(tail -5 "$out")"
line=$(check_bench "$out" "mpirun -np 4 collx-bench" 4 1 "shm" "") || fail "$line"
[ "$(grep -cE '^ +[0-9]+ +[0-9]+ +float32' "$out")" = 3 ] || fail "collx-bench: not 3 sizes: $(cat "$out")"
say "mpirun -np 4 collx-bench: P=4, 3 sizes right"

# 2. Where each value came from.
out=$WORK/info
"${MPIRUN[@]}" -np 2 "$BIN/collx-info" --rendezvous >"$out" 2>&1 ||
  fail "collx-info --rendezvous: $(tail -5 "$out")"
for line in "launcher pmix" "  rank from PMIx (namespace" "  world size from PMIx" \
  "store from tcp://127.0.0.1:" "a TCP store hosted by rank 0, its address passed through PMIx" \
  "secret from rank 0's, passed through PMIx"; do
  [ "$(grep -c -F "$line" "$out")" = 2 ] || fail "collx-info: both ranks should say '$line': $(cat "$out")"
done
say "collx-info --rendezvous: launcher pmix, rank 0's store and secret through PMIx"

# 3. An explicit store wins over PMIx.
out=$WORK/explicit
"${MPIRUN[@]}" -np 2 -x COLLX_STORE="file://$WORK/store" -x COLLX_JOB_ID=explicit \
  "$BIN/collx-info" --rendezvous >"$out" 2>&1 || fail "COLLX_STORE under mpirun: $(tail -5 "$out")"
[ "$(grep -c "launcher openmpi, store file://" "$out")" = 2 ] ||
  fail "an explicit store should leave rank and size to Open MPI's variables: $(cat "$out")"
say "COLLX_STORE set: Open MPI's variables, the given store"

# 3b. COLLX_STORE=pmix:// with a rank of collx's own: it must be PMIx's.
out=$WORK/asked
"${MPIRUN[@]}" -np 2 -x COLLX_STORE=pmix:// -x COLLX_RANK=0 -x COLLX_WORLD_SIZE=2 \
  "$BIN/collx-info" --rendezvous >"$out" 2>&1 && fail "COLLX_RANK=0 on both ranks with pmix:// passed: $(cat "$out")"
grep -q "InvalidArgument: .*rank 0 of 2 (COLLX_RANK=0) is not PMIx's rank 1 of 2, which COLLX_STORE=pmix:// relies on" "$out" ||
  fail "COLLX_STORE=pmix:// with a contradicting COLLX_RANK: $(cat "$out")"
say "COLLX_STORE=pmix:// with COLLX_RANK=0 on every rank: rank 1 refuses, naming both"

# 4. pmix:// asked for, in TLS.
out=$WORK/tls
COLLX_STORE=pmix:// sh "$HERE/with_tls.sh" "${MPIRUN[@]}" -np 3 -x COLLX_STORE -x COLLX_TLS \
  -x COLLX_TLS_CERT -x COLLX_TLS_KEY -x COLLX_TLS_CA -x COLLX_TRANSPORT -x COLLX_LOG_LEVEL \
  "$BIN/collx-bench" -c allreduce --sizes 4,65536 >"$out" 2>&1 ||
  fail "COLLX_STORE=pmix:// in TLS: $(tail -5 "$out")"
line=$(check_bench "$out" "pmix:// in TLS" 3 1 "tcp" "") || fail "$line"
say "COLLX_STORE=pmix:// with COLLX_TLS=1: P=3 over TLS"

# 5. A rank killed mid-run: the ranks that notice first fail naming it (mpirun then ends
#    the job, and may end a rank before it has said so), and mpirun reports the signal.
out=$WORK/killed
start=$(date +%s)
# (Rank 2 dies 1 s after rank 0 printed its table's head: the job formed and timing.)
"${MPIRUN[@]}" -np 3 sh -c '
  if [ "$PMIX_RANK" = 2 ]; then
    (n=0; until grep -q "^# *size" "$1" || [ $n -ge 300 ]; do sleep 0.1; n=$((n + 1)); done
     sleep 1; kill -KILL $$) &
  fi
  exec "$0" -c allreduce --sizes 65536 -n 1000000' "$BIN/collx-bench" "$out" >"$out" 2>&1
code=$?
elapsed=$(($(date +%s) - start))
[ "$code" != 0 ] || fail "mpirun exited 0 although rank 2 was killed"
grep -q "IoError: rank [01]: .*rank 2 (pid [0-9]*) exited without closing its context" "$out" ||
  fail "no rank failed with an IoError naming rank 2: $(cat "$out")"
grep -q "process rank 2 .* exited on signal 9" "$out" || fail "mpirun did not report rank 2's signal: $(cat "$out")"
[ "$elapsed" -lt 25 ] || fail "the job took ${elapsed}s to end after rank 2 died"
say "rank 2 killed: $(grep -c "IoError.*rank 2" "$out") rank(s) failed naming it, mpirun exit $code, ${elapsed}s"

# 6. PMIx variables that name no server.
out=$WORK/dead
env PMIX_NAMESPACE=4242 PMIX_RANK=0 PMIX_SERVER_URI41="4241.0;tcp4://127.0.0.1:9" \
  PMIX_SERVER_URI4="4241.0;tcp4://127.0.0.1:9" timeout 20 "$BIN/collx-info" --rendezvous >"$out" 2>&1
code=$?
[ "$code" = 1 ] || fail "a dead PMIx server: exit $code, expected 1: $(cat "$out")"
grep -q "IoError: .*PMIx_Init failed.*PMIX_NAMESPACE=4242.*unset the PMIX_\* variables or set COLLX_STORE" "$out" ||
  fail "a dead PMIx server: $(cat "$out")"
say "PMIx variables without a server: $(cut -c1-90 "$out")..."

# 6a. A PMIx server that takes the connection and never answers: a TimeoutError at
#     COLLX_TIMEOUT, not a hang.
/usr/bin/python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
print(s.getsockname()[1], flush=True)
time.sleep(60)' >"$WORK/silent.port" &
silent=$!
for _ in $(seq 50); do [ -s "$WORK/silent.port" ] && break; sleep 0.1; done
port=$(cat "$WORK/silent.port")
start=$(date +%s)
env COLLX_TIMEOUT=2s PMIX_NAMESPACE=4242 PMIX_RANK=0 PMIX_SERVER_URI41="4241.0;tcp4://127.0.0.1:$port" \
  timeout 20 "$BIN/collx-info" --rendezvous >"$out" 2>&1
code=$?
elapsed=$(($(date +%s) - start))
kill "$silent" 2>/dev/null
wait "$silent" 2>/dev/null
[ "$code" = 1 ] && grep -q "TimeoutError: .*PMIx_Init did not return in time.*PMIX_NAMESPACE=4242" "$out" ||
  fail "a silent PMIx server: exit $code after ${elapsed}s: $(cat "$out")"
[ "$elapsed" -lt 10 ] || fail "a silent PMIx server held collx-info ${elapsed}s with COLLX_TIMEOUT=2s"
say "a silent PMIx server: TimeoutError after ${elapsed}s (COLLX_TIMEOUT=2s)"

# 6b. A host whose /etc/hosts maps its own name to 127.0.1.1 (Debian's default) is reached
#     by its interface's address across hosts (root and unshare only).
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null 2>&1 &&
  unshare --uts --mount true 2>/dev/null; then
  printf '127.0.0.1 localhost\n127.0.1.1 collx-loopback-host\n' >"$WORK/hosts"
  address=$(unshare --uts --mount sh -c 'hostname collx-loopback-host &&
    mount --bind "$1" /etc/hosts && "$2"' sh "$WORK/hosts" "$BIN/collx-info" | tr -s ' \n' ' ' |
    sed -n 's/.*reachable address ([^)]*): \([^ ]*\).*/\1/p')
  case $address in
    collx-loopback-host | 127.* | "") fail "a host whose name is 127.0.1.1 gives '$address'" ;;
  esac
  say "a host whose name is 127.0.1.1: rank 0 would give $address"
else
  say "(not root or no unshare: the reachable-address check is left out)"
fi

# 7. Python and torch.
if [ -n "$PYDIR" ]; then
  out=$WORK/python
  "${MPIRUN[@]}" -np 3 -x PYTHONPATH="$PYDIR" /usr/bin/python3 -c '
import numpy as np, collx
c = collx.init()
a = np.full(5, c.rank + 1, dtype=np.float32)
c.allreduce(a)
assert (a == 6).all(), a
print("python rank %d of %d ok" % (c.rank, c.size))' >"$out" 2>&1 || fail "Python under mpirun: $(tail -5 "$out")"
  [ "$(grep -o "python rank . of 3 ok" "$out" | wc -l)" = 3 ] || fail "Python under mpirun: $(cat "$out")"
  say "collx.init() under mpirun: 3 ranks"
  if [ "${TORCH:-0}" = 1 ]; then
    out=$WORK/torch
    "${MPIRUN[@]}" -np 3 -x PYTHONPATH="$PYDIR" /usr/bin/python3 -c '
import os, torch, torch.distributed as dist
import collx.torch
assert "RANK" not in os.environ and "MASTER_ADDR" not in os.environ
dist.init_process_group("collx")
t = torch.ones(4) * (dist.get_rank() + 1)
dist.all_reduce(t)
assert t.tolist() == [6.0] * 4, t
print("torch rank %d of %d ok" % (dist.get_rank(), dist.get_world_size()))
dist.destroy_process_group()' >"$out" 2>&1 || fail "torch under mpirun: $(tail -5 "$out")"
    [ "$(grep -o "torch rank . of 3 ok" "$out" | wc -l)" = 3 ] || fail "torch under mpirun: $(cat "$out")"
    say "init_process_group(\"collx\") under mpirun, nothing set: 3 ranks"
  fi
fi
say "passed"
