#!/usr/bin/env bash
# End-to-end tests on a kind cluster (needs Docker, kind, kubectl and cargo; helm, or the Python venv from
# hack/install-deps.sh, whose Helm v4 library installs the chart when the helm CLI is missing).
#
#   hack/kind-e2e.sh                 create the cluster, build and load the images of the recommender, updater
#                                    and webhook, install the chart, run the tests
#
# Environment:
#   KIND_CLUSTER       cluster name                              (tailor-e2e)
#   KIND_NODE_IMAGE    node image, Kubernetes >= 1.33 (in-place resize on by default)  (kindest/node:v1.33.1)
#   KEEP_CLUSTER=1     keep the cluster afterwards (default: delete the cluster this script created, also on
#                      failure; a reused cluster is never deleted)
#   REUSE_CLUSTER=1    use an existing cluster of that name instead of creating one
#   SKIP_BUILD=1       do not build the images (they must already be loaded)
#   IMAGE_TAG          tag of the locally built images          (e2e)
#   METRICS_SERVER_VERSION                                       (v0.8.0)
#   UPSTREAM_VPA_REF   kubernetes/autoscaler ref of the upstream VPA installed next to Tailor (its own
#                      hack/vpa-up.sh: CRDs, RBAC, recommender, updater, admission controller), for the
#                      coexistence tests                        (vertical-pod-autoscaler-1.7.3)
#   UPSTREAM_VPA_TAG   its images' tag                          (1.7.3)
#   CARGO_TEST_ARGS    extra arguments after `--` for cargo test (e.g. a test name filter); the run fails when
#                      no test ran
#
# Chart values: hack/kind-values.yaml (the webhook's feature gates there are checked against the examples by
# tests/tests/kind_values.rs), plus the image tags built here.
set -euo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)

KIND_CLUSTER=${KIND_CLUSTER:-tailor-e2e}
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-kindest/node:v1.33.1}
IMAGE_TAG=${IMAGE_TAG:-e2e}
METRICS_SERVER_VERSION=${METRICS_SERVER_VERSION:-v0.8.0}
UPSTREAM_VPA_REF=${UPSTREAM_VPA_REF:-vertical-pod-autoscaler-1.7.3}
UPSTREAM_VPA_TAG=${UPSTREAM_VPA_TAG:-1.7.3}
NAMESPACE=tailor-system
RELEASE=tailor
COMPONENTS=(recommender updater admission)
WORK="$ROOT/target/e2e"
KUBECONFIG_FILE="$WORK/kubeconfig"
export KUBECONFIG="$KUBECONFIG_FILE"

log() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'kind-e2e: %s\n' "$*" >&2; exit 1; }

for tool in docker kind kubectl cargo; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is required"
done
mkdir -p "$WORK"
rm -f "$KUBECONFIG_FILE" # a stale one would point the clean-up's state dump at another cluster

dump_state() {
  log "cluster state (for debugging)"
  kubectl get pods -A -o wide || true
  kubectl -n "$NAMESPACE" describe deployments || true
  for component in "${COMPONENTS[@]}"; do
    kubectl -n "$NAMESPACE" logs "deployment/$RELEASE-$component" --all-containers --tail=200 || true
  done
  kubectl get events -A --sort-by=.lastTimestamp | tail -n 50 || true
}

# Set before the cluster exists, so that a failure anywhere (the creation included) cleans up. Only a cluster
# this script created is deleted.
CREATED=0
cleanup() {
  local rc=$?
  trap - EXIT
  if [[ $rc -ne 0 && -s $KUBECONFIG_FILE ]]; then dump_state; fi
  if [[ $CREATED == 1 && ${KEEP_CLUSTER:-0} != 1 ]]; then
    log "deleting cluster $KIND_CLUSTER (KEEP_CLUSTER=1 keeps it)"
    kind delete cluster --name "$KIND_CLUSTER" || true
  fi
  exit "$rc"
}
trap cleanup EXIT

# --- cluster ---------------------------------------------------------------------------------------
# Pod-level resources (spec.resources) are beta and on from Kubernetes 1.34; older node images need the gate.
node_minor=$(sed -nE 's/.*:v1\.([0-9]+).*/\1/p' <<<"$KIND_NODE_IMAGE")
feature_gates=""
if [[ -n $node_minor && $node_minor -lt 34 ]]; then
  feature_gates=$'featureGates:\n  PodLevelResources: true'
