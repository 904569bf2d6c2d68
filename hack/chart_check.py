#!/usr/bin/env python3
"""Checks of charts/tailor with the real Helm v4 library (helm-python-sdk) and kubernetes-validate.

Run by hack/checks/chart.sh with target/venv/bin/python. Prints one line per check ("ok"/"FAIL"/"skip")
and "N passed, N failed" last; exits 1 when any check failed.

What it verifies:
- renders are deterministic (no genCA/random/time functions), so GitOps tools see no drift;
- `helm lint --strict` is clean for the defaults and every case of the values matrix;
- values.schema.json is a valid draft-07 schema, accepts values.yaml, types every key of it, and rejects typos;
- README.md documents every value and its table is up to date (hack/chart_readme.py --check);
- for each case of the matrix (defaults, each certificate mode, global + component scheduling, each component
  alone, leader election, ServiceMonitor, ...), every rendered manifest passes kubernetes-validate --strict for
  Kubernetes 1.33.0 and 1.37.0; the custom resources (cert-manager Certificate/Issuer, ServiceMonitor) are checked
  against the subset schemas in hack/chart-schemas/ instead, since kubernetes-validate only knows built-in kinds;
- invariants on every case: no container can run as root, read-only root filesystem, no capabilities, the webhook
  has failurePolicy Ignore, timeoutSeconds <= 5, sideEffects None, matchPolicy Equivalent, admissionReviewVersions
  [v1] and a namespaceSelector excluding its own namespace and kube-system; RBAC has no wildcard verbs;
- per-case expectations (cert-manager annotation and Certificate, caBundle, self-managed flags and RBAC by
  resourceNames, scheduling merge precedence, leader-election args and Lease RBAC, ...);
- invalid combinations (two certificate modes, ...) fail to render with their message;
- the chart's crds/ files are byte-identical to crds/yaml/ (once both exist) and pass kubernetes-validate;
- `bash -n` and shellcheck on every hack/*.sh, hack/checks/*.sh and hack/go/*.sh.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

import helm_python as helm
import jsonschema
import kubernetes_validate.utils as kv
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "tailor"
CR_SCHEMAS = ROOT / "hack" / "chart-schemas"
KUBE_VERSIONS = ["1.33.0", "1.37.0"]
NAMESPACE = "tailor-system"
RELEASE = "tailor"

PASSED = 0
FAILED = 0


def report(ok: bool, name: str, detail: str = "") -> None:
    global PASSED, FAILED
    if ok:
        PASSED += 1
        print(f"ok    {name}")
    else:
        FAILED += 1
        print(f"FAIL  {name}: {detail}")


def check(name: str, fn: Callable[[], Any]) -> None:
    """Run fn; an AssertionError or any exception is a failure with its message."""
    try:
        fn()
    except AssertionError as e:
        report(False, name, str(e) or "assertion failed")
    except helm.HelmError as e:
        report(False, name, f"{type(e).__name__}: {e}")
    except Exception as e:  # noqa: BLE001 - a crash in a check is a failed check
        report(False, name, f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
    else:
        report(True, name)


def skip(name: str, why: str) -> None:
    print(f"skip  {name}: {why}")


# --- rendering ------------------------------------------------------------------------------------

_chart: helm.Chart | None = None


def chart() -> helm.Chart:
    global _chart
    if _chart is None:
        _chart = helm.Chart.load(str(CHART))
    return _chart


def render(values: dict, namespace: str = NAMESPACE, name: str = RELEASE) -> list[dict]:
    out = chart().render(values, name=name, namespace=namespace, is_install=True)
    docs = []
    for path, text in sorted(out.items()):
        if not path.endswith((".yaml", ".yml")):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                doc.setdefault("metadata", {})
                docs.append(doc)
    return docs


def find(docs: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def deployment(docs: list[dict], component: str) -> dict:
    return one(docs, "Deployment", f"{RELEASE}-{component}")


def container(dep: dict) -> dict:
    return dep["spec"]["template"]["spec"]["containers"][0]


def args(dep: dict) -> list[str]:
    return container(dep).get("args", [])


# The binary each component's Deployment runs; `cargo test` (which hack/test.sh runs first) builds them.
BINARIES = {"recommender": "tailor-recommender", "updater": "tailor-updater", "admission": "tailor-admission"}
COMPONENTS = tuple(BINARIES)


def binaries_accept_args(docs: list[dict]) -> None:
    """Every flag the chart passes is one the binary knows: clap parses the args in order and answers the
    trailing --help with exit 0 only when everything before it was accepted."""
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    for dep in find(docs, "Deployment"):
        component = dep["metadata"].get("labels", {}).get("app.kubernetes.io/component", "")
        exe = target / "debug" / BINARIES[component]
        assert exe.exists(), f"{exe} is not built (run cargo test or cargo build first)"
        env = {**os.environ, "NAMESPACE": NAMESPACE, "POD_NAME": "check-0"}
        r = subprocess.run([str(exe), *args(dep), "--help"], capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0, f"{exe.name} rejects the chart's args {args(dep)}: {r.stderr.strip()[:400]}"


def merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in override.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


# --- validation of one manifest ---------------------------------------------------------------------

_cr_validators: dict[tuple[str, str], jsonschema.Draft7Validator] = {}
CR_FILES = {
    ("cert-manager.io/v1", "Certificate"): "certificate-cert-manager-v1.json",
    ("cert-manager.io/v1", "Issuer"): "issuer-cert-manager-v1.json",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring-v1.json",
}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
                  "ValidatingWebhookConfiguration", "CustomResourceDefinition", "PriorityClass"}


def validate_manifest(doc: dict) -> list[str]:
    """Errors of one manifest against Kubernetes 1.33 and 1.37 (strict), or our CR subset schemas."""
    errors = []
    key = (doc.get("apiVersion"), doc.get("kind"))
    where = f"{doc.get('kind')}/{doc['metadata'].get('name')}"
    if key in CR_FILES:
        if key not in _cr_validators:
            schema = json.loads((CR_SCHEMAS / CR_FILES[key]).read_text())
            _cr_validators[key] = jsonschema.Draft7Validator(schema)
        for e in _cr_validators[key].iter_errors(doc):
            errors.append(f"{where}: {'.'.join(map(str, e.path))}: {e.message}")
    else:
        for version in KUBE_VERSIONS:
            try:
                kv.validate(doc, version, strict=True)
            except kv.ValidationError as e:
                errors.append(f"{where} (k8s {version}): {'.'.join(map(str, e.path))}: {e.message}")
            except kv.SchemaNotFoundError as e:
                errors.append(f"{where}: no schema: {e.message}")
    if doc.get("kind") not in CLUSTER_SCOPED and not doc["metadata"].get("namespace"):
        errors.append(f"{where}: namespaced object without metadata.namespace")
    return errors


# --- invariants every rendering must hold -------------------------------------------------------------

def invariants(docs: list[dict], namespace: str = NAMESPACE) -> list[str]:
    errs: list[str] = []
    seen = set()
    for d in docs:
        ident = (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
        if ident in seen:
            errs.append(f"duplicate object {ident}")
        seen.add(ident)
        errs.extend(validate_manifest(d))
    for dep in find(docs, "Deployment"):
        name = dep["metadata"]["name"]
        pod = dep["spec"]["template"]["spec"]
        psc = pod.get("securityContext", {})
        if pod.get("hostPID") or pod.get("hostIPC"):
            errs.append(f"{name}: host namespaces")
        for c in pod.get("initContainers", []) + pod["containers"]:
            sc = c.get("securityContext", {})
            run_as_non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
            uid = sc.get("runAsUser", psc.get("runAsUser"))
            if run_as_non_root is not True:
                errs.append(f"{name}/{c['name']}: runAsNonRoot is not true")
            if uid is None or uid == 0:
                errs.append(f"{name}/{c['name']}: runAsUser is {uid!r} (must be a non-zero uid)")
            if sc.get("privileged"):
                errs.append(f"{name}/{c['name']}: privileged")
            if sc.get("allowPrivilegeEscalation") is not False:
                errs.append(f"{name}/{c['name']}: allowPrivilegeEscalation is not false")
            if sc.get("readOnlyRootFilesystem") is not True:
                errs.append(f"{name}/{c['name']}: root filesystem is writable")
            if "ALL" not in sc.get("capabilities", {}).get("drop", []) or sc.get("capabilities", {}).get("add"):
                errs.append(f"{name}/{c['name']}: capabilities are not dropped")
            seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type")
            if seccomp not in ("RuntimeDefault", "Localhost"):
                errs.append(f"{name}/{c['name']}: seccomp profile {seccomp!r}")
            if not c.get("resources", {}).get("requests"):
                errs.append(f"{name}/{c['name']}: no resource requests")
        # SIGTERM handling (final checkpoints, releasing the leader lease) must end before the kubelet kills.
        for a in args(dep):
            if a.startswith("--shutdown-timeout="):
                timeout = a.split("=", 1)[1]
                if not timeout.endswith("s") or not timeout[:-1].isdigit():
                    errs.append(f"{name}: --shutdown-timeout={timeout} is not whole seconds")
                elif pod.get("terminationGracePeriodSeconds", 30) <= int(timeout[:-1]):
                    errs.append(f"{name}: terminationGracePeriodSeconds {pod.get('terminationGracePeriodSeconds', 30)}"
                                f" does not exceed --shutdown-timeout={timeout}")
    for cfg in find(docs, "MutatingWebhookConfiguration") + find(docs, "ValidatingWebhookConfiguration"):
        for w in cfg["webhooks"]:
            where = f"{cfg['metadata']['name']}/{w['name']}"
            if w.get("sideEffects") != "None":
                errs.append(f"{where}: sideEffects {w.get('sideEffects')!r}")
            if w.get("admissionReviewVersions") != ["v1"]:
                errs.append(f"{where}: admissionReviewVersions {w.get('admissionReviewVersions')!r}")
            if w.get("matchPolicy") != "Equivalent":
                errs.append(f"{where}: matchPolicy {w.get('matchPolicy')!r}")
            if not 1 <= w.get("timeoutSeconds", 10) <= 5:
                errs.append(f"{where}: timeoutSeconds {w.get('timeoutSeconds')!r} (must be 1..5)")
            if any("pods" in r.get("resources", []) for r in w.get("rules", [])):
                excluded = set()
                for e in w.get("namespaceSelector", {}).get("matchExpressions", []):
                    if e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "NotIn":
                        excluded |= set(e["values"])
                for ns in (namespace, "kube-system"):
                    if ns not in excluded:
                        errs.append(f"{where}: namespaceSelector does not exclude {ns}")
    for role in find(docs, "ClusterRole") + find(docs, "Role"):
        for rule in role.get("rules", []):
            if "*" in rule.get("verbs", []):
                errs.append(f"{role['kind']}/{role['metadata']['name']}: wildcard verb")
            # create cannot be limited by name: a namespaced Role may grant it alone.
            if ("secrets" in rule.get("resources", []) and not rule.get("resourceNames")
                    and (role["kind"] == "ClusterRole" or set(rule.get("verbs", [])) != {"create"})):
                errs.append(f"{role['kind']}/{role['metadata']['name']}: secrets without resourceNames")
    return errs


# --- the matrix -------------------------------------------------------------------------------------

CA_PEM = """-----BEGIN CERTIFICATE-----
MIIBdzCCAR2gAwIBAgIUJ0nZ0aXhQ0d5c3RlbS10ZXN0LWNhMAoGCCqGSM49BAMC
-----END CERTIFICATE-----"""

SELF_OFF = {"selfManaged": {"enabled": False}}


def expect_defaults(docs: list[dict]) -> None:
    cfg = one(docs, "MutatingWebhookConfiguration", f"{RELEASE}-admission")
    names = [w["name"] for w in cfg["webhooks"]]
    assert names == ["pods.admission.tailor.dev", "vpa.admission.tailor.dev"], names
    for w in cfg["webhooks"]:
        assert w["failurePolicy"] == "Ignore", f"{w['name']}: failurePolicy {w['failurePolicy']}"
        assert w["clientConfig"]["service"]["namespace"] == NAMESPACE
        assert w["clientConfig"]["service"]["name"] == f"{RELEASE}-admission"
    pods, vpas = cfg["webhooks"]
    assert pods["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                              "resources": ["pods"], "scope": "Namespaced"}], pods["rules"]
    assert vpas["rules"][0]["apiGroups"] == ["autoscaling.tailor.dev"]
    assert vpas["rules"][0]["resources"] == ["verticalpodautoscalers"]
    assert sorted(vpas["rules"][0]["operations"]) == ["CREATE", "UPDATE"]
    assert "objectSelector" not in pods
    adm = deployment(docs, "admission")
    assert adm["spec"]["replicas"] == 2
    anti = adm["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert "preferredDuringSchedulingIgnoredDuringExecution" in anti, anti
    pdb = one(docs, "PodDisruptionBudget", f"{RELEASE}-admission")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == adm["spec"]["selector"]["matchLabels"]
    rec = deployment(docs, "recommender")
    assert rec["spec"]["replicas"] == 1 and rec["spec"]["strategy"]["type"] == "Recreate"
    assert not any(a.startswith("--leader-elect") for a in args(rec)), args(rec)
    assert not find(docs, "PodDisruptionBudget", f"{RELEASE}-recommender"), "PDB for a single recommender"
    for a in ["--address=:8942", "--recommender-interval=1m", "--log-format=json", "--recommender-name=default",
              "--shutdown-timeout=20s"]:
        assert a in args(rec), f"recommender lacks {a}: {args(rec)}"
    for a in ["--port=8000", "--address=:8944", "--webhook-timeout-seconds=5"]:
        assert a in args(adm), f"admission lacks {a}: {args(adm)}"
    assert container(adm)["image"] == "ghcr.io/tailor-dev/tailor-admission:0.1.0", container(adm)["image"]
    # Services route to the named ports.
    svc = one(docs, "Service", f"{RELEASE}-admission")
    assert {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"} in svc["spec"]["ports"]
    # Recommender RBAC: what the loop needs and nothing cluster-wide on secrets.
    cr = one(docs, "ClusterRole", f"{RELEASE}-recommender")
    granted = {(g, r, v) for rule in cr["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    for need in [("", "pods", "watch"), ("metrics.k8s.io", "pods", "list"),
                 ("autoscaling.tailor.dev", "verticalpodautoscalers/status", "patch"),
                 ("autoscaling.tailor.dev", "verticalpodautoscalercheckpoints", "delete"),
                 ("autoscaling.tailor.dev", "verticalpodautoscalercheckpoints", "create"),
                 ("apps", "deployments", "watch"), ("*", "*/scale", "get"), ("", "events", "watch")]:
        assert need in granted, f"recommender ClusterRole lacks {need}"
    # What each component uses, verb by verb, is hack/checks/rbac.sh's check; here only that the recommender
    # writes nothing but its own API and events (on VPAs whose checkpoint it could not restore).
    writes = {(g, r) for g, r, v in granted if v not in ("get", "list", "watch")}
    assert writes == {("autoscaling.tailor.dev", "verticalpodautoscalers/status"),
                      ("autoscaling.tailor.dev", "verticalpodautoscalercheckpoints"),
                      ("events.k8s.io", "events")}, f"recommender writes {writes}"
    cra = one(docs, "ClusterRole", f"{RELEASE}-admission")
    assert not any("verticalpodautoscalers/status" in r["resources"] for r in cra["rules"])
    # Writes: its webhook configuration (self-managed certificates) and Events on VPAs (PodAdmittedUnsized,
    # QuotaFit).
    assert not any(set(r["verbs"]) - {"get", "list", "watch"} for r in cra["rules"]
                   if not {"admissionregistration.k8s.io", "events.k8s.io"} & set(r["apiGroups"])), \
        "admission may write more than its webhook and its events"
    expect_quota_fit(docs, enabled=True)
    # The webhook's status Lease: flags and a Role limited to that Lease in the release namespace.
    for a in ["--status-lease-name=tailor-admission", f"--status-lease-namespace={NAMESPACE}",
              "--status-lease-update-interval=3s"]:
        assert a in args(adm), f"admission lacks {a}: {args(adm)}"
    lease_role = one(docs, "Role", f"{RELEASE}-admission-status-lease")
    assert lease_role["metadata"]["namespace"] == NAMESPACE
    assert lease_role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["tailor-admission"],
         "verbs": ["get", "update"]}], lease_role["rules"]
    binding = one(docs, "RoleBinding", f"{RELEASE}-admission-status-lease")
    assert binding["subjects"][0]["name"] == f"{RELEASE}-admission"
    expect_updater_defaults(docs)


UPDATER_DEFAULT_ARGS = [
    "--address=:8943", "--updater-interval=1m", "--min-replicas=2", "--eviction-tolerance=0.5",
    "--eviction-rate-limit=-1", "--eviction-rate-burst=1", "--pod-update-threshold=0.1",
    "--in-recommendation-bounds-eviction-lifetime-threshold=12h", "--evict-after-oom-threshold=10m",
    "--use-admission-controller-status=true", "--admission-controller-status-lease-name=tailor-admission",
    f"--admission-controller-status-lease-namespace={NAMESPACE}", "--admission-controller-status-lease-timeout=10s",
    "--log-format=json", "--log-level=info", "--shutdown-timeout=20s",
    f"--webhook-excluded-namespaces={NAMESPACE},kube-system",
    "--daemonset-max-unavailable=1", "--evict-job-pods=false",
]


def expect_updater_defaults(docs: list[dict]) -> None:
    upd = deployment(docs, "updater")
    assert upd["spec"]["replicas"] == 1 and upd["spec"]["strategy"]["type"] == "Recreate", upd["spec"]["strategy"]
    a = args(upd)
    assert sorted(a) == sorted(UPDATER_DEFAULT_ARGS), f"updater args {a}"
    c = container(upd)
    assert c["image"] == "ghcr.io/tailor-dev/tailor-updater:0.1.0", c["image"]
    assert c["ports"] == [{"name": "metrics", "containerPort": 8943, "protocol": "TCP"}], c["ports"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}, c["livenessProbe"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}, c["readinessProbe"]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") or e.get("value") for e in c["env"]}
    # The allocator setting the updater was measured with (hack/bench-updater.sh): lazy commit, default purge delay.
    assert env == {"NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name",
                   "MIMALLOC_ARENA_EAGER_COMMIT": "0"}, env
    assert not find(docs, "PodDisruptionBudget", f"{RELEASE}-updater"), "PDB for a single updater"
    svc = one(docs, "Service", f"{RELEASE}-updater")
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 8943, "targetPort": "metrics", "protocol": "TCP"}]
    cr = one(docs, "ClusterRole", f"{RELEASE}-updater")
    granted = {(g, r, v) for rule in cr["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    need = {("", "pods", v) for v in ("list", "watch", "patch")} | {
        ("", "pods/eviction", "create"), ("", "pods/resize", "patch"),
        ("events.k8s.io", "events", "create"), ("events.k8s.io", "events", "patch"),
        ("", "limitranges", "watch"), ("autoscaling.tailor.dev", "verticalpodautoscalers", "watch"),
        ("apps", "deployments", "list"), ("apps", "replicasets", "list"), ("apps", "statefulsets", "list"),
        ("apps", "daemonsets", "list"), ("", "replicationcontrollers", "list"), ("batch", "jobs", "list"),
        ("batch", "cronjobs", "list"), ("*", "*/scale", "get"),
        ("autoscaling.tailor.dev", "verticalpodautoscalers/status", "patch")}
    assert need <= granted, f"updater ClusterRole lacks {sorted(need - granted)}"
    writes = {(g, r, v) for g, r, v in granted if v not in ("get", "list", "watch")}
    assert writes == {("", "pods", "patch"), ("", "pods/eviction", "create"), ("", "pods/resize", "patch"),
                      ("events.k8s.io", "events", "create"), ("events.k8s.io", "events", "patch"),
                      ("autoscaling.tailor.dev", "verticalpodautoscalers/status", "patch")}, \
        f"updater may write more than it needs: {writes}"
    assert not any("poddisruptionbudgets" in r["resources"] or "secrets" in r["resources"] for r in cr["rules"])
    role = one(docs, "Role", f"{RELEASE}-updater-leases")
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "resourceNames": ["tailor-admission"], "verbs": ["get"]}], role["rules"]
    one(docs, "RoleBinding", f"{RELEASE}-updater-leases")


def expect_self_managed(docs: list[dict]) -> None:
    adm = deployment(docs, "admission")
    a = args(adm)
    for flag in ["--self-signed-certs", f"--cert-secret={RELEASE}-admission-tls",
                 f"--webhook-config-name={RELEASE}-admission", f"--webhook-service={RELEASE}-admission"]:
        assert flag in a, f"missing {flag}: {a}"
    assert not any(x.startswith("--tls-cert-file") for x in a)
    secret = one(docs, "Secret", f"{RELEASE}-admission-tls")
    assert "data" not in secret and "stringData" not in secret, "the placeholder Secret must carry no data"
    role = one(docs, "Role", f"{RELEASE}-admission-certs")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [f"{RELEASE}-admission-tls"],
         "verbs": ["get", "list", "watch", "update"]}], role["rules"]
    cr = one(docs, "ClusterRole", f"{RELEASE}-admission")
    hook_rules = [r for r in cr["rules"] if "mutatingwebhookconfigurations" in r["resources"]]
    assert hook_rules and all(r.get("resourceNames") == [f"{RELEASE}-admission"] for r in hook_rules), hook_rules
    cfg = one(docs, "MutatingWebhookConfiguration")
    assert "cert-manager.io/inject-ca-from" not in cfg["metadata"].get("annotations", {})
    assert not find(docs, "Certificate")


def expect_cert_manager(issuer: bool) -> Callable[[list[dict]], None]:
    def f(docs: list[dict]) -> None:
        cfg = one(docs, "MutatingWebhookConfiguration")
        ann = cfg["metadata"].get("annotations", {})
        assert ann.get("cert-manager.io/inject-ca-from") == f"{NAMESPACE}/{RELEASE}-admission-tls", ann
        assert all("caBundle" not in w["clientConfig"] for w in cfg["webhooks"])
        cert = one(docs, "Certificate", f"{RELEASE}-admission-tls")
        assert f"{RELEASE}-admission.{NAMESPACE}.svc" in cert["spec"]["dnsNames"], cert["spec"]["dnsNames"]
        assert cert["spec"]["secretName"] == f"{RELEASE}-admission-tls"
        if issuer:
            assert cert["spec"]["issuerRef"] == {"name": "letsencrypt-internal", "kind": "ClusterIssuer"}
            assert not find(docs, "Issuer"), "no Issuer should be created when issuerRef is given"
        else:
            assert cert["spec"]["issuerRef"]["name"] == f"{RELEASE}-admission-ca"
            assert len(find(docs, "Issuer")) == 2 and find(docs, "Certificate", f"{RELEASE}-admission-ca")
        adm = deployment(docs, "admission")
        a = args(adm)
        assert "--tls-cert-file=/etc/tls-certs/tls.crt" in a and "--reload-cert" in a, a
        assert "--self-signed-certs" not in a
        vols = adm["spec"]["template"]["spec"]["volumes"]
        assert {"name": "tls-certs", "secret": {"secretName": f"{RELEASE}-admission-tls"}} in vols, vols
        mounts = container(adm)["volumeMounts"]
        assert any(m["mountPath"] == "/etc/tls-certs" and "subPath" not in m for m in mounts), mounts
        assert not find(docs, "Secret"), "cert-manager creates the Secret"
        assert not find(docs, "Role", f"{RELEASE}-admission-certs")
        cr = one(docs, "ClusterRole", f"{RELEASE}-admission")
        assert not any("mutatingwebhookconfigurations" in r["resources"] for r in cr["rules"])
    return f


def expect_existing_secret(pem: bool) -> Callable[[list[dict]], None]:
    def f(docs: list[dict]) -> None:
        cfg = one(docs, "MutatingWebhookConfiguration")
        want = base64.b64encode((CA_PEM + "\n").encode()).decode()
        for w in cfg["webhooks"]:
            assert w["clientConfig"].get("caBundle") == want, w["clientConfig"].get("caBundle")
        assert "cert-manager.io/inject-ca-from" not in cfg["metadata"].get("annotations", {})
        adm = deployment(docs, "admission")
        vols = adm["spec"]["template"]["spec"]["volumes"]
        assert {"name": "tls-certs", "secret": {"secretName": "my-webhook-tls"}} in vols, vols
        assert not find(docs, "Secret") and not find(docs, "Certificate")
    return f


GLOBAL_SCHED = {
    "global": {
        "nodeSelector": {"pool": "system", "kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["infra"]}]}]}}},
        "labels": {"team": "platform", "cost-center": "global"},
        "annotations": {"owner": "global", "shared": "global"},
        "imageRegistry": "registry.example.com/mirror",
        "imagePullSecrets": ["global-pull"],
    },
    "recommender": {
        "nodeSelector": {"pool": "recommender"},
        "tolerations": [{"key": "recommender", "operator": "Exists", "effect": "NoSchedule"}],
        "podLabels": {"cost-center": "vpa"},
        "podAnnotations": {"shared": "pod"},
        "deploymentAnnotations": {"owner": "deployment"},
        "priorityClassName": "system-cluster-critical",
        "imagePullSecrets": [{"name": "rec-pull"}],
        "image": {"registry": "other.example.com", "tag": "v9"},
        "extraArgs": {"target-cpu-percentile": 0.85, "log-format": "text", "update-worker-count": False},
        "extraEnv": [{"name": "RUST_LOG", "value": "debug"}],
        "serviceAccount": {"annotations": {"iam.example.com/role": "tailor"}},
    },
    "updater": {
        "nodeSelector": {"kubernetes.io/os": "windows-never"},
        "podLabels": {"team": "autoscaling"},
        "extraArgs": {"updater-interval": "30s", "log-format": False},
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
    },
    "admission": {
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}]}},
        "podAntiAffinityPreset": "hard",
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                       "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "admission"}}}],
        "image": {"digest": "sha256:" + "a" * 64},
    },
}


def expect_scheduling(docs: list[dict]) -> None:
    rec = deployment(docs, "recommender")
    pod = rec["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "recommender", "kubernetes.io/os": "linux"}, pod["nodeSelector"]
    assert [t["key"] for t in pod["tolerations"]] == ["dedicated", "recommender"], pod["tolerations"]
    assert pod["affinity"] == GLOBAL_SCHED["global"]["affinity"], pod["affinity"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["imagePullSecrets"] == [{"name": "global-pull"}, {"name": "rec-pull"}], pod["imagePullSecrets"]
    labels = rec["spec"]["template"]["metadata"]["labels"]
    assert labels["team"] == "platform" and labels["cost-center"] == "vpa", labels
    assert labels["app.kubernetes.io/component"] == "recommender"
    assert rec["spec"]["template"]["metadata"]["annotations"] == {"owner": "global", "shared": "pod"}
    assert rec["metadata"]["annotations"] == {"owner": "deployment", "shared": "global"}, rec["metadata"]
    assert rec["metadata"]["labels"]["team"] == "platform"
    assert container(rec)["image"] == "other.example.com/tailor-dev/tailor-recommender:v9", container(rec)["image"]
    a = args(rec)
    assert "--target-cpu-percentile=0.85" in a and "--log-format=text" in a and "--log-format=json" not in a, a
    assert not any(x.startswith("--update-worker-count") for x in a), a
    assert {"name": "RUST_LOG", "value": "debug"} in container(rec)["env"]
    sa = one(docs, "ServiceAccount", f"{RELEASE}-recommender")
    assert sa["metadata"]["annotations"] == {"iam.example.com/role": "tailor"}
    adm = deployment(docs, "admission")
    apod = adm["spec"]["template"]["spec"]
    assert apod["nodeSelector"] == GLOBAL_SCHED["global"]["nodeSelector"]
    assert [t["key"] for t in apod["tolerations"]] == ["dedicated"]
    aff = apod["affinity"]
    assert aff["nodeAffinity"] == GLOBAL_SCHED["admission"]["affinity"]["nodeAffinity"], "component nodeAffinity wins"
    assert "requiredDuringSchedulingIgnoredDuringExecution" in aff["podAntiAffinity"], aff
    assert apod["topologySpreadConstraints"][0]["maxSkew"] == 1
    assert container(adm)["image"] == "registry.example.com/mirror/tailor-dev/tailor-admission@sha256:" + "a" * 64
    upd = deployment(docs, "updater")
    upod = upd["spec"]["template"]["spec"]
    assert upod["nodeSelector"] == {"pool": "system", "kubernetes.io/os": "windows-never"}, upod["nodeSelector"]
    assert [t["key"] for t in upod["tolerations"]] == ["dedicated"], upod["tolerations"]
    assert upod["affinity"] == GLOBAL_SCHED["global"]["affinity"], upod["affinity"]
    assert upod["imagePullSecrets"] == [{"name": "global-pull"}], upod["imagePullSecrets"]
    assert upd["spec"]["template"]["metadata"]["labels"]["team"] == "autoscaling"
    assert upd["spec"]["template"]["metadata"]["annotations"] == {"owner": "global", "shared": "global"}
    assert container(upd)["image"] == "registry.example.com/mirror/tailor-dev/tailor-updater:0.1.0"
    # Helm merges maps: the component's requests replace the defaults, the default limit stays.
    assert container(upd)["resources"] == {"requests": {"cpu": "10m", "memory": "64Mi"},
                                           "limits": {"memory": "1Gi"}}, container(upd)["resources"]
    ua = args(upd)
    assert "--updater-interval=30s" in ua and "--updater-interval=1m" not in ua, ua
    assert not any(x.startswith("--log-format") for x in ua), ua
    for d in docs:
        assert d["metadata"].get("labels", {}).get("team") == "platform", f"{d['kind']} lacks global label"


def expect_only(component: str) -> Callable[[list[dict]], None]:
    def f(docs: list[dict]) -> None:
        assert deployment(docs, component)
        for d in docs:
            comp = d["metadata"].get("labels", {}).get("app.kubernetes.io/component")
            assert comp == component, f"{d['kind']}/{d['metadata']['name']} belongs to {comp}"
        for other in COMPONENTS:
            if other != component:
                assert not find(docs, "Deployment", f"{RELEASE}-{other}")
        if component != "admission":
            assert not find(docs, "MutatingWebhookConfiguration")
    return f


ONLY = {c: {o: {"enabled": False} for o in COMPONENTS if o != c} for c in COMPONENTS}
# Without the webhook in the release, the updater must not wait for its status Lease.
ONLY["updater"]["updater"] = {"admissionControllerStatus": {"enabled": False}}


def expect_updater_alone(docs: list[dict]) -> None:
    expect_only("updater")(docs)
    a = args(deployment(docs, "updater"))
    assert "--use-admission-controller-status=false" in a, a
    assert not any(x.startswith("--admission-controller-status-lease") for x in a), a
    assert not find(docs, "Role"), "no Lease to read and no leader election: no Role"


def expect_updater_options(docs: list[dict]) -> None:
    upd = deployment(docs, "updater")
    a = args(upd)
    for flag in ["--leader-elect", "--leader-elect-lease-name=tailor-updater",
                 f"--leader-elect-lease-namespace={NAMESPACE}", "--feature-gates=InPlace=true,CPUStartupBoost=false",
                 "--ignored-vpa-object-namespaces=kube-public,sandbox", "--in-place-skip-disruption-budget",
                 "--eviction-rate-limit=0.5", "--eviction-rate-burst=3", "--min-replicas=1",
                 "--in-recommendation-bounds-eviction-lifetime-threshold=1m", "--log-level=info,tailor_updater=debug",
                 "--admission-controller-status-lease-name=webhook-alive"]:
        assert flag in a, f"missing {flag}: {a}"
    assert "--status-lease-name=webhook-alive" in args(deployment(docs, "admission")), "webhook and updater disagree"
    assert not any(x.startswith("--vpa-object-namespace") for x in a), a
    assert upd["spec"]["strategy"]["type"] == "RollingUpdate"
    role = one(docs, "Role", f"{RELEASE}-updater-leases")
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]} in role["rules"]
    named = {r["resourceNames"][0]: r["verbs"] for r in role["rules"] if r.get("resourceNames")}
    assert named == {"webhook-alive": ["get"], "tailor-updater": ["get", "update"]}, named
    adm_role = one(docs, "Role", f"{RELEASE}-admission-status-lease")
    assert adm_role["rules"][1]["resourceNames"] == ["webhook-alive"], adm_role["rules"]
    pdb = one(docs, "PodDisruptionBudget", f"{RELEASE}-updater")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == upd["spec"]["selector"]["matchLabels"]


def expect_leader_election(docs: list[dict]) -> None:
    rec = deployment(docs, "recommender")
    a = args(rec)
    assert "--leader-elect" in a and "--leader-elect-lease-name=tailor-recommender" in a, a
    assert rec["spec"]["strategy"]["type"] == "RollingUpdate"
    role = one(docs, "Role", f"{RELEASE}-recommender-leader-election")
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named and named[0]["resourceNames"] == ["tailor-recommender"], role["rules"]
    one(docs, "RoleBinding", f"{RELEASE}-recommender-leader-election")
    pdb = one(docs, "PodDisruptionBudget", f"{RELEASE}-recommender")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": pdb["spec"]["selector"]}, pdb["spec"]


def expect_webhook_options(docs: list[dict]) -> None:
    cfg = one(docs, "MutatingWebhookConfiguration")
    pods = cfg["webhooks"][0]
    assert pods["failurePolicy"] == "Fail" and pods["timeoutSeconds"] == 3
    assert pods["objectSelector"] == {"matchExpressions": [
        {"key": "tailor.dev/skip", "operator": "DoesNotExist"}]}, pods.get("objectSelector")
    values = pods["namespaceSelector"]["matchExpressions"][0]["values"]
    assert values == ["other-ns", "kube-system", "monitoring"], values
    assert pods["namespaceSelector"]["matchLabels"] == {"tailor.dev/enabled": "true"}
    assert pods["matchConditions"][0]["name"] == "not-a-job"
    assert cfg["metadata"]["annotations"] == {"example.com/owner": "platform"}
    assert "--webhook-timeout-seconds=3" in args(deployment(docs, "admission"))
    # The updater leaves alone what the webhook never sizes (docs/decisions/webhook-scope.md): the same
    # namespaces and selector.
    ua = args(deployment(docs, "updater"))
    assert "--webhook-excluded-namespaces=other-ns,kube-system,monitoring" in ua, ua
    assert '--webhook-object-selector={"matchExpressions":[{"key":"tailor.dev/skip","operator":"DoesNotExist"}]}' \
        in ua, ua
    assert '--webhook-namespace-selector={"matchLabels":{"tailor.dev/enabled":"true"}}' in ua, ua
    cr = one(docs, "ClusterRole", f"{RELEASE}-updater")
    assert {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]} in cr["rules"], cr["rules"]


def expect_service_monitor(docs: list[dict]) -> None:
    sms = find(docs, "ServiceMonitor")
    assert {s["metadata"]["name"] for s in sms} == {f"{RELEASE}-{c}" for c in COMPONENTS}
    for s in sms:
        assert s["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert s["spec"]["endpoints"][0]["port"] == "metrics"
        svc = one(docs, "Service", s["metadata"]["name"])
        assert any(p["name"] == "metrics" for p in svc["spec"]["ports"])
        assert s["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]


def expect_sigv4(docs: list[dict]) -> None:
    a = args(deployment(docs, "recommender"))
    for flag in ("--prometheus-address=https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-1",
                 "--prometheus-sigv4", "--prometheus-sigv4-region=eu-west-1", "--prometheus-sigv4-service=aps"):
        assert flag in a, a
    sa = one(docs, "ServiceAccount", f"{RELEASE}-recommender")
    assert sa["metadata"]["annotations"] == {"example.com/team": "platform",
                                             "eks.amazonaws.com/role-arn": ROLE_ARN}, sa["metadata"]
    assert "annotations" not in one(docs, "ServiceAccount", f"{RELEASE}-admission")["metadata"]


ROLE_ARN = "arn:aws:iam::123456789012:role/tailor-amp-query"


def recommender_reads(docs: list[dict]) -> set[tuple[str, str]]:
    cr = one(docs, "ClusterRole", f"{RELEASE}-recommender")
    return {(g, r) for rule in cr["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            if set(rule["verbs"]) == {"list", "watch"}}


SIZING_READS = {("", "nodes"), ("karpenter.sh", "nodepools"), ("autoscaling", "horizontalpodautoscalers")}


def expect_sizing_defaults(docs: list[dict]) -> None:
    """Sizing within the cluster (node fit, NodePools, HPA coherence) on; read-only grants; no flags or ConfigMap."""
    assert SIZING_READS <= recommender_reads(docs), recommender_reads(docs)
    a = args(deployment(docs, "recommender"))
    assert not [x for x in a if x.startswith(("--node-fit", "--hpa-coherence"))], a
    assert not find(docs, "ConfigMap", f"{RELEASE}-recommender-instance-types")


def expect_sizing_off(docs: list[dict]) -> None:
    a = args(deployment(docs, "recommender"))
    assert "--node-fit=false" in a and "--hpa-coherence=false" in a, a
    assert not SIZING_READS & recommender_reads(docs), recommender_reads(docs)


def reads_quotas(docs: list[dict], component: str) -> bool:
    role = one(docs, "ClusterRole", f"{RELEASE}-{component}")
    return any("resourcequotas" in r["resources"] and set(r["verbs"]) == {"list", "watch"}
               and r["apiGroups"] == [""] for r in role["rules"])


def expect_quota_fit(docs: list[dict], enabled: bool) -> None:
    """Quota fit (docs/decisions/quota-fit.md): webhook and updater read ResourceQuotas, or are told not to."""
    for component in ("admission", "updater"):
        a = args(deployment(docs, component))
        assert ("--quota-fit=false" not in a) == enabled, (component, a)
        assert reads_quotas(docs, component) == enabled, component
    # Events on VPAs (PodAdmittedUnsized, and QuotaFit when enabled) are written either way.
    events = [r for r in one(docs, "ClusterRole", f"{RELEASE}-admission")["rules"]
              if "events.k8s.io" in r["apiGroups"]]
    assert events and all(set(r["verbs"]) == {"create", "patch"} for r in events), events


def expect_quota_fit_off(docs: list[dict]) -> None:
    expect_quota_fit(docs, enabled=False)


def expect_pod_level_resources(enabled: bool) -> Callable[[list[dict]], None]:
    """`podLevelResources.enabled` passes `--pod-level-resources` to all three components, or to none."""
    def check(docs: list[dict]) -> None:
        for component in ("recommender", "admission", "updater"):
            a = args(deployment(docs, component))
            assert ("--pod-level-resources=true" in a) == enabled, (component, a)
            assert not any(x.startswith("--pod-level-resources") and x != "--pod-level-resources=true"
                           for x in a), (component, a)
    return check


def expect_instance_types(docs: list[dict]) -> None:
    rec = deployment(docs, "recommender")
    assert "--node-fit-instance-types=/etc/tailor/instance-types/instance-types.yaml" in args(rec), args(rec)
    cm = one(docs, "ConfigMap", f"{RELEASE}-recommender-instance-types")
    table = yaml.safe_load(cm["data"]["instance-types.yaml"])
    assert table == [{"name": "big.metal", "cpu": "190", "memory": "700Gi"}], table
    volumes = rec["spec"]["template"]["spec"]["volumes"]
    assert {"name": "instance-types", "configMap": {"name": cm["metadata"]["name"]}} in volumes, volumes
    assert ("karpenter.sh", "nodepools") in recommender_reads(docs)


FLEET_READS = {("", "namespaces"), ("argoproj.io", "rollouts"), ("autoscaling.k8s.io", "verticalpodautoscalers")}


def recommender_vpa_writes(docs: list[dict]) -> set[str]:
    cr = one(docs, "ClusterRole", f"{RELEASE}-recommender")
    return {v for rule in cr["rules"] if rule["apiGroups"] == ["autoscaling.tailor.dev"]
            and rule["resources"] == ["verticalpodautoscalers"] for v in rule["verbs"]}


def expect_fleet_off(docs: list[dict]) -> None:
    """Fleet onboarding off by default: no flag, no namespace read, no VPA writes."""
    a = args(deployment(docs, "recommender"))
    assert not [x for x in a if x.startswith("--fleet")], a
    assert not FLEET_READS & recommender_reads(docs), recommender_reads(docs)
    assert recommender_vpa_writes(docs) == {"list", "watch"}, recommender_vpa_writes(docs)


def expect_fleet_on(docs: list[dict]) -> None:
    """Fleet onboarding on: its flags (repeatable ones once per value), its reads and its VPA writes."""
    a = args(deployment(docs, "recommender"))
    for flag in ("--fleet-enabled", "--fleet-qps=7", "--fleet-burst=10", "--fleet-default-mode=Initial",
                 "--fleet-namespace-selector=env in (dev)", "--fleet-resync-interval=30s",
                 "--fleet-allow-namespace=kube-system", "--fleet-kind=example.com/v1/Widget"):
        assert flag in a, (flag, a)
    assert FLEET_READS | {("example.com", "widgets")} <= recommender_reads(docs), recommender_reads(docs)
    assert recommender_vpa_writes(docs) == {"list", "watch", "create", "patch", "delete"}


def expect_dashboard(enabled: bool) -> Callable[[list[dict]], None]:
    """The dashboard: on by default on its own port and Service, off without either; no new RBAC."""
    def check(docs: list[dict]) -> None:
        rec = deployment(docs, "recommender")
        a = args(rec)
        ports = {p["name"]: p["containerPort"] for p in rec["spec"]["template"]["spec"]["containers"][0]["ports"]}
        services = [d for d in find(docs, "Service") if d["metadata"]["name"] == f"{RELEASE}-dashboard"]
        if enabled:
            assert "--dashboard-address=:8943" in a and ports.get("dashboard") == 8943, (a, ports)
            assert "--price-vcpu-hour=0.021811" in a and "--price-currency=USD" in a, a
            assert len(services) == 1 and services[0]["spec"]["type"] == "ClusterIP", services
            assert services[0]["spec"]["ports"][0]["port"] == 8943 != rec_metrics_port(rec)
        else:
            assert not [x for x in a if x.startswith(("--dashboard", "--price"))], a
            assert "dashboard" not in ports and not services, (ports, services)
    return check


def expect_family_prices(docs: list[dict]) -> None:
    """Each instance family's prices become one --price-instance-family flag; still no RBAC of its own."""
    a = args(deployment(docs, "recommender"))
    fams = sorted(x for x in a if x.startswith("--price-instance-family="))
    assert fams == ["--price-instance-family=c7g=0.018/0.0025", "--price-instance-family=m6i=0.024/0.003"], a
    expect_dashboard(True)(docs)


