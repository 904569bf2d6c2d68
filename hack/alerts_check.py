#!/usr/bin/env python3
"""Tailor's alerts and Grafana dashboard against the real Prometheus (Debian's prometheus and promtool).

Run by hack/checks/alerts.sh with target/venv/bin/python. Renders the chart with prometheusRule and
grafanaDashboard on (the same Helm library as the chart checks), then:
- `promtool check rules` on the rendered PrometheusRule's groups;
- `promtool test rules`: each alert fires on the series that should fire it (after its `for`), and stays
  quiet on healthy series;
- a real Prometheus server, started on a TSDB made (promtool tsdb create-blocks-from openmetrics) from series
  named as Tailor's components export them, with the rules loaded: every rule evaluates with health "ok",
  every alert's expression has a result on the firing series, and every query of every dashboard panel runs
  without error and returns data.
Prints one line per check ("ok"/"FAIL") and "alerts: N passed, N failed" last.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chart_check import find, render  # noqa: E402 - the shared renderer of the chart checks
from check_tally import Tally  # noqa: E402

TALLY = Tally("alerts")
report = TALLY.report
VALUES = {"prometheusRule": {"enabled": True}, "grafanaDashboard": {"enabled": True},
          "recommender": {"recommendationMetrics": {"enabled": True}}}


# Series that fire every alert at time T (seconds; the last sample), per metric: (labels, value at T).
def firing_series(t: int) -> dict[str, list[tuple[dict, list[tuple[int, float]]]]]:
    ramp = lambda start, step: [(t - 3600 + 60 * i, start + step * i) for i in range(61)]  # noqa: E731
    flat = lambda v: [(t - 3600 + 60 * i, v) for i in range(61)]  # noqa: E731
    return {
        "tailor_recommender_last_loop_timestamp_seconds": [({}, flat(t - 3600))],
        "tailor_recommender_vpa_objects": [({}, flat(12))],
        "tailor_recommender_ooms_total": [({"source": "pod", "result": "recorded"}, ramp(0, 1))],
        "tailor_recommender_job_run_peaks_total": [({"result": "failed"}, ramp(0, 1)), ({"result": "fed"}, ramp(0, 4))],
        "tailor_recommender_status_writes_total": [({"result": "ok"}, ramp(0, 5))],
        "tailor_recommender_step_duration_seconds_bucket": [({"step": "total", "le": le}, ramp(0, n))
                                                            for le, n in (("0.1", 1), ("1", 2), ("+Inf", 2))],
        "tailor_admission_reviews_total": [({"resource": "pod", "result": "unsized_owner_missing"}, ramp(0, 1)),
                                           ({"resource": "pod", "result": "patched"}, ramp(0, 10))],
        "tailor_admission_review_duration_seconds_bucket": [({"resource": "pod", "le": le}, ramp(0, n))
                                                            for le, n in (("0.001", 5), ("0.01", 10), ("+Inf", 10))],
        "tailor_updater_evictions_paused_workloads": [({}, flat(2))],
        "tailor_updater_last_iteration_timestamp_seconds": [({}, flat(t - 10))],
        "tailor_updater_unsized_replacements_total": [({}, ramp(0, 1))],
        "tailor_fleet_vpas": [({"mode": "Off"}, flat(4))],
        "tailor_vpa_recommendation": [({"namespace": "shop", "vpa": "web", "container": "app", "resource": r,
                                        "bound": "target"}, flat(v)) for r, v in (("cpu", 0.25), ("memory", 2.0e8))],
    }


def openmetrics(series: dict) -> str:
    out = []
    for name, items in sorted(series.items()):
        base, typ = (name[: -len("_total")], "counter") if name.endswith("_total") else (name, "gauge")
        out.append(f"# TYPE {base} {typ}")
        for labels, points in items:
            lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
            for ts, v in points:
                out.append(f"{name}{{{lab}}} {v} {ts}")
    out.append("# EOF")
    return "\n".join(out) + "\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - loopback only
        return json.loads(r.read())


PROMTOOL_TESTS = """
rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: tailor_recommender_last_loop_timestamp_seconds
        values: '0x30'
      - series: 'tailor_admission_reviews_total{resource="pod",result="unsized_owner_missing"}'
        values: '0+1x30'
      - series: tailor_updater_evictions_paused_workloads
        values: '1x30'
      - series: tailor_updater_last_iteration_timestamp_seconds
        values: '0+60x30'
      - series: 'tailor_recommender_ooms_total{source="pod",result="recorded"}'
        values: '0+1x30'
      - series: 'tailor_recommender_job_run_peaks_total{result="failed"}'
        values: '0+1x90'
    alert_rule_test:
      - eval_time: 20m
        alertname: TailorRecommenderNotWriting
        exp_alerts: [{exp_labels: {severity: warning}}]
      - eval_time: 20m
        alertname: TailorWebhookAdmittingUnsized
        exp_alerts: [{exp_labels: {severity: warning}}]
      - eval_time: 20m
        alertname: TailorUpdaterBlocked
        exp_alerts: [{exp_labels: {severity: warning}}]
      - eval_time: 20m
        alertname: TailorOOMAfterSizing
        exp_alerts: [{exp_labels: {severity: info}}]
      - eval_time: 20m
        alertname: TailorJobRunPeaksMissing
        exp_alerts: []
      - eval_time: 80m
        alertname: TailorJobRunPeaksMissing
        exp_alerts: [{exp_labels: {severity: warning}}]
  - interval: 1m
    input_series:
      - series: tailor_recommender_last_loop_timestamp_seconds
        values: '0+60x30'
      - series: 'tailor_admission_reviews_total{resource="pod",result="patched"}'
        values: '0+1x30'
      - series: tailor_updater_unsized_replacements_total
        values: '0x30'
      - series: tailor_updater_evictions_paused_workloads
        values: '0x30'
      - series: tailor_updater_last_iteration_timestamp_seconds
        values: '0+60x30'
      - series: 'tailor_recommender_ooms_total{source="pod",result="recorded"}'
        values: '0x30'
      - series: 'tailor_recommender_job_run_peaks_total{result="failed"}'
        values: '5x90'
      - series: 'tailor_recommender_job_run_peaks_total{result="fed"}'
        values: '0+3x90'
    alert_rule_test:
      - {eval_time: 20m, alertname: TailorRecommenderNotWriting, exp_alerts: []}
      - {eval_time: 20m, alertname: TailorWebhookAdmittingUnsized, exp_alerts: []}
      - {eval_time: 20m, alertname: TailorUpdaterBlocked, exp_alerts: []}
      - {eval_time: 20m, alertname: TailorOOMAfterSizing, exp_alerts: []}
      - {eval_time: 80m, alertname: TailorJobRunPeaksMissing, exp_alerts: []}
