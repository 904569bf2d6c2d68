#!/usr/bin/env bash
# How much slower a rollout gets with a VPA webhook in the pod-creation path, on the real local control plane
# (hack/cluster.sh up --with-upstream): bursts of DEPLOYMENTS Deployments × REPLICAS kwok pods, created by
# `kubectl apply` of fresh Deployments (each gets a new ReplicaSet), four ways alternated in one run, none,
# floor, tailor, upstream, none, floor, … for ROUNDS rounds after WARMUP unmeasured rounds:
#   none      namespace bench-none: no mutating webhook is called (every webhook's namespaceSelector excludes it);
#   floor     namespace bench-floor: the cheapest webhook an API server can call (admission/examples/floor.rs
#             --allow: the same TLS and HTTP as Tailor's, answering `allowed` with the request's uid and no
#             patch), registered like upstream's below: what calling any mutating webhook costs;
#   tailor    namespace bench-tailor: Tailor's pod webhook only (pods.admission.tailor.dev), and one Tailor VPA
#             (autoscaling.tailor.dev/v1, updateMode Initial) per Deployment carrying a recommendation;
#   upstream  namespace bench-upstream: upstream VPA's admission controller only (vpa.k8s.io,
#             UPSTREAM_VPA_VERSION of hack/go/versions.env), and one upstream VPA (autoscaling.k8s.io/v1) per
#             Deployment with the same recommendation.
# How the API server reaches each webhook: Tailor's chart registers a Service, and the API server speaks HTTP/1.1
# to a Service-referenced webhook (one request per connection at a time, connections opened as the burst needs
# them; k8s.io/apiserver's webhook client, for load balancing across replicas), as it would to upstream's
# registered by Service, its default. hack/cluster.sh registers upstream's by URL at 127.0.0.1, and to a URL on
# loopback the API server speaks HTTP/2 (one multiplexed connection), which no Service-referenced webhook gets.
# So upstream's is re-registered here at this machine's first non-loopback address (a serving certificate for
# it signed by the cluster's CA): HTTP/1.1 on both sides, as in a cluster. --upstream-h2 keeps the loopback URL.
# The floor is registered by URL beside upstream's (same address, same certificate).
# The webhooks stay registered all run long, scoped by namespace with their own settings: Tailor's chart value
# admission.webhook.excludeNamespaces={bench-none,bench-floor,bench-upstream} (hack/cluster.sh up --helm-set),
# upstream's --ignored-vpa-object-namespaces=bench-none,bench-floor,bench-tailor (its admission controller
# re-registers with it), the floor's namespaceSelector only bench-floor.
# The API server then skips a webhook whose selector leaves the namespace out, so "none" pays only the selector
# check, as any namespace a webhook excludes does. The recommendations are written by hand to the VPAs' status
# under a recommender nothing serves (spec.recommenders), so they stay as written; both recommenders and both
# updaters are stopped during the bursts (not in the creation path; on two cores their loops would only add
# noise; --keep-loops leaves them running).
#
# Per burst (hack/bench_pod_creation.py burst, which says how each figure is taken): the time from `kubectl
# apply` to all pods created (the last pod creation to complete, from the API server's audit log: the pod passed
# admission and was stored; the webhook acts on nothing later) and to all Running (kwok's, as a watch saw it);
# the API server's apiserver_admission_webhook_admission_duration_seconds for the mode's webhook (type admit,
# CREATE; p50/p99 from the /metrics delta around the burst, interpolated within its buckets 5, 25, 100 ms, …, so
# a p99 under 5 ms only says "under 5 ms"; the mean from _sum/_count is exact) and the webhook's own review
# time; every pod creation's latency (audit log, exact); the CPU time of the API server, etcd, the controller
# manager, the scheduler, kwok and both webhooks; how many pods were admitted with the recommendation and which
# webhooks each creation called. Then the Deployments are deleted, the burst ends once no pod or ReplicaSet is
# left, and SETTLE seconds pass. Ends with one line (the medians of the measured bursts' "created" times; the
# p99 from the histogram summed over them):
#   creation_overhead_tailor_pct=X creation_overhead_upstream_pct=Y webhook_p99_ms_tailor=Z webhook_p99_ms_upstream=W
# after one with the floor: creation_overhead_floor_pct= webhook_p99_ms_floor= tailor_over_floor_pct= (Tailor's
# median over the floor's: what Tailor's webhook adds beyond what calling any webhook costs).
#
# Usage: hack/bench-pod-creation.sh [--deployments N] [--replicas R] [--rounds R] [--warmup-rounds W]
#                                   [--kube-api-qps Q] [--settle S] [--keep-loops] [--out DIR]
#                                   [--tailor-arg CHANGE]... [--upstream-arg CHANGE]... [--upstream-h2]
# Defaults: 20 Deployments × 100 replicas (2,000 pods a burst), 3 rounds after 1 warm-up round, the
# controller-manager and scheduler at 500 QPS (burst 1,000; at their default 20 the ReplicaSet controller's
# client rate limit, not admission, sets the pace), 5 s settle. About 20 minutes on 2 cores (33 with --rounds 5).
# --tailor-arg / --upstream-arg change a webhook's command line before the bursts (hack/cluster.sh's CHANGE:
# --KEY=VALUE, !--KEY), e.g. --tailor-arg --runtime-threads=1.
# Tailor's webhook is the image's build (profile dist, fat LTO; about 10 minutes cold on two cores), or
# TAILOR_ADMISSION=PATH; its recommender and updater are hack/cluster.sh's debug builds. The cluster has its own
# state directory (TAILOR_CLUSTER_DIR, default OUT/cluster) and is brought down at the end, also on failure
# (KEEP_CLUSTER=1 leaves it up). Records: OUT/bursts.jsonl, OUT/run.txt (default target/bench-pod-creation).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
CLUSTER=$ROOT/hack/cluster.sh
HELPER=$ROOT/hack/bench_pod_creation.py

