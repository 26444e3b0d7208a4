#!/usr/bin/env bash
# A real Slurm cluster of N "hosts" on this one machine, for tests of collx under srun and
# mpirun. Each host is a holder process (a `sleep`) that lives in
#   - a network namespace of its own, with a veth pair to a bridge: host i is
#     198.51.100.(BASE+i)/24 (TEST-NET-2; BASE 100 by default, apart from
#     tests/api/multihost_test.sh's .10+i, and its own link names, so that both run at once),
#   - a UTS namespace with the hostname node<i>,
#   - a mount namespace with a private tmpfs on /dev/shm and the cluster's hosts file
#     (node0..node<N-1>) bind-mounted on /etc/hosts.
# One munged (in the root namespaces, its own socket and key in the state directory),
# slurmctld on host 0 and one slurmd per host (`slurmd -N node<i>`), each in its host's
# namespaces, with the cluster's own slurm.conf: no systemd, no cgroups, no accounting.
# Every host sees the same filesystem (the state directory is shared by all of them).
#
# usage: cluster.sh up [N]          N hosts (default 4); waits until sinfo shows them idle
#        cluster.sh down            stops and removes everything `up` made; idempotent
#        cluster.sh exec I CMD...   runs CMD on host I (its namespaces, with SLURM_CONF set)
#        cluster.sh mpirun ARGS...  mpirun on host 0 across all hosts (hostfile, launch agent
#                                   mpirun_agent.sh and the interface options supplied)
#        cluster.sh env             prints the `export` lines for using the cluster
#        cluster.sh status          what is up, and sinfo (exit 0: all runs, 1: some part
#                                   does not, 3: nothing is up)
#   e.g. cluster.sh up 4 && cluster.sh exec 0 srun -N 4 -n 8 hostname && cluster.sh down
# Environment:
#   COLLX_CLUSTER_DIR   state directory (default /tmp/collx-cluster): configuration, logs,
#                       spool, the PIDs and link names `down` needs. Several clusters can be
#                       up at once with different directories and tags.
#   COLLX_CLUSTER_TAG   prefix of the namespace and link names (default cxc; at most 8
#                       letters/digits); `up` records it, the other commands read it back
#   COLLX_CLUSTER_BASE  host i is 198.51.100.(BASE+i) (default 100)
#   COLLX_CLUSTER_TIMEOUT  seconds `up` waits for the nodes to be idle (default 60)
#   COLLX_CLUSTER_KEEP=1   on a failed `up`, leave what was made up for inspection
# Exit codes: 0 done, 1 failed, 2 usage, 77 this machine cannot (not root, no ip/unshare/
# nsenter/namespaces, Slurm or munge missing and not installable, or 198.51.100.0/24 in use
# here): ctest's SKIP_RETURN_CODE, with the reason printed.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SELF="$HERE/$(basename "${BASH_SOURCE[0]}")"
DIR=${COLLX_CLUSTER_DIR:-/tmp/collx-cluster}
DIR=${DIR%/}
STATE="$DIR/cluster.state"
NET=198.51.100
AGENT="$HERE/mpirun_agent.sh"

say() { echo "cluster: $*"; }
skip() {
  say "cannot: $*" >&2
  exit 77
}
fail() {
  say "FAILED: $*" >&2
  exit 1
}

# The header comment of this file.
usage() { sed -n '2,/^set -uo/p' "$SELF" | sed '$d' | sed 's/^# \{0,1\}//'; }

# ---- processes, named by pid and start time (so a reused pid is never signalled) ----

# The start time (clock ticks since boot) of process $1, or nothing.
start_of() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  # shellcheck disable=SC2086
  set -- $stat
  echo "${20}"
}

# Whether process $1 started at $2 still runs (a zombie does not).
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  # shellcheck disable=SC2086
  set -- "$2" $stat
  [ "$2" != Z ] && [ "$2" != X ] && [ "$1" = "${21}" ]
}