def rec_metrics_port(rec: dict) -> int:
    ports = rec["spec"]["template"]["spec"]["containers"][0]["ports"]
    return next(p["containerPort"] for p in ports if p["name"] == "metrics")


def expect_no_rbac(docs: list[dict]) -> None:
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}, kinds
    assert not find(docs, "ServiceAccount")
    for comp in COMPONENTS:
        assert deployment(docs, comp)["spec"]["template"]["spec"]["serviceAccountName"] == "existing-sa"


MATRIX: list[tuple[str, dict, Callable[[list[dict]], None] | None, str]] = [
    ("defaults (self-managed certificates)", {},
     lambda d: (expect_defaults(d), expect_self_managed(d), expect_sizing_defaults(d)), NAMESPACE),
    ("recommender: node fit and HPA coherence off", {"recommender": {
        "nodeFit": {"enabled": False}, "hpaCoherence": {"enabled": False}}}, expect_sizing_off, NAMESPACE),
    ("quota fit off", {"quotaFit": {"enabled": False}}, expect_quota_fit_off, NAMESPACE),
    ("pod-level resources off (default)", {}, expect_pod_level_resources(False), NAMESPACE),
    ("pod-level resources on", {"podLevelResources": {"enabled": True}}, expect_pod_level_resources(True),
     NAMESPACE),
    ("fleet onboarding off (default)", {}, expect_fleet_off, NAMESPACE),
    ("dashboard on (default)", {}, expect_dashboard(True), NAMESPACE),
    ("dashboard off", {"dashboard": {"enabled": False}}, expect_dashboard(False), NAMESPACE),
    ("dashboard: prices per instance family", {"dashboard": {"prices": {"instanceFamilies": {
        "m6i": {"vcpuHour": 0.024, "gibHour": 0.003}, "c7g": {"vcpuHour": "0.018", "gibHour": 0.0025}}}}},
     expect_family_prices, NAMESPACE),
    ("fleet onboarding on, with its options", {"fleet": {
        "enabled": True, "qps": 7, "defaultMode": "Initial", "namespaceSelector": "env in (dev)",
        "allowNamespaces": ["kube-system"],
        "kinds": [{"apiVersion": "example.com/v1", "kind": "Widget", "resource": "widgets"}]}},
     expect_fleet_on, NAMESPACE),
    ("recommender: NodePool instance types from values", {"recommender": {"nodeFit": {"karpenter": {
        "instanceTypes": [{"name": "big.metal", "cpu": "190", "memory": "700Gi"}]}}}},
     expect_instance_types, NAMESPACE),
    ("cert-manager, chart-made CA", {"admission": {"tls": {**SELF_OFF, "certManager": {"enabled": True}}}},
     expect_cert_manager(issuer=False), NAMESPACE),
    ("cert-manager, given ClusterIssuer", {"admission": {"tls": {**SELF_OFF, "certManager": {
        "enabled": True, "issuerRef": {"name": "letsencrypt-internal", "kind": "ClusterIssuer"}}}}},
     expect_cert_manager(issuer=True), NAMESPACE),
    ("existing Secret, caBundle as PEM", {"admission": {"tls": {**SELF_OFF, "existingSecret": {
        "name": "my-webhook-tls", "caBundle": CA_PEM}}}}, expect_existing_secret(pem=True), NAMESPACE),
    ("existing Secret, caBundle as base64", {"admission": {"tls": {**SELF_OFF, "existingSecret": {
        "name": "my-webhook-tls", "caBundle": base64.b64encode((CA_PEM + "\n").encode()).decode()}}}},
     expect_existing_secret(pem=False), NAMESPACE),
    ("global + component scheduling and metadata", GLOBAL_SCHED, expect_scheduling, NAMESPACE),
    ("recommender only", ONLY["recommender"], expect_only("recommender"), NAMESPACE),
    ("admission only", ONLY["admission"], expect_only("admission"), NAMESPACE),
    ("updater only, without the webhook's status Lease", ONLY["updater"], expect_updater_alone, NAMESPACE),
    ("updater with 2 replicas and its options", {
        "updater": {"replicas": 2, "featureGates": "InPlace=true,CPUStartupBoost=false",
                    "ignoredVpaObjectNamespaces": ["kube-public", "sandbox"], "inPlaceSkipDisruptionBudget": True,
                    "evictionRateLimit": 0.5, "evictionRateBurst": 3, "minReplicas": 1,
                    "inRecommendationBoundsEvictionLifetimeThreshold": "1m", "logLevel": "info,tailor_updater=debug"},
        "admission": {"statusLease": {"name": "webhook-alive"}}}, expect_updater_options, NAMESPACE),
    ("recommender with 2 replicas (leader election)", {"recommender": {"replicas": 2, "pdb": {"maxUnavailable": 1}}},
     expect_leader_election, NAMESPACE),
    ("webhook options in another namespace", {"admission": {"webhook": {
        "failurePolicy": "Fail", "timeoutSeconds": 3, "excludeNamespaces": ["kube-system", "monitoring"],
        "objectSelector": {"matchExpressions": [{"key": "tailor.dev/skip", "operator": "DoesNotExist"}]},
        "namespaceSelector": {"matchLabels": {"tailor.dev/enabled": "true"}},
        "matchConditions": [{"name": "not-a-job", "expression": "!has(object.metadata.ownerReferences)"}],
        "annotations": {"example.com/owner": "platform"}}}}, expect_webhook_options, "other-ns"),
    ("ServiceMonitor", {"serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"},
                                           "relabelings": [{"action": "replace", "targetLabel": "x",
                                                            "replacement": "y"}]}},
     expect_service_monitor, NAMESPACE),
    ("Amazon Managed Prometheus with SigV4 and IRSA", {"recommender": {
        "serviceAccount": {"annotations": {"example.com/team": "platform"}},
        "prometheus": {"address": "https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-1",
                       "sigv4": {"enabled": True, "region": "eu-west-1", "roleArn": ROLE_ARN}}}},
     expect_sigv4, NAMESPACE),
    ("no RBAC, existing ServiceAccounts", {"rbac": {"create": False},
                                           **{c: {"serviceAccount": {"create": False, "name": "existing-sa"}}
                                              for c in COMPONENTS}},
     expect_no_rbac, NAMESPACE),
    ("host network, TLS 1.3, single admission replica",
     {"admission": {"hostNetwork": True, "minTlsVersion": "tls1_3", "replicas": 1}},
     lambda d: (
         assert_(deployment(d, "admission")["spec"]["template"]["spec"]["hostNetwork"] is True, "hostNetwork"),
         assert_("--min-tls-version=tls1_3" in args(deployment(d, "admission")), "tls1_3"),
         assert_(not find(d, "PodDisruptionBudget"), "a PDB for a single replica blocks node drains"),
     ), NAMESPACE),
    # The handshake burst follows connections.max unless set (docs/decisions/handshake-limit.md), so a reconnect
    # storm is served.
    ("handshake limit: burst follows max",
     {"admission": {"connections": {"max": 300, "handshakesPerSecond": 250}}},
     lambda d: expect_args(d, "--max-connections=300", "--handshakes-per-second=250", "--handshake-burst=300"),
     NAMESPACE),
    ("handshake limit: burst set",
     {"admission": {"connections": {"handshakeBurst": 64}}},
     lambda d: expect_args(d, "--max-connections=1024", "--handshakes-per-second=500", "--handshake-burst=64"),
     NAMESPACE),
    # The patch memo (docs/decisions/webhook-review-cost.md) is on by default and can be turned off (0 is
    # passed, not dropped).
    ("patch memo: default", {}, lambda d: expect_args(d, "--patch-memo-mib=4"), NAMESPACE),
    ("patch memo: off", {"admission": {"patchMemoMiB": 0}}, lambda d: expect_args(d, "--patch-memo-mib=0"), NAMESPACE),
]


