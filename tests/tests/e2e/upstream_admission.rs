//! Upstream's admission-controller e2e scenarios (`test/e2e/v1/admission_controller.go` of
//! kubernetes/autoscaler, VPA 1.7), re-expressed against Tailor's group; `tests/UPSTREAM_E2E.md` maps each
//! upstream case to the check here.
//!
//! As upstream's suite does, each VPA is given a fixed recommendation (written to its status), then a
//! Deployment is created and the pods its ReplicaSet creates — admitted by the real API server, through the
//! LimitRanger plugin and Tailor's webhook — must carry upstream's expected requests and limits. Upstream's
//! admission suite runs no recommender; here Tailor's runs, so every VPA names a recommender of its own
//! (`spec.recommenders`) that nothing serves, and its status stays as written. Upstream's default update
//! mode (Recreate) becomes Initial unless the case is about the mode: upstream's admission suite runs no
//! updater either. Each case has its own namespace (LimitRanges are per namespace); all are set up at once and
//! checked in turn, and one Deployment of one pod stands for upstream's three replicas.
//!
//! Thirteen cases write recommendations below the recommender's pod minimums (200Mi, or 4m for one of three
//! containers), which Tailor's webhook raises to its documented floor ([`FLOOR`]): those expect Tailor's
//! numbers and name the deviation (upstream's numbers are in `tests/UPSTREAM_E2E.md`).

use futures::future::try_join_all;

use super::*;

/// The recommender every VPA here names: none serves it, so the recommendation written stays.
const FIXED: &str = "upstream-e2e-fixed";

/// One upstream case.
struct Case {
    /// Upstream's `It(...)` description.
    upstream: &'static str,
    /// The pod template's containers.
    containers: Vec<Value>,
    /// The namespace's LimitRange items, if any.
    limits: Option<Value>,
    /// The VPA's spec beyond targetRef and recommenders.
    spec: Value,
    /// `status.recommendation.containerRecommendations`, if any.
    recommendation: Option<Value>,
    /// What the admitted pod must be: upstream's numbers, or where Tailor's documented pod floor raises the
    /// written recommendation ([`FLOOR`]), Tailor's.
    check: fn(&Pod) -> Result<()>,
    /// The deviation that explains where the check differs from upstream's expectation.
    deviation: Option<&'static str>,
}

/// DEVIATIONS.md, Updater, the "no lower bound" row (docs/decisions/pod-floor.md): the webhook raises each
/// container's recommendation to its share of the recommender's pod minimums (25m, 250Mi) before capping.
/// Upstream's cases write recommendations of 200Mi (and 4m for one of three containers), below it.
const FLOOR: &str =
    "DEVIATIONS.md (Updater) pod floor: 250Mi/25m per pod shared among sized containers";

fn container(name: &str, requests: Option<(&str, &str)>, limits: Option<(&str, &str)>) -> Value {
    let mut resources = json!({});
    if let Some((cpu, memory)) = requests {
        resources["requests"] = json!({"cpu": cpu, "memory": memory});
    }
    if let Some((cpu, memory)) = limits {
        resources["limits"] = json!({"cpu": cpu, "memory": memory});
    }
    json!({"name": name, "image": IMAGE, "resources": resources})
}

/// A container recommendation with target, lowerBound and upperBound all `(cpu, memory)`.
fn flat(name: &str, cpu: &str, memory: &str) -> Value {
    let r = json!({"cpu": cpu, "memory": memory});
    json!({"containerName": name, "target": r, "lowerBound": r, "upperBound": r})
}

/// Container policies with mode Auto for `names` (upstream's builder writes one per named container), each
/// merged with `extra[name]` when given.
fn policies(names: &[&str], extra: &Value) -> Value {
    let list: Vec<Value> = names
        .iter()
        .map(|n| {
            let mut p = json!({"containerName": n, "mode": "Auto"});
            if let Some(more) = extra.get(*n).and_then(Value::as_object) {
                for (k, v) in more {
                    p[k] = v.clone();
                }
            }
            p
        })
        .collect();
    json!({"containerPolicies": list})
}

