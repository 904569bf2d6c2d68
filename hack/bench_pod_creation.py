#!/usr/bin/env python3
"""One burst of pod creation on the local control plane, and the report over many (hack/bench-pod-creation.sh).

  bench_pod_creation.py burst --state DIR --mode M --round R --namespace NS --manifest FILE --pods N
                              [--webhook NAME] --template-cpu Q --template-memory Q --expect-cpu Q
                              --expect-memory Q --record FILE [--warmup]
      Opens a watch on the namespace's pods, runs `kubectl apply -f FILE` and reads the watch until N pods
      exist and all run (kwok's Running). The times, in seconds from the apply's start:
        created  the last of the namespace's pod creations to complete, from the API server's audit log (its
                 stageTimestamp): the pod passed admission and was stored;
        first    the first one's, likewise;
        running  the watch's event that showed the last pod Running (as a client on the same cores saw it).
      Also, between /metrics scrapes around the burst: apiserver_admission_webhook_admission_duration_seconds
      for NAME (type admit, CREATE), and the webhook's own review-time histogram (Tailor's
      tailor_admission_review_duration_seconds, upstream's vpa_admission_controller_admission_latency_seconds);
      from the audit log, every pod creation's latency as the API server saw it (received to response; exact
      quantiles) and which webhooks it called (the mutation annotations); the CPU time of the control-plane
      processes and of both webhooks (/proc); the most TCP connections open to each webhook's port at once
      (/proc/net/tcp: one with HTTP/2, many with HTTP/1.1); and afterwards how many pods carry the
      recommended requests.
      Then deletes the Deployments and waits until no pod and no ReplicaSet is left. Appends one JSON line to
      FILE and prints its row.
  bench_pod_creation.py header
      The header of the rows `burst` prints.
  bench_pod_creation.py report --record FILE
      Every burst's row, the medians per mode, and the summary line
      creation_overhead_tailor_pct=X creation_overhead_upstream_pct=Y webhook_p99_ms_tailor=Z webhook_p99_ms_upstream=W
      and, when the record has floor bursts, creation_overhead_floor_pct=F webhook_p99_ms_floor=P
      tailor_over_floor_pct=T (Tailor's median over the floor's)
      (overheads: the mode's median time to all pods created over the no-webhook median of the same run; p99:
      from the API server's webhook histogram summed over the mode's measured bursts, interpolated within its
      buckets, 5, 25, 100, 500 ms, …).

Standard library only. The API server is reached with the cluster's admin certificate (hack/cluster.sh's state).
"""

import argparse
import datetime
import http.client
import json
import math
import os
import re
import ssl
import statistics
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

WEBHOOK_HIST = "apiserver_admission_webhook_admission_duration_seconds"
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


# --- the API server --------------------------------------------------------------------------------------------
class Api:
    def __init__(self, state: Path):
        self.env = dict(
            line.split("=", 1) for line in (state / "env").read_text().splitlines() if "=" in line
        )
        self.port = int(self.env["APISERVER_PORT"])
        pki = state / "pki"
        self.ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))

    def conn(self, timeout=30.0):
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=timeout)

    def get(self, path, accept="application/json"):
        c = self.conn()
        try:
            c.request("GET", path, headers={"Accept": accept})
            r = c.getresponse()
            body = r.read()
            if r.status != 200:
                raise RuntimeError(f"GET {path}: {r.status} {body[:200]!r}")
            return body
        finally:
            c.close()

    def json(self, path):
        return json.loads(self.get(path))

    def metrics(self):
        return self.get("/metrics", accept="text/plain").decode()


# --- Prometheus text and histograms ---------------------------------------------------------------------------
def histogram(text, name, want):
    """{le: cumulative count}, sum, count of histogram NAME summed over the series whose labels include WANT."""
    buckets, total, count = {}, 0.0, 0
    for line in text.splitlines():
        if not line.startswith(name + "_"):
            continue
        head, _, value = line.rpartition(" ")
        metric, _, labels = head.partition("{")
        got = dict(LABEL.findall(labels))
        if any(got.get(k) != v for k, v in want.items()):
            continue
        if metric == name + "_bucket":
            le = math.inf if got["le"] == "+Inf" else float(got["le"])
            buckets[le] = buckets.get(le, 0) + int(float(value))
        elif metric == name + "_sum":
            total += float(value)
        elif metric == name + "_count":
            count += int(float(value))
    return {"buckets": buckets, "sum": total, "count": count}


