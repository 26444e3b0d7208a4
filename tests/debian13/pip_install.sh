#!/usr/bin/env bash
# Inside the Debian 13 root (tests/debian13/root.sh run bash /src/tests/debian13/pip_install.sh):
# `pip install --no-build-isolation /src` (pyproject.toml: scikit-build-core builds the module,
# the torch backend and the tools against the environment's Python, numpy and torch) into a
# fresh venv that sees Debian's numpy and torch (--system-site-packages), then checks the
# installed package from outside the source tree with no PYTHONPATH: it imports from the
# venv's site-packages, pip's version is collx.__version__, every shared object resolves its
# libraries (collx's own from the package's collx/lib), the wheel installed nothing but the
# package, its metadata and the tools' entry points (no headers, CMake package or test
# binaries), the stubs match the module (test_module.py), and 2 ranks allreduce through the
# installed package with numpy and with torch.distributed's init_process_group("collx").
# The venv and every other file it makes live in one temporary directory, removed on every
# exit. No package index is used (--no-index): everything comes from the root. JOBS (default
# nproc) bounds the build's parallelism.
set -euo pipefail

say() { printf '\033[1m== %s debian13: %s\033[0m\n' "$(date +%T)" "$*" >&2; }
ok() { printf '   ok: %s\n' "$*" >&2; }
fail() { printf 'debian13 pip_install: FAILED: %s\n' "$*" >&2; exit 1; }

# The installed package only, whatever the caller had on its path (suite.sh: the build tree).
unset PYTHONPATH PYTEST_COLLX_BUILD_DIR

WORK=$(mktemp -d /tmp/collx-pip.XXXXXX)
RANK_PIDS=()
cleanup() {
  local pid
  # SIGTERM: `timeout`, which each rank runs under, passes it on to the rank.
  for pid in "${RANK_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

VENV=$WORK/venv
PY=$VENV/bin/python
python3 -m venv --system-site-packages "$VENV" >"$WORK/venv.log" 2>&1 ||
  { cat "$WORK/venv.log" >&2; fail "python3 -m venv failed (Debian: python3-venv)"; }

python3 -c 'import scikit_build_core' 2>/dev/null ||
  fail "python3 cannot import scikit_build_core (Debian: python3-scikit-build-core; root.sh make)"
tools="$("$VENV/bin/pip" --version | cut -d' ' -f1-2), scikit-build-core $(
  python3 -c 'import scikit_build_core; print(scikit_build_core.__version__)')"
say "pip install --no-build-isolation /src into a venv ($tools)"
start=$(date +%s)
if ! CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)} "$VENV/bin/pip" install --no-build-isolation \
    --no-index --no-input --disable-pip-version-check /src >"$WORK/pip.log" 2>&1; then
  tail -40 "$WORK/pip.log" >&2
  fail "pip install --no-build-isolation /src failed (its last lines above)"
fi
ok "pip install took $(($(date +%s) - start)) s"

# From here on, nothing of the checkout may be importable: the installed package only.
cd "$WORK"
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
PKG=$SITE/collx

say "the installed package ($SITE)"
where=$("$PY" -c 'import collx, collx.torch; print(collx.__file__); print(collx.torch.__file__)') ||
  fail "import collx, collx.torch from outside /src failed"
while read -r file; do
  [[ $file == "$PKG/"* ]] || fail "imported $file, not from the venv's $PKG"
done <<<"$where"
ok "import collx, collx.torch: from $PKG"

version=$("$PY" -c 'import collx; print(collx.__version__)')
shown=$("$VENV/bin/pip" show collx | sed -n 's/^Version: //p')
[[ -n $version && $version == "$shown" ]] ||
  fail "pip show collx says version '$shown', collx.__version__ is '$version'"
ok "pip show collx: version $shown = collx.__version__"

# What the wheel installed, as pip recorded it: the package, its metadata, the entry points.
record=$(ls "$SITE"/collx-*.dist-info/RECORD) || fail "no collx-*.dist-info/RECORD in $SITE"
strays=$(cut -d, -f1 "$record" |
  grep -Ev '^(collx/|collx-[^/]*\.dist-info/|\.\./\.\./\.\./bin/collx-(run|info|trace)$)' || true)
[ -z "$strays" ] || fail "the wheel installed files outside the package: $strays"
unwanted=$(cut -d, -f1 "$record" | grep -E '\.(h|hpp|a|cmake)$|/include/|/cmake/|_test$' || true)
[ -z "$unwanted" ] || fail "the wheel installed headers, CMake files or tests: $unwanted"
for f in lib/libcollx.so lib/libcollx_base.so bin/collx-run py.typed _collx.pyi __init__.pyi \
    torch.pyi; do
  [ -e "$PKG/$f" ] || fail "$PKG/$f is missing"
done
ok "$(wc -l <"$record") files: collx/ (with collx/lib, collx/bin, the stubs), its dist-info, the" \
  "bin/collx-* entry points"