# Stops the processes given as PID:START words: SIGTERM to each, then SIGKILL to those left
# after $1 seconds.
stop_all() {
  local grace=$1 e t
  shift
  running() {
    for e in "$@"; do alive "${e%%:*}" "${e#*:}" && return 0; done
    return 1
  }
  for e in "$@"; do alive "${e%%:*}" "${e#*:}" && kill -TERM "${e%%:*}" 2>/dev/null; done
  for ((t = 0; t < grace * 20; t++)); do
    running "$@" || return 0
    sleep 0.05
  done
  for e in "$@"; do alive "${e%%:*}" "${e#*:}" && kill -KILL "${e%%:*}" 2>/dev/null; done
  for ((t = 0; t < 100; t++)); do
    running "$@" || return 0
    sleep 0.05
  done
  for e in "$@"; do alive "${e%%:*}" "${e#*:}" && say "warning: process ${e%%:*} did not end" >&2; done
}

# ---- the state file: one "key value..." line per thing made, appended as it is made ----

record() { echo "$*" >>"$STATE"; }

# Loads the state file into TAG, HOSTS, BASE, BRIDGE and the arrays; 1 when there is none.
declare -a NETNS=() VETH=() HOLDER=() HOLDER_START=() SLURMD=() SLURMD_START=()
load_state() {
  [ -f "$STATE" ] || return 1
  TAG="" HOSTS=0 BASE="" BRIDGE="" MUNGED="" MUNGED_START="" CTLD="" CTLD_START=""
  NETNS=() VETH=() HOLDER=() HOLDER_START=() SLURMD=() SLURMD_START=()
  local key a b c
  while read -r key a b c; do
    case $key in
      tag) TAG=$a ;;
      hosts) HOSTS=$a ;;
      base) BASE=$a ;;
      bridge) BRIDGE=$a ;;
      netns) NETNS[a]=$b ;;
      veth) VETH[a]=$b ;;
      holder) HOLDER[a]=$b HOLDER_START[a]=$c ;;
      slurmd) SLURMD[a]=$b SLURMD_START[a]=$c ;;
      munged) MUNGED=$a MUNGED_START=$b ;;
      slurmctld) CTLD=$a CTLD_START=$b ;;
    esac
  done <"$STATE"
  return 0
}

# Host $1's holder pid, if the cluster is up and it runs; fails with a message otherwise.
holder_of() {
  local i=$1
  load_state || fail "no cluster is up in $DIR (cluster.sh up first, or set COLLX_CLUSTER_DIR)"
  [[ $i =~ ^[0-9]+$ ]] && ((i < HOSTS)) || fail "no host '$i': the cluster has hosts 0..$((HOSTS - 1))"
  local pid=${HOLDER[i]:-}
  [ -n "$pid" ] && alive "$pid" "${HOLDER_START[i]}" || fail "host $i's holder process is gone"
  echo "$pid"
}

# Runs "$@" in host $1's namespaces with the cluster's environment (a pid, not an index);
# in_host exec PID ...: in place of this shell (so that a signal to it reaches "$@").
in_host() {
  local how=""
  [ "$1" = exec ] && how="exec" && shift
  local pid=$1
  shift
  local wd=/
  [ -d "$PWD" ] && wd=$PWD
  # Without this script's own COLLX_CLUSTER_* variables: collx warns about every COLLX_
  # variable that is not its own.
  $how nsenter -t "$pid" --net --uts --mount --wd="$wd" -- \
    env -u COLLX_CLUSTER_DIR -u COLLX_CLUSTER_TAG -u COLLX_CLUSTER_BASE -u COLLX_CLUSTER_TIMEOUT \
    -u COLLX_CLUSTER_KEEP SLURM_CONF="$DIR/slurm.conf" "$@"
}

# ---- down ----