def assert_(cond: bool, msg: str) -> None:
    assert cond, msg


def expect_args(docs: list[dict], *wanted: str) -> None:
    """The admission container's args include every one of `wanted`."""
    have = args(deployment(docs, "admission"))
    missing = [w for w in wanted if w not in have]
    assert not missing, f"admission args lack {missing}: {have}"


# Invalid values: (name, values, text the failure must contain)
INVALID: list[tuple[str, dict, str]] = [
    ("cert-manager + self-managed", {"admission": {"tls": {"certManager": {"enabled": True}}}},
     "certificate modes are mutually exclusive but certManager.enabled and selfManaged.enabled are set together"),
    ("existing Secret + self-managed", {"admission": {"tls": {"existingSecret": {"name": "s", "caBundle": CA_PEM}}}},
     "certificate modes are mutually exclusive but existingSecret.name and selfManaged.enabled are set together"),
    ("cert-manager + existing Secret", {"admission": {"tls": {**SELF_OFF, "certManager": {"enabled": True},
                                                               "existingSecret": {"name": "s", "caBundle": CA_PEM}}}},
     "certificate modes are mutually exclusive but certManager.enabled and existingSecret.name are set together"),
    ("all three modes", {"admission": {"tls": {"certManager": {"enabled": True},
                                               "existingSecret": {"name": "s", "caBundle": CA_PEM}}}},
     "certManager.enabled and existingSecret.name and selfManaged.enabled are set together"),
    ("no certificate mode", {"admission": {"tls": SELF_OFF}}, "no certificate mode chosen"),
    ("existing Secret without caBundle", {"admission": {"tls": {**SELF_OFF, "existingSecret": {"name": "s"}}}},
     "admission.tls.existingSecret.caBundle is required"),
    ("cert-manager without reloadCert", {"admission": {"tls": {**SELF_OFF, "reloadCert": False,
                                                               "certManager": {"enabled": True}}}},
     "reloadCert=false cannot be used with cert-manager"),
    ("schema: unknown key (typo)", {"admission": {"replica": 3}}, "additional properties 'replica' not allowed"),
    ("schema: failurePolicy", {"admission": {"webhook": {"failurePolicy": "Warn"}}}, "failurePolicy"),
    ("schema: timeoutSeconds above the API maximum", {"admission": {"webhook": {"timeoutSeconds": 31}}},
     "timeoutSeconds"),
    ("schema: bad duration", {"recommender": {"interval": "one minute"}}, "interval"),
    ("schema: eviction tolerance above 1", {"updater": {"evictionTolerance": 1.5}}, "evictionTolerance"),
    ("schema: malformed feature gates", {"updater": {"featureGates": "InPlace=yes"}}, "featureGates"),
    ("recommender grace period not above its shutdown timeout",
     {"recommender": {"terminationGracePeriodSeconds": 20}},
     "recommender.terminationGracePeriodSeconds (20) must exceed recommender.shutdownTimeoutSeconds (20)"),
    ("updater grace period not above its shutdown timeout",
     {"updater": {"shutdownTimeoutSeconds": 45}},
     "updater.terminationGracePeriodSeconds (30) must exceed updater.shutdownTimeoutSeconds (45)"),
    ("updater namespace and ignored namespaces together",
     {"updater": {"vpaObjectNamespace": "apps", "ignoredVpaObjectNamespaces": ["sandbox"]}},
     "updater.vpaObjectNamespace and updater.ignoredVpaObjectNamespaces are exclusive"),
    ("updater waiting for a webhook that is not deployed", {"admission": {"enabled": False}},
     "updater.admissionControllerStatus.enabled needs admission.enabled"),
    ("ServiceMonitor without the updater Service",
     {"serviceMonitor": {"enabled": True}, "updater": {"service": {"enabled": False}}},
     "serviceMonitor.enabled needs updater.service.enabled"),
    ("schema: instance family without its memory price",
     {"dashboard": {"prices": {"instanceFamilies": {"m6i": {"vcpuHour": 0.024}}}}}, "gibHour"),
    ("schema: instance family name that is not one",
     {"dashboard": {"prices": {"instanceFamilies": {"m6i large": {"vcpuHour": 1, "gibHour": 1}}}}},
     "m6i large"),
    ("schema: SigV4 role that is not an IAM role ARN",
     {"recommender": {"prometheus": {"sigv4": {"roleArn": "tailor-role"}}}}, "roleArn"),
]