"""


def promtool_checks(promtool: str, work: Path, groups: dict) -> None:
    (work / "rules.yaml").write_text(yaml.safe_dump(groups))
    out = subprocess.run([promtool, "check", "rules", str(work / "rules.yaml")], capture_output=True, text=True)
    report(out.returncode == 0, "promtool check rules: the PrometheusRule's groups", out.stdout + out.stderr)
    # promtool compares the annotations too: expect each alert's own.
    tests = yaml.safe_load(PROMTOOL_TESTS)
    notes = {r["alert"]: r.get("annotations", {}) for r in groups["groups"][0]["rules"]}
    for case in tests["tests"]:
        for t in case["alert_rule_test"]:
            for a in t["exp_alerts"]:
                a["exp_annotations"] = notes[t["alertname"]]
    (work / "tests.yaml").write_text(yaml.safe_dump(tests))
    out = subprocess.run([promtool, "test", "rules", "tests.yaml"], cwd=work, capture_output=True, text=True)
    report(out.returncode == 0, "promtool test rules: every alert fires on its series and not on healthy ones",
           out.stdout + out.stderr)


def start_prometheus(prometheus: str, promtool: str, work: Path, t: int) -> tuple[subprocess.Popen, str]:
    (work / "history.om").write_text(openmetrics(firing_series(t)))
    data = work / "data"
    out = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(work / "history.om"), str(data)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"promtool tsdb create-blocks-from openmetrics: {out.stdout}{out.stderr}")
    (work / "prometheus.yml").write_text("global:\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\n")
    port = free_port()
    proc = subprocess.Popen([prometheus, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
                             "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=open(work / "prometheus.log", "w"))
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(f"{url}/-/ready", timeout=1)  # noqa: S310 - loopback only
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("prometheus did not become ready: " + (work / "prometheus.log").read_text()[-2000:])


def query(url: str, expr: str, t: int) -> dict:
    q = urllib.parse.urlencode({"query": expr, "time": str(t)})
    return get(f"{url}/api/v1/query?{q}")


def server_checks(url: str, groups: dict, dashboard: dict, t: int) -> None:
    for rule in groups["groups"][0]["rules"]:
        answer = query(url, rule["expr"], t)
        ok = answer.get("status") == "success" and answer["data"]["result"]
        report(bool(ok), f"real Prometheus: {rule['alert']}'s expression holds on its firing series", json.dumps(answer))
    health = {}
    for _ in range(50):
        rules = get(f"{url}/api/v1/rules")["data"]["groups"]
        health = {r["name"]: (r.get("health"), r.get("lastError", "")) for g in rules for r in g["rules"]}
        if health and all(h == "ok" for h, _ in health.values()):
            break
        time.sleep(0.2)
    report(len(health) == len(groups["groups"][0]["rules"]) and all(h == "ok" for h, _ in health.values()),
           "real Prometheus: every rule loads and evaluates with health ok", json.dumps(health))
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", "5m")
            answer = query(url, expr, t)
            ok = answer.get("status") == "success" and answer["data"]["result"]
            report(bool(ok), f"real Prometheus: panel {panel['title']!r} query {target['refId']} returns data",
                   f"{expr}\n{json.dumps(answer)}")


def main() -> int:
    docs = render(VALUES)
    rules = find(docs, "PrometheusRule")
    report(len(rules) == 1, "the chart renders one PrometheusRule", f"{len(rules)}")
    maps = [d for d in find(docs, "ConfigMap") if d["metadata"]["name"].endswith("-grafana-dashboard")]
    report(len(maps) == 1 and maps[0]["metadata"]["labels"].get("grafana_dashboard") == "1",
           "the chart renders the dashboard ConfigMap with the sidecar's label", json.dumps([m["metadata"] for m in maps]))
    if not rules or not maps:
        return max(TALLY.summary(), 1)
    groups = {"groups": rules[0]["spec"]["groups"]}
    dashboard = json.loads(maps[0]["data"]["tailor.json"])
    promtool, prometheus = shutil.which("promtool"), shutil.which("prometheus")
    if not promtool or not prometheus:
        report(False, "promtool and prometheus on PATH", "install Debian's prometheus package (hack/install-deps.sh)")
        return max(TALLY.summary(), 1)
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        promtool_checks(promtool, work, groups)
        t = int(time.time()) // 60 * 60 - 120
        proc, url = start_prometheus(prometheus, promtool, work, t)
        try:
            server_checks(url, groups, dashboard, t)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return TALLY.summary()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
