#!/usr/bin/env bash
# The e2e suite (tests/tests/e2e/) on the local control plane: hack/cluster.sh up, the tests, the audit-log
# check, hack/cluster.sh down. hack/test.sh runs it; by hand:
#
#   hack/e2e-local.sh [--kubernetes newest|oldest] [TEST_FILTER...]
#
# Prints "e2e (real control plane, Kubernetes vX.Y.Z): N passed, N failed" and then the audit check's
# "audit: N passed, N failed" (hack/cluster/audit_check.py). With TAILOR_STANDIN_RECORD_DIR set, Tailor's
# requests from the audit log are added to the request records hack/checks/rbac.sh reads.
# KEEP_CLUSTER=1 leaves the cluster running afterwards (hack/cluster.sh down stops it).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
which=newest
if [[ ${1:-} == --kubernetes ]]; then which=$2; shift 2; fi
LOG_DIR="$ROOT/target/test-logs"
mkdir -p "$LOG_DIR"
export TAILOR_CLUSTER_DIR=${TAILOR_CLUSTER_DIR:-$ROOT/target/cluster}

# The test binary first, so that the cluster does not wait for the compiler.
cargo build -q -p tailor-cli 2>&1 | tail -n 20 >&2 # tailor recommend, which the e2e suite compares with
cargo test -q -p tailor-tests --test e2e --no-run 2>&1 | tail -n 20 >&2

# Upstream VPA runs beside Tailor, as users run both (the coexistence tests need it).
env_lines=$("$ROOT/hack/cluster.sh" up --kubernetes "$which" --with-upstream) || {
  echo "e2e (real control plane): the cluster did not come up (logs: $TAILOR_CLUSTER_DIR/logs)"
  echo "e2e (real control plane): 0 passed, 1 failed"
  exit 1
}
eval "$env_lines"
[[ ${KEEP_CLUSTER:-0} == 1 ]] || trap '"$ROOT/hack/cluster.sh" down' EXIT
# shellcheck disable=SC1091 # written by hack/cluster.sh up
version=$(source "$TAILOR_CLUSTER_DIR/env" && echo "$KUBERNETES_VERSION")

# Tests that disturb what every test shares (Tailor's or upstream's processes, the webhook's certificate, the
# API server) run after the rest; the rest, each in its own namespace, run four at a time. The two tests of a
# PAIRS entry disturb different processes, and need nothing of the other's beyond what a short delay costs:
# one restarts the recommender (or the recommenders and metrics-server), the other stops the webhook or rotates
# its certificate, which sizes no pod of the first one's Off VPAs (failurePolicy Ignore lets every request
# through meanwhile). They run two at a time, pair after pair, then the DISRUPTIVE ones one at a time. The
# webhook-outage test changes only its own namespace's webhook selector, so it runs with the rest.
DISRUPTIVE=(resilience::an_api_server uninstall:: webhook_down::webhook_down_does_not_block_pod_creation)
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
for pair in "${PAIRS[@]}"; do
  for d in $pair; do skips+=(--skip "$d"); done
done

log="$LOG_DIR/e2e-local-$which.log"
: >"$log"
p=0
f=0
# run_tests THREADS ARGS...: one cargo test run of the e2e binary, appended to the log; adds to p and f.
run_tests() {
  local threads=$1 rc rp rf part
  shift
  part=$(mktemp)
  TAILOR_E2E_KUBECONFIG=$KUBECONFIG TAILOR_E2E_CONTROL="$ROOT/hack/cluster.sh" \
    TAILOR_E2E_AUDIT_LOG="$TAILOR_CLUSTER_DIR/audit.log" \
    cargo test -p tailor-tests --test e2e -- --ignored --test-threads="$threads" --show-output "$@" 2>&1 |
    tee "$part"
  rc=${PIPESTATUS[0]}
  cat "$part" >>"$log"
  read -r rp rf < <(sed -nE 's/^test result: [a-zA-Z]+\. ([0-9]+) passed; ([0-9]+) failed.*/\1 \2/p' "$part" | tail -n 1)
  rm -f "$part"
  rp=${rp:-0}
  rf=${rf:-0}
  if [[ $rc -ne 0 && $rf -eq 0 ]]; then rf=1; fi # the test binary did not run to its summary
  p=$((p + rp))
  f=$((f + rf))
}
run_tests 4 "${filters[@]}" "${skips[@]}"
for pair in "${PAIRS[@]}"; do
  # shellcheck disable=SC2086 # two names without spaces
  mapfile -t paired < <(selected $pair)
  if ((${#paired[@]})); then run_tests 2 "${paired[@]}"; fi
done
if ((${#serial[@]})); then run_tests 1 "${serial[@]}"; fi
if [[ $((p + f)) -eq 0 ]]; then f=1; echo "no e2e test ran"; fi
echo "e2e (real control plane, Kubernetes $version): $p passed, $f failed"
# The live differential's own summary (tests/tests/e2e/differential.rs), when it ran.
grep -E '^live differential: ' "$log" | tail -n 1

python3 "$ROOT/hack/cluster/e2e_times.py" "$TAILOR_CLUSTER_DIR/audit.log"

records=()
[[ -n ${TAILOR_STANDIN_RECORD_DIR:-} ]] &&
  records=(--records "$TAILOR_STANDIN_RECORD_DIR" --records-name "requests-audit-$which.jsonl")
python3 "$ROOT/hack/cluster/audit_check.py" "$TAILOR_CLUSTER_DIR/audit.log" "${records[@]}"
audit=$?
[[ $f -eq 0 && $audit -eq 0 ]]
