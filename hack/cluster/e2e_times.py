#!/usr/bin/env python3
"""How long each e2e test held its namespace, from the local control plane's audit log.

    hack/cluster/e2e_times.py AUDIT_LOG [--top N]

Every e2e test works in a namespace of its own, `e2e-<label>-<suffix>`, created when it starts and deleted when
it ends, so the time between the two requests is the test's time on the cluster (a test with several
namespaces shows each). libtest prints no durations, and the four-at-a-time phase of hack/e2e-local.sh is only
as short as its longest tests: these lines say which tests to shorten or start first. Informational: prints the
N slowest (default 12), slowest first, and exits 0 whatever it finds.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime


def stamp(event: dict) -> datetime:
    return datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))


def namespace_spans(lines) -> list[tuple[float, str, datetime]]:
    """(seconds held, namespace, created at) for every e2e namespace both created and deleted."""
    created: dict[str, datetime] = {}
    deleted: dict[str, datetime] = {}
    for line in lines:
        if '"namespaces"' not in line or '"e2e-' not in line:
            continue
        try:
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            name = ref.get("name") or ""
            if ref.get("resource") != "namespaces" or ref.get("subresource") or not name.startswith("e2e-"):
                continue
            if event.get("verb") == "create":
                created.setdefault(name, stamp(event))
            elif event.get("verb") == "delete":
                deleted.setdefault(name, stamp(event))
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by a stopped API server says nothing about a test's time
    return [((deleted[n] - t).total_seconds(), n, t) for n, t in created.items() if n in deleted]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("audit_log")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    try:
        with open(args.audit_log, encoding="utf-8", errors="replace") as f:
            spans = namespace_spans(f)
    except OSError as e:
        print(f"e2e times: cannot read {args.audit_log}: {e}")
        return 0
    spans.sort(reverse=True)
    print(f"e2e times: the {min(args.top, len(spans))} longest of {len(spans)} test namespaces (created at, held):")
    for seconds, name, created in spans[: args.top]:
        print(f"  {created.strftime('%H:%M:%S')}  {seconds:7.1f} s  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
