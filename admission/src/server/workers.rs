//! Connection workers: one single-threaded tokio runtime per thread, each serving the connections handed to it
//! (round robin) from accept to close.
//!
//! On the process's multi-threaded runtime a review that arrives on an idle server wakes one worker through
//! epoll, and that worker wakes a second one (futex) to look for work to steal, which finds none and parks
//! again: two futex calls and two context switches per review at a steady rate, more CPU than the TLS record
//! and the HTTP parsing together. A connection's work does not need stealing: the API server keeps a few
//! long-lived connections per replica, and spreading them over one runtime per core keeps every core busy at
//! full load while a review wakes one thread only.

use std::{
    future::Future,
    sync::atomic::{AtomicUsize, Ordering},
};

use tokio::{runtime::Handle, sync::oneshot};

/// A fixed set of single-threaded runtimes, each on its own thread; they stop when this is dropped (tasks still
/// running on them are cancelled).
#[derive(Debug)]
pub struct Workers {
    handles: Vec<Handle>,
    stops: Vec<oneshot::Sender<()>>,
    next: AtomicUsize,
}

impl Workers {
    /// Starts `count` workers (at least one), named `name-N`.
    pub fn start(count: usize, name: &str) -> std::io::Result<Self> {
        let mut workers = Workers {
            handles: Vec::new(),
            stops: Vec::new(),
            next: AtomicUsize::new(0),
        };
        for n in 0..count.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (stop, stopped) = oneshot::channel::<()>();
            workers.handles.push(runtime.handle().clone());
            workers.stops.push(stop);
            // Not joined when stopping: each runtime shuts down on its own thread.
            std::thread::Builder::new()
                .name(format!("{name}-{n}"))
                .spawn(move || {
                    let _ = runtime.block_on(stopped);
                })?;
        }
        Ok(workers)
    }

    /// Runs `task` on the next worker.
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let n = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len().max(1);
        if let Some(handle) = self.handles.get(n) {
            drop(handle.spawn(task));
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
    }
}
