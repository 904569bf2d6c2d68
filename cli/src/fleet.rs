//! `tailor fleet`: the offline preview of fleet onboarding — which Tailor VPAs the namespaces' fleet
//! policies would create, change and delete on a cluster snapshot, which workloads they leave out and why,
//! and which namespaces' policies are refused. The rules are [`tailor_core::fleet`]'s, the ones the
//! recommender's leader applies; this module reads the snapshot into their inputs and prints the plan.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{Value, json};
use tailor_core::fleet::namespace_policy::{MODES, parse_mode};
use tailor_core::fleet::plan::OwnedFields;
use tailor_core::fleet::{
    self, Apply, DeleteReason, ExistingVpa, FleetPlan, FleetSettings, Namespace, UpstreamTarget,
    Workload,
};
use tailor_crds::{UpdateMode, VerticalPodAutoscaler};
use tailor_kube::manifests::{self, Keep, ManifestError, Object, Walk};
use tailor_kube::upstream_vpa::{UpstreamVpa, UpstreamVpaObject};

use crate::error::InputError;

/// The workload kinds the fleet covers without `--kind`: (`apiVersion`, kind).
pub const COVERED_KINDS: &[(&str, &str)] = &[
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
    ("batch/v1", "CronJob"),
    ("argoproj.io/v1alpha1", "Rollout"),
];

/// Output formats of `tailor fleet`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FleetFormat {
    /// Aligned tables: refused namespaces, VPAs to create or change, to delete, skipped workloads, and a
    /// summary line.
    Table,
    /// JSON: `{"refused", "apply", "delete", "skipped", "byMode"}`, each apply with the whole VPA.
    Json,
}

/// A workload kind named by `--kind`: (`apiVersion`, kind).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KindRef(pub String, pub String);

/// Arguments of `tailor fleet`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = keys_help())]
pub struct FleetArgs {
    /// Snapshot file or directory (repeatable): what `kubectl get ns,deploy,sts,ds,cronjob,vpa,tvpa -A -o
    /// yaml` prints, YAML or JSON, `List`s included. Namespaces, workloads of the covered kinds, Tailor
    /// VPAs and upstream VPAs are read; everything else is skipped.
    #[arg(long, value_name = "PATH", required = true)]
    pub snapshot: Vec<PathBuf>,
    /// Another workload kind to cover, besides Deployment, StatefulSet, DaemonSet, CronJob and Rollout
    /// (repeatable), as group/version/Kind (`apps.example.com/v1/Job`; `v1/Kind` for the core group).
    #[arg(long = "kind", value_name = "GROUP/VERSION/KIND", value_parser = parse_kind)]
    pub kinds: Vec<KindRef>,
    /// Label selector (`env=dev,team in (a,b)`) of the namespaces onboarded without their own
    /// `tailor.dev/vpa` label, in --fleet-default-mode; empty: only labelled namespaces.
    #[arg(long, value_name = "SELECTOR", default_value = "")]
    pub fleet_namespace_selector: String,
    /// The mode of the VPAs of namespaces --fleet-namespace-selector chooses.
    #[arg(long, value_name = "MODE", value_parser = mode, default_value = "Off")]
    pub fleet_default_mode: UpdateMode,
    /// A namespace never onboarded (repeatable; naming one replaces the default, so name kube-system too
    /// to keep it). The namespace Tailor runs in is protected too in the daemon.
    #[arg(
        long = "fleet-protected-namespace",
        value_name = "NS",
        default_value = "kube-system"
    )]
    pub fleet_protected_namespaces: Vec<String>,
    /// A namespace taken out of the protected set (repeatable): its label onboards it like any other.
    #[arg(long = "fleet-allow-namespace", value_name = "NS")]
    pub fleet_allow_namespaces: Vec<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    pub output: FleetFormat,
}

/// The long help's list of every label and annotation the fleet reads, and the profile names.
fn keys_help() -> String {
    let mut text = String::from("Labels and annotations the fleet reads:\n");
    for (key, meaning) in fleet::KEYS {
        text.push_str(&format!("  {key}\n          {meaning}\n"));
    }
    let names: Vec<&str> = profiles().collect();
    text.push_str(&format!(
        "\nProfiles a namespace may name: {}\n",
        names.join(", ")
    ));
    text
}

/// The known profile names: `upstream` and Tailor's.
fn profiles() -> impl Iterator<Item = &'static str> {
    std::iter::once(tailor_engine::profile::UPSTREAM)
        .chain(tailor_engine::profile::PROFILES.iter().map(|p| p.name))
}

