#!/usr/bin/env bash
# What the serving chain costs the API server: a Go TLS client (the API server's webhook client, HTTP/1.1, a
# new connection per call as in a burst) makes connections to two servers that differ only in the chain they
# send — the leaf alone, or the leaf then its CA (what tailor-admission's generated certificates sent before
# they became the leaf alone) — and prints its own CPU time per connection for each, measured in alternating
# batches in one run (hack/go/tls-client). Both servers are admission/examples/floor.rs --allow (rustls, the
# webhook's TLS configuration), with an ECDSA P-256 CA and leaf like the ones tailor-admission generates.
#
# Usage: hack/bench-serving-chain.sh [--connections N] [--rounds R]   (defaults 500 a batch, 5 rounds)
# Ends with: client_cpu_us_per_connection_leaf=A client_cpu_us_per_connection_leaf_and_ca=B
#            leaf_and_ca_over_leaf=B/A
set -euo pipefail
cd "$(dirname "$0")/.."
n=500 rounds=5
while (($#)); do
  case $1 in
    --connections) n=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
target=${CARGO_TARGET_DIR:-$PWD/target}
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT

cargo build -q --release -p tailor-admission --example floor
(cd hack/go/tls-client && GOFLAGS=-mod=mod GOPROXY=off go build -o "$work/tls-client" .)

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=bench-ca -days 1 \
  -keyout "$work/ca.key" -out "$work/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
  -keyout "$work/leaf.key" -out "$work/leaf.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$work/leaf.ext"
openssl x509 -req -in "$work/leaf.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" -CAcreateserial -days 1 \
  -extfile "$work/leaf.ext" -out "$work/leaf.crt" 2>/dev/null
cat "$work/leaf.crt" "$work/ca.crt" >"$work/leaf_and_ca.crt"

port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
args=()
for chain in leaf leaf_and_ca; do
  p=$(port)
  "$target/release/examples/floor" --allow --port "$p" --cert "$work/$chain.crt" --key "$work/leaf.key" &
  pids+=($!)
  args+=("$chain=https://127.0.0.1:$p/")
  for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && break; sleep 0.1; done
done
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$work/tls-client" -ca "$work/ca.crt" -n "$n" -rounds "$rounds" "${args[@]}" | tee "$work/out"
leaf=$(sed -n 's/^client_cpu_us_per_connection_leaf=//p' "$work/out")
both=$(sed -n 's/^client_cpu_us_per_connection_leaf_and_ca=//p' "$work/out")
echo "leaf_and_ca_over_leaf=$(python3 -c 'import sys; print(f"{float(sys.argv[2]) / float(sys.argv[1]):.2f}")' "$leaf" "$both")"
