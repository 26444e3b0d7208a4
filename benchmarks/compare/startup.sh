#!/usr/bin/env bash
# What a job's start costs with each kind of protection, side by side in interleaved rounds:
# the wall time of a whole job, `collx-run -n P -- collx-bench --sizes 4 -n 1 -w 1
# --no-check` (start the store, spawn P ranks, join, connect every pair, two 4-byte
# allreduces, leave), for
#   open    collx-run --insecure: no secret, no TLS
#   secret  the default: collx-run makes a secret; the store and every tcp connection prove it
#   tls     the secret and COLLX_TLS=1 (certificates made by tests/util/make_tls_certs.sh:
#           docs/running.md's OpenSSL lines)
# over tcp between the ranks (COLLX_TRANSPORT=tcp: the connections that prove and seal).
# Prints each configuration's median, min and max in ms, and the medians' ratios to open.
#
#   benchmarks/compare/startup.sh [BUILD_DIR]
# Knobs: PS="2 4", ROUNDS=20
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
PS=${PS:-"2 4"}
ROUNDS=${ROUNDS:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sh "$root/tests/util/make_tls_certs.sh" "$work"
run_once() {  # config P -> milliseconds
  local config=$1 p=$2 start end
  local -a launch=("$build/bin/collx-run" -n "$p" --timeout 60s)
  local -a env=(COLLX_TRANSPORT=tcp)
  case $config in
    open) launch+=(--insecure) ;;
    tls) env+=(COLLX_TLS=1 "COLLX_TLS_CERT=$work/node.pem" "COLLX_TLS_KEY=$work/node.key"
               "COLLX_TLS_CA=$work/ca.pem") ;;
  esac
  start=$(date +%s%N)
  env "${env[@]}" "${launch[@]}" -- "$build/bin/collx-bench" --sizes 4 -n 1 -w 1 --no-check \
    >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
  end=$(date +%s%N)
  echo $(((end - start) / 1000))
}
for p in $PS; do
  declare -A times=()
  for ((i = 0; i < ROUNDS; i++)); do
    for config in open secret tls; do
      times[$config]+="$(run_once "$config" "$p") "
    done
  done
  echo "P=$p, $ROUNDS rounds: job wall time in ms, median (min..max), median / open's"
  open_median=
  for config in open secret tls; do
    line=$(echo "${times[$config]}" | tr ' ' '\n' | sed '/^$/d' | sort -n | awk '
      { v[NR] = $1 } END { printf "%.1f %.1f %.1f", v[int((NR + 1) / 2)] / 1000, v[1] / 1000,
                           v[NR] / 1000 }')
    read -r median low high <<<"$line"
    [ -z "$open_median" ] && open_median=$median
    awk -v c="$config" -v m="$median" -v l="$low" -v h="$high" -v o="$open_median" \
      'BEGIN { printf "  %-7s %8.1f (%.1f..%.1f)  %.3f\n", c, m, l, h, m / o }'
  done
  unset times
done