/// The default spec of upstream's builder for `names`, in mode `mode`.
fn spec(mode: &str, names: &[&str], extra: Value) -> Value {
    json!({"updatePolicy": {"updateMode": mode}, "resourcePolicy": policies(names, &extra)})
}

fn q(s: &str) -> Quantity {
    Quantity(s.to_string())
}

/// (requests, limits) of container `name`, each (cpu millicores, memory bytes) or None when unset.
type Resources = (Option<(i64, i64)>, Option<(i64, i64)>);

fn resources_of(pod: &Pod, name: &str) -> Result<Resources> {
    let c = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == name))
        .with_context(|| format!("no container {name}"))?;
    let r = c.resources.clone().unwrap_or_default();
    let pair = |list: Option<BTreeMap<String, Quantity>>| -> Result<Option<(i64, i64)>> {
        match list {
            Some(l) if !l.is_empty() => Ok(Some(cpu_mem(&l)?)),
            _ => Ok(None),
        }
    };
    Ok((pair(r.requests)?, pair(r.limits)?))
}

fn cm(cpu: &str, memory: &str) -> Result<(i64, i64)> {
    Ok((milli_cpu(&q(cpu))?, bytes(&q(memory))?))
}

fn requests_are(pod: &Pod, name: &str, cpu: &str, memory: &str) -> Result<()> {
    let got = resources_of(pod, name)?.0;
    if got != Some(cm(cpu, memory)?) {
        bail!("{name}: requests {got:?}, expected {cpu}/{memory}");
    }
    Ok(())
}

fn limits_are(pod: &Pod, name: &str, cpu: &str, memory: &str) -> Result<()> {
    let got = resources_of(pod, name)?.1;
    if got != Some(cm(cpu, memory)?) {
        bail!("{name}: limits {got:?}, expected {cpu}/{memory}");
    }
    Ok(())
}

/// limit / request of each resource within 1 % of `(cpu, memory)` (upstream's `BeNumerically("~")`).
fn ratios_are(pod: &Pod, name: &str, cpu: f64, memory: f64) -> Result<()> {
    let (Some(req), Some(lim)) = resources_of(pod, name)? else {
        bail!("{name}: requests or limits missing");
    };
    #[allow(clippy::cast_precision_loss)] // millicores and bytes of test pods
    let got = (lim.0 as f64 / req.0 as f64, lim.1 as f64 / req.1 as f64);
    if (got.0 - cpu).abs() > 0.01 * cpu || (got.1 - memory).abs() > 0.01 * memory {
        bail!("{name}: limit/request ratios {got:?}, expected ({cpu}, {memory})");
    }
    Ok(())
}

/// Limits within `[at_least, at_most]` (either side optional).
fn limits_between(
    pod: &Pod,
    name: &str,
    at_least: Option<(&str, &str)>,
    at_most: Option<(&str, &str)>,
) -> Result<()> {
    let lim = resources_of(pod, name)?
        .1
        .with_context(|| format!("{name}: no limits"))?;
    if let Some((cpu, memory)) = at_least {
        let min = cm(cpu, memory)?;
        if lim.0 < min.0 || lim.1 < min.1 {
            bail!("{name}: limits {lim:?} below {min:?}");
        }
    }
    if let Some((cpu, memory)) = at_most {
        let max = cm(cpu, memory)?;
        if lim.0 > max.0 || lim.1 > max.1 {
            bail!("{name}: limits {lim:?} above {max:?}");
        }
    }
    Ok(())
}

const H1: &str = "hamster";
const H2: &str = "hamster2";
const H3: &str = "hamster3";

