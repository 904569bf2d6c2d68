//! VPA validation and defaulting with upstream's rules and messages.
//!
//! Every error is kept (no first-fail), in upstream's order, and renders exactly like Kubernetes'
//! `field.Error` (`spec.updatePolicy.minReplicas: Invalid value: 0: minReplicas has to be positive`), so
//! operators see the same text from either autoscaler.

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity;
use tailor_crds::vpa::{
    ContainerResourcePolicy, ContainerScalingMode, ControlledValues, GenericStartupBoost,
    PodUpdatePolicy, ResourceList, StartupBoost, StartupBoostType, UpdateMode,
    VerticalPodAutoscalerSpec, VerticalPodAutoscalerStatus,
};

/// Update modes listed in the "supported values" of an unsupported mode (`Auto` is accepted but deprecated).
const LISTED_UPDATE_MODES: [&str; 5] =
    ["InPlace", "InPlaceOrRecreate", "Initial", "Off", "Recreate"];
/// Resources a container policy may control.
const CONTROLLABLE_RESOURCES: [&str; 2] = ["cpu", "memory"];
/// Why per-VPA recommender settings are refused.
const PER_VPA_CONFIG_DISABLED: &str = "not supported when feature flag PerVPAConfig is disabled";

/// The value shown in an `Invalid value` error.
#[derive(Clone, Debug, PartialEq)]
pub enum BadValue {
    /// A string, shown quoted.
    Str(String),
    /// An integer, shown bare.
    Int(i64),
    /// A float, shown bare.
    Float(f64),
}

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadValue::Str(s) => write!(f, "{s:?}"),
            BadValue::Int(i) => write!(f, "{i}"),
            BadValue::Float(x) => write!(f, "{x}"),
        }
    }
}

/// What is wrong with a field (the `field.ErrorType` of Kubernetes).
#[derive(Clone, Debug, PartialEq)]
pub enum ErrorKind {
    /// `Required value`, with an optional detail.
    Required(Option<String>),
    /// `Invalid value: <value>: <detail>`.
    Invalid(BadValue, String),
    /// `Unsupported value: "<value>": supported values: ...`.
    Unsupported(String, Vec<String>),
    /// `Forbidden: <detail>`.
    Forbidden(String),
    /// `Too many: <count>: must have at most <max> item(s)`.
    TooMany(usize, usize),
}

/// One validation error on one field.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    /// Field path such as `spec.resourcePolicy.containerPolicies[0].mode`.
    pub field: String,
    /// What is wrong.
    pub kind: ErrorKind,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.field)?;
        match &self.kind {
            ErrorKind::Required(None) => write!(f, "Required value"),
            ErrorKind::Required(Some(detail)) => write!(f, "Required value: {detail}"),
            ErrorKind::Invalid(value, detail) => write!(f, "Invalid value: {value}: {detail}"),
            ErrorKind::Unsupported(value, supported) => {
                let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
                write!(
                    f,
                    "Unsupported value: {value:?}: supported values: {}",
                    list.join(", ")
                )
            }
            ErrorKind::Forbidden(detail) => write!(f, "Forbidden: {detail}"),
            ErrorKind::TooMany(count, max) => {
                let items = if *max == 1 { "item" } else { "items" };
                write!(f, "Too many: {count}: must have at most {max} {items}")
            }
        }
    }
}

/// The reason reported for a rejected object, like the API server's `NewInvalid`:
/// `VerticalPodAutoscaler.autoscaling.tailor.dev "name" is invalid: <error>` (several errors in brackets).
pub fn invalid_message(kind: &str, name: &str, errors: &[FieldError]) -> String {
    let shown = |e: &FieldError| crate::text::cut(&e.to_string(), MAX_ERROR_TEXT);
    let detail = match errors {
        [one] => shown(one),
        many => {
            let mut listed: Vec<String> = many.iter().take(MAX_LISTED_ERRORS).map(shown).collect();
            if many.len() > MAX_LISTED_ERRORS {
                listed.push(format!(
                    "and {} more errors",
                    many.len() - MAX_LISTED_ERRORS
                ));
            }
            format!("[{}]", listed.join(", "))
        }
    };
    format!(
        "{kind}.{} {:?} is invalid: {detail}",
        tailor_crds::GROUP,
        crate::text::cut(name, MAX_ERROR_TEXT)
    )
}