/// `--kind`: `group/version/Kind`, or `version/Kind` for the core group.
fn parse_kind(s: &str) -> Result<KindRef, String> {
    let bad = || format!("{s:?} is not group/version/Kind (apps.example.com/v1/Job, or v1/Kind)");
    let (api_version, kind) = s.trim().rsplit_once('/').ok_or_else(bad)?;
    let api_version = api_version.trim_start_matches('/');
    let word = |w: &str| {
        !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
    };
    let (group_ok, version) = match api_version.split_once('/') {
        Some((group, version)) => (word(group), version),
        None => (true, api_version),
    };
    let kind_ok = kind.starts_with(|c: char| c.is_ascii_uppercase()) && word(kind);
    if !(group_ok && word(version) && kind_ok) {
        return Err(bad());
    }
    Ok(KindRef(api_version.to_owned(), kind.to_owned()))
}

/// `--fleet-default-mode`: one of the modes a namespace label may name.
fn mode(s: &str) -> Result<UpdateMode, String> {
    parse_mode(s).ok_or_else(|| format!("{s:?} is not a mode (one of {})", MODES.join(", ")))
}

/// The settings the daemon's `--fleet-*` flags give it.
fn settings(args: &FleetArgs) -> Result<FleetSettings, InputError> {
    let text = args.fleet_namespace_selector.trim();
    let namespace_selector = (!text.is_empty())
        .then(|| tailor_core::label_selector::parse(text))
        .transpose()
        .map_err(|e| InputError(format!("--fleet-namespace-selector: {e}")))?;
    let allowed: BTreeSet<&String> = args.fleet_allow_namespaces.iter().collect();
    let protected = (args.fleet_protected_namespaces.iter())
        .filter(|ns| !allowed.contains(ns))
        .cloned()
        .collect();
    Ok(FleetSettings {
        namespace_selector,
        default_mode: Some(args.fleet_default_mode.clone()),
        protected,
        profiles: profiles().map(str::to_owned).collect(),
    })
}

/// A string at `pointer` of `value` (empty when absent or not a string).
pub(crate) fn text_at(value: &Value, pointer: &str) -> String {
    (value.pointer(pointer).and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned()
}

/// A `map[string]string` at `pointer` (labels, annotations), keeping the entries `keep` accepts.
fn map_at(value: &Value, pointer: &str, keep: impl Fn(&str) -> bool) -> BTreeMap<String, String> {
    let Some(map) = value.pointer(pointer).and_then(Value::as_object) else {
        return BTreeMap::new();
    };
    map.iter()
        .filter(|(k, _)| keep(k))
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect()
}

/// An object that may be a workload of a covered kind: which kinds are covered is known only to the caller
/// (`--kind`), so each namespaced object is kept this slim until the caller filters it.
#[derive(Debug)]
struct Candidate {
    workload: Workload,
    /// (`apiVersion`, kind) of its controller owner reference.
    controller: Option<KindRef>,
}

/// What `tailor fleet` keeps of one snapshot object.
#[derive(Debug)]
enum Kept {
    Namespace(Namespace),
    Candidate(Box<Candidate>),
    Vpa(Box<ExistingVpa>),
    Upstream(UpstreamTarget),
    Other,
}

impl Keep for Kept {
    fn keep(o: Object) -> Result<Self, String> {
        let v = &o.value;
        let (namespace, name) = (text_at(v, "/metadata/namespace"), o.name().to_owned());
        if name.is_empty() {
            return Ok(Kept::Other);
        }
        Ok(match (o.group(), o.kind.as_str()) {
            ("", "Namespace") => Kept::Namespace(Namespace {
                name,
                labels: map_at(v, "/metadata/labels", |_| true),
                // Only the `tailor.dev/` annotations are read.
                annotations: map_at(v, "/metadata/annotations", |k| k.starts_with("tailor.dev/")),
            }),
            (tailor_crds::GROUP, "VerticalPodAutoscaler") => {
                let vpa: VerticalPodAutoscaler = o.decode()?;
                let labels = vpa.metadata.labels.unwrap_or_default();
                let annotations = vpa.metadata.annotations.unwrap_or_default();
                Kept::Vpa(Box::new(ExistingVpa {
                    namespace,
                    name,
                    target: vpa.spec.target_ref.clone(),
                    managed: fleet::is_managed(&labels, &annotations)
                        .then(|| OwnedFields::of(&vpa.spec, &annotations)),
                }))
            }
            // Read as the updater reads them; one without a target covers nothing.
            (tailor_crds::UPSTREAM_GROUP, "VerticalPodAutoscaler") => {
                match UpstreamVpa::of(o.decode::<UpstreamVpaObject>()?) {
                    Some(u) if !u.target_kind.is_empty() && !u.target_name.is_empty() => {
                        Kept::Upstream(UpstreamTarget {
                            namespace: u.namespace,
                            vpa: u.name,
                            kind: u.target_kind,
                            name: u.target_name,
                        })
                    }
                    _ => Kept::Other,
                }
            }
            _ if namespace.is_empty() => Kept::Other,
            _ => Kept::Candidate(Box::new(candidate(&o, namespace, name))),
        })
    }
}

/// The slim workload form of a namespaced object, with its controller owner's kind yet to be checked.
fn candidate(o: &Object, namespace: String, name: String) -> Candidate {
    let v = &o.value;
    let owners = v
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array);
    let controller = (owners.into_iter().flatten())
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .map(|r| KindRef(text_at(r, "/apiVersion"), text_at(r, "/kind")));
    let deleting = v
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    Candidate {
        workload: Workload {
            namespace,
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            name,
            uid: text_at(v, "/metadata/uid"),
            annotation: (v.pointer("/metadata/annotations"))
                .and_then(|a| a.get(fleet::VPA_KEY)?.as_str())
                .map(str::to_owned),
            controlled_by: None,
            deleting,
        },
        controller,
    }
}