elves=$(find "$PKG" -type f \( -name '*.so' -o -path '*/bin/*' \) | sort)
for f in $elves; do
  deps=$(ldd "$f") || fail "ldd $f failed"
  if grep -q 'not found' <<<"$deps"; then
    fail "$f: libraries not found: $(grep 'not found' <<<"$deps" | tr -s ' \t' ' ')"
  fi
  # collx's own libraries from the package, through the RPATH, never from elsewhere.
  while read -r lib; do
    [[ $(readlink -f "$lib") == "$PKG/lib/"* ]] ||
      fail "$f loads collx's library $lib, not one of $PKG/lib"
  done < <(sed -n 's/^.*libcollx[^ ]* => \([^ ]*\) .*$/\1/p' <<<"$deps")
done
# (Read whole first: under pipefail, grep -q leaving early could fail ldd with SIGPIPE.)
module_deps=$(ldd "$PKG"/_collx.*.so) || fail "ldd of the module failed"
grep -q "libcollx.so => $PKG/" <<<"$module_deps" ||
  fail "the module does not load libcollx.so from the package: $module_deps"
ok "ldd: $(wc -w <<<"$elves") shared objects and tools resolve every library, collx's from $PKG/lib"

say "python/tests/test_module.py on the installed package (a world of one; the stubs)"
# The test directory goes on sys.path, not /src/python: collx is the venv's.
PYTHONDONTWRITEBYTECODE=1 "$PY" -m pytest -q -p no:cacheprovider /src/python/tests/test_module.py \
  >"$WORK/pytest.log" 2>&1 || { cat "$WORK/pytest.log" >&2; fail "test_module.py failed"; }
ok "$(tail -1 "$WORK/pytest.log")"

say "2 ranks through the installed package"
cat >"$WORK/numpy_allreduce.py" <<'EOF'
import numpy as np
import collx

ctx = collx.init()  # COLLX_RANK, COLLX_WORLD_SIZE, COLLX_STORE
x = np.full(1000, ctx.rank + 1, np.float32)
ctx.allreduce(x)
assert (x == 3).all(), "rank %d: allreduce gave %s, not 3" % (ctx.rank, x[:4])
print("rank %d of %d: numpy allreduce ok (%s)" % (ctx.rank, ctx.size, ctx.transports))
ctx.close()
EOF
mkdir "$WORK/store"
for rank in 0 1; do
  COLLX_RANK=$rank COLLX_WORLD_SIZE=2 COLLX_STORE=file://$WORK/store COLLX_TIMEOUT=60s \
    timeout 120 "$PY" "$WORK/numpy_allreduce.py" >"$WORK/rank$rank.log" 2>&1 &
  RANK_PIDS+=($!)
done
for rank in 0 1; do
  wait "${RANK_PIDS[$rank]}" ||
    { cat "$WORK"/rank?.log >&2; fail "rank $rank of the numpy allreduce failed (logs above)"; }
done
RANK_PIDS=()
grep -h 'allreduce ok' "$WORK"/rank?.log | sed 's/^/   ok: /' >&2

cat >"$WORK/torch_allreduce.py" <<'EOF'
import torch
import torch.distributed as dist
import collx.torch  # noqa: F401  (registers the backend "collx")

dist.init_process_group("collx")  # env://, from collx-run's RANK, WORLD_SIZE, MASTER_*
rank = dist.get_rank()
assert dist.get_backend() == "collx", dist.get_backend()
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
assert bool((t == 3).all()), "rank %d: all_reduce gave %s, not 3" % (rank, t[:4])
print("rank %d of %d: torch.distributed all_reduce on collx ok (torch %s)"
      % (rank, dist.get_world_size(), torch.__version__))
dist.destroy_process_group()
EOF
# The wheel's collx-run (its entry point runs collx/bin/collx-run), as torchrun would.
PATH=$VENV/bin:$PATH COLLX_TIMEOUT=60s timeout 180 collx-run -n 2 -- "$PY" \
  "$WORK/torch_allreduce.py" >"$WORK/torch.log" 2>&1 ||
  { cat "$WORK/torch.log" >&2; fail "collx-run -n 2 of the torch all_reduce failed (log above)"; }
grep 'all_reduce on collx ok' "$WORK/torch.log" | sed 's/^/   ok: /' >&2
[ "$(grep -c 'all_reduce on collx ok' "$WORK/torch.log")" = 2 ] ||
  { cat "$WORK/torch.log" >&2; fail "not both ranks reported the torch all_reduce"; }
info=$("$VENV/bin/collx-info" 2>&1) || { echo "$info" >&2; fail "the wheel's collx-info failed"; }
[ "$(head -1 <<<"$info")" = "collx $version" ] ||
  fail "collx-info's first line is '$(head -1 <<<"$info")', not 'collx $version'"
ok "the entry points collx-run and collx-info run the wheel's tools (collx-info: collx $version)"

say "pip install: every check passed (the venv is removed)"