log() { printf 'pod-creation: %s\n' "$*" >&2; }
die() { printf 'pod-creation: %s\n' "$*" >&2; exit 1; }

deployments=20 replicas=100 rounds=3 warmup=1 qps=500 settle=5 keep_loops=0 upstream_h2=0
out=$ROOT/target/bench-pod-creation
tailor_args=() upstream_args=()
while (($#)); do
  case $1 in
    --deployments) deployments=$2; shift 2 ;;
    --replicas) replicas=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --warmup-rounds) warmup=$2; shift 2 ;;
    --kube-api-qps) qps=$2; shift 2 ;;
    --settle) settle=$2; shift 2 ;;
    --keep-loops) keep_loops=1; shift ;;
    --upstream-h2) upstream_h2=1; shift ;;
    --out) out=$2; shift 2 ;;
    --tailor-arg) tailor_args+=("$2"); shift 2 ;;
    --upstream-arg) upstream_args+=("$2"); shift 2 ;;
    -h | --help) sed -n '2,52p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see the header of hack/bench-pod-creation.sh)" ;;
  esac
done
for n in deployments replicas rounds qps; do [[ ${!n} =~ ^[1-9][0-9]*$ ]] || die "--$n takes a positive integer"; done
for n in warmup settle; do [[ ${!n} =~ ^[0-9]+$ ]] || die "--${n/warmup/warmup-rounds} takes an integer"; done
pods=$((deployments * replicas))
# kwok nodes take 110 pods each: about 100 a node, and one spare.
nodes=$(((pods + 99) / 100 + 1))
((nodes <= 999)) || die "$pods pods need more than 999 kwok nodes"
mkdir -p "$out"
out=$(cd "$out" && pwd)
STATE=${TAILOR_CLUSTER_DIR:-$out/cluster}
export TAILOR_CLUSTER_DIR=$STATE

