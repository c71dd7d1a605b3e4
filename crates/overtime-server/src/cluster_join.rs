//! The lookups behind the live request-id join (overtime-diagnose's
//! `live/requests.rs`), made with the store and the peers: the gateway
//! lines a trace's spans name by request id, the spans an orphan line's
//! request id is carried by, and the rows of a trace an orphan belongs to.
//!
//! Design rules:
//! - Only with peers; outside the live lock; batched: one ask per peer
//!   (per 64 request ids) and one store read for all the lookups due in a
//!   tick, the store reading only row groups whose request id bloom filter
//!   allows one of them.
//! - A peer that does not answer only delays: a trace's second look and an
//!   orphan's pull come later, and a line alone is judged alone.

use crate::AppState;
use crate::pipeline::now_us;
use arrow::record_batch::RecordBatch;
use overtime_diagnose::live::RequestLookup;
use overtime_model::{Table, gateway_records, span_records};
use overtime_store::{PeerSource, Unflushed};
use std::collections::HashMap;

/// Runs the request-id lookups due now and hands their finds to the live
/// diagnosis.
pub(crate) fn join_requests(state: &AppState) {
    if state.peers.is_empty() {
        return;
    }
    let now = now_us();
    let (lines_due, orphans_due, to_pull) = {
        let mut live = state.live.lock().expect("live state lock");
        (
            live.lines_due(now),
            live.orphans_due(now),
            live.orphans_to_pull(now),
        )
    };
    if lines_due.is_empty() && orphans_due.is_empty() && to_pull.is_empty() {
        return;
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if !lines_due.is_empty() {
        let rows = rt.block_on(by_request(state, Table::GatewayRequests, &lines_due));
        let lines = decode(state, "gateway_requests", &rows, gateway_records);
        let mut by_rid: HashMap<&str, Vec<&overtime_model::GatewayRecord>> = HashMap::new();
        for l in &lines {
            if let Some(r) = l.request_id.as_deref() {
                by_rid.entry(r).or_default().push(l);
            }
        }
        let mut live = state.live.lock().expect("live state lock");
        for due in &lines_due {
            let found: Vec<_> = due
                .request_ids
                .iter()
                .flat_map(|r| by_rid.get(r.as_str()).into_iter().flatten())
                .map(|l| (*l).clone())
                .collect();
            if !found.is_empty() {
                live.join_lines(&due.trace_id, found, now_us());
            }
        }
    }
    if !orphans_due.is_empty() {
        let rows = rt.block_on(by_request(state, Table::Spans, &orphans_due));
        let spans = decode(state, "spans", &rows, span_records);
        let trace_of: HashMap<&str, &str> = spans
            .iter()
            .filter_map(|s| Some((s.request_id.as_deref()?, s.trace_id.as_str())))
            .collect();
        let mut live = state.live.lock().expect("live state lock");
        for due in &orphans_due {
            if let Some(t) = due
                .request_ids
                .iter()
                .find_map(|r| trace_of.get(r.as_str()))
                .filter(|t| **t != due.trace_id)
            {
                live.orphan_found(&due.trace_id, t);
            }
        }
    }
    for trace in to_pull {
        let pq = state.peers.query();
        let (gw_peers, span_peers) = rt.block_on(async {
            futures::join!(
                pq.unflushed(Table::GatewayRequests, None, None, Some(&trace)),
                pq.unflushed(Table::Spans, None, None, Some(&trace))
            )
        });
        match state.store.trace_with(&trace, &gw_peers, &span_peers) {
            Ok((gw, spans)) => {
                let gw = decode(state, "gateway_requests", &gw, gateway_records);
                let spans = decode(state, "spans", &spans, span_records);
                state
                    .live
                    .lock()
                    .expect("live state lock")
                    .adopt_rows(&trace, gw, spans, now_us());
            }
            Err(e) => {
                tracing::warn!("overtime: pulling trace {trace} for a line of its request: {e}")
            }
        }
    }
}

/// The rows of `table` whose request id one of `due` names, from the
/// store (every collector's Parquet, this one's memtable) and the peers'
/// unflushed rows, over the union of their time ranges.
async fn by_request(state: &AppState, table: Table, due: &[RequestLookup]) -> Vec<RecordBatch> {
    let mut ids: Vec<String> = due.iter().flat_map(|d| d.request_ids.clone()).collect();
    ids.sort();
    ids.dedup();
    let from = due.iter().map(|d| d.from_us).min().unwrap_or(0);
    let to = due.iter().map(|d| d.to_us).max().unwrap_or(i64::MAX);
    let pq = state.peers.query();
    let peers: Vec<Unflushed> = pq
        .unflushed_requests(table, Some(from), Some(to), &ids)
        .await;
    let store = state.store.clone();
    let read =
        tokio::task::spawn_blocking(move || store.by_request_with(table, &ids, from, to, &peers))
            .await;
    match read {
        Ok(Ok(rows)) => rows,
        Ok(Err(e)) => {
            tracing::warn!("overtime: looking up {table} by request id: {e}");
            Vec::new()
        }
        Err(e) => {
            tracing::warn!("overtime: looking up {table} by request id: {e}");
            Vec::new()
        }
    }
}

/// Rows decoded; a batch that does not decode is counted and logged.
fn decode<T, E: std::fmt::Display>(
    state: &AppState,
    table: &'static str,
    batches: &[RecordBatch],
    f: impl Fn(&RecordBatch) -> Result<Vec<T>, E>,
) -> Vec<T> {
    let mut out = Vec::new();
    for b in batches {
        match f(b) {
            Ok(rows) => out.extend(rows),
            Err(e) => {
                state.metrics.count_live_decode_failure(table);
                tracing::warn!("overtime: {table} rows found by request id: {e}");
            }
        }
    }
    out
}
