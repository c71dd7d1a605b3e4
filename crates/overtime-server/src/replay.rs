//! What a Kafka partition's new owner reads again from before where it
//! stores (overtime-kafka's replay window): the records its previous owner
//! stored in the shared bucket but may not have judged — a collector
//! killed with traces waiting for their grace period took them with it,
//! and nobody else read their records.
//!
//! Design rules:
//! - Only with peers and a shared store ([`window_ms`] is 0 otherwise):
//!   alone, a collector's own restart replays what it stored.
//! - Held, not judged at once: the previous owner may be alive (a plain
//!   rebalance) and tell its verdicts within its grace period plus a
//!   fetch; after [`hold_us`] whatever a peer told of is dropped — by
//!   trace id, or by request id for a line with no traceparent whose
//!   trace failed or that was judged alone as healthy (a line judged
//!   alone as failing is judged again: its spans may have been read
//!   since) — and the rest goes to the live diagnosis as records
//!   read again (`LiveDiagnoser::add_replayed`: what it holds already is
//!   not added twice). Nothing is stored: the bucket has it.
//! - The window reaches back the traces' grace period, plus the longest
//!   a dead owner's partitions wait for a new one (`[cluster]
//!   takeover_ms`), plus a fetch of the peers.

use crate::AppState;
use crate::pipeline::now_us;
use arrow::record_batch::RecordBatch;
use overtime_model::{Table, gateway_records, span_records};
use std::collections::VecDeque;
use std::sync::Mutex;

/// How often the peers are asked for their traces, ms.
const FETCH_MS: u64 = 2_000;

/// Batches read again, each with when it may be looked at.
#[derive(Debug, Default)]
pub struct Replayed(Mutex<VecDeque<(i64, Table, RecordBatch)>>);

/// How far back a newly assigned partition is read again, ms (0: not).
pub(crate) fn window_ms(state: &AppState) -> u64 {
    if state.peers.is_empty() || !state.store.shared() {
        return 0;
    }
    grace_ms(state)
        + state.peers.takeover().as_millis() as u64
        + FETCH_MS
        + state.peers.timeout().as_millis() as u64
}

fn grace_ms(state: &AppState) -> u64 {
    state.live.lock().expect("live state lock").grace_ms()
}

/// How long a batch read again waits before what the peers told is
/// taken out of it, µs: a live previous owner has told every trace of it
/// by then.
pub(crate) fn hold_us(state: &AppState) -> i64 {
    let ms = grace_ms(state) + 2 * FETCH_MS + state.peers.timeout().as_millis() as u64;
    ms as i64 * 1000
}

/// Keeps `batch` until [`hold_us`] from now.
pub(crate) fn hold(state: &AppState, table: Table, batch: RecordBatch) {
    if !matches!(table, Table::GatewayRequests | Table::Spans) || batch.num_rows() == 0 {
        return;
    }
    let due = now_us() + hold_us(state);
    state
        .replayed
        .0
        .lock()
        .expect("replayed lock")
        .push_back((due, table, batch));
}

/// Hands the held batches that are due to the live diagnosis, without
/// what a peer told of. Returns how many records were new to it.
pub(crate) fn release_due(state: &AppState) -> usize {
    let now = now_us();
    let due: Vec<(Table, RecordBatch)> = {
        let mut q = state.replayed.0.lock().expect("replayed lock");
        let mut out = Vec::new();
        while q.front().is_some_and(|(at, _, _)| *at <= now) {
            let (_, t, b) = q.pop_front().expect("checked");
            out.push((t, b));
        }
        out
    };
    if due.is_empty() {
        return 0;
    }
    let (mut gateway, mut spans) = (Vec::new(), Vec::new());
    for (table, b) in &due {
        let decoded = match table {
            Table::GatewayRequests => gateway_records(b).map(|r| gateway.extend(r)),
            _ => span_records(b).map(|r| spans.extend(r)),
        };
        if let Err(e) = decoded {
            state.metrics.count_live_decode_failure(table.as_str());
            tracing::error!(
                "overtime: a {} batch read again could not be decoded: {e}",
                table.as_str()
            );
        }
    }
    let read = gateway.len() + spans.len();
    {
        let view = state.cluster.lock().expect("cluster view lock");
        let joined = view.told_joined();
        gateway.retain(|g| match (&g.trace_id, &g.request_id) {
            (Some(t), _) => !view.told_trace(t),
            (None, Some(r)) => !view.told_line(r, &joined),
            (None, None) => true,
        });
        spans.retain(|s| !view.told_trace(&s.trace_id));
    }
    let new = state
        .live
        .lock()
        .expect("live state lock")
        .add_replayed(gateway, spans, now);
    if new > 0 {
        tracing::info!(
            "overtime: of {read} records read again after a partition moved, {new} were judged by nobody yet and are judged here"
        );
    }
    new
}
