#!/usr/bin/env bash
# No dependency declared that nothing uses. Two checks:
#
# 1. cargo-machete over every crate of the workspace: each dependency a Cargo.toml declares (normal, dev and
#    build) is named somewhere in that crate's sources. It reads the sources, not the compiled code, so it can
#    miss a dependency that is only named in a comment, and it can flag one that is used only through another
#    crate's macro or only for a feature it switches on: such a dependency goes into the crate's
#    `[package.metadata.cargo-machete] ignored = [...]`, with a comment saying why.
# 2. Every entry of the root Cargo.toml's [workspace.dependencies] is used by some member (machete does not
#    look at the workspace table; an entry nothing uses pins a version nobody builds).
#
# hack/install-deps.sh installs cargo-machete (its MACHETE_VERSION). Last line:
# "deps: N passed, N failed".
set -uo pipefail
# shellcheck source=../check-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../check-lib.sh"
cd "$(dirname "$0")/../.." || exit 1

machete() {
  if ! command -v cargo-machete >/dev/null; then
    echo "cargo-machete is missing: run hack/install-deps.sh"
    return 1
  fi
  cargo machete --skip-target-dir
}

# Each [workspace.dependencies] key is named by some member's [*dependencies] table (as `key = {
# workspace = true … }` or `key.workspace = true`), or by a target-specific table of one.
workspace_entries_used() {
  python3 - <<'EOF'
import sys
import tomllib

with open("Cargo.toml", "rb") as f:
    root = tomllib.load(f)
declared = set(root["workspace"]["dependencies"])
used = set()
for member in root["workspace"]["members"]:
    with open(f"{member}/Cargo.toml", "rb") as f:
        manifest = tomllib.load(f)
    tables = [manifest]
    tables += list(manifest.get("target", {}).values())
    for table in tables:
        for kind in ("dependencies", "dev-dependencies", "build-dependencies"):
            for name, spec in table.get(kind, {}).items():
                if isinstance(spec, dict) and spec.get("workspace"):
                    used.add(name)
unused = sorted(declared - used)
for name in unused:
    print(f"[workspace.dependencies] {name} is used by no member")
sys.exit(1 if unused else 0)
EOF
}

run "no unused dependency in any crate (cargo machete)" machete
run "every [workspace.dependencies] entry is used by a member" workspace_entries_used
echo "deps: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
