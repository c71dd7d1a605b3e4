//! The collector's periodic jobs, on one loop: verdicts every half second;
//! the peers' traces fetched and incidents shown to the notification policy, the SLO clock advanced and
//! the SLO alerts sent every 2 s (sooner after new verdicts); retention
//! every hour. On stop, the senders get to flush.

use crate::notify::Notifications;
use overtime_server::AppState;
use overtime_server::pipeline;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Runs the periodic jobs until `shutdown`, then shuts the senders down.
pub(crate) async fn periodic(
    state: Arc<AppState>,
    mut notes: Notifications,
    grace_ms: u64,
    slo_alerts: bool,
    shutdown: CancellationToken,
) {
    let mut every = tokio::time::interval(Duration::from_millis(500));
    let mut last_retention = Instant::now();
    let mut last_notes = Instant::now();
    // The SLOs run on data time; with no traffic for this long it moves to
    // the wall clock (so an idle collector's windows drain).
    let idle_us = grace_ms as i64 * 1000 + 5_000_000;
    // The peers are asked once before anything is judged: what a restart
    // replayed may be the part of a trace whose rest a peer holds (it is
    // completed first, overtime-diagnose's live/complete.rs), and the
    // layers' timeouts are inferred from every collector's 504s.
    overtime_server::refresh_peers(&state).await;
    while !shutdown.is_cancelled() {
        tokio::select! {
            _ = every.tick() => {}
            _ = shutdown.cancelled() => break,
        }
        let s = state.clone();
        let fresh = tokio::task::spawn_blocking(move || pipeline::tick(&s))
            .await
            .unwrap_or(0);
        // Every 2 s, and sooner when verdicts just came: a new incident is
        // paged within about a second of its first verdict.
        let since = last_notes.elapsed();
        if since >= Duration::from_secs(2) || (fresh > 0 && since >= Duration::from_millis(900)) {
            // The peers' traces first: incidents are reported, paged and
            // ticketed over every collector's traffic, each fingerprint by
            // its one owner; /metrics counts this collector's own (the
            // dashboards sum over collectors).
            overtime_server::refresh_peers(&state).await;
            let s = state.clone();
            let (own, all) = tokio::task::spawn_blocking(move || {
                let own = s.live.lock().expect("live state lock").incidents();
                let all = if s.peers.is_empty() {
                    own.clone()
                } else {
                    s.incidents()
                };
                (own, all)
            })
            .await
            .unwrap_or_default();
            state.metrics.update_incidents(&own);
            notes.incidents(&all, |fingerprint| state.owns(fingerprint));
            state.metrics.advance_if_idle(pipeline::now_us(), idle_us);
            // With peers, the shipped Prometheus rules alert over the
            // sum of every collector's counters unless told otherwise
            // (`[cluster] slo_alerts`).
            if slo_alerts {
                notes.slo_alerts(&state.metrics.alerts());
            }
            last_notes = Instant::now();
        }
        if last_retention.elapsed() >= Duration::from_secs(3600) {
            let s = state.clone();
            let _ =
                tokio::task::spawn_blocking(move || s.store.enforce_retention(pipeline::now_us()))
                    .await;
            last_retention = Instant::now();
        }
    }
    notes.shutdown().await;
}
