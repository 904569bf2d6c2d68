//! The fleet as the pages show it: one [`Fleet`] of [`Workload`]s, built by the recommender from what it
//! holds (VPA status, its pod cache, the model's histograms, the OOMs it saw) or by `tailor report` from a
//! trace. It is also the JSON twin of the pages (`/api/v1/...`), so its field names are a public format.

use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tailor_engine::histogram::{Histogram, HistogramOptions};

/// CPU in millicores and memory in bytes; either may be unknown. Sixteen bytes: an unknown amount is kept as
/// `i64::MIN`, which no amount reaches (they saturate one above it), so a container's six rows stay small in
/// the fleet the recommender keeps. Serialised as two optional fields (`cpuMillicores`, `memoryBytes`).
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "ResourcesFields", into = "ResourcesFields")]
pub struct Resources {
    cpu: i64,
    memory: i64,
}

/// The stored form of an unknown amount.
const UNKNOWN: i64 = i64::MIN;

fn packed(v: Option<i64>) -> i64 {
    v.map_or(UNKNOWN, |v| v.max(UNKNOWN + 1))
}

fn unpacked(v: i64) -> Option<i64> {
    (v != UNKNOWN).then_some(v)
}

/// [`Resources`] as its JSON has it.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourcesFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cpu_millicores: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    memory_bytes: Option<i64>,
}

impl From<ResourcesFields> for Resources {
    fn from(f: ResourcesFields) -> Self {
        Resources::of(f.cpu_millicores, f.memory_bytes)
    }
}

impl From<Resources> for ResourcesFields {
    fn from(r: Resources) -> Self {
        ResourcesFields {
            cpu_millicores: r.cpu_millicores(),
            memory_bytes: r.memory_bytes(),
        }
    }
}

impl Default for Resources {
    fn default() -> Self {
        Resources::of(None, None)
    }
}

impl std::fmt::Debug for Resources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resources")
            .field("cpu_millicores", &self.cpu_millicores())
            .field("memory_bytes", &self.memory_bytes())
            .finish()
    }
}

impl Resources {
    /// Both known.
    pub fn new(cpu_millicores: i64, memory_bytes: i64) -> Self {
        Resources::of(Some(cpu_millicores), Some(memory_bytes))
    }

    /// Either may be unknown.
    pub fn of(cpu_millicores: Option<i64>, memory_bytes: Option<i64>) -> Self {
        Resources {
            cpu: packed(cpu_millicores),
            memory: packed(memory_bytes),
        }
    }

    /// CPU, millicores.
    pub fn cpu_millicores(self) -> Option<i64> {
        unpacked(self.cpu)
    }

    /// Memory, bytes.
    pub fn memory_bytes(self) -> Option<i64> {
        unpacked(self.memory)
    }

    /// Each resource the larger of the two (a known amount above an unknown one).
    pub fn max(self, other: Resources) -> Self {
        Resources::of(
            self.cpu_millicores().max(other.cpu_millicores()),
            self.memory_bytes().max(other.memory_bytes()),
        )
    }

    /// `self` times `n` (a per-pod figure for `n` pods).
    pub fn times(self, n: i64) -> Self {
        Resources::of(
            self.cpu_millicores().map(|c| c.saturating_mul(n)),
            self.memory_bytes().map(|m| m.saturating_mul(n)),
        )
    }

    /// The sum, each resource known when known on both sides or on one (an unknown adds nothing).
    pub fn plus(self, other: Resources) -> Self {
        let add = |a: Option<i64>, b: Option<i64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
        };
        Resources::of(
            add(self.cpu_millicores(), other.cpu_millicores()),
            add(self.memory_bytes(), other.memory_bytes()),
        )
    }
}

/// One bucket of a usage histogram: `[start, end)` in the resource's unit (cores or bytes) and its
/// (decayed) weight.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// Start.
    pub start: f64,
    /// End.
    pub end: f64,
    /// Weight.
    pub weight: f64,
}