# The sizes: the template's requests (limits twice them) and the recommendation the webhooks apply.
TEMPLATE_CPU=50m TEMPLATE_MEMORY=64Mi REC_CPU=150m REC_MEMORY=300Mi
FIXED_RECOMMENDER=bench-fixed

# --- one cluster on the machine ----------------------------------------------------------------------------------
ours=
[[ -f $STATE/pids/kube-apiserver ]] && ours=$(cat "$STATE/pids/kube-apiserver")
for pid in $(pgrep -x kube-apiserver || true); do
  [[ $pid == "$ours" ]] || die "a kube-apiserver not started from $STATE runs (pid $pid): one cluster at a time on this machine"
done

# --- binaries (built before anything is measured) ---------------------------------------------------------------
target=${CARGO_TARGET_DIR:-$ROOT/target}
log "building tailor-recommender, tailor-admission and tailor-updater (debug, as hack/cluster.sh does)"
cargo build -q -p tailor-recommender -p tailor-admission -p tailor-updater
if [[ -z ${TAILOR_ADMISSION:-} ]]; then
  log "building tailor-admission (profile dist, as the image ships it)"
  cargo build -q --profile dist -p tailor-admission --bin tailor-admission
  TAILOR_ADMISSION=$target/dist/tailor-admission
fi
log "building the floor webhook (admission/examples/floor.rs, release)"
cargo build -q --release -p tailor-admission --example floor
[[ -x $TAILOR_ADMISSION ]] || die "no tailor-admission at $TAILOR_ADMISSION"
rm -rf "${out:?}/bin" "${out:?}/manifests" "${out:?}/bursts.jsonl"
mkdir -p "$out/bin" "$out/manifests"
for c in recommender updater; do ln -s "$target/debug/tailor-$c" "$out/bin/tailor-$c"; done
ln -s "$(realpath "$TAILOR_ADMISSION")" "$out/bin/tailor-admission"
export TAILOR_BIN_DIR=$out/bin

# --- the cluster ---------------------------------------------------------------------------------------------------
cleanup() {
  local rc=$?
  [[ -f $STATE/pids/bench-floor ]] && kill "$(cat "$STATE/pids/bench-floor")" 2>/dev/null
  if [[ ${KEEP_CLUSTER:-0} == 1 ]]; then
    log "KEEP_CLUSTER=1: the cluster stays up (TAILOR_CLUSTER_DIR=$STATE hack/cluster.sh down stops it)"
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
  echo "size: $deployments Deployments × $replicas replicas ($pods pods a burst) on $nodes kwok nodes; $rounds rounds after $warmup warm-up round(s); controller-manager and scheduler at $qps QPS"
  echo "tailor: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- admission core kube crds 2>/dev/null || echo +changes)," \
    "webhook $(realpath "$TAILOR_ADMISSION"); upstream: $(sed -n 's/^UPSTREAM_VPA_VERSION=//p' hack/go/versions.env)"
  echo "started: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$out/run.txt" >&2

t_up=$SECONDS
env_lines=$("$CLUSTER" up --with-upstream --nodes "$nodes" --kube-api-qps "$qps" \
  --helm-set 'admission.webhook.excludeNamespaces={bench-none,bench-floor,bench-upstream}') ||
  die "the cluster did not come up"
eval "$env_lines"
log "cluster up in $((SECONDS - t_up)) s"

# Upstream's admission controller scoped away from the other two namespaces and (unless --upstream-h2) at this
# machine's address; it deletes and re-creates its configuration when it starts.
address=127.0.0.1 moved=()
if ((upstream_h2 == 0)); then
  address=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9]+(\.[0-9]+){3}$' | grep -v '^127\.' | head -n 1 || true)
  [[ -n $address ]] || die "no address but loopback for upstream's webhook (--upstream-h2 keeps it on loopback)"
fi
pki=$STATE/pki
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=vpa-webhook \
  -keyout "$pki/upstream-webhook-host.key" -out "$pki/upstream-webhook-host.csr" 2>/dev/null
