//! One delivery target (an Alertmanager or the webhook): a bounded queue of
//! JSON bodies, a worker that POSTs them with retries and backoff, and its
//! counters.

use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// One HTTP POST to make: a JSON body and how many alerts it carries.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    pub body: Vec<u8>,
    pub alerts: u64,
}

/// Retry policy of every target.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retry {
    pub max_attempts: u32,
    pub initial: Duration,
    pub max: Duration,
}

/// Counters of one target, alerts (not requests) unless said otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TargetStats {
    /// `alertmanager:<host:port>` or `webhook:<host:port>` (no credentials).
    pub target: String,
    /// Alerts delivered (2xx).
    pub sent: u64,
    /// Successful POSTs.
    pub deliveries: u64,
    /// Alerts given up on: a 4xx other than 429, or every attempt failed.
    pub failed: u64,
    /// Alerts dropped unsent because the queue was full (oldest first).
    pub dropped: u64,
    /// Attempts that failed and were tried again.
    pub retries: u64,
    /// Deliveries waiting now.
    pub queued: usize,
    /// The last failure, with the target and the HTTP status or error.
    pub last_error: Option<String>,
}

pub(crate) struct Target {
    name: String,
    url: reqwest::Url,
    capacity: usize,
    queue: Mutex<VecDeque<Delivery>>,
    wake: Notify,
    sent: AtomicU64,
    deliveries: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
    retries: AtomicU64,
    /// Alerts of the delivery being attempted now (0 when idle).
    in_flight: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// Locks a mutex, taking the data even if a holder panicked: counters and
/// queues stay usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Target {
    pub fn new(kind: &str, url: reqwest::Url, capacity: usize) -> Target {
        let host = url.host_str().unwrap_or("?");
        let name = match url.port() {
            Some(p) => format!("{kind}:{host}:{p}"),
            None => format!("{kind}:{host}"),
        };
        Target {
            name,
            url,
            capacity: capacity.max(1),
            queue: Mutex::new(VecDeque::new()),
            wake: Notify::new(),
            sent: AtomicU64::new(0),
            deliveries: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            last_error: Mutex::new(None),
        }
    }

    /// Queues a delivery; when the queue is full the oldest one is dropped
    /// and its alerts counted in `dropped`.
    pub fn push(&self, d: Delivery) {
        let mut q = lock(&self.queue);
        while q.len() >= self.capacity {
            if let Some(old) = q.pop_front() {
                self.dropped.fetch_add(old.alerts, Ordering::Relaxed);
            }
        }
        q.push_back(d);
        drop(q);
        self.wake.notify_one();
    }

    pub fn wake(&self) {
        self.wake.notify_one();
    }

    pub fn stats(&self) -> TargetStats {
        TargetStats {
            target: self.name.clone(),
            sent: self.sent.load(Ordering::Relaxed),
            deliveries: self.deliveries.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            queued: lock(&self.queue).len(),
            last_error: lock(&self.last_error).clone(),
        }
    }

    /// After the worker was stopped: the delivery it was attempting counts
    /// as failed, what was still queued as dropped. Nothing vanishes
    /// uncounted.
    pub fn account_abandoned(&self) {
        let in_flight = self.in_flight.swap(0, Ordering::Relaxed);
        if in_flight > 0 {
            self.failed.fetch_add(in_flight, Ordering::Relaxed);
            self.record_error(format!("{}: stopped while delivering", self.name));
        }
        let left: u64 = lock(&self.queue).drain(..).map(|d| d.alerts).sum();
        self.dropped.fetch_add(left, Ordering::Relaxed);
    }

    fn pop(&self) -> Option<Delivery> {
        lock(&self.queue).pop_front()
    }

    fn record_error(&self, message: String) {
        *lock(&self.last_error) = Some(message);
    }
}

enum Outcome {
    Delivered,
    /// Worth another attempt (connection error, timeout, 429, 5xx).
    Transient(String),
    /// Retrying cannot help (400: the receiver rejects the body).
    Permanent(String),
}

/// The worker: POSTs queued deliveries in order until `closed` is set and
/// the queue is empty.
pub(crate) async fn run(
    target: Arc<Target>,
    client: reqwest::Client,
    retry: Retry,
    closed: Arc<AtomicBool>,
) {
    loop {
        let Some(d) = target.pop() else {
            if closed.load(Ordering::Acquire) {
                return;
            }
            target.wake.notified().await;
            continue;
        };
        target.in_flight.store(d.alerts, Ordering::Relaxed);
        let mut delay = retry.initial;
        for attempt in 1..=retry.max_attempts {
            match post(&client, &target.url, &d.body).await {
                Outcome::Delivered => {
                    target.sent.fetch_add(d.alerts, Ordering::Relaxed);
                    target.deliveries.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Outcome::Permanent(e) => {
                    target.record_error(format!("{}: {e}", target.name));
                    target.failed.fetch_add(d.alerts, Ordering::Relaxed);
                    break;
                }
                Outcome::Transient(e) => {
                    target.record_error(format!(
                        "{}: attempt {attempt}/{}: {e}",
                        target.name, retry.max_attempts
                    ));
                    if attempt == retry.max_attempts {
                        target.failed.fetch_add(d.alerts, Ordering::Relaxed);
                        break;
                    }
                    target.retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(retry.max);
                }
            }
        }
        target.in_flight.store(0, Ordering::Relaxed);
    }
}

async fn post(client: &reqwest::Client, url: &reqwest::Url, body: &[u8]) -> Outcome {
    let sent = client
        .post(url.clone())
        .header("content-type", "application/json")
        .header(
            "user-agent",
            concat!("overtime/", env!("CARGO_PKG_VERSION")),
        )
        .body(body.to_vec())
        .send()
        .await;
    let resp = match sent {
        Ok(r) => r,
        Err(e) => return Outcome::Transient(error_chain(&e)),
    };
    let status = resp.status();
    if status.is_success() {
        return Outcome::Delivered;
    }
    let text = resp.text().await.unwrap_or_default();
    let text: String = text.trim().chars().take(300).collect();
    let message = format!("HTTP {status}: {text}");
    if status.as_u16() == 429 || status.is_server_error() {
        Outcome::Transient(message)
    } else {
        Outcome::Permanent(message)
    }
}

/// The error and its causes on one line ("error sending request: … :
/// Connection refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_queue_drops_the_oldest_and_counts_its_alerts() {
        let url = reqwest::Url::parse("http://user:secret@am.example:9093/api/v2/alerts").unwrap();
        let t = Target::new("alertmanager", url, 2);
        for alerts in [3, 5, 7] {
            t.push(Delivery {
                body: vec![],
                alerts,
            });
        }
        let s = t.stats();
        assert_eq!(s.queued, 2);
        assert_eq!(s.dropped, 3, "the first (oldest) delivery carried 3 alerts");
        assert_eq!(t.pop().unwrap().alerts, 5);
        assert_eq!(s.target, "alertmanager:am.example:9093", "no credentials");
    }
}