def run_invalid(values: dict, want: str) -> None:
    try:
        render(values)
    except (helm.HelmRenderError, helm.HelmValuesError) as e:
        assert want in str(e), f"failed, but without {want!r}: {e}"
        return
    raise AssertionError("rendered without error")


# --- schema and docs -----------------------------------------------------------------------------------

def schema_covers_values() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.Draft7Validator(schema).validate(values)
    chart().validate_schema(values)

    def resolve(node: dict) -> dict:
        while "$ref" in node:
            node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
        return node

    missing = []

    def walk(value: Any, node: dict, path: str) -> None:
        node = resolve(node)
        if not isinstance(value, dict):
            return
        props = node.get("properties", {})
        for k, v in value.items():
            if k in props:
                walk(v, props[k], f"{path}.{k}")
            elif node.get("additionalProperties") in (None, False) and not node.get("description"):
                missing.append(f"{path}.{k}".lstrip("."))

    walk(values, schema, "")
    assert not missing, f"values without a schema: {missing}"


def readme_up_to_date() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "hack" / "chart_readme.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr.strip() or r.stdout.strip()


def lint(values: dict | None = None, namespace: str = NAMESPACE, kube_version: str = "v1.33.0") -> None:
    res = helm.lint(str(CHART), values, strict=True, namespace=namespace, kube_version=kube_version)
    bad = [m for m in res.get("messages", []) if m.get("severity", 0) >= 2] + \
        [{"error": e} for e in res.get("errors", [])]
    assert not bad, "; ".join(f"{m.get('path', '')}: {m['error']}" for m in bad)


