//! Karpenter NodePools as node-fit candidates (docs/decisions/node-fit.md): with Karpenter the largest node a pod may get is
//! not in the node list but whatever a NodePool's requirements allow. Each NodePool (`karpenter.sh/v1`)
//! becomes one [`Candidate`] per instance type of the table ([`InstanceTable`]) its requirements and
//! limits allow, with the labels and taints a node launched from it would carry. Pure.
//!
//! The built-in table covers common AWS families (`m5 c5 r5 m6i c6i r6i m6g c6g r6g m7i c7i r7i m7g c7g
//! r7g`) with allocatable requests computed as Karpenter's AWS provider does by default (7.5% of memory
//! kept for the VM, kube-reserved for 110 pods, a 100Mi eviction threshold); `--node-fit-instance-types`
//! (the chart's `recommender.nodeFit.karpenter.instanceTypes`) replaces it.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::node_fit::{Candidate, CandidateKind, Domain, Expr, MAX_ITEMS, Op, Req, Taint};

/// The label Karpenter puts the NodePool's name in.
pub const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";
/// The instance type label.
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";

/// Labels every launched node carries with a value the NodePool leaves open unless it restricts them.
const OPEN_WELL_KNOWN: [&str; 6] = [
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "karpenter.sh/capacity-type",
    "kubernetes.io/os",
    "kubernetes.io/hostname",
    "kubernetes.io/arch",
];

/// At most this many bytes of an instance-type file are read.
pub const MAX_TABLE_BYTES: u64 = 16 << 20;

/// At most this many instance types are read from a table.
pub const MAX_INSTANCE_TYPES: usize = 4096;

/// A NodePool requirement (`minValues` is irrelevant here).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Requirement {
    /// Label key.
    pub key: String,
    /// Operator.
    pub operator: String,
    /// Values.
    #[serde(default)]
    pub values: Vec<String>,
}

/// `spec.template.metadata`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TemplateMeta {
    /// Labels of launched nodes.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// `spec.template.spec`: requirements and taints.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TemplateSpec {
    /// Requirements on instance and node labels.
    #[serde(default)]
    pub requirements: Vec<Requirement>,
    /// Taints of launched nodes.
    #[serde(default)]
    pub taints: Vec<SlimTaint>,
}

/// A taint as the API writes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlimTaint {
    /// Key.
    pub key: String,
    /// Value.
    #[serde(default)]
    pub value: Option<String>,
    /// Effect.
    pub effect: String,
}

impl SlimTaint {
    /// As node fit reads it.
    pub fn taint(&self) -> Taint {
        Taint {
            key: self.key.clone(),
            value: self.value.clone().unwrap_or_default(),
            effect: self.effect.clone(),
        }
    }
}

/// `spec.template`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Template {
    /// Metadata.
    #[serde(default)]
    pub metadata: TemplateMeta,
    /// Spec.
    #[serde(default)]
    pub spec: TemplateSpec,
}

/// `spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodePoolSpec {
    /// The template of launched nodes.
    #[serde(default)]
    pub template: Template,
    /// Resource limits of the whole pool (a single node cannot exceed them either).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<BTreeMap<String, Quantity>>,
}

/// A Karpenter `NodePool` (`karpenter.sh/v1`), as far as node fit reads it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodePool {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    #[serde(default)]
    pub spec: NodePoolSpec,
}

tailor_core::trimmed_resource!(NodePool: "karpenter.sh", "v1", "NodePool", "nodepools", Cluster);

/// One entry of an instance-type table file: allocatable requests as a launched node offers them to pods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceTypeEntry {
    /// Instance type name (`m6i.4xlarge`).
    pub name: String,
    /// Allocatable CPU.
    pub cpu: Quantity,
    /// Allocatable memory.
    pub memory: Quantity,
    /// Labels of such a node besides the derived ones (instance type, and for AWS-style names
    /// `karpenter.k8s.aws/instance-{family,category,generation,size}`).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// An instance type: its labels and allocatable requests.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceType {
    /// Name.
    pub name: String,
    /// Labels a node of this type carries.
    pub labels: BTreeMap<String, String>,
    /// Allocatable.
    pub allocatable: Req,
}

/// The instance types NodePools choose from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InstanceTable {
    /// The types.
    pub types: Vec<InstanceType>,
}

/// An instance table that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// Not YAML/JSON of the expected shape.
    #[error("instance types: {0}")]
    Parse(String),
    /// A quantity that is not one.
    #[error("instance type {name}: {what}")]
    Quantity {
        /// Entry.
        name: String,
        /// What is wrong.
        what: String,
    },
    /// Too many entries.
    #[error("instance types: more than {MAX_INSTANCE_TYPES} entries")]
    TooMany,
    /// The file could not be read.
    #[error("instance types: {0}")]
    Read(std::io::Error),
}

