#!/usr/bin/env bash
# Makes a private CA and the certificates a MesaNet cluster needs, for development, tests and the
# quickstart (docs/security.md). Production: use your PKI or cert-manager instead.
#
#   scripts/make_dev_ca.sh DIR [SERVER_NAME...] [--workers NAME...] [--no-server]
#
# Writes into DIR (created, mode 700):
#   ca.pem, ca.key            the CA (keep ca.key offline in real use)
#   server.pem, server.key    the coordinator's certificate: DNS localhost, IP 127.0.0.1, ::1 and
#                             each SERVER_NAME (a DNS name, or an IPv4/IPv6 address)
#   worker.pem, worker.key    a client certificate for the worker id mesa-worker (CN mesa-worker)
#   <NAME>.pem, <NAME>.key    one per --workers NAME, for the worker id NAME (CN NAME): with
#                             --client_ca a worker registers only under the id its certificate's
#                             CN (or a SAN) names (docs/security.md)
# --no-server issues only the --workers certificates (with the existing CA). Keys are ECDSA
# P-256, valid 30 days. An existing ca.pem/ca.key in DIR is reused (so new server or worker
# certificates can be issued by the same CA); everything else is overwritten.
set -euo pipefail

if [ $# -lt 1 ]; then
  sed -n '2,17p' "$0" >&2
  exit 2
fi
dir=$1
shift
command -v openssl >/dev/null || { echo "make_dev_ca: openssl not found (apt-get install openssl)" >&2; exit 1; }

san="DNS:localhost,IP:127.0.0.1,IP:::1"
workers=(worker)
mode=server
server=1
for arg in "$@"; do
  if [ "$arg" = "--no-server" ]; then server=0; workers=("${workers[@]:1}"); continue; fi
  if [ "$arg" = "--workers" ]; then mode=workers; continue; fi
  if [ "$mode" = workers ]; then workers+=("$arg"); continue; fi
  if [[ "$arg" =~ ^[0-9.]+$ || "$arg" == *:* ]]; then san+=",IP:$arg"; else san+=",DNS:$arg"; fi
done

mkdir -p "$dir"
chmod 700 "$dir"
cd "$dir"
umask 077
days=30
curve=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)

if [ ! -f ca.pem ] || [ ! -f ca.key ]; then
  openssl req -x509 "${curve[@]}" -keyout ca.key -out ca.pem -days "$days" \
    -subj "/CN=MesaNet development CA $(date -u +%Y%m%dT%H%M%SZ)-$$" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>/dev/null
fi

# issue NAME CN EXTENSIONS
issue() {
  openssl req -new "${curve[@]}" -keyout "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
  printf '%s\n' "$3" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days "$days" \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

if [ "$server" = 1 ]; then
  issue server mesa-coordinator \
    "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=$san"
fi
for w in "${workers[@]}"; do
  cn=$w
  [ "$w" = worker ] && cn=mesa-worker
  issue "$w" "$cn" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
done
chmod 644 ./*.pem
echo "make_dev_ca: CA and certificates in $PWD (server names: $san)"
