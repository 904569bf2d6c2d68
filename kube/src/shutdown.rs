//! Shutdown: SIGTERM / SIGINT fanned out to every task that waits for it, and the grace-period flag group.

use std::time::Duration;

use tokio::sync::watch;

/// A shutdown that every clone observes. [`Shutdown::on_signal`] triggers it on SIGTERM or SIGINT.
#[derive(Clone, Debug)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

/// Triggers the [`Shutdown`] it was made with.
#[derive(Debug)]
pub struct ShutdownTrigger {
    tx: watch::Sender<bool>,
}

impl ShutdownTrigger {
    /// Triggers the shutdown (again is harmless).
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }
}

impl Shutdown {
    /// A shutdown and the handle that triggers it.
    pub fn new() -> (Shutdown, ShutdownTrigger) {
        let (tx, rx) = watch::channel(false);
        (Shutdown { rx }, ShutdownTrigger { tx })
    }

    /// A shutdown triggered by SIGTERM or SIGINT (Ctrl-C). Must run inside a Tokio runtime.
    pub fn on_signal() -> Shutdown {
        let (shutdown, trigger) = Shutdown::new();
        tokio::spawn(async move {
            signal().await;
            tracing::info!("shutting down");
            trigger.trigger();
        });
        shutdown
    }

    /// Whether the shutdown was triggered.
    pub fn is_triggered(&self) -> bool {
        *self.rx.borrow()
    }

    /// Resolves once the shutdown is triggered (or its trigger is gone).
    pub fn wait(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub async fn signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// How a server winds down after the signal.
#[derive(Clone, Debug, clap::Args)]
pub struct ShutdownFlags {
    /// After SIGTERM, keep serving (reporting not ready) this long, in seconds, so endpoints stop routing here.
    #[arg(long, default_value_t = 5)]
    pub shutdown_delay_seconds: u64,
    /// Then wait at most this long, in seconds, for in-flight requests.
    #[arg(long, default_value_t = 20)]
    pub shutdown_timeout_seconds: u64,
}

impl ShutdownFlags {
    /// How long to keep serving while reporting not ready.
    pub fn delay(&self) -> Duration {
        Duration::from_secs(self.shutdown_delay_seconds)
    }

    /// How long to wait for in-flight requests after the delay.
    pub fn drain(&self) -> Duration {
        Duration::from_secs(self.shutdown_timeout_seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_clone_sees_the_trigger() {
        let (shutdown, trigger) = Shutdown::new();
        let waiter = shutdown.clone().wait();
        assert!(!shutdown.is_triggered());
        trigger.trigger();
        waiter.await;
        assert!(shutdown.is_triggered());
        shutdown.wait().await;
    }
}
