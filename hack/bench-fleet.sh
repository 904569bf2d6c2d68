#!/usr/bin/env bash
# Fleet onboarding at scale: the release tailor-recommender binary as its own process against the stand-in
# API server (tests/examples/fleet_scale.rs) holding a namespace labelled tailor.dev/vpa=Off with N
# Deployments, plus one ordinary workload with a hand-written VPA whose pods' usage changes every second.
# The recommender runs with --fleet-enabled --fleet-qps Q --fleet-burst B --fleet-resync-interval 5s and a
# 1 s loop. Prints a CSV row per second (second,fleet_vpas,fleet_writes_in_second,web_status_writes_in_second)
# and ends with one line `fleet_deployments=N fleet_qps=Q fleet_seconds=S fleet_writes_per_second=R
# rate_ratio=R/Q web_status_writes=W loops_expected=L web_status_write_ratio=W/L max_gap_between_web_writes_s=G`:
# whether the fleet keeps to its bucket and whether the loop keeps writing the other VPA's status meanwhile.
# Exits non-zero unless exactly N fleet VPAs exist at the end and no fleet write failed.
# Usage: hack/bench-fleet.sh [--deployments N] [--qps Q] [--burst B] [--recommender-arg ARG]...
#   defaults: 10,000 Deployments, --qps 200, --burst 20 (about a minute of onboarding); --deployments 1000
#   for a quick run. Arguments are passed on to the example; --recommender-arg ARG to tailor-recommender.
# TAILOR_BIN_DIR=DIR runs DIR/tailor-recommender instead of the release build made here (for instance the
# image's size-optimised target/dist-recommender, or a "before" binary).
set -euo pipefail
cd "$(dirname "$0")/.."
# The recommender in release (not the slow dist-recommender profile: the figure is the fleet's pacing, not
# the binary's size); the harness and the stand-in in release too.
if [ -z "${TAILOR_BIN_DIR:-}" ]; then
  cargo build --release -q -p tailor-recommender --bin tailor-recommender
fi
cargo build --release -q -p tailor-tests --example fleet_scale
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" >&2
exec "${CARGO_TARGET_DIR:-target}/release/examples/fleet_scale" "$@"
