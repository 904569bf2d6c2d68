#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, built from source (hack/go/build.sh), with Tailor installed by
# its chart. docs/design/principles.md §5, docs/decisions/real-control-plane.md.
#
#   hack/cluster.sh up [--nodes N] [--without-tailor] [--with-upstream] [--kubernetes newest|oldest]
#                      [--kube-api-qps Q] [--helm-set KEY=VALUE]...
#       etcd (tmpfs, no fsync), kube-apiserver (RBAC, service-account tokens, aggregation, an audit log of every
#       request), kube-controller-manager, kube-scheduler, kwok managing N fake nodes (pods reach Running; usage
#       from the pod annotations kwok.x-k8s.io/usage-cpu / -memory) and metrics-server serving the real
#       aggregated metrics.k8s.io. Then `helm install tailor charts/tailor -n tailor-system` and the three
#       Tailor programs as host processes, each with a token of its own chart ServiceAccount and the arguments
#       the chart rendered for its Deployment. Prints `export KUBECONFIG=…` and `export PATH=…` on stdout
#       (eval them), progress on stderr; returns once everything is ready. --with-upstream also runs upstream
#       VPA (UPSTREAM_VPA_VERSION: recommender, updater, admission-controller) beside Tailor, as host processes
#       with their usual flags, each with a token of its ServiceAccount from upstream's deploy/vpa-rbac.yaml;
#       its admission controller registers itself (by URL). --kube-api-qps Q sets the client rate limit of
#       kube-controller-manager and kube-scheduler (QPS Q, burst 2Q; their defaults are 20 and 50), for clusters
#       of thousands of pods (hack/bench-side-by-side.sh). --helm-set KEY=VALUE is passed to `helm install` as
#       --set after the cluster's values (e.g. admission.webhook.excludeNamespaces={a,b} for
#       hack/bench-pod-creation.sh).
#   hack/cluster.sh down
#       stops every process it started and removes the cluster's state (the audit log is kept in
#       target/cluster/audit.log until the next `up`).
#   hack/cluster.sh tailor start|stop|kill|restart recommender|updater|admission [INSTANCE [CHANGE...]]
#   hack/cluster.sh tailor list recommender|updater|admission
#       controls one Tailor process (INSTANCE: 0, 1, …; a second recommender is instance 1) — the e2e tests'
#       way to restart, kill or add a replica where kind would delete or add a pod. A CHANGE to the chart's
#       arguments is --KEY=VALUE or --KEY (replaces the chart's --KEY) or !--KEY (removes it). Each start is a new
#       identity (POD_NAME), as a replacement pod would be; `list` prints "IDENTITY running|stopped INSTANCE
#       RESTARTS". A Tailor process that exits (a lost leader lease does that) is restarted after 2 s, as the
#       kubelet restarts a container.
#   hack/cluster.sh restart|stop|start kube-apiserver|etcd|kube-controller-manager|kube-scheduler|kwok|metrics-server
#       stops one control-plane process, starts it again with the same command line, or both.
#   hack/cluster.sh upstream start|stop|restart recommender|updater|admission-controller [CHANGE...]
#       controls one upstream VPA process (after up --with-upstream); a restart keeps its command line, changed
#       by the CHANGEs as Tailor's are (--KEY=VALUE replaces --KEY and its value, !--KEY removes them); the
#       changed line is kept for later restarts.
#   hack/cluster.sh status
#
# Environment: TAILOR_CLUSTER_DIR (state, default target/cluster), TAILOR_BIN_DIR (Tailor's binaries, default
# target/debug, built when missing), TAILOR_TOOLS_CACHE (see hack/go/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
STATE=${TAILOR_CLUSTER_DIR:-$ROOT/target/cluster}
NAMESPACE=tailor-system
RELEASE=tailor

log() { printf 'cluster: %s\n' "$*" >&2; }
die() { printf 'cluster: %s\n' "$*" >&2; exit 1; }

# --- processes -------------------------------------------------------------------------------------------
# start NAME COMMAND...: runs COMMAND in its own session, output to $STATE/logs/NAME.log, pid in $STATE/pids.
start() {
  local name=$1
  shift
  mkdir -p "$STATE/logs" "$STATE/pids" "$STATE/cmd"
  # The command line is kept (NUL-separated) so that `hack/cluster.sh restart NAME` can start it again.
  printf '%s\0' "$@" >"$STATE/cmd/$name"
  setsid "$@" >>"$STATE/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$STATE/pids/$name"
}

