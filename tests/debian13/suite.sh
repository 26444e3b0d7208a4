#!/usr/bin/env bash
# Inside the Debian 13 root (tests/debian13/root.sh run bash /src/tests/debian13/suite.sh):
# builds collx's libraries, tools, Python module and torch backend against Debian 13's
# Python 3.13, numpy 2 and torch 2.6 in /src/build-debian13, then runs the Python and torch
# suites (python/tests, or the pytest arguments given) against that build, and last (when
# no pytest arguments narrowed the suites) pip_install.sh (pip install . into a venv, and the
# installed package). JOBS (default nproc).
set -euo pipefail
cd /src
BUILD=build-debian13
JOBS=${JOBS:-$(nproc)}
say() { printf '\033[1m== %s debian13: %s\033[0m\n' "$(date +%T)" "$*" >&2; }

# ccache: pip's build of the same sources (pip_install.sh, in build-pip13 beside this one, so
# that paths relative to /src agree) finds this build's compilations instead of repeating
# them; the cache lives in the root.
export CCACHE_DIR=/root/.ccache CCACHE_BASEDIR=/src CCACHE_MAXSIZE=2G
export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
# The compiler by the name Python's sysconfig gives it, which pip's build takes: ccache tells
# compilers apart by name.
export CC=x86_64-linux-gnu-gcc CXX=x86_64-linux-gnu-g++
# At -O1: what these suites check (the bindings, the torch backend, the package) does not
# depend on how hard GCC optimizes, and a cold build of it took 722 CPU-seconds at -O3
# (GCC 14; a file 15-28% less at -O1). The Debian 12 build tests the library at -O3.
# pip's build (pip_install.sh) takes the same flags, so that it finds these compilations.
OPT="-O1 -DNDEBUG"
export SKBUILD_CMAKE_DEFINE="CMAKE_CXX_FLAGS_RELEASE=$OPT;CMAKE_C_FLAGS_RELEASE=$OPT"
say "building in $BUILD ($(. /etc/os-release; echo "$PRETTY_NAME"), $(g++ --version | head -1), $OPT)"
# No C++ suites here (the Debian 12 build runs them): the libraries, tools and the Python
# package are what torch 2.x and Python 3.13 change.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=/usr/bin/python3 \
  -DCMAKE_CXX_FLAGS_RELEASE="$OPT" -DCMAKE_C_FLAGS_RELEASE="$OPT" \
  -DCOLLX_WITH_PYTHON=ON -DCOLLX_WITH_TORCH=ON -DCOLLX_BUILD_BENCHMARKS=OFF \
  -DCOLLX_BUILD_TESTS=OFF -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
  >"$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log" >&2; exit 1; }
grep -E '^-- collx' "$BUILD.configure.log" >&2 || true
cmake --build "$BUILD" -j "$JOBS"

say "Python and torch suites (python/tests) on $(python3 -c 'import sys, numpy, torch; print("Python %d.%d, numpy %s, torch %s" % (sys.version_info[:2] + (numpy.__version__, torch.__version__)))')"
# As ctest runs them in the Debian 12 build (python/tests/CMakeLists.txt).
export PYTHONPATH=/src/$BUILD/python PYTEST_COLLX_BUILD_DIR=/src/$BUILD PYTHONDONTWRITEBYTECODE=1
# Temporary files of the suites (torchrun's elastic agent leaves a torchelastic_* directory
# per job) in a directory of this run's, removed at the end: the root's /tmp keeps nothing.
TMPDIR=$(mktemp -d)
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT
python3 -m pytest -q -p no:cacheprovider -rs "${@:-python/tests}"

if [ $# -eq 0 ]; then  # (not when the suites were narrowed by pytest arguments)
  say "pip install --no-build-isolation . into a venv, and the installed package (pip_install.sh)"
  SKBUILD_BUILD_DIR=/src/build-pip13 bash tests/debian13/pip_install.sh
fi
