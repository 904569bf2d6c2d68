#!/usr/bin/env bash
# Webhook benchmark: tailor-admission (release build, standalone mode with 1,000 Tailor VPAs indexed) answering
# pod-CREATE AdmissionReviews over TLS with HTTP/1.1 keep-alive, driven by admission/examples/loadgen/.
# Two measurements per pod: maximum throughput (closed loop) and latency at a fixed 2,000 reviews/s (open loop),
# for the small pod (one container, ≈ 1.7 KB of review) and the realistic one (≈ 8 KB: init container, sidecar,
# env, probes, volumes, managedFields; admission/examples/loadgen/pods.rs).
# Usage: hack/bench-webhook.sh [--vpas N] [--seconds S] [--connections "C1 C2 …"] [--rate-connections "C …"]
#        [--pods "small realistic"] [--no-floor] [--ratio-rounds R] [--profile dist|release]
# The server and the floor are built with the same cargo profile: `dist` by default, the image's build (fat LTO,
# one codegen unit; Dockerfile), so the figures are those of what ships; `--profile release` is quicker to build
# while iterating. The load generator is always a release build.
# Before the last line, `floor_cpu_us_per_review=N`: the same measurement against admission/examples/floor.rs, a
# server with the webhook's TLS configuration and HTTP/1.1 keep-alive that answers every review with a fixed
# patch without reading it (the kernel's loopback TCP, wake-ups, TLS and HTTP on this machine), and
# `floor_with_review_cpu_us_per_review=N`: that server running the webhook's review (`--review-dir`) without the
# webhook's router, limits and metrics (--no-floor skips both); and `memo_off_cpu_us_per_review=N`: the webhook
# with `--patch-memo-mib 0`, every pod sized anew.
# Then `cpu_us_per_review=N`: the server's on-CPU µs per review (utime+stime from /proc) at a steady
# 2,000 reviews/s with the realistic pod over the first of the --rate-connections (the figure
# docs/decisions/webhook-review-cost.md is about), and last, unless --no-floor, `webhook_over_floor=R`: that
# figure over the floor's, both from this run.
# Ratio rounds (--ratio-rounds R, default 3): on this shared VM one sample of either server moves by a quarter
# between minutes (the floor alone 58–85 µs in one afternoon), so the two are measured in R rounds, each the
# webhook and then the floor at 2,000/s, both freshly started and warmed for a second (the webhook's patch
# memo filled, as in a cluster) before the measured run. `cpu_us_per_review` and `floor_cpu_us_per_review` are
# the medians of their rounds (together with the webhook's first measurement above), `webhook_over_floor` the
# median of the rounds' ratios; each round is printed. --ratio-rounds 0 keeps a single floor measurement.
# Server and load generator share this machine's cores; SERVER_CPUS / LOADGEN_CPUS (taskset lists) pin them.
# TAILOR_BENCH_BINARY=/path/to/an/older/tailor-admission measures that server with today's load generator (run
# both back to back on the same machine to compare builds: figures move a lot between machines).
set -euo pipefail
cd "$(dirname "$0")/.."

VPAS=1000
SECONDS_RUN=10
CONNECTIONS_LIST="4 8 16 32"
RATE_CONNECTIONS_LIST="4 8"
PODS="small realistic"
FLOOR=1
RATIO_ROUNDS=3
PROFILE=dist
while [ $# -gt 0 ]; do
  case "$1" in
    --vpas) VPAS=$2; shift 2 ;;
    --seconds) SECONDS_RUN=$2; shift 2 ;;
    --connections) CONNECTIONS_LIST=$2; shift 2 ;;
    --rate-connections) RATE_CONNECTIONS_LIST=$2; shift 2 ;;
    --pods) PODS=$2; shift 2 ;;
    --no-floor) FLOOR=""; shift ;;
    --ratio-rounds) RATIO_ROUNDS=$2; shift 2 ;;
    --profile) PROFILE=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

case "$PROFILE" in
  dist|release) ;;
  *) echo "--profile must be dist or release" >&2; exit 2 ;;
esac
case "$RATIO_ROUNDS" in
  ''|*[!0-9]*) echo "--ratio-rounds must be a whole number" >&2; exit 2 ;;
