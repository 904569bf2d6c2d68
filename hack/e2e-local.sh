#!/usr/bin/env bash
# The e2e suite (tests/tests/e2e/) on the local control plane: hack/cluster.sh up, the tests, the audit-log
# check, hack/cluster.sh down. hack/test.sh runs it; by hand:
#
#   hack/e2e-local.sh [--kubernetes newest|oldest] [TEST_FILTER...]
#
# Prints "e2e (real control plane, Kubernetes vX.Y.Z): N passed, N failed" and then the audit check's
# "audit: N passed, N failed" (hack/cluster/audit_check.py; with two clusters, each cluster's and then their
# sum). With TAILOR_STANDIN_RECORD_DIR set, Tailor's requests from the audit log are added to the request
# records hack/checks/rbac.sh reads. KEEP_CLUSTER=1 leaves the clusters running afterwards (hack/cluster.sh
# down stops one; TAILOR_CLUSTER_DIR names it).
#
# Two lanes, each on a cluster of its own (TAILOR_E2E_LANES=1: one cluster, the lanes one after the other):
# - shared: the tests that disturb nothing shared, each in its own namespace, four at a time;
# - disruptive: the tests that disturb what every test shares (Tailor's or upstream's processes, the webhook's
#   certificate, the API server, the installation), on a second cluster (TAILOR_CLUSTER_DIR with "-disruptive"
#   appended). Both lanes wait on the clusters' clocks far more than they use the CPU (the machine is idle for
#   four fifths of a run), so running them side by side takes the longer lane's time instead of the sum.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
which=newest
if [[ ${1:-} == --kubernetes ]]; then which=$2; shift 2; fi
LOG_DIR="$ROOT/target/test-logs"
mkdir -p "$LOG_DIR"
export TAILOR_CLUSTER_DIR=${TAILOR_CLUSTER_DIR:-$ROOT/target/cluster}
MAIN_CLUSTER=$TAILOR_CLUSTER_DIR
DISRUPTIVE_CLUSTER=$MAIN_CLUSTER-disruptive
LANES=${TAILOR_E2E_LANES:-2}

