#!/usr/bin/env bash
# The flags reference (docs/reference/flags/) is what the binaries accept: builds tailor-recommender,
# tailor-admission, tailor-updater and tailor (debug, as hack/test.sh's build step and cargo test leave them, so
# this is quick after them), regenerates the pages from their --help into a temporary directory with
# hack/flags-reference.sh and compares them with the committed ones. On a difference: run
# hack/flags-reference.sh and commit the pages. Last line: "flags: N passed, N failed".
set -uo pipefail
# shellcheck source=../check-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../check-lib.sh"
cd "$(dirname "$0")/../.." || exit 1

# The three daemons and the CLI, each binary as hack/test.sh builds it.
build() {
  cargo build -q -p tailor-recommender -p tailor-admission -p tailor-updater -p tailor-cli
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
compare() {
  hack/flags-reference.sh "$tmp" || return 1
  diff -ru docs/reference/flags "$tmp" || {
    echo "the flags reference is stale: run hack/flags-reference.sh and commit docs/reference/flags/"
    return 1
  }
}

run "the binaries build" build
if ((failed == 0)); then
  run "docs/reference/flags/ is the binaries' --help (hack/flags-reference.sh)" compare
fi
echo "flags: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
