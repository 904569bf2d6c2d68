//! Events sent by one background task through a bounded queue (docs/decisions/bounded-event-queue.md): the
//! updater used to spawn a task per event, without bound, so an iteration over thousands of pods could hold
//! thousands of pending API calls. Like evictions, event writes are now bounded: at most [`EVENT_QUEUE`] wait,
//! one is in flight, and the rest are dropped and counted (events are advisory; the iteration never waits for
//! them).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;

/// Most events waiting to be written.
pub const EVENT_QUEUE: usize = 256;

/// A bounded queue of items written one at a time by a background task.
pub struct EventQueue<T> {
    tx: mpsc::Sender<T>,
    dropped: Arc<AtomicU64>,
}

impl<T: Send + 'static> EventQueue<T> {
    /// Starts the task that hands each queued item to `write`, in order, one at a time; at most
    /// `capacity` items wait. Needs a Tokio runtime.
    pub fn start<F, Fut>(capacity: usize, mut write: F) -> Self
    where
        F: FnMut(T) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let (tx, mut rx) = mpsc::channel::<T>(capacity.max(1));
        tokio::spawn(async move {
            while let Some(item) = rx.recv().await {
                write(item).await;
            }
        });
        EventQueue {
            tx,
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Queues `item` without waiting; `false` (and counted) when the queue is full or its task is gone.
    pub fn send(&self, item: T) -> bool {
        match self.tx.try_send(item) {
            Ok(()) => true,
            Err(_) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Items dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[tokio::test]
    async fn at_most_the_capacity_waits_and_the_rest_is_dropped() {
        let written = Arc::new(Mutex::new(Vec::new()));
        let sink = written.clone();
        let queue = EventQueue::start(4, move |i: usize| {
            let sink = sink.clone();
            async move { sink.lock().expect("lock").push(i) }
        });
        // On the current-thread runtime the writer runs only when this task yields: 10 events sent
        // back to back find 4 places.
        let accepted = (0..10).filter(|&i| queue.send(i)).count();
        assert_eq!(accepted, 4);
        assert_eq!(queue.dropped(), 6);
        // Once written, the queue takes events again.
        while written.lock().expect("lock").len() < 4 {
            tokio::task::yield_now().await;
        }
        assert_eq!(*written.lock().expect("lock"), vec![0, 1, 2, 3]);
        assert!(queue.send(10));
    }
}
