#!/usr/bin/env bash
# Scale benchmark of one updater iteration: 5,000 VPAs over 50,000 pods of realistic size, the binary's
# decisions (run_once over cached objects) with a dry-run actuator, on one core (updater/benches/iteration.rs).
# Prints decision time per iteration and memory per pod (split into pods / VPAs / workloads + index, the
# caches being the binary's kube-rs stores).
# Sizes: TAILOR_BENCH_VPAS (5000), TAILOR_BENCH_PODS_PER_VPA (10), TAILOR_BENCH_ITERATIONS (5).
set -euo pipefail
# The updater binary's allocator settings (the image and the chart set them).
export MIMALLOC_ARENA_EAGER_COMMIT=0
cd "$(dirname "$0")/.."
cargo bench -p tailor-updater --bench iteration --no-run
exec taskset -c 0 cargo bench -p tailor-updater --bench iteration