# control_component restart|stop|start NAME: stops a control-plane process, or starts it again with the same
# command line, or both (the e2e tests' API server restart; the live differential's metrics-server pause),
# then waits for it to serve.
control_component() {
  local verb=$1 name=$2 cmd=()
  [[ -f $STATE/cmd/$name ]] || die "no process $name (see hack/cluster.sh status)"
  case $name in etcd | kube-apiserver | kube-controller-manager | kube-scheduler | kwok | metrics-server) ;;
    *) die "$verb takes a control-plane process; Tailor's: hack/cluster.sh tailor $verb" ;; esac
  mapfile -d '' -t cmd <"$STATE/cmd/$name"
  [[ $verb == start ]] || stop "$name"
  if [[ $verb == stop ]]; then log "$name stopped"; return; fi
  if [[ $verb == start ]] && running "$name"; then return; fi
  start "$name" "${cmd[@]}"
  case $name in
    kube-apiserver) wait_for kube-apiserver 120 kubectl get --raw /readyz ;;
    etcd) wait_for etcd 60 curl -fsS "http://127.0.0.1:$ETCD_PORT/health" ;;
    metrics-server) wait_for metrics-server 180 kubectl get --raw /apis/metrics.k8s.io/v1beta1/nodes ;;
  esac
  log "$name ${verb}ed"
}

