#!/usr/bin/env bash
# `tailor report` as a person sees it (run by hack/test.sh among the checks): renders examples/traces/demo.json into target/report/demo.html, writes
# what the page must show from the report's own JSON twin (`tailor report -o json`: every workload with its
# first container's target, the first workload as the one opened, the OOM-killed one if the trace has one),
# and opens the file in headless Chromium with hack/dashboard_browser.py --report: every workload listed with
# its targets, the OOM counted and flagged, the first workload's section with its usage chart, no console
# error, and no request leaving the file. Screenshots land in target/report.
# Needs Chromium, chromedriver and Selenium in target/venv (hack/install-deps.sh). No cluster.
# Last line: the browser script's "browser: N passed, N failed"; exits non-zero on a failed check.
set -euo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=target/report
mkdir -p "$out"
cargo build -q -p tailor-cli --bin tailor
tailor="${CARGO_TARGET_DIR:-target}/debug/tailor"
"$tailor" report --input examples/traces/demo.json --html "$out/demo.html" -o json >"$out/demo.json"
python3 - "$out/demo.json" "$out/expect.json" <<'EOF'
import json
import sys

fleet = json.load(open(sys.argv[1]))
workloads = fleet["workloads"]
if not workloads:
    sys.exit("the report holds no workload")


def key(w):
    return {"namespace": w["namespace"], "vpa": w["vpa"]}


def expected(w):
    target = w["containers"][0]["target"]
    # The fleet page's target column is the pod's: every container's target.
    pod = {r: sum(c["target"].get(r, 0) for c in w["containers"]) for r in ("cpuMillicores", "memoryBytes")}
    return {**key(w), "cpuMillicores": target["cpuMillicores"], "memoryBytes": target["memoryBytes"],
            "podCpuMillicores": pod["cpuMillicores"], "podMemoryBytes": pod["memoryBytes"]}


expect = {"workloads": [expected(w) for w in workloads], "open": key(workloads[0])}
oom = next((w for w in workloads if w["oomsLastDay"] > 0), None)
if oom:
    expect["oom"] = key(oom)
json.dump(expect, open(sys.argv[2], "w"), indent=2)
EOF
exec target/venv/bin/python hack/dashboard_browser.py --report --url "file://$PWD/$out/demo.html" \
  --expect "$out/expect.json" --screenshots "$out"
