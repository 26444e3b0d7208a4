#!/usr/bin/env bash
# A Debian 13 (trixie) root for building and testing collx against torch 2.x (torch 2.6,
# Python 3.13, numpy 2), and for benchmarks/compare/run.sh's Debian 13 peers (Open MPI 5,
# MPICH 4.2, Gloo), without touching this machine's Debian 12.
#
#   tests/debian13/root.sh make          make the root, or install what its list lacks
#   tests/debian13/root.sh run CMD...    run CMD inside it (proc, sys, dev and the checkout at
#                                        /src mounted in a mount namespace of the command's
#                                        own; a clean environment but for JOBS;
#                                        COLLX_DEBIAN13_BIND=DIR[:DIR...]: those directories
#                                        too, at the same paths)
#   tests/debian13/root.sh path          print where it is
#   tests/debian13/root.sh remove        unmount and delete it
#
# COLLX_DEBIAN13_ROOT (default /var/cache/collx/trixie) is kept between runs: the first
# `make` takes about 2 minutes and 1.7 GB from Debian's archive (mmdebstrap, as root), later
# ones a dpkg query. Exit 77 with the reason when this machine cannot (not root, no
# mmdebstrap and no apt to get it, no network to the archive).
set -euo pipefail

ROOT=${COLLX_DEBIAN13_ROOT:-/var/cache/collx/trixie}
MIRROR=${COLLX_DEBIAN13_MIRROR:-http://deb.debian.org/debian}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PACKAGES=(
  g++ cmake ninja-build pkg-config
  libasio-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libssl-dev openssl
  python3-dev pybind11-dev python3-numpy python3-pytest
  python3-torch libtorch-dev
  # torch.compile's inductor needs setuptools; pip install . needs pip and scikit-build-core.
  python3-setuptools python3-pip python3-venv python3-scikit-build-core
  # suite.sh's two builds (its own and pip's) share their compilations.
  ccache
  # benchmarks/compare/run.sh's Debian 13 peers (mpi5, mpich42, gloo13): ../shared/peers'
  # mpi_bench.c and gloo_bench.cc built and run in the root.
  make openmpi-bin libopenmpi-dev mpich libmpich-dev libgloo-dev
)

say() { printf '\033[1m== %s debian13: %s\033[0m\n' "$(date +%T)" "$*" >&2; }
cannot() { echo "debian13: cannot make a Debian 13 root here: $*" >&2; exit 77; }

mounted() { mountpoint -q "$ROOT/$1"; }

# Runs the rest of the arguments in the root, inside a mount namespace of their own: proc,
# sys, dev and the checkout are mounted there only, so runs side by side do not unmount each
# other's, and the mounts end with the namespace whatever the command did (deleting a root
# with them mounted would walk into the machine's own /dev and /sys).
in_root() {
  unshare --mount --propagation private -- "$0" __inside "$@"
}

inside() {  # (in the namespace)
  mount -t proc proc "$ROOT/proc"
  mount --rbind /sys "$ROOT/sys"
  mount --rbind /dev "$ROOT/dev"
  mkdir -p "$ROOT/src"
  mount --bind "$SRC" "$ROOT/src"
  # COLLX_DEBIAN13_BIND: this machine's directories (absolute, ':' between them) seen at the
  # same paths inside (benchmarks/compare/run.sh: its out dir).
  local dir dirs
  IFS=: read -r -a dirs <<<"${COLLX_DEBIAN13_BIND:-}"
  for dir in "${dirs[@]}"; do
    [ -n "$dir" ] || continue
    [[ $dir == /* && -d $dir ]] ||
      { echo "debian13: COLLX_DEBIAN13_BIND: $dir is no absolute path of a directory" >&2; exit 2; }
    mkdir -p "$ROOT$dir"
    mount --bind "$dir" "$ROOT$dir"
  done
  exec chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
    LANG=C.UTF-8 TERM="${TERM:-dumb}" ${JOBS:+JOBS=$JOBS} "$@"
}

# Mounts an earlier version of this script left in the machine's own namespace.
umount_all() {
  local m
  for m in src dev sys proc; do
    if mounted "$m"; then umount -R "$ROOT/$m" || umount -R -l "$ROOT/$m"; fi
  done
}

make_root() {
  [ "$(id -u)" = 0 ] || cannot "run as root (mmdebstrap, chroot, mounts)"
  if [ ! -x "$ROOT/usr/bin/python3" ] || [ ! -f "$ROOT/etc/debian_version" ]; then
    if ! command -v mmdebstrap >/dev/null; then
      command -v apt-get >/dev/null || cannot "no mmdebstrap and no apt-get to install it"
      say "installing mmdebstrap"
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y \
        --no-install-recommends mmdebstrap >/dev/null \
        || cannot "apt-get install mmdebstrap failed"
    fi
    umount_all
    rm -rf --one-file-system "$ROOT.new"
    mkdir -p "$(dirname "$ROOT")"
    say "making $ROOT from $MIRROR (a few minutes, once)"
    local include
    include=$(IFS=,; echo "${PACKAGES[*]}")
    if ! mmdebstrap --quiet --variant=apt --include="$include" trixie "$ROOT.new" "$MIRROR" \
        >"$ROOT.log" 2>&1; then
      tail -20 "$ROOT.log" >&2
      rm -rf --one-file-system "$ROOT.new"
      cannot "mmdebstrap failed (its log: $ROOT.log)"
    fi
    rm -rf --one-file-system "$ROOT"
    mv "$ROOT.new" "$ROOT"
  fi
  # The list may have grown since the root was made.
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    if [ "$(chroot "$ROOT" dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" != installed ]
    then
      missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} in the root"
    in_root sh -c "apt-get -o DPkg::Lock::Timeout=600 update -qq && \
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
      --no-install-recommends ${missing[*]}" >/dev/null
  fi
}

run_in_root() {
  [ -x "$ROOT/usr/bin/python3" ] || { echo "debian13: no root at $ROOT: make it first" >&2; exit 1; }
  in_root "$@"
}

case "${1:-}" in
  make) make_root ;;
  run) shift; run_in_root "$@" ;;
  __inside) shift; inside "$@" ;;
  path) echo "$ROOT" ;;
  remove) umount_all; rm -rf --one-file-system "$ROOT" "$ROOT.new" "$ROOT.log" ;;
  *) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