/// Errors listed in a rejection message (and causes in its details); the rest are counted.
pub const MAX_LISTED_ERRORS: usize = 20;
/// Longest text of one listed error, cause or warning (a value in it may come from the object).
pub const MAX_ERROR_TEXT: usize = 512;

/// Feature gates of the admission webhook that validation depends on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// `CPUStartupBoost`.
    pub cpu_startup_boost: bool,
    /// `PerVPAConfig`.
    pub per_vpa_config: bool,
    /// `InPlace`.
    pub in_place: bool,
}

/// A malformed `--feature-gates` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    /// A gate's value is neither `true` nor `false`.
    #[error("--feature-gates: {gate}: {value:?} is not true or false")]
    Value {
        /// The gate.
        gate: String,
        /// What was given.
        value: String,
    },
    /// A gate the webhook does not know.
    #[error("--feature-gates: unknown gate {0:?} (known: CPUStartupBoost, InPlace, PerVPAConfig)")]
    Unknown(String),
}

impl FeatureGates {
    /// Parses the webhook's `--feature-gates` value: `Name=bool` (or a bare `Name`, meaning true)
    /// separated by commas; empty enables none.
    pub fn parse(s: &str) -> Result<FeatureGates, FeatureGateError> {
        let mut gates = FeatureGates::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, value) = item.split_once('=').unwrap_or((item, "true"));
            let on: bool = value.trim().parse().map_err(|_| FeatureGateError::Value {
                gate: name.trim().to_string(),
                value: value.to_string(),
            })?;
            match name.trim() {
                "CPUStartupBoost" => gates.cpu_startup_boost = on,
                "InPlace" => gates.in_place = on,
                "PerVPAConfig" => gates.per_vpa_config = on,
                other => return Err(FeatureGateError::Unknown(other.to_string())),
            }
        }
        Ok(gates)
    }
}

/// What validation allows, from the feature gates and the object being updated (ratcheting: a field
/// the stored object already uses stays allowed).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ValidationOptions {
    /// Start-up boost fields may be used.
    pub allow_cpu_startup_boost: bool,
    /// Per-VPA recommender settings may be used.
    pub allow_per_vpa_config: bool,
    /// Update mode `InPlace` may be used.
    pub allow_in_place: bool,
    /// `controlledResources` entries the stored object already has.
    pub existing_controlled_resources: BTreeSet<String>,
    /// A missing `targetRef` is an error (upstream never sets this in its live handler; the schema
    /// requires `targetRef` anyway).
    pub is_vpa_create: bool,
}

impl ValidationOptions {
    /// Options for validating an object whose stored version is `old` (none on create).
    pub fn new(gates: FeatureGates, old: Option<&VerticalPodAutoscalerSpec>) -> Self {
        Self {
            allow_cpu_startup_boost: gates.cpu_startup_boost || old.is_some_and(uses_startup_boost),
            allow_per_vpa_config: gates.per_vpa_config || old.is_some_and(uses_per_vpa_config),
            allow_in_place: gates.in_place
                || old.is_some_and(|o| {
                    mode_of(o.update_policy.as_ref()) == Some(&UpdateMode::InPlace)
                }),
            existing_controlled_resources: old
                .map(existing_controlled_resources)
                .unwrap_or_default(),
            is_vpa_create: false,
        }
    }
}

fn container_policies(spec: &VerticalPodAutoscalerSpec) -> &[ContainerResourcePolicy] {
    spec.resource_policy
        .as_ref()
        .and_then(|p| p.container_policies.as_deref())
        .unwrap_or_default()
}

fn mode_of(policy: Option<&PodUpdatePolicy>) -> Option<&UpdateMode> {
    policy.and_then(|p| p.update_mode.as_ref())
}

/// Whether the object uses a start-up boost: a pod-level CPU boost or any container-level boost.
pub fn uses_startup_boost(spec: &VerticalPodAutoscalerSpec) -> bool {
    spec.startup_boost.as_ref().is_some_and(|b| b.cpu.is_some())
        || container_policies(spec)
            .iter()
            .any(|p| p.startup_boost.is_some())
}

