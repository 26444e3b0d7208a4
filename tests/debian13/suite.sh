#!/usr/bin/env bash
# Inside the Debian 13 root (tests/debian13/root.sh run bash /src/tests/debian13/suite.sh):
# builds collx's libraries, tools, Python module and torch backend against Debian 13's
# Python 3.13, numpy 2 and torch 2.6 in /src/build-debian13, then runs the Python and torch
# suites (python/tests, or the pytest arguments given) against that build. JOBS (default
# nproc).
set -euo pipefail
cd /src
BUILD=build-debian13
JOBS=${JOBS:-$(nproc)}
say() { printf '\033[1m== %s debian13: %s\033[0m\n' "$(date +%T)" "$*" >&2; }

say "building in $BUILD ($(. /etc/os-release; echo "$PRETTY_NAME"), $(g++ --version | head -1))"
# No C++ suites here (the Debian 12 build runs them): the libraries, tools and the Python
# package are what torch 2.x and Python 3.13 change.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=/usr/bin/python3 \
  -DCOLLX_WITH_PYTHON=ON -DCOLLX_WITH_TORCH=ON -DCOLLX_BUILD_BENCHMARKS=OFF \
  -DCOLLX_BUILD_TESTS=OFF >"$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log" >&2; exit 1; }
grep -E '^-- collx' "$BUILD.configure.log" >&2 || true
cmake --build "$BUILD" -j "$JOBS"

say "Python and torch suites (python/tests) on $(python3 -c 'import sys, numpy, torch; print("Python %d.%d, numpy %s, torch %s" % (sys.version_info[:2] + (numpy.__version__, torch.__version__)))')"
# As ctest runs them in the Debian 12 build (python/tests/CMakeLists.txt).
export PYTHONPATH=/src/$BUILD/python PYTEST_COLLX_BUILD_DIR=/src/$BUILD PYTHONDONTWRITEBYTECODE=1
python3 -m pytest -q -p no:cacheprovider -rs "${@:-python/tests}"
