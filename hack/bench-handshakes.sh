#!/usr/bin/env bash
# Handshake benchmark (docs/decisions/handshake-limit.md): the webhook server's CPU per new TLS connection it
# serves (full handshake, no session resumption, as the API server's client makes, plus one pod review) against
# its CPU per new connection it refuses before the handshake (`too_fast`). The ratio is what the handshake rate
# limit buys; the first figure sets how many handshakes per second fit in a share of a core.
# Starts target/release/tailor-admission (a release build; hack/bench-webhook.sh measures the dist build) in the
# mode hack/bench-webhook.sh uses (standalone, 1,000 VPAs indexed), drives
# it with `loadgen handshakes`, and reads the server's utime+stime from /proc/PID/stat around each run.
# Then a reconnect storm: --storm connections at once (default 1024, the default --max-connections) against the
# server's default limits and against the old ones (200/s, burst 200), counting the connections refused.
# Usage: hack/bench-handshakes.sh [--connections N] [--refusals N] [--concurrency C] [--repeats R]
#                                 [--keys "ecdsa rsa"] [--storm N]
#   --connections  fresh connections served per run (default 4000)
#   --refusals     fresh connections refused per run (default 40000; the server's limit is 1/s for these runs)
#   --keys         serving keys to measure: ecdsa (P-256, what the chart's certificates use) and/or rsa (2048)
# SERVER_CPUS / LOADGEN_CPUS (taskset lists) pin the two processes; by default they share the cores.
set -euo pipefail
cd "$(dirname "$0")/.."

CONNECTIONS=4000
REFUSALS=40000
CONCURRENCY=8
REPEATS=3
KEYS="ecdsa rsa"
STORM=1024
while [ $# -gt 0 ]; do
  case "$1" in
    --connections) CONNECTIONS=$2; shift 2 ;;
    --refusals) REFUSALS=$2; shift 2 ;;
    --concurrency) CONCURRENCY=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --keys) KEYS=$2; shift 2 ;;
    --storm) STORM=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

cargo build --release -q -p tailor-admission --bin tailor-admission --example loadgen
BIN=${TAILOR_BENCH_BINARY:-target/release/tailor-admission}
LOADGEN=target/release/examples/loadgen
WORK=$(mktemp -d)
SERVER_PID=""
stop_server() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  SERVER_PID=""
}
cleanup() {
  stop_server
  rm -rf "$WORK"
}
trap cleanup EXIT

"$LOADGEN" setup --dir "$WORK" --vpas 1000 >/dev/null
# An RSA-2048 serving key (cert-manager's default when a Certificate names no algorithm) under its own CA.
if [[ " $KEYS " == *" rsa "* ]]; then
  mkdir -p "$WORK/rsa"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=bench-ca -keyout "$WORK/rsa/ca.key" \
    -out "$WORK/rsa/ca.crt" -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign \
    2>/dev/null
  openssl req -new -newkey rsa:2048 -nodes -subj /CN=localhost -keyout "$WORK/rsa/tls.key" \
    -out "$WORK/rsa/tls.csr" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
    >"$WORK/rsa/ext"
  openssl x509 -req -in "$WORK/rsa/tls.csr" -CA "$WORK/rsa/ca.crt" -CAkey "$WORK/rsa/ca.key" \
    -CAcreateserial -days 2 -extfile "$WORK/rsa/ext" -out "$WORK/rsa/tls.crt" 2>/dev/null
fi
# Directory holding tls.crt, tls.key and ca.crt for a key kind.
certs_dir() { if [ "$1" = rsa ]; then echo "$WORK/rsa"; else echo "$WORK"; fi; }