/// Whether the object uses any per-VPA setting (upstream's `PerVPAConfig` fields).
pub fn uses_per_vpa_config(spec: &VerticalPodAutoscalerSpec) -> bool {
    spec.update_policy
        .as_ref()
        .is_some_and(|p| p.evict_after_oom_seconds.is_some())
        || uses_per_vpa_recommender_config(spec)
}

/// Whether a container policy sets a per-VPA recommender setting: `oomBumpUpRatio`, `oomMinBumpUp`,
/// `memoryAggregationIntervalSeconds` or `memoryAggregationIntervalCount`.
pub fn uses_per_vpa_recommender_config(spec: &VerticalPodAutoscalerSpec) -> bool {
    container_policies(spec).iter().any(|p| {
        p.oom_bump_up_ratio.is_some()
            || p.oom_min_bump_up.is_some()
            || p.memory_aggregation_interval_seconds.is_some()
            || p.memory_aggregation_interval_count.is_some()
    })
}

fn existing_controlled_resources(spec: &VerticalPodAutoscalerSpec) -> BTreeSet<String> {
    container_policies(spec)
        .iter()
        .flat_map(|p| p.controlled_resources.iter().flatten().cloned())
        .collect()
}

/// The result of validating one object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Validation {
    /// Errors; the object is rejected when there is any.
    pub errors: Vec<FieldError>,
    /// Warnings returned to the client either way.
    pub warnings: Vec<String>,
}

impl Validation {
    fn error(&mut self, field: impl Into<String>, kind: ErrorKind) {
        self.errors.push(FieldError {
            field: field.into(),
            kind,
        });
    }

    /// Whether the object is accepted.
    pub fn is_valid(&self) -> bool {
        self.errors.is_empty()
    }
}

/// Validates the recommendations in a VPA status: no value may be negative (Tailor's own rule, also applied to
/// status writes from other writers; upstream validates no status). A negative request is refused by the API
/// server only after the webhook has patched it into a pod, so the pod could never be created.
pub fn validate_status(status: &VerticalPodAutoscalerStatus) -> Validation {
    let mut v = Validation::default();
    let recommendations = status
        .recommendation
        .iter()
        .flat_map(|r| r.container_recommendations.iter().flatten());
    for (i, rec) in recommendations.enumerate() {
        let lists = [
            ("target", Some(&rec.target)),
            ("lowerBound", rec.lower_bound.as_ref()),
            ("upperBound", rec.upper_bound.as_ref()),
            ("uncappedTarget", rec.uncapped_target.as_ref()),
        ];
        for (name, list) in lists {
            for (resource, q) in list.into_iter().flatten() {
                if quantity::Amount::parse(q).is_ok_and(|a| a.is_negative()) {
                    v.error(
                        format!(
                            "status.recommendation.containerRecommendations[{i}].{name}.{resource}"
                        ),
                        ErrorKind::Invalid(
                            BadValue::Str(q.0.clone()),
                            "must be greater than or equal to 0".into(),
                        ),
                    );
                }
            }
        }
    }
    v
}

/// The rules that hold whatever the webhook's feature gates, for an object the webhook may never have seen
/// (applied while it was down, or before an upgrade): what the recommender reports as `ConfigUnsupported`.
/// Every gated field is allowed, and so is every `controlledResources` entry the object already has (as on
/// an update).
pub fn validate_spec(spec: &VerticalPodAutoscalerSpec) -> Validation {
    let options = ValidationOptions {
        allow_cpu_startup_boost: true,
        allow_per_vpa_config: true,
        allow_in_place: true,
        existing_controlled_resources: existing_controlled_resources(spec),
        is_vpa_create: false,
    };
    validate(spec, &options)
}

