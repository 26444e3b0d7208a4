#!/bin/sh
# make_tls_certs.sh DIR
# A CA and one certificate it signed, by docs/running.md's OpenSSL lines ("Making a CA and
# certificates"), for the scripts and suites that run jobs in TLS: DIR/ca.pem, DIR/ca.key,
# DIR/node.pem, DIR/node.key (keys 0600), valid for a day. Exits non-zero, saying why, when
# openssl is missing or fails.
set -eu
dir=${1:?usage: make_tls_certs.sh DIR}
command -v openssl >/dev/null || {
  echo "make_tls_certs.sh: the openssl command is not installed (apt-get install openssl)" >&2
  exit 1
}
mkdir -p "$dir"
cd "$dir"
umask 077
openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj /CN=collx-ca -keyout ca.key -out ca.pem 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=collx-node \
  -keyout node.key -out node.csr 2>/dev/null
openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
  -out node.pem 2>/dev/null
