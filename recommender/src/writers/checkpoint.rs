//! Checkpoints: conversion between the engine's aggregate checkpoints and the
//! `VerticalPodAutoscalerCheckpoint` resource, and the open memory windows Tailor keeps alongside.
//!
//! The status holds what upstream holds (the merged aggregate minus the open memory windows). Tailor adds
//! the open windows as the annotation [`OPEN_WINDOWS_ANNOTATION`], so that their peaks survive a restart
//! (upstream loses them). The annotation ([`WindowAggregate`], format 3) lists each open window by pod
//! (end and peak) up to [`LISTED_WINDOW_BYTES`] of text: on restart, a window whose container still runs is
//! continued (later samples raise the same peak, as without the restart) and any other is added back as
//! ended, so the histogram is the one a process that never restarted holds. Windows past the budget (a
//! container with thousands of pods) are aggregated per memory-histogram bucket (at most 176 entries) and
//! added back as ended. Format 2 (the aggregate alone, which counted the windows of running containers a
//! second time at every restart) and the per-pod list written before it ([`OpenWindow`]) are still read.
//! Upstream-compatible readers ignore the annotation.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::{Deserialize, Serialize};
use tailor_crds::{
    HistogramCheckpoint as ApiHistogram, VerticalPodAutoscalerCheckpoint,
    VerticalPodAutoscalerCheckpointSpec, VerticalPodAutoscalerCheckpointStatus,
};

use crate::time::{from_time, to_time, to_time_secs};
use tailor_core::sizing::POD_ROW;
use tailor_engine::histogram::{DecayingHistogram, HistogramCheckpoint, HistogramOptions};
use tailor_engine::model::AggregateCheckpoint;
use tailor_engine::units::{Nanos, ResourceAmount};

/// Annotation holding the open memory windows of the checkpointed container ([`WindowAggregate`] as JSON;
/// formerly a JSON list of [`OpenWindow`]).
pub const OPEN_WINDOWS_ANNOTATION: &str = "tailor.dev/open-memory-windows";

/// Format version of [`WindowAggregate`] written (3: windows listed by pod, the rest aggregated).
pub const WINDOW_AGGREGATE_VERSION: u32 = 3;

/// The earlier format version still read (2: aggregated only).
const AGGREGATED_ONLY_VERSION: u32 = 2;

/// Text budget of the windows listed by pod in one annotation (the API server allows 256 KiB of
/// annotations per object): about 3,500 pods with typical ReplicaSet pod names.
pub const LISTED_WINDOW_BYTES: usize = 160 * 1024;

/// The open memory window of one container instance at checkpoint time (the per-pod format written
/// before [`WindowAggregate`]; still read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenWindow {
    /// Pod name.
    pub pod: String,
    /// Window end (ns since the Unix epoch).
    pub end: Nanos,
    /// Peak of the window so far (bytes).
    pub peak: ResourceAmount,
}

impl From<tailor_engine::model::OpenWindow> for OpenWindow {
    fn from(w: tailor_engine::model::OpenWindow) -> Self {
        OpenWindow {
            pod: w.pod,
            end: w.end,
            peak: w.peak,
        }
    }
}

/// The open memory windows of every instance of one container: listed by pod within
/// [`LISTED_WINDOW_BYTES`], the rest aggregated by histogram bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowAggregate {
    /// Format version ([`WINDOW_AGGREGATE_VERSION`]).
    pub v: u32,
    /// Reference time of the weights: the latest window end (ns since the Unix epoch).
    pub at: Nanos,
    /// Half-life the weights were decayed with (ns).
    pub half_life: i64,
    /// The windows not listed in `pods`, per memory-histogram bucket with a peak in it: (the largest peak
    /// in the bucket in bytes, the sum of the windows' weights `2^((end − at) / half_life)`), by ascending
    /// peak.
    pub peaks: Vec<(ResourceAmount, f64)>,
    /// Windows by pod: (pod name, `at` − window end in ns, peak in bytes), by pod name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<(String, i64, ResourceAmount)>,
}