/// A container's usage distribution for one resource, as the model holds it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Distribution {
    /// The non-empty buckets, in order (at most [`crate::MAX_BUCKETS`]).
    pub buckets: Vec<Bucket>,
    /// The 50th, 90th, 95th and 99th percentiles.
    pub percentiles: Vec<(f64, f64)>,
}

impl Distribution {
    /// The histogram's non-empty buckets (at most [`crate::MAX_BUCKETS`], the heaviest kept) and its 50th,
    /// 90th, 95th and 99th percentiles; `None` when it is empty.
    pub fn of(h: &Histogram) -> Option<Distribution> {
        if h.is_empty() {
            return None;
        }
        let opts = h.options();
        let mut buckets: Vec<Bucket> = (h.buckets())
            .map(|(i, weight)| Bucket {
                start: opts.bucket_start(i),
                end: h.bucket_end(i),
                weight,
            })
            .collect();
        if buckets.len() > crate::MAX_BUCKETS {
            buckets.sort_by(|a, b| b.weight.total_cmp(&a.weight));
            buckets.truncate(crate::MAX_BUCKETS);
            buckets.sort_by(|a, b| a.start.total_cmp(&b.start));
        }
        let percentiles = [0.5, 0.9, 0.95, 0.99]
            .map(|p| (p, h.percentile(p)))
            .to_vec();
        Some(Distribution {
            buckets,
            percentiles,
        })
    }
}

/// A container's usage for one resource: compact, as the recommender publishes it (the model's non-empty
/// buckets as index and weight on its bucketing scheme, and its percentiles: about a hundred bytes, read into
/// a [`Distribution`] only when a page shows it), or the buckets and percentiles themselves (what a JSON twin
/// deserialises to). Both serialise as a [`Distribution`].
#[derive(Clone, Debug)]
pub enum Usage {
    /// The model's histogram, compact.
    Model(CompactHistogram),
    /// Buckets and percentiles.
    Shown(Distribution),
}

/// A histogram's non-empty buckets (at most [`crate::MAX_BUCKETS`], the heaviest kept) and its 50th, 90th,
/// 95th and 99th percentiles.
#[derive(Clone, Debug)]
pub struct CompactHistogram {
    opts: &'static HistogramOptions,
    buckets: Box<[(u32, f32)]>,
    percentiles: [f64; 4],
}

/// The percentiles a distribution shows.
const PERCENTILES: [f64; 4] = [0.5, 0.9, 0.95, 0.99];

impl Usage {
    /// The usage of `h`; `None` when it is empty.
    pub fn of(h: &Histogram) -> Option<Usage> {
        if h.is_empty() {
            return None;
        }
        let mut buckets: Vec<(u32, f32)> = (h.buckets())
            .filter_map(|(i, w)| Some((u32::try_from(i).ok()?, w as f32)))
            .collect();
        if buckets.len() > crate::MAX_BUCKETS {
            buckets.sort_by(|a, b| b.1.total_cmp(&a.1));
            buckets.truncate(crate::MAX_BUCKETS);
            buckets.sort_by_key(|b| b.0);
        }
        Some(Usage::Model(CompactHistogram {
            opts: h.options(),
            buckets: buckets.into(),
            percentiles: PERCENTILES.map(|p| h.percentile(p)),
        }))
    }

    /// Its buckets and percentiles.
    pub fn distribution(&self) -> Cow<'_, Distribution> {
        match self {
            Usage::Model(c) => Cow::Owned(c.distribution()),
            Usage::Shown(d) => Cow::Borrowed(d),
        }
    }
}

impl CompactHistogram {
    fn distribution(&self) -> Distribution {
        let last = self.opts.num_buckets().saturating_sub(1);
        let buckets = (self.buckets.iter())
            .map(|&(i, weight)| {
                let i = i as usize;
                Bucket {
                    start: self.opts.bucket_start(i),
                    end: self.opts.bucket_start(if i < last { i + 1 } else { i }),
                    weight: f64::from(weight),
                }
            })
            .collect();
        Distribution {
            buckets,
            percentiles: PERCENTILES.into_iter().zip(self.percentiles).collect(),
        }
    }
}

