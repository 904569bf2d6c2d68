#!/usr/bin/env bash
# Scale benchmark of the recommender controller: 5,000 VPAs / 50,000 pods against the mocked API server
# (recommender/benches/scale.rs). Prints per-loop time, writes and RSS.
# Sizes: TAILOR_BENCH_VPAS, TAILOR_BENCH_PODS_PER_VPA, TAILOR_BENCH_NAMESPACES, TAILOR_BENCH_LOOPS.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench -p tailor-recommender --bench scale
