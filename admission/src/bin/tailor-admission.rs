//! `tailor-admission`: the Tailor admission webhook server.
//!
//! In a cluster it keeps reflector caches of Tailor VPAs, the workload kinds and LimitRanges, and answers pod
//! and VPA admission reviews from memory. With `--vpa-dir` it runs standalone from manifest files instead.
//! Flags ([`Flags`]) → validated [`Settings`] → [`Daemon`] → run until SIGTERM and the drain.

use clap::Parser as _;
use tailor_admission::daemon::{Daemon, prepare_process};
use tailor_admission::flags::Flags;
use tailor_admission::settings::Settings;
use tailor_kube::shutdown::Shutdown;

/// mimalloc returns freed pages to the system within milliseconds: after a multi-megabyte review the webhook's
/// resident memory falls back instead of keeping the peak, as glibc's arenas would (issue 15).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    flags.log.init();
    prepare_process(flags.max_connections);
    let settings = Settings::from_flags(flags)?;
    // Shutdown fan-out: the signal resolves every waiter.
    let shutdown = Shutdown::on_signal();
    let daemon = Daemon::new(settings).await?;
    daemon.run(&shutdown).await?;
    Ok(())
}