#[allow(clippy::too_many_lines)] // one entry per upstream case
fn cases() -> Vec<Case> {
    let std = || vec![container(H1, Some(("100m", "100Mi")), None)];
    let with_limits = |req: (&'static str, &'static str), lim: (&'static str, &'static str)| {
        vec![container(H1, Some(req), Some(lim))]
    };
    let two_with_limits = |req: (&'static str, &'static str), lim: (&'static str, &'static str)| {
        vec![
            container(H1, Some(req), Some(lim)),
            container(H2, Some(req), Some(lim)),
        ]
    };
    let three_tiny = || {
        [H1, H2, H3]
            .iter()
            .map(|n| container(n, Some(("1m", "100Mi")), Some(("1m", "100Mi"))))
            .collect::<Vec<_>>()
    };
    let lr = |kind: &str, bound: &str, cpu: Option<&str>, memory: Option<&str>| {
        let mut list = json!({});
        if let Some(c) = cpu {
            list["cpu"] = json!(c);
        }
        if let Some(m) = memory {
            list["memory"] = json!(m);
        }
        Some(json!([{"type": kind, bound: list}]))
    };
    let one = |mode: &str| spec(mode, &[H1], json!({}));
    vec![
        Case {
            upstream: "starts pods with new recommended request with InPlaceOrRecreate mode",
            containers: std(),
            limits: None,
            spec: one("InPlaceOrRecreate"),
            recommendation: Some(json!([flat(H1, "250m", "200Mi")])),
            check: |p| requests_are(p, H1, "250m", "250Mi"),
            deviation: Some(FLOOR),
        },
        Case {
            upstream: "starts pods with new recommended request",
            containers: std(),
            limits: None,
            spec: one("Initial"),
            recommendation: Some(json!([flat(H1, "250m", "200Mi")])),
            check: |p| requests_are(p, H1, "250m", "250Mi"),
            deviation: Some(FLOOR),
        },
        Case {
            upstream: "starts pods with new recommended request when recommendation includes an extra container",
            containers: std(),
            limits: None,
            spec: spec("Initial", &["removed", H1], json!({})),
            recommendation: Some(json!([
                flat("removed", "500m", "500Mi"),
                flat(H1, "250m", "200Mi")
            ])),
            check: |p| requests_are(p, H1, "250m", "250Mi"),
            deviation: Some(FLOOR),
        },
        Case {
            upstream: "starts pods with old recommended request when recommendation has only a container that doesn't match",
            containers: std(),
            limits: None,
            spec: spec("Initial", &["removed"], json!({})),
            recommendation: Some(json!([flat("removed", "250m", "200Mi")])),
            check: |p| requests_are(p, H1, "100m", "100Mi"),
            deviation: None,
        },
        Case {
            upstream: "starts pod with recommendation when one container has a recommendation and one other one doesn't",
            containers: vec![
                container(H1, Some(("100m", "100Mi")), None),
                container(H2, Some(("100m", "100Mi")), None),
            ],
            limits: None,
            spec: one("Initial"),
            recommendation: Some(json!([flat(H1, "250m", "200Mi")])),
            check: |p| {
                requests_are(p, H1, "250m", "200Mi")?;
                requests_are(p, H2, "100m", "100Mi")
            },
            deviation: None,
        },
        Case {
            // Upstream's own comment calls its result a bug: the container keeps its request because the
            // limit the LimitRange defaults (its max) caps the proportional limit. The same numbers here.
            upstream: "starts pods with default request when recommendation includes an extra container when a limit range applies",
            containers: std(),
            limits: lr("Container", "max", Some("300m"), Some("1Gi")),
            spec: spec("Initial", &[H1, H2], json!({})),
            recommendation: Some(json!([
                flat(H1, "500m", "500Mi"),
                flat(H2, "250m", "200Mi")
            ])),
            check: |p| requests_are(p, H1, "100m", "100Mi"),
            deviation: None,
        },
        Case {
            upstream: "starts pods with old recommended request when recommendation has only a container that doesn't match when a limit range applies",
            containers: std(),
            limits: lr("Container", "max", Some("300m"), Some("1Gi")),
            spec: one("Initial"),
            recommendation: Some(json!([flat(H1, "250m", "200Mi")])),
            check: |p| requests_are(p, H1, "100m", "100Mi"),
            deviation: None,
        },
        Case {
            upstream: "starts pod with default request when one container has a recommendation and one other one doesn't when a limit range applies",
            containers: vec![
                container(H1, Some(("100m", "100Mi")), Some(("100m", "100Mi"))),
                container(H2, Some(("400m", "600Mi")), Some(("400m", "600Mi"))),
            ],
            limits: lr("Pod", "max", Some("400m"), Some("1Gi")),
            spec: one("Initial"),
            recommendation: Some(json!([flat(H1, "400m", "600Mi")])),
            check: |p| {
                requests_are(p, H1, "200m", "512Mi")?;
                requests_are(p, H2, "200m", "512Mi")
            },
            deviation: None,
        },
        Case {
            // The pod patch after admission is made by the test below (`doesn't block patches`).
            upstream: "doesn't block patches",
            containers: std(),
            limits: None,
            spec: one("Initial"),
            recommendation: Some(json!([flat(H1, "250m", "200Mi")])),
            check: |p| requests_are(p, H1, "250m", "250Mi"),
            deviation: Some(FLOOR),
        },
        Case {
            upstream: "keeps limits equal to request",
            containers: with_limits(("100m", "100Mi"), ("100m", "100Mi")),
            limits: None,
            spec: one("Initial"),
            recommendation: Some(json!([flat(H1, "250m", "200Mi")])),
            check: |p| {
                requests_are(p, H1, "250m", "250Mi")?;
                limits_are(p, H1, "250m", "250Mi")
            },
            deviation: Some(FLOOR),
        },
        Case {
            upstream: "keeps limits to request ratio constant",
            containers: with_limits(("100m", "100Mi"), ("150m", "200Mi")),
            limits: None,
            spec: one("Initial"),
            recommendation: Some(json!([flat(H1, "250m", "200Mi")])),
            check: |p| {
                requests_are(p, H1, "250m", "250Mi")?;
                ratios_are(p, H1, 1.5, 2.0)
            },
            deviation: Some(FLOOR),
        },
        Case {
            upstream: "keeps limits unchanged when container controlled values is requests only",
            containers: with_limits(("100m", "100Mi"), ("500m", "500Mi")),
            limits: None,
            spec: spec(
                "Initial",
                &[H1],
                json!({H1: {"controlledValues": "RequestsOnly"}}),
            ),
            recommendation: Some(json!([flat(H1, "250m", "200Mi")])),
            check: |p| {
                requests_are(p, H1, "250m", "250Mi")?;
                limits_are(p, H1, "500m", "500Mi")
            },
            deviation: Some(FLOOR),
        },
        Case {
            upstream: "caps request according to container max limit set in LimitRange",
            containers: with_limits(("100m", "100Mi"), ("150m", "200Mi")),
            limits: lr("Container", "max", Some("300m"), Some("1Gi")),
            spec: one("Initial"),
            recommendation: Some(json!([flat(H1, "250m", "200Mi")])),
            check: |p| {
                requests_are(p, H1, "200m", "250Mi")?;
                limits_between(p, H1, None, Some(("300m", "1Gi")))?;
                ratios_are(p, H1, 1.5, 2.0)
            },
            deviation: Some(FLOOR),
        },
        Case {
            upstream: "raises request according to container min limit set in LimitRange",
            containers: with_limits(("100m", "200Mi"), ("150m", "400Mi")),
            limits: lr("Container", "min", Some("50m"), Some("250Mi")),
            spec: one("Initial"),
            recommendation: Some(json!([flat(H1, "250m", "100Mi")])),
            check: |p| {
                requests_are(p, H1, "250m", "250Mi")?;
                limits_between(p, H1, Some(("75m", "250Mi")), None)?;
                ratios_are(p, H1, 1.5, 2.0)
            },
            deviation: None,
        },
        Case {
            upstream: "caps request according to pod max limit set in LimitRange",
            containers: two_with_limits(("100m", "100Mi"), ("150m", "200Mi")),
            limits: lr("Pod", "max", Some("600m"), Some("1Gi")),
            spec: spec("Initial", &[H1, H2], json!({})),
            recommendation: Some(json!([
                flat(H1, "250m", "200Mi"),
                flat(H2, "250m", "200Mi")
            ])),
            check: |p| {
                requests_are(p, H1, "200m", "200Mi")?;
                limits_between(p, H1, None, Some(("300m", "1Gi")))?;
                ratios_are(p, H1, 1.5, 2.0)
            },
            deviation: None,
        },
        Case {
            upstream: "raises cpu requests and limits according to pod min limit set in LimitRange",
            containers: three_tiny(),
            limits: lr("Pod", "min", Some("150m"), None),
            spec: spec("Initial", &[H1, H2, H3], json!({})),
            recommendation: Some(json!([
                flat(H1, "4m", "100Mi"),
                flat(H2, "21m", "100Mi"),
                flat(H3, "90m", "100Mi")
            ])),
            check: |p| {
                for (name, cpu) in [(H1, "12m"), (H2, "27m"), (H3, "113m")] {
                    requests_are(p, name, cpu, "100Mi")?;
                    limits_are(p, name, cpu, "100Mi")?;
                }
                Ok(())
            },
            deviation: Some(FLOOR),
        },
        Case {
            upstream: "caps cpu requests and limits according to pod max limit set in LimitRange",
            containers: three_tiny(),
            limits: lr("Pod", "max", Some("80m"), None),
            spec: spec("Initial", &[H1, H2, H3], json!({})),
            recommendation: Some(json!([
                flat(H1, "4m", "100Mi"),
                flat(H2, "21m", "100Mi"),
                flat(H3, "90m", "100Mi")
            ])),
            check: |p| {
                for (name, cpu) in [(H1, "6m"), (H2, "14m"), (H3, "60m")] {
                    requests_are(p, name, cpu, "100Mi")?;
                    limits_are(p, name, cpu, "100Mi")?;
                }
                Ok(())
            },
            deviation: Some(FLOOR),
        },
        Case {
            upstream: "raises request according to pod min limit set in LimitRange",
            containers: two_with_limits(("100m", "200Mi"), ("150m", "400Mi")),
            limits: lr("Pod", "min", Some("100m"), Some("500Mi")),
            spec: spec("Initial", &[H1, H2], json!({})),
            recommendation: Some(json!([
                flat(H1, "120m", "100Mi"),
                flat(H2, "120m", "100Mi")
            ])),
            check: |p| {
                requests_are(p, H1, "120m", "250Mi")?;
                limits_between(p, H1, Some(("75m", "250Mi")), None)?;
                ratios_are(p, H1, 1.5, 2.0)
            },
            deviation: None,
        },
        Case {
            upstream: "caps request to max set in VPA",
            containers: std(),
            limits: None,
            spec: spec(
                "Initial",
                &[H1],
                json!({H1: {"maxAllowed": {"cpu": "233m", "memory": "150Mi"}}}),
            ),
            recommendation: Some(json!([flat(H1, "250m", "200Mi")])),
            check: |p| requests_are(p, H1, "233m", "150Mi"),
            deviation: None,
        },
        Case {
            upstream: "raises request to min set in VPA",
            containers: std(),
            limits: None,
            spec: spec(
                "Initial",
                &[H1],
                json!({H1: {"minAllowed": {"cpu": "90m", "memory": "80Mi"}}}),
            ),
            recommendation: Some(json!([flat(H1, "50m", "60Mi")])),
            check: |p| requests_are(p, H1, "90m", "250Mi"),
            deviation: Some(FLOOR),
        },
        Case {
            upstream: "leaves users request when no recommendation",
            containers: std(),
            limits: None,
            spec: one("Initial"),
            recommendation: None,
            check: |p| requests_are(p, H1, "100m", "100Mi"),
            deviation: None,
        },
        Case {
            upstream: "passes empty request when no recommendation and no user-specified request",
            containers: vec![container(H1, None, None)],
            limits: None,
            spec: one("Initial"),
            recommendation: None,
            check: |p| match resources_of(p, H1)? {
                (None, _) => Ok(()),
                (requests, _) => bail!("{H1}: requests {requests:?}, expected none"),
            },
            deviation: None,
        },
        // Second Describe: CPU startup boosts (the webhook runs with CPUStartupBoost=true, hack/cluster/
        // values.yaml). The boost lasts 15 s after the pod is ready, then the updater takes it back; the pod
        // is read as soon as it exists.
        Case {
            upstream: "boosts CPU by factor on pod creation",
            containers: std(),
            limits: None,
            spec: boosted(one("Recreate"), json!({"type": "Factor", "factor": 2})),
            recommendation: Some(
                json!([{"containerName": H1, "target": {"cpu": "100m", "memory": "100Mi"}}]),
            ),
            check: |p| requests_are(p, H1, "200m", "250Mi"),
            deviation: Some(FLOOR),
        },
        Case {
            upstream: "boosts CPU by quantity on pod creation",
            containers: std(),
            limits: None,
            spec: boosted(
                one("Recreate"),
                json!({"type": "Quantity", "quantity": "500m"}),
            ),
            recommendation: Some(
                json!([{"containerName": H1, "target": {"cpu": "100m", "memory": "100Mi"}}]),
            ),
            check: |p| requests_are(p, H1, "600m", "250Mi"),
            deviation: Some(FLOOR),
        },
        Case {
            upstream: "boosts CPU on pod creation when VPA update mode is Off",
            containers: std(),
            limits: None,
            spec: boosted(one("Off"), json!({"type": "Factor", "factor": 2})),
            recommendation: None,
            check: |p| requests_are(p, H1, "200m", "100Mi"),
            deviation: None,
        },
        Case {
            upstream: "doesn't boost CPU on pod creation when scaling mode is Off",
            containers: std(),
            limits: None,
            spec: boosted(
                spec("Recreate", &[H1], json!({H1: {"mode": "Off"}})),
                json!({"type": "Factor", "factor": 2}),
            ),
            recommendation: None,
            check: |p| requests_are(p, H1, "100m", "100Mi"),
            deviation: None,
        },
    ]
}