def delta(before, after):
    return {
        "buckets": {le: n - before["buckets"].get(le, 0) for le, n in after["buckets"].items()},
        "sum": after["sum"] - before["sum"],
        "count": after["count"] - before["count"],
    }


def add(a, b):
    les = set(a["buckets"]) | set(b["buckets"])
    return {
        "buckets": {le: a["buckets"].get(le, 0) + b["buckets"].get(le, 0) for le in les},
        "sum": a["sum"] + b["sum"],
        "count": a["count"] + b["count"],
    }


def quantile(h, q):
    """As Prometheus's histogram_quantile: linear within the bucket the rank falls in (from 0 in the first);
    the highest finite bound when it falls in +Inf. None without observations."""
    items = sorted(h["buckets"].items())
    if not items or items[-1][1] <= 0:
        return None
    rank = q * items[-1][1]
    lower, below = 0.0, 0
    for le, cum in items:
        if cum >= rank:
            if math.isinf(le):
                return lower
            if cum == below:
                return le
            return lower + (le - lower) * (rank - below) / (cum - below)
        lower, below = le, cum
    return lower


def mean(h):
    return h["sum"] / h["count"] if h["count"] else None


def share_under(h, le):
    """The share of observations at or below the bucket bound LE."""
    total = h["buckets"].get(math.inf, 0)
    return h["buckets"].get(le, 0) / total if total else None


def hist_to_json(h):
    return {"buckets": {("+Inf" if math.isinf(k) else repr(k)): v for k, v in h["buckets"].items()},
            "sum": h["sum"], "count": h["count"]}


def hist_from_json(j):
    return {"buckets": {(math.inf if k == "+Inf" else float(k)): v for k, v in j["buckets"].items()},
            "sum": j["sum"], "count": j["count"]}