printf 'subjectAltName=IP:%s,IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' "$address" >"$pki/host.ext"
openssl x509 -req -in "$pki/upstream-webhook-host.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
  -days 2 -extfile "$pki/host.ext" -out "$pki/upstream-webhook-host.crt" 2>/dev/null
if ((upstream_h2 == 0)); then
  moved=("--webhook-address=https://$address" "--tls-cert-file=$pki/upstream-webhook-host.crt"
    "--tls-private-key=$pki/upstream-webhook-host.key")
fi
# The floor: started here (its pid where hack/bench_pod_creation.py reads the processes' CPU time), by URL.
floor_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
"$target/release/examples/floor" --allow --bind "$address" --port "$floor_port" \
  --cert "$pki/upstream-webhook-host.crt" --key "$pki/upstream-webhook-host.key" >"$out/floor.log" 2>&1 &
echo $! >"$STATE/pids/bench-floor"
export FLOOR_PORT=$floor_port
floor_config=$(printf '%s\n' \
  'apiVersion: admissionregistration.k8s.io/v1' \
  'kind: MutatingWebhookConfiguration' \
  'metadata: {name: bench-floor}' \
  'webhooks:' \
  '- name: floor.bench.tailor.dev' \
  '  admissionReviewVersions: [v1]' \
  '  sideEffects: None' \
  '  failurePolicy: Fail' \
  '  timeoutSeconds: 10' \
  "  clientConfig: {url: \"https://$address:$floor_port/\", caBundle: $(base64 -w0 "$pki/ca.crt")}" \
  '  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: bench-floor}}' \
  '  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods], scope: Namespaced}]')
kubectl apply -f - <<<"$floor_config" >/dev/null || die "registering the floor webhook failed"
"$CLUSTER" upstream restart admission-controller --ignored-vpa-object-namespaces=bench-none,bench-floor,bench-tailor \
  "${moved[@]}" "${upstream_args[@]}"
upstream_registered() {
  kubectl get mutatingwebhookconfiguration vpa-webhook-config \
    -o jsonpath='{.webhooks[0].namespaceSelector.matchExpressions[0].values} {.webhooks[0].clientConfig.url}' \
    2>/dev/null | grep -q "bench-tailor.* https://$address:"
}
for _ in $(seq 1 120); do upstream_registered && break; sleep 0.5; done
upstream_registered || die "upstream's webhook configuration did not take its new namespaces and address"
if ((${#tailor_args[@]})); then
  "$CLUSTER" tailor restart admission 0 "${tailor_args[@]}"
  # shellcheck disable=SC1091 # written by hack/cluster.sh up
  port=$(source "$STATE/env" && echo "$ADMISSION_METRICS_PORT")
  for _ in $(seq 1 120); do curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.5; done
  curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null || die "Tailor's webhook is not ready after its restart"
fi
if ((keep_loops == 0)); then
  "$CLUSTER" tailor stop recommender 0
  "$CLUSTER" tailor stop updater 0
  "$CLUSTER" upstream stop recommender
  "$CLUSTER" upstream stop updater
fi
{
  echo "webhooks (name: namespaceSelector, client config):"
  kubectl get mutatingwebhookconfigurations -o go-template='{{range .items}}{{range .webhooks}}  {{.name}}: {{.namespaceSelector}} {{with .clientConfig.url}}url {{.}}{{end}}{{with .clientConfig.service}}service {{.namespace}}/{{.name}}:{{.port}}{{end}}{{"\n"}}{{end}}{{end}}'
  echo "loops (recommenders, updaters): $( ((keep_loops)) && echo running || echo stopped)"
  for side in admission-0 upstream-admission-controller; do # hack/cluster.sh supervise RESTARTS BINARY ARGS...
    echo "$side: $(tr '\0' '\n' <"$STATE/cmd/$side" | tail -n +4 | tr '\n' ' ')"
  done
} | tee -a "$out/run.txt" >&2

# --- the workload ----------------------------------------------------------------------------------------------------
deployment() { # deployment NAMESPACE NAME
  cat <<EOF
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: $2, namespace: $1}
spec:
  replicas: $replicas
  selector: {matchLabels: {app: $2}}
  template:
    metadata:
      labels: {app: $2}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: app
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: $TEMPLATE_CPU, memory: $TEMPLATE_MEMORY}
          limits: {cpu: $((2 * ${TEMPLATE_CPU%m}))m, memory: $((2 * ${TEMPLATE_MEMORY%Mi}))Mi}
EOF
}
vpa() { # vpa GROUP NAMESPACE NAME
  cat <<EOF
---
apiVersion: $1/v1
kind: VerticalPodAutoscaler
metadata: {name: $3, namespace: $2}
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: $3}
  updatePolicy: {updateMode: Initial}
  recommenders: [{name: $FIXED_RECOMMENDER}]
EOF
}
declare -A GROUP=([tailor]=autoscaling.tailor.dev [upstream]=autoscaling.k8s.io)
declare -A WEBHOOK=([none]='' [floor]=floor.bench.tailor.dev [tailor]=pods.admission.tailor.dev [upstream]=vpa.k8s.io)
modes=(none floor tailor upstream)
for mode in "${modes[@]}"; do
  ns=bench-$mode
  kubectl create namespace "$ns" >/dev/null
  for ((i = 0; i < deployments; i++)); do deployment "$ns" "$(printf 'app-%02d' "$i")"; done >"$out/manifests/$ns.yaml"
  [[ $mode == none || $mode == floor ]] && continue
  for ((i = 0; i < deployments; i++)); do vpa "${GROUP[$mode]}" "$ns" "$(printf 'app-%02d' "$i")"; done |
    kubectl apply -f - >/dev/null