stop() { # stop NAME [SIGNAL]: signals the process's whole session (a supervisor and its child) and waits up
  # to 20 s for it.
  local name=$1 sig=${2:-TERM} pidfile="$STATE/pids/$1" pid
  [[ -f $pidfile ]] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill "-$sig" -- "-$pid" 2>/dev/null || kill "-$sig" "$pid" 2>/dev/null || true
    for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

# supervise RESTARTS_FILE COMMAND...: runs COMMAND again whenever it exits, as the kubelet restarts a
# container (restartPolicy Always, a 2 s back-off), counting restarts in RESTARTS_FILE. A signal to the
# session ends both: the loop then exits with its child.
supervise() {
  local restarts_file=$1 n=0
  shift
  echo 0 >"$restarts_file"
  while :; do
    local rc=0
    "$@" || rc=$?
    echo "cluster: $1 exited with status $rc; restarting it in 2 s, as the kubelet would" >&2
    n=$((n + 1))
    echo "$n" >"$restarts_file"
    sleep 2
  done
}

running() { [[ -f $STATE/pids/$1 ]] && kill -0 "$(cat "$STATE/pids/$1")" 2>/dev/null; }

# wait_for WHAT SECONDS COMMAND...: polls COMMAND every half second.
wait_for() {
  local what=$1 seconds=$2
  shift 2
  local deadline=$((SECONDS + seconds)) process=${what%% *}
  until "$@" >/dev/null 2>&1; do
    if [[ -f $STATE/pids/$process ]] && ! running "$process"; then
      log "$process exited; last log lines:"
      tail -n 30 "$STATE/logs/$process.log" >&2 2>/dev/null || true
      return 1
    fi
    if ((SECONDS >= deadline)); then
      log "$what: not ready after ${seconds} s; last log lines:"
      tail -n 30 "$STATE/logs/${what%% *}.log" >&2 2>/dev/null || true
      return 1
    fi
    sleep 0.5
  done
}

free_ports() { # free_ports N: N distinct free loopback ports.
  python3 -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

# --- certificates -------------------------------------------------------------------------------------------
# leaf NAME CA SUBJECT [SAN]: a certificate in $STATE/pki signed by CA (a server's when SAN is given).
leaf() {
  local dir=$STATE/pki ext
  ext=$(mktemp)
  if [[ -n ${4:-} ]]; then
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$4" >"$ext"
  else
    printf 'extendedKeyUsage=clientAuth\n' >"$ext"
  fi
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "$3" -keyout "$dir/$1.key" \
    -out "$dir/$1.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$1.csr" -CA "$dir/$2.crt" -CAkey "$dir/$2.key" -CAcreateserial -days 30 \
    -extfile "$ext" -out "$dir/$1.crt" 2>/dev/null
  rm -f "$dir/$1.csr" "$ext"
}

pki() {
  local dir=$STATE/pki
  mkdir -p "$dir"
  ca() { openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj "/CN=$2" \
    -keyout "$dir/$1.key" -out "$dir/$1.crt" 2>/dev/null; }
  ca ca tailor-local-ca
  ca front-proxy-ca tailor-local-front-proxy-ca
  leaf apiserver ca "/CN=kube-apiserver" \
    "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:10.96.0.1"
  leaf serving ca "/CN=loopback-serving" "DNS:localhost,IP:127.0.0.1"
  leaf admin ca "/O=system:masters/CN=kubernetes-admin"
  leaf controller-manager ca "/CN=system:kube-controller-manager"
  leaf scheduler ca "/CN=system:kube-scheduler"
  leaf front-proxy-client front-proxy-ca "/CN=front-proxy-client"
  openssl ecparam -name prime256v1 -genkey -noout -out "$dir/sa.key" 2>/dev/null
  openssl ec -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
}

# kubeconfig FILE USER [CERT KEY | --token TOKEN]
kubeconfig() {
  local file=$1 user=$2
  shift 2
  local auth
  if [[ $1 == --token ]]; then
    auth="    token: $2"
  else
    auth="    client-certificate: $1
    client-key: $2"
  fi
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tailor-local
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $STATE/pki/ca.crt
users:
- name: $user
  user:
$auth
contexts:
- name: tailor-local
  context: {cluster: tailor-local, user: $user}
current-context: tailor-local
EOF
}

# --- up -----------------------------------------------------------------------------------------------------
# shellcheck disable=SC1091 # written by up
load_env() { [[ -f $STATE/env ]] || die "no cluster (run hack/cluster.sh up)"; source "$STATE/env"; }

up() {
  local nodes=2 with_tailor=1 with_upstream=0 which=kubernetes qps=
  HELM_SETS=()
  while (($#)); do
    case $1 in
      --nodes) nodes=$2; shift 2 ;;
      --helm-set) HELM_SETS+=(--set "$2"); shift 2 ;;
      --without-tailor) with_tailor=0; shift ;;
      --with-upstream) with_upstream=1; shift ;;
      --kube-api-qps) qps=$2; shift 2 ;;
      --kubernetes) case $2 in newest) which=kubernetes ;; oldest) which=kubernetes-oldest ;;
                      *) die "--kubernetes takes newest or oldest" ;; esac; shift 2 ;;
      *) die "unknown argument $1 (see the header of hack/cluster.sh)" ;;
    esac
  done
  [[ $nodes =~ ^[1-9][0-9]{0,2}$ ]] || die "--nodes takes 1 to 999"
  [[ -z $qps || $qps =~ ^[1-9][0-9]{0,4}$ ]] || die "--kube-api-qps takes 1 to 99999"
  # The controllers' and the scheduler's client rate limit: at their defaults 10,000 pods take many minutes to
  # create and bind.
  local client_limits=()
  [[ -n $qps ]] && client_limits=(--kube-api-qps "$qps" --kube-api-burst "$((2 * qps))")
  if [[ -f $STATE/env ]]; then
    log "a cluster from an earlier run is here; stopping it first"
    down
  fi

  # Binaries: the control plane from the Go module cache, Tailor from cargo.
  local dirs upstream=()
  ((with_upstream)) && upstream=(upstream-vpa)
  dirs=$("$ROOT/hack/go/build.sh" "$which" etcd kwok metrics-server helm "${upstream[@]}") ||
    die "building the control plane failed"
  local kube_dir etcd_dir kwok_dir ms_dir helm_dir
  kube_dir=$(awk -v n="$which" '$1 == n {print $2}' <<<"$dirs")
  etcd_dir=$(awk '$1 == "etcd" {print $2}' <<<"$dirs")
  kwok_dir=$(awk '$1 == "kwok" {print $2}' <<<"$dirs")
  ms_dir=$(awk '$1 == "metrics-server" {print $2}' <<<"$dirs")
  helm_dir=$(awk '$1 == "helm" {print $2}' <<<"$dirs")
  local upstream_dir
  upstream_dir=$(awk '$1 == "upstream-vpa" {print $2}' <<<"$dirs")
  BIN_DIR=${TAILOR_BIN_DIR:-$ROOT/target/debug}
  if ((with_tailor)) && [[ -z ${TAILOR_BIN_DIR:-} ]]; then
    log "building Tailor's binaries (cargo build)"
    cargo build -q -p tailor-recommender -p tailor-admission -p tailor-updater >&2 || die "cargo build failed"
  fi
  # shellcheck source=go/versions.env
  source "$ROOT/hack/go/versions.env"
  local version=$KUBERNETES_VERSION
  [[ $which == kubernetes-oldest ]] && version=$KUBERNETES_OLDEST_VERSION

  rm -rf "$STATE"
  mkdir -p "$STATE/bin" "$STATE/logs" "$STATE/pids"
  # Whatever fails from here on, nothing is left running (the logs stay for the post-mortem).
  UP_DONE=0
  trap 'if ((UP_DONE == 0)); then log "up failed; stopping what it started (logs: $STATE/logs)"; down; fi' EXIT
  ln -s "$kube_dir/kubectl" "$STATE/bin/kubectl"
  ln -s "$helm_dir/helm" "$STATE/bin/helm"
  local etcd_data
  etcd_data=$(mktemp -d /dev/shm/tailor-etcd.XXXXXX)
  read -r ETCD_PORT ETCD_PEER_PORT APISERVER_PORT KWOK_PORT METRICS_SERVER_PORT \
    WEBHOOK_PORT ADMISSION_METRICS_PORT RECOMMENDER_METRICS_PORT UPDATER_METRICS_PORT DASHBOARD_PORT PROXY_PORT \
    < <(free_ports 11)
  cat >"$STATE/env" <<EOF
