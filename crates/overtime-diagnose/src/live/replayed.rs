//! Records read again: a Kafka partition's replay window, after its
//! previous owner died with traces it had stored but not judged (see
//! overtime-kafka's `context.rs`). Only what this state does not hold yet
//! is added, so a record read twice — by this collector's own replay
//! after a restart and again from Kafka — neither opens a judged trace
//! again nor lands twice in it.
//!
//! ```
//! use overtime_diagnose::DiagnoseConfig;
//! use overtime_diagnose::live::LiveDiagnoser;
//! use overtime_model::SpanRecord;
//! let mut live = LiveDiagnoser::new(DiagnoseConfig::default(), 0, 600_000, 1_000);
//! let span = SpanRecord::new(
//!     "0af7651916cd43dd8448eb211c80319c",
//!     "b7ad6b7169203331",
//!     "agent",
//!     "POST /chat",
//!     0,
//!     1_000,
//! );
//! live.add_spans(vec![span.clone()], 0);
//! assert_eq!(live.add_replayed(Vec::new(), vec![span], 1), 0);
//! ```

use super::LiveDiagnoser;
use crate::assemble::{Key, hex128};
use overtime_model::{GatewayRecord, SpanRecord};

impl LiveDiagnoser {
    /// Adds the records this state does not hold yet (a span by its id in
    /// its trace, a line by its source and line number where it would be
    /// filed); returns how many were new.
    pub fn add_replayed(
        &mut self,
        gateway: Vec<GatewayRecord>,
        spans: Vec<SpanRecord>,
        now_us: i64,
    ) -> usize {
        let spans: Vec<SpanRecord> = spans
            .into_iter()
            .filter(|s| {
                let key = hex128(&s.trace_id)
                    .map(Key::Trace)
                    .unwrap_or_else(|| Key::Other(s.trace_id.clone()));
                !self
                    .held(&key)
                    .is_some_and(|p| p.spans_seen.contains(&s.span_id))
            })
            .collect();
        let gateway: Vec<GatewayRecord> = gateway
            .into_iter()
            .filter(|g| {
                let key = match (g.trace_id.as_deref().and_then(hex128), &g.request_id) {
                    (Some(t), _) => Key::Trace(t),
                    (None, Some(r)) => self.request_ids.resolve(r, r).0,
                    (None, None) => Key::Other(format!("line:{}:{}", g.source, g.line)),
                };
                !self.held(&key).is_some_and(|p| {
                    p.trace
                        .gateway
                        .iter()
                        .any(|h| h.source == g.source && h.line == g.line)
                })
            })
            .collect();
        let new = gateway.len() + spans.len();
        self.add_gateway(gateway, now_us);
        self.add_spans(spans, now_us);
        new
    }

    fn held(&self, key: &Key) -> Option<&super::Pending> {
        self.pending
            .get(key)
            .or_else(|| self.done.get(key).map(|d| &d.pending))
    }
}