done
status=$(printf '{"status":{"recommendation":{"containerRecommendations":[{"containerName":"app","target":%s,"lowerBound":%s,"upperBound":%s}]}}}' \
  "{\"cpu\":\"$REC_CPU\",\"memory\":\"$REC_MEMORY\"}" "{\"cpu\":\"$REC_CPU\",\"memory\":\"$REC_MEMORY\"}" \
  "{\"cpu\":\"$REC_CPU\",\"memory\":\"$REC_MEMORY\"}")
for mode in tailor upstream; do
  for ((i = 0; i < deployments; i++)); do
    kubectl patch "verticalpodautoscalers.${GROUP[$mode]}" "$(printf 'app-%02d' "$i")" -n "bench-$mode" \
      --subresource status --type merge -p "$status" >/dev/null
  done
done
# The webhooks' VPA watches deliver the statuses within milliseconds; the warm-up round checks they did.
sleep 3

# --- the bursts ------------------------------------------------------------------------------------------------------
python3 "$HELPER" header
for ((r = 1; r <= warmup + rounds; r++)); do
  for mode in "${modes[@]}"; do
    round=$r flag=()
    if ((r <= warmup)); then flag=(--warmup); else round=$((r - warmup)); fi
    python3 "$HELPER" burst --state "$STATE" --mode "$mode" --round "$round" "${flag[@]}" \
      --namespace "bench-$mode" --manifest "$out/manifests/bench-$mode.yaml" --pods "$pods" \
      --webhook "${WEBHOOK[$mode]}" --template-cpu "$TEMPLATE_CPU" --template-memory "$TEMPLATE_MEMORY" \
      --expect-cpu "$REC_CPU" --expect-memory "$REC_MEMORY" --record "$out/bursts.jsonl" ||
      die "the $mode burst of round $r failed (logs: $STATE/logs)"
    sleep "$settle"
  done
done
echo "finished: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg), $((SECONDS - t_up)) s after up" |
  tee -a "$out/run.txt" >&2
cat "$out/run.txt"
echo
python3 "$HELPER" report --record "$out/bursts.jsonl" | tee "$out/report.txt"
