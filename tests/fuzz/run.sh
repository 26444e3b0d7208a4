#!/usr/bin/env bash
# Runs the fuzz harnesses for as long as wanted (the smoke run of ./dev.sh test gives each
# 4 s): tests/fuzz/run.sh [harness|all] [seconds per harness]. Harnesses one at a time, each
# with 2 jobs on 2 workers, from its seeds (tests/fuzz/corpus/<h>, read only) and what earlier
# runs found (build-fuzz/fuzz-corpus/<h>). Findings go to build-fuzz/fuzz-crashes/; the
# executed inputs of each run are in build-fuzz/fuzz-logs/<h>.log (stat::number_of_executed_units
# per job). Needs build-fuzz (./dev.sh test makes it; or the cmake line in tests/fuzz/README.md).
# Knobs: BUILD_DIR (default build: the fuzz build is $BUILD_DIR-fuzz), JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/../.."

which=${1:-all}
seconds=${2:-60}
root=$(pwd)
jobs=${JOBS:-2}
if ! dir=$(cd "${BUILD_DIR:-build}-fuzz/bin" 2>/dev/null && cd .. && pwd); then
  echo "run.sh: no ${BUILD_DIR:-build}-fuzz/bin: build it first (tests/fuzz/README.md)" >&2
  exit 1
fi
if [ "$which" = all ]; then
  harnesses=()
  for corpus in tests/fuzz/corpus/*/; do harnesses+=("$(basename "$corpus")"); done
else
  harnesses=("$which")
fi
mkdir -p "$dir/fuzz-logs" "$dir/fuzz-crashes"
status=0
for h in "${harnesses[@]}"; do
  bin="$dir/bin/fuzz_$h"
  if [ ! -x "$bin" ]; then
    echo "run.sh: no harness $bin" >&2
    exit 1
  fi
  mkdir -p "$dir/fuzz-corpus/$h"
  log="$dir/fuzz-logs/$h.log"
  echo "== fuzz_$h for ${seconds}s ($jobs jobs)" >&2
  # -jobs runs each job's output into fuzz-<n>.log in the current directory: run there.
  rm -f "$dir"/fuzz-logs/fuzz-*.log
  if ! (cd "$dir/fuzz-logs" && "$bin" -max_total_time="$seconds" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 -jobs="$jobs" -workers="$jobs" \
        -artifact_prefix="$dir/fuzz-crashes/$h-" "$dir/fuzz-corpus/$h" \
        "$root/tests/fuzz/corpus/$h"); then
    status=1
  fi
  cat "$dir"/fuzz-logs/fuzz-*.log > "$log" 2>/dev/null || true
  rm -f "$dir"/fuzz-logs/fuzz-*.log
  units=$(grep -h 'stat::number_of_executed_units' "$log" | awk '{s += $2} END {print s + 0}')
  echo "fuzz_$h: $units inputs in ${seconds}s (log: $log)" >&2
  if grep -q 'ERROR: libFuzzer\|ERROR: AddressSanitizer\|runtime error' "$log"; then
    echo "fuzz_$h: FOUND something: $log, $dir/fuzz-crashes/" >&2
    status=1
  fi
done
exit $status
