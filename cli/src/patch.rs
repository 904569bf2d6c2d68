//! `tailor patch`: what the admission webhook would do to a pod, offline (the `tailor-admission` library's
//! pure patch computation, no server).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tailor_admission::preview::{InputFile, preview_patch, run_cases};
use tailor_core::sizing::PatchOptions;
use tailor_kube::manifests::{self, Object};

use serde_json::Value;

use crate::error::InputError;

/// Arguments of `tailor patch`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["pod", "case"])))]
pub struct PatchArgs {
    /// The pod (or a workload whose pod template is used), YAML or JSON.
    #[arg(long, requires = "vpa", conflicts_with = "case")]
    pub pod: Option<PathBuf>,
    /// The Tailor VPA with its status recommendation, YAML or JSON (other documents in the file are ignored).
    #[arg(long)]
    pub vpa: Option<PathBuf>,
    /// LimitRange manifests of the pod's namespace (repeatable; a file may hold several).
    #[arg(long = "limit-range")]
    pub limit_ranges: Vec<PathBuf>,
    /// An admission case file (one case or an array); prints `{"id","patches","allowed"}` per case.
    #[arg(long)]
    pub case: Option<PathBuf>,
    /// Apply `startupBoost` at admission (upstream feature gate CPUStartupBoost).
    #[arg(long)]
    pub cpu_startup_boost: bool,
    /// Ceiling of a boosted CPU request.
    #[arg(long)]
    pub max_allowed_cpu_boost: Option<String>,
    /// Keep proportional limits within the container LimitRange's maxLimitRequestRatio (Tailor option).
    #[arg(long)]
    pub honor_max_limit_request_ratio: bool,
    /// Also size native sidecars, init containers with restartPolicy Always (Tailor option).
    #[arg(long)]
    pub native_sidecars: bool,
    /// The webhook's pod floor (the same flags and defaults).
    #[command(flatten)]
    pub floor: tailor_kube::floor_flags::PodFloorFlags,
    /// Patch even when the VPA does not select the pod (another namespace or workload).
    #[arg(long)]
    pub force: bool,
}

/// The first object of `text` (a manifest file, read as [`tailor_kube::manifests`] reads it) that satisfies
/// `want`.
fn document(
    name: &str,
    text: &str,
    want: impl Fn(&Value) -> bool,
) -> Result<Option<Value>, InputError> {
    let mut found = None;
    manifests::read_text(name, text, |_, object: Object| {
        if found.is_none() && want(&object.value) {
            found = Some(object.value);
        }
    })
    .map_err(|e| InputError(e.to_string()))?;
    Ok(found)
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The workload (kind, name) a pod belongs to: its controller, a ReplicaSet named after its Deployment seen
/// as that Deployment, a Job named after its CronJob also as that CronJob; a workload manifest is itself.
fn owners_of(obj: &Value) -> Vec<(String, String)> {
    let kind = str_at(obj, "/kind").unwrap_or("Pod");
    if kind != "Pod" {
        return str_at(obj, "/metadata/name")
            .map(|n| vec![(kind.to_string(), n.to_string())])
            .unwrap_or_default();
    }
    let refs = obj
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let Some(owner) = refs
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .or(refs.first())
    else {
        return Vec::new();
    };
    let (Some(k), Some(n)) = (str_at(owner, "/kind"), str_at(owner, "/name")) else {
        return Vec::new();
    };
    let mut out = vec![(k.to_string(), n.to_string())];
    let hash = str_at(obj, "/metadata/labels/pod-template-hash");
    match (k, n.rsplit_once('-')) {
        ("ReplicaSet", Some((deployment, h))) if hash.is_none_or(|x| x == h) => {
            out.push(("Deployment".into(), deployment.into()));
        }
        ("Job", Some((cron, n))) if n.chars().all(|c| c.is_ascii_digit()) => {
            out.push(("CronJob".into(), cron.into()));
        }
        _ => {}
    }
    out
}

/// Why the VPA does not select the pod, if it does not.
fn mismatch(pod: &Value, vpa: &Value) -> Option<String> {
    let (pod_ns, vpa_ns) = (
        str_at(pod, "/metadata/namespace"),
        str_at(vpa, "/metadata/namespace"),
    );
    if let (Some(p), Some(v)) = (pod_ns, vpa_ns)
        && p != v
    {
        return Some(format!(
            "the pod is in namespace {p:?}, the VPA in {v:?}: a VPA only selects pods of its own namespace"
        ));
    }
    let (Some(kind), Some(name)) = (
        str_at(vpa, "/spec/targetRef/kind"),
        str_at(vpa, "/spec/targetRef/name"),
    ) else {
        return Some("the VPA has no spec.targetRef (kind and name)".into());
    };
    let owners = owners_of(pod);
    if owners.iter().any(|(k, n)| k == kind && n == name) {
        return None;
    }
    let what = match owners.last() {
        Some((k, n)) => format!("the pod belongs to {k}/{n}"),
        None => "the pod has no controller".to_string(),
    };
    Some(format!("{what}, the VPA targets {kind}/{name}"))
}

fn read(path: &Path) -> anyhow::Result<(String, String)> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| InputError(format!("{}: {e}", path.display())))?;
    Ok((path.display().to_string(), text))
}

/// Runs the preview and prints JSON on stdout.
pub fn run(args: &PatchArgs) -> anyhow::Result<ExitCode> {
    let options = PatchOptions {
        cpu_startup_boost: args.cpu_startup_boost,
        max_allowed_cpu_boost: args.max_allowed_cpu_boost.clone().map(Quantity),
        honor_max_limit_request_ratio: args.honor_max_limit_request_ratio,
        native_sidecars: args.native_sidecars,
        floor: args.floor.floor(),
        // `tailor patch` previews pods as the webhook does without `--pod-level-resources`.
        pod_level_resources: false,
    };
    let result = if let Some(case) = &args.case {
        let (name, text) = read(case)?;
        // Cases hold upstream's answers, which have no floor.
        let case_options = PatchOptions {
            floor: None,
            ..options.clone()
        };
        run_cases(
            InputFile {
                name: &name,
                content: &text,
            },
            &case_options,
        )
    } else {
        let (Some(pod), Some(vpa)) = (&args.pod, &args.vpa) else {
            return Err(InputError("--pod needs --vpa".into()).into());
        };
        let (pod_name, pod_text) = read(pod)?;
        let (vpa_name, vpa_text) = read(vpa)?;
        if !args.force {
            let pod_doc = document(&pod_name, &pod_text, |d| d.get("kind").is_some())?;
            let vpa_doc = document(&vpa_name, &vpa_text, |d| {
                str_at(d, "/kind") == Some("VerticalPodAutoscaler")
            })?;
            if let (Some(p), Some(v)) = (pod_doc, vpa_doc)
                && let Some(why) = mismatch(&p, &v)
            {
                return Err(InputError(format!(
                    "{vpa_name} does not select {pod_name}: {why} (--force patches anyway)"
                ))
                .into());
            }
        }
        let lrs = args
            .limit_ranges
            .iter()
            .map(|p| read(p))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let lr_files: Vec<InputFile<'_>> = lrs
            .iter()
            .map(|(name, content)| InputFile { name, content })
            .collect();
        preview_patch(
            InputFile {
                name: &pod_name,
                content: &pod_text,
            },
            InputFile {
                name: &vpa_name,
                content: &vpa_text,
            },
            &lr_files,
            &options,
        )
    };
    let value = result.map_err(|e| InputError(e.to_string()))?;
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &value)?;
    writeln!(out)?;
    Ok(ExitCode::SUCCESS)
}