impl From<Distribution> for Usage {
    fn from(d: Distribution) -> Self {
        Usage::Shown(d)
    }
}

impl PartialEq for Usage {
    fn eq(&self, other: &Usage) -> bool {
        self.distribution() == other.distribution()
    }
}

impl Serialize for Usage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.distribution().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Usage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Distribution::deserialize(d).map(Usage::Shown)
    }
}

/// One container of a workload.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    /// Name.
    pub name: Arc<str>,
    /// What its running pods request (the largest request among them).
    pub requests: Resources,
    /// Their limits, likewise.
    pub limits: Resources,
    /// The recommendation's `target`.
    pub target: Resources,
    /// `lowerBound`.
    pub lower_bound: Resources,
    /// `upperBound`.
    pub upper_bound: Resources,
    /// `uncappedTarget`.
    pub uncapped_target: Resources,
    /// CPU usage (cores), when the model holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_usage: Option<Usage>,
    /// Memory usage (bytes; peaks per window), when the model holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_usage: Option<Usage>,
}

/// One condition of the VPA's status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Reason.
    #[serde(default)]
    pub reason: String,
    /// Message.
    #[serde(default)]
    pub message: String,
}

impl Condition {
    /// A condition from its fields as the VPA status has them (reason and message optional).
    pub fn new(type_: &str, status: &str, reason: Option<&str>, message: Option<&str>) -> Self {
        Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.unwrap_or_default().to_owned(),
            message: message.unwrap_or_default().to_owned(),
        }
    }
}

/// Something about a workload that needs a look.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Flag {
    /// A container ran out of memory in the last day.
    Oom,
    /// The recommendation rests on little history (`LowConfidence`).
    LowConfidence,
    /// The updater leaves the workload alone (`UpdatesBlocked`).
    UpdatesBlocked,
    /// The VPA selects no running pod.
    NoPods,
    /// No recommendation yet.
    NoRecommendation,
    /// Running pods Tailor never sized — not its webhook at admission (it was unreachable, the pods were
    /// created before their VPA, or in a namespace it does not see), nor its updater in place since — though
    /// the mode sizes pods.
    AdmittedUnsized,
}

impl Flag {
    /// Every flag, in the order the pages list them.
    pub const ALL: [Flag; 6] = [
        Flag::Oom,
        Flag::LowConfidence,
        Flag::UpdatesBlocked,
        Flag::AdmittedUnsized,
        Flag::NoPods,
        Flag::NoRecommendation,
    ];

    /// Short words for a table cell.
    pub fn label(self) -> &'static str {
        match self {
            Flag::Oom => "OOM",
            Flag::LowConfidence => "low confidence",
            Flag::UpdatesBlocked => "updates blocked",
            Flag::NoPods => "no pods",
            Flag::NoRecommendation => "no recommendation",
            Flag::AdmittedUnsized => "admitted unsized",
        }
    }
}

/// The flags a workload carries, one bit each; they list (and serialise, as a JSON list) in
/// [`Flag::ALL`]'s order.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Flags(u8);

impl Flags {
    /// With `flag`.
    pub fn insert(&mut self, flag: Flag) {
        self.0 |= 1 << flag as u8;
    }

    /// Whether `flag` is set.
    pub fn contains(self, flag: Flag) -> bool {
        self.0 & (1 << flag as u8) != 0
    }

    /// None set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The flags set, in [`Flag::ALL`]'s order.
    pub fn iter(self) -> FlagsIter {
        FlagsIter { set: self, next: 0 }
    }
}

/// The flags of a [`Flags`], in [`Flag::ALL`]'s order.
#[derive(Clone, Debug)]
pub struct FlagsIter {
    set: Flags,
    next: usize,
}

impl Iterator for FlagsIter {
    type Item = Flag;
    fn next(&mut self) -> Option<Flag> {
        while let Some(&f) = Flag::ALL.get(self.next) {
            self.next += 1;
            if self.set.contains(f) {
                return Some(f);
            }
        }
        None
    }
}

