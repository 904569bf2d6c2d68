//! `tailor-recommender`: the in-cluster recommender. Watches Tailor VPAs, pods and workloads, samples
//! `metrics.k8s.io`, writes recommendations into VPA status and keeps checkpoints. Flags ([`Flags`]) →
//! validated settings (`tailor_recommender::process::settings`) → the daemon → run.

use anyhow::Context as _;
use clap::Parser as _;
use tailor_recommender::process::daemon;
use tailor_recommender::process::flags::Flags;

/// mimalloc, with `MIMALLOC_ARENA_EAGER_COMMIT=0 MIMALLOC_PURGE_DELAY=0` as the image and the chart set them:
/// chosen on measured RSS (BENCHMARKS.md, docs/decisions/recommender-memory.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let runtime = daemon::runtime(flags.runtime_threads)?;
    // Everything runs in a spawned task, like the connection tasks of the API client: with more than one
    // thread, a request's future and its connection then usually share a worker instead of waking the main
    // thread (parked in `block_on`) and a worker for every request (BENCHMARKS.md,
    // docs/decisions/recommender-memory.md).
    runtime.block_on(async {
        (tokio::spawn(daemon::run(flags)).await).context("the recommender's main task")?
    })
}
