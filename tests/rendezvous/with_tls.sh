#!/bin/sh
# with_tls.sh COMMAND [ARGS...]
# Runs COMMAND with COLLX_TLS=1 over tcp, with a CA and a certificate made here by the
# docs/running.md's OpenSSL lines (util/make_tls_certs.sh, in a temporary directory removed
# afterwards), and fails unless the
# command succeeds and a rank said that TLS carried its connections (at info: the log line
# "TLS on the tcp connections between ranks"). For launchers that are not collx-run
# (mpirun: the MPI bootstrap's test).
set -eu
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sh "$(dirname "$0")/../util/make_tls_certs.sh" "$dir"
export COLLX_TLS=1 COLLX_TLS_CERT="$dir/node.pem" COLLX_TLS_KEY="$dir/node.key" \
  COLLX_TLS_CA="$dir/ca.pem" COLLX_TRANSPORT=tcp COLLX_LOG_LEVEL=warn,collx.tcp=info
status=0
"$@" >"$dir/out" 2>&1 || status=$?
cat "$dir/out"
[ "$status" -eq 0 ] || exit "$status"
if ! grep -q "TLS on the tcp connections between ranks: TLSv1.3" "$dir/out"; then
  echo "with_tls.sh: no rank said that TLS carried its connections" >&2
  exit 1
fi
