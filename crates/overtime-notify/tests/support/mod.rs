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
use std::time::{Duration, Instant};

pub use overtime_test_support::stand_in::{Fault, Logged, down_port, listener, pending_files};

/// The faults and log every stand-in keeps.
#[derive(Debug, Default)]
pub struct Common {
    pub log: Vec<Logged>,
    pub rejections: Vec<String>,
    pub faults: VecDeque<Fault>,
}

/// A vendor's stand-in: where it listens, its state, its server. Each
/// vendor's module adds its own constructors and views.
pub struct StandIn<S> {
    pub url: String,
    pub state: std::sync::Arc<std::sync::Mutex<S>>,
    served: overtime_test_support::stand_in::Served,
}

impl<S: HasCommon + Default + Sync> StandIn<S> {
    /// Serves `handle` on `l`, from a fresh state.
    pub fn serve<F, Fut>(l: tokio::net::TcpListener, handle: F) -> Self
    where
        F: Fn(
                std::sync::Arc<std::sync::Mutex<S>>,
                axum::http::Method,
                axum::http::Uri,
                axum::http::HeaderMap,
                axum::body::Bytes,
            ) -> Fut
            + Clone
            + Send
            + Sync
            + 'static,
        Fut: std::future::Future<Output = axum::response::Response> + Send + 'static,
    {
        let state = std::sync::Arc::new(std::sync::Mutex::new(S::default()));
        let served = overtime_test_support::stand_in::Served::serve(l, state.clone(), handle);
        StandIn {
            url: served.url(),
            state,
            served,
        }
    }

    pub fn state(&self) -> std::sync::MutexGuard<'_, S> {
        overtime_test_support::stand_in::lock(&self.state)
    }

    pub fn rejections(&self) -> Vec<String> {
        self.state().common().rejections.clone()
    }

    pub fn log(&self) -> Vec<Logged> {
        self.state().common().log.clone()
    }

    pub fn fault(&self, f: Fault) {
        self.state().common().faults.push_back(f);
    }

    pub fn stop(&self) {
        self.served.stop();
    }
}

/// A stand-in's state, which holds the [`Common`] part.
pub trait HasCommon: Send + 'static {
    fn common(&mut self) -> &mut Common;
}

/// Answers one request: the next injected fault (a 429 with
/// `throttled` as its body, the vendor's own words), else `route`'s
/// answer; logged either way.
pub async fn answer<S: HasCommon>(
    st: &std::sync::Mutex<S>,
    method: &axum::http::Method,
    path: String,
    throttled: serde_json::Value,
    route: impl std::future::Future<Output = axum::response::Response>,
) -> axum::response::Response {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use overtime_test_support::stand_in::lock;
    let fault = lock(st).common().faults.pop_front();
    let resp = match fault {
        Some(Fault::RateLimit { retry_after_secs }) => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", retry_after_secs.to_string())],
            axum::Json(throttled),
        )
            .into_response(),
        Some(Fault::Status(s)) => StatusCode::from_u16(s).unwrap().into_response(),
        None => route.await,
    };
    lock(st).common().log.push(Logged {
        method: method.to_string(),
        path,
        status: resp.status().as_u16(),
        at: Instant::now(),
    });
    resp
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