KUBERNETES_VERSION=$version
ETCD_PORT=$ETCD_PORT
ETCD_DATA=$etcd_data
APISERVER_PORT=$APISERVER_PORT
KWOK_PORT=$KWOK_PORT
METRICS_SERVER_PORT=$METRICS_SERVER_PORT
WEBHOOK_PORT=$WEBHOOK_PORT
ADMISSION_METRICS_PORT=$ADMISSION_METRICS_PORT
RECOMMENDER_METRICS_PORT=$RECOMMENDER_METRICS_PORT
UPDATER_METRICS_PORT=$UPDATER_METRICS_PORT
DASHBOARD_PORT=$DASHBOARD_PORT
PROXY_PORT=$PROXY_PORT
BIN_DIR=$BIN_DIR
WITH_TAILOR=$with_tailor
EOF
  export PATH="$STATE/bin:$PATH"
  export KUBECONFIG=$STATE/admin.kubeconfig

  log "certificates"
  pki
  kubeconfig "$STATE/admin.kubeconfig" admin "$STATE/pki/admin.crt" "$STATE/pki/admin.key"
  kubeconfig "$STATE/controller-manager.kubeconfig" controller-manager \
    "$STATE/pki/controller-manager.crt" "$STATE/pki/controller-manager.key"
  kubeconfig "$STATE/scheduler.kubeconfig" scheduler "$STATE/pki/scheduler.crt" "$STATE/pki/scheduler.key"

  log "etcd $ETCD_VERSION (data on tmpfs: $etcd_data)"
  start etcd "$etcd_dir/etcd" --name default --data-dir "$etcd_data" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "default=http://127.0.0.1:$ETCD_PEER_PORT" --log-level warn
  wait_for etcd 60 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"

  log "kube-apiserver $version"
  local pki=$STATE/pki
  start kube-apiserver "$kube_dir/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --authorization-mode RBAC \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --endpoint-reconciler-type none \
    --enable-aggregator-routing=false \
    --requestheader-client-ca-file "$pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key" \
    --audit-policy-file "$ROOT/hack/cluster/audit-policy.yaml" --audit-log-path "$STATE/audit.log" \
    --audit-log-format json --audit-log-mode blocking --audit-log-maxsize 0 \
    --allow-privileged=true
  wait_for kube-apiserver 120 kubectl get --raw /readyz

  log "upstream VPA's CRDs ($UPSTREAM_VPA_VERSION), beside Tailor's: the two must not touch each other"
  local vpa_src
  vpa_src=$(cd "$STATE" && GOFLAGS=-mod=mod go mod download -json \
    "k8s.io/autoscaler/vertical-pod-autoscaler@$UPSTREAM_VPA_VERSION" | sed -nE 's/^\s*"Dir": "(.*)",?$/\1/p')
  [[ -f $vpa_src/deploy/vpa-v1-crd-gen.yaml ]] || die "cannot read upstream VPA's CRDs from the module proxy"
  kubectl apply --server-side -f "$vpa_src/deploy/vpa-v1-crd-gen.yaml" >&2

  log "kube-controller-manager and kube-scheduler"
  start kube-controller-manager "$kube_dir/kube-controller-manager" \
    --kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false \
    --use-service-account-credentials --service-account-private-key-file "$pki/sa.key" \
    --root-ca-file "$pki/ca.crt" --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    "${client_limits[@]}"
  start kube-scheduler "$kube_dir/kube-scheduler" --kubeconfig "$STATE/scheduler.kubeconfig" \
    --authentication-kubeconfig "$STATE/scheduler.kubeconfig" --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false "${client_limits[@]}"
  wait_for kube-controller-manager 120 kubectl -n default get serviceaccount default

  log "kwok $KWOK_VERSION with $nodes fake node(s)"
  kwok_config "$kwok_dir" >"$STATE/kwok.yaml"
  start kwok "$kwok_dir/kwok" --kubeconfig "$STATE/admin.kubeconfig" --config "$STATE/kwok.yaml" \
    --manage-all-nodes=true --node-ip 127.0.0.1 --node-port "$KWOK_PORT" \
    --server-address "127.0.0.1:$KWOK_PORT" --tls-cert-file "$pki/serving.crt" \
    --tls-private-key-file "$pki/serving.key" --cidr 10.244.0.0/16 --node-lease-duration-seconds 40
  local i
  for ((i = 0; i < nodes; i++)); do node_manifest "kwok-node-$i"; done | kubectl apply -f - >&2
  wait_for kwok 120 nodes_ready "$nodes"

  log "metrics-server $METRICS_SERVER_VERSION"
  start metrics-server "$ms_dir/metrics-server" --kubeconfig "$STATE/admin.kubeconfig" \
    --authentication-kubeconfig "$STATE/admin.kubeconfig" --authorization-kubeconfig "$STATE/admin.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$METRICS_SERVER_PORT" \
    --tls-cert-file "$pki/serving.crt" --tls-private-key-file "$pki/serving.key" \
    --kubelet-preferred-address-types InternalIP --kubelet-use-node-status-port --kubelet-insecure-tls \
    --metric-resolution 10s --kubelet-request-timeout 5s
  metrics_server_manifest | kubectl apply -f - >&2
  wait_for metrics-server 180 kubectl get --raw /apis/metrics.k8s.io/v1beta1/nodes
  # The Karpenter NodePool API (a minimal CRD), read by the recommender's node fit
  # (docs/decisions/node-fit.md).
  kubectl apply -f "$ROOT/hack/cluster/nodepool-crd.yaml" >&2
  kubectl wait --for condition=established --timeout 60s crd/nodepools.karpenter.sh >&2

  if ((with_tailor)); then install_tailor; fi
  if ((with_upstream)); then install_upstream_vpa "$vpa_src" "$upstream_dir"; fi
  # shellcheck disable=SC2034 # read by the EXIT trap
  UP_DONE=1
  log "ready: Kubernetes $version on https://127.0.0.1:$APISERVER_PORT, $nodes node(s); logs in $STATE/logs"
  echo "export KUBECONFIG=$STATE/admin.kubeconfig"
  echo "export PATH=$STATE/bin:\$PATH"
}