esac
cargo build --profile "$PROFILE" -q -p tailor-admission --bin tailor-admission --example floor
cargo build --release -q -p tailor-admission --example loadgen
BIN=${TAILOR_BENCH_BINARY:-target/$PROFILE/tailor-admission}
FLOOR_BIN=target/$PROFILE/examples/floor
LOADGEN=target/release/examples/loadgen
WORK=$(mktemp -d)
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

"$LOADGEN" setup --dir "$WORK" --vpas "$VPAS"

# Free loopback ports chosen by the OS.
read -r PORT MPORT < <(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')

pin() { local cpus=$1; shift; if [ -n "$cpus" ]; then taskset -c "$cpus" "$@"; else "$@"; fi; }
# As the image and the chart set them (Dockerfile).
export MIMALLOC_ARENA_EAGER_COMMIT=0 MIMALLOC_PURGE_DELAY=0
# Starts tailor-admission with extra flags "$@" and waits until it is ready.
start_server() {
  # Started directly (not through a shell function) so that $! is the server itself.
  # shellcheck disable=SC2086
  RUST_LOG=warn ${SERVER_CPUS:+taskset -c $SERVER_CPUS} "$BIN" --vpa-dir "$WORK/manifests" --tls-cert-file "$WORK/tls.crt" \
    --tls-private-key "$WORK/tls.key" --port "$PORT" --address "127.0.0.1:$MPORT" --shutdown-delay-seconds 0 "$@" &
  SERVER_PID=$!
  for _ in $(seq 1 100); do
    curl -fsS "http://127.0.0.1:$MPORT/readyz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  curl -fsS "http://127.0.0.1:$MPORT/readyz" >/dev/null
}
stop_server() {
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
}
start_server

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "server: $BIN (floor: $FLOOR_BIN), $VPAS VPAs indexed; loadgen threads: ${LOADGEN_THREADS:-1} (server and loadgen share the cores)"
TICKS=$(getconf CLK_TCK)
server_ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }
# One loadgen run; also prints the server's on-CPU time per review (robust against other load on the
# machine) and the throughput that implies for 2 dedicated cores.
run() {
  local t0 t1 out
  t0=$(server_ticks)
  out=$(pin "${LOADGEN_CPUS:-}" "$LOADGEN" run --addr "127.0.0.1:$PORT" --ca "$WORK/ca.crt" --vpas "$VPAS" \
    --seconds "$SECONDS_RUN" --warmup 0 "$@")
  t1=$(server_ticks)
  echo "$out"
  python3 -c 'import json,sys
d=json.loads(sys.argv[1]); cpu=(int(sys.argv[3])-int(sys.argv[2]))/int(sys.argv[4])
n=d["requests"] or 1
us=cpu*1e6/n
print(json.dumps({"label": d["label"], "pod": d["pod"], "server_cpu_seconds": round(cpu,2),
  "server_cpu_us_per_review": round(us,1), "implied_reviews_per_second_on_2_cores": round(2e6/us) if us else None,
  "load_average": open("/proc/loadavg").read().split()[:3]}))' "$out" "$t0" "$t1" "$TICKS" | tee "$WORK/last.json"
}
FINAL_CONNECTIONS=${RATE_CONNECTIONS_LIST%% *}
FINAL=""
for pod in $PODS; do
  # Maximum throughput: closed loop over a few connection counts (the best is the figure to quote).
  for c in $CONNECTIONS_LIST; do
    run --connections "$c" --rate 0 --pod "$pod" --label "max-throughput-$pod-c$c"
  done
  # At 2,000 reviews/s: open loop, latency measured from each request's scheduled time.
  for c in $RATE_CONNECTIONS_LIST; do
    run --connections "$c" --rate 2000 --pod "$pod" --label "rate-2000-$pod-c$c"
    if [ "$pod" = realistic ] && [ "$c" = "$FINAL_CONNECTIONS" ]; then
      FINAL=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["server_cpu_us_per_review"]))' "$WORK/last.json")
    fi
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "server RSS: $(awk '/VmRSS/ {print $2, $3}' /proc/$SERVER_PID/status)"
curl -fsS "http://127.0.0.1:$MPORT/metrics" | grep -E '^tailor_admission_(reviews_total|patch_memo)' || true
if [ -z "$FINAL" ]; then
  # The headline figure is always measured, even when --pods leaves the realistic pod out.
  run --connections "$FINAL_CONNECTIONS" --rate 2000 --pod realistic --label "rate-2000-realistic-c$FINAL_CONNECTIONS" >/dev/null
  FINAL=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["server_cpu_us_per_review"]))' "$WORK/last.json")
