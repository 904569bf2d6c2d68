#!/usr/bin/env bash
# What the dashboard costs the recommender: the release tailor-recommender at scale (hack/bench-recommender.sh:
# the stand-in API server with VPAS Deployments, 10 pods each), run without the dashboard and with it on and
# polled once a second (fleet page, JSON twin, a workload page), alternated ROUNDS times in one invocation so
# both see the same machine. Prints each run's CPU per loop and peak RSS, then the ratios of the medians:
#   dashboard_cpu_per_loop_ratio=R dashboard_peak_rss_ratio=M
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

# One run: prints "cpu_per_loop peak_rss_bytes".
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
  echo "$cpu $((peak * pods))"
}

declare -a off_cpu off_rss on_cpu on_rss
for ((r = 1; r <= rounds; r++)); do
  read -r c m < <(run "off-$r")
  off_cpu+=("$c"); off_rss+=("$m")
  echo "round $r without the dashboard: cpu_per_loop_per_50k_pods=$c peak_rss_bytes=$m" >&2
  read -r c m < <(run "on-$r" --recommender-arg "--dashboard-address=127.0.0.1:$(free_port)")
  on_cpu+=("$c"); on_rss+=("$m")
  echo "round $r with the dashboard, polled: cpu_per_loop_per_50k_pods=$c peak_rss_bytes=$m" >&2
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $vpas VPAs, $((vpas * 10)) pods, $loops loops, $rounds rounds"
awk -v a="$(median "${on_cpu[@]}")" -v b="$(median "${off_cpu[@]}")" \
  -v c="$(median "${on_rss[@]}")" -v d="$(median "${off_rss[@]}")" \
  'BEGIN { printf "dashboard_cpu_per_loop_ratio=%.3f dashboard_peak_rss_ratio=%.3f\n", a / b, c / d }'
