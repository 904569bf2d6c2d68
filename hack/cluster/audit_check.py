#!/usr/bin/env python3
"""Tailor's requests in the local control plane's audit log (hack/cluster.sh writes target/cluster/audit.log).

    hack/cluster/audit_check.py AUDIT_LOG [--records DIR [--records-name FILE]] [--namespace tailor-system]
                                [--release tailor]

- Fails on every request of a Tailor identity (the chart's ServiceAccounts `<release>-recommender`,
  `-updater`, `-admission` in the release namespace) that the real RBAC authorizer refused (403 with the
  audit annotation `authorization.k8s.io/decision: forbid`), naming it; a 403 RBAC allowed (a write into a
  namespace being deleted) is listed, not failed.
  The chart's rules do not change during a run, so a refusal the same identity later saw answered for the
  same verb and object was the authorizer not being ready yet (an API server that has just restarted serves
  before its RBAC cache is filled); those are listed, not failed.
- Fails when no request of some component was logged at all (the log would then prove nothing).
- Leader election: the recommender's writes of VPA statuses and checkpoints come from one process at a time.
  Each process has its own token (its `authentication.kubernetes.io/credential-id`); in time order, a
  writer that has been followed by another never writes again, and the handovers are listed (the failover
  and restart tests make them).
- With --records DIR, writes the requests as the stand-in's request records (`DIR/requests-audit.jsonl`, or
  the --records-name; JSON lines of user, method, path, query, status), so that hack/checks/rbac.sh checks
  the chart's grants against the real server's requests too: a granted verb that neither the stand-in
  tests nor the e2e suite used fails there.

Prints one line per check ("ok"/"FAIL") and "audit: N passed, N failed" last; exits 1 when a check failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

COMPONENTS = ("recommender", "updater", "admission")
# What only the recommender's leader writes.
LEADER_WRITES = {"verticalpodautoscalers", "verticalpodautoscalercheckpoints"}
# Upstream's recommender flag scenarios (tests/tests/e2e/upstream_recommender.rs) run a second recommender of
# another name (`--recommender-name`), without leader election, beside the leader: it writes only the VPAs and
# checkpoints of those tests' namespaces, which are not the leader's writes.
SECOND_RECOMMENDER_NAMESPACES = "e2e-recommender-flags"
WRITE_VERBS = {"create", "update", "patch", "delete"}
# The RBAC verb of an audit event back to the HTTP method the stand-in records carry.
METHODS = {"get": "GET", "list": "GET", "watch": "GET", "create": "POST", "update": "PUT", "patch": "PATCH",
           "delete": "DELETE", "deletecollection": "DELETE"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("audit_log", type=Path)
    ap.add_argument("--records", type=Path)
    ap.add_argument("--records-name", default="requests-audit.jsonl",
                    help="file name under --records (one per cluster, so that runs do not overwrite each other)")
    ap.add_argument("--namespace", default="tailor-system")
    ap.add_argument("--release", default="tailor")
    args = ap.parse_args()

    users = {f"system:serviceaccount:{args.namespace}:{args.release}-{c}": c for c in COMPONENTS}
    passed = failed = 0

    def report(ok: bool, name: str, detail: str = "") -> None:
        nonlocal passed, failed
        if ok:
            passed += 1
            print(f"ok    {name}")
        else:
            failed += 1
            print(f"FAIL  {name}:\n      " + detail.replace("\n", "\n      "))

    if not args.audit_log.is_file():
        report(False, "audit log present", f"no file {args.audit_log}")
        print(f"audit: {passed} passed, {failed} failed")
        return 1

    counts: Counter[str] = Counter()
    refused: list[tuple[tuple, str]] = []  # (what was asked, description)
    allowed: dict[tuple, int] = {}  # what was asked -> the last line answering it with anything but 403
    records: list[dict] = []
    other: list[str] = []  # 403s the authorizer allowed (admission refused them)
    seen: set[str] = set()  # audit IDs: a watch is logged when it starts and again when it ends
    bad_lines = 0
    leader_writes: list[tuple[str, str, str]] = []  # (received at, writer's credential, what)
    with args.audit_log.open() as f:
        for n, line in enumerate(f, 1):
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                bad_lines += 1
                continue
            component = users.get(event.get("user", {}).get("username", ""))
            if component is None:
                continue
            audit_id = event.get("auditID", f"line {n}")
            if audit_id in seen:
                continue
            seen.add(audit_id)
            counts[component] += 1
            code = event.get("responseStatus", {}).get("code")
            uri = event.get("requestURI", "")
            ref = event.get("objectRef") or {}
            asked = (component, event.get("verb"), ref.get("apiGroup", ""), ref.get("resource", ""),
                     ref.get("subresource", ""), ref.get("namespace", ""), ref.get("name", ""), urlsplit(uri).path)
            annotations = event.get("annotations", {})
            if code == 403 and annotations.get("authorization.k8s.io/decision") != "forbid":
                # Allowed by RBAC, refused later (e.g. a write into a namespace being deleted): not RBAC's.
                status = event.get("responseStatus", {}).get("message", "")
                other.append(f"line {n}: {component} {event.get('verb')} {uri}: {status[:200]}")
            elif code == 403:
                reason = annotations.get("authorization.k8s.io/reason", "")
                refused.append(((asked, n), f"line {n} ({event.get('stageTimestamp', '')}): {component} "
                                f"{event.get('verb')} {uri} ({reason or 'forbidden'})"))
            elif code is not None:
                allowed[asked] = n
            if (component == "recommender" and event.get("verb") in WRITE_VERBS
                    and ref.get("apiGroup") == "autoscaling.tailor.dev" and ref.get("resource") in LEADER_WRITES
                    and not (ref.get("namespace") or "").startswith(SECOND_RECOMMENDER_NAMESPACES)):
                extra = event.get("user", {}).get("extra", {})
                writer = ",".join(extra.get("authentication.kubernetes.io/credential-id", [])
                                  or extra.get("authentication.kubernetes.io/pod-name", [])) or "unknown"
                leader_writes.append((event.get("requestReceivedTimestamp", ""), writer,
                                      f"line {n}: {event.get('verb')} {uri}"))
            method = METHODS.get(event.get("verb", ""))
            if method is None or not event.get("objectRef"):
                continue  # non-resource requests (discovery) need no rule of the chart
            url = urlsplit(uri)
            query = dict(parse_qsl(url.query))
            if event["verb"] == "watch":
                query["watch"] = "true"
            records.append({"user": f"{component}-e2e", "method": method, "path": url.path, "query": query,
                            "status": code})

    report(bad_lines == 0, "every audit line is JSON", f"{bad_lines} line(s) are not")
    for c in COMPONENTS:
        report(counts[c] > 0, f"the {c} made requests under its chart ServiceAccount ({counts[c]})",
               f"no request of {args.release}-{c} in {args.audit_log}")
    report(*one_writer_at_a_time(leader_writes))
    transient = [d for (asked, n), d in refused if allowed.get(asked, 0) > n]
    denied = [d for (asked, n), d in refused if allowed.get(asked, 0) <= n]
    for d in other[:10]:
        print(f"      refused after RBAC allowed it (not an RBAC question): {d}")
    if len(other) > 10:
        print(f"      … and {len(other) - 10} more refused after RBAC allowed them")
    for d in transient:
        print(f"      refused, then allowed (authorizer not ready yet): {d}")
    report(not denied, "no request of a Tailor identity was refused by the chart's RBAC (403)",
           "\n".join(denied[:20]) + (f"\n… and {len(denied) - 20} more" if len(denied) > 20 else ""))
    if args.records:
        args.records.mkdir(parents=True, exist_ok=True)
        out = args.records / args.records_name
        with out.open("w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
        print(f"      {len(records)} requests written to {out} for hack/checks/rbac.sh")
    print(f"audit: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


def one_writer_at_a_time(writes: list[tuple[str, str, str]]) -> tuple[bool, str, str]:
    """(ok, check name, detail): whether the leader's writes, in time order, form one run per writer."""
    writes.sort()  # RFC 3339 timestamps with a fixed format sort as time
    runs: list[tuple[str, int, str, str]] = []  # (writer, writes, first at, last at)
    for at, writer, _ in writes:
        if runs and runs[-1][0] == writer:
            w, count, first, _ = runs[-1]
            runs[-1] = (w, count + 1, first, at)
        else:
            runs.append((writer, 1, at, at))
    name = (f"the recommender's {len(writes)} VPA and checkpoint writes came from one process at a time "
            f"({len(runs)} writer(s) in turn)")
    for previous, current in zip(runs, runs[1:]):
        print(f"      leader handover: {previous[0]} wrote until {previous[3]}, {current[0]} from {current[2]}")
    back = [r for i, r in enumerate(runs) if any(r[0] == earlier[0] for earlier in runs[:i])]
    if not writes:
        return False, "the recommender wrote VPA statuses and checkpoints", "no such write in the audit log"
    detail = "\n".join(f"{w} wrote again from {first} to {last} ({count} writes) after another writer"
                       for w, count, first, last in back[:10])
    return not back, name, detail


if __name__ == "__main__":
    sys.exit(main())