# The test binary first, so that the cluster does not wait for the compiler. The lanes run it directly (from
# tests/, as cargo does): two `cargo test` runs at once would wait on each other's lock of the build directory.
cargo build -q -p tailor-cli 2>&1 | tail -n 20 >&2 # tailor recommend, which the e2e suite compares with
# One build: the compiler's messages rendered on stderr, the artifacts as JSON on stdout, read for the path.
e2e_bin=$(cargo test -q -p tailor-tests --test e2e --no-run --message-format=json-render-diagnostics |
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "e2e" and m.get("executable"):
        print(m["executable"])')
[[ -x $e2e_bin ]] || { echo "e2e (real control plane): the e2e test binary was not built"; echo "e2e (real control plane): 0 passed, 1 failed"; exit 1; }

# Tests that disturb what every test shares run in the disruptive lane. The two tests of a PAIRS entry disturb
# different processes, and need nothing of the other's beyond what a short delay costs: one restarts the
# recommender (or the recommenders and metrics-server), the other stops the webhook or rotates its certificate,
# which sizes no pod of the first one's Off VPAs (failurePolicy Ignore lets every request through meanwhile).
# They run two at a time, pair after pair, then the DISRUPTIVE ones one at a time, in this order. The API
# server's restart comes last: the RBAC authorizer of a restarted API server refuses for a few seconds, and
# upstream's admission controller then backs its watches off, so for up to a minute it finds no owner for a
# pod (and sizes none) — which a test after it would read as upstream not working. The webhook-outage test
# changes only its own namespace's webhook selector, so it runs in the shared lane.
DISRUPTIVE=(uninstall:: webhook_down::webhook_down_does_not_block_pod_creation resilience::an_api_server)
PAIRS=("restart::recommender_restart_restores_from_checkpoints resilience::without_the_webhook"
  "restart::two_recommender_replicas_fail_over webhook_down::a_vpa_admitted_while_the_webhook_was_down"
  "differential:: certificates::")
filters=("$@")
# selected ENTRY...: the entries (or the narrower filters) the filters select, all without filters, one a line.
selected() {
  local d f
  for d in "$@"; do
    if ((${#filters[@]} == 0)); then echo "$d"; continue; fi
    for f in "${filters[@]}"; do
      if [[ $d == *"$f"* ]]; then echo "$d"; elif [[ $f == *"$d"* ]]; then echo "$f"; fi
    done
  done | awk '!seen[$0]++'
}
mapfile -t serial < <(selected "${DISRUPTIVE[@]}")
skips=()
for d in "${DISRUPTIVE[@]}"; do skips+=(--skip "$d"); done
paired_runs=()
for pair in "${PAIRS[@]}"; do
  for d in $pair; do skips+=(--skip "$d"); done
  # shellcheck disable=SC2086 # two names without spaces
  run=$(selected $pair | paste -sd' ')
  [[ -n $run ]] && paired_runs+=("$run")
done
# count ARGS...: how many e2e tests a run with these filters and skips selects (1 when the binary cannot list
# them: the run then fails where it shows why, instead of being left out).
count() {
  local listed
  listed=$(cd "$ROOT/tests" && "$e2e_bin" --ignored --list "$@" 2>/dev/null) || { echo 1; return; }
  grep -c ': test$' <<<"$listed"
}
shared_n=$(count "${filters[@]}" "${skips[@]}")
# up DIR: brings a cluster up in DIR; prints the lines to eval (KUBECONFIG, PATH).
up() {
  local lines
  if lines=$(TAILOR_CLUSTER_DIR=$1 "$ROOT/hack/cluster.sh" up --kubernetes "$which" --with-upstream); then
    echo "$lines"
  else
    echo "e2e (real control plane): the cluster did not come up (logs: $1/logs)" >&2
    return 1
  fi
}
down() { [[ ${KEEP_CLUSTER:-0} == 1 ]] || TAILOR_CLUSTER_DIR=$1 "$ROOT/hack/cluster.sh" down; }

# run_tests LOG THREADS ARG...: one run of the e2e binary on the cluster whose env is in effect; its output on
# stdout and appended to LOG; "P F" (passed, failed) appended to LOG.result.
run_tests() {
  local log=$1 threads=$2 rc rp rf part
  shift 2
  part=$(mktemp)
  (cd "$ROOT/tests" && TAILOR_E2E_KUBECONFIG=$KUBECONFIG TAILOR_E2E_CONTROL="$ROOT/hack/cluster.sh" \
    TAILOR_E2E_AUDIT_LOG="$TAILOR_CLUSTER_DIR/audit.log" \
    "$e2e_bin" --ignored --test-threads="$threads" --show-output "$@") 2>&1 | tee "$part"
  rc=${PIPESTATUS[0]}
  cat "$part" >>"$log"
  read -r rp rf < <(sed -nE 's/^test result: [a-zA-Z]+\. ([0-9]+) passed; ([0-9]+) failed.*/\1 \2/p' "$part" | tail -n 1)
  rm -f "$part"
  rp=${rp:-0}
  rf=${rf:-0}
  if [[ $rc -ne 0 && $rf -eq 0 ]]; then rf=1; fi # the test binary did not run to its summary
  echo "$rp $rf" >>"$log.result"
}

# lane NAME DIR ENV_LINES PART...: runs each PART ("THREADS ARG...") on the cluster in DIR (up, its env lines
# given; empty: it did not come up), then its audit check, then brings it down. Counts go to
# $LOG_DIR/e2e-local-$which-NAME.log.result and .audit.
lane() {
  local name=$1 dir=$2 env_lines=$3 part records=()
  shift 3
  local log="$LOG_DIR/e2e-local-$which-$name.log"
  : >"$log"
  : >"$log.result"
  echo "audit: 0 passed, 0 failed" >"$log.audit"
  if [[ -z $env_lines ]]; then echo "0 1" >>"$log.result"; return; fi
  eval "$env_lines"
  export TAILOR_CLUSTER_DIR=$dir
  for part in "$@"; do
    # shellcheck disable=SC2086 # THREADS and test names or --skip NAME, none with spaces
    run_tests "$log" $part
  done
  # The live differential's own summary (tests/tests/e2e/differential.rs), when it ran.
  grep -E '^live differential: ' "$log" | tail -n 1
  python3 "$ROOT/hack/cluster/e2e_times.py" "$dir/audit.log"
  [[ -n ${TAILOR_STANDIN_RECORD_DIR:-} ]] &&
    records=(--records "$TAILOR_STANDIN_RECORD_DIR" --records-name "requests-audit-$which-$name.jsonl")
  python3 "$ROOT/hack/cluster/audit_check.py" "$dir/audit.log" "${records[@]}" | tee "$log.audit"
  down "$dir"
}

shared_part="4 ${filters[*]} ${skips[*]}"
disruptive_parts=()
for run in "${paired_runs[@]}"; do disruptive_parts+=("2 $run"); done
for run in "${serial[@]}"; do disruptive_parts+=("1 $run"); done

trap 'down "$MAIN_CLUSTER"; down "$DISRUPTIVE_CLUSTER"' EXIT
main_env=$(up "$MAIN_CLUSTER")
# shellcheck disable=SC1091 # written by hack/cluster.sh up
version=$(source "$MAIN_CLUSTER/env" 2>/dev/null && echo "$KUBERNETES_VERSION")
lanes=(shared)
if ((LANES >= 2 && shared_n > 0 && ${#disruptive_parts[@]} > 0)); then
  # The disruptive lane's cluster comes up once the first one's ports are taken, while the shared lane runs;
  # its output is shown when it is done.
  (lane disruptive "$DISRUPTIVE_CLUSTER" "$(up "$DISRUPTIVE_CLUSTER")" "${disruptive_parts[@]}") \
    >"$LOG_DIR/e2e-local-$which-disruptive.out" 2>&1 &
  disruptive_pid=$!
  lane shared "$MAIN_CLUSTER" "$main_env" "$shared_part"
  wait "$disruptive_pid"
  echo "--- the disruptive lane (its own cluster, $DISRUPTIVE_CLUSTER) ---"
  cat "$LOG_DIR/e2e-local-$which-disruptive.out"
  lanes+=(disruptive)
else
  parts=()
  ((shared_n > 0)) && parts+=("$shared_part")
  lane shared "$MAIN_CLUSTER" "$main_env" "${parts[@]}" "${disruptive_parts[@]}"
fi

p=0 f=0 ap=0 af=0
: >"$LOG_DIR/e2e-local-$which.log"
for name in "${lanes[@]}"; do
  cat "$LOG_DIR/e2e-local-$which-$name.log" >>"$LOG_DIR/e2e-local-$which.log"
  while read -r rp rf; do p=$((p + rp)); f=$((f + rf)); done <"$LOG_DIR/e2e-local-$which-$name.log.result"
  read -r rp rf < <(sed -nE 's/^audit: ([0-9]+) passed, ([0-9]+) failed.*/\1 \2/p' \
    "$LOG_DIR/e2e-local-$which-$name.log.audit" | tail -n 1)
  ap=$((ap + ${rp:-0}))
  af=$((af + ${rf:-1}))
done
if [[ $((p + f)) -eq 0 ]]; then f=1; echo "no e2e test ran"; fi
echo "e2e (real control plane, Kubernetes $version): $p passed, $f failed"
echo "audit (${#lanes[@]} cluster(s)): $ap passed, $af failed"
[[ $f -eq 0 && $af -eq 0 ]]