# --- quantities ---------------------------------------------------------------------------------------------------
SUFFIX = {"": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity(q):
    m = re.fullmatch(r"([0-9.]+(?:[eE][-+]?[0-9]+)?)([a-zA-Z]*)", str(q))
    if not m or m.group(2) not in SUFFIX:
        raise ValueError(f"quantity {q!r}")
    return Decimal(m.group(1)) * SUFFIX[m.group(2)]


# --- one burst ------------------------------------------------------------------------------------------------------
NAME = re.compile(rb'"metadata":\{"name":"([^"]+)"')
RV = re.compile(rb'"resourceVersion":"([0-9]+)"')


class Watch:
    """A watch of a namespace's pods from a resourceVersion, reopened from the last one seen if the stream ends
    (as an informer does; the API server ends a watch whose client falls behind). HTTP/1.0, so the stream is
    the body as written, one event a line. Events are read as bytes, without decoding the pods: the client runs
    on the cores it measures."""

    def __init__(self, api, ns, rv, timeout):
        self.api, self.ns, self.rv, self.timeout = api, ns, rv, timeout
        self.reopened = 0
        self.conn = self.resp = None
        self.open()

    def open(self):
        self.close()
        self.conn = self.api.conn(timeout=60)
        self.conn._http_vsn, self.conn._http_vsn_str = 10, "HTTP/1.0"
        self.conn.request("GET", f"/api/v1/namespaces/{self.ns}/pods?watch=1&allowWatchBookmarks=true"
                                 f"&resourceVersion={self.rv}&timeoutSeconds={int(self.timeout) + 60}")
        self.resp = self.conn.getresponse()
        if self.resp.status != 200:
            raise RuntimeError(f"watch: {self.resp.status} {self.resp.read()[:200]!r}")

    def next(self):
        """The next event's line."""
        while True:
            try:
                line = self.resp.readline()
            except (OSError, http.client.HTTPException) as e:
                print(f"watch: {e!r}; reopening from resourceVersion {self.rv}", file=sys.stderr)
                line = b""
            if not line:
                if self.reopened >= 50:
                    raise RuntimeError("the watch ended 50 times")
                self.reopened += 1
                self.open()
                continue
            if line.startswith(b'{"type":"ERROR"'):
                raise RuntimeError(f"watch error: {line[:300]!r}")
            m = RV.search(line)
            if m:
                self.rv = m.group(1).decode()
            return line

    def close(self):
        if self.conn is not None:
            self.conn.close()


def established(ports):
    """{port: established TCP connections whose local end is that port} (the webhooks' server ends)."""
    counts = dict.fromkeys(ports, 0)
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            port = int(f[1].rsplit(":", 1)[1], 16)
            if f[3] == "01" and port in counts:
                counts[port] += 1
    return counts


def watch_burst(api, ns, pods, manifest, timeout, ports):
    """Runs kubectl apply with the watch open until every pod exists and runs. Returns the wall-clock time the
    apply started, its duration, the time the last pod was seen Running (s after the start) and the most
    connections each webhook port had open at once (sampled every 0.2 s)."""
    rv = api.json(f"/api/v1/namespaces/{ns}/pods?limit=500")
    if rv["items"]:
        raise RuntimeError(f"{len(rv['items'])} pods already in {ns}")
    watch = Watch(api, ns, rv["metadata"]["resourceVersion"], timeout)
    wall0, t0 = time.time(), time.monotonic()
    apply = subprocess.Popen(["kubectl", "apply", "-f", manifest], stdout=subprocess.DEVNULL)
    created, running = set(), set()
    apply_s = running_s = None
    peak = dict.fromkeys(ports.values(), 0)
    sampled = 0.0
    try:
        while len(created) < pods or len(running) < pods:
            if time.monotonic() - sampled > 0.2:
                sampled = time.monotonic()
                for port, n in established(peak).items():
                    peak[port] = max(peak[port], n)
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"after {timeout} s: {len(created)} of {pods} pods created, {len(running)} running")
            line = watch.next()
            if apply_s is None and apply.poll() is not None:
                apply_s = time.monotonic() - t0
            if not line.startswith((b'{"type":"ADDED"', b'{"type":"MODIFIED"')):
                continue
            m = NAME.search(line)
            if not m:
                continue
            created.add(m.group(1))
            if b'"phase":"Running"' in line and m.group(1) not in running:
                running.add(m.group(1))
                running_s = time.monotonic() - t0
    finally:
        watch.close()
    if apply.wait(timeout=120) != 0:
        raise RuntimeError("kubectl apply failed")
    if apply_s is None:
        apply_s = time.monotonic() - t0
    return wall0, {"apply_s": apply_s, "running_s": running_s, "watch_reopened": watch.reopened,
                   "peak_connections": {name: peak[port] for name, port in ports.items()}}


def webhook_hist(api, webhook):
    """The API server's latency histogram of calls to WEBHOOK on pod creation (None without a webhook)."""
    if not webhook:
        return None
    return histogram(api.metrics(), WEBHOOK_HIST, {"name": webhook, "type": "admit", "operation": "CREATE"})


def clean(api, ns, timeout):
    """Deletes the namespace's Deployments; the seconds until no pod and no ReplicaSet is left."""
    t0 = time.monotonic()
    subprocess.run(["kubectl", "delete", "deployments", "--all", "-n", ns, "--wait=false"],
                   check=True, stdout=subprocess.DEVNULL)
    while True:
        left = (len(api.json(f"/api/v1/namespaces/{ns}/pods?limit=1")["items"])
                + len(api.json(f"/apis/apps/v1/namespaces/{ns}/replicasets?limit=1")["items"]))
        if not left:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"pods or ReplicaSets still in {ns} after {timeout} s")
        time.sleep(1)