/// Validates a VPA spec with upstream's rules (V1–V24 of the admission specification), and Tailor's bounds
/// on quantities.
pub fn validate(spec: &VerticalPodAutoscalerSpec, options: &ValidationOptions) -> Validation {
    let mut v = Validation::default();
    if spec.target_ref.is_none() && options.is_vpa_create {
        v.error(
            "spec.targetRef",
            ErrorKind::Required(Some(
                "If you're using v1beta1 version of the API, please migrate to v1".into(),
            )),
        );
    }
    if let Some(policy) = &spec.update_policy {
        validate_update_policy(policy, options, &mut v);
    }
    for (i, policy) in container_policies(spec).iter().enumerate() {
        let path = format!("spec.resourcePolicy.containerPolicies[{i}]");
        validate_container_policy(&path, policy, options, &mut v);
    }
    if let Some(boost) = &spec.startup_boost {
        validate_startup_boost("spec.startupBoost", boost, options, &mut v);
    }
    if let Some(recommenders) = &spec.recommenders
        && recommenders.len() > 1
    {
        v.error(
            "spec.recommenders",
            ErrorKind::TooMany(recommenders.len(), 1),
        );
    }
    v
}

fn validate_update_policy(
    policy: &PodUpdatePolicy,
    options: &ValidationOptions,
    v: &mut Validation,
) {
    const MODE: &str = "spec.updatePolicy.updateMode";
    match &policy.update_mode {
        None => v.error(
            MODE,
            ErrorKind::Required(Some("updateMode is required if UpdatePolicy is used".into())),
        ),
        Some(UpdateMode::Unknown(other)) => v.error(
            MODE,
            ErrorKind::Unsupported(other.clone(), LISTED_UPDATE_MODES.iter().map(|s| s.to_string()).collect()),
        ),
        Some(UpdateMode::Auto) => v.warnings.push(
            "spec.updatePolicy: \"Auto\" mode is deprecated and will be removed in a future API version. \
             Use explicit update modes like: [InPlace InPlaceOrRecreate Initial Off Recreate]. \
             See https://github.com/kubernetes/autoscaler/issues/8424 for more details."
                .into(),
        ),
        Some(UpdateMode::InPlace) if !options.allow_in_place => v.error(
            MODE,
            ErrorKind::Forbidden(
                "in order to use UpdateMode InPlace, you must enable feature gate InPlace in the admission-controller args"
                    .into(),
            ),
        ),
        Some(_) => {}
    }
    if let Some(min) = policy.min_replicas
        && min <= 0
    {
        v.error(
            "spec.updatePolicy.minReplicas",
            ErrorKind::Invalid(
                BadValue::Int(min.into()),
                "minReplicas has to be positive".into(),
            ),
        );
    }
    if let Some(seconds) = policy.evict_after_oom_seconds {
        let field = "spec.updatePolicy.evictAfterOOMSeconds";
        if !options.allow_per_vpa_config {
            v.error(field, ErrorKind::Forbidden(PER_VPA_CONFIG_DISABLED.into()));
        } else if seconds < 1 {
            v.error(field, at_least_one(seconds.into()));
        }
    }
}

fn at_least_one(value: i64) -> ErrorKind {
    ErrorKind::Invalid(
        BadValue::Int(value),
        "must be greater than or equal to 1".into(),
    )
}

fn validate_container_policy(
    path: &str,
    policy: &ContainerResourcePolicy,
    options: &ValidationOptions,
    v: &mut Validation,
) {
    if policy
        .container_name
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        v.error(format!("{path}.containerName"), ErrorKind::Required(None));
    }
    if let Some(ContainerScalingMode::Unknown(other)) = &policy.mode {
        v.error(
            format!("{path}.mode"),
            ErrorKind::Unsupported(other.clone(), vec!["Auto".into(), "Off".into()]),
        );
    }
    validate_bounds(
        path,
        policy.min_allowed.as_ref(),
        policy.max_allowed.as_ref(),
        v,
    );
    if policy.mode == Some(ContainerScalingMode::Off)
        && policy.controlled_values == Some(ControlledValues::RequestsAndLimits)
    {
        v.error(
            format!("{path}.controlledValues"),
            ErrorKind::Forbidden(
                "controlledValues shouldn't be specified if container scaling mode is off".into(),
            ),
        );
    }
    for (j, resource) in policy.controlled_resources.iter().flatten().enumerate() {
        if CONTROLLABLE_RESOURCES.contains(&resource.as_str()) {
            continue;
        }
        let field = format!("{path}.controlledResources[{j}]");
        if options.existing_controlled_resources.contains(resource) {
            v.warnings.push(format!(
                "{field}: unsupported value {resource:?} is allowed only because it is present in the existing VPA object; supported values: \"cpu\", \"memory\""
            ));
        } else {
            v.error(
                field,
                ErrorKind::Unsupported(
                    resource.clone(),
                    CONTROLLABLE_RESOURCES
                        .iter()
                        .map(|s| s.to_string())
                        .collect(),
                ),
            );
        }
    }
    validate_per_vpa_config(path, policy, options, v);
    if let Some(boost) = &policy.startup_boost {
        validate_startup_boost(&format!("{path}.startupBoost"), boost, options, v);
    }
}

