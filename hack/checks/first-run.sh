#!/usr/bin/env bash
# README's first command works as written, and the `tailor` it builds without default features stays clean:
#
# 1. The first command of README.md's first `sh` block is run exactly as written (from the repository's root):
#    it must exit 0 and print the recommendation table's header. Its wall time is printed; on a fresh
#    machine that is the newcomer's first run (docs/decisions/first-build.md). It builds only the crates
#    `tailor recommend` on a trace needs (tailor-cli without its default feature `full`), in release.
# 2. clippy over that build, warnings denied: code behind `#[cfg(feature = "full")]` must leave nothing unused
#    or missing when the feature is off (the rest of the suite builds with it on).
# Last line: "first-run: N passed, N failed".
set -uo pipefail
# shellcheck source=../check-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../check-lib.sh"
cd "$(dirname "$0")/../.." || exit 1

# The first line of README's first ```sh block, without its trailing comment.
first_command() {
  awk '/^```sh$/ {inside = 1; next} inside && /^```/ {exit} inside && NF {print; exit}' README.md |
    sed -E 's/[[:space:]]+#.*$//'
}

readme_first_command() {
  local cmd out start
  cmd=$(first_command)
  [[ $cmd == cargo\ run* ]] || { echo "README's first command is not a cargo run: $cmd"; return 1; }
  start=$SECONDS
  out=$(bash -c "$cmd" 2>&1) || { echo "$cmd failed:"; echo "$out" | tail -n 20; return 1; }
  grep -q '^TRACE  *CONTAINER  *CPU target' <<<"$out" || {
    echo "$cmd printed no recommendation table:"
    echo "$out" | tail -n 20
    return 1
  }
  echo "$((SECONDS - start))" >"$elapsed"
}

elapsed=$(mktemp)
trap 'rm -f "$elapsed"' EXIT
run "README's first command prints recommendations" readme_first_command
[[ -s $elapsed ]] && echo "     $(first_command): $(cat "$elapsed") s"
run "tailor-cli without default features: clippy clean" \
  cargo clippy -q -p tailor-cli --no-default-features -- -D warnings
echo "first-run: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
