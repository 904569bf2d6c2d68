//! The status's form of an estimate: rounding, humanised memory, and the integer-CPU post-processor.

use super::{ContainerRecommendation, RawEstimate, RecommenderConfig};
use std::collections::BTreeMap;

use tailor_core::quantity::binary_suffix;

use crate::policy::Resources;
use crate::units::ResourceAmount;

/// Annotation prefix/suffix that turn on the integer-CPU post-processor for a container.
pub const INTEGER_CPU_PREFIX: &str = "vpa-post-processor.kubernetes.io/";
/// See [`INTEGER_CPU_PREFIX`].
pub const INTEGER_CPU_SUFFIX: &str = "_integerCPU";

/// Formats raw estimates into the list the status carries: sorted by name, rounded (and humanised), with
/// `uncappedTarget` a copy of the target.
pub fn map_to_list(
    estimates: &BTreeMap<String, RawEstimate>,
    config: &RecommenderConfig,
) -> Vec<ContainerRecommendation> {
    estimates
        .iter()
        .map(|(name, raw)| {
            let target = format_resources(raw.target, config);
            ContainerRecommendation {
                container_name: name.clone(),
                target,
                lower_bound: format_resources(raw.lower_bound, config),
                upper_bound: format_resources(raw.upper_bound, config),
                uncapped_target: target,
            }
        })
        .collect()
}

/// `ceil(value / scale) * scale` in float64; a scale ≤ 0 returns the value and an error message.
pub fn round_up_to_scale(
    value: ResourceAmount,
    scale: i64,
) -> (ResourceAmount, Option<&'static str>) {
    if scale <= 0 {
        return (value, Some("scale must be greater than zero"));
    }
    if value == 0 {
        return (0, None);
    }
    let v = (value as f64 / scale as f64).ceil() * scale as f64;
    // A plain float → int64 conversion (no 1e14 clamp): an upper bound of 1e14 rounds above it, as upstream.
    (v as i64, None)
}

/// `%.2f` in the largest binary unit not above the value (`Ki`…`Ti`... up to `Ei`); values under 1024 stay integers.
pub fn humanize_memory(bytes: f64) -> String {
    let mut power = 0;
    let mut div = 1.0;
    while binary_suffix(power + 1).is_some() && bytes >= div * 1024.0 {
        div *= 1024.0;
        power += 1;
    }
    match binary_suffix(power) {
        Some(unit) => format!("{:.2}{unit}", bytes / div),
        None => format!("{}", bytes as i64),
    }
}

/// The memory quantity the formatter emits: rounded up to `--round-memory-bytes`, then humanised if asked
/// (which may hold fractional bytes, e.g. `800.61Mi`).
pub fn memory_quantity(bytes: ResourceAmount, config: &RecommenderConfig) -> String {
    let mut m = bytes;
    if config.round_memory_bytes != 1 && m != 0 {
        m = round_up_to_scale(m, config.round_memory_bytes).0;
    }
    if config.humanize_memory && m != 0 {
        humanize_memory(m as f64)
    } else {
        m.to_string()
    }
}

/// Applies rounding (and humanisation) to one resource list, as the output formatter does.
pub fn format_resources(res: Resources, config: &RecommenderConfig) -> Resources {
    let mut out = res;
    if let Some(c) = out.cpu
        && config.round_cpu_millicores != 1
        && c != 0
    {
        out.cpu = Some(round_up_to_scale(c, config.round_cpu_millicores).0);
    }
    if let Some(m) = out.memory {
        out.memory = Some(if config.humanize_memory {
            // Quantity.Value() of a humanised amount rounds fractional bytes up.
            crate::quantity::memory_bytes(&memory_quantity(m, config)).unwrap_or(m)
        } else if config.round_memory_bytes != 1 && m != 0 {
            // What memory_quantity prints and Quantity.Value() reads back, without the text.
            round_up_to_scale(m, config.round_memory_bytes).0
        } else {
            m
        });
    }
    out
}

/// Name of the container an integer-CPU annotation key refers to, or "" if the key does not have the form.
pub fn extract_container_name(key: &str, prefix: &str, suffix: &str) -> String {
    if key.len() >= prefix.len() + suffix.len() && key.starts_with(prefix) && key.ends_with(suffix)
    {
        key[prefix.len()..key.len() - suffix.len()].to_string()
    } else {
        String::new()
    }
}

/// Rounds CPU up to whole cores.
pub fn integer_cpu(res: &mut Resources) {
    if let Some(c) = res.cpu {
        let cores = (c as f64 / 1000.0).ceil();
        res.cpu = Some(crate::units::resource_amount_from_float(cores * 1000.0));
    }
}

/// Applies the integer-CPU post-processor for containers annotated `…/<name>_integerCPU: "true"`.
pub fn apply_integer_cpu(
    recs: &mut [ContainerRecommendation],
    annotations: &BTreeMap<String, String>,
) {
    for (k, v) in annotations {
        if v != "true" {
            continue;
        }
        let name = extract_container_name(k, INTEGER_CPU_PREFIX, INTEGER_CPU_SUFFIX);
        if name.is_empty() {
            continue;
        }
        for r in recs.iter_mut().filter(|r| r.container_name == name) {
            integer_cpu(&mut r.target);
            integer_cpu(&mut r.lower_bound);
            integer_cpu(&mut r.upper_bound);
            integer_cpu(&mut r.uncapped_target);
        }
    }
}
