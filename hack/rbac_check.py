#!/usr/bin/env python3
"""The chart's RBAC against the API requests the real binaries make (docs/decisions/stand-in-api-server.md).

Run by hack/checks/rbac.sh with target/venv/bin/python, after the stand-in tests have written their request
records (hack/test.sh exports TAILOR_STANDIN_RECORD_DIR for `cargo test`; see tests/src/standin/mod.rs).
Prints one line per check ("ok"/"FAIL") and "rbac: N passed, N failed" last; exits 1 when any check failed.

What it does:
- renders charts/tailor with the Helm v4 library for each case of CASES (the defaults, and the defaults with
  leader election, which the Lease tests run) and collects, per component (recommender, admission, updater),
  the rules of every Role and ClusterRole bound to the component's ServiceAccount;
- reads the request records (JSON lines: user, method, path, query, status, ...) and attributes each request to
  a component by its user, the kubeconfig token the harness names after the process (`recommender-a`,
  `admission`, `updater`); other users (the stand-in's own client tests) are not components and are skipped;
- maps each request to its RBAC attributes as the API server does: verb from the method, the path and
  `?watch=` (GET on a collection = list, on an object = get, with watch=true = watch; POST = create, PUT =
  update, PATCH = patch, DELETE = delete or deletecollection), API group, resource and subresource, namespace,
  and name (a list or watch with `fieldSelector=metadata.name=X` is authorized by name, as resourceNames
  rules expect); a server-side apply that created its object (answered 201) also needs `create`;
- fails on every request no rule of its component allows (discovery paths `/api`, `/apis` and below need no
  rule: system:discovery grants them), naming the request;
- fails on every granted verb on a resource that no request of the component used, unless
  charts/tailor/rbac-allowlist.yaml lists it with a reason; an allow-list entry that is not granted any more, or
  whose grant some request now uses, fails too, so the list cannot rot.

A self-test on made-up requests runs first (the mapping above, `*/scale`, resourceNames, Role scope, allow-list
matching), so that a clean run on the real records cannot hide a check that stopped checking.

Known limit: a namespaced Role's namespace is not compared with the request's (the tests run the binaries with
their own namespaces, not the release's); that the Role is namespaced and the request is namespaced is.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chart_check import NAMESPACE, find, render  # noqa: E402 - the shared renderer of the chart checks

ROOT = Path(__file__).resolve().parent.parent
ALLOWLIST = ROOT / "charts" / "tailor" / "rbac-allowlist.yaml"
RECORD_ENV = "TAILOR_STANDIN_RECORD_DIR"
DEFAULT_RECORDS = ROOT / "target" / "standin-requests"
COMPONENTS = ("recommender", "admission", "updater")
USER = re.compile(r"^(recommender|admission|updater)(-.+)?$")

# The configurations whose RBAC is checked: the defaults, and the leader election the Lease tests run.
CASES: dict[str, dict] = {
    "defaults": {},
    "leader election": {"recommender": {"leaderElection": {"enabled": True}},
                        "updater": {"leaderElection": {"enabled": True}}},
    # The recommender's fleet onboarding (tests/tests/it/fleet.rs).
    "fleet": {"fleet": {"enabled": True}},
    # The updater then lists and watches namespaces (tests/tests/it/plan_parity.rs).
    "webhook namespace selector": {"admission": {"webhook": {"namespaceSelector": {
        "matchLabels": {"tailor.dev/enabled": "true"}}}}},
}

# Non-resource paths every authenticated user may GET (the system:discovery ClusterRole).
DISCOVERY = re.compile(r"^/(api|apis)(/[^/]+){0,2}/?$|^/(version|healthz|livez|readyz|openapi(/.*)?)/?$")

PASSED = 0
FAILED = 0


def report(ok: bool, name: str, detail: str = "") -> None:
    global PASSED, FAILED
    if ok:
        PASSED += 1
        print(f"ok    {name}")
    else:
        FAILED += 1
        print(f"FAIL  {name}:\n      " + detail.replace("\n", "\n      "))


# --- the chart's grants ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Grant:
    """One verb on one resource of one rule, as the chart grants it to a component."""
    component: str
    role: str  # "ClusterRole/name" or "Role/namespace/name"
    namespaced: bool  # granted by a Role (namespaced requests only)
    group: str
    resource: str
    verb: str
    names: tuple[str, ...]  # resourceNames; empty = any

    def describe(self) -> str:
        names = f" (resourceNames {list(self.names)})" if self.names else ""
        group = self.group or '""'
        return f"{self.verb} {group} {self.resource}{names} in {self.role}"


def service_accounts(docs: list[dict]) -> dict[str, str]:
    """ServiceAccount name -> component, from the Deployments that run under it."""
    out = {}
    for dep in find(docs, "Deployment"):
        component = dep["metadata"].get("labels", {}).get("app.kubernetes.io/component")
        sa = dep["spec"]["template"]["spec"].get("serviceAccountName")
        if component in COMPONENTS and sa:
            out[sa] = component
    return out


def grants_of(docs: list[dict]) -> set[Grant]:
    accounts = service_accounts(docs)
    roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
             for d in find(docs, "ClusterRole") + find(docs, "Role")}
    out: set[Grant] = set()
    for binding in find(docs, "ClusterRoleBinding") + find(docs, "RoleBinding"):
        ref = binding["roleRef"]
        ns = binding["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
        role = roles.get((ref["kind"], ns, ref["name"]))
        assert role is not None, f"{binding['kind']} {binding['metadata']['name']} refers to a missing {ref}"
        # A ClusterRole bound by a RoleBinding grants in that namespace only.
        namespaced = binding["kind"] == "RoleBinding"
        where = f"{role['kind']}/{ns + '/' if ns else ''}{ref['name']}"
        for subject in binding.get("subjects", []):
            component = accounts.get(subject["name"]) if subject["kind"] == "ServiceAccount" else None
            if component is None:
                continue
            for rule in role.get("rules", []):
                assert not rule.get("nonResourceURLs"), f"{where}: nonResourceURLs are not checked"
                for g in rule.get("apiGroups", []):
                    for r in rule.get("resources", []):
                        for v in rule.get("verbs", []):
                            out.add(Grant(component, where, namespaced, g, r, v,
                                          tuple(rule.get("resourceNames", []))))
    return out


# --- the requests -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Request:
    """A request's RBAC attributes."""
    component: str
    verb: str
    group: str
    resource: str  # "pods" or "pods/eviction"
    namespace: str
    name: str
    example: str = field(compare=False, default="")  # "user METHOD path?query -> status", for messages

    def describe(self) -> str:
        group = self.group or '""'
        where = f" in {self.namespace}" if self.namespace else " (cluster-wide)"
        name = f" {self.name}" if self.name else ""
        return f"{self.verb} {group} {self.resource}{name}{where} (e.g. {self.example})"


