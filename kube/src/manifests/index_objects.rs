//! What the pod → VPA index reads of manifests ([`IndexObject`]), and the index built from them as they are
//! read ([`ManifestIndex`]): Tailor VPAs and LimitRanges whole (few and small), the seven well-known
//! workload kinds slim and straight into the compact caches the server uses, other kinds with a
//! `spec.selector` standing in for their `/scale` subresource. Shared by the webhook's standalone mode and
//! `tailor plan`, so both match pods to VPAs from the same objects.

use std::fmt;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{LimitRange, ReplicationController};
use kube::runtime::watcher::Event;
use serde::Deserialize;
use serde_json::Value;
use tailor_core::workload::{SlimWorkload, WorkloadKind};
use tailor_crds::VerticalPodAutoscaler;

use super::Object;
use crate::index::{Index, ScaleInfo, StaticScaleLookup};
use crate::reflectors::{WorkloadStores, WorkloadWriters, workload_stores};
use crate::scale::{custom_controller, static_key};
use crate::workload_cache::WorkloadCacheWriter;

/// A well-known workload, slim.
#[derive(Debug)]
pub enum Workload {
    /// A Deployment.
    Deployment(SlimWorkload<Deployment>),
    /// A ReplicaSet.
    ReplicaSet(SlimWorkload<ReplicaSet>),
    /// A StatefulSet.
    StatefulSet(SlimWorkload<StatefulSet>),
    /// A DaemonSet.
    DaemonSet(SlimWorkload<DaemonSet>),
    /// A Job.
    Job(SlimWorkload<Job>),
    /// A CronJob.
    CronJob(SlimWorkload<CronJob>),
    /// A ReplicationController.
    ReplicationController(SlimWorkload<ReplicationController>),
}

/// The replica counts of a workload: `spec.replicas` and a DaemonSet's `status.numberReady`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replicas {
    /// `spec.replicas`.
    pub spec: Option<i32>,
    /// `status.numberReady`.
    pub ready: Option<i32>,
}

impl<'de> Deserialize<'de> for Replicas {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Counts {
            #[serde(default)]
            spec: Option<Spec>,
            #[serde(default)]
            status: Option<Status>,
        }
        #[derive(Deserialize)]
        struct Spec {
            #[serde(default)]
            replicas: Option<i32>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Status {
            #[serde(default)]
            number_ready: Option<i32>,
        }
        let c = Counts::deserialize(d)?;
        Ok(Replicas {
            spec: c.spec.and_then(|s| s.replicas),
            ready: c.status.and_then(|s| s.number_ready),
        })
    }
}

/// What the index reads of one object.
#[derive(Debug)]
pub enum IndexObject {
    /// A Tailor VPA.
    Vpa(Box<VerticalPodAutoscaler>),
    /// A well-known workload with its replica counts.
    Workload(Workload, Replicas),
    /// A LimitRange.
    LimitRange(Box<LimitRange>),
    /// An object of another kind with a `spec.selector`, in place of its `/scale` subresource.
    Custom {
        /// Kind, namespace, name.
        key: (String, String, String),
        /// Its selector and controller owner.
        info: ScaleInfo,
        /// `spec.replicas`, if a number that fits.
        replicas: Option<i32>,
    },
}

fn workload<K: WorkloadKind>(
    object: &Object,
    wrap: fn(SlimWorkload<K>) -> Workload,
) -> Result<IndexObject, String> {
    Ok(IndexObject::Workload(
        wrap(object.decode()?),
        object.decode()?,
    ))
}