nodes_ready() { # nodes_ready N: N nodes Ready.
  [[ $(kubectl get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' |
    grep -c True) -ge $1 ]]
}

# The kwok configuration: its own stages (from the module kwok was built from: nodes become Ready and keep a
# lease; pods become Ready, complete, and are deleted), the kubelet-like /metrics/resource endpoint and the
# usage from annotations (per container too, hack/cluster/kwok-usage.yaml), plus the kubelet stages of the e2e tests (hack/cluster/kwok-kubelet.yaml).
kwok_config() {
  local src
  src=$(cd "$ROOT/hack/go/kwok" && GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' sigs.k8s.io/kwok) ||
    die "cannot locate the kwok module source"
  local f
  for f in stage/node/fast/node-initialize.yaml stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    stage/pod/fast/pod-ready.yaml stage/pod/fast/pod-complete.yaml stage/pod/fast/pod-delete.yaml \
    metrics/resource/metrics-resource.yaml metrics/usage/usage-from-annotation.yaml; do
    echo "---"
    if [[ $f == */usage-from-annotation.yaml ]]; then
      # The same, with per-container annotations winning (hack/cluster/kwok-usage.yaml).
      cat "$ROOT/hack/cluster/kwok-usage.yaml"
    elif [[ $f == */pod-complete.yaml ]]; then
      # Job pods complete at once, as a short job's would, unless annotated to run on (the Job tests of
      # tests/tests/e2e/budgets.rs need a Job's pods running under a VPA).
      awk '{print} /^    matchExpressions:$/ && !done {
        print "    - key: \x27.metadata.annotations[\"tailor.dev/e2e-kubelet-job\"] != \"run\"\x27"
        print "      operator: \x27In\x27"
        print "      values: [\x27true\x27]"
        done = 1 }' "$src/kustomize/$f"
    else
      cat "$src/kustomize/$f"
    fi
  done
  echo "---"
  cat "$ROOT/hack/cluster/kwok-kubelet.yaml"
}

node_manifest() {
  cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $1
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
    metrics.k8s.io/resource-metrics-path: /metrics/nodes/$1/metrics/resource
  labels:
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
    kubernetes.io/hostname: $1
    type: kwok
# Both addresses given: kwok's node-initialize stage rewrites the list when one is missing (and, without
# --node-name, drops it), and metrics-server reaches kwok's kubelet endpoint at the InternalIP.
status:
  addresses: [{type: InternalIP, address: 127.0.0.1}, {type: Hostname, address: $1}]
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
EOF
}

metrics_server_manifest() {
  cat <<EOF
apiVersion: v1
kind: Service
metadata: {name: metrics-server, namespace: kube-system}
spec:
  type: ExternalName
  externalName: 127.0.0.1
  ports: [{name: https, port: $METRICS_SERVER_PORT, protocol: TCP}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.k8s.io}
spec:
  group: metrics.k8s.io
  version: v1beta1
  groupPriorityMinimum: 100
  versionPriority: 100
  insecureSkipTLSVerify: true
  service: {name: metrics-server, namespace: kube-system, port: $METRICS_SERVER_PORT}
EOF
}