/// Weights are stored with this many decimals (a bucket's weight is at most the number of windows).
const WEIGHT_SCALE: f64 = 1e6;

/// Text of one listed window: `["pod",before,peak],`.
fn listed_size(pod: &str, before: i64, peak: ResourceAmount) -> usize {
    let digits = |n: i64| {
        n.unsigned_abs()
            .checked_ilog10()
            .map_or(1, |d| d as usize + 1)
            + usize::from(n < 0)
    };
    // A pod name is a DNS subdomain: nothing in it is escaped in JSON.
    pod.len() + 2 + digits(before) + digits(peak) + 4
}

impl WindowAggregate {
    /// The windows (pod, end, peak) of one container for a memory histogram with `options` and
    /// `half_life`: listed by pod (in the order given) within `budget` bytes of text, the rest aggregated;
    /// `None` when there are no windows.
    pub fn of(
        windows: impl IntoIterator<Item = (String, Nanos, ResourceAmount)>,
        options: &HistogramOptions,
        half_life: i64,
        budget: usize,
    ) -> Option<WindowAggregate> {
        let windows: Vec<(String, Nanos, ResourceAmount)> = windows.into_iter().collect();
        let at = windows.iter().map(|&(_, end, _)| end).max()?;
        let half_life = half_life.max(1);
        let mut buckets: BTreeMap<usize, (ResourceAmount, f64)> = BTreeMap::new();
        let mut pods = Vec::new();
        let mut used = 0usize;
        let mut full = false;
        for (pod, end, peak) in windows {
            let before = at.saturating_sub(end);
            let size = listed_size(&pod, before, peak);
            // The first windows that fit are listed; from the first that does not, the rest is aggregated.
            full = full || used + size > budget;
            if !full {
                used += size;
                pods.push((pod, before, peak));
                continue;
            }
            let exponent = (end as f64 - at as f64) / half_life as f64;
            let weight = exponent.exp2();
            let slot = buckets
                .entry(options.find_bucket(peak as f64))
                .or_insert((peak, 0.0));
            slot.0 = slot.0.max(peak);
            slot.1 += weight;
        }
        Some(WindowAggregate {
            v: WINDOW_AGGREGATE_VERSION,
            at,
            half_life,
            peaks: buckets
                .into_values()
                .map(|(peak, w)| (peak, (w * WEIGHT_SCALE).round() / WEIGHT_SCALE))
                .collect(),
            pods,
        })
    }

    /// Adds the aggregated windows (not those listed by pod) to `memory` as if they had ended: each
    /// bucket's peak with its weight at `at`.
    pub fn add_to(&self, memory: &mut DecayingHistogram) {
        for &(peak, weight) in &self.peaks {
            if weight.is_finite() && weight > 0.0 && peak >= 0 {
                memory.add_sample(peak as f64, weight, self.at);
            }
        }
    }

    /// The windows listed by pod.
    pub fn listed(&self) -> impl Iterator<Item = OpenWindow> + '_ {
        self.pods.iter().map(|(pod, before, peak)| OpenWindow {
            pod: pod.clone(),
            end: self.at.saturating_sub(*before),
            peak: *peak,
        })
    }
}

/// What a checkpoint's annotation holds.
#[derive(Debug, Clone, PartialEq)]
pub enum StoredWindows {
    /// Nothing (no annotation, an empty one, or one that cannot be read).
    None,
    /// The earlier per-pod list.
    PerPod(Vec<OpenWindow>),
    /// One aggregate for the container.
    Aggregated(WindowAggregate),
}

/// The container part of the pod-level row's checkpoint name ([`checkpoint_name`], docs/pod-level-resources.md).
pub const POD_ROW_CHECKPOINT: &str =
    "tailor-dev-pod-the-pod-level-envelope-a-name-longer-than-any-container-name";
/// Longest object name (a DNS subdomain).
pub const MAX_NAME_LEN: usize = 253;