cmd_down() {
  if ! load_state; then
    if [ -d "$DIR" ] && [ -z "$(ls -A "$DIR" 2>/dev/null)" ]; then rmdir "$DIR"; fi
    [ -e "$DIR" ] && fail "$DIR has no cluster.state: not a cluster's state directory, left alone"
    say "nothing is up in $DIR"
    return 0
  fi
  local i pid round
  local -a procs=()
  # The daemons first (their own shutdown), then whatever else runs in the hosts' network
  # namespaces (job steps, tasks, orted, a user's shell; again, for what they started
  # meanwhile), then the holders and munged.
  [ -n "$CTLD" ] && procs+=("$CTLD:$CTLD_START")
  for ((i = 0; i < HOSTS; i++)); do
    [ -n "${SLURMD[i]:-}" ] && procs+=("${SLURMD[i]}:${SLURMD_START[i]}")
  done
  stop_all 3 "${procs[@]}"
  for ((round = 0; round < 3; round++)); do
    procs=()
    for ((i = 0; i < HOSTS; i++)); do
      [ -n "${NETNS[i]:-}" ] || continue
      for pid in $(ip netns pids "${NETNS[i]}" 2>/dev/null); do
        [ "$pid" = "${HOLDER[i]:-}" ] && continue
        procs+=("$pid:$(start_of "$pid")")
      done
    done
    [ ${#procs[@]} = 0 ] && break
    stop_all 2 "${procs[@]}"
  done
  procs=()
  for ((i = 0; i < HOSTS; i++)); do
    [ -n "${HOLDER[i]:-}" ] && procs+=("${HOLDER[i]}:${HOLDER_START[i]}")
  done
  [ -n "$MUNGED" ] && procs+=("$MUNGED:$MUNGED_START")
  stop_all 3 "${procs[@]}"
  for ((i = 0; i < HOSTS; i++)); do
    # The pair first, at once (a namespace's own links go away asynchronously with it).
    [ -n "${VETH[i]:-}" ] && ip link del "${VETH[i]}" 2>/dev/null
    [ -n "${NETNS[i]:-}" ] && ip netns del "${NETNS[i]}" 2>/dev/null
  done
  [ -n "$BRIDGE" ] && ip link del "$BRIDGE" 2>/dev/null
  local t
  for ((t = 0; t < 100; t++)); do
    grep -qE "(^| )${TAG}[hb]" <<<"$(ip -o link show 2>/dev/null)" || break
    sleep 0.05
  done
  rm -rf "$DIR"
  local left=""
  grep -q "^collx-$TAG-" <<<"$(ip netns list 2>/dev/null)" && left+=" namespaces"
  grep -qE "(^| )${TAG}[hb]" <<<"$(ip -o link show 2>/dev/null)" && left+=" links"
  [ -e "$DIR" ] && left+=" $DIR"
  [ -z "$left" ] || fail "down left behind:$left"
  say "down: cluster $TAG stopped and removed"
}

# ---- up ----

check_machine() {
  [ "$(id -u)" = 0 ] || skip "needs root to create namespaces and start the daemons (uid $(id -u))"
  local tool
  for tool in ip unshare nsenter mount setsid; do
    command -v "$tool" >/dev/null 2>&1 || skip "no '$tool' on this machine"
  done
  ip netns list >/dev/null 2>&1 || skip "'ip netns' does not work here"
  if grep -q " $NET\." <<<"$(ip -4 addr show 2>/dev/null)" || grep -q "^$NET\." <<<"$(ip -4 route show 2>/dev/null)"; then
    skip "$NET.0/24 is already in use on this machine (ip addr / ip route)"
  fi
  ensure_packages
}

# Installs Slurm and munge when missing (a quick no-op when they are there). libpmix-dev:
# Debian's mpi_pmix plugin dlopens .../pmix2/lib/libpmix.so, the unversioned link that only
# libpmix-dev ships.
ensure_packages() {
  local missing="" tool
  for tool in slurmctld slurmd slurmstepd srun sinfo munged munge; do
    PATH="$PATH:/usr/sbin:/sbin" command -v "$tool" >/dev/null 2>&1 || missing+=" $tool"
  done
  compgen -G "/usr/lib/*/pmix2/lib/libpmix.so" >/dev/null || missing+=" libpmix.so"
  [ -z "$missing" ] && return 0
  command -v apt-get >/dev/null 2>&1 || skip "missing:$missing, and no apt-get to install them"
  say "installing Slurm and munge (missing:$missing)"
  local pkgs=(slurmctld slurmd slurm-client munge libpmix-dev)
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y --no-install-recommends "${pkgs[@]}" >"/tmp/collx-cluster-apt.$$.log" 2>&1; then
    apt-get update >>"/tmp/collx-cluster-apt.$$.log" 2>&1
    apt-get install -y --no-install-recommends "${pkgs[@]}" >>"/tmp/collx-cluster-apt.$$.log" 2>&1 || {
      tail -5 "/tmp/collx-cluster-apt.$$.log" >&2
      rm -f "/tmp/collx-cluster-apt.$$.log"
      skip "could not install ${pkgs[*]}"
    }
  fi
  rm -f "/tmp/collx-cluster-apt.$$.log"
  for tool in slurmctld slurmd srun sinfo munged; do
    PATH="$PATH:/usr/sbin:/sbin" command -v "$tool" >/dev/null 2>&1 || skip "no $tool even after installing"
  done
}

write_slurm_conf() {
  local conf="$DIR/slurm.conf" i
  cat >"$conf" <<EOF
# Written by $SELF for the cluster in $DIR.
ClusterName=$TAG
SlurmctldHost=node0($NET.$BASE)
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
# Per host: Slurm's PMIx plugin puts its clients' directory (spmix_appdir_*) there, and
# /tmp is one directory for all hosts here.
TmpFS=$DIR/tmp/%n
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
PropagateResourceLimits=NONE
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=10
SlurmdTimeout=10
MessageTimeout=5
TCPTimeout=2
KillWait=2
InactiveLimit=0
MinJobAge=10
Waittime=0
NodeName=DEFAULT CPUs=2 RealMemory=1000 State=UNKNOWN
EOF
  for ((i = 0; i < HOSTS; i++)); do
    echo "NodeName=node$i NodeAddr=$NET.$((BASE + i))" >>"$conf"
  done
  echo "PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4" >>"$conf"
}

# Prints the last lines of every log of the cluster (after a failure).
show_logs() {
  local f
  for f in "$DIR"/log/*; do
    [ -s "$f" ] || continue
    echo "---- $f (last 25 lines)" >&2
    tail -25 "$f" >&2
  done
}

up_failed() {
  say "FAILED: $*" >&2
  show_logs
  if [ "${COLLX_CLUSTER_KEEP:-0}" = 1 ]; then
    say "left up for inspection (COLLX_CLUSTER_KEEP=1): $SELF down when done" >&2
  else
    cmd_down >/dev/null 2>&1 || true
  fi
  exit 1
}

# Starts "$@" in the background in a session of its own (setsid execs: no fork, as this
# shell's children lead no process group), output to log/$1.out; sets PID and START.
spawn() {
  local name=$1
  shift
  setsid "$@" </dev/null >>"$DIR/log/$name.out" 2>&1 &
  PID=$!
  START=$(start_of "$PID") || START=0
}

cmd_up() {
  local n=${1:-4}
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 64)) || { say "N must be 1..64, not '$n'" >&2; exit 2; }
  TAG=${COLLX_CLUSTER_TAG:-cxc}
  [[ $TAG =~ ^[a-z][a-z0-9]{0,7}$ ]] || { say "COLLX_CLUSTER_TAG: 1..8 lowercase letters and digits, not '$TAG'" >&2; exit 2; }
  BASE=${COLLX_CLUSTER_BASE:-100}
  [[ $BASE =~ ^[0-9]+$ ]] && ((BASE >= 1 && BASE + n <= 255)) ||
    { say "COLLX_CLUSTER_BASE=$BASE: 198.51.100.(BASE..BASE+N-1) must lie in 1..254" >&2; exit 2; }
  local timeout=${COLLX_CLUSTER_TIMEOUT:-60}
  # Slurm's and PMIx's unix sockets live under it (at most 108 bytes to a socket's path).
  [[ $DIR == /* && $DIR != *[[:space:]]* && ${#DIR} -le 60 ]] ||
    { say "COLLX_CLUSTER_DIR: an absolute path of at most 60 characters without spaces, not '$DIR'" >&2; exit 2; }
  check_machine
  if load_state; then
    if [ -n "${HOLDER[0]:-}" ] && alive "${HOLDER[0]}" "${HOLDER_START[0]}"; then
      fail "a cluster is already up in $DIR ($HOSTS hosts, tag $TAG): cluster.sh down first"
    fi
    say "removing a stale cluster's state in $DIR"
    cmd_down >/dev/null
  fi
  TAG=${COLLX_CLUSTER_TAG:-cxc}
  BASE=${COLLX_CLUSTER_BASE:-100}
  HOSTS=$n
  BRIDGE="${TAG}br"
  trap 'up_failed "interrupted"' INT TERM HUP
  local t0=$EPOCHREALTIME i
  if ip -o link show "$BRIDGE" >/dev/null 2>&1 || grep -q "^collx-$TAG-" <<<"$(ip netns list 2>/dev/null)"; then
    fail "links or namespaces named for tag $TAG exist already (another cluster with that tag? COLLX_CLUSTER_TAG=...)"
  fi
  [ -e "$DIR" ] && [ -n "$(ls -A "$DIR" 2>/dev/null)" ] && fail "$DIR exists and is not empty"
  mkdir -p "$DIR" && chmod 755 "$DIR" || fail "cannot create $DIR"
  mkdir -p "$DIR"/{log,run,ctld,spool,tmp,munge,store}
  chmod 755 "$DIR/munge"
  echo "# collx test cluster state: what cluster.sh up made, for cluster.sh down" >"$STATE"
  record tag "$TAG"
  record hosts "$HOSTS"
  record base "$BASE"

  # The hosts file every host sees as /etc/hosts, and Open MPI's hostfile.
  {
    echo "127.0.0.1 localhost"
    echo "::1 localhost ip6-localhost ip6-loopback"
    for ((i = 0; i < HOSTS; i++)); do echo "$NET.$((BASE + i)) node$i"; done
  } >"$DIR/hosts"
  : >"$DIR/hostfile"
  for ((i = 0; i < HOSTS; i++)); do
    echo "node$i slots=2" >>"$DIR/hostfile"
    mkdir -p "$DIR/spool/node$i" "$DIR/tmp/node$i"
  done

  # The bridge, and per host a namespace, a veth pair and the holder.
  ip link add "$BRIDGE" type bridge 2>/dev/null || up_failed "cannot create bridge $BRIDGE"
  record bridge "$BRIDGE"
  ip link set "$BRIDGE" up
  for ((i = 0; i < HOSTS; i++)); do
    local ns="collx-$TAG-$i" vh="${TAG}h$i" vn="${TAG}n$i"
    if ! err=$(ip netns add "$ns" 2>&1); then
      ((i == 0)) && { cmd_down >/dev/null 2>&1; skip "cannot create a network namespace: $err"; }
      up_failed "ip netns add $ns: $err"
    fi
    record netns "$i" "$ns"
    ip link add "$vh" type veth peer name "$vn" || up_failed "veth pair for host $i"
    record veth "$i" "$vh"
    ip link set "$vh" master "$BRIDGE" up &&
      ip link set "$vn" netns "$ns" &&
      ip -n "$ns" link set "$vn" name eth0 &&
      ip -n "$ns" addr add "$NET.$((BASE + i))/24" dev eth0 &&
      ip -n "$ns" link set eth0 up &&
      ip -n "$ns" link set lo up || up_failed "network of host $i"
    rm -f "$DIR/run/holder$i.ready"
    # As `ip netns exec` does, a sysfs of the host's network namespace on /sys (its
    # /sys/class/net: lo and eth0), but with this machine's cgroup mounts bound on its
    # /sys/fs/cgroup, which slurmd 22.05 needs even with no cgroup plugin configured
    # ("No filesystem mounted on /sys/fs/cgroup ... Unable to initialize cgroup plugin").
    # shellcheck disable=SC2016
    spawn "holder$i" nsenter --net="/run/netns/$ns" \
      unshare --uts --mount --propagation private sh -c '
        hostname "$1" && mount -t tmpfs -o mode=1777 tmpfs /dev/shm &&
          mount --bind "$2" /etc/hosts || exit 90
        if [ -d /sys/fs/cgroup ] && exec 3</sys/fs/cgroup; then
          if mount -t sysfs sysfs /sys; then
            mount --no-canonicalize --rbind /proc/self/fd/3 /sys/fs/cgroup ||
              { echo "cannot bind the cgroup mounts into a new sysfs: keeping the old" >&2; umount /sys; }
          fi
          exec 3<&-
        fi
        : >"$3"
        exec sleep infinity' sh "node$i" "$DIR/hosts" "$DIR/run/holder$i.ready"
    record holder "$i" "$PID" "$START"
  done
  local deadline=$((SECONDS + 10))
  for ((i = 0; i < HOSTS; i++)); do
    while [ ! -e "$DIR/run/holder$i.ready" ]; do
      load_state
      alive "${HOLDER[i]}" "${HOLDER_START[i]}" || {
        ((i == 0)) && grep -qiE "operation not permitted|unshare failed" "$DIR/log/holder0.out" 2>/dev/null && {
          cat "$DIR/log/holder0.out" >&2
          cmd_down >/dev/null 2>&1
          skip "cannot unshare uts and mount namespaces"
        }
        up_failed "host $i's holder ended"
      }
      ((SECONDS < deadline)) || up_failed "host $i's holder not ready after 10 s"
      sleep 0.05
    done
  done
  load_state
  # Each holder is the `sleep` now (setsid, nsenter, unshare and sh all exec), in node<i>.
  for ((i = 0; i < HOSTS; i++)); do
    [ "$(cat "/proc/${HOLDER[i]}/comm" 2>/dev/null)" = sleep ] || up_failed "host $i's holder is not the sleep"
    [ "$(in_host "${HOLDER[i]}" hostname)" = "node$i" ] || up_failed "host $i's hostname is not node$i"
  done

  # munged: its own key, socket, pid, log and seed files.
  head -c 1024 /dev/urandom >"$DIR/munge/munge.key" && chmod 400 "$DIR/munge/munge.key" ||
    up_failed "cannot write the munge key"
  spawn munged munged --foreground --force \
    --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" \
    --seed-file="$DIR/munge/munged.seed"
  record munged "$PID" "$START"
  deadline=$((SECONDS + 10))
  until munge -n -S "$DIR/munge/munge.socket" 2>/dev/null | unmunge -S "$DIR/munge/munge.socket" >/dev/null 2>&1; do
    alive "$PID" "$START" || up_failed "munged ended"
    ((SECONDS < deadline)) || up_failed "munged does not answer on $DIR/munge/munge.socket"
    sleep 0.1
  done

  write_slurm_conf
  load_state
  spawn slurmctld nsenter -t "${HOLDER[0]}" --net --uts --mount -- \
    env SLURM_CONF="$DIR/slurm.conf" slurmctld -D -i -f "$DIR/slurm.conf"
  record slurmctld "$PID" "$START"
  for ((i = 0; i < HOSTS; i++)); do
    spawn "slurmd.node$i" nsenter -t "${HOLDER[i]}" --net --uts --mount -- \
      env SLURM_CONF="$DIR/slurm.conf" slurmd -D -N "node$i" -f "$DIR/slurm.conf"
    record slurmd "$i" "$PID" "$START"
  done

  # Until sinfo shows every node idle.
  deadline=$((SECONDS + timeout))
  local idle states
  while :; do
    load_state
    alive "$MUNGED" "$MUNGED_START" || up_failed "munged ended"
    alive "$CTLD" "$CTLD_START" || up_failed "slurmctld ended (log/slurmctld.log)"
    for ((i = 0; i < HOSTS; i++)); do
      alive "${SLURMD[i]}" "${SLURMD_START[i]}" || up_failed "slurmd of node$i ended (log/slurmd.node$i.log)"
    done
    states=$(in_host "${HOLDER[0]}" sinfo -h -N -o '%N %t' 2>/dev/null)
    idle=$(grep -c ' idle$' <<<"$states")
    ((idle == HOSTS)) && break
    ((SECONDS < deadline)) || up_failed "after ${timeout}s, $idle of $HOSTS nodes idle; sinfo: $(tr '\n' ' ' <<<"$states")"
    sleep 0.25
  done
  say "up: $HOSTS host(s) node0..node$((HOSTS - 1)) ($NET.$BASE..$NET.$((BASE + HOSTS - 1)), tag $TAG), all idle, in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s; state in $DIR"
  cat <<EOF
  run on host 0:   $SELF exec 0 srun -N $HOSTS -n $((2 * HOSTS)) hostname
  with PMIx:       $SELF exec 0 srun --mpi=pmix -N $HOSTS -n $((2 * HOSTS)) env
  Open MPI:        $SELF mpirun -np $((2 * HOSTS)) hostname
  a shell there:   $SELF exec 0 bash
  the environment: $SELF env     (commands must run inside a host: the bridge has no
                   address here, so sinfo/srun in this namespace cannot reach slurmctld)
  stop:            $SELF down
EOF
}

# ---- exec, mpirun, env, status ----

cmd_exec() {
  [ $# -ge 2 ] || { say "usage: cluster.sh exec I CMD..." >&2; exit 2; }
  local pid
  pid=$(holder_of "$1") || exit 1
  shift
  in_host exec "$pid" "$@"
}

mpirun_args() {
  MPIRUN_ARGS=(--allow-run-as-root --hostfile "$DIR/hostfile"
    --mca plm_rsh_agent "$AGENT --cluster-dir $DIR" --mca oob_tcp_if_include "$NET.0/24"
    --mca btl_tcp_if_include "$NET.0/24")
}

cmd_mpirun() {
  local pid
  pid=$(holder_of 0) || exit 1
  command -v mpirun >/dev/null 2>&1 || fail "no mpirun (Debian: openmpi-bin)"
  mpirun_args
  in_host exec "$pid" mpirun "${MPIRUN_ARGS[@]}" "$@"
}

cmd_env() {
  load_state || fail "no cluster is up in $DIR"
  cat <<EOF
# The cluster in $DIR: $HOSTS hosts node0..node$((HOSTS - 1)) ($NET.$BASE..). Slurm and mpirun
# work inside a host only: \`$SELF exec 0 bash\`, then eval these lines there
# (\`eval "\$($SELF env)"\`); then srun ... and mpirun -np N ... need no more options.
export SLURM_CONF=$DIR/slurm.conf
export OMPI_MCA_orte_default_hostfile=$DIR/hostfile
export OMPI_MCA_plm_rsh_agent="$AGENT --cluster-dir $DIR"
export OMPI_MCA_oob_tcp_if_include=$NET.0/24
export OMPI_MCA_btl_tcp_if_include=$NET.0/24
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
EOF
}

cmd_status() {
  if ! load_state; then
    say "nothing is up in $DIR"
    return 3
  fi
  local i ok=0
  say "cluster $TAG in $DIR: $HOSTS hosts"
  show() { if [ -n "$2" ] && alive "$2" "$3"; then echo "  $1: pid $2"; else echo "  $1: NOT RUNNING"; ok=1; fi; }
  show munged "$MUNGED" "$MUNGED_START"
  show "slurmctld (node0)" "$CTLD" "$CTLD_START"
  for ((i = 0; i < HOSTS; i++)); do
    show "host $i: holder" "${HOLDER[i]:-}" "${HOLDER_START[i]:-}"
    show "host $i: slurmd node$i ($NET.$((BASE + i)), ${NETNS[i]:-})" "${SLURMD[i]:-}" "${SLURMD_START[i]:-}"
  done
  if [ -n "${HOLDER[0]:-}" ] && alive "${HOLDER[0]}" "${HOLDER_START[0]}"; then
    in_host "${HOLDER[0]}" sinfo -N -o '%N %t %c %O' 2>&1 | sed 's/^/  /'
  fi
  return $ok
}

# ---- main ----

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  up) cmd_up "$@" ;;
  down) cmd_down ;;
  exec) cmd_exec "$@" ;;
  mpirun) cmd_mpirun "$@" ;;
  env) cmd_env ;;
  status) cmd_status ;;
  -h | --help | help) usage ;;
  *)
    [ -n "$cmd" ] && say "unknown command '$cmd'" >&2
    usage >&2
    exit 2
    ;;
esac