impl FromIterator<Flag> for Flags {
    fn from_iter<I: IntoIterator<Item = Flag>>(flags: I) -> Self {
        let mut set = Flags::default();
        flags.into_iter().for_each(|f| set.insert(f));
        set
    }
}

impl<const N: usize> From<[Flag; N]> for Flags {
    fn from(flags: [Flag; N]) -> Self {
        flags.into_iter().collect()
    }
}

impl IntoIterator for &Flags {
    type Item = Flag;
    type IntoIter = FlagsIter;
    fn into_iter(self) -> FlagsIter {
        self.iter()
    }
}

impl std::fmt::Debug for Flags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for Flags {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Flags {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<Flag>::deserialize(d).map(|v| v.into_iter().collect())
    }
}

/// One thing the updater did or declined to do, from the events it recorded.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdaterAction {
    /// When (RFC 3339).
    pub time: String,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The event's reason (`EvictedByVPA`, `InPlaceResizedByVPA`, `ConflictingVPAs`, …).
    pub reason: String,
    /// What it was recorded on: `Pod/NAME` or `VerticalPodAutoscaler/NAME`.
    pub object: String,
    /// The event's message.
    pub message: String,
}

/// The API group a workload's VPA belongs to (one byte in the fleet; its name in the JSON).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ApiGroup {
    /// `autoscaling.tailor.dev`.
    #[default]
    #[serde(rename = "autoscaling.tailor.dev")]
    Tailor,
    /// `autoscaling.k8s.io`, upstream VPA's.
    #[serde(rename = "autoscaling.k8s.io")]
    Upstream,
}

impl ApiGroup {
    /// The group's name.
    pub fn name(self) -> &'static str {
        match self {
            ApiGroup::Tailor => "autoscaling.tailor.dev",
            ApiGroup::Upstream => "autoscaling.k8s.io",
        }
    }

    fn is_tailor(&self) -> bool {
        *self == ApiGroup::Tailor
    }
}

/// One VPA and what it sizes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Workload {
    /// The VPA's namespace.
    pub namespace: Arc<str>,
    /// The VPA's name.
    pub vpa: Arc<str>,
    /// The VPA's API group: Tailor's, or upstream's for an upstream VPA, which `tailor report --snapshot`
    /// shows beside Tailor's (left out of the JSON when Tailor's).
    #[serde(default, skip_serializing_if = "ApiGroup::is_tailor")]
    pub api_group: ApiGroup,
    /// The target's kind.
    pub kind: Arc<str>,
    /// The target's name.
    pub name: Arc<str>,
    /// `updateMode`.
    pub mode: Arc<str>,
    /// The profile (`tailor.dev/profile`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Arc<str>>,
    /// Running pods.
    pub pods: i64,
    /// Running pods Tailor never sized (see [`Flag::AdmittedUnsized`]), when the mode sizes pods.
    #[serde(default)]
    pub admitted_unsized: i64,
    /// The instance family most running pods run on, when their nodes name one (it picks the prices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_family: Option<Arc<str>>,
    /// OOM kills seen in the last day.
    pub ooms_last_day: i64,
    /// Containers.
    pub containers: Box<[Container]>,
    /// The status's conditions (shared between workloads whose conditions are the same).
    pub conditions: Arc<[Condition]>,
    /// What needs a look.
    pub flags: Flags,
    /// `--explain`-style text, when the source has it.
    #[serde(default, skip_serializing_if = "str::is_empty")]
    pub explain: Box<str>,
    /// The updater's last actions on the VPA and its pods, newest first (at most
    /// [`crate::MAX_ACTIONS`]).
    #[serde(default, skip_serializing_if = "<[UpdaterAction]>::is_empty")]
    pub updater_actions: Box<[UpdaterAction]>,
}

impl Workload {
    /// The pod's requests (sum over containers) times the running pods.
    pub fn requested(&self) -> Resources {
        let pod = (self.containers.iter()).fold(Resources::default(), |a, c| a.plus(c.requests));
        pod.times(self.pods)
    }

