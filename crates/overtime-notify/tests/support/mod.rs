//! Local stand-ins for Slack and PagerDuty that serve only the endpoints
//! overtime uses and refuse, the way the vendor does, every request that
//! does not follow its documented API (auth header, Content-Type, field
//! names, required fields, limits). Every refusal is recorded, so a test
//! can assert that the channel never sent one. What both share: the
//! request log, injected faults (429 with `Retry-After`, 5xx), a port held
//! while "down", and incident snapshots.

#![allow(dead_code)]

pub mod pagerduty;
pub mod slack;

use overtime_notify::{ChannelStats, Incident, IncidentChannel, Links, RetryPolicy, TopCause};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// One request the stand-in answered.
#[derive(Debug, Clone)]
pub struct Logged {
    pub method: String,
    pub path: String,
    pub status: u16,
    pub at: Instant,
}

/// What the next requests get instead of a normal answer.
#[derive(Debug, Clone)]
pub enum Fault {
    Status(u16),
    RateLimit { retry_after_secs: u64 },
}

/// The faults and log every stand-in keeps.
#[derive(Debug, Default)]
pub struct Common {
    pub log: Vec<Logged>,
    pub rejections: Vec<String>,
    pub faults: VecDeque<Fault>,
}

/// A loopback port held but not listened on: a connection to it is
/// refused until a stand-in listens on it, and no other test can take it
/// meanwhile.
pub fn down_port() -> (SocketAddr, tokio::net::TcpSocket) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    (socket.local_addr().unwrap(), socket)
}

/// A bound listener on a free loopback port.
pub async fn listener() -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()
}

/// Waits (up to 30 s) until `cond` holds of the channel's counters.
pub async fn wait_for(
    what: &str,
    stats: impl Fn() -> ChannelStats,
    cond: impl Fn(&ChannelStats) -> bool,
) -> ChannelStats {
    let start = Instant::now();
    loop {
        let s = stats();
        if cond(&s) {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An open incident of `kind` on `component` with `failures` failures.
pub fn incident(kind: &str, component: &str, failures: u64) -> Incident {
    let fingerprint = format!("{kind}:{component}");
    let id = format!("{fingerprint}@2026-03-01T10:00:00.000Z");
    let traces = vec!["4bf92f3577b34da6a3ce929d0e0e4736".to_string()];
    Incident {
        links: Links::new("http://overtime.test:8080", &id, &traces),
        id,
        fingerprint,
        kind: kind.into(),
        component: component.into(),
        open: true,
        headline: format!("{failures} of 504s came from {kind} on {component}"),
        started_at: "2026-03-01T10:00:00Z".parse().unwrap(),
        failures,
        gateway_504: failures,
        requests: 10 * failures,
        timeouts: failures,
        top_cause: Some(TopCause {
            kind: kind.into(),
            component: component.into(),
            count: failures,
            share: 0.8,
        }),
        example_trace_ids: traces,
        report_markdown: String::new(),
    }
}

/// Files waiting in an outbox folder.
pub fn pending_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let n = e
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .into_owned();
            n.ends_with(".json") && !n.starts_with('.')
        })
        .count()
}

/// Retries fast enough for a test: 50 ms doubling to 1 s.
pub fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        base_backoff_ms: 50,
        max_backoff_secs: 1,
        ..Default::default()
    }
}

/// Stops a channel, waiting for its delivery to wind down.
pub async fn stop(c: impl IncidentChannel + 'static) {
    Box::new(c).shutdown().await;
}
