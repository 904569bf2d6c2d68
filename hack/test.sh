#!/usr/bin/env bash
# The one test entry point (docs/design/principles.md §5): installs what is missing, runs fmt, clippy, every
# test and the non-Rust checks under hack/checks/, and ends with a line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
export CARGO_TERM_COLOR=never
LOG_DIR="$ROOT/target/test-logs"
mkdir -p "$LOG_DIR"

passed=0
failed=0
failures=()

# Each step's wall time, printed as a table at the end (the budget: ≤ 25 min warm, ≤ 60 min fresh).
timings=()
step_name=""
step_start=$SECONDS
end_step() {
  [[ -n $step_name ]] && timings+=("$(printf '%5ds  %s' $((SECONDS - step_start)) "$step_name")")
  step_name=""
}
step() {
  end_step
  step_name=$*
  step_start=$SECONDS
  printf '\n==> %s\n' "$*"
}
record() { # record NAME STATUS
  if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("$1"); fi
}

# --- prerequisites -----------------------------------------------------------------------------------
step "prerequisites"
"$ROOT/hack/install-deps.sh" --without-go || { echo "installing prerequisites failed"; record install-deps 1; }

# The Go-built control plane of the e2e runs (hack/go/build.sh: about half an hour on 2 cores the first time on a
# machine, nothing once cached) builds in the background, at a lower priority, so that it takes the cores the
# Rust steps leave idle (linking, single-crate phases, tests waiting on their stand-ins) rather than slowing
# them. Each e2e run waits only for what it starts (hack/cluster.sh): the newest Kubernetes and the rest of the
# cluster now; the oldest Kubernetes's programs are built once the first set is done, beside the newest e2e
# run, which spends most of its time waiting on the cluster's clocks.
GO_LOG="$LOG_DIR/go-build.log"
GO_OLDEST_LOG="$LOG_DIR/go-build-oldest.log"
go_build() { # go_build LOG COMPONENT...: hack/go/build.sh in the background, niced; sets go_build_pid
  local log=$1
  shift
  nice -n 10 "$ROOT/hack/go/build.sh" "$@" >/dev/null 2>"$log" &
  go_build_pid=$!
}
# go_wait LOG: waits for the last go_build, shows what it built (or its failure)
go_wait() {
  if wait "$go_build_pid"; then
    grep -E 'built in [0-9]+ s' "$1" || echo "already cached"
  else
    tail -n 30 "$1"
    record "hack/go/build.sh (log: $1)" 1
  fi
}
go_build "$GO_LOG" kubernetes etcd kwok metrics-server helm upstream-vpa

# --- formatting and lints ----------------------------------------------------------------------------
step "cargo fmt --check"
cargo fmt --all -- --check
record "cargo fmt" $?

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
record "cargo clippy" $?

# --- Rust tests ----------------------------------------------------------------------------------------
# tests/tests/it/ runs the real binaries against the stand-in API server and finds them in
# target/debug: build them first (cargo test --workspace would too, but only as a side effect).
step "cargo build -p tailor-recommender -p tailor-admission -p tailor-updater"
cargo build -p tailor-recommender -p tailor-admission -p tailor-updater
record "cargo build (binaries for the stand-in tests)" $?

# The stand-in API servers of the tests write every request they answered here; hack/checks/rbac.sh (run with
# the other checks below, after the tests) holds them against the chart's RBAC. Emptied first, so that only
# this run's requests count.
export TAILOR_STANDIN_RECORD_DIR="$ROOT/target/standin-requests"
rm -rf "$TAILOR_STANDIN_RECORD_DIR"
# Each conformance test appends its "conformance: N/M" line here (tailor-testkit's conformance module), for
# the summary after the e2e runs.
export TAILOR_CONFORMANCE_SUMMARY="$LOG_DIR/conformance.txt"
CONFORMANCE_SUMMARY=$TAILOR_CONFORMANCE_SUMMARY
rm -f "$CONFORMANCE_SUMMARY"

step "cargo test --workspace"
cargo test --workspace --no-fail-fast 2>&1 | tee "$LOG_DIR/cargo-test.log"
rc=${PIPESTATUS[0]}
while read -r p f; do
  passed=$((passed + p)); failed=$((failed + f))
done < <(sed -nE 's/^test result: [a-zA-Z]+\. ([0-9]+) passed; ([0-9]+) failed.*/\1 \2/p' "$LOG_DIR/cargo-test.log")
if [[ $rc -ne 0 ]] && ! grep -qE '^test result: FAILED' "$LOG_DIR/cargo-test.log"; then
  record "cargo test (build)" 1
