//! What the recommender reads of the cluster, and from where: the reflector stores and the slim objects in
//! them, the reads that are not watches (a checkpoint, a page of them, a `/scale` selector) and how a
//! checkpoint reads back, usage from the metrics API and from a history store, OOM kills, the checkpoints
//! that exist, the view node fit and HPA coherence size within, and target resolution over the stores.

pub mod api_reads;
pub mod checkpoint_index;
pub mod cluster_view;
pub mod history;
pub mod job_runs;
pub mod metrics_api;
pub mod metrics_list;
pub mod oom;
pub mod pod_store;
pub mod slim;
pub mod stored_checkpoint;
pub mod stores;
pub mod target;
pub mod watched_vpa;
