#!/usr/bin/env bash
# Byte-for-byte comparison of two `tailor` binaries' outputs on every example and every vector: the proof
# that a refactoring changed no answer. Runs `recommend` (every output format, with and without --explain)
# on every trace under examples/ and tests/data/, `patch` on the example pod and on every admission case
# file, `plan` on the example snapshot, `convert` on every manifest under examples/, and `crds`; compares
# stdout, stderr and exit codes.
#
#   hack/cli-parity.sh OLD_TAILOR [NEW_TAILOR]      (NEW defaults to target/debug/tailor)
#
# To get OLD from an earlier commit:
#   git worktree add /tmp/tailor-old <commit> && cargo build --manifest-path /tmp/tailor-old/Cargo.toml \
#     --target-dir /tmp/tailor-old-target -p tailor-recommender --bin tailor   (before the crate split)
# Prints one line per differing command and ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
old=${1:?usage: hack/cli-parity.sh OLD_TAILOR [NEW_TAILOR]}
new=${2:-target/debug/tailor}
for b in "$old" "$new"; do
  [[ -x $b ]] || { echo "not an executable: $b" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

passed=0
failed=0
compare() { # compare ARGS...: run both binaries, compare stdout, stderr and exit code
  local rc_old rc_new
  "$old" "$@" >"$work/old.out" 2>"$work/old.err" </dev/null
  rc_old=$?
  "$new" "$@" >"$work/new.out" 2>"$work/new.err" </dev/null
  rc_new=$?
  if [[ $rc_old -eq $rc_new ]] && cmp -s "$work/old.out" "$work/new.out" && cmp -s "$work/old.err" "$work/new.err"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "DIFFERS (exit $rc_old vs $rc_new): tailor $*"
    diff <(head -c 2000 "$work/old.out") <(head -c 2000 "$work/new.out") | head -n 10
    diff "$work/old.err" "$work/new.err" | head -n 10
  fi
}

traces=(examples/traces/*.json tests/data/recommender/unit-vectors.json tests/data/upstream-diff/recommender-cases.json)
for t in "${traces[@]}"; do
  for fmt in table json yaml csv vpa; do
    compare recommend --input "$t" --output "$fmt"
    compare recommend --input "$t" --output "$fmt" --explain
  done
done
# A few non-default flags on the demo trace, so flag plumbing is compared too.
compare recommend --input examples/traces/demo.json --target-cpu-percentile 0.5 --output json
compare recommend --input examples/traces/demo.json --recommendation-margin-fraction 0.3 --output yaml
compare recommend --input examples/traces/demo.json --memory-aggregation-interval 12h --output json

compare patch --pod examples/patch/pod.yaml --vpa examples/patch/vpa.yaml
compare patch --pod examples/patch/pod.yaml --vpa examples/patch/vpa.yaml --limit-range examples/patch/limitrange.yaml
for c in tests/data/admission/unit-cases.json tests/data/upstream-diff/admission-cases.json; do
  compare patch --case "$c"
done
# The snapshot reader (docs/decisions/manifest-reader.md): the example snapshot, with its stale Lease, as JSON.
compare plan examples/plan/ --now 2026-01-10T12:00:00Z
compare plan examples/plan/ --now 2026-01-10T12:00:00Z --output json
compare plan examples/plan/snapshot.yaml examples/plan/stale/ --now 2026-01-10T12:00:00Z
while IFS= read -r m; do
  compare convert "$m"
done < <(find examples -name '*.yaml' | sort)
compare crds
compare --help
compare recommend --help
compare patch --help

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