def deterministic() -> None:
    """No certificate or secret is generated at render time: two renders are identical (GitOps-safe)."""
    for values in ({}, {"admission": {"tls": {**SELF_OFF, "certManager": {"enabled": True}}}}):
        a = chart().render(values, name=RELEASE, namespace=NAMESPACE)
        b = chart().render(values, name=RELEASE, namespace=NAMESPACE)
        assert a == b, "two renders differ"
    for t in chart().templates:
        for fn in ("genCA", "genSelfSignedCert", "genSignedCert", "randAlphaNum", "randAscii", "uuidv4", "now"):
            assert not re.search(r"\b" + fn + r"\b", t["data"]), f"{t['name']} calls {fn}"


# --- CRDs ----------------------------------------------------------------------------------------------

def crd_checks() -> None:
    generated = ROOT / "crds" / "yaml"
    shipped = CHART / "crds"
    gen = {p.name: p for p in sorted(generated.glob("*.yaml"))} if generated.is_dir() else {}
    ship = {p.name: p for p in sorted(shipped.glob("*.yaml"))} if shipped.is_dir() else {}
    if gen and ship:
        def identical() -> None:
            assert set(gen) == set(ship), f"crds/yaml has {sorted(gen)}, the chart has {sorted(ship)}"
            diff = [n for n in gen if gen[n].read_bytes() != ship[n].read_bytes()]
            assert not diff, f"differ from crds/yaml (rerun crdgen): {diff}"
        check("chart crds/ byte-identical to crds/yaml/", identical)
    else:
        skip("chart crds/ byte-identical to crds/yaml/",
             f"not both generated yet (crds/yaml: {len(gen)} files, charts/tailor/crds: {len(ship)} files)")
    if ship:
        def valid() -> None:
            errs = []
            kinds = set()
            for p in ship.values():
                for doc in yaml.safe_load_all(p.read_text()):
                    if not doc:
                        continue
                    assert doc.get("kind") == "CustomResourceDefinition", f"{p.name}: kind {doc.get('kind')}"
                    assert doc["spec"]["group"] == "autoscaling.tailor.dev", f"{p.name}: group"
                    kinds.add(doc["spec"]["names"]["kind"])
                    doc.setdefault("metadata", {})
                    errs += [f"{p.name}: {e}" for e in validate_manifest(doc)]
            assert not errs, "; ".join(errs)
            helm_crds = {c["filename"].rsplit("/", 1)[-1] for c in chart().crds}
            assert set(ship) <= helm_crds, f"Helm does not load {set(ship) - helm_crds}"
        check("chart CRDs are valid CustomResourceDefinitions (k8s 1.33, 1.37) and Helm loads them", valid)


