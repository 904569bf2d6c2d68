#!/usr/bin/env bash
# Recommender at scale (docs/decisions/recommender-memory.md): the release tailor-recommender binary as its own
# process against the stand-in API server (tests/examples/recommender_scale.rs) holding VPAS Deployments with a
# VPA each and PODS_PER_VPA running pods each, with PodMetrics whose usage changes every loop. Prints a CSV row
# per loop (phase times and RSS, also written under target/bench-recommender/) and ends with one line
# `peak_rss_bytes_per_pod=N loop_seconds_per_50k_pods=M`, both of the recommender process alone.
# Usage: hack/bench-recommender.sh [--vpas N] [--pods-per-vpa P] [--namespaces K] [--loops L]
#                                  [--interval-seconds S] [--qps Q] [--history-days D] [--label NAME] [--csv PATH]
#                                  [--recommender-arg ARG]... (passed on to tailor-recommender)
# Sizes also from the environment: TAILOR_BENCH_VPAS (5000), TAILOR_BENCH_PODS_PER_VPA (10),
# TAILOR_BENCH_LOOPS (4). 10k pods: --vpas 1000; 200k pods: --vpas 20000.
# --history-days D (default 7): each VPA starts with a checkpoint of D days of its usage (the steady state
# after a restart); --history-days 0: every VPA new, nearly every checkpoint rewritten in every loop.
# TAILOR_BIN_DIR=DIR runs DIR/tailor-recommender instead of the one built here (target/dist; a "before" binary).
set -euo pipefail
cd "$(dirname "$0")/.."
# The recommender as the image ships it (profile `dist-recommender`: release with fat LTO, optimised for
# size; the first build takes about ten minutes on two cores); the harness and stand-in in release.
if [ -z "${TAILOR_BIN_DIR:-}" ]; then
  cargo build --profile dist-recommender -q -p tailor-recommender --bin tailor-recommender
  export TAILOR_BIN_DIR="${CARGO_TARGET_DIR:-target}/dist-recommender"
fi
cargo build --release -q -p tailor-tests --example recommender_scale
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" >&2
# As the image and the chart set them.
export MIMALLOC_ARENA_EAGER_COMMIT=0 MIMALLOC_PURGE_DELAY=0
exec "${CARGO_TARGET_DIR:-target}/release/examples/recommender_scale" \
  --vpas "${TAILOR_BENCH_VPAS:-5000}" --pods-per-vpa "${TAILOR_BENCH_PODS_PER_VPA:-10}" \
  --loops "${TAILOR_BENCH_LOOPS:-4}" "$@"
