#!/usr/bin/env bash
# The dashboard's fleet page at 5,000 VPAs over 50,000 pods (dashboard/benches/pages.rs), release build, on one
# core: p50/p99 render time and size of the fleet page (by name, and a later page by saving), its JSON twin
# and a workload's page. Last line: `fleet_page_p99_ms= fleet_page_bytes= fleet_json_p99_ms=
# workload_page_p99_ms= vpas= pods=` (targets: p99 ≤ 200 ms, ≤ 1 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench -q -p tailor-dashboard --bench pages --no-run
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" >&2
exec taskset -c 0 cargo bench -q -p tailor-dashboard --bench pages
