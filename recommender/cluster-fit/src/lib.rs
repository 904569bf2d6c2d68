//! Sizing within the cluster, pure: what the recommender does to an engine recommendation once it knows the
//! cluster it lands in. Node fit caps targets to the largest node or Karpenter NodePool instance a VPA's pods
//! may schedule on ([`node_fit`], [`karpenter`], over [`nodes`]); HPA coherence leaves a resource an HPA
//! scales on by utilisation to the HPA ([`hpa`]); [`within`] applies both in order over a [`view`] of the
//! cluster. The recommender feeds it from its watches, `tailor recommend --snapshot` from a snapshot file, so
//! both give the same answer for the same objects.

pub mod hpa;
pub mod karpenter;
pub mod node_fit;
pub mod nodes;
pub mod pod_spec;
pub mod view;
pub mod within;