/// The plan's inputs read from a snapshot; a later object of the same identity replaces an earlier one.
#[derive(Debug, Default)]
struct FleetSnapshot {
    namespaces: BTreeMap<String, Namespace>,
    /// By (namespace, `apiVersion`, kind, name).
    workloads: BTreeMap<(String, String, String, String), Workload>,
    /// By (namespace, name).
    vpas: BTreeMap<(String, String), ExistingVpa>,
    /// By (namespace, upstream VPA name).
    upstream: BTreeMap<(String, String), UpstreamTarget>,
}

impl FleetSnapshot {
    /// Reads the snapshot's files (a directory's files directly in it, as `tailor plan` reads them),
    /// keeping workloads of the `covered` kinds.
    fn load(paths: &[PathBuf], covered: &BTreeSet<KindRef>) -> Result<Self, ManifestError> {
        let mut snapshot = FleetSnapshot::default();
        for file in manifests::manifest_files(paths, Walk::Flat)? {
            snapshot.add_file(&file, covered)?;
        }
        Ok(snapshot)
    }

    fn add_file(&mut self, file: &Path, covered: &BTreeSet<KindRef>) -> Result<(), ManifestError> {
        manifests::read_file(file, |_, kept| self.add(kept, covered))
    }

    fn add(&mut self, kept: Kept, covered: &BTreeSet<KindRef>) {
        match kept {
            Kept::Namespace(ns) => {
                self.namespaces.insert(ns.name.clone(), ns);
            }
            Kept::Candidate(c) => {
                let Candidate {
                    mut workload,
                    controller,
                } = *c;
                let kind = KindRef(workload.api_version.clone(), workload.kind.clone());
                if !covered.contains(&kind) {
                    return;
                }
                workload.controlled_by = controller
                    .filter(|owner| covered.contains(owner))
                    .map(|KindRef(_, kind)| kind);
                let w = &workload;
                let key = (
                    w.namespace.clone(),
                    w.api_version.clone(),
                    w.kind.clone(),
                    w.name.clone(),
                );
                self.workloads.insert(key, workload);
            }
            Kept::Vpa(v) => {
                self.vpas.insert((v.namespace.clone(), v.name.clone()), *v);
            }
            Kept::Upstream(u) => {
                self.upstream
                    .insert((u.namespace.clone(), u.vpa.clone()), u);
            }
            Kept::Other => {}
        }
    }

    /// Namespaces that hold workloads or VPAs but have no Namespace object in the snapshot: the plan treats
    /// them as not chosen, so it deletes the VPAs the fleet created there.
    fn missing_namespaces(&self) -> BTreeSet<&str> {
        let used = (self.workloads.values().map(|w| w.namespace.as_str()))
            .chain(self.vpas.values().map(|v| v.namespace.as_str()));
        used.filter(|ns| !self.namespaces.contains_key(*ns))
            .collect()
    }