# --- Tailor ------------------------------------------------------------------------------------------------
install_tailor() {
  log "helm install $RELEASE charts/tailor -n $NAMESPACE"
  helm install "$RELEASE" "$ROOT/charts/tailor" -n "$NAMESPACE" --create-namespace \
    -f "$ROOT/hack/cluster/values.yaml" \
    --set "admission.port=$WEBHOOK_PORT" --set "admission.service.port=$WEBHOOK_PORT" \
    --set "admission.service.externalName=127.0.0.1" \
    --set "admission.metricsPort=$ADMISSION_METRICS_PORT" \
    --set "recommender.metricsPort=$RECOMMENDER_METRICS_PORT" \
    --set "updater.metricsPort=$UPDATER_METRICS_PORT" \
    --set "admission.extraArgs.address=127.0.0.1:$ADMISSION_METRICS_PORT" \
    --set "recommender.extraArgs.address=127.0.0.1:$RECOMMENDER_METRICS_PORT" \
    --set "dashboard.port=$DASHBOARD_PORT" \
    --set "recommender.extraArgs.dashboard-address=0.0.0.0:$DASHBOARD_PORT" \
    --set "updater.extraArgs.address=127.0.0.1:$UPDATER_METRICS_PORT" "${HELM_SETS[@]}" >&2
  local c
  for c in admission recommender updater; do tailor_process start "$c" 0; done
  wait_for admission-0 60 curl -fsS "http://127.0.0.1:$ADMISSION_METRICS_PORT/readyz"
  # The webhook patches its CA into its configurations once its certificate is stored.
  wait_for admission-0 60 webhook_has_ca
  dashboard_service
}

# The dashboard through its Service, as `kubectl port-forward svc/<release>-dashboard` reaches it on a real
# cluster. kwok runs no containers, so there is no pod to forward to; instead a kwok node at this machine's own
# address carries a host-network pod with the recommender's labels and the dashboard port: the Service's
# EndpointSlice then points at the recommender process, and `kubectl proxy` reaches the Service through the API
# server's service proxy (which rewrites the pages' links under its path). EndpointSlices refuse loopback
# addresses, so a machine with nothing but loopback gets the dashboard on its port only.
dashboard_service() {
  local ip labels
  ip=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9]+(\.[0-9]+){3}$' | grep -v '^127\.' | head -n 1 || true)
  if [[ -z $ip ]]; then
    log "no address but loopback: the dashboard's Service has no endpoint here (port $DASHBOARD_PORT only)"
    return 0
  fi
  # shellcheck disable=SC2016 # a go-template, not shell
  labels=$(kubectl -n "$NAMESPACE" get service "$RELEASE-dashboard" \
    -o go-template='{{range $k, $v := .spec.selector}}{{$k}}: {{$v}}, {{end}}')
  kubectl apply -f - >&2 <<EOF
apiVersion: v1
kind: Node
metadata:
  name: tailor-host
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels: {kubernetes.io/arch: amd64, kubernetes.io/os: linux, kubernetes.io/hostname: tailor-host, type: host}
spec:
  # Only the stand-in pod below goes there.
  taints: [{key: tailor.dev/host-processes, effect: NoSchedule}]
status:
  addresses: [{type: InternalIP, address: $ip}, {type: Hostname, address: tailor-host}]
  allocatable: {cpu: "1", memory: 1Gi, pods: "10"}
  capacity: {cpu: "1", memory: 1Gi, pods: "10"}
---
apiVersion: v1
kind: Pod
metadata:
  name: $RELEASE-recommender-host
  namespace: $NAMESPACE
  labels: {${labels%, }}
spec:
  nodeName: tailor-host
  hostNetwork: true
  tolerations: [{operator: Exists}]
  containers:
    - name: recommender
      image: tailor-dev/tailor-recommender:host-process
      ports: [{name: dashboard, containerPort: $DASHBOARD_PORT}]
EOF
  start kubectl-proxy kubectl proxy --address 127.0.0.1 --port "$PROXY_PORT"
  wait_for kubectl-proxy 60 curl -fsS "$(dashboard_service_url)"
}

dashboard_service_url() {
  echo "http://127.0.0.1:$PROXY_PORT/api/v1/namespaces/$NAMESPACE/services/$RELEASE-dashboard:dashboard/proxy/"
}

webhook_has_ca() {
  [[ -n $(kubectl get mutatingwebhookconfiguration -l "app.kubernetes.io/instance=$RELEASE" \
    -o jsonpath='{.items[*].webhooks[0].clientConfig.caBundle}') ]]
}