fn validate_bounds(
    path: &str,
    min: Option<&ResourceList>,
    max: Option<&ResourceList>,
    v: &mut Validation,
) {
    for (name, bounds) in [("minAllowed", min), ("maxAllowed", max)] {
        for (resource, q) in bounds.into_iter().flatten() {
            validate_whole(&format!("{path}.{name}[{resource}]"), resource, q, v);
        }
    }
    let (Some(min), Some(max)) = (min, max) else {
        return;
    };
    for (resource, max_q) in max {
        let Some(min_q) = min.get(resource) else {
            continue;
        };
        if let Ok(std::cmp::Ordering::Less) = quantity::cmp(max_q, min_q) {
            v.error(
                format!("{path}.maxAllowed[{resource}]"),
                ErrorKind::Invalid(
                    BadValue::Str(max_q.0.clone()),
                    format!(
                        "max resource for {resource} is lower than min of {:?}",
                        min_q.0
                    ),
                ),
            );
        }
    }
}

/// CPU must be whole millicores and memory whole bytes (upstream's rules); an unparsable quantity is invalid
/// too. Tailor's own rules follow: no negative amount (upstream admits one and its recommender ignores it),
/// and no amount beyond what Kubernetes holds in 64 bits (millicores, bytes), which no recommender, pod or
/// node can honour (upstream admits `1e30`, and its recommender then misreads it).
fn validate_whole(field: &str, resource: &str, q: &Quantity, v: &mut Validation) {
    let (whole, unit) = match resource {
        "cpu" => (
            quantity::is_whole_milli(q),
            "must be a whole number of milli CPUs",
        ),
        "memory" => (quantity::is_whole(q), "must be a whole number of bytes"),
        _ => return,
    };
    let invalid = |v: &mut Validation, detail: String| {
        v.error(
            field,
            ErrorKind::Invalid(BadValue::Str(q.0.clone()), detail),
        )
    };
    match whole {
        Ok(true) => {}
        Ok(false) => return invalid(v, unit.into()),
        Err(e) => return invalid(v, e.reason.into()),
    }
    match quantity::Amount::parse(q) {
        Ok(a) if a.is_negative() => invalid(v, "must be greater than or equal to 0".into()),
        Ok(a) if (a.amount_i128(resource)).is_none_or(|x| i64::try_from(x).is_err()) => {
            let most = quantity::from_amount(resource, i64::MAX);
            invalid(v, format!("must be at most {}", most.0));
        }
        Ok(_) => {}
        Err(e) => invalid(v, e.reason.into()),
    }
}

