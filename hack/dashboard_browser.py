#!/usr/bin/env python3
"""Opens Tailor's dashboard (or an offline report) in headless Chromium and checks it as a person would see it.

Run by the e2e suite (tests/tests/e2e/dashboard.rs) with target/venv/bin/python; Debian's chromium and
chromium-driver (hack/install-deps.sh installs them). By hand:

    target/venv/bin/python hack/dashboard_browser.py --url http://127.0.0.1:PORT --expect expect.json \
        --screenshots target/dashboard

--expect names a JSON file written by the test from `kubectl get tvpa -o json`:
    {"filter": "<text the fleet page is filtered by>",
     "workloads": [{"namespace": .., "vpa": .., "cpuMillicores": <target>, "memoryBytes": <target>}, ...],
                   # of the first container; with several containers, "podCpuMillicores" and
                   # "podMemoryBytes" give the pod's target (every container's), which the fleet row shows
     "oom": {"namespace": .., "vpa": ..},          # a workload with an OOM kill in the last day (optional)
     "open": {"namespace": .., "vpa": ..}}         # the workload whose page is opened

Checks, each printed as "ok"/"FAIL": every expected workload is a row of the fleet page, its target column is
its pods times the status's target; the OOM shows on the fleet page (the attention counter and the row's flag)
and on its workload page; the workload page has the CPU usage chart with the request and target lines and the
status's target in its table; the browser logged no console error; the pages loaded nothing from anywhere but
the page's own origin. Screenshots of both pages are written to --screenshots. With --report, the URL is a
file:// report and no request at all may leave the file. Last line: "browser: N passed, N failed".
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote, urlparse

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_tally import Tally  # noqa: E402

TALLY = Tally("browser")
check = TALLY.report


def browser(profile: str) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,1000", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def requested_urls(driver: webdriver.Chrome) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def console_errors(driver: webdriver.Chrome) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def fleet_rows(driver: webdriver.Chrome) -> dict[tuple[str, str], dict]:
    rows = {}
    for tr in driver.find_elements(By.CSS_SELECTOR, "tr.workload"):
        key = (tr.get_attribute("data-namespace"), tr.get_attribute("data-vpa"))
        cell = lambda cls, attr: int(tr.find_element(By.CSS_SELECTOR, f"td.{cls}").get_attribute(attr))  # noqa: E731
        flags = [s.get_attribute("data-flag") for s in tr.find_elements(By.CSS_SELECTOR, "span.flag")]
        rows[key] = {"pods": cell("pods", "data-pods"), "cpu": cell("cpu-target", "data-millicores"),
                     "memory": cell("memory-target", "data-bytes"), "flags": flags}
    return rows


def check_fleet(driver: webdriver.Chrome, expect: dict, fleet_url: str, shots: Path) -> None:
    driver.get(fleet_url)
    driver.save_screenshot(str(shots / "fleet.png"))
    rows = fleet_rows(driver)
    for w in expect["workloads"]:
        key = (w["namespace"], w["vpa"])
        row = rows.get(key)
        check(row is not None, f"fleet page lists {key[0]}/{key[1]}", f"rows: {sorted(rows)}")
        if row is None:
            continue
        pod = (w.get("podCpuMillicores", w["cpuMillicores"]), w.get("podMemoryBytes", w["memoryBytes"]))
        want = (row["pods"] * pod[0], row["pods"] * pod[1])
        check((row["cpu"], row["memory"]) == want, f"{key[1]}: target column = pods x status target",
              f"page {row}, status target {w}")
    oom = expect.get("oom")
    if oom:
        count = driver.find_element(By.CSS_SELECTOR, "#attention [data-flag=Oom]").get_attribute("data-count")
        check(int(count) >= 1, "fleet page counts the OOM", f"count {count}")
        row = rows.get((oom["namespace"], oom["vpa"]), {})
        check("Oom" in row.get("flags", []), "the OOM-killed workload's row is flagged", f"row {row}")


def check_workload(driver: webdriver.Chrome, expect: dict, url: str, shots: Path) -> None:
    driver.get(url)
    driver.save_screenshot(str(shots / "workload.png"))
    opened = expect["open"]
    want = next(w for w in expect["workloads"] if (w["namespace"], w["vpa"]) == (opened["namespace"], opened["vpa"]))
    target = driver.find_element(By.CSS_SELECTOR, "tr[data-row=target] td.cpu")
    check(int(target.get_attribute("data-millicores")) == want["cpuMillicores"],
          "workload page shows the status's CPU target", target.get_attribute("data-millicores"))
    limits = driver.find_elements(By.CSS_SELECTOR, "tr[data-row=limits] td.cpu")
    check(bool(limits), "workload page has the pods' limits row")
    actions = driver.find_elements(By.CSS_SELECTOR, "#actions, #no-actions")
    check(bool(actions), "workload page has the updater's last actions (or says there are none)")
    charts = driver.find_elements(By.CSS_SELECTOR, "svg.usage[data-resource=cpu]")
    check(bool(charts), "workload page has the CPU usage chart")
    if charts:
        lines = {c: charts[0].find_elements(By.CSS_SELECTOR, f"line.{c}") for c in ("request", "target")}
        check(all(lines.values()), "the chart draws the request and the target", str({k: len(v) for k, v in lines.items()}))
        bars = charts[0].find_elements(By.CSS_SELECTOR, "rect.bar")
        check(bool(bars), "the chart has the model's histogram bars")
        if lines["target"]:
            drawn = float(lines["target"][0].get_attribute("data-value"))
            check(abs(drawn * 1000 - want["cpuMillicores"]) < 1, "the target line sits at the target", str(drawn))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True, help="the dashboard's base URL, or a report's file:// URL")
    ap.add_argument("--expect", required=True, type=Path)
    ap.add_argument("--screenshots", required=True, type=Path)
    ap.add_argument("--report", action="store_true", help="the URL is one offline report file")
    args = ap.parse_args()
    expect = json.loads(args.expect.read_text())
    args.screenshots.mkdir(parents=True, exist_ok=True)
    base = args.url.rstrip("/")
    origin = urlparse(base)
    with tempfile.TemporaryDirectory() as profile:
        driver = browser(profile)
        try:
            if args.report:
                check_fleet(driver, expect, base, args.screenshots)
                o = expect["open"]
                check_workload(driver, expect, f"{base}#w-{quote(o['namespace'])}-{quote(o['vpa'])}", args.screenshots)
            else:
                check_fleet(driver, expect, f"{base}/?q={quote(expect['filter'])}", args.screenshots)
                o = expect["open"]
                check_workload(driver, expect, f"{base}/workloads/{quote(o['namespace'])}/{quote(o['vpa'])}",
                               args.screenshots)
                oom = expect.get("oom")
                if oom:
                    driver.get(f"{base}/workloads/{quote(oom['namespace'])}/{quote(oom['vpa'])}")
                    ooms = int(driver.find_element(By.ID, "ooms").get_attribute("data-ooms"))
                    check(ooms >= 1, "the OOM shows on its workload page", str(ooms))
            errors = console_errors(driver)
            check(not errors, "no console errors", "\n".join(errors))
            # Network requests only: the browser's own pages (chrome://) are not the page's.
            fetched = [u for u in requested_urls(driver) if urlparse(u).scheme in ("http", "https", "ws", "wss", "file")]
            foreign = [u for u in fetched
                       if not ((args.report and u.startswith("file:"))
                               or (not args.report and urlparse(u).netloc == origin.netloc))]
            check(not foreign, "nothing requested outside the page's own origin", "\n".join(foreign))
        finally:
            driver.quit()
    return TALLY.summary()


if __name__ == "__main__":
    sys.exit(main())
