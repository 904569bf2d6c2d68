#!/usr/bin/env bash
# Long fuzzing run of the webhook's properties (docs/decisions/webhook-hardening.md): the quantity parser, whole
# pod reviews through the production reviewer, and the pod patch. The test suite runs the same properties
# briefly; this runs many more cases, bounded in time. A failure prints the minimal failing input and proptest
# keeps the seed under admission/tests/it/proptest-regressions/ (commit it: later runs replay it first).
# Usage: hack/fuzz.sh [--cases N] [--minutes M]
set -euo pipefail
cd "$(dirname "$0")/.."

CASES=200000
MINUTES=20
while [ $# -gt 0 ]; do
  case "$1" in
    --cases) CASES=$2; shift 2 ;;
    --minutes) MINUTES=$2; shift 2 ;;
    *) echo "unknown argument $1 (usage: hack/fuzz.sh [--cases N] [--minutes M])" >&2; exit 2 ;;
  esac
done

cargo build --release -q -p tailor-admission --tests
echo "fuzzing with $CASES cases per property, at most $MINUTES minutes"
start=$(date +%s)
rc=0
TAILOR_FUZZ_CASES=$CASES timeout "${MINUTES}m" \
  cargo test --release -q -p tailor-admission --test it -- fuzz:: proptest_pod:: --test-threads 2 || rc=$?
if [ "$rc" -eq 124 ]; then echo "time limit reached without a failure"; rc=0; fi
echo "fuzzing ended after $(( $(date +%s) - start )) s with status $rc"
exit $rc