# --- shell scripts -------------------------------------------------------------------------------------

# Findings waived in scripts this check does not own, by exact file and code; each is printed. Remove an entry
# as soon as the script is fixed (hack/test.sh: `cd "$(dirname "$0")/.." || exit 1`).
WAIVED: dict[str, set[str]] = {}


def shell_checks() -> None:
    scripts = sorted((ROOT / "hack").glob("*.sh")) + sorted((ROOT / "hack" / "checks").glob("*.sh")) \
        + sorted((ROOT / "hack" / "go").glob("*.sh"))
    for s in scripts:
        rel = s.relative_to(ROOT)

        def bash_n(s: Path = s) -> None:
            r = subprocess.run(["bash", "-n", str(s)], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr.strip()
        check(f"bash -n {rel}", bash_n)

        waived = sorted(WAIVED.get(str(rel), set()))

        def sc(s: Path = s, waived: list[str] = waived) -> None:
            cmd = ["shellcheck", "-x", "-P", "SCRIPTDIR"] + (["-e", ",".join(waived)] if waived else []) + [str(s)]
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=s.parent)
            assert r.returncode == 0, (r.stdout + r.stderr).strip()
        check(f"shellcheck {rel}" + (f" (waived: {', '.join(waived)})" if waived else ""), sc)