# Free loopback ports chosen by the OS.
read -r PORT MPORT < <(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')

export MIMALLOC_ARENA_EAGER_COMMIT=0 MIMALLOC_PURGE_DELAY=0
# start_server KEY [RATE BURST]: the release server, standalone, with this handshake limit (default: its own).
start_server() {
  local dir limits=()
  dir=$(certs_dir "$1")
  if [ $# -ge 3 ]; then limits=(--handshakes-per-second "$2" --handshake-burst "$3"); fi
  # shellcheck disable=SC2086 # SERVER_CPUS expands to "taskset -c LIST" or nothing.
  RUST_LOG=warn ${SERVER_CPUS:+taskset -c $SERVER_CPUS} "$BIN" --vpa-dir "$WORK/manifests" \
    --tls-cert-file "$dir/tls.crt" --tls-private-key "$dir/tls.key" --port "$PORT" --address "127.0.0.1:$MPORT" \
    --shutdown-delay-seconds 0 "${limits[@]}" &
  SERVER_PID=$!
  for _ in $(seq 1 100); do
    curl -fsS "http://127.0.0.1:$MPORT/readyz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  curl -fsS "http://127.0.0.1:$MPORT/readyz" >/dev/null
}
pin() { local cpus=$1; shift; if [ -n "$cpus" ]; then taskset -c "$cpus" "$@"; else "$@"; fi; }
TICKS=$(getconf CLK_TCK)
server_ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }
# A counter of the server's /metrics (0 when absent).
metric() { curl -fsS "http://127.0.0.1:$MPORT/metrics" | awk -v s="$1" '$1 == s {v = $2} END {print v + 0}'; }
too_fast() { metric 'tailor_admission_connections_closed_total{reason="too_fast"}'; }
reviews() {
  curl -fsS "http://127.0.0.1:$MPORT/metrics" | awk '/^tailor_admission_reviews_total/ {n += $2} END {print n + 0}'
}

# measure KEY LABEL COUNT REVIEW [CONCURRENCY]: one loadgen run; prints its figures and the server CPU per
# served and per refused connection (counted by the server itself: reviews answered, connections closed as
# too_fast).
measure() {
  local key=$1 label=$2 count=$3 review=$4 concurrency=${5:-$CONCURRENCY} t0 t1 r0 r1 f0 f1 out
  r0=$(reviews); f0=$(too_fast); t0=$(server_ticks)
  out=$(pin "${LOADGEN_CPUS:-}" "$LOADGEN" handshakes --addr "127.0.0.1:$PORT" --ca "$(certs_dir "$key")/ca.crt" \
    --connections "$count" --concurrency "$concurrency" --review "$review" --label "$label")
  t1=$(server_ticks); r1=$(reviews); f1=$(too_fast)
  python3 -c 'import json,sys
d=json.loads(sys.argv[1]); t0,t1,tck,r0,r1,f0,f1=map(float,sys.argv[2:9])
cpu=(t1-t0)/tck; served=d["completed"]; refused=f1-f0
per=lambda n: round(cpu*1e6/n,1) if n else None
print(json.dumps({"label":d["label"],"key":sys.argv[9],"connections":d["connections"],"concurrency":d["concurrency"],
  "completed":served,"reviews":int(r1-r0),"refused_by_server":int(refused),"refused_seen_by_client":d["refused"],
  "connect_errors":d["connect_errors"],"review_errors":d["review_errors"],"seconds":d["seconds"],
  "server_cpu_seconds":round(cpu,2),
  "server_cpu_us_per_completed":per(served) if refused*10 < served or not refused else None,
  "server_cpu_us_per_refused":per(refused) if served*100 < refused else None}))' \
    "$out" "$t0" "$t1" "$TICKS" "$r0" "$r1" "$f0" "$f1" "$key"
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "server: $BIN; loadgen concurrency $CONCURRENCY, threads ${LOADGEN_THREADS:-1} (server and loadgen share the cores unless pinned)"
for key in $KEYS; do
  # Served: a limit the run cannot reach, so every connection gets its handshake.
  start_server "$key" 1000000 1000000
  "$LOADGEN" handshakes --addr "127.0.0.1:$PORT" --ca "$(certs_dir "$key")/ca.crt" --connections 200 \
    --concurrency "$CONCURRENCY" >/dev/null # warm-up
  for i in $(seq 1 "$REPEATS"); do
    measure "$key" "handshake+review-$i" "$CONNECTIONS" true
    measure "$key" "handshake-only-$i" "$CONNECTIONS" false
  done
  stop_server
  # Refused: one handshake per second, so (after a burst of 1) every connection is closed before its handshake.
  start_server "$key" 1 1
  for i in $(seq 1 "$REPEATS"); do
    measure "$key" "refused-$i" "$REFUSALS" true
  done
  stop_server
  # A reconnect storm: every connection at once, against the default limits and against the old ones.
  for limits in default "200 200"; do
    for i in $(seq 1 "$REPEATS"); do
      # shellcheck disable=SC2086 # "200 200" is two arguments; "default" none.
      if [ "$limits" = default ]; then start_server "$key"; else start_server "$key" $limits; fi
      measure "$key" "storm-$STORM-limits-${limits// /-}-$i" "$STORM" true "$STORM"
      stop_server
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
