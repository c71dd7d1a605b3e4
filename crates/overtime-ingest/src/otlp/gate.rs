//! The decode gate: how many export requests are decoded and written at
//! once, and how many may wait for that.
//!
//! Design rules:
//! - At most `max_concurrent_decodes` requests hold a permit; decoded
//!   requests are the receiver's big memory cost, so this bounds it.
//! - At most twice as many wait for a permit (their bodies read, not
//!   decoded); beyond that a request is refused at once (429 /
//!   `RESOURCE_EXHAUSTED`), which keeps refusals cheap and latency bounded
//!   when more is offered than the CPUs can decode.
//! - A waiter that goes away (client disconnect) leaves the queue.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use tokio::sync::{Semaphore, SemaphorePermit};

/// Retry-After for a request refused because the queue was full.
pub(crate) const QUEUE_FULL_RETRY_MS: u64 = 1000;

pub(crate) struct DecodeGate {
    permits: Semaphore,
    waiting: AtomicUsize,
    max_waiting: usize,
}

/// Leaves the wait queue when dropped, whatever ended the wait.
struct Waiting<'a>(&'a AtomicUsize);
impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

impl DecodeGate {
    pub(crate) fn new(max_concurrent_decodes: usize) -> Self {
        let n = max_concurrent_decodes.max(1);
        DecodeGate {
            permits: Semaphore::new(n),
            waiting: AtomicUsize::new(0),
            max_waiting: 2 * n,
        }
    }

    /// A permit to decode and write, or `None` when the wait queue is
    /// full (refuse the request).
    pub(crate) async fn enter(&self) -> Option<SemaphorePermit<'_>> {
        if let Ok(p) = self.permits.try_acquire() {
            return Some(p);
        }
        if self.waiting.fetch_add(1, SeqCst) >= self.max_waiting {
            self.waiting.fetch_sub(1, SeqCst);
            return None;
        }
        let _queued = Waiting(&self.waiting);
        self.permits.acquire().await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn permits_then_a_bounded_queue_then_refusal() {
        let gate = std::sync::Arc::new(DecodeGate::new(1));
        let held = gate.enter().await.expect("first gets the permit");
        // Two may wait (2 × 1 permit); the third is refused at once.
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let g = gate.clone();
                tokio::spawn(async move { g.enter().await.is_some() })
            })
            .collect();
        while gate.waiting.load(SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        assert!(gate.enter().await.is_none(), "queue full: refused");
        drop(held);
        for w in waiters {
            assert!(w.await.unwrap(), "waiters get the permit in turn");
        }
        assert_eq!(gate.waiting.load(SeqCst), 0);
    }

    #[tokio::test]
    async fn a_waiter_that_goes_away_leaves_the_queue() {
        let gate = DecodeGate::new(1);
        let _held = gate.enter().await.unwrap();
        let wait = tokio::time::timeout(std::time::Duration::from_millis(20), gate.enter());
        assert!(wait.await.is_err(), "still waiting when cancelled");
        assert_eq!(gate.waiting.load(SeqCst), 0);
    }
}