# tailor_process start|stop|kill|restart COMPONENT [INSTANCE]
# Every start is a new "pod": a new identity (POD_NAME, the leader-election identity) like a ReplicaSet's
# replacement, so a restarted recommender is told apart from the one before it.
tailor_process() {
  local verb=$1 component=$2 instance=${3:-0}
  local name=$component-$instance changes=("${@:4}")
  case $component in recommender | updater | admission) ;; *) die "no Tailor component $component" ;; esac
  [[ $instance =~ ^[0-9]$ ]] || die "instance is 0 to 9"
  case $verb in
    stop) stop "$name"; return ;;
    kill) stop "$name" KILL; return ;;
    restart) stop "$name" ;;
    start) if running "$name"; then return 0; fi ;;
    *) die "tailor takes start, stop, kill, restart or list" ;;
  esac
  # The identity: a token of the component's chart ServiceAccount, so RBAC is the chart's.
  local deploy="$RELEASE-$component" sa token args=() identity
  sa=$(kubectl -n "$NAMESPACE" get deployment "$deploy" -o jsonpath='{.spec.template.spec.serviceAccountName}')
  token=$(kubectl -n "$NAMESPACE" create token "$sa" --duration 24h)
  kubeconfig "$STATE/$name.kubeconfig" "$sa" --token "$token"
  # The arguments: exactly those the chart rendered for the Deployment's container. Another instance
  # gets its own metrics port.
  mapfile -t args < <(kubectl -n "$NAMESPACE" get deployment "$deploy" \
    -o go-template='{{range (index .spec.template.spec.containers 0).args}}{{.}}{{"\n"}}{{end}}')
  if ((instance > 0)); then
    local port dashboard_port
    read -r port dashboard_port < <(free_ports 2)
    changes+=("--address=127.0.0.1:$port")
    [[ $component == recommender ]] && changes+=("--dashboard-address=127.0.0.1:$dashboard_port")
  fi
  apply_changes args "${changes[@]}"
  identity="$deploy-host$instance-$(openssl rand -hex 3)"
  mkdir -p "$STATE/names"
  echo "$identity" >"$STATE/names/$name"
  KUBECONFIG=$STATE/$name.kubeconfig NAMESPACE=$NAMESPACE POD_NAME=$identity \
    MIMALLOC_ARENA_EAGER_COMMIT=0 MIMALLOC_PURGE_DELAY=0 RUST_LOG=${RUST_LOG:-info} \
    start "$name" "$ROOT/hack/cluster.sh" supervise "$STATE/restarts-$name" "$BIN_DIR/tailor-$component" "${args[@]}"
}