/// The labels derived from an AWS-style name (`m6i.4xlarge`): family, category, generation, size.
fn derived_labels(name: &str, vcpus: i64, memory_mib: i64) -> BTreeMap<String, String> {
    let mut l = BTreeMap::from([
        (INSTANCE_TYPE_LABEL.to_string(), name.to_string()),
        (
            "karpenter.k8s.aws/instance-cpu".to_string(),
            vcpus.to_string(),
        ),
        (
            "karpenter.k8s.aws/instance-memory".to_string(),
            memory_mib.to_string(),
        ),
    ]);
    if let Some((family, size)) = name.split_once('.') {
        let category: String = family
            .chars()
            .take_while(char::is_ascii_alphabetic)
            .collect();
        let generation: String = family
            .chars()
            .skip(category.len())
            .take_while(char::is_ascii_digit)
            .collect();
        l.insert("karpenter.k8s.aws/instance-family".into(), family.into());
        l.insert("karpenter.k8s.aws/instance-size".into(), size.into());
        if !category.is_empty() {
            l.insert("karpenter.k8s.aws/instance-category".into(), category);
        }
        if !generation.is_empty() {
            l.insert("karpenter.k8s.aws/instance-generation".into(), generation);
        }
    }
    l
}

/// Allocatable millicores of `vcpus` cores after Karpenter's default kube-reserved CPU (6% of the first
/// core, 1% of the second, 0.5% of the next two, 0.25% of the rest).
pub fn allocatable_cpu(vcpus: i64) -> i64 {
    let reserved = |n: i64| -> i64 {
        // In hundredths of a millicore.
        let mut r = 0i64;
        for core in 1..=n {
            r += match core {
                1 => 6_000,
                2 => 1_000,
                3 | 4 => 500,
                _ => 250,
            };
        }
        r / 100
    };
    vcpus * 1000 - reserved(vcpus)
}

/// Allocatable bytes of `gib` GiB after Karpenter's AWS defaults: 7.5% VM overhead, kube-reserved memory
/// for 110 pods (11 MiB each plus 255 MiB) and the 100Mi eviction threshold.
pub fn allocatable_memory(gib: i64) -> i64 {
    const MIB: i64 = 1 << 20;
    let capacity = gib * 1024 * MIB;
    let usable = capacity - capacity * 75 / 1000;
    usable - (11 * 110 + 255) * MIB - 100 * MIB
}

/// (family, arch, GiB per vCPU, sizes) of the built-in table.
const FAMILIES: &[(&str, &str, i64, &[&str])] = &[
    (
        "m5",
        "amd64",
        4,
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
        ],
    ),
    (
        "c5",
        "amd64",
        2,
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "9xlarge", "12xlarge", "18xlarge", "24xlarge",
        ],
    ),
    (
        "r5",
        "amd64",
        8,
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
        ],
    ),
    (
        "m6i",
        "amd64",
        4,
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
            "32xlarge",
        ],
    ),
    (
        "c6i",
        "amd64",
        2,
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
            "32xlarge",
        ],
    ),
    (
        "r6i",
        "amd64",
        8,
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
            "32xlarge",
        ],
    ),
    (
        "m7i",
        "amd64",
        4,
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
            "48xlarge",
        ],
    ),
    (
        "c7i",
        "amd64",
        2,
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
            "48xlarge",
        ],
    ),
    (
        "r7i",
        "amd64",
        8,
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
            "48xlarge",
        ],
    ),
    (
        "m6g",
        "arm64",
        4,
        &[
            "medium", "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge",
        ],
    ),
    (
        "c6g",
        "arm64",
        2,
        &[
            "medium", "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge",
        ],
    ),
    (
        "r6g",
        "arm64",
        8,
        &[
            "medium", "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge",
        ],
    ),
    (
        "m7g",
        "arm64",
        4,
        &[
            "medium", "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge",
        ],
    ),
    (
        "c7g",
        "arm64",
        2,
        &[
            "medium", "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge",
        ],
    ),
    (
        "r7g",
        "arm64",
        8,
        &[
            "medium", "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge",
        ],
    ),
];

fn vcpus_of(size: &str) -> Option<i64> {
    match size {
        "medium" => Some(1),
        "large" => Some(2),
        "xlarge" => Some(4),
        s => s.strip_suffix("xlarge")?.parse::<i64>().ok().map(|n| n * 4),
    }
}

