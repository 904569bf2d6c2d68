//! Standalone mode (`--vpa-dir`): the webhook's index loaded from manifest files ([`crate::manifests`]) and
//! re-read when they change; a bad edit keeps the previous index.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::Watcher as _;
use tailor_core::sizing::PatchOptions;
use tailor_core::validation::FeatureGates;
use tailor_kube::manifests::ManifestError;

use crate::manifests;
use crate::webhook::Webhook;

/// Why standalone mode cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StandaloneError {
    /// The manifests do not load.
    #[error("--vpa-dir {}", dir.display())]
    Load {
        /// The directory or file.
        dir: PathBuf,
        /// What failed (boxed: the error is large and this path is cold).
        source: Box<ManifestError>,
    },
    /// Changes to the directory cannot be watched.
    #[error(transparent)]
    Watch(#[from] notify::Error),
}

/// A webhook over the manifests in `dir` (a directory or a file), re-read on every change until `shutdown`,
/// with a patch memo of `memo_bytes`.
pub fn start(
    dir: &Path,
    gates: FeatureGates,
    options: PatchOptions,
    memo_bytes: usize,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Arc<Webhook>, StandaloneError> {
    let loaded = manifests::load_dir(dir).map_err(|source| StandaloneError::Load {
        dir: dir.to_owned(),
        source: Box::new(source),
    })?;
    tracing::info!(dir = %dir.display(), files = loaded.files, objects = loaded.count(),
        vpas = loaded.objects.vpas().len(), skipped = loaded.skipped, "standalone mode: manifests loaded");
    let webhook =
        Webhook::new(loaded.objects.into_index(), gates, options).with_patch_memo_bytes(memo_bytes);
    let webhook = Arc::new(webhook);
    watch_manifests(dir.to_owned(), webhook.clone(), shutdown)?;
    Ok(webhook)
}

/// Re-reads the manifests when the directory changes; a bad edit keeps the previous index.
fn watch_manifests(
    dir: PathBuf,
    webhook: Arc<Webhook>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), notify::Error> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
    let mut watcher = notify::recommended_watcher(move |e: notify::Result<notify::Event>| {
        // Reading the manifests produces access events; only changes matter.
        if e.is_ok_and(|e| !matches!(e.kind, notify::EventKind::Access(_))) {
            let _ = tx.try_send(());
        }
    })?;
    watcher.watch(&dir, notify::RecursiveMode::Recursive)?;
    tokio::spawn(async move {
        let _watcher = watcher;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                e = rx.recv() => if e.is_none() { return },
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            while rx.try_recv().is_ok() {}
            reload(&dir, &webhook).await;
        }
    });
    Ok(())
}

/// Loads the manifests again (off the async threads) and swaps the index in when they load.
async fn reload(dir: &Path, webhook: &Webhook) {
    let d = dir.to_owned();
    match tokio::task::spawn_blocking(move || manifests::load_dir(&d)).await {
        Ok(Ok(loaded)) => {
            tracing::info!(
                objects = loaded.count(),
                vpas = loaded.objects.vpas().len(),
                "manifests reloaded"
            );
            webhook.set_index(loaded.objects.into_index());
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "manifests not reloaded; keeping the previous ones")
        }
        Err(e) => tracing::warn!(error = %e, "manifest reload task failed"),
    }
}