def parse(record: dict, component: str) -> list[Request] | None:
    """The RBAC attributes of a recorded request (two for an apply that created its object); None for a
    discovery path; raises ValueError for a path that is neither."""
    path = record["path"].rstrip("/") or "/"
    query = record.get("query") or {}
    method = record["method"]
    example = (f"{record['user']} {method} {record['path']}"
               + ("?" + "&".join(f"{k}={v}" for k, v in sorted(query.items())) if query else "")
               + f" -> {record['status']}")
    parts = [unquote(p) for p in path.strip("/").split("/")]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    elif DISCOVERY.match(path) and method == "GET":
        return None
    else:
        raise ValueError(f"neither a resource nor a discovery path: {example}")
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource, name, sub = rest[0], (rest[1] if len(rest) > 1 else ""), (rest[2] if len(rest) > 2 else "")
    if len(rest) > 3:
        raise ValueError(f"unexpected resource path: {example}")
    if resource == "namespaces" and name:
        namespace = name  # a Namespace is authorized as in itself
    watch = query.get("watch") in ("true", "1")
    if method == "GET":
        verb = "watch" if watch else ("get" if name else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection"}.get(method)
        if verb is None:
            raise ValueError(f"unexpected method: {example}")
    if verb in ("list", "watch") and not name:
        m = re.fullmatch(r"metadata\.name=(?:=)?([^,]+)", query.get("fieldSelector", ""))
        if m:
            name = m.group(1)
    resource = f"{resource}/{sub}" if sub else resource
    out = [Request(component, verb, group, resource, namespace, name, example)]
    if method == "PATCH" and record["status"] == 201:
        # An apply that creates its object is authorized as a create too.
        out.append(Request(component, "create", group, resource, namespace, name, example))
    return out


def resource_matches(rule: str, resource: str) -> bool:
    if rule in ("*", resource):
        return True
    # "*/scale" matches the scale subresource of every resource.
    return rule.startswith("*/") and "/" in resource and resource.split("/", 1)[1] == rule[2:]


def allows(g: Grant, r: Request) -> bool:
    return (g.component == r.component
            and g.verb in ("*", r.verb)
            and g.group in ("*", r.group)
            and resource_matches(g.resource, r.resource)
            and (not g.names or r.name in g.names)
            and (not g.namespaced or bool(r.namespace)))


def read_records(directory: Path) -> tuple[dict[str, set[Request]], dict[str, int], list[str]]:
    """Requests per component, request counts of the users that are no component, unparseable paths."""
    requests: dict[str, set[Request]] = {c: set() for c in COMPONENTS}
    others: dict[str, int] = {}
    errors: list[str] = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            m = USER.match(record["user"])
            if not m:
                others[record["user"]] = others.get(record["user"], 0) + 1
                continue
            try:
                parsed = parse(record, m.group(1))
            except ValueError as e:
                errors.append(f"{m.group(1)}: {e}")
                continue
            for r in parsed or []:
                requests[m.group(1)].add(r)
    return requests, others, errors


# --- the allow-list ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Allowed:
    component: str
    group: str
    resource: str
    verb: str
    names: tuple[str, ...] | None  # resourceNames the grant must have; None = any
    reason: str

    def covers(self, g: Grant) -> bool:
        return ((self.component, self.group, self.resource, self.verb) == (g.component, g.group, g.resource, g.verb)
                and (self.names is None or set(self.names) == set(g.names)))

    def describe(self) -> str:
        names = f" (resourceNames {list(self.names)})" if self.names is not None else ""
        return f"{self.component}: {self.verb} {self.group or chr(34) * 2} {self.resource}{names}"


def read_allowlist(path: Path) -> list[Allowed]:
    entries = yaml.safe_load(path.read_text()) or []
    assert isinstance(entries, list), f"{path}: a list of entries expected"
    out = []
    for i, e in enumerate(entries):
        where = f"{path.relative_to(ROOT)} entry {i + 1}"
        missing = {"component", "apiGroup", "resource", "verbs", "reason"} - set(e)
        assert not missing, f"{where}: missing {sorted(missing)}"
        unknown = set(e) - {"component", "apiGroup", "resource", "resourceNames", "verbs", "reason"}
        assert not unknown, f"{where}: unknown keys {sorted(unknown)}"
        assert e["component"] in COMPONENTS, f"{where}: component {e['component']!r} is none of {COMPONENTS}"
        assert isinstance(e["reason"], str) and len(e["reason"].strip()) >= 20, f"{where}: give a reason"
        assert e["verbs"] and isinstance(e["verbs"], list), f"{where}: verbs must be a non-empty list"
        for v in e["verbs"]:
            names = tuple(e["resourceNames"]) if "resourceNames" in e else None
            out.append(Allowed(e["component"], e["apiGroup"], e["resource"], v, names, " ".join(e["reason"].split())))
    return out


# --- self-test ----------------------------------------------------------------------------------------

def self_test() -> None:
    """The request mapping, rule matching and allow-list bookkeeping on made-up requests, so that a clean run
    on the real records cannot hide a check that no longer checks."""
    def one(method: str, path: str, query: dict | None = None, status: int = 200) -> list[tuple]:
        got = parse({"user": "updater", "method": method, "path": path, "query": query or {}, "status": status},
                    "updater")
        return [(r.verb, r.group, r.resource, r.namespace, r.name) for r in got or []]
    cases = [
        (("GET", "/api/v1/pods", {"watch": "true"}), [("watch", "", "pods", "", "")]),
        (("GET", "/api/v1/namespaces/a/pods"), [("list", "", "pods", "a", "")]),
        (("GET", "/api/v1/namespaces/a/pods/p"), [("get", "", "pods", "a", "p")]),
        (("GET", "/api/v1/namespaces/a/pods/p", {"watch": "1"}), [("watch", "", "pods", "a", "p")]),
        (("GET", "/api/v1/namespaces/a/secrets", {"fieldSelector": "metadata.name=s", "watch": "true"}),
         [("watch", "", "secrets", "a", "s")]),
        (("GET", "/api/v1/namespaces/a/pods", {"fieldSelector": "status.phase!=Pending"}),
         [("list", "", "pods", "a", "")]),
        (("POST", "/api/v1/namespaces/a/pods/p/eviction"), [("create", "", "pods/eviction", "a", "p")]),
        (("PUT", "/apis/coordination.k8s.io/v1/namespaces/a/leases/l"),
         [("update", "coordination.k8s.io", "leases", "a", "l")]),
        (("PATCH", "/apis/g.io/v1/namespaces/a/things/t", {}, 201),
         [("patch", "g.io", "things", "a", "t"), ("create", "g.io", "things", "a", "t")]),
        (("DELETE", "/apis/g.io/v1/namespaces/a/things"), [("deletecollection", "g.io", "things", "a", "")]),
        (("GET", "/apis/g.io/v1/namespaces/a/things/t/scale"), [("get", "g.io", "things/scale", "a", "t")]),
        (("GET", "/api/v1/namespaces/a"), [("get", "", "namespaces", "a", "a")]),
        (("GET", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/w"),
         [("get", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "w")]),
        (("GET", "/apis/g.io/v1"), []), (("GET", "/api"), []), (("GET", "/apis"), []), (("GET", "/version"), []),
    ]
    for args, want in cases:
        got = one(*args)
        assert got == want, f"{args}: {got} != {want}"
    for bad in [("GET", "/metrics"), ("POST", "/apis"), ("GET", "/apis/g.io/v1/namespaces/a/t/n/s/x")]:
        try:
            one(*bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad} should be refused")

    def req(verb: str, group: str, resource: str, namespace: str = "a", name: str = "") -> Request:
        return Request("updater", verb, group, resource, namespace, name)
    scale = Grant("updater", "ClusterRole/x", False, "*", "*/scale", "get", ())
    assert allows(scale, req("get", "argoproj.io", "rollouts/scale"))
    assert not allows(scale, req("get", "argoproj.io", "rollouts"))
    assert not allows(scale, req("patch", "apps", "deployments/scale"))
    named = Grant("updater", "Role/ns/x", True, "", "secrets", "get", ("s",))
    assert allows(named, req("get", "", "secrets", name="s"))
    assert not allows(named, req("get", "", "secrets", name="t"))
    assert not allows(named, req("get", "", "secrets"))
    assert not allows(named, req("get", "", "secrets", namespace="", name="s")), "a Role grants namespaced only"
    assert not allows(named, Request("admission", "get", "", "secrets", "a", "s")), "another component's"
    entry = Allowed("updater", "", "secrets", "get", ("s",), "reason")
    assert entry.covers(named) and not Allowed("updater", "", "secrets", "get", ("t",), "r").covers(named)
    assert Allowed("updater", "", "secrets", "get", None, "r").covers(named)


# --- main -------------------------------------------------------------------------------------------

def main() -> int:
    try:
        self_test()
        report(True, "self-test: request mapping, rule matching, allow-list entries")
    except AssertionError as e:
        report(False, "self-test: request mapping, rule matching, allow-list entries", str(e))
    directory = Path(os.environ.get(RECORD_ENV) or DEFAULT_RECORDS)
    files = sorted(directory.glob("*.jsonl"))
    if not files:
        report(False, "request records present",
               f"no *.jsonl in {directory}: run the stand-in tests with {RECORD_ENV}={directory} first\n"
               f"(hack/test.sh does; by hand: {RECORD_ENV}={directory} cargo test -p tailor-tests --test it)")
        print(f"rbac: {PASSED} passed, {FAILED} failed")
        return 1
    print(f"request records: {len(files)} files in {directory}")

    grants: set[Grant] = set()
    for case, values in CASES.items():
        try:
            grants |= grants_of(render(values))
        except Exception as e:  # noqa: BLE001 - a render failure is a failed check
            report(False, f"render the chart's RBAC: {case}", f"{type(e).__name__}: {e}")
            print(f"rbac: {PASSED} passed, {FAILED} failed")
            return 1
    print(f"chart RBAC rendered for: {', '.join(CASES)} (release namespace {NAMESPACE})")

    requests, others, errors = read_records(directory)
    if others:
        print("not a component, skipped: " + ", ".join(f"{u} ({n})" for u, n in sorted(others.items())))
    report(not errors, "every recorded path is a resource or discovery path", "\n".join(sorted(set(errors))))
    try:
        allowlist = read_allowlist(ALLOWLIST)
        report(True, f"{ALLOWLIST.relative_to(ROOT)} is well-formed")
    except (AssertionError, OSError, yaml.YAMLError) as e:
        report(False, f"{ALLOWLIST.relative_to(ROOT)} is well-formed", str(e))
        allowlist = []

    for component in COMPONENTS:
        reqs = requests[component]
        mine = {g for g in grants if g.component == component}
        report(bool(reqs) and bool(mine), f"{component}: requests recorded and rules rendered",
               f"{len(reqs)} distinct requests, {len(mine)} grants: did its stand-in tests run?")
        denied = sorted((r for r in reqs if not any(allows(g, r) for g in mine)),
                        key=lambda r: (r.group, r.resource, r.verb, r.name))
        report(not denied, f"{component}: every request ({len(reqs)} distinct) is allowed by its rules",
               "no rule allows:\n" + "\n".join(r.describe() for r in denied))
        unused = []
        for g in sorted(mine, key=lambda g: (g.role, g.group, g.resource, g.verb)):
            used = any(allows(g, r) for r in reqs)
            listed = [a for a in allowlist if a.covers(g)]
            if not used and not listed:
                unused.append(g)
        report(not unused, f"{component}: every granted verb is used by a request or allow-listed",
               "granted, but no request uses it (remove it from the chart, or allow-list it in "
               f"{ALLOWLIST.relative_to(ROOT)} with the reason):\n" + "\n".join(g.describe() for g in unused))
        stale = []
        for a in (a for a in allowlist if a.component == component):
            covered = [g for g in mine if a.covers(g)]
            if not covered:
                stale.append(f"{a.describe()}: the chart grants it in no case; remove the entry")
            elif any(allows(g, r) for g in covered for r in reqs):
                stale.append(f"{a.describe()}: a request uses it now; remove the entry")
        report(not stale, f"{component}: every allow-list entry is granted and unused", "\n".join(stale))
        for a in (a for a in allowlist if a.component == component):
            print(f"      allow-listed {a.describe()}: {a.reason}")

    print(f"rbac: {PASSED} passed, {FAILED} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
