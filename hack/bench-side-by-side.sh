#!/usr/bin/env bash
# The two recommenders side by side on the real control plane
# (docs/decisions/measuring-against-upstream.md): `hack/cluster.sh up
# --with-upstream`, VPAS Deployments of REPLICAS kwok pods each (their usage from kwok's annotations, served by
# metrics-server), and per Deployment one upstream `autoscaling.k8s.io/v1` VPA and one Tailor
# `autoscaling.tailor.dev/v1` VPA, both updateMode "Off" (and both updaters stopped). Once every pod runs and has
# metrics, both recommenders are started afresh with the same --recommender-interval and watched until each has
# run WARMUP + LOOPS loops, counted by its own loop-duration histogram
# (tailor_recommender_step_duration_seconds{step="total"}, vpa_recommender_execution_latency_seconds{step="total"}).
# Per process: peak RSS (VmHWM of /proc/PID/status, over its whole life), CPU per loop (utime+stime of
# /proc/PID/stat from the end of the warm-up loops to the end of the last, divided by the loops), wall time per
# loop and per step (the histograms' sums), API requests per loop by verb and resource (the API server's audit
# log), and how many VPAs have a recommendation at the end: all of them on both sides, or the script fails.
# Prints a table and ends with one line
#   side_by_side tailor_peak_rss_mib=… upstream_peak_rss_mib=… tailor_cpu_ms_per_loop=… upstream_cpu_ms_per_loop=…
# The cluster is brought down at the end, also on failure (KEEP_CLUSTER=1 leaves it up).
#
# Usage: hack/bench-side-by-side.sh [--vpas N] [--replicas R | --pods P] [--loops L] [--warmup-loops W]
#                                   [--interval 1m] [--namespaces K] [--kube-api-qps Q] [--poll S] [--out DIR]
#                                   [--tailor-arg CHANGE]... [--upstream-arg CHANGE]...
# Defaults: 1,000 VPAs × 10 replicas (10,000 pods), 10 loops after 1 warm-up loop, 1 m interval, 10 namespaces,
# controller-manager and scheduler at 200 QPS. A smoke run: --vpas 50 --replicas 2 --loops 3 --interval 20s.
# Each side runs with its defaults and the interval: Tailor's recommender with the arguments its chart renders
# (hack/cluster/values.yaml, less the e2e suite's --checkpoints-max-age and forced leader election: the chart
# elects a leader only with more than one replica, and upstream's runs without), upstream's with the flags
# hack/cluster.sh gives it; --tailor-arg / --upstream-arg change them (hack/cluster.sh's CHANGE: --KEY=VALUE,
# !--KEY). Tailor's recommender is the image's build (profile dist-recommender: fat LTO, ten minutes or more on
# two cores, built while the cluster comes up), or TAILOR_RECOMMENDER=PATH; its webhook and updater are
# target/debug, as hack/cluster.sh builds them. Upstream's is hack/go/build.sh's upstream-vpa (UPSTREAM_VPA_VERSION in hack/go/versions.env).
# Samples (one CSV line per process per poll), both processes' logs and metrics: under --out
# (default target/bench-side-by-side).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
STATE=${TAILOR_CLUSTER_DIR:-$ROOT/target/cluster}
export TAILOR_CLUSTER_DIR=$STATE
CLUSTER=$ROOT/hack/cluster.sh

log() { printf 'side-by-side: %s\n' "$*" >&2; }
die() { printf 'side-by-side: %s\n' "$*" >&2; exit 1; }