# --- main ----------------------------------------------------------------------------------------------

def main() -> int:
    print(f"helm SDK {helm.helm_sdk_version()}, kubernetes-validate for {', '.join(KUBE_VERSIONS)}")
    for version in KUBE_VERSIONS:
        check(f"helm lint --strict (defaults, kube {version})", lambda version=version: lint(kube_version=f"v{version}"))
    check("CR subset schemas in hack/chart-schemas are valid draft-07", lambda: [
        jsonschema.Draft7Validator.check_schema(json.loads(p.read_text())) for p in sorted(CR_SCHEMAS.glob("*.json"))])
    check("values.schema.json is valid, accepts values.yaml and types every value", schema_covers_values)
    check("README.md documents every value and its table is current", readme_up_to_date)
    check("renders are deterministic: no genCA, random or time functions", deterministic)
    for name, values, expect, namespace in MATRIX:
        rendered: list[dict] = []

        def do_render(values: dict = values, namespace: str = namespace) -> None:
            rendered.extend(render(values, namespace=namespace))
            assert rendered, "nothing rendered"
        check(f"render: {name}", do_render)
        if not rendered:
            continue
        check(f"lint --strict: {name}", lambda values=values, namespace=namespace: lint(values, namespace))

        def inv(rendered: list[dict] = rendered, namespace: str = namespace) -> None:
            errs = invariants(rendered, namespace)
            assert not errs, "\n      ".join(errs)
        check(f"valid for k8s {' + '.join(KUBE_VERSIONS)}, non-root, webhook safe: {name}", inv)
        if expect is not None:
            check(f"expected objects: {name}", lambda rendered=rendered, expect=expect: expect(rendered))
        check(f"binaries accept the chart's args: {name}", lambda rendered=rendered: binaries_accept_args(rendered))
    for name, values, want in INVALID:
        check(f"rejected: {name}", lambda values=values, want=want: run_invalid(values, want))
    crd_checks()
    shell_checks()
    print(f"{PASSED} passed, {FAILED} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
