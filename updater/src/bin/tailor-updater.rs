//! `tailor-updater`: brings running pods of Tailor VPAs to their recommendation, in place or by eviction.
//! Flags ([`Flags`]) → validated [`Settings`] → [`Daemon`] → run until SIGTERM.

use anyhow::Context as _;
use clap::Parser as _;
use tailor_kube::shutdown::Shutdown;
use tailor_updater::process::daemon::Daemon;
use tailor_updater::process::flags::Flags;
use tailor_updater::process::settings::Settings;

/// mimalloc, as the recommender and the webhook use, with `MIMALLOC_ARENA_EAGER_COMMIT=0` as the image and
/// the chart set it: an iteration allocates and frees millions of small objects, which glibc's malloc made
/// about a third of its instructions. Unlike the other two binaries, freed pages keep mimalloc's default
/// purge delay (10 ms): `MIMALLOC_PURGE_DELAY=0` purged and faulted pages in again all through an
/// iteration, about 80 ms of 5,000 VPAs' (docs/decisions/release-profiles.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    flags.log.init();
    let settings = Settings::from_flags(flags)?;
    let client = settings
        .client
        .client()
        .await
        .context("Kubernetes client")?;
    let daemon = Daemon::start(settings, client).await?;
    daemon.run(Shutdown::on_signal()).await?;
    Ok(())
}
