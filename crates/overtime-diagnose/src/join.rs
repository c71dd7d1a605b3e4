//! The one trace join: which trace a request id belongs to. The batch
//! engine (one request-id partition at a time, crate `overtime-batch`), the
//! in-memory run ([`crate::diagnose_tables`]) and the
//! live engine (as records arrive, `live/mod.rs`) both ask this type, so a
//! gateway line logged with a request id alone lands in the same trace
//! whichever engine reads it and in whatever order its records come.
//!
//! Design rules (docs/inputs.md, *Identity and joining*):
//! - A request id is **bound** to a trace by a record that carries both:
//!   a span (its `request_id` attribute) or a gateway line that also
//!   logged a traceparent. A span's binding beats a line's: the service
//!   states which request it served, while a proxy in front may have
//!   started a trace the service never joined.
//! - Among bindings of the same strength, the **earliest record** wins —
//!   by its time, then by its trace id — never the first to arrive, so a
//!   shuffled, duplicated or split input resolves the same way.
//! - An id nothing bound is its own trace id when it is 32 hex digits
//!   (some platforms log the trace id as the request id), else a stand-in
//!   `request:<id>` trace of the gateway's view only.
//! - Pure: no clock, no I/O; the caller says when each record happened.
//!
//! ```
//! use overtime_diagnose::{DiagnoseConfig, diagnose_tables};
//! use overtime_model::{GatewayColumns, GatewayRecord, SpanRecord};
//! let (nginx, service) = ("11111111111111111111111111111111", "22222222222222222222222222222222");
//! // The edge logs the request id with a traceparent of its own; the
//! // inner layer logs the request id alone; the service starts its own
//! // trace and records the request id on its root span.
//! let edge = GatewayRecord { source: "edge".into(), layer: 0, line: 1, status: Some(504),
//!     time_us: 1_000_000, request_time_ms: Some(6_000.0),
//!     trace_id: Some(nginx.into()), request_id: Some("r-1".into()), ..Default::default() };
//! let api = GatewayRecord { source: "api".into(), layer: 1, line: 1, trace_id: None, ..edge.clone() };
//! let mut root = SpanRecord::new(service, "b7ad6b7169203331", "agent", "POST /chat", 1_000_000, 7_000_000);
//! root.request_id = Some("r-1".into());
//! let mut cols = GatewayColumns::new();
//! cols.append(&edge);
//! cols.append(&api);
//! let d = diagnose_tables(&[cols.finish()], vec![root], &DiagnoseConfig::default()).unwrap();
//! // The span's binding wins: the inner layer's 504 is judged in the
//! // service's trace, not in a stand-in of its own.
//! assert!(d.verdicts.iter().any(|v| v.trace_id == service));
//! assert!(d.verdicts.iter().all(|v| !v.trace_id.starts_with("request:")));
//! ```

use crate::assemble::{Key, hex128};
use rustc_hash::FxHashMap;
use std::hash::Hash;

/// How a request id was resolved (for the run's join statistics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    /// To the trace a span or another layer's line bound it to.
    ByRequestId,
    /// To the id itself, read as a trace id.
    RequestIdAsTrace,
    /// To a stand-in trace of its own.
    Unjoined,
}

/// The bindings of request ids to traces. `R` is the id as the engine
/// keeps it (an owned `String` live, a borrowed slice in a batch
/// partition).
#[derive(Debug)]
pub struct RequestIds<R> {
    by_span: FxHashMap<R, (i64, Key)>,
    by_line: FxHashMap<R, (i64, u128)>,
}

impl<R> Default for RequestIds<R> {
    fn default() -> Self {
        RequestIds {
            by_span: FxHashMap::default(),
            by_line: FxHashMap::default(),
        }
    }
}

impl<R: Hash + Eq> RequestIds<R> {
    /// A span of trace `key` that started at `at_us` carries `rid`.
    /// Returns whether the id's binding changed.
    pub fn bind_span(&mut self, rid: R, at_us: i64, key: Key) -> bool {
        match self.by_span.get_mut(&rid) {
            Some(b) if (at_us, &key) < (b.0, &b.1) => {
                let changed = b.1 != key;
                *b = (at_us, key);
                changed
            }
            Some(_) => false,
            None => {
                let before = self.by_line.get(&rid).map(|b| Key::Trace(b.1));
                let changed = before.as_ref() != Some(&key);
                self.by_span.insert(rid, (at_us, key));
                changed
            }
        }
    }

