# Sourced by the scripts that simulate several hosts on this machine (tests/api/
# multihost_test.sh, tests/api/multihost_trials.sh): each "host" is a network namespace with a
# veth pair to a bridge (198.51.100.0/24, TEST-NET-2; host i is 198.51.100.(10+i)), and what
# runs on it runs inside `unshare --uts --mount` with a host name and a /dev/shm (a tmpfs) of
# its own, so that collx sees hosts with different identities. Written once here.
#
#   hosts_init ID HOSTS      names for this run (NH_PREFIX, NH_BRIDGE, NH_NET); no side effect
#   hosts_unusable           prints why hosts cannot be made here (not root, a missing tool,
#                            the subnet in use) and returns 0; returns 1 when they can
#   hosts_create [RATE]      the bridge, namespaces and pairs (RATE: a tbf limit per host's
#                            link, e.g. 1gbit); prints why and returns 1 on failure, 2 when
#                            namespaces cannot be made at all (a skip)
#   host_addr I              host I's address
#   host_run I OUT SHM CMD...  CMD on host I (its output to OUT, the host's /dev/shm listing
#                            to SHM once CMD ended), bounded by HOST_RUN_TIMEOUT seconds
#                            (default 60); returns CMD's exit code
#   host_link I up|down      host I's link at the bridge (down: a cut cable, no FIN, no RST)
#   hosts_remove             deletes what hosts_create made, by name; safe to call twice
#   hosts_leftover           prints what of this run is still there (namespaces, links)

hosts_init() {  # ID HOSTS
  NH_ID=$1
  NH_HOSTS=$2
  NH_NET=198.51.100
  NH_PREFIX="collx-mh-$NH_ID"
  NH_BRIDGE="cxb$NH_ID"
}

hosts_unusable() {
  local tool
  if [ "$(id -u)" != 0 ]; then
    echo "needs root to create network namespaces (uid $(id -u))"
    return 0
  fi
  for tool in ip unshare mount hostname; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "no '$tool' on this machine"
      return 0
    fi
  done
  if grep -q " $NH_NET\." <<<"$(ip -4 addr show 2>/dev/null)" ||
    grep -q "^$NH_NET\." <<<"$(ip -4 route show 2>/dev/null)"; then
    echo "$NH_NET.0/24 is already in use on this machine (ip addr / ip route)"
    return 0
  fi
  return 1
}

host_addr() { echo "$NH_NET.$((10 + $1))"; }

hosts_create() {  # [RATE]
  local rate=${1:-} err i ns
  if ! err=$(ip netns add "$NH_PREFIX-0" 2>&1); then
    echo "cannot create a network namespace: $err"
    return 2
  fi
  if ! err=$(ip netns exec "$NH_PREFIX-0" unshare --uts --mount true 2>&1); then
    echo "cannot unshare uts and mount namespaces: $err"
    return 2
  fi
  ip link add "$NH_BRIDGE" type bridge || { echo "cannot create bridge $NH_BRIDGE"; return 1; }
  ip link set "$NH_BRIDGE" up
  for ((i = 0; i < NH_HOSTS; i++)); do
    ns="$NH_PREFIX-$i"
    [ "$i" = 0 ] || ip netns add "$ns" || { echo "ip netns add $ns"; return 1; }
    ip link add "cxv${NH_ID}h$i" type veth peer name "cxv${NH_ID}n$i" ||
      { echo "veth for host $i"; return 1; }
    ip link set "cxv${NH_ID}h$i" master "$NH_BRIDGE" up
    ip link set "cxv${NH_ID}n$i" netns "$ns"
    ip -n "$ns" link set "cxv${NH_ID}n$i" name eth0
    ip -n "$ns" addr add "$(host_addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    if [ -n "$rate" ]; then
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 1mb latency 50ms ||
        { echo "tc tbf $rate on host $i"; return 1; }
    fi
  done
  if command -v ping >/dev/null; then
    for ((i = 1; i < NH_HOSTS; i++)); do
      ip netns exec "$NH_PREFIX-$i" ping -c 1 -W 2 "$(host_addr 0)" >/dev/null 2>&1 ||
        { echo "host $i cannot reach host 0 at $(host_addr 0) over the bridge"; return 1; }
    done
  fi
  return 0
}

host_run() {  # I OUT SHM CMD...
  local i=$1 out=$2 shm=$3
  shift 3
  ip netns exec "$NH_PREFIX-$i" unshare --uts --mount sh -c '
    hostname "$1" && mount -t tmpfs tmpfs /dev/shm || exit 90
    out=$2; shm=$3; limit=$4; shift 4
    # (bounded also if the command itself hangs: SIGTERM, which collx-run forwards to its ranks)
    timeout -k 10 "$limit" env $ENV_EXTRA "$@" >"$out" 2>&1
    code=$?
    [ "$code" = 124 ] && echo "host_run: $1 did not end within $limit s" >>"$out"
    ls -A /dev/shm >"$shm"
    exit $code' sh "$NH_PREFIX-host$i" "$out" "$shm" "${HOST_RUN_TIMEOUT:-60}" "$@"
}

host_link() {  # I up|down (up: both ends; a rank may have taken its own side down, cut=eth0)
  ip link set "cxv${NH_ID}h$1" "$2"
  [ "$2" = up ] && ip -n "$NH_PREFIX-$1" link set eth0 up
  return 0
}

hosts_remove() {
  local i
  for ((i = 0; i < NH_HOSTS; i++)); do
    # The pair first, at once (a namespace's own links go away asynchronously with it).
    ip link del "cxv${NH_ID}h$i" 2>/dev/null
    ip netns del "$NH_PREFIX-$i" 2>/dev/null
  done
  ip link del "$NH_BRIDGE" 2>/dev/null
  return 0
}

hosts_leftover() {
  local try left=""
  grep -q "$NH_PREFIX" <<<"$(ip netns list 2>/dev/null)" &&
    left+=" namespaces($(ip netns list | grep "$NH_PREFIX" | tr '\n' ' '))"
  # Links deleted with a namespace go away asynchronously: give them a moment.
  for ((try = 0; try < 100; try++)); do
    grep -qE "cxv${NH_ID}|$NH_BRIDGE" <<<"$(ip -o link show 2>/dev/null)" || break
    sleep 0.05
  done
  grep -qE "cxv${NH_ID}|$NH_BRIDGE" <<<"$(ip -o link show 2>/dev/null)" &&
    left+=" links($(ip -o link show | grep -oE "(cxv${NH_ID}|$NH_BRIDGE)[^:@]*" | tr '\n' ' '))"
  echo "$left"
}