fn validate_per_vpa_config(
    path: &str,
    policy: &ContainerResourcePolicy,
    options: &ValidationOptions,
    v: &mut Validation,
) {
    if let Some(ratio) = &policy.oom_bump_up_ratio {
        let field = format!("{path}.oomBumpUpRatio");
        if !options.allow_per_vpa_config {
            v.error(field, ErrorKind::Forbidden(PER_VPA_CONFIG_DISABLED.into()));
        } else {
            match quantity::milli_value(ratio) {
                Ok(milli) if milli < 1000 => v.error(
                    field,
                    ErrorKind::Invalid(
                        BadValue::Float(milli as f64 / 1000.0),
                        "must be greater than or equal to 1.0".into(),
                    ),
                ),
                Ok(_) => {}
                Err(e) => v.error(
                    field,
                    ErrorKind::Invalid(BadValue::Str(ratio.0.clone()), e.reason.into()),
                ),
            }
        }
    }
    if let Some(bump) = &policy.oom_min_bump_up {
        let field = format!("{path}.oomMinBumpUp");
        if !options.allow_per_vpa_config {
            v.error(field, ErrorKind::Forbidden(PER_VPA_CONFIG_DISABLED.into()));
        } else {
            match quantity::value(bump) {
                Ok(value) if value < 0 => v.error(
                    field,
                    ErrorKind::Invalid(
                        BadValue::Int(value),
                        "must be greater than or equal to 0".into(),
                    ),
                ),
                Ok(_) => {}
                Err(e) => v.error(
                    field,
                    ErrorKind::Invalid(BadValue::Str(bump.0.clone()), e.reason.into()),
                ),
            }
        }
    }
    let intervals = [
        (
            "memoryAggregationIntervalSeconds",
            policy.memory_aggregation_interval_seconds.map(i64::from),
        ),
        (
            "memoryAggregationIntervalCount",
            policy.memory_aggregation_interval_count,
        ),
    ];
    for (name, value) in intervals {
        let Some(value) = value else { continue };
        let field = format!("{path}.{name}");
        if !options.allow_per_vpa_config {
            v.error(field, ErrorKind::Forbidden(PER_VPA_CONFIG_DISABLED.into()));
        } else if value < 1 {
            v.error(field, at_least_one(value));
        }
    }
}

fn validate_startup_boost(
    path: &str,
    boost: &StartupBoost,
    options: &ValidationOptions,
    v: &mut Validation,
) {
    if !options.allow_cpu_startup_boost {
        v.error(
            path,
            ErrorKind::Forbidden(
                "in order to use startupBoost, you must enable feature gate CPUStartupBoost in the admission-controller args"
                    .into(),
            ),
        );
        return;
    }
    if let Some(cpu) = &boost.cpu {
        validate_cpu_boost(&format!("{path}.cpu"), cpu, v);
    }
}

fn validate_cpu_boost(path: &str, boost: &GenericStartupBoost, v: &mut Validation) {
    match &boost.type_ {
        None => v.error(
            format!("{path}.type"),
            ErrorKind::Required(Some("must be either Factor or Quantity".into())),
        ),
        Some(StartupBoostType::Factor) => match boost.factor {
            None => v.error(
                format!("{path}.factor"),
                ErrorKind::Required(Some("required when type is Factor".into())),
            ),
            Some(f) if f < 1 => v.error(
                format!("{path}.factor"),
                ErrorKind::Invalid(
                    BadValue::Int(f.into()),
                    "must be >= 1 for type Factor".into(),
                ),
            ),
            Some(_) => {}
        },
        Some(StartupBoostType::Quantity) => match &boost.quantity {
            None => v.error(
                format!("{path}.quantity"),
                ErrorKind::Required(Some("required when type is Quantity".into())),
            ),
            Some(q) => validate_whole(&format!("{path}.quantity"), "cpu", q, v),
        },
        Some(StartupBoostType::Unknown(other)) => v.error(
            format!("{path}.type"),
            ErrorKind::Unsupported(other.clone(), vec!["Factor".into(), "Quantity".into()]),
        ),
    }
}

/// Whether the webhook must default the object: `spec.updatePolicy` is absent.
pub fn needs_update_policy_default(spec: &VerticalPodAutoscalerSpec) -> bool {
    spec.update_policy.is_none()
}