/// `spec` with a VPA-wide CPU startup boost `cpu` lasting 15 s.
fn boosted(mut spec: Value, mut cpu: Value) -> Value {
    cpu["durationSeconds"] = json!(15);
    spec["startupBoost"] = json!({"cpu": cpu});
    spec
}

/// Sets up one case in `ns`: LimitRange, VPA with its status, then the Deployment.
async fn set_up(env: &E2e, ns: &str, case: &Case) -> Result<()> {
    if let Some(limits) = &case.limits {
        let lr: LimitRange = serde_json::from_value(json!({
            "metadata": {"name": "hamster-lr"}, "spec": {"limits": limits}
        }))?;
        Api::<LimitRange>::namespaced(env.client.clone(), ns)
            .create(&PostParams::default(), &lr)
            .await?;
    }
    let mut spec = case.spec.clone();
    spec["targetRef"] = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "hamster"});
    spec["recommenders"] = json!([{"name": FIXED}]);
    env.create_vpa(
        ns,
        json!({
            "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": "hamster-vpa"}, "spec": spec
        }),
    )
    .await
    .with_context(|| format!("creating the VPA of {:?}", case.upstream))?;
    if let Some(recs) = &case.recommendation {
        env.dynamic_vpas(ns)
            .patch_status(
                "hamster-vpa",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"recommendation": {"containerRecommendations": recs}}}),
                ),
            )
            .await
            .with_context(|| format!("writing the recommendation of {:?}", case.upstream))?;
    }
    Ok(())
}

