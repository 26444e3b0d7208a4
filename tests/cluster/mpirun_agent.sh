#!/usr/bin/env bash
# Open MPI's rsh launch agent for the test cluster of cluster.sh: in place of ssh, runs the
# command that mpirun (or an orted, when it spreads the daemons as a tree) gives for host
# node<i> in that host's namespaces (nsenter into its holder's network, UTS and mount
# namespaces), as ssh would: the words after the host joined into one line for /bin/sh, and
# an environment as a remote login would have it (PATH, LD_LIBRARY_PATH, HOME, and the
# cluster's SLURM_CONF), not mpirun's.
#
# usage: mpirun --mca plm_rsh_agent "/path/mpirun_agent.sh --cluster-dir DIR" \
#               --hostfile DIR/hostfile ... PROGRAM
#        mpirun_agent.sh [--cluster-dir DIR] [ssh-style options] HOST COMMAND...
#   DIR: the cluster's state directory (default: $COLLX_CLUSTER_DIR, else /tmp/collx-cluster);
#   given in the agent's string, it reaches the orteds too, which start further orteds
#   through this agent when mpirun spreads them as a tree (routed_radix).
#   HOST: node<i>, or its address (198.51.100.x), optionally user@ before it. Open MPI 4.1.4
#   calls an agent that is not ssh/rsh/qrsh with no option, as `AGENT HOST " orted -mca ..."`
#   (the whole command one word); ssh-style options (-x, -T, -l USER, -p PORT, -o OPT, ...)
#   are accepted and ignored all the same.
#   MPIRUN_AGENT_LOG=FILE: append each call's arguments to FILE (also the orteds' calls).
# cluster.sh mpirun ARGS... supplies this agent, the hostfile and the interface options.
# Nothing named COLLX_* is put into the hosts' environment: collx warns about each unknown
# COLLX_ variable it finds.
# Exit codes: the command's; 255 when the host is not one of the cluster's or is down (as
# ssh's 255 for a connection failure).
set -uo pipefail

DIR=${COLLX_CLUSTER_DIR:-/tmp/collx-cluster}

say() { echo "mpirun_agent: $*" >&2; }
fail() {
  say "$*"
  exit 255
}

[ -n "${MPIRUN_AGENT_LOG:-}" ] && echo "$(date +%T.%N) [$(hostname)] $0$(printf " %q" "$@")" >>"$MPIRUN_AGENT_LOG"

while [ $# -gt 0 ]; do
  case $1 in
    -h | --help)
      sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    --cluster-dir)
      DIR=${2:?--cluster-dir DIR}
      shift 2
      ;;
    --cluster-dir=*)
      DIR=${1#*=}
      shift
      ;;
    --)
      shift
      break
      ;;
    # ssh's options that take a value.
    -[BbcDEeFIiJLlmOopQRSWw])
      [ $# -ge 2 ] || fail "option $1 without its value"
      shift 2
      ;;
    -*) shift ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || fail "usage: mpirun_agent.sh [options] HOST COMMAND..."
host=${1#*@}
shift
[ $# -ge 1 ] || fail "no command for $host (an interactive login is not supported)"
DIR=${DIR%/}
STATE="$DIR/cluster.state"
[ -f "$STATE" ] || fail "no cluster is up in $DIR (set COLLX_CLUSTER_DIR)"

# The host's index: node<i> by name, or its address through the cluster's hosts file.
index=""
if [[ $host =~ ^node([0-9]+)$ ]]; then
  index=${BASH_REMATCH[1]}
else
  name=$(awk -v h="$host" '$1 == h { print $2; exit }' "$DIR/hosts" 2>/dev/null)
  [[ $name =~ ^node([0-9]+)$ ]] && index=${BASH_REMATCH[1]}
fi
[ -n "$index" ] || fail "$host is not a host of the cluster in $DIR (node0.. or their addresses)"
read -r pid start < <(awk -v i="$index" '$1 == "holder" && $2 == i { print $3, $4 }' "$STATE")
[ -n "${pid:-}" ] || fail "$host: no such host in the cluster in $DIR"
command="$*"
# The holder must be the one cluster.sh started (its start time, field 22 of its stat).
stat=$(cat "/proc/$pid/stat" 2>/dev/null) || fail "$host is down (its holder $pid is gone)"
stat=${stat##*) }
# shellcheck disable=SC2086
set -- $stat
[ "${20}" = "$start" ] || fail "$host is down (its holder $pid is gone)"

wd=/
[ -d "${HOME:-/root}" ] && wd=${HOME:-/root}
env=(PATH="${PATH:-/usr/local/bin:/usr/bin:/bin}" HOME="${HOME:-/root}" USER="$(id -un)"
  LOGNAME="$(id -un)" SHELL=/bin/sh SLURM_CONF="$DIR/slurm.conf")
[ -n "${LD_LIBRARY_PATH:-}" ] && env+=(LD_LIBRARY_PATH="$LD_LIBRARY_PATH")
[ -n "${MPIRUN_AGENT_LOG:-}" ] && env+=(MPIRUN_AGENT_LOG="$MPIRUN_AGENT_LOG")
exec nsenter -t "$pid" --net --uts --mount --wd="$wd" -- env -i "${env[@]}" /bin/sh -c "$command"