impl IndexObject {
    /// What the index reads of `object`; `None` for kinds it does not read, and for upstream
    /// `autoscaling.k8s.io` objects (the pod → VPA index holds Tailor's alone; the updater's snapshot keeps
    /// upstream VPAs apart, and `tailor convert` rewrites them).
    pub fn of(object: &Object) -> Option<Result<IndexObject, String>> {
        let o = object;
        Some(match (o.group(), o.kind.as_str()) {
            (tailor_crds::GROUP, "VerticalPodAutoscaler") => {
                o.decode().map(|v| IndexObject::Vpa(Box::new(v)))
            }
            ("apps", "Deployment") => workload(o, Workload::Deployment),
            ("apps", "ReplicaSet") => workload(o, Workload::ReplicaSet),
            ("apps", "StatefulSet") => workload(o, Workload::StatefulSet),
            ("apps", "DaemonSet") => workload(o, Workload::DaemonSet),
            ("batch", "Job") => workload(o, Workload::Job),
            ("batch", "CronJob") => workload(o, Workload::CronJob),
            ("", "ReplicationController") => workload(o, Workload::ReplicationController),
            ("", "LimitRange") => o.decode().map(|v| IndexObject::LimitRange(Box::new(v))),
            (tailor_crds::UPSTREAM_GROUP, _) => return None,
            _ => {
                let info = custom_controller(&o.value)?;
                let replicas = o
                    .value
                    .pointer("/spec/replicas")
                    .and_then(Value::as_i64)
                    .and_then(|n| i32::try_from(n).ok());
                Ok(IndexObject::Custom {
                    key: static_key(&o.value),
                    info,
                    replicas,
                })
            }
        })
    }
}

/// The index's objects as manifests give them, the workloads already in the compact caches.
pub struct ManifestIndex {
    vpas: Vec<VerticalPodAutoscaler>,
    workloads: WorkloadStores,
    writers: WorkloadWriters,
    workload_count: usize,
    limit_ranges: Vec<LimitRange>,
    scale: StaticScaleLookup,
}

impl Default for ManifestIndex {
    fn default() -> Self {
        let (workloads, writers) = workload_stores();
        ManifestIndex {
            vpas: Vec::new(),
            workloads,
            writers,
            workload_count: 0,
            limit_ranges: Vec::new(),
            scale: StaticScaleLookup::default(),
        }
    }
}

impl fmt::Debug for ManifestIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManifestIndex")
            .field("vpas", &self.vpas.len())
            .field("workloads", &self.workload_count)
            .field("limit_ranges", &self.limit_ranges.len())
            .field("custom", &self.scale.objects.len())
            .finish()
    }
}

fn apply<K: WorkloadKind>(writer: &mut WorkloadCacheWriter<K>, object: SlimWorkload<K>) {
    writer.apply_watcher_event(&Event::Apply(object));
}

impl ManifestIndex {
    /// Adds one object; a later workload or custom object of the same kind, namespace and name replaces an
    /// earlier one.
    pub fn add(&mut self, object: IndexObject) {
        let w = &mut self.writers;
        match object {
            IndexObject::Vpa(vpa) => self.vpas.push(*vpa),
            IndexObject::LimitRange(lr) => self.limit_ranges.push(*lr),
            IndexObject::Custom { key, info, .. } => {
                self.scale.objects.insert(key, info);
            }
            IndexObject::Workload(workload, _) => {
                self.workload_count += 1;
                match workload {
                    Workload::Deployment(o) => apply(&mut w.deployments, o),
                    Workload::ReplicaSet(o) => apply(&mut w.replica_sets, o),
                    Workload::StatefulSet(o) => apply(&mut w.stateful_sets, o),
                    Workload::DaemonSet(o) => apply(&mut w.daemon_sets, o),
                    Workload::Job(o) => apply(&mut w.jobs, o),
                    Workload::CronJob(o) => apply(&mut w.cron_jobs, o),
                    Workload::ReplicationController(o) => apply(&mut w.replication_controllers, o),
                }
            }
        }
    }

    /// The Tailor VPAs, in the order read.
    pub fn vpas(&self) -> &[VerticalPodAutoscaler] {
        &self.vpas
    }

    /// The LimitRanges, in the order read.
    pub fn limit_ranges(&self) -> &[LimitRange] {
        &self.limit_ranges
    }

    /// The custom controllers standing in for `/scale`.
    pub fn scale(&self) -> &StaticScaleLookup {
        &self.scale
    }

    /// How many objects were added, all kinds together.
    pub fn count(&self) -> usize {
        self.vpas.len() + self.workload_count + self.limit_ranges.len() + self.scale.objects.len()
    }

    /// An index over these objects (the workload caches are shared, not copied).
    pub fn index(&self) -> Index {
        Index::from_parts(
            self.vpas.clone(),
            self.workloads.clone(),
            self.limit_ranges.clone(),
            self.scale.clone(),
        )
    }

    /// The index, consuming the objects.
    pub fn into_index(self) -> Index {
        Index::from_parts(self.vpas, self.workloads, self.limit_ranges, self.scale)
    }
}