def timestamp(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def audited_creates(audit, offset, ns, wall0):
    """The namespace's pod creations in the audit log from OFFSET on: the first and last one's completion (s
    after WALL0), every creation's latency as the API server saw it (received to response), and which
    webhooks were called on them ({webhook: [called, mutated]}, from the mutation annotations)."""
    done, latencies, webhooks = [], [], {}
    with open(audit, "rb") as f:
        f.seek(offset)
        for line in f:
            if b'"verb":"create"' not in line or b'"resource":"pods"' not in line:
                continue
            e = json.loads(line)
            ref = e.get("objectRef", {})
            if e.get("stage") != "ResponseComplete" or ref.get("subresource") or ref.get("namespace") != ns:
                continue
            if e.get("responseStatus", {}).get("code") != 201:
                continue
            end = timestamp(e["stageTimestamp"])
            done.append(end - wall0)
            latencies.append(end - timestamp(e["requestReceivedTimestamp"]))
            for k, v in e.get("annotations", {}).items():
                if k.startswith("mutation.webhook.admission.k8s.io/"):
                    w = json.loads(v)
                    n = webhooks.setdefault(w["webhook"], [0, 0])
                    n[0] += 1
                    n[1] += bool(w.get("mutated"))
    if not done:
        raise RuntimeError(f"no pod creation in {ns} in the audit log")
    return min(done), max(done), len(done), sorted(latencies), webhooks


def exact(sorted_values, q):
    """The q-quantile of the values (nearest rank)."""
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def sizing(api, ns, expect):
    """(sized, unsized, other): the namespace's pods whose first container has the recommended requests, the
    template's, or others."""
    counts = [0, 0, 0]
    for pod in api.json(f"/api/v1/namespaces/{ns}/pods")["items"]:
        req = pod["spec"]["containers"][0].get("resources", {}).get("requests", {})
        got = (quantity(req.get("cpu", "0")), quantity(req.get("memory", "0")))
        counts[0 if got == expect["sized"] else 1 if got == expect["template"] else 2] += 1
    return counts


# Processes whose CPU time a burst reports: hack/cluster.sh's pid files, and the program under a supervisor.
PROCESSES = {"kube-apiserver": ("kube-apiserver", None), "etcd": ("etcd", None),
             "controller-manager": ("kube-controller-manager", None), "scheduler": ("kube-scheduler", None),
             "kwok": ("kwok", None), "tailor-webhook": ("admission-0", "tailor-admission"),
             "upstream-webhook": ("upstream-admission-controller", "admission-controller"),
             "floor-webhook": ("bench-floor", None)}
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def process_pid(state, pidfile, program):
    pid = int((state / "pids" / pidfile).read_text())
    if program is None:
        return pid
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            if os.path.basename(os.readlink(f"/proc/{child}/exe")) == program:
                return int(child)
    raise RuntimeError(f"no {program} under the supervisor {pid}")


def cpu_snapshot(state):
    out = {}
    for name, (pidfile, program) in PROCESSES.items():
        try:
            out[name] = cpu_seconds(process_pid(state, pidfile, program))
        except (OSError, ValueError, RuntimeError):
            out[name] = None
    out["bench-client"] = time.process_time()
    return out


# The webhooks' own review-time histograms, scraped from their metrics ports: Tailor's (25 µs to 1 s buckets)
# and upstream's (10 ms to 300 s).
SERVER_HIST = {"tailor": ("ADMISSION_METRICS_PORT", "tailor_admission_review_duration_seconds", {"resource": "pod"}),
               "upstream": ("UPSTREAM_ADMISSION_METRICS_PORT", "vpa_admission_controller_admission_latency_seconds",
                            {"resource": "Pod"})}


def server_metrics(api, mode):
    """The mode's webhook's review-time histogram and its counters ({sample: value}), or (None, None)."""
    if mode not in SERVER_HIST:
        return None, None
    port, name, want = SERVER_HIST[mode]
    c = http.client.HTTPConnection("127.0.0.1", int(api.env[port]), timeout=10)
    try:
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
    finally:
        c.close()
    counters = {line.split()[2] for line in text.splitlines()
                if line.startswith("# TYPE ") and line.split()[3:4] == ["counter"]}
    values = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        sample, _, value = line.rpartition(" ")
        metric = sample.split("{")[0]
        if metric.startswith(("go_", "process_", "promhttp_")):  # the Go runtime's and the host's
            continue
        if metric in counters or metric.removesuffix("_total") in counters:
            values[sample] = float(value)
    return histogram(text, name, want), values


def counter_deltas(before, after):
    """The counters that moved."""
    if before is None:
        return None
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


def burst(a):
    state = Path(a.state)
    api = Api(state)
    expect = {"sized": (quantity(a.expect_cpu), quantity(a.expect_memory)),
              "template": (quantity(a.template_cpu), quantity(a.template_memory))}
    audit = state / "audit.log"
    load0 = os.getloadavg()[0]
    offset = audit.stat().st_size
    w0 = webhook_hist(api, a.webhook)
    s0, k0 = server_metrics(api, a.mode)
    c0 = cpu_snapshot(state)
    ports = {"tailor": int(api.env["WEBHOOK_PORT"]), "upstream": int(api.env["UPSTREAM_WEBHOOK_PORT"])}
    if os.environ.get("FLOOR_PORT"):
        ports["floor"] = int(os.environ["FLOOR_PORT"])
    wall0, r = watch_burst(api, a.namespace, a.pods, a.manifest, a.timeout, ports)
    c1 = cpu_snapshot(state)
    w1 = webhook_hist(api, a.webhook)
    s1, k1 = server_metrics(api, a.mode)
    load1 = os.getloadavg()[0]
    first, last, n, latencies, webhooks = audited_creates(audit, offset, a.namespace, wall0)
    sized, unsized, other = sizing(api, a.namespace, expect)
    r["delete_s"] = clean(api, a.namespace, a.timeout)
    rec = {
        "mode": a.mode, "round": a.round, "warmup": a.warmup, "namespace": a.namespace, "pods": a.pods,
        "webhook": a.webhook or None, "started": time.strftime("%H:%M:%S", time.gmtime(wall0)),
        "load1_start": load0, "load1_end": load1, **r,
        "first_pod_s": first, "created_s": last, "creates_audited": n,
        "create_latency_ms": {"p50": exact(latencies, 0.5) * 1000, "p99": exact(latencies, 0.99) * 1000,
                              "mean": statistics.mean(latencies) * 1000},
        "webhooks_called": webhooks, "sized": sized, "unsized": unsized, "other": other,
        "webhook_hist": hist_to_json(delta(w0, w1)) if a.webhook else None,
        "server_hist": hist_to_json(delta(s0, s1)) if s0 is not None else None,
        "server_counters": counter_deltas(k0, k1),
        "cpu_s": {k: (c1[k] - c0[k]) if c0[k] is not None and c1[k] is not None else None for k in c0},
    }
    with open(a.record, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(row(rec), flush=True)


# --- the report ------------------------------------------------------------------------------------------------
def ms(x):
    return "-" if x is None else f"{x * 1000:.2f}"


def num(x, fmt):
    return "-" if x is None else format(x, fmt)


# The mode's webhook process in the CPU columns.
OWN = {"none": None, "floor": "floor-webhook", "tailor": "tailor-webhook", "upstream": "upstream-webhook"}
# Modes whose pods no webhook changes.
UNCHANGED = ("none", "floor")

HEADER = (f"{'mode':<9}{'round':>6}{'apply':>7}{'first':>7}{'created':>9}{'running':>9}{'deleted':>9}"
          f"{'sized':>11}{'calls':>7}{'wh p50':>8}{'wh p99':>8}{'wh mean':>9}{'srv mean':>10}"
          f"{'POST p50':>10}{'POST p99':>10}{'cpu api':>9}{'cpu etcd':>9}{'cpu wh':>8}{'cpu all':>9}{'load':>12}\n"
          f"{'':<9}{'':>6}{'s':>7}{'s':>7}{'s':>9}{'s':>9}{'s':>9}{'':>11}{'':>7}{'ms':>8}{'ms':>8}{'ms':>9}"
          f"{'ms':>10}{'ms':>10}{'ms':>10}{'s':>9}{'s':>9}{'s':>8}{'s':>9}")


def cpu_all(r):
    return sum(v for k, v in r["cpu_s"].items() if v is not None and k != "bench-client")


def row(r):
    w = hist_from_json(r["webhook_hist"]) if r.get("webhook_hist") else None
    srv = hist_from_json(r["server_hist"]) if r.get("server_hist") else None
    rnd = f"w{r['round']}" if r["warmup"] else str(r["round"])
    own = OWN.get(r["mode"])
    lat = r["create_latency_ms"]
    return (f"{r['mode']:<9}{rnd:>6}{r['apply_s']:>7.2f}{r['first_pod_s']:>7.2f}{r['created_s']:>9.2f}"
            f"{r['running_s']:>9.2f}{r['delete_s']:>9.1f}{r['sized']:>6}/{r['pods']:<4}{(w['count'] if w else 0):>7}"
            f"{ms(quantile(w, 0.5) if w else None):>8}{ms(quantile(w, 0.99) if w else None):>8}"
            f"{ms(mean(w) if w else None):>9}{ms(mean(srv) if srv else None):>10}"
            f"{lat['p50']:>10.1f}{lat['p99']:>10.1f}{num(r['cpu_s']['kube-apiserver'], '.1f'):>9}"
            f"{num(r['cpu_s']['etcd'], '.1f'):>9}{num(r['cpu_s'][own] if own else None, '.2f'):>8}"
            f"{cpu_all(r):>9.1f}{r['load1_start']:>6.1f}–{r['load1_end']:<5.1f}"
            + (f" (watch reopened {r['watch_reopened']}×)" if r.get("watch_reopened") else ""))


def pct(x, base):
    return (x / base - 1) * 100


def pooled(recs, key):
    h = None
    for r in recs:
        if r.get(key):
            x = hist_from_json(r[key])
            h = x if h is None else add(h, x)
    return h


def report(a):
    recs = [json.loads(line) for line in open(a.record) if line.strip()]
    print(HEADER)
    for r in recs:
        print(row(r))
    measured = [r for r in recs if not r["warmup"]]
    modes = ["none", "floor", "tailor", "upstream"]
    by = {m: [r for r in measured if r["mode"] == m] for m in modes}
    if not by["floor"]:  # a record from before the floor mode
        modes.remove("floor")
        del by["floor"]
    if not all(by.values()):
        sys.exit("report: a mode has no measured burst")
    med = {m: statistics.median(r["created_s"] for r in by[m]) for m in modes}
    med_run = {m: statistics.median(r["running_s"] for r in by[m]) for m in modes}
    print()
    print("Medians over the measured bursts; webhook latency (the API server's histogram) pooled over them.")
    print(f"{'mode':<9}{'bursts':>7}{'created s':>10}{'vs none':>9}{'running s':>10}{'vs none':>9}"
          f"{'webhook p50/p99/mean ms':>25}{'≤5 ms':>7}{'srv mean ms':>12}{'POST p50/p99 ms':>17}"
          f"{'cpu all s':>10}{'cpu api s':>10}{'wh µs/pod':>10}{'conns':>7}{'missed':>8}")
    p99 = {}
    problems = []
    for m in modes:
        w, srv = pooled(by[m], "webhook_hist"), pooled(by[m], "server_hist")
        p99[m] = quantile(w, 0.99) if w else None
        lat = f"{ms(quantile(w, 0.5))}/{ms(p99[m])}/{ms(mean(w))}" if w else "-"
        under = share_under(w, 0.005) if w else None
        post = (f"{statistics.median(r['create_latency_ms']['p50'] for r in by[m]):.0f}/"
                f"{statistics.median(r['create_latency_ms']['p99'] for r in by[m]):.0f}")
        own = OWN[m]
        per_pod = (statistics.median(r["cpu_s"][own] / r["pods"] * 1e6 for r in by[m])
                   if own and all(r["cpu_s"].get(own) is not None for r in by[m]) else None)
        # The most connections the API server held open to the mode's webhook during a burst.
        conns = max((r.get("peak_connections", {}).get(m, 0) for r in by[m]), default=0) if m != "none" else "-"
        # Pods the mode's webhook should have sized and did not; for "none", pods something changed anyway.
        missed = sum(r["pods"] - (r["unsized"] if m in UNCHANGED else r["sized"]) for r in by[m])
        for r in by[m]:
            others = {k: v for k, v in r["webhooks_called"].items() if k != r["webhook"]}
            if others:
                problems.append(f"{m} round {r['round']}: other webhooks called: {others}")
        if missed:
            problems.append(f"{m}: {missed} pods not as expected (sized by the mode's webhook, or unchanged without one)")
        print(f"{m:<9}{len(by[m]):>7}{med[m]:>10.2f}{pct(med[m], med['none']):>+8.1f}%{med_run[m]:>10.2f}"
              f"{pct(med_run[m], med_run['none']):>+8.1f}%{lat:>25}{num(under and under * 100, '.0f') + ' %' if under is not None else '-':>7}"
              f"{ms(mean(srv) if srv else None):>12}{post:>17}"
              f"{statistics.median(cpu_all(r) for r in by[m]):>10.1f}"
              f"{statistics.median(r['cpu_s']['kube-apiserver'] or 0 for r in by[m]):>10.1f}"
              f"{num(per_pod, '.0f'):>10}{conns:>7}{missed:>8}")
    # Each round's bursts ran back to back: the ratio to the same round's no-webhook burst cancels load that
    # drifts over minutes (the machine's other work), which the medians above do not.
    print()
    print("Per round, created over the same round's no-webhook burst (then their median):")
    rounds = sorted({r["round"] for r in measured})
    for m in modes[1:]:
        ratios = []
        for n in rounds:
            base = [r["created_s"] for r in by["none"] if r["round"] == n]
            mine = [r["created_s"] for r in by[m] if r["round"] == n]
            if base and mine:
                ratios.append(pct(mine[0], base[0]))
        print(f"  {m}: " + " ".join(f"{x:+.1f}%" for x in ratios)
              + (f"; median {statistics.median(ratios):+.1f}%" if ratios else ""))
    print()
    print("The webhooks' own counters that moved, summed over the measured bursts:")
    for m in ("tailor", "upstream"):
        total = {}
        for r in by[m]:
            for k, v in (r.get("server_counters") or {}).items():
                total[k] = total.get(k, 0) + v
        print(f"  {m}: " + (", ".join(f"{k} {v:g}" for k, v in sorted(total.items())) or "-"))
    for p in problems:
        print(f"WARNING: {p}")
    print()
    print(f"creation_overhead_tailor_pct={pct(med['tailor'], med['none']):.1f} "
          f"creation_overhead_upstream_pct={pct(med['upstream'], med['none']):.1f} "
          f"webhook_p99_ms_tailor={ms(p99['tailor'])} webhook_p99_ms_upstream={ms(p99['upstream'])}")
    if "floor" in modes:
        print(f"creation_overhead_floor_pct={pct(med['floor'], med['none']):.1f} "
              f"webhook_p99_ms_floor={ms(p99['floor'])} tailor_over_floor_pct={pct(med['tailor'], med['floor']):.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("burst")
    b.add_argument("--state", required=True)
    b.add_argument("--mode", required=True)
    b.add_argument("--round", type=int, required=True)
    b.add_argument("--warmup", action="store_true")
    b.add_argument("--namespace", required=True)
    b.add_argument("--manifest", required=True)
    b.add_argument("--pods", type=int, required=True)
    b.add_argument("--webhook", default="")
    b.add_argument("--template-cpu", required=True)
    b.add_argument("--template-memory", required=True)
    b.add_argument("--expect-cpu", required=True)
    b.add_argument("--expect-memory", required=True)
    b.add_argument("--timeout", type=float, default=900)
    b.add_argument("--record", required=True)
    r = sub.add_parser("report")
    r.add_argument("--record", required=True)
    sub.add_parser("header")
    a = ap.parse_args()
    if a.cmd == "burst":
        burst(a)
    elif a.cmd == "header":
        print(HEADER)
    else:
        report(a)


if __name__ == "__main__":
    main()
