#!/usr/bin/env bash
# Clients that cost the coordinator before anything checks them:
# - a compressed request: a 1 MB gRPC message with `grpc-encoding: gzip` that inflates to 1 GiB,
#   sent by curl (a real HTTP/2 client), is refused (the coordinator accepts no compressed
#   requests) and its peak resident memory stays far below the inflated size. Plaintext, and over
#   TLS without a token, three requests at once;
# - idle connections: a TLS connection that never sends a call, and a TCP connection that never
#   starts TLS, are closed after --idle_connection_timeout (2s here), not held forever.
set -uo pipefail
COORDINATOR=coordinator/mesa-coordinator
MAKE_CA=scripts/make_dev_ca.sh
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
PIDS=()
trap 'for p in "${PIDS[@]:-}"; do kill -9 "$p" 2>/dev/null; done' EXIT

# The bomb: 1 GiB of zeros, gzip'd (about 1 MB), framed as one compressed gRPC message.
python3 - "$T/bomb.grpc" <<'PY'
import struct, sys, zlib
c = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip
chunk = bytes(1 << 20)
body = b"".join(c.compress(chunk) for _ in range(1024)) + c.flush()
with open(sys.argv[1], "wb") as f:
    f.write(b"\x01" + struct.pack(">I", len(body)) + body)
PY
size=$(stat -c %s "$T/bomb.grpc")
echo "bomb: $size bytes on the wire, 1073741824 inflated"

# Starts a coordinator with extra flags; sets ADDR and PID.
start() {
  local name=$1; shift
  "$COORDINATOR" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --db="$T/$name.db" "$@" \
    >"$T/$name.out" 2>"$T/$name.err" &
  PID=$!
  PIDS+=("$PID")
  for _ in $(seq 1 150); do
    ADDR=$(sed -n 's/^listening on //p' "$T/$name.out" | head -1)
    [ -n "$ADDR" ] && return 0
    sleep 0.1
  done
  cat "$T/$name.err" >&2
  fail "$name: coordinator did not start"
  return 1
}

peak_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }

# Sends the bomb $3 times at once to URL $1 (extra curl flags in $2); each must be refused: a
# trailers-only UNIMPLEMENTED ("Compression algorithm 'gzip' is disabled", as over TLS) or, when
# gRPC refuses the stream before it answers (plaintext), a reset stream (curl exit 92).
send_bombs() {
  local url=$1 flags=$2 n=$3 i pids=()
  for i in $(seq 1 "$n"); do
    # shellcheck disable=SC2086
    curl -sS --max-time 60 --http2-prior-knowledge $flags -X POST "$url" \
      -H 'content-type: application/grpc' -H 'te: trailers' -H 'grpc-encoding: gzip' \
      --data-binary @"$T/bomb.grpc" -D "$T/headers.$i" -o "$T/body.$i" 2>"$T/curl.$i" &
    pids+=($!)
  done
  for i in $(seq 1 "$n"); do
    local rc=0
    wait "${pids[$((i - 1))]}" || rc=$?
    if grep -qi '^grpc-status: 12' "$T/headers.$i"; then
      grep -qi "^grpc-message: Compression algorithm 'gzip' is disabled" "$T/headers.$i" ||
        fail "$url: UNIMPLEMENTED without the reason: $(tr -d '\r' <"$T/headers.$i" | tr '\n' ' ')"
    elif [ "$rc" -ne 92 ]; then
      fail "$url: want UNIMPLEMENTED or a reset stream, got curl exit $rc: $(tr -d '\r' <"$T/headers.$i" | tr '\n' ' ') $(cat "$T/curl.$i")"
    fi
  done
}

# Plaintext, open coordinator.
start plain || exit 1
base=$(peak_kib "$PID")
send_bombs "http://$ADDR/mesa.v1.JobService/ListJobs" "" 1
send_bombs "http://$ADDR/mesa.v1.JobService/SubmitJob" "" 1
peak=$(peak_kib "$PID")
echo "plaintext: peak RSS ${base} KiB at start, ${peak} KiB after"
[ "$peak" -lt $((base + 200 * 1024)) ] || fail "plaintext: peak RSS grew from $base to $peak KiB"
kill -0 "$PID" || fail "plaintext: the coordinator died"
# An uncompressed request is still answered (an empty ListJobsRequest: a 5-byte frame).
printf '\0\0\0\0\0' >"$T/empty.grpc"
curl -sS --max-time 10 --http2-prior-knowledge -X POST "http://$ADDR/mesa.v1.JobService/ListJobs" \
  -H 'content-type: application/grpc' -H 'te: trailers' --data-binary @"$T/empty.grpc" \
  -D "$T/plain.headers" -o /dev/null
grep -qi '^grpc-status: 0' "$T/plain.headers" ||
  fail "plaintext: an uncompressed ListJobs failed: $(tr -d '\r' <"$T/plain.headers" | tr '\n' ' ')"

# TLS with client certificates optional and tokens required; no token is sent.
bash "$MAKE_CA" "$T/pki" >/dev/null || { fail "make_dev_ca.sh failed"; exit 1; }
printf 'users:\n  - {name: u, token: %s, role: admin}\n' "$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$T/tokens.yaml"
chmod 600 "$T/tokens.yaml"
start tls --tls_cert="$T/pki/server.pem" --tls_key="$T/pki/server.key" \
  --tokens_file="$T/tokens.yaml" --idle_connection_timeout=2s || exit 1
base=$(peak_kib "$PID")
send_bombs "https://$ADDR/mesa.v1.JobService/ListJobs" "--cacert $T/pki/ca.pem --http2" 3
peak=$(peak_kib "$PID")
echo "TLS, no token, 3 at once: peak RSS ${base} KiB at start, ${peak} KiB after"
[ "$peak" -lt $((base + 200 * 1024)) ] || fail "TLS: peak RSS grew from $base to $peak KiB"
kill -0 "$PID" || fail "TLS: the coordinator died"

# Idle clients: both connections must be closed by the server within 15 s (2 s idle timeout, the
# same bound for the handshake), whatever the client does not send.
python3 - "${ADDR%:*}" "${ADDR##*:}" "$T/pki/ca.pem" <<'PY' || fail "an idle connection was held open"
import socket, ssl, sys, time
host, port, ca = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def closed_within(sock, seconds):
    sock.settimeout(seconds)
    start = time.time()
    try:
        while sock.recv(65536):  # a GOAWAY frame may come first, then the end
            pass
    except (socket.timeout, TimeoutError):
        return None
    except (ConnectionResetError, ssl.SSLError, OSError):
        pass
    return time.time() - start

raw = socket.create_connection((host, port))  # never starts TLS
context = ssl.create_default_context(cafile=ca)
context.set_alpn_protocols(["h2"])
tls = context.wrap_socket(socket.create_connection((host, port)), server_hostname="localhost")
ok = True
for name, sock in (("TLS, no call", tls), ("TCP, no handshake", raw)):
    took = closed_within(sock, 15)
    print(f"{name}: {'held open for 15 s' if took is None else f'closed after {took:.1f} s'}")
    ok = ok and took is not None
sys.exit(0 if ok else 1)
PY
kill -0 "$PID" || fail "the coordinator died"

if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo PASS
