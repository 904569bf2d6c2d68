#!/usr/bin/env bash
# The API documentation builds without a warning: `cargo doc --workspace --no-deps` with rustdoc's warnings
# denied (a broken or ambiguous intra-doc link, a link to a private item from a public one, an unclosed HTML
# tag or a bare URL in a doc comment, …). The pages land in target/doc/. Last line: "rustdoc: N passed, N failed".
set -uo pipefail
# shellcheck source=../check-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../check-lib.sh"
cd "$(dirname "$0")/../.." || exit 1

doc() {
  RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -D warnings" cargo doc -q --workspace --no-deps
}

run "cargo doc --workspace --no-deps, rustdoc warnings denied" doc
echo "rustdoc: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