fi
if kind get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
  [[ ${REUSE_CLUSTER:-0} == 1 ]] ||
    die "cluster $KIND_CLUSTER exists: set REUSE_CLUSTER=1 to use it, or delete it (kind delete cluster --name $KIND_CLUSTER)"
  log "reusing cluster $KIND_CLUSTER"
else
  [[ ${REUSE_CLUSTER:-0} != 1 ]] || die "REUSE_CLUSTER=1 but there is no cluster $KIND_CLUSTER"
  log "creating cluster $KIND_CLUSTER ($KIND_NODE_IMAGE)"
  cat >"$WORK/kind-config.yaml" <<KIND
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
$feature_gates
nodes:
  - role: control-plane
  - role: worker
  - role: worker
KIND
  CREATED=1
  kind create cluster --name "$KIND_CLUSTER" --image "$KIND_NODE_IMAGE" \
    --config "$WORK/kind-config.yaml" --wait 120s
fi
kind get kubeconfig --name "$KIND_CLUSTER" >"$KUBECONFIG_FILE"
kubectl version

# --- metrics-server (kind's kubelets serve self-signed certificates) ------------------------------------
log "installing metrics-server $METRICS_SERVER_VERSION"
kubectl apply -f "https://github.com/kubernetes-sigs/metrics-server/releases/download/$METRICS_SERVER_VERSION/components.yaml"
kubectl -n kube-system patch deployment metrics-server --type=json \
  -p '[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--kubelet-insecure-tls"}]'
kubectl -n kube-system rollout status deployment/metrics-server --timeout=180s

# --- upstream VPA beside Tailor, installed its own way, for the coexistence tests ------------------------------
log "installing upstream VPA ($UPSTREAM_VPA_REF, images $UPSTREAM_VPA_TAG) with its hack/vpa-up.sh"
mkdir -p "$WORK/upstream"
curl -fsSL "https://github.com/kubernetes/autoscaler/archive/refs/tags/$UPSTREAM_VPA_REF.tar.gz" |
  tar -xz -C "$WORK/upstream" --strip-components 1
(cd "$WORK/upstream/vertical-pod-autoscaler" && TAG=$UPSTREAM_VPA_TAG ./hack/vpa-up.sh)
# The live differential compares both recommenders loop by loop: the same period as Tailor's (kind-values.yaml).
kubectl -n kube-system patch deployment vpa-recommender --type=json \
  -p '[{"op":"add","path":"/spec/template/spec/containers/0/args","value":["--recommender-interval=5s"]}]'
kubectl -n kube-system rollout status deployment/vpa-recommender --timeout=180s
kubectl -n kube-system rollout status deployment/vpa-admission-controller --timeout=180s

# --- images ----------------------------------------------------------------------------------------------
# --provenance=false: a single-platform image without an attestation manifest, which `kind load` can import.
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  for component in "${COMPONENTS[@]}"; do
    log "building tailor-$component:$IMAGE_TAG"
    docker build --provenance=false --target "$component" -t "tailor-$component:$IMAGE_TAG" "$ROOT"
  done
fi
for component in "${COMPONENTS[@]}"; do
  kind load docker-image --name "$KIND_CLUSTER" "tailor-$component:$IMAGE_TAG"
done

# --- the chart (self-managed certificates: nothing else to install) ----------------------------------------
log "installing the chart"
VALUES="$ROOT/hack/kind-values.yaml"
IMAGES="$WORK/images.yaml"
cat >"$IMAGES" <<IMAGES
recommender: {image: {tag: "$IMAGE_TAG"}}
updater: {image: {tag: "$IMAGE_TAG"}}
admission: {image: {tag: "$IMAGE_TAG"}}
IMAGES
if command -v helm >/dev/null 2>&1; then
  helm upgrade --install "$RELEASE" "$ROOT/charts/tailor" --namespace "$NAMESPACE" --create-namespace \
    --values "$VALUES" --values "$IMAGES" --wait --timeout 5m
elif [[ -x $ROOT/target/venv/bin/python ]]; then
  "$ROOT/target/venv/bin/python" - "$ROOT/charts/tailor" "$RELEASE" "$NAMESPACE" "$KUBECONFIG_FILE" \
    "$VALUES" "$IMAGES" <<'PY'