fi

# --- e2e on a real control plane (hack/cluster.sh): Tailor installed by its chart, the e2e suite, the audit log.
# Tailor's requests from the audit log join the request records hack/checks/rbac.sh reads below. The whole
# suite runs on the newest Kubernetes (hack/go/versions.env); on the oldest Tailor supports, the scenarios
# whose API differs between versions (CRD schema and kubectl, admission of pods incl. pod-level resources,
# in-place resize — where 1.34's API server accepts a resize its kubelet then finds infeasible, and 1.37's
# refuses it at once —, eviction, metrics, OOM events) — the rest (restarts, failover, outages) is the same
# code on both.
OLDEST_SCENARIOS=(crds:: admission:: in_place:: recreate:: recommendation:: resilience::a_pod_disruption)
for which in newest oldest; do
  if [[ $which == newest ]]; then
    step "waiting for the Go-built control plane (built in the background since the prerequisites)"
    go_wait "$GO_LOG"
    go_build "$GO_OLDEST_LOG" kubernetes-oldest
  else
    step "waiting for the oldest Kubernetes (built in the background beside the newest e2e run)"
    go_wait "$GO_OLDEST_LOG"
  fi
  step "e2e on the local control plane ($which Kubernetes)"
  log="$LOG_DIR/e2e-local-summary-$which.log"
  if [[ $which == newest ]]; then
    "$ROOT/hack/e2e-local.sh" --kubernetes newest 2>&1 | tee "$log"
  else
    "$ROOT/hack/e2e-local.sh" --kubernetes oldest "${OLDEST_SCENARIOS[@]}" 2>&1 | tee "$log"
  fi
  for kind in e2e audit; do
    line=$(grep -E "^$kind( \(.*\))?: [0-9]+ passed, [0-9]+ failed" "$log" | tail -n 1)
    if [[ -z $line ]]; then record "$kind $which (no summary)" 1; continue; fi
    p=$(sed -nE 's/.*: ([0-9]+) passed, ([0-9]+) failed.*/\1/p' <<<"$line")
    f=$(sed -nE 's/.*: ([0-9]+) passed, ([0-9]+) failed.*/\2/p' <<<"$line")
    passed=$((passed + p)); failed=$((failed + f))
    [[ $f -gt 0 ]] && failures+=("$kind $which")
  done
done

# --- conformance figures (already counted above; re-run with output shown so the N/M lines are visible) ---
step "conformance summary"
if [[ -s $CONFORMANCE_SUMMARY ]]; then
  cat "$CONFORMANCE_SUMMARY"
else
  echo "no conformance figures were written to $CONFORMANCE_SUMMARY"
  record "conformance summary" 1
fi

# --- other checks: each script prints "N passed, N failed" as its last line ----------------------------
# They run after the tests: hack/checks/rbac.sh reads the requests the tests recorded, and hack/checks/flags.sh
# compares the flags reference with the --help of the binaries the build step and cargo test left (building
# only what is missing). hack/checks/deps.sh runs cargo-machete, which the prerequisites step installs;
# hack/checks/rustdoc.sh runs cargo doc with rustdoc's warnings denied.
for check in "$ROOT"/hack/checks/*.sh; do
  [[ -e $check ]] || continue
  name=$(basename "$check" .sh)
  step "check: $name"
  out="$LOG_DIR/check-$name.log"
  bash "$check" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  last=$(grep -E '^([A-Za-z-]+: )?[0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1)
  if [[ -n $last ]]; then
    p=$(sed -nE 's/^([A-Za-z-]+: )?([0-9]+) passed, ([0-9]+) failed.*/\2/p' <<<"$last")
    f=$(sed -nE 's/^([A-Za-z-]+: )?([0-9]+) passed, ([0-9]+) failed.*/\3/p' <<<"$last")
    passed=$((passed + p)); failed=$((failed + f))
    [[ $f -gt 0 ]] && failures+=("$name")
  fi
  if [[ $rc -ne 0 && ( -z $last || ${f:-0} -eq 0 ) ]]; then record "$name (exit $rc)" 1; fi
done

end_step
echo
echo "wall time per step (total ${SECONDS}s):"
printf '  %s\n' "${timings[@]}"
echo
if ((${#failures[@]})); then printf 'failed steps: %s\n' "${failures[*]}"; fi
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
