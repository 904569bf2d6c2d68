#!/usr/bin/env bash
# Webhook memory in cluster mode (docs/decisions/webhook-compact-caches.md): the release tailor-admission
# against the stand-in API server holding DEPLOYMENTS Deployments x REVISIONS ReplicaSet revisions (+ one VPA
# each) of realistic size. Prints the webhook's RSS once synced, settled and after 200 reviews, and its peak
# (one JSON line).
# Usage: hack/bench-webhook-memory.sh [--deployments N] [--revisions R] [--template-bytes B]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p tailor-admission --bin tailor-admission -p tailor-tests --example webhook_memory
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
# As the image and the chart set them.
export MIMALLOC_ARENA_EAGER_COMMIT=0 MIMALLOC_PURGE_DELAY=0
exec target/release/examples/webhook_memory "$@"
