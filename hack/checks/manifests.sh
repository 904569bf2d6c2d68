#!/usr/bin/env bash
# Validates the generated CRDs and the example manifests with kubernetes-validate for the oldest and newest
# Kubernetes versions Tailor supports (no API server can run here, so kubectl's dry-run is not available).
# Tailor objects in the examples are checked against the CRD schema by `cargo test -p tailor-core --test it examples`.
set -uo pipefail
# shellcheck source=../check-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../check-lib.sh"
cd "$(dirname "$0")/../.." || exit 1
KV=target/venv/bin/kubernetes-validate
mapfile -t examples < <(find examples -name '*.yaml' -not -path 'examples/broken/*' | sort)
for version in 1.33.0 1.37.0; do
  run "CRDs valid for Kubernetes $version" "$KV" --strict --quiet -k "$version" crds/yaml/*.yaml
  run "example workloads valid for Kubernetes $version" "$KV" --strict --quiet -k "$version" "${examples[@]}"
done
run "committed CRDs match the Rust types" cargo run -q -p tailor-crds --bin crdgen -- --check
echo "manifests: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