/// Checkpoint object name for a (VPA, container) pair: `<vpa>.<container>`. A container name has no dot, so
/// the name tells both apart and no two pairs share one (upstream's `<vpa>-<container>` gives `web` +
/// `api-app` and `web-api` + `app` the same object, which the two VPAs then overwrite in turn). A pair whose
/// name would pass 253 characters gets a shortened VPA part with a hash of the whole VPA name.
pub fn checkpoint_name(vpa: &str, container: &str) -> String {
    // The pod-level row's name has a `/`, which no object name may have: its checkpoint is named by a last
    // segment longer than the 63 characters of any container name, so no pair shares it either.
    let container = if container == POD_ROW {
        POD_ROW_CHECKPOINT
    } else {
        container
    };
    let name = format!("{vpa}.{container}");
    if name.len() <= MAX_NAME_LEN {
        return name;
    }
    let hash = format!("{:016x}", fnv1a(vpa.as_bytes()));
    let room = MAX_NAME_LEN.saturating_sub(container.len() + hash.len() + 2);
    let mut end = room.min(vpa.len());
    while !vpa.is_char_boundary(end) {
        end -= 1;
    }
    let prefix = vpa[..end].trim_end_matches(['.', '-']);
    format!("{prefix}-{hash}.{container}")
}

/// The name upstream (and Tailor before docs/decisions/checkpoints.md) gives the checkpoint of a (VPA, container) pair; such
/// objects are still read, and deleted once the pair's checkpoint under [`checkpoint_name`] exists.
pub fn legacy_checkpoint_name(vpa: &str, container: &str) -> String {
    format!("{vpa}-{container}")
}

/// 64-bit FNV-1a (stable across releases, unlike the standard library's hasher).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn histogram_to_api(h: &HistogramCheckpoint) -> ApiHistogram {
    ApiHistogram {
        reference_timestamp: h.reference_timestamp.and_then(to_time),
        bucket_weights: h
            .bucket_weights
            .iter()
            .filter_map(|(&b, &w)| u32::try_from(b).ok().map(|b| (b, w)))
            .collect(),
        total_weight: h.total_weight,
    }
}

fn histogram_from_api(h: Option<&ApiHistogram>) -> HistogramCheckpoint {
    let Some(h) = h else {
        return HistogramCheckpoint::default();
    };
    HistogramCheckpoint {
        reference_timestamp: h.reference_timestamp.as_ref().and_then(from_time),
        bucket_weights: h
            .bucket_weights
            .iter()
            .map(|(&b, &w)| (i64::from(b), w))
            .collect(),
        total_weight: h.total_weight,
    }
}

/// The resource status for an engine checkpoint written at `now`.
pub fn to_api_status(
    cp: &AggregateCheckpoint,
    now: Nanos,
) -> VerticalPodAutoscalerCheckpointStatus {
    VerticalPodAutoscalerCheckpointStatus {
        last_update_time: to_time_secs(now),
        version: Some(cp.version.clone()),
        cpu_histogram: Some(histogram_to_api(&cp.cpu_histogram)),
        memory_histogram: Some(histogram_to_api(&cp.memory_histogram)),
        first_sample_start: cp.first_sample_start.and_then(to_time),
        last_sample_start: cp.last_sample_start.and_then(to_time),
        total_samples_count: i64::try_from(cp.total_samples_count).ok(),
    }
}

/// The engine checkpoint stored in a resource status (the version is checked when loading).
pub fn from_api_status(s: &VerticalPodAutoscalerCheckpointStatus) -> AggregateCheckpoint {
    AggregateCheckpoint {
        version: s.version.clone().unwrap_or_default(),
        first_sample_start: s.first_sample_start.as_ref().and_then(from_time),
        last_sample_start: s.last_sample_start.as_ref().and_then(from_time),
        total_samples_count: s
            .total_samples_count
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0),
        cpu_histogram: histogram_from_api(s.cpu_histogram.as_ref()),
        memory_histogram: histogram_from_api(s.memory_histogram.as_ref()),
    }
}

