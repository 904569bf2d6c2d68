#!/usr/bin/env bash
# Benchmark of `tailor recommend --prometheus` against VictoriaMetrics (Debian package victoria-metrics):
# CONTAINERS containers (default 1,000, 4 per pod, 25 pods per namespace) x DAYS days (default 14) at a
# 1-minute step, imported through /api/v1/import; then prints the CLI's wall time, HTTP queries, bytes
# received and peak RSS. Targets (docs/design/principles.md §6): <= 20 s, <= 50 queries.
# Sizes: TAILOR_BENCH_CONTAINERS, TAILOR_BENCH_DAYS; TAILOR_BENCH_BASELINE=OLD_TAILOR also times an older binary. Keeps the data under target/bench-vm (reused when the
# sizes match; remove it to regenerate).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
CONTAINERS=${TAILOR_BENCH_CONTAINERS:-1000}
DAYS=${TAILOR_BENCH_DAYS:-14}
END=1717200000
VM=$(command -v victoria-metrics || echo /usr/bin/victoria-metrics)
[[ -x $VM ]] || { echo "victoria-metrics not found: run hack/install-deps.sh" >&2; exit 1; }

cargo build --release -q -p tailor-cli --bin tailor
TAILOR=$ROOT/target/release/tailor

DATA=$ROOT/target/bench-vm/$CONTAINERS-$DAYS
mkdir -p "$DATA"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$VM" -httpListenAddr=127.0.0.1:"$PORT" -storageDataPath="$DATA/vm" -retentionPeriod=100y \
  -search.disableCache -search.maxPointsPerTimeseries=30000 >"$DATA/vm.log" 2>&1 &
VM_PID=$!
trap 'kill $VM_PID 2>/dev/null; wait $VM_PID 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  sleep 0.1
done
URL=http://127.0.0.1:$PORT

if [[ ! -f $DATA/imported ]]; then
  echo "generating and importing $CONTAINERS containers x $DAYS days at 1m ..." >&2
  t0=$(date +%s)
  python3 - "$CONTAINERS" "$DAYS" "$END" <<'EOF' | curl -sf --data-binary @- "$URL/api/v1/import"
import json, math, random, sys
containers, days, end = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
n = days * 1440 + 1
start = end - (n - 1) * 60
ts = ",".join(str((start + i * 60) * 1000) for i in range(n))
out = sys.stdout
rng = random.Random(42)
# A daily shape shared by all, scaled per container; values with few digits keep the import small.
shape = [1.0 + 0.5 * math.sin(2 * math.pi * i / 1440) for i in range(n)]
for c in range(containers):
    ns, pod, name = f"ns-{c // 100}", f"app-{c // 100}-{(c // 4) % 25}", f"c{c % 4}"
    labels = f'"job":"kubernetes-cadvisor","namespace":"{ns}","pod":"{pod}","container":"{name}"'
    base = 0.05 + rng.random()
    noise = [rng.random() for _ in range(64)]
    total, cpu = 0, []
    for i in range(n):
        total += int(base * shape[i] * (0.7 + 0.6 * noise[i % 64]) * 60000)
        cpu.append(total)
    mib = 64 + rng.random() * 2000
    mem = [int(mib * shape[i] * (0.9 + 0.2 * noise[(i * 7) % 64])) << 20 for i in range(n)]
    # The counter in milli-core-seconds would overflow nothing; VictoriaMetrics stores it exactly.
    out.write('{"metric":{"__name__":"container_cpu_usage_seconds_total",' + labels + '},"values":['
              + ",".join(f"{v / 1000}" for v in cpu) + '],"timestamps":[' + ts + ']}\n')
    out.write('{"metric":{"__name__":"container_memory_working_set_bytes",' + labels + '},"values":['
              + ",".join(map(str, mem)) + '],"timestamps":[' + ts + ']}\n')
EOF
  curl -sf "$URL/internal/force_flush" >/dev/null
  sleep 2
  touch "$DATA/imported"
  echo "imported in $(($(date +%s) - t0)) s" >&2
fi

echo "command: tailor recommend --prometheus $URL --history ${DAYS}d --step 1m --end $END --output json" >&2
/usr/bin/time -f "peak RSS %M KiB, wall %e s, user %U s, sys %S s" \
  "$TAILOR" recommend --prometheus "$URL" --history "${DAYS}d" --step 1m --end "$END" --output json \
  >"$DATA/out.json"
# TAILOR_BENCH_BASELINE=/path/to/an/older/tailor: the same command with it, then the new one again, against
# the same server in the same window (timings on a shared machine are only comparable side by side).
if [[ -n ${TAILOR_BENCH_BASELINE:-} ]]; then
  for bin in "$TAILOR_BENCH_BASELINE" "$TAILOR"; do
    /usr/bin/time -f "$bin: peak RSS %M KiB, wall %e s, user %U s, sys %S s" \
      "$bin" recommend --prometheus "$URL" --history "${DAYS}d" --step 1m --end "$END" --output json \
      >"$DATA/out-$(basename "$(dirname "$bin")").json"
  done
fi
python3 -c "import json,sys; v=json.load(open(sys.argv[1])); print(len(v), 'workloads,', sum(len(o['recommendations']) for o in v), 'container recommendations', file=sys.stderr)" "$DATA/out.json"
