#!/usr/bin/env bash
# The crate boundaries of DESIGN.md §2, checked on the real dependency graph: the pure crates stay pure,
# the controller (and the updater) never depend on the webhook, and no crate's modules import each other
# in a cycle.
set -uo pipefail
# shellcheck source=../check-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../check-lib.sh"
cd "$(dirname "$0")/../.." || exit 1

# Normal (non-dev) dependencies of a package with its default features, one crate name per line.
normal_deps() {
  cargo tree -q -p "$1" -e normal --prefix none --no-dedupe 2>/dev/null | sed -E 's/ v[0-9].*//' | sort -u
}
# lacks PACKAGE CRATE...: none of CRATE is among PACKAGE's normal dependencies.
lacks() {
  local pkg=$1 bad=()
  shift
  local deps
  deps=$(normal_deps "$pkg") || return 1
  [[ -n $deps ]] || { echo "cargo tree printed nothing for $pkg"; return 1; }
  for c in "$@"; do
    grep -qx "$c" <<<"$deps" && bad+=("$c")
  done
  ((${#bad[@]} == 0)) || { echo "$pkg depends on: ${bad[*]}"; return 1; }
}

run "tailor-engine: no kube client, tokio, hyper or clap by default" \
  lacks tailor-engine kube-client kube-runtime tokio hyper clap
run "tailor-crds: no kube client, tokio, hyper or clap without feature kube" \
  lacks tailor-crds kube-client kube-runtime tokio hyper clap
run "tailor-recommender does not depend on tailor-admission" lacks tailor-recommender tailor-admission
if [[ -f updater/Cargo.toml ]]; then
  run "tailor-updater does not depend on tailor-admission" lacks tailor-updater tailor-admission
fi
for src in crds/src admission/src recommender/src recommender/engine/src recommender/prometheus/src \
  recommender/cli/src updater/src; do
  [[ -d $src ]] || continue
  run "no import cycle between the modules of $src" python3 hack/module_cycles.py "$src"
done
echo "layout: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