/// Largest `totalWeight` a restored histogram may have. Decay weights are renormalised before they pass
/// 2^100 per sample, so a real histogram stays many orders of magnitude below this; a larger total (up to
/// 1.7e308, which JSON allows) would swamp every sample added after the restore, or overflow.
pub const MAX_TOTAL_WEIGHT: f64 = 1e60;

/// Checks a checkpoint read back at `now` before it is loaded, for what its schema cannot refuse: a
/// `totalWeight` no histogram holds (an error: the checkpoint is skipped), and a `referenceTimestamp` further
/// ahead than a histogram sets it (more than `max_ahead` after `now`; a memory histogram's is legitimately up to
/// a window and half a half-life ahead): the weights are then taken as of `now` rounded to the half-life
/// (what a histogram started now would use), since relative to a far-future reference every new sample would
/// weigh next to nothing and the recommendation would freeze. Returns the histograms whose reference moved.
pub fn sanitize(
    cp: &mut AggregateCheckpoint,
    now: Nanos,
    max_ahead: i64,
    half_lives: (i64, i64),
) -> Result<Vec<&'static str>, String> {
    let mut moved = Vec::new();
    for (which, h, half_life) in [
        ("cpu", &mut cp.cpu_histogram, half_lives.0),
        ("memory", &mut cp.memory_histogram, half_lives.1),
    ] {
        if !h.total_weight.is_finite() || h.total_weight > MAX_TOTAL_WEIGHT {
            return Err(format!(
                "{which} histogram: totalWeight {} is larger than any histogram holds ({MAX_TOTAL_WEIGHT:e})",
                h.total_weight
            ));
        }
        if let Some(r) = h.reference_timestamp
            && r > now.saturating_add(max_ahead)
        {
            let half_life = half_life.max(1);
            let rounded = (now as i128 + half_life as i128 / 2).div_euclid(half_life as i128)
                * half_life as i128;
            h.reference_timestamp = Some(i64::try_from(rounded).unwrap_or(now));
            moved.push(which);
        }
    }
    Ok(moved)
}

/// The open windows recorded on a checkpoint, in either format.
pub fn open_windows(cp: &VerticalPodAutoscalerCheckpoint) -> StoredWindows {
    let Some(text) = cp
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(OPEN_WINDOWS_ANNOTATION))
    else {
        return StoredWindows::None;
    };
    if let Ok(a) = serde_json::from_str::<WindowAggregate>(text) {
        return if a.v == WINDOW_AGGREGATE_VERSION || a.v == AGGREGATED_ONLY_VERSION {
            StoredWindows::Aggregated(a)
        } else {
            StoredWindows::None
        };
    }
    match serde_json::from_str::<Vec<OpenWindow>>(text) {
        Ok(ws) if !ws.is_empty() => StoredWindows::PerPod(ws),
        _ => StoredWindows::None,
    }
}