fn hamster(containers: &[Value]) -> Value {
    json!({
        "metadata": {"name": "hamster"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "hamster"}},
            "template": {
                "metadata": {"labels": {"app": "hamster"}},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": containers}
            }
        }
    })
}

/// The first pod of the Deployment, as soon as it exists (sized at its creation).
async fn first_pod(env: &E2e, ns: &str) -> Result<Pod> {
    match wait_for("a pod of hamster", POD_TIMEOUT, || async {
        Ok(env.all_pods(ns, "hamster").await?.into_iter().next())
    })
    .await
    {
        Ok(pod) => Ok(pod),
        Err(e) => Err(anyhow!("{e:#}{}", env.replica_failures(ns).await)),
    }
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn upstream_admission_controller_scenarios() {
    let env = e2e("upstream_admission_controller_scenarios").await;
    let env = &env;
    let cases = cases();
    let mut namespaces = Vec::new();
    for i in 0..cases.len() {
        namespaces.push(
            env.namespace(&format!("upadm{i}"))
                .await
                .expect("a namespace"),
        );
    }
    let result = async {
        // Every VPA and its status first, so that the webhook has seen them before any pod is created.
        try_join_all(
            cases
                .iter()
                .zip(&namespaces)
                .map(|(c, ns)| set_up(env, ns, c)),
        )
        .await?;
        try_join_all(
            cases
                .iter()
                .zip(&namespaces)
                .map(|(c, ns)| env.create_deployment_from(ns, hamster(&c.containers))),
        )
        .await?;
        let mut failures = Vec::new();
        let mut pods = BTreeMap::new();
        for (case, ns) in cases.iter().zip(&namespaces) {
            let checked = match first_pod(env, ns).await {
                Ok(pod) => {
                    let r = (case.check)(&pod);
                    pods.insert(case.upstream, (ns.clone(), pod));
                    r
                }
                Err(e) => Err(e),
            };
            match checked {
                Ok(()) => match case.deviation {
                    None => eprintln!("upstream case passed: {}", case.upstream),
                    Some(d) => eprintln!(
                        "upstream case passed with Tailor's numbers ({d}): {}",
                        case.upstream
                    ),
                },
                Err(e) => failures.push(format!("{:?} (namespace {ns}): {e:#}", case.upstream)),
            }
        }
        // "doesn't block patches": a new recommendation, then a patch of the running pod is accepted.
        if let Some((ns, pod)) = pods.get("doesn't block patches") {
            env.dynamic_vpas(ns)
                .patch_status(
                    "hamster-vpa",
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"status": {"recommendation": {"containerRecommendations": [
                            {"containerName": H1, "target": {"cpu": "100m", "memory": "100Mi"}}
                        ]}}}),
                    ),
                )
                .await?;
            let name = pod.metadata.name.clone().unwrap_or_default();
            if let Err(e) = Api::<Pod>::namespaced(env.client.clone(), ns)
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"metadata": {"annotations": {"someAnnotation": "someValue"}}}),
                    ),
                )
                .await
            {
                failures.push(format!(
                    "\"doesn't block patches\": annotating pod {name}: {e}"
                ));
            }
        }
        if !failures.is_empty() {
            bail!(
                "{} of {} upstream cases failed:\n{}",
                failures.len(),
                cases.len(),
                failures.join("\n")
            );
        }
        Ok(())
    }
    .await;
    for ns in &namespaces {
        env.drop_namespace(ns).await;
    }
    if let Err(e) = result {
        panic!("upstream_admission_controller_scenarios: {e:#}");
    }
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn upstream_vpa_validation_scenarios() {
    let env = e2e("upstream_vpa_validation_scenarios").await;
    let env = &env;
    in_namespace(env, "upvalid", |ns| async move {
        let vpa = |name: &str, spec: Value| {
            let mut v = vpa_manifest(name, "hamster", "Recreate");
            for (k, val) in spec.as_object().into_iter().flatten() {
                v["spec"][k] = val.clone();
            }
            v
        };
        // "accepts valid and rejects invalid VPA object"
        env.create_vpa(
            &ns,
            vpa("hamster-vpa-valid", json!({"resourcePolicy": {"containerPolicies": [
                {"containerName": "*", "minAllowed": {"cpu": "50m"}}
            ]}})),
        )
        .await
        .context("a valid VPA was refused")?;
        let invalid = [
            (
                "accepts valid and rejects invalid VPA object",
                vpa("hamster-vpa-invalid", json!({"resourcePolicy": {"containerPolicies": [
                    {"containerName": "*", "minAllowed": {"requests": {"cpu": "50m"}}}
                ]}})),
            ),
            (
                "accepts valid and rejects invalid VPA object with features.PerVPAConfig enabled",
                vpa("oom-test-vpa", json!({"resourcePolicy": {"containerPolicies": [
                    {"containerName": "*", "oomBumpUpRatio": "not-a-number", "oomMinBumpUp": 104_857_600}
                ]}})),
            ),
        ];
        for (upstream, manifest) in invalid {
            match env.create_vpa(&ns, manifest).await {
                Ok(_) => bail!("{upstream:?}: the invalid VPA was accepted"),
                Err(e) => {
                    let text = format!("{e:#}");
                    // Upstream's expectation: `admission webhook .*vpa.* denied the request:`.
                    if !(text.contains("admission webhook") && text.contains("vpa") && text.contains("denied the request")) {
                        bail!("{upstream:?}: refused, but not by the webhook: {text}");
                    }
                    eprintln!("upstream case passed: {upstream}: {text}");
                }
            }
        }
        Ok(())
    })
    .await;
}
