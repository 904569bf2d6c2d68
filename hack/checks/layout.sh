#!/usr/bin/env bash
# The crate boundaries of docs/design/principles.md §2, checked on the real dependency graph: the pure crates
# (tailor-crds, tailor-core, tailor-engine) stay pure, the graph runs crds -> core -> kube -> components -> cli
# and the three components never depend on each other, no crate re-exports another's modules, no crate's
# modules import each other in a cycle, and shipped code imports no globs.
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

pure=(kube-client kube-runtime tokio hyper)
run "tailor-engine: no kube client, tokio, hyper or clap by default" lacks tailor-engine "${pure[@]}" clap
run "tailor-crds: no kube client, tokio, hyper or clap" lacks tailor-crds "${pure[@]}" clap
run "tailor-core: no kube client, tokio, hyper or clap" lacks tailor-core "${pure[@]}" clap
# Each crate one job (docs/design/principles.md §2): API types below the pure rules, the pure rules below the
# plumbing, the three components beside each other, the CLI above them all.
run "tailor-crds depends on no other Tailor crate" \
  lacks tailor-crds tailor-core tailor-kube tailor-engine tailor-prometheus tailor-recommender tailor-admission \
  tailor-updater tailor-cli
run "tailor-core depends on no Tailor crate but tailor-crds" \
  lacks tailor-core tailor-kube tailor-engine tailor-prometheus tailor-recommender tailor-admission tailor-updater \
  tailor-cli
run "tailor-kube depends on no component" \
  lacks tailor-kube tailor-engine tailor-prometheus tailor-recommender tailor-admission tailor-updater tailor-cli
run "tailor-engine depends on no cluster plumbing or component" \
  lacks tailor-engine tailor-kube tailor-prometheus tailor-recommender tailor-admission tailor-updater tailor-cli
run "tailor-recommender depends on neither the webhook nor the updater" \
  lacks tailor-recommender tailor-admission tailor-updater tailor-cli
run "tailor-updater depends on neither the webhook nor the recommender" \
  lacks tailor-updater tailor-admission tailor-recommender tailor-cli
run "tailor-admission depends on neither the recommender nor the updater" \
  lacks tailor-admission tailor-recommender tailor-updater tailor-cli
# Upstream's test doubles live in tailor-conformance, which only the CLI and the tests link.
for daemon in tailor-recommender tailor-admission tailor-updater; do
  run "$daemon links no conformance harness or test double" lacks "$daemon" tailor-conformance
done
# Each daemon's binary is a shell: flags, settings and the daemon live in its library, the binary only
# parses and starts them (at most 60 lines, `main` at most 30).
thin_binary() {
  local file=$1 lines main
  lines=$(wc -l <"$file")
  main=$(awk '/^(async )?fn main\(/ {on = 1} on {n++} on && /^}/ {print n; exit}' "$file")
  ((lines <= 60)) || { echo "$file: $lines lines"; return 1; }
  if [[ -z $main ]] || ((main > 30)); then
    echo "$file: main is ${main:-not found} lines"
    return 1
  fi
}
for bin in recommender/src/bin/tailor-recommender.rs admission/src/bin/tailor-admission.rs \
  updater/src/bin/tailor-updater.rs; do
  run "$bin is a thin shell" thin_binary "$bin"
done
# No crate re-exports another's modules: `pub use` names only the crate's own items.
no_foreign_reexports() {
  local hits
  hits=$(grep -rnE '^\s*pub(\([a-z]+\))?\s+use\s+(::)?(tailor_[a-z_]+|kube|k8s_openapi)\b' --include=*.rs \
    crds/src core/src kube/src admission/src updater/src recommender/src recommender/engine/src \
    recommender/prometheus/src conformance/src cli/src tests/src)
  [[ -z $hits ]] || { echo "$hits"; return 1; }
}
run "no crate re-exports another crate's modules" no_foreign_reexports
for src in crds/src core/src kube/src admission/src recommender/src recommender/engine/src \
  recommender/prometheus/src conformance/src cli/src updater/src; do
  [[ -d $src ]] || { echo "$src is missing"; failed=$((failed + 1)); continue; }
  run "no import cycle between the modules of $src" python3 hack/module_cycles.py "$src"
done
# Shipped code names what it imports (`use a::{B, c}`), so a reader finds where a name comes from; a glob
# (`use a::*`, `pub use a::*`) is for test modules and test files only (glob_imports.py).
run "no glob imports in shipped code" python3 hack/glob_imports.py crds/src core/src kube/src admission/src \
  updater/src recommender/src recommender/engine/src recommender/prometheus/src recommender/cluster-fit/src \
  dashboard/src conformance/src cli/src
echo "layout: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