/// The policy the webhook adds when `spec.updatePolicy` is absent: `{updateMode: Recreate}`.
pub fn default_update_policy() -> PodUpdatePolicy {
    PodUpdatePolicy {
        update_mode: Some(UpdateMode::Recreate),
        ..PodUpdatePolicy::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_gates_parse_like_the_webhook_flag() {
        assert_eq!(FeatureGates::parse(""), Ok(FeatureGates::default()));
        assert_eq!(
            FeatureGates::parse("CPUStartupBoost=true, InPlace ,PerVPAConfig=false"),
            Ok(FeatureGates {
                cpu_startup_boost: true,
                per_vpa_config: false,
                in_place: true,
            })
        );
        assert_eq!(
            FeatureGates::parse("InPlace=yes").map_err(|e| e.to_string()),
            Err("--feature-gates: InPlace: \"yes\" is not true or false".to_string())
        );
        assert_eq!(
            FeatureGates::parse("AllAlpha=true"),
            Err(FeatureGateError::Unknown("AllAlpha".into()))
        );
    }
}

#[cfg(test)]
mod bound_tests {
    use super::*;
    use tailor_crds::vpa::PodResourcePolicy;

    fn spec_with(min: &[(&str, &str)], max: &[(&str, &str)]) -> VerticalPodAutoscalerSpec {
        let list = |l: &[(&str, &str)]| {
            (!l.is_empty()).then(|| {
                l.iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect::<ResourceList>()
            })
        };
        VerticalPodAutoscalerSpec {
            resource_policy: Some(PodResourcePolicy {
                container_policies: Some(vec![ContainerResourcePolicy {
                    container_name: Some("app".into()),
                    min_allowed: list(min),
                    max_allowed: list(max),
                    ..Default::default()
                }]),
            }),
            ..Default::default()
        }
    }

    fn errors(spec: &VerticalPodAutoscalerSpec) -> Vec<String> {
        validate_spec(spec)
            .errors
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_negative_bound_is_refused_with_its_field() {
        assert_eq!(
            errors(&spec_with(&[("memory", "-1")], &[])),
            [
                "spec.resourcePolicy.containerPolicies[0].minAllowed[memory]: Invalid value: \"-1\": must be greater than or equal to 0"
            ]
        );
        assert_eq!(
            errors(&spec_with(&[("cpu", "-100m")], &[])),
            [
                "spec.resourcePolicy.containerPolicies[0].minAllowed[cpu]: Invalid value: \"-100m\": must be greater than or equal to 0"
            ]
        );
    }

    #[test]
    fn a_bound_beyond_64_bits_is_refused_with_its_field() {
        assert_eq!(
            errors(&spec_with(&[], &[("cpu", "1e30"), ("memory", "1e30")])),
            [
                "spec.resourcePolicy.containerPolicies[0].maxAllowed[cpu]: Invalid value: \"1e30\": must be at most 9223372036854775807m",
                "spec.resourcePolicy.containerPolicies[0].maxAllowed[memory]: Invalid value: \"1e30\": must be at most 9223372036854775807",
            ]
        );
        // The largest amounts that fit are accepted; 8Ei is one byte too many.
        assert_eq!(
            errors(&spec_with(
                &[],
                &[("cpu", "9223372036854775807m"), ("memory", "8Ei")]
            )),
            [
                "spec.resourcePolicy.containerPolicies[0].maxAllowed[memory]: Invalid value: \"8Ei\": must be at most 9223372036854775807"
            ]
        );
        assert!(errors(&spec_with(&[], &[("cpu", "9223372036854775807m")])).is_empty());
    }

    #[test]
    fn min_above_max_is_refused_by_the_spec_rules() {
        assert_eq!(
            errors(&spec_with(&[("cpu", "2")], &[("cpu", "1")])),
            [
                "spec.resourcePolicy.containerPolicies[0].maxAllowed[cpu]: Invalid value: \"1\": max resource for cpu is lower than min of \"2\""
            ]
        );
    }

    #[test]
    fn the_spec_rules_allow_what_only_a_feature_gate_forbids() {
        let mut spec = spec_with(&[], &[]);
        spec.update_policy = Some(PodUpdatePolicy {
            update_mode: Some(UpdateMode::InPlace),
            evict_after_oom_seconds: Some(60),
            ..Default::default()
        });
        if let Some(p) = spec
            .resource_policy
            .as_mut()
            .and_then(|p| p.container_policies.as_mut())
            .and_then(|c| c.first_mut())
        {
            p.oom_bump_up_ratio = Some(Quantity("2".into()));
            p.controlled_resources = Some(vec!["cpu".into(), "ephemeral-storage".into()]);
        }
        assert_eq!(errors(&spec), Vec::<String>::new());
        // The webhook without the gates refuses the same object.
        let webhook = validate(
            &spec,
            &ValidationOptions::new(FeatureGates::default(), None),
        );
        assert_eq!(webhook.errors.len(), 4, "{:?}", webhook.errors);
    }
}
