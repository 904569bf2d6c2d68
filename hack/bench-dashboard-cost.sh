#!/usr/bin/env bash
# What the dashboard costs the recommender: the release tailor-recommender at scale (hack/bench-recommender.sh:
# the stand-in API server with VPAS Deployments, 10 pods each), run without the dashboard and with it on and
# polled once a second (fleet page, JSON twin, a workload page), alternated ROUNDS times in one invocation so
# both see the same machine. Prints each run's CPU per loop, peak RSS and loop wall time (the dashboard's step
# included), then the ratios of the medians:
#   dashboard_loop_wall_ratio=W dashboard_cpu_per_loop_ratio=R dashboard_peak_rss_ratio=M
# Usage: hack/bench-dashboard-cost.sh [--vpas N] [--rounds R] [--loops L]   (defaults 5000, 2, 4)
set -euo pipefail
cd "$(dirname "$0")/.."
vpas=5000 rounds=2 loops=4
while (($#)); do
  case $1 in
    --vpas) vpas=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --loops) loops=$2; shift 2 ;;
    *) echo "usage: $0 [--vpas N] [--rounds R] [--loops L]" >&2; exit 2 ;;
  esac
done
out=${CARGO_TARGET_DIR:-target}/bench-dashboard-cost
mkdir -p "$out"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The mean wall time of a run's loops after the first, the dashboard's step included (seconds).
loop_wall() {
  python3 - "${CARGO_TARGET_DIR:-target}/bench-recommender/$1-$((vpas * 10)).csv" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))[1:]
walls = [float(r["total_s"]) + (float(r["dashboard_s"]) if r["dashboard_s"] != "nan" else 0.0) for r in rows]
print(f"{sum(walls) / max(len(walls), 1):.3f}")
EOF
}

# One run: prints "cpu_per_loop peak_rss_bytes loop_wall_seconds".
run() {
  local label=$1 log=$out/$1.log
  shift
  TAILOR_BENCH_VPAS=$vpas TAILOR_BENCH_LOOPS=$loops hack/bench-recommender.sh --label "$label" "$@" >"$log" 2>&1 \
    || { tail -30 "$log" >&2; echo "run $label failed (log: $log)" >&2; exit 1; }
  local last cpu peak pods
  last=$(grep '^peak_rss_bytes_per_pod=' "$log" | tail -1)
  pods=$((vpas * 10))
  peak=$(sed -E 's/.*peak_rss_bytes_per_pod=([0-9]+).*/\1/' <<<"$last")
  cpu=$(sed -E 's/.*loop_seconds_per_50k_pods=([0-9.]+).*/\1/' <<<"$last")
  grep -h 'dashboard polled' "$log" >&2 || true
  echo "$cpu $((peak * pods)) $(loop_wall "$label")"
}

declare -a off_cpu off_rss off_wall on_cpu on_rss on_wall
for ((r = 1; r <= rounds; r++)); do
  read -r c m w < <(run "off-$r")
  off_cpu+=("$c"); off_rss+=("$m"); off_wall+=("$w")
  echo "round $r without the dashboard: cpu_per_loop_per_50k_pods=$c peak_rss_bytes=$m loop_wall_s=$w" >&2
  read -r c m w < <(run "on-$r" --recommender-arg "--dashboard-address=127.0.0.1:$(free_port)")
  on_cpu+=("$c"); on_rss+=("$m"); on_wall+=("$w")
  echo "round $r with the dashboard, polled: cpu_per_loop_per_50k_pods=$c peak_rss_bytes=$m loop_wall_s=$w" >&2
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $vpas VPAs, $((vpas * 10)) pods, $loops loops, $rounds rounds"
awk -v a="$(median "${on_cpu[@]}")" -v b="$(median "${off_cpu[@]}")" \
  -v c="$(median "${on_rss[@]}")" -v d="$(median "${off_rss[@]}")" \
  -v e="$(median "${on_wall[@]}")" -v f="$(median "${off_wall[@]}")" \
  'BEGIN { printf "dashboard_loop_wall_ratio=%.3f dashboard_cpu_per_loop_ratio=%.3f dashboard_peak_rss_ratio=%.3f\n", e / f, a / b, c / d }'
