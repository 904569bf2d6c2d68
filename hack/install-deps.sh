#!/usr/bin/env bash
# Installs what the test suite needs and a fresh machine lacks: rustfmt/clippy components, Debian packages,
# a Python virtualenv under target/venv with the chart and schema checkers, and (unless --without-go) the
# Go-built control plane. Idempotent and quiet when everything is present.
# Usage: hack/install-deps.sh [--without-go]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

for comp in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^$comp"; then
    rustup component add "$comp"
  fi
done

# cargo-machete for hack/checks/deps.sh (unused dependencies), built from crates.io into ~/.cargo/bin once per
# version (about a minute on 2 cores).
MACHETE_VERSION=0.9.2
if [[ $(cargo machete --version 2>/dev/null) != *"$MACHETE_VERSION"* ]]; then
  cargo install --quiet --locked cargo-machete --version "$MACHETE_VERSION"
fi

# Debian packages: prometheus (prometheus, promtool) and victoria-metrics serve the history-source tests;
# chromium and chromium-driver open the dashboard in a real browser (the e2e dashboard test).
APT_PACKAGES=(shellcheck prometheus victoria-metrics chromium chromium-driver)
missing=()
for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python tools in a virtualenv under target/ (never the system site-packages).
VENV="$ROOT/target/venv"
REQ="$ROOT/hack/requirements.txt"
stamp="$VENV/.requirements.sha"
want=$(sha256sum "$REQ" | cut -d' ' -f1)
if [[ ! -x $VENV/bin/python || ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -r "$REQ"
  echo "$want" >"$stamp"
fi

# The local control plane of the e2e suite (docs/design/principles.md §5), built from its Go modules into a
# per-machine cache (hack/go/build.sh; minutes the first time, nothing afterwards). hack/test.sh passes
# --without-go and builds it in the background beside the Rust steps instead.
if [[ ${1:-} != --without-go ]]; then
  "$ROOT/hack/go/build.sh" >/dev/null
fi