fi
# Every review above after the first of each workload has the sizing inputs of the one before it against the
# same VPA, so it is answered from the patch memo. The same figure with the memo off: each pod sized anew, as
# the first pod of a workload after its VPA's recommendation changed is.
stop_server
start_server --patch-memo-mib 0
run --connections "$FINAL_CONNECTIONS" --rate 2000 --pod realistic --label "memo-off-rate-2000-realistic-c$FINAL_CONNECTIONS"
echo "memo_off_cpu_us_per_review=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["server_cpu_us_per_review"]))' "$WORK/last.json")"
# Starts the floor (with the webhook's review when given --review-dir DIR) and waits for its port.
start_floor() {
  # shellcheck disable=SC2086
  ${SERVER_CPUS:+taskset -c $SERVER_CPUS} "$FLOOR_BIN" --cert "$WORK/tls.crt" --key "$WORK/tls.key" \
    --port "$PORT" "$@" &
  SERVER_PID=$!
  for _ in $(seq 1 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
    sleep 0.1
  done
}
last_us() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["server_cpu_us_per_review"])' "$WORK/last.json"; }
# One second at 2,000/s, not measured: every workload reviewed once (the webhook's memo filled).
warm() {
  pin "${LOADGEN_CPUS:-}" "$LOADGEN" run --addr "127.0.0.1:$PORT" --ca "$WORK/ca.crt" --vpas "$VPAS" \
    --seconds 1 --warmup 0 --connections "$FINAL_CONNECTIONS" --rate 2000 --pod realistic --label warm-up >/dev/null
}
ratio() { python3 -c 'import sys; print(f"{float(sys.argv[1]) / float(sys.argv[2]):.2f}")' "$1" "$2"; }
median() { python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
whole() { python3 -c 'import sys; print(round(float(sys.argv[1])))' "$1"; }
if [ -n "$FLOOR" ]; then
  # The floor with the webhook's review in it: the review on the bare server, without the webhook's router,
  # limits and metrics.
  stop_server
  start_floor --review-dir "$WORK/manifests"
  run --connections "$FINAL_CONNECTIONS" --rate 2000 --pod realistic --label "floor_with_review-rate-2000-realistic-c$FINAL_CONNECTIONS"
  echo "floor_with_review_cpu_us_per_review=$(whole "$(last_us)")"
  WEBHOOK_SAMPLES=$FINAL
  FLOOR_SAMPLES=""
  RATIOS=""
  if [ "$RATIO_ROUNDS" -eq 0 ]; then
    # One floor sample against the webhook's measurement above.
    stop_server
    start_floor
    run --connections "$FINAL_CONNECTIONS" --rate 2000 --pod realistic --label "floor-rate-2000-realistic-c$FINAL_CONNECTIONS"
    FLOOR_SAMPLES=$(last_us)
    RATIOS=$(ratio "$FINAL" "$FLOOR_SAMPLES")
  fi
  for round in $(seq 1 "$RATIO_ROUNDS"); do
    stop_server
    start_server
    warm
    run --connections "$FINAL_CONNECTIONS" --rate 2000 --pod realistic --label "ratio-round-$round-webhook" >/dev/null
    w=$(last_us)
    stop_server
    start_floor
    warm
    run --connections "$FINAL_CONNECTIONS" --rate 2000 --pod realistic --label "ratio-round-$round-floor" >/dev/null
    f=$(last_us)
    r=$(ratio "$w" "$f")
    echo "ratio round $round: webhook ${w} µs, floor ${f} µs, ratio ${r}"
    WEBHOOK_SAMPLES="$WEBHOOK_SAMPLES $w"
    FLOOR_SAMPLES="$FLOOR_SAMPLES $f"
    RATIOS="$RATIOS $r"
  done
  # shellcheck disable=SC2086
  FINAL=$(median $WEBHOOK_SAMPLES)
  # shellcheck disable=SC2086
  echo "floor_cpu_us_per_review=$(whole "$(median $FLOOR_SAMPLES)")"
fi
echo "cpu_us_per_review=$(whole "$FINAL")"
if [ -n "$FLOOR" ]; then
  # shellcheck disable=SC2086
  echo "webhook_over_floor=$(python3 -c 'import sys; print(f"{float(sys.argv[1]):.2f}")' "$(median $RATIOS)")"
fi
