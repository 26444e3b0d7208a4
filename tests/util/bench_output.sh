# Sourced by the test scripts that run collx-bench (multihost_test.sh, pmix_test.sh,
# cluster/cluster_test.sh): the checks of its output, written once.
#
# check_bench OUT NAME P HOSTS TRANSPORTS ALGO
#   collx-bench's output in the file OUT must say "P=<P> on <HOSTS> host(s)", show every
#   transport of TRANSPORTS (words: "shm tcp") among rank 0's peers, and have at least one
#   size, each with #wrong 0 and, when ALGO is not empty, ALGO in the algo column.
#   Prints rank 0's transports line and returns 0; else prints why (NAME first, with the
#   output) and returns 1.
check_bench() {
  local out=$1 name=$2 p=$3 hosts=$4 transports=$5 algo=$6 line t rows
  if ! grep -q "P=$p on $hosts host(s)" "$out"; then
    echo "$name: not P=$p on $hosts host(s): $(head -5 "$out")"
    return 1
  fi
  if ! line=$(grep "^# transports seen from rank 0:" "$out"); then
    echo "$name: no transports line: $(cat "$out")"
    return 1
  fi
  for t in $transports; do
    if [[ $line != *":$t"* ]]; then
      echo "$name: rank 0 should see $transports peers: $line"
      return 1
    fi
  done
  rows=$(grep -E '^ +[0-9]+ +[0-9]+ ' "$out")
  if [ -z "$rows" ]; then
    echo "$name: no results: $(cat "$out")"
    return 1
  fi
  if ! awk -v algo="$algo" -v name="$name" '
      { if ($9 != 0) { print name ": " $9 " wrong elements at " $1 " bytes"; bad = 1 }
        if (algo != "" && $10 != algo) {
          print name ": algorithm " $10 " at " $1 " bytes, expected " algo; bad = 1 } }
      END { exit bad }' <<<"$rows"; then
    echo "output: $(cat "$out")"
    return 1
  fi
  echo "$line"
}