    /// A gateway line logged at `at_us` carries `rid` and traceparent
    /// `trace`. Returns whether the id's binding changed.
    pub fn bind_line(&mut self, rid: R, at_us: i64, trace: u128) -> bool {
        let spans_decide = self.by_span.contains_key(&rid);
        match self.by_line.get_mut(&rid) {
            Some(b) if (at_us, trace) < *b => {
                let changed = b.1 != trace;
                *b = (at_us, trace);
                changed && !spans_decide
            }
            Some(_) => false,
            None => {
                self.by_line.insert(rid, (at_us, trace));
                !spans_decide
            }
        }
    }

    /// The trace a record bound `rid` to, if any.
    pub fn bound(&self, rid: &R) -> Option<Key> {
        match self.by_span.get(rid) {
            Some((_, k)) => Some(k.clone()),
            None => self.by_line.get(rid).map(|(_, t)| Key::Trace(*t)),
        }
    }

    /// Where a gateway line with request id `rid` (spelled `text`) and no
    /// traceparent of its own belongs.
    pub fn resolve(&self, rid: &R, text: &str) -> (Key, Joined) {
        match self.bound(rid) {
            Some(k) => (k, Joined::ByRequestId),
            None => unbound(text),
        }
    }

    /// Forgets the bindings to traces `keep` no longer holds.
    pub fn retain(&mut self, mut keep: impl FnMut(&Key) -> bool) {
        self.by_span.retain(|_, (_, k)| keep(k));
        self.by_line.retain(|_, (_, t)| keep(&Key::Trace(*t)));
    }
}

/// Where a request id nothing bound goes: the id itself as a trace id
/// when it is one, else a stand-in.
pub(crate) fn unbound(text: &str) -> (Key, Joined) {
    match hex128(text) {
        Some(t) => (Key::Trace(t), Joined::RequestIdAsTrace),
        None => (Key::Other(format!("request:{text}")), Joined::Unjoined),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u128) -> Key {
        Key::Trace(n)
    }

    #[test]
    fn a_span_binding_beats_an_earlier_line_binding() {
        let mut ids = RequestIds::default();
        assert!(ids.bind_line("r", 1, 7));
        assert!(ids.bind_span("r", 5, t(9)));
        assert_eq!(ids.resolve(&"r", "r"), (t(9), Joined::ByRequestId));
        // A later line cannot take it back.
        assert!(!ids.bind_line("r", 0, 8));
        assert_eq!(ids.bound(&"r"), Some(t(9)));
    }

    #[test]
    fn the_earliest_binding_wins_in_any_arrival_order() {
        let bindings = [(30, 3u128), (10, 1), (20, 2), (10, 4)];
        for rot in 0..bindings.len() {
            let mut ids = RequestIds::default();
            for i in 0..bindings.len() {
                let (at, tr) = bindings[(i + rot) % bindings.len()];
                ids.bind_span("r", at, t(tr));
            }
            assert_eq!(ids.bound(&"r"), Some(t(1)), "rotation {rot}");
        }
    }

    #[test]
    fn an_unbound_id_is_its_own_trace_when_it_is_32_hex_else_a_stand_in() {
        let ids: RequestIds<&str> = RequestIds::default();
        let hex = "0af7651916cd43dd8448eb211c80319c";
        assert_eq!(ids.resolve(&hex, hex).1, Joined::RequestIdAsTrace);
        assert_eq!(
            ids.resolve(&"r-1", "r-1"),
            (Key::Other("request:r-1".into()), Joined::Unjoined)
        );
    }

    #[test]
    fn a_repeated_binding_changes_nothing() {
        let mut ids = RequestIds::default();
        assert!(ids.bind_span("r", 5, t(1)));
        assert!(!ids.bind_span("r", 5, t(1)));
        assert!(!ids.bind_span("r", 4, t(1)));
    }
}