    fn plan(&self, settings: &FleetSettings) -> FleetPlan {
        let namespaces: Vec<Namespace> = self.namespaces.values().cloned().collect();
        let workloads: Vec<Workload> = self.workloads.values().cloned().collect();
        let vpas: Vec<ExistingVpa> = self.vpas.values().cloned().collect();
        let upstream: Vec<UpstreamTarget> = self.upstream.values().cloned().collect();
        fleet::plan(&namespaces, &workloads, &vpas, &upstream, settings)
    }
}

/// The covered kinds: the built-in ones and `--kind`'s.
fn covered_kinds(extra: &[KindRef]) -> BTreeSet<KindRef> {
    (COVERED_KINDS.iter())
        .map(|(a, k)| KindRef((*a).to_owned(), (*k).to_owned()))
        .chain(extra.iter().cloned())
        .collect()
}

/// Runs `tailor fleet`.
pub fn run(args: &FleetArgs) -> anyhow::Result<ExitCode> {
    let settings = settings(args)?;
    let snapshot = FleetSnapshot::load(&args.snapshot, &covered_kinds(&args.kinds))
        .map_err(|e| InputError(e.to_string()))?;
    for ns in snapshot.missing_namespaces() {
        eprintln!(
            "note: namespace {ns} has workloads or VPAs but no Namespace object in the snapshot: it is \
             treated as not chosen"
        );
    }
    let planned = snapshot.plan(&settings);
    let text = match args.output {
        FleetFormat::Table => table(&planned),
        FleetFormat::Json => format!("{}\n", serde_json::to_string_pretty(&to_json(&planned)?)?),
    };
    // A closed pipe (`tailor fleet … | head`) is an io::Error that `main` turns into a quiet success.
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The policy annotation of an apply's VPA: where its mode and defaults came from.
fn source(a: &Apply) -> &str {
    (a.vpa.metadata.annotations.as_ref())
        .and_then(|m| m.get(fleet::POLICY_ANNOTATION))
        .map_or("", String::as_str)
}

fn mode_of(a: &Apply) -> String {
    tailor_core::policy::update_mode(&a.vpa.spec).to_string()
}

/// The plan as JSON: the same parts as the table, each apply with the VPA as it would be applied.
fn to_json(p: &FleetPlan) -> anyhow::Result<Value> {
    let apply = (p.apply.iter())
        .map(|a| {
            Ok(json!({
                "change": a.change,
                "namespace": a.vpa.metadata.namespace,
                "name": a.vpa.metadata.name,
                "kind": a.kind,
                "workload": a.workload,
                "mode": mode_of(a),
                "policy": source(a),
                "vpa": serde_json::to_value(&a.vpa)?,
            }))
        })
        .collect::<anyhow::Result<Vec<Value>>>()?;
    Ok(json!({
        "refused": p.refused,
        "apply": apply,
        "delete": p.delete,
        "skipped": p.skipped,
        "byMode": p.by_mode,
    }))
}

/// Rows as columns padded to their widest cell (the last column unpadded), each line indented by two.
fn columns(rows: &[Vec<String>]) -> String {
    let mut widths = Vec::new();
    for row in rows {
        widths.resize(widths.len().max(row.len()), 0);
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::from("  ");
        for (i, cell) in row.iter().enumerate() {
            if i + 1 < row.len() {
                line.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A titled section of the table; nothing when there are no rows.
fn section(out: &mut String, title: &str, header: &[&str], rows: Vec<Vec<String>>) {
    if rows.is_empty() {
        return;
    }
    let mut all = vec![header.iter().map(|h| (*h).to_owned()).collect()];
    all.extend(rows);
    out.push_str(&format!("{title}:\n{}\n", columns(&all)));
}

fn delete_reason(r: &DeleteReason) -> String {
    match r {
        DeleteReason::NamespaceNotChosen => "NamespaceNotChosen".into(),
        DeleteReason::WorkloadGone => "WorkloadGone".into(),
        DeleteReason::Replaced => "Replaced".into(),
        DeleteReason::Skipped(reason) => format!("Skipped: {}", reason.as_str()),
    }
}

/// The plan as aligned tables, in order: refused namespaces, VPAs to create or change, VPAs to delete,
/// skipped workloads; then the summary line.
fn table(p: &FleetPlan) -> String {
    let mut out = String::new();
    let refused = p
        .refused
        .iter()
        .map(|r| vec![r.namespace.clone(), r.message.clone()]);
    section(
        &mut out,
        "Refused namespaces",
        &["NAMESPACE", "MESSAGE"],
        refused.collect(),
    );
    let apply = p.apply.iter().map(|a| {
        let meta = &a.vpa.metadata;
        vec![
            format!("{:?}", a.change),
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
            format!("{}/{}", a.kind, a.workload),
            mode_of(a),
            source(a).to_owned(),
        ]
    });
    let header = ["CHANGE", "NAMESPACE", "VPA", "WORKLOAD", "MODE", "POLICY"];
    section(
        &mut out,
        "VPAs to create or change",
        &header,
        apply.collect(),
    );
    let delete = (p.delete.iter()).map(|d| {
        vec![
            d.namespace.clone(),
            d.name.clone(),
            delete_reason(&d.reason),
        ]
    });
    let header = ["NAMESPACE", "VPA", "REASON"];
    section(&mut out, "VPAs to delete", &header, delete.collect());
    let skipped = p.skipped.iter().map(|s| {
        let what = format!("{}/{}", s.kind, s.name);
        vec![
            s.namespace.clone(),
            what,
            s.reason.as_str().to_owned(),
            s.detail.clone(),
        ]
    });
    let header = ["NAMESPACE", "WORKLOAD", "REASON", "DETAIL"];
    section(&mut out, "Skipped workloads", &header, skipped.collect());
    out.push_str(&summary(p));
    out
}

/// `4 to create, 0 to change, 1 to delete, 3 skipped, 1 namespace refused; fleet VPAs after the plan: Off 4`.
fn summary(p: &FleetPlan) -> String {
    let creates = (p.apply.iter())
        .filter(|a| a.change == fleet::Change::Create)
        .count();
    let modes: Vec<String> = (p.by_mode.iter())
        .map(|(m, n)| format!("{m} {n}"))
        .collect();
    let modes = if modes.is_empty() {
        "none".to_owned()
    } else {
        modes.join(", ")
    };
    let refused = match p.refused.len() {
        1 => "1 namespace refused".to_owned(),
        n => format!("{n} namespaces refused"),
    };
    format!(
        "{creates} to create, {} to change, {} to delete, {} skipped, {refused}; fleet VPAs after the plan: \
         {modes}\n",
        p.apply.len() - creates,
        p.delete.len(),
        p.skipped.len(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, extra: &[KindRef]) -> FleetSnapshot {
        let covered = covered_kinds(extra);
        let mut s = FleetSnapshot::default();
        manifests::read_text("s.yaml", text, |_, kept| s.add(kept, &covered)).expect("snapshot");
        s
    }

    #[test]
    fn kinds_parse_as_group_version_kind() {
        let k = parse_kind("apps.example.com/v1/Job").expect("kind");
        assert_eq!(k, KindRef("apps.example.com/v1".into(), "Job".into()));
        let core = parse_kind("v1/ReplicationController").expect("core");
        assert_eq!(core, KindRef("v1".into(), "ReplicationController".into()));
        for bad in ["Job", "apps/v1/job", "apps/v1/", "/Job", "a b/v1/Job"] {
            assert!(parse_kind(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn workloads_of_covered_kinds_are_kept_with_their_controller() {
        let text = "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: web-1, namespace: shop, \
                    ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: web, uid: u, controller: true}]}\n\
                    ---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop, uid: u1, \
                    annotations: {tailor.dev/vpa: Initial, other: x}, deletionTimestamp: \"2026-01-01T00:00:00Z\"}\n\
                    ---\napiVersion: v1\nkind: Pod\nmetadata: {name: web-1-a, namespace: shop}\n";
        let s = read(text, &[]);
        assert_eq!(s.workloads.len(), 1, "ReplicaSets and Pods are not covered");
        let w = s.workloads.values().next().expect("web");
        assert_eq!(
            (w.uid.as_str(), w.annotation.as_deref(), w.deleting),
            ("u1", Some("Initial"), true)
        );
        let s = read(text, &[KindRef("apps/v1".into(), "ReplicaSet".into())]);
        let rs = s
            .workloads
            .values()
            .find(|w| w.kind == "ReplicaSet")
            .expect("rs");
        assert_eq!(rs.controlled_by.as_deref(), Some("Deployment"));
        assert_eq!(s.missing_namespaces(), BTreeSet::from(["shop"]));
    }

    #[test]
    fn the_summary_counts_every_part() {
        let p = FleetPlan {
            by_mode: BTreeMap::from([("Off".into(), 2), ("Initial".into(), 1)]),
            ..FleetPlan::default()
        };
        assert_eq!(
            summary(&p),
            "0 to create, 0 to change, 0 to delete, 0 skipped, 0 namespaces refused; fleet VPAs after the \
             plan: Initial 1, Off 2\n"
        );
    }
}
