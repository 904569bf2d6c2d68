//! `tailor-admission`: the Tailor admission webhook server.
//!
//! In a cluster it keeps reflector caches of Tailor VPAs, the workload kinds and LimitRanges, and answers pod
//! and VPA admission reviews from memory. With `--vpa-dir` it runs standalone from manifest files instead.
//! Flags ([`Flags`]) → validated [`Settings`] → [`Daemon`] → run until SIGTERM and the drain.

use anyhow::Context as _;
use clap::Parser as _;
use tailor_admission::daemon::{Daemon, prepare_process};
use tailor_admission::flags::Flags;
use tailor_admission::settings::Settings;
use tailor_kube::shutdown::Shutdown;

/// mimalloc returns freed pages to the system within milliseconds: after a multi-megabyte review the webhook's
/// resident memory falls back instead of keeping the peak, as glibc's arenas would
/// (docs/decisions/webhook-hardening.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    flags.log.init();
    prepare_process(flags.max_connections);
    // Always the multi-threaded runtime, even with one worker: a live owner read blocks its review's thread
    // (`block_in_place`), which a current-thread runtime cannot do.
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if flags.runtime_threads > 0 {
        runtime.worker_threads(usize::from(flags.runtime_threads));
    }
    let runtime = runtime
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let settings = Settings::from_flags(flags)?;
    // Everything runs in a spawned task, on the workers: the main thread, parked in `block_on`, is not woken
    // for each request.
    runtime.block_on(async {
        tokio::spawn(async move {
            // Shutdown fan-out: the signal resolves every waiter.
            let shutdown = Shutdown::on_signal();
            let daemon = Daemon::new(settings).await?;
            daemon.run(&shutdown).await?;
            anyhow::Ok(())
        })
        .await
        .context("the webhook's main task")?
    })
}