    /// The pod's targets (sum over containers) times the running pods.
    pub fn recommended(&self) -> Resources {
        let pod = (self.containers.iter()).fold(Resources::default(), |a, c| a.plus(c.target));
        pod.times(self.pods)
    }

    /// The monthly cost of what the running pods request, at the prices of their instance family.
    pub fn requested_monthly(&self, prices: &crate::money::Prices) -> f64 {
        prices.monthly_in(self.requested(), self.instance_family.as_deref())
    }

    /// The monthly cost at the targets, likewise.
    pub fn recommended_monthly(&self, prices: &crate::money::Prices) -> f64 {
        prices.monthly_in(self.recommended(), self.instance_family.as_deref())
    }

    /// Requested minus recommended, per month.
    pub fn saving_monthly(&self, prices: &crate::money::Prices) -> f64 {
        self.requested_monthly(prices) - self.recommended_monthly(prices)
    }

    /// `namespace/vpa`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.vpa)
    }
}

/// Where the numbers come from and when.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// What produced them (`tailor-recommender tailor-recommender-7d9f`, `tailor report`).
    pub producer: String,
    /// When (RFC 3339).
    pub generated_at: String,
    /// The command that shows the same objects, when there is a cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubectl_context: Option<String>,
}

/// The whole fleet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fleet {
    /// Where the numbers come from.
    pub source: Source,
    /// The prices costs are computed with.
    pub prices: crate::money::Prices,
    /// Every workload, in (namespace, VPA) order.
    pub workloads: Vec<Workload>,
}

impl Fleet {
    /// The workload of VPA `namespace/vpa`: a binary search when the workloads are in that order, as a
    /// published fleet's are, else a scan.
    pub fn workload(&self, namespace: &str, vpa: &str) -> Option<&Workload> {
        let key = |w: &Workload| (&*w.namespace, &*w.vpa).cmp(&(namespace, vpa));
        match self.workloads.binary_search_by(key) {
            Ok(i) => self.workloads.get(i),
            Err(_) => {
                (self.workloads.iter()).find(|w| *w.namespace == *namespace && *w.vpa == *vpa)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Flag, Flags, Resources};

    #[test]
    fn resources_keep_unknown_apart_from_zero_and_serialise_as_optional_fields() {
        let r = Resources::of(Some(0), None);
        assert_eq!((r.cpu_millicores(), r.memory_bytes()), (Some(0), None));
        assert_eq!(
            serde_json::to_string(&r).ok().as_deref(),
            Some(r#"{"cpuMillicores":0}"#)
        );
        let back: Resources = serde_json::from_str(r#"{"memoryBytes":-5}"#).unwrap_or_default();
        assert_eq!(
            (back.cpu_millicores(), back.memory_bytes()),
            (None, Some(-5))
        );
        // The one value that stands for "unknown" is never a known amount.
        let low = Resources::of(Some(i64::MIN), Some(i64::MIN));
        assert_eq!(low.cpu_millicores(), Some(i64::MIN + 1));
        assert_eq!(
            Resources::default().plus(r).times(3).cpu_millicores(),
            Some(0)
        );
        assert_eq!(Resources::default().max(r), r);
    }

    #[test]
    fn flags_list_in_the_pages_order_whatever_the_order_given() {
        let f = Flags::from([Flag::NoRecommendation, Flag::Oom, Flag::AdmittedUnsized]);
        assert_eq!(
            f.iter().collect::<Vec<_>>(),
            [Flag::Oom, Flag::AdmittedUnsized, Flag::NoRecommendation]
        );
        let json = serde_json::to_string(&f).unwrap_or_default();
        assert_eq!(json, r#"["Oom","AdmittedUnsized","NoRecommendation"]"#);
        assert_eq!(serde_json::from_str::<Flags>(&json).ok(), Some(f));
        assert!(f.contains(Flag::Oom) && !f.contains(Flag::NoPods));
        assert!(Flags::default().is_empty());
        assert!(serde_json::from_str::<Flags>(r#"["Nonsense"]"#).is_err());
    }
}