vpas=1000 replicas='' pods='' loops=10 warmup=1 interval=1m namespaces=10 qps=200 poll=2
out=$ROOT/target/bench-side-by-side
tailor_args=() upstream_args=()
while (($#)); do
  case $1 in
    --vpas) vpas=$2; shift 2 ;;
    --replicas) replicas=$2; shift 2 ;;
    --pods) pods=$2; shift 2 ;;
    --loops) loops=$2; shift 2 ;;
    --warmup-loops) warmup=$2; shift 2 ;;
    --interval) interval=$2; shift 2 ;;
    --namespaces) namespaces=$2; shift 2 ;;
    --kube-api-qps) qps=$2; shift 2 ;;
    --poll) poll=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --tailor-arg) tailor_args+=("$2"); shift 2 ;;
    --upstream-arg) upstream_args+=("$2"); shift 2 ;;
    -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see the header of hack/bench-side-by-side.sh)" ;;
  esac
done
for n in vpas loops namespaces qps poll; do [[ ${!n} =~ ^[1-9][0-9]*$ ]] || die "--$n takes a positive integer"; done
[[ $warmup =~ ^[0-9]+$ ]] || die "--warmup-loops takes an integer"
if [[ -z $replicas ]]; then
  if [[ -z $pods ]]; then replicas=10; else
    if ! [[ $pods =~ ^[1-9][0-9]*$ ]] || ((pods % vpas != 0)); then die "--pods must be a multiple of --vpas"; fi
    replicas=$((pods / vpas))
  fi
fi
[[ $replicas =~ ^[1-9][0-9]*$ ]] || die "--replicas takes a positive integer"
[[ -z $pods || $pods -eq $((vpas * replicas)) ]] || die "--pods differs from --vpas × --replicas"
pods=$((vpas * replicas))
((namespaces <= vpas)) || namespaces=$vpas
case $interval in
  *m) interval_s=$((${interval%m} * 60)) ;;
  *s) interval_s=${interval%s} ;;
  *) die "--interval takes Ns or Nm" ;;
esac
[[ $interval_s =~ ^[1-9][0-9]*$ ]] || die "--interval takes Ns or Nm"
# kwok nodes take 110 pods each: about 100 a node.
nodes=$(((pods + 99) / 100))
((nodes >= 2)) || nodes=2
((nodes <= 999)) || die "$pods pods need more than 999 kwok nodes"

# --- one cluster on the machine --------------------------------------------------------------------------------
ours=
[[ -f $STATE/pids/kube-apiserver ]] && ours=$(cat "$STATE/pids/kube-apiserver")
for pid in $(pgrep -x kube-apiserver || true); do
  [[ $pid == "$ours" ]] || die "a kube-apiserver not started from $STATE runs (pid $pid): one cluster at a time on this machine"
done

# --- binaries ------------------------------------------------------------------------------------------------------
# The recommender under test builds while the cluster comes up (it starts only once the pods run); until then
# the cluster runs hack/cluster.sh's debug recommender, which is stopped before the workload is created.
target=${CARGO_TARGET_DIR:-$ROOT/target}
rm -rf "${out:?}/bin" "${out:?}/manifests"
mkdir -p "$out/bin" "$out/manifests"
build_pid=
if [[ -z ${TAILOR_RECOMMENDER:-} ]]; then
  log "building tailor-recommender in the background (profile dist-recommender, as the image ships it)"
  cargo build --profile dist-recommender -q -p tailor-recommender --bin tailor-recommender >"$out/build.log" 2>&1 &
  build_pid=$!
  TAILOR_RECOMMENDER=$target/dist-recommender/tailor-recommender
fi
log "building tailor-admission, tailor-updater and tailor-recommender (debug, as hack/cluster.sh does)"
cargo build -q -p tailor-recommender -p tailor-admission -p tailor-updater
for c in recommender admission updater; do ln -s "$target/debug/tailor-$c" "$out/bin/tailor-$c"; done
export TAILOR_BIN_DIR=$out/bin