/// A complete checkpoint object for `container` of `vpa`, owned by the VPA (so the API server also
/// removes it when the VPA goes). Its only annotation is [`OPEN_WINDOWS_ANNOTATION`] (`[]` without open
/// windows, which every version reads): applied server-side, the writer owns that one key and no other
/// annotation.
pub fn build(
    vpa: &ObjectMeta,
    container: &str,
    status: VerticalPodAutoscalerCheckpointStatus,
    windows: Option<&WindowAggregate>,
) -> Result<VerticalPodAutoscalerCheckpoint, serde_json::Error> {
    let vpa_name = vpa.name.clone().unwrap_or_default();
    let mut annotations = BTreeMap::new();
    let text = match windows {
        Some(w) => serde_json::to_string(w)?,
        None => "[]".to_string(),
    };
    annotations.insert(OPEN_WINDOWS_ANNOTATION.to_string(), text);
    let owner = vpa.uid.as_ref().map(|uid| OwnerReference {
        api_version: "autoscaling.tailor.dev/v1".into(),
        kind: "VerticalPodAutoscaler".into(),
        name: vpa_name.clone(),
        uid: uid.clone(),
        controller: Some(false),
        block_owner_deletion: Some(false),
    });
    Ok(VerticalPodAutoscalerCheckpoint {
        metadata: ObjectMeta {
            name: Some(checkpoint_name(&vpa_name, container)),
            namespace: vpa.namespace.clone(),
            annotations: Some(annotations),
            owner_references: owner.map(|o| vec![o]),
            ..Default::default()
        },
        spec: VerticalPodAutoscalerCheckpointSpec {
            vpa_object_name: Some(vpa_name),
            container_name: Some(container.into()),
        },
        status: Some(status),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_engine::model::{AggregateContainerState, AggregationsConfig, SampleSink};

    const T: Nanos = 1_700_000_000_000_000_000;
    const HOUR: Nanos = 3_600_000_000_000;

    fn vpa() -> ObjectMeta {
        ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some("uid-web".into()),
            ..Default::default()
        }
    }

    /// 4,000 pods of one container, peaks spread over the whole memory range (10 MB to 1 TB), window ends
    /// spread over a day.
    fn many_windows() -> Vec<(String, Nanos, ResourceAmount)> {
        (0..4000i64)
            .map(|i| {
                let peak = (1e7 * 1e5f64.powf(i as f64 / 3999.0)) as i64;
                (
                    format!("web-7d9f8b6c5-{i:05}"),
                    T + (i % 24) * HOUR + i,
                    peak,
                )
            })
            .collect()
    }

    fn annotation(cp: &VerticalPodAutoscalerCheckpoint) -> &str {
        cp.metadata.annotations.as_ref().unwrap()[OPEN_WINDOWS_ANNOTATION].as_str()
    }

    #[test]
    fn the_annotation_of_4000_pods_is_bounded() {
        let cfg = AggregationsConfig::default();
        let agg = AggregateContainerState::new(&cfg, T);
        let (options, half_life) = (agg.memory.histogram().options(), agg.memory.half_life());
        // Aggregated only: at most one entry per bucket, a few KiB.
        let aggregated = WindowAggregate::of(many_windows(), options, half_life, 0).unwrap();
        assert!(aggregated.peaks.len() <= 176, "{}", aggregated.peaks.len());
        assert!(aggregated.pods.is_empty());
        let text = serde_json::to_string(&aggregated).unwrap();
        assert!(text.len() < 8 * 1024, "annotation of {} bytes", text.len());
        // As written: most pods listed, the rest aggregated, the whole under the API server's 256 KiB.
        let windows =
            WindowAggregate::of(many_windows(), options, half_life, LISTED_WINDOW_BYTES).unwrap();
        assert!(windows.pods.len() > 3000, "{}", windows.pods.len());
        assert!(windows.pods.len() < 4000 && !windows.peaks.is_empty());
        let cp = build(
            &vpa(),
            "app",
            VerticalPodAutoscalerCheckpointStatus::default(),
            Some(&windows),
        )
        .unwrap();
        let text = annotation(&cp);
        assert!(
            text.len() < LISTED_WINDOW_BYTES + 8 * 1024,
            "annotation of {} bytes",
            text.len()
        );
        // Every window is either listed (with its exact end and peak) or aggregated.
        let listed: Vec<OpenWindow> = windows.listed().collect();
        for (w, (pod, end, peak)) in listed.iter().zip(many_windows()) {
            assert_eq!((&w.pod, w.end, w.peak), (&pod, end, peak));
        }
        // Only Tailor's key, and the object reads back.
        assert_eq!(cp.metadata.annotations.as_ref().unwrap().len(), 1);
        assert_eq!(open_windows(&cp), StoredWindows::Aggregated(windows));
    }

    #[test]
    fn the_aggregate_only_format_is_still_read() {
        let text = r#"{"v":2,"at":1700086400000000000,"halfLife":86400000000000,"peaks":[[209715200,1.0]]}"#;
        let mut cp = build(
            &vpa(),
            "app",
            VerticalPodAutoscalerCheckpointStatus::default(),
            None,
        )
        .unwrap();
        cp.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(OPEN_WINDOWS_ANNOTATION.into(), text.into());
        let StoredWindows::Aggregated(a) = open_windows(&cp) else {
            panic!("not read");
        };
        assert_eq!(a.peaks, [(209_715_200, 1.0)]);
        assert!(a.pods.is_empty());
    }

    #[test]
    fn restoring_the_aggregate_equals_adding_every_window() {
        let cfg = AggregationsConfig::default();
        let mut one_by_one = AggregateContainerState::new(&cfg, T);
        let mut aggregated = AggregateContainerState::new(&cfg, T);
        for i in 0..50 {
            one_by_one.add_memory(300_000_000 + i * 1_000_000, T - (i + 1) * HOUR);
            aggregated.add_memory(300_000_000 + i * 1_000_000, T - (i + 1) * HOUR);
        }
        let windows = many_windows();
        for (_, end, peak) in &windows {
            one_by_one.memory.add_sample(*peak as f64, 1.0, *end);
        }
        WindowAggregate::of(
            windows,
            aggregated.memory.histogram().options(),
            aggregated.memory.half_life(),
            0,
        )
        .unwrap()
        .add_to(&mut aggregated.memory);
        let (a, b) = (one_by_one.memory.histogram(), aggregated.memory.histogram());
        assert_eq!(
            one_by_one.memory.reference_timestamp(),
            aggregated.memory.reference_timestamp()
        );
        for (bucket, w) in a.buckets() {
            let v = b.bucket_weight(bucket);
            assert!(
                (w - v).abs() <= 1e-6 * w.max(1.0),
                "bucket {bucket}: {w} vs {v}"
            );
        }
        for p in [0.5, 0.9, 0.95, 0.99] {
            assert_eq!(
                one_by_one.memory.percentile(p),
                aggregated.memory.percentile(p),
                "p{p}"
            );
        }
    }

    #[test]
    fn the_per_pod_format_and_empty_annotations_are_still_read() {
        let mut cp = build(
            &vpa(),
            "app",
            VerticalPodAutoscalerCheckpointStatus::default(),
            None,
        )
        .unwrap();
        assert_eq!(annotation(&cp), "[]");
        assert_eq!(open_windows(&cp), StoredWindows::None);
        let old = r#"[{"pod":"web-0","end":1700086400000000000,"peak":209715200}]"#;
        cp.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(OPEN_WINDOWS_ANNOTATION.into(), old.into());
        assert_eq!(
            open_windows(&cp),
            StoredWindows::PerPod(vec![OpenWindow {
                pod: "web-0".into(),
                end: 1_700_086_400_000_000_000,
                peak: 209_715_200
            }])
        );
        for junk in ["not json", r#"{"v":4,"at":0,"halfLife":1,"peaks":[]}"#] {
            cp.metadata
                .annotations
                .as_mut()
                .unwrap()
                .insert(OPEN_WINDOWS_ANNOTATION.into(), junk.into());
            assert_eq!(open_windows(&cp), StoredWindows::None, "{junk}");
        }
    }

    #[test]
    fn sanitize_refuses_absurd_weights_and_brings_far_future_references_back() {
        const DAY: i64 = 24 * HOUR;
        let now = T + 5 * HOUR;
        let cp = |cpu_ref: Nanos, total: f64| AggregateCheckpoint {
            version: "v3".into(),
            first_sample_start: None,
            last_sample_start: None,
            total_samples_count: 1,
            cpu_histogram: HistogramCheckpoint {
                reference_timestamp: Some(cpu_ref),
                bucket_weights: [(9, 10_000)].into(),
                total_weight: total,
            },
            memory_histogram: HistogramCheckpoint {
                reference_timestamp: Some(now + DAY + 12 * HOUR),
                bucket_weights: [(3, 10_000)].into(),
                total_weight: 1.0,
            },
        };
        let ahead = 2 * DAY;
        // As written by a histogram: untouched (the memory reference a window and a half ahead).
        let mut ok = cp(now + 12 * HOUR, 3.5);
        let before = ok.clone();
        assert_eq!(sanitize(&mut ok, now, ahead, (DAY, DAY)), Ok(vec![]));
        assert_eq!(ok, before);
        // A year ahead: the weights count as of now, rounded to the half-life.
        let mut future = cp(now + 365 * DAY, 3.5);
        assert_eq!(
            sanitize(&mut future, now, ahead, (DAY, DAY)),
            Ok(vec!["cpu"])
        );
        let r = future.cpu_histogram.reference_timestamp.unwrap();
        assert_eq!(r.rem_euclid(DAY), 0);
        assert!((r - now).abs() <= DAY / 2, "{r} vs {now}");
        // Absurd totals are refused.
        for total in [1.7e308, f64::INFINITY, f64::NAN] {
            let err = sanitize(&mut cp(now, total), now, ahead, (DAY, DAY)).unwrap_err();
            assert!(err.contains("totalWeight"), "{err}");
        }
    }

    #[test]
    fn checkpoint_names_never_collide_and_stay_valid() {
        // Upstream's names collide here.
        assert_eq!(
            legacy_checkpoint_name("web", "api-app"),
            legacy_checkpoint_name("web-api", "app")
        );
        assert_eq!(checkpoint_name("web", "api-app"), "web.api-app");
        assert_eq!(checkpoint_name("web-api", "app"), "web-api.app");
        assert_ne!(checkpoint_name("a.b", "c"), checkpoint_name("a", "b-c"));
        // The pod-level row: a valid object name, whose last segment no container name can be.
        let pod = checkpoint_name("web", POD_ROW);
        assert!(!pod.contains('/') && pod.len() <= MAX_NAME_LEN, "{pod}");
        let last = pod.rsplit('.').next().unwrap_or_default();
        assert!(
            last.len() > 63 && !pod.starts_with("web.tailor.dev"),
            "{pod}"
        );
        let long_pod = checkpoint_name(&"v".repeat(250), POD_ROW);
        assert!(long_pod.len() <= MAX_NAME_LEN && long_pod.ends_with(POD_ROW_CHECKPOINT));
        // A long VPA name: shortened with a hash, under the limit, distinct from its neighbours.
        let long = "v".repeat(250);
        let (a, b) = (
            checkpoint_name(&long, "app"),
            checkpoint_name(&format!("{long}x"), "app"),
        );
        assert!(
            a.len() <= MAX_NAME_LEN && b.len() <= MAX_NAME_LEN,
            "{a} {b}"
        );
        assert_ne!(a, b);
        assert!(a.ends_with(".app") && !a.contains("-."), "{a}");
        let dotted = format!("{}.{}", "a".repeat(120), "b".repeat(120));
        let c = checkpoint_name(&dotted, &"c".repeat(63));
        assert!(c.len() <= MAX_NAME_LEN, "{c}");
        assert!(
            c.split('.')
                .all(|label| !label.is_empty() && !label.starts_with('-') && !label.ends_with('-')),
            "{c}"
        );
    }

    #[test]
    fn status_round_trip_preserves_the_aggregate() {
        let cfg = AggregationsConfig::default();
        let t = 1_700_000_000_000_000_000;
        let mut a = AggregateContainerState::new(&cfg, t);
        for i in 0..100 {
            a.add_cpu(100 + i, t + i * 60_000_000_000);
            a.add_memory(200_000_000 + i * 1000, t + 86_400_000_000_000);
        }
        let cp = a.save_to_checkpoint();
        let back = from_api_status(&to_api_status(&cp, t));
        assert_eq!(back.version, cp.version);
        assert_eq!(back.total_samples_count, cp.total_samples_count);
        assert_eq!(
            back.cpu_histogram.bucket_weights,
            cp.cpu_histogram.bucket_weights
        );
        assert_eq!(back.memory_histogram, cp.memory_histogram);
        assert_eq!(back.first_sample_start, cp.first_sample_start);
    }
}