# apply_changes ARRAY CHANGE...: changes from the command line to the arguments in the array named ARRAY:
# --KEY=VALUE (or --KEY) replaces --KEY (written --KEY=VALUE, or --KEY followed by its value, or alone),
# !--KEY removes it.
apply_changes() {
  local -n changed_args=$1
  shift
  local change key kept i arg
  for change in "$@"; do
    key=${change#!}
    key=${key%%=*}
    [[ $key == --?* ]] || die "an argument change is --KEY[=VALUE] or !--KEY, not $change"
    kept=()
    for ((i = 0; i < ${#changed_args[@]}; i++)); do
      arg=${changed_args[i]}
      [[ $arg == "$key="* ]] && continue
      if [[ $arg == "$key" ]]; then
        # Its value, when it is the next word.
        if ((i + 1 < ${#changed_args[@]})) && [[ ${changed_args[i + 1]} != -* ]]; then i=$((i + 1)); fi
        continue
      fi
      kept+=("$arg")
    done
    [[ $change == !* ]] || kept+=("$change")
    changed_args=("${kept[@]}")
  done
}

# install_upstream_vpa SOURCE BIN_DIR: upstream VPA's RBAC from its deploy/, its ServiceAccounts, and its
# three programs as host processes.
install_upstream_vpa() {
  local src=$1 bin=$2 sa
  log "upstream VPA $UPSTREAM_VPA_VERSION beside Tailor: recommender, updater, admission-controller"
  kubectl apply --server-side -f "$src/deploy/vpa-rbac.yaml" >&2
  for sa in vpa-recommender vpa-updater vpa-admission-controller; do # some come with the RBAC file
    kubectl -n kube-system create serviceaccount "$sa" --dry-run=client -o yaml |
      kubectl apply --server-side -f - >&2
  done
  leaf upstream-webhook ca "/CN=vpa-webhook" "DNS:localhost,IP:127.0.0.1"
  local webhook metrics_a metrics_r metrics_u
  read -r webhook metrics_a metrics_r metrics_u < <(free_ports 4)
  cat >>"$STATE/env" <<EOF
UPSTREAM_VPA_BIN=$bin
UPSTREAM_WEBHOOK_PORT=$webhook
UPSTREAM_ADMISSION_METRICS_PORT=$metrics_a
UPSTREAM_RECOMMENDER_METRICS_PORT=$metrics_r
UPSTREAM_UPDATER_METRICS_PORT=$metrics_u
EOF
  # The same loop periods as Tailor's (hack/cluster/values.yaml), so the two can be compared loop by loop.
  upstream_process admission-controller vpa-admission-controller "$bin" --port "$webhook" \
    --address "127.0.0.1:$metrics_a" --client-ca-file "$STATE/pki/ca.crt" \
    --tls-cert-file "$STATE/pki/upstream-webhook.crt" --tls-private-key "$STATE/pki/upstream-webhook.key" \
    --register-by-url --webhook-address https://127.0.0.1 --webhook-port "$webhook"
  upstream_process recommender vpa-recommender "$bin" --address "127.0.0.1:$metrics_r" --recommender-interval 5s
  upstream_process updater vpa-updater "$bin" --address "127.0.0.1:$metrics_u" --updater-interval 10s
  wait_for upstream-admission-controller 60 kubectl get mutatingwebhookconfiguration vpa-webhook-config
}

# upstream_process NAME SERVICE_ACCOUNT BIN_DIR ARGS...: one upstream VPA program, supervised, with a token of
# its ServiceAccount (in kube-system, where upstream deploys it and looks for its status Lease).
upstream_process() {
  local name=$1 sa=$2 bin=$3 token
  shift 3
  token=$(kubectl -n kube-system create token "$sa" --duration 24h)
  kubeconfig "$STATE/upstream-$name.kubeconfig" "$sa" --token "$token"
  NAMESPACE=kube-system start "upstream-$name" "$ROOT/hack/cluster.sh" supervise \
    "$STATE/restarts-upstream-$name" "$bin/$name" --kubeconfig "$STATE/upstream-$name.kubeconfig" "$@"
}

# upstream_control start|stop|restart NAME [CHANGE...]: one upstream VPA program, with the command line it was
# started with, changed by the CHANGEs (see apply_changes).
upstream_control() {
  local verb=$1 name=upstream-${2:?recommender, updater or admission-controller} cmd=()
  [[ -f $STATE/cmd/$name ]] || die "no process $name (hack/cluster.sh up --with-upstream starts them)"
  mapfile -d '' -t cmd <"$STATE/cmd/$name"
  apply_changes cmd "${@:3}"
  case $verb in
    stop) stop "$name" ;;
    start) running "$name" || NAMESPACE=kube-system start "$name" "${cmd[@]}" ;;
    restart) stop "$name"; NAMESPACE=kube-system start "$name" "${cmd[@]}" ;;
    *) die "upstream takes start, stop or restart" ;;
  esac
}

# tailor_list COMPONENT: one line per instance started so far, "IDENTITY running|stopped INSTANCE RESTARTS".
tailor_list() {
  local f name
  for f in "$STATE/names/$1"-*; do
    [[ -e $f ]] || continue
    name=$(basename "$f")
    local restarts=0
    [[ -f $STATE/restarts-$name ]] && restarts=$(cat "$STATE/restarts-$name")
    if running "$name"; then echo "$(cat "$f") running ${name##*-} $restarts"
    else echo "$(cat "$f") stopped ${name##*-} $restarts"; fi
  done
}

# --- down, status ----------------------------------------------------------------------------------------
down() {
  [[ -d $STATE/pids ]] || { log "no cluster"; return 0; }
  local name
  # Tailor and the add-ons first, the API server and etcd last.
  local f
  for f in "$STATE"/pids/kubectl-proxy "$STATE"/pids/recommender-* "$STATE"/pids/updater-* \
    "$STATE"/pids/admission-* "$STATE"/pids/upstream-*; do
    [[ -e $f ]] && stop "$(basename "$f")"
  done
  for name in metrics-server kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$name"; done
  if [[ -f $STATE/env ]]; then
    # shellcheck disable=SC1091,SC2153 # written by up
    (source "$STATE/env" && [[ $ETCD_DATA == /dev/shm/tailor-etcd.* ]] && rm -rf "$ETCD_DATA")
    rm -f "$STATE/env"
  fi
  log "stopped"
}

status() {
  load_env
  local f name
  for f in "$STATE"/pids/*; do
    [[ -e $f ]] || continue
    name=$(basename "$f")
    if running "$name"; then echo "$name: running (pid $(cat "$STATE/pids/$name"))"; else echo "$name: stopped"; fi
  done
  # Tailor's dashboard, served by the first recommender (the leader while it holds the lease).
  if [[ ${WITH_TAILOR:-0} == 1 && -n ${DASHBOARD_PORT:-} ]]; then
    echo "dashboard: http://127.0.0.1:$DASHBOARD_PORT/"
    # The same pages through the chart's Service (the API server's service proxy, by kubectl proxy).
    if running kubectl-proxy; then echo "dashboard-service: $(dashboard_service_url)"; fi
  fi
}

case ${1:-} in
  up) shift; up "$@" ;;
  down) down ;;
  status) status ;;
  supervise) shift; supervise "$@" ;;
  restart | stop | start)
    load_env
    export PATH="$STATE/bin:$PATH" KUBECONFIG=$STATE/admin.kubeconfig
    control_component "$1" "${2:?process name}"
    ;;
  upstream)
    shift
    load_env
    export PATH="$STATE/bin:$PATH" KUBECONFIG=$STATE/admin.kubeconfig
    upstream_control "$@"
    ;;
  tailor)
    shift
    load_env
    export PATH="$STATE/bin:$PATH" KUBECONFIG=$STATE/admin.kubeconfig
    if [[ ${1:-} == list ]]; then tailor_list "${2:?component}"; else tailor_process "$@"; fi
    ;;
  *) sed -n '2,41p' "$0" >&2; exit 2 ;;
esac