import sys, yaml, helm_python as helm
chart, release, namespace, kubeconfig, *files = sys.argv[1:]

def merge(base, override):
    out = dict(base)
    for k, v in override.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out

values = {}
for f in files:
    with open(f) as fh:
        values = merge(values, yaml.safe_load(fh) or {})
with helm.Config(kubeconfig_path=kubeconfig, namespace=namespace) as cfg:
    cfg.install(chart, release, values, namespace=namespace,
                create_namespace=True, wait="watcher", timeout=300)
    print(f"installed {release} in {namespace}")
PY
else
  die "neither helm nor target/venv (hack/install-deps.sh) is available"
fi
for component in "${COMPONENTS[@]}"; do
  kubectl -n "$NAMESPACE" rollout status "deployment/$RELEASE-$component" --timeout=180s
done

# Self-managed certificates: wait until the webhook has written its caBundle.
log "waiting for the webhook's caBundle"
for _ in $(seq 1 60); do
  ca=$(kubectl get mutatingwebhookconfiguration "$RELEASE-admission" \
    -o jsonpath='{.webhooks[0].clientConfig.caBundle}' 2>/dev/null || true)
  [[ -n $ca ]] && break
  sleep 2
done
[[ -n ${ca:-} ]] || die "the webhook did not patch caBundle into $RELEASE-admission"

# The updater acts only while the webhook's status Lease is fresh: wait for its first renewal.
log "waiting for the webhook's status Lease"
for _ in $(seq 1 30); do
  holder=$(kubectl -n "$NAMESPACE" get lease tailor-admission \
    -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
  [[ -n $holder ]] && break
  sleep 2
done
[[ -n ${holder:-} ]] || die "the webhook did not create its status Lease tailor-admission in $NAMESPACE"

# metrics-server must serve pod metrics before recommendations can appear.
log "waiting for metrics.k8s.io"
metrics_ok=0
for _ in $(seq 1 60); do
  if kubectl top pods -n kube-system >/dev/null 2>&1; then
    metrics_ok=1
    break
  fi
  sleep 5
done
[[ $metrics_ok == 1 ]] ||
  die "metrics.k8s.io served no pod metrics within 5 minutes (kubectl top pods -n kube-system: $(kubectl top pods -n kube-system 2>&1 | tail -n 1))"

# --- the tests -----------------------------------------------------------------------------------------------
log "running the e2e tests"
# One test at a time: some restart or scale Tailor's components (webhook down, recommender failover and
# restart, certificate rotation), and the updater pauses while the webhook's status Lease is stale. The
# uninstall tests (tests/tests/e2e/uninstall.rs) take one autoscaler away and put it back: upstream's
# Deployments in kube-system scaled to zero, its webhook configuration and CRDs deleted (as its vpa-down.sh
# does); Tailor's Deployments scaled to zero and its webhook configuration deleted (what `helm uninstall`
# removes that acts at run time).
TEST_LOG="$WORK/cargo-test.log"
# The offline CLI, which the constant-usage test compares with (target/debug/tailor).
cargo build -q -p tailor-cli --locked
# shellcheck disable=SC2086 # CARGO_TEST_ARGS is a list of words on purpose
TAILOR_E2E_KUBECONFIG="$KUBECONFIG_FILE" TAILOR_E2E_NAMESPACE="$NAMESPACE" TAILOR_E2E_RELEASE="$RELEASE" \
  TAILOR_E2E_KIND_NODE="$KIND_CLUSTER-control-plane" \
  cargo test -p tailor-tests --test e2e --locked -- --ignored --test-threads=1 --nocapture ${CARGO_TEST_ARGS:-} \
  2>&1 | tee "$TEST_LOG"
# A filter that matches nothing, or a build without the tests, passes with "0 passed": that is no e2e run.
ran=$(sed -nE 's/^test result: ok\. ([0-9]+) passed.*/\1/p' "$TEST_LOG" | awk '{n += $1} END {print n + 0}')
[[ $ran -gt 0 ]] || die "no e2e test ran (CARGO_TEST_ARGS=${CARGO_TEST_ARGS:-}); see $TEST_LOG"
log "e2e passed ($ran tests)"