# --- the cluster ---------------------------------------------------------------------------------------------------
cleanup() {
  local rc=$?
  [[ -z $build_pid ]] || kill "$build_pid" 2>/dev/null || true
  if [[ -d $STATE/logs ]]; then cp "$STATE"/logs/{recommender-0,upstream-recommender}.log "$out/" 2>/dev/null || true; fi
  if [[ ${KEEP_CLUSTER:-0} == 1 ]]; then
    log "KEEP_CLUSTER=1: the cluster stays up (hack/cluster.sh down stops it)"
  else
    "$CLUSTER" down || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

{
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/^Mem:/ {print $2}') GiB"
  echo "size: $vpas VPAs of each kind, $replicas replicas each ($pods pods) in $namespaces namespaces on $nodes kwok nodes"
  echo "interval: $interval; loops measured: $loops after $warmup warm-up loop(s)"
  echo "tailor: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo +changes)," \
    "$(realpath "$TAILOR_RECOMMENDER"); upstream: $(sed -n 's/^UPSTREAM_VPA_VERSION=//p' hack/go/versions.env)"
  echo "started: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$out/run.txt" >&2

t_up=$SECONDS
env_lines=$("$CLUSTER" up --with-upstream --nodes "$nodes" --kube-api-qps "$qps") || die "the cluster did not come up"
eval "$env_lines"
# shellcheck disable=SC1091 # written by hack/cluster.sh up
source "$STATE/env"
log "cluster up in $((SECONDS - t_up)) s"
# Only the recommenders under test: the updaters would have nothing to do (updateMode Off), and both
# recommenders start afresh once the cluster is full.
"$CLUSTER" tailor stop updater 0
"$CLUSTER" upstream stop updater
"$CLUSTER" tailor stop recommender 0
"$CLUSTER" upstream stop recommender

# --- the workload -------------------------------------------------------------------------------------------------
LABEL=tailor.dev/bench=side-by-side
# manifest I: Deployment app-I in namespace sbs-(I mod K), and its two VPAs. Each Deployment uses its own CPU
# and memory, the same in every replica.
manifest() {
  local i=$1 name ns cpu mem group
  name=$(printf 'app-%04d' "$i")
  ns=$(printf 'sbs-%02d' $((i % namespaces)))
  cpu=$((20 + (i * 37) % 480))m
  mem=$((64 + (i * 53) % 448))Mi
  for group in autoscaling.k8s.io autoscaling.tailor.dev; do
    cat <<EOF
---
apiVersion: $group/v1
kind: VerticalPodAutoscaler
metadata: {name: $name, namespace: $ns, labels: {${LABEL%=*}: ${LABEL#*=}}}
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: $name}
  updatePolicy: {updateMode: "Off"}
EOF
  done
  cat <<EOF
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: $name, namespace: $ns, labels: {${LABEL%=*}: ${LABEL#*=}}}
spec:
  replicas: $replicas
  selector: {matchLabels: {app: $name}}
  template:
    metadata:
      labels: {app: $name}
      annotations: {kwok.x-k8s.io/usage-cpu: $cpu, kwok.x-k8s.io/usage-memory: $mem}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: app
        image: registry.k8s.io/pause:3.10
        resources: {requests: {cpu: 20m, memory: 32Mi}}
EOF
}

t_create=$SECONDS
for ((k = 0; k < namespaces; k++)); do printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: sbs-%02d}\n---\n' "$k"; done \
  >"$out/manifests/namespaces.yaml"
kubectl create -f "$out/manifests/namespaces.yaml" >/dev/null
# One file per namespace, created by four kubectl processes at a time (each sends one request per object).
for ((i = 0; i < vpas; i++)); do manifest "$i" >>"$out/manifests/$(printf 'sbs-%02d' $((i % namespaces))).yaml"; done
find "$out/manifests" -name 'sbs-*.yaml' -print0 | xargs -0 -P 4 -n 1 kubectl create -f >"$out/create.log" 2>&1 ||
  { tail -n 20 "$out/create.log" >&2; die "creating the objects failed"; }
log "$((vpas * 3)) objects created in $((SECONDS - t_create)) s; waiting for $pods pods"

ready_pods() {
  kubectl get deployments -A -l "$LABEL" -o jsonpath='{range .items[*]}{.status.readyReplicas}{" "}{end}' |
    awk '{for (i = 1; i <= NF; i++) s += $i} END {print s + 0}'
}
t_pods=$SECONDS
best=0 best_at=$SECONDS
while :; do
  n=$(ready_pods)
  ((n > best)) && { best=$n; best_at=$SECONDS; }
  ((n >= pods)) && break
  ((SECONDS - best_at < 600)) || die "pods stalled at $best of $pods ready for 10 min (logs: $STATE/logs)"
  log "pods ready: $n / $pods ($((SECONDS - t_pods)) s, load average $(cut -d' ' -f1 /proc/loadavg))"
  sleep 15
done
log "$pods pods ready in $((SECONDS - t_pods)) s"
metrics_pods() {
  kubectl get --raw /apis/metrics.k8s.io/v1beta1/pods 2>/dev/null |
    jq '[.items[] | select(.metadata.namespace | startswith("sbs-"))] | length'
}
t_metrics=$SECONDS
until (($(metrics_pods || echo 0) >= pods)); do
  ((SECONDS - t_metrics < 600)) || die "metrics-server serves $(metrics_pods || echo 0) of $pods pods after 10 min"
  sleep 10
done
log "metrics of every pod served ($((SECONDS - t_metrics)) s)"
{
  echo "cluster ready: $((SECONDS - t_up)) s after up (objects $((t_pods - t_create)) s, pods $((t_metrics - t_pods)) s)"
} | tee -a "$out/run.txt" >&2

# --- the two recommenders -------------------------------------------------------------------------------------------
if [[ -n $build_pid ]]; then
  log "waiting for the build of tailor-recommender"
  wait "$build_pid" || { tail -n 30 "$out/build.log" >&2; die "building tailor-recommender failed"; }
  build_pid=
fi
[[ -x $TAILOR_RECOMMENDER ]] || die "no tailor-recommender at $TAILOR_RECOMMENDER"
ln -sfn "$(realpath "$TAILOR_RECOMMENDER")" "$out/bin/tailor-recommender"
"$CLUSTER" tailor start recommender 0 "--recommender-interval=$interval" '!--checkpoints-max-age' '!--leader-elect' \
  '!--leader-elect-lease-name' "${tailor_args[@]}"
"$CLUSTER" upstream start recommender "--recommender-interval=$interval" "${upstream_args[@]}"
echo "recommenders started: $(date -u '+%H:%M:%S UTC')" >>"$out/run.txt"
# The command lines: hack/cluster.sh supervise RESTARTS_FILE BINARY ARGS...
for side in recommender-0 upstream-recommender; do
  echo "$side: $(tr '\0' '\n' <"$STATE/cmd/$side" | tail -n +4 | tr '\n' ' ')" | tee -a "$out/run.txt" >&2
done

sides=(tailor upstream)
declare -A SUP=([tailor]=recommender-0 [upstream]=upstream-recommender)
declare -A BIN=([tailor]=tailor-recommender [upstream]=recommender)
declare -A PORT=([tailor]=$RECOMMENDER_METRICS_PORT [upstream]=$UPSTREAM_RECOMMENDER_METRICS_PORT)
declare -A HIST=([tailor]=tailor_recommender_step_duration_seconds [upstream]=vpa_recommender_execution_latency_seconds)
declare -A GROUP=([tailor]=autoscaling.tailor.dev [upstream]=autoscaling.k8s.io)
declare -A PID=() N0=() CPU0=() SUM0=() T0=() N1=() CPU1=() SUM1=() T1=() LAST_N=() LAST=() LAST_HWM=()

# child_pid SIDE: the recommender process under its supervisor (hack/cluster.sh supervise).
child_pid() {
  local sup c
  sup=$(cat "$STATE/pids/${SUP[$1]}" 2>/dev/null) || return 1
  for c in $(pgrep -P "$sup" || true); do
    [[ $(readlink "/proc/$c/exe" 2>/dev/null) == */"${BIN[$1]}" ]] && { echo "$c"; return 0; }
  done
  return 1
}
scrape() { curl -fsS --max-time 10 "http://127.0.0.1:${PORT[$1]}/metrics" 2>/dev/null || true; }
# hist_value TEXT NAME STEP: NAME{step="STEP"} in the metrics TEXT (0 when absent).
hist_value() {
  awk -v n="$2{" -v s="step=\"$3\"" 'index($1, n) == 1 && index($1, s) {v = $NF} END {printf "%.6f\n", v + 0}' <<<"$1"
}
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
status_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
restarts() { cat "$STATE/restarts-${SUP[$1]}" 2>/dev/null || echo 0; }
HZ=$(getconf CLK_TCK)

for side in "${sides[@]}"; do
  for _ in $(seq 1 60); do PID[$side]=$(child_pid "$side") && break; sleep 0.5; done
  [[ -n ${PID[$side]:-} ]] || die "no $side recommender process under ${SUP[$side]} (logs: $STATE/logs)"
done
log "pids: tailor ${PID[tailor]}, upstream ${PID[upstream]}"
echo "time,side,loops,loop_seconds_sum,cpu_ticks,vmhwm_kib,vmrss_kib,load1" >"$out/samples.csv"
deadline=$((SECONDS + (warmup + loops + 2) * interval_s * 3 + 900))
loads=()
failure=
while :; do
  for side in "${sides[@]}"; do
    [[ -n ${T1[$side]:-} ]] && continue
    pid=${PID[$side]}
    if [[ ! -r /proc/$pid/stat ]] || (($(restarts "$side") > 0)); then
      failure="$side recommender exited during the run (restarts: $(restarts "$side"); log: $out/${SUP[$side]}.log)"
      break 2
    fi
    text=$(scrape "$side")
    [[ -n $text ]] || continue # busy or not listening yet: the next poll
    n=$(hist_value "$text" "${HIST[$side]}_count" total)
    n=${n%.*}
    sum=$(hist_value "$text" "${HIST[$side]}_sum" total)
    cpu=$(cpu_ticks "$pid")
    now=$(date +%s.%N)
    load1=$(cut -d' ' -f1 /proc/loadavg)
    echo "$now,$side,$n,$sum,$cpu,$(status_kib "$pid" VmHWM),$(status_kib "$pid" VmRSS),$load1" >>"$out/samples.csv"
    LAST[$side]="$n $cpu $sum $now" LAST_HWM[$side]=$(status_kib "$pid" VmHWM)
    if [[ ${LAST_N[$side]:-0} != "$n" ]]; then
      log "$side: loop $n done ($(date -u +%H:%M:%S)), CPU so far $((cpu * 1000 / HZ)) ms, VmHWM $(($(status_kib "$pid" VmHWM) / 1024)) MiB"
      LAST_N[$side]=$n
    fi
    if [[ -z ${N0[$side]:-} ]] && ((n >= warmup)); then
      N0[$side]=$n CPU0[$side]=$cpu SUM0[$side]=$sum T0[$side]=$now
      printf '%s\n' "$text" >"$out/$side-metrics-start.txt"
    fi
    if [[ -n ${N0[$side]:-} ]] && ((n >= N0[$side] + loops)); then
      N1[$side]=$n CPU1[$side]=$cpu SUM1[$side]=$sum T1[$side]=$now
      printf '%s\n' "$text" >"$out/$side-metrics-end.txt"
    fi
  done
  [[ -n ${N0[tailor]:-}${N0[upstream]:-} ]] && loads+=("$(cut -d' ' -f1 /proc/loadavg)")
  [[ -n ${T1[tailor]:-} && -n ${T1[upstream]:-} ]] && break
  if ((SECONDS > deadline)); then
    failure="not every side ran $warmup + $loops loops in time: tailor ${LAST_N[tailor]:-0}, upstream ${LAST_N[upstream]:-0}"
    break
  fi
  sleep "$poll"
done

# --- the figures ----------------------------------------------------------------------------------------------------
# After a failure: the figures up to the last sample of a side that had started measuring.
for side in "${sides[@]}"; do
  if [[ -n $failure && -n ${N0[$side]:-} && -z ${T1[$side]:-} && -n ${LAST[$side]:-} ]]; then
    read -r n cpu sum now <<<"${LAST[$side]}"
    N1[$side]=$n CPU1[$side]=$cpu SUM1[$side]=$sum T1[$side]=$now
    ((N1[$side] > N0[$side])) || unset "T1[$side]"
    log "$side: figures up to its last sample (loop ${N1[$side]})"
  fi
done
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
recommended() {
  kubectl get "verticalpodautoscalers.${GROUP[$1]}" -A -l "$LABEL" -o json |
    jq '[.items[] | select((.status.recommendation.containerRecommendations // []) | length > 0)] | length'
}
# steps SIDE: mean seconds per loop of every step between the start and end metrics.
steps() {
  local f=$out/$1-metrics
  [[ -f $f-end.txt ]] || return 0
  awk -v n="${HIST[$1]}" '
    function step(l) { match(l, /step="[^"]*"/); return substr(l, RSTART + 6, RLENGTH - 7) }
    index($1, n "_sum{") == 1 { s[FILENAME == ARGV[1], step($1)] = $NF; names[step($1)] = 1 }
    index($1, n "_count{") == 1 { c[FILENAME == ARGV[1], step($1)] = $NF }
    END { for (x in names) if (c[0, x] > c[1, x]) printf "  %-22s %8.3f s\n", x, (s[0, x] - s[1, x]) / (c[0, x] - c[1, x]) }
  ' "$f-start.txt" "$f-end.txt" | sort
}
# counters SIDE: Tailor's write and sample counters per loop.
counters() {
  local f=$out/$1-metrics loops_run=$2
  [[ -f $f-end.txt ]] || return 0
  awk -v l="$loops_run" '
    /^tailor_recommender_(status_writes|checkpoint_writes|samples)_total/ { v[FILENAME == ARGV[1], $1] = $NF; k[$1] = 1 }
    END { for (x in k) if (v[0, x] - v[1, x] > 0) printf "  %-70s %10.1f\n", x, (v[0, x] - v[1, x]) / l }
  ' "$f-start.txt" "$f-end.txt" | sort
}
# requests SIDE USER: the API requests of USER per loop between the side's start and end, from the audit log.
requests() {
  [[ -n ${T1[$1]:-} && -f $STATE/audit.log ]] || return 0
  grep -F "\"username\":\"$2\"" "$STATE/audit.log" | python3 -c '
import collections, datetime, json, sys
t0, t1, loops = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
count = collections.Counter()
for line in sys.stdin:
    e = json.loads(line)
    if e.get("stage") != "ResponseComplete":
        continue
    t = datetime.datetime.fromisoformat(e["stageTimestamp"].replace("Z", "+00:00")).timestamp()
    if not t0 <= t <= t1:
        continue
    ref = e.get("objectRef", {})
    what = ref.get("resource", e.get("requestURI", "?").split("?")[0])
    if ref.get("subresource"):
        what += "/" + ref["subresource"]
    if ref.get("apiGroup"):
        what += "." + ref["apiGroup"]
    count[(e["verb"], what)] += 1
for (verb, what), n in sorted(count.items(), key=lambda kv: -kv[1]):
    print(f"  {verb:>6} {what:<58} {n / loops:10.1f}")
' "${T0[$1]}" "${T1[$1]}" "$((N1[$1] - N0[$1]))"
}

declare -A HWM=() RSS=() REC=() CPU_MS=() WALL_S=() START_MS=()
for side in "${sides[@]}"; do
  pid=${PID[$side]}
  if [[ -r /proc/$pid/status ]]; then
    HWM[$side]=$(status_kib "$pid" VmHWM) RSS[$side]=$(status_kib "$pid" VmRSS)
  else
    HWM[$side]=${LAST_HWM[$side]:-0} # its last sample
  fi
  REC[$side]=$(recommended "$side" || echo "?")
  if [[ -n ${T1[$side]:-} ]]; then
    l=$((N1[$side] - N0[$side]))
    CPU_MS[$side]=$(awk -v a="${CPU0[$side]}" -v b="${CPU1[$side]}" -v l="$l" -v hz="$HZ" 'BEGIN {printf "%.0f", (b - a) * 1000 / hz / l}')
    WALL_S[$side]=$(awk -v a="${SUM0[$side]}" -v b="${SUM1[$side]}" -v l="$l" 'BEGIN {printf "%.2f", (b - a) / l}')
    START_MS[$side]=$(awk -v a="${CPU0[$side]}" -v hz="$HZ" 'BEGIN {printf "%.0f", a * 1000 / hz}')
  fi
done
load_range=$(printf '%s\n' "${loads[@]:-0}" | sort -g | awk 'NR == 1 {lo = $1} {hi = $1; s += $1} END {printf "%s–%s (mean %.1f)", lo, hi, s / NR}')
row() { printf '%-46s %16s %16s\n' "$@"; }
{
  echo
  row "" tailor upstream
  row "loops measured (after $warmup warm-up)" "$((${N1[tailor]:-${N0[tailor]:-0}} - ${N0[tailor]:-0}))" \
    "$((${N1[upstream]:-${N0[upstream]:-0}} - ${N0[upstream]:-0}))"
  row "peak RSS, VmHWM (MiB)" "$(mib "${HWM[tailor]:-0}")" "$(mib "${HWM[upstream]:-0}")"
  row "RSS at the end (MiB)" "$(mib "${RSS[tailor]:-0}")" "$(mib "${RSS[upstream]:-0}")"
  row "CPU per loop (ms)" "${CPU_MS[tailor]:-?}" "${CPU_MS[upstream]:-?}"
  row "CPU from start to the end of warm-up (ms)" "${START_MS[tailor]:-?}" "${START_MS[upstream]:-?}"
  row "wall time per loop (s)" "${WALL_S[tailor]:-?}" "${WALL_S[upstream]:-?}"
  row "VPAs with a recommendation" "${REC[tailor]}/$vpas" "${REC[upstream]}/$vpas"
  echo "load average (1 min) while measuring: $load_range"
  for side in "${sides[@]}"; do
    echo "$side: mean seconds per loop by step"
    steps "$side"
  done
  echo "tailor: counters per loop"
  counters tailor "$((${N1[tailor]:-1} - ${N0[tailor]:-0}))"
  echo "tailor: API requests per loop (audit log)"
  requests tailor system:serviceaccount:tailor-system:tailor-recommender || true
  echo "upstream: API requests per loop (audit log)"
  requests upstream system:serviceaccount:kube-system:vpa-recommender || true
} | tee -a "$out/run.txt"
[[ -z $failure ]] || die "$failure"
for side in "${sides[@]}"; do
  [[ ${REC[$side]} == "$vpas" ]] || die "$side: ${REC[$side]} of $vpas VPAs have a recommendation"
done
echo "side_by_side vpas=$vpas pods=$pods interval=$interval loops=$loops" \
  "tailor_peak_rss_mib=$(mib "${HWM[tailor]}") upstream_peak_rss_mib=$(mib "${HWM[upstream]}")" \
  "tailor_cpu_ms_per_loop=${CPU_MS[tailor]} upstream_cpu_ms_per_loop=${CPU_MS[upstream]}" \
  "tailor_loop_s=${WALL_S[tailor]} upstream_loop_s=${WALL_S[upstream]}" | tee -a "$out/run.txt"