impl InstanceTable {
    /// The built-in table (see the module documentation).
    pub fn builtin() -> InstanceTable {
        let mut types = Vec::new();
        for (family, arch, gib_per_cpu, sizes) in FAMILIES {
            for size in *sizes {
                let Some(vcpus) = vcpus_of(size) else {
                    continue;
                };
                let name = format!("{family}.{size}");
                let gib = vcpus * gib_per_cpu;
                let mut labels = derived_labels(&name, vcpus, gib * 1024);
                labels.insert("kubernetes.io/arch".into(), (*arch).into());
                types.push(InstanceType {
                    name,
                    labels,
                    allocatable: Req {
                        cpu: allocatable_cpu(vcpus),
                        memory: allocatable_memory(gib),
                    },
                });
            }
        }
        InstanceTable { types }
    }

    /// The table of a file (a YAML or JSON list of [`InstanceTypeEntry`]; at most [`MAX_TABLE_BYTES`]); the
    /// caller names the file in its error.
    pub fn read_file(path: &std::path::Path) -> Result<InstanceTable, TableError> {
        use std::io::Read;
        let read = TableError::Read;
        let mut text = String::new();
        std::fs::File::open(path)
            .map_err(read)?
            .take(MAX_TABLE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(read)?;
        if text.len() as u64 > MAX_TABLE_BYTES {
            return Err(TableError::Parse(format!(
                "larger than {MAX_TABLE_BYTES} bytes"
            )));
        }
        InstanceTable::parse(&text)
    }

    /// A table from a file's text (a YAML or JSON list of [`InstanceTypeEntry`]).
    pub fn parse(text: &str) -> Result<InstanceTable, TableError> {
        let entries: Vec<InstanceTypeEntry> =
            serde_saphyr::from_str(text).map_err(|e| TableError::Parse(e.to_string()))?;
        if entries.len() > MAX_INSTANCE_TYPES {
            return Err(TableError::TooMany);
        }
        let mut types = Vec::with_capacity(entries.len());
        for e in entries {
            let q = |r: &str, v: &Quantity| {
                tailor_core::quantity::amount(r, v).map_err(|err| TableError::Quantity {
                    name: e.name.clone(),
                    what: format!("{r} {:?}: {err}", v.0),
                })
            };
            let (cpu, memory) = (q("cpu", &e.cpu)?, q("memory", &e.memory)?);
            let mut labels = derived_labels(&e.name, (cpu + 999) / 1000, memory >> 20);
            labels.extend(e.labels);
            types.push(InstanceType {
                name: e.name,
                labels,
                allocatable: Req { cpu, memory },
            });
        }
        Ok(InstanceTable { types })
    }
}

fn expr(r: &Requirement) -> Expr {
    Expr {
        key: r.key.as_str().into(),
        op: Op::parse(&r.operator),
        values: r.values.iter().map(|v| v.as_str().into()).collect(),
    }
}

/// The domain a requirement on a label no instance type defines leaves that label.
fn domain_of(r: &Requirement, before: Option<Domain>) -> Option<Domain> {
    let values: BTreeSet<String> = r.values.iter().cloned().collect();
    match (Op::parse(&r.operator), before) {
        (Some(Op::In), Some(Domain::OneOf(s))) => {
            Some(Domain::OneOf(s.intersection(&values).cloned().collect()))
        }
        (Some(Op::In), Some(Domain::AnyBut(ex))) => {
            Some(Domain::OneOf(values.difference(&ex).cloned().collect()))
        }
        (Some(Op::In), _) => Some(Domain::OneOf(values)),
        (Some(Op::NotIn), Some(Domain::OneOf(s))) => {
            Some(Domain::OneOf(s.difference(&values).cloned().collect()))
        }
        (Some(Op::NotIn), Some(Domain::AnyBut(mut ex))) => {
            ex.extend(values);
            Some(Domain::AnyBut(ex))
        }
        (Some(Op::NotIn), _) => Some(Domain::AnyBut(values)),
        (Some(Op::DoesNotExist), _) => None,
        (_, Some(d)) => Some(d),
        (_, None) => Some(Domain::AnyBut(BTreeSet::new())),
    }
}

/// The candidates of one NodePool: one per instance type its requirements and limits allow, each with the
/// labels and taints of a node launched from it. Empty for a NodePool past [`MAX_ITEMS`] requirements or
/// taints.
pub fn candidates(pool: &NodePool, table: &InstanceTable) -> Vec<Candidate> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let tpl = &pool.spec.template;
    if tpl.spec.requirements.len() > MAX_ITEMS
        || tpl.spec.taints.len() > MAX_ITEMS
        || tpl.metadata.labels.len() > MAX_ITEMS
    {
        return Vec::new();
    }
    let limit = |r: &str| {
        pool.spec
            .limits
            .as_ref()
            .and_then(|l| l.get(r))
            .and_then(|q| tailor_core::quantity::amount(r, q).ok())
    };
    let (cpu_limit, memory_limit) = (limit("cpu"), limit("memory"));
    let taints: Vec<Taint> = tpl.spec.taints.iter().map(SlimTaint::taint).collect();
    let mut out = Vec::new();
    for it in &table.types {
        let allowed = tpl
            .spec
            .requirements
            .iter()
            .all(|r| match it.labels.get(&r.key) {
                Some(v) => crate::node_fit::satisfies_value(v, &expr(r)),
                None => true,
            });
        let within = cpu_limit.is_none_or(|c| it.allocatable.cpu <= c)
            && memory_limit.is_none_or(|m| it.allocatable.memory <= m);
        if !allowed || !within {
            continue;
        }
        let mut labels: BTreeMap<String, Domain> = BTreeMap::new();
        for k in OPEN_WELL_KNOWN {
            labels.insert(k.to_string(), Domain::AnyBut(BTreeSet::new()));
        }
        for (k, v) in &it.labels {
            labels.insert(k.clone(), Domain::Is(v.clone()));
        }
        for r in &tpl.spec.requirements {
            if it.labels.contains_key(&r.key) {
                continue;
            }
            match domain_of(r, labels.remove(&r.key)) {
                Some(d) => labels.insert(r.key.clone(), d),
                None => None,
            };
        }
        for (k, v) in &tpl.metadata.labels {
            labels.insert(k.clone(), Domain::Is(v.clone()));
        }
        labels.insert(NODEPOOL_LABEL.into(), Domain::Is(name.clone()));
        out.push(Candidate {
            kind: CandidateKind::NodePool,
            name: name.clone(),
            instance: Some(it.name.clone()),
            labels,
            taints: taints.clone(),
            allocatable: it.allocatable,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_fit::{Placement, frontier};

    fn pool(json: serde_json::Value) -> NodePool {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn the_builtin_table_follows_karpenters_reservations() {
        let t = InstanceTable::builtin();
        let m = t.types.iter().find(|t| t.name == "m6i.4xlarge").unwrap();
        assert_eq!(m.allocatable.cpu, 15_890);
        assert_eq!(m.labels["karpenter.k8s.aws/instance-cpu"], "16");
        assert_eq!(m.labels["karpenter.k8s.aws/instance-family"], "m6i");
        assert_eq!(m.labels["karpenter.k8s.aws/instance-category"], "m");
        assert_eq!(m.labels["karpenter.k8s.aws/instance-generation"], "6");
        assert_eq!(m.labels["kubernetes.io/arch"], "amd64");
        assert_eq!(allocatable_cpu(2), 1_930);
        assert!(t.types.len() > 100 && t.types.len() < MAX_INSTANCE_TYPES);
    }

    #[test]
    fn requirements_and_limits_choose_the_instances_and_the_largest_counts() {
        let table = InstanceTable::builtin();
        let p = pool(
            serde_json::json!({"metadata": {"name": "general"}, "spec": {
            "limits": {"cpu": "40"},
            "template": {"spec": {"requirements": [
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["m"]},
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lt", "values": ["64"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}}}),
        );
        let c = candidates(&p, &table);
        assert!(
            c.iter()
                .all(|c| c.instance.as_deref().unwrap().starts_with('m'))
        );
        let f = frontier(&Placement::default(), &c);
        // Below 64 vCPUs and within the 40-core limit: 32 cores (m5/m6i/m7i.8xlarge, equal; the first kept).
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0].describe(),
            "NodePool general (instance type m5.8xlarge)"
        );
        assert_eq!(f[0].labels[NODEPOOL_LABEL], Domain::Is("general".into()));
        assert_eq!(
            f[0].labels["karpenter.sh/capacity-type"],
            Domain::OneOf(["spot".to_string()].into())
        );
    }

    #[test]
    fn a_table_file_replaces_the_builtin_one() {
        let t = InstanceTable::parse(
            "- {name: big.metal, cpu: '190', memory: 700Gi, labels: {kubernetes.io/arch: arm64}}\n",
        )
        .unwrap();
        assert_eq!(t.types[0].allocatable.cpu, 190_000);
        assert_eq!(t.types[0].labels[INSTANCE_TYPE_LABEL], "big.metal");
        assert_eq!(t.types[0].labels["kubernetes.io/arch"], "arm64");
        assert!(InstanceTable::parse("- {name: x, cpu: lots, memory: 1Gi}").is_err());
        assert!(InstanceTable::parse("{}").is_err());
    }
}
