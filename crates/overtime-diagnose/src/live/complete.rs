//! A trace completed from the shared store before its verdict.
//!
//! When a Kafka partition moves between collectors (a crash, a
//! rebalance, a restart), a trace's records end up with several of them:
//! the new owner reads them from the point the old owner had committed,
//! while the trace's earlier records are in the bucket, flushed by the old
//! owner — and a collector that restarts replays the part it flushed
//! itself while the part it had not is now another's. Judged on its part,
//! such a trace gets a wrong cause (the missing early calls read as time
//! waited before any work), a false incident can be paged and ticketed,
//! and what the reports count of it (its LLM calls, the stream its gateway
//! cut) is lost: every holder's summary is partial. So before a verdict, a
//! collector whose store is shared looks the trace up once
//! ([`LiveDiagnoser::to_complete`], the lookup outside the live lock, in
//! the store and the peers' unflushed rows, then
//! [`LiveDiagnoser::complete`]): whatever they hold that the live state
//! lacks is added, and the verdict waits for it.
//!
//! Design rules:
//! - Pure: the lookup is the caller's (the server, with the store).
//! - Once per trace, and only for traces that may be split: those that
//!   look failing — a gateway 5xx, or no gateway line at all and a span
//!   that failed, timed out or was cancelled (the line may be in the part
//!   flushed elsewhere) — and those a peer holds a summary of
//!   ([`LiveDiagnoser::note_peer_traces`]), diagnosed already or not (a
//!   diagnosed one is reopened when the lookup finds more). A lookup costs
//!   a bloom-filter probe per recent file of the bucket.
//! - Records are added only when new (spans by id, gateway lines by source
//!   and line), so a lookup that finds this collector's own rows changes
//!   nothing and does not delay the verdict. A line found so is not
//!   counted again for its layer's timeout inference: the collector that
//!   read it counts it (and shares it with its peers). Every holder of a
//!   completed trace then holds all of it and judges it alike; the reports
//!   count it once ([`LiveDiagnoser::incidents_with`]), its cut stream too
//!   (shared by trace id, `cuts.rs`).

use super::{LiveDiagnoser, Pending};
use crate::assemble::{Key, hex128};
use overtime_model::{GatewayRecord, SpanRecord, SpanStatus};

/// Whether the records held say the request failed: its gateway answered
/// 5xx, or, with no gateway line held, one of its spans did not end well.
fn looks_failing(p: &Pending) -> bool {
    p.gateway_failed()
        || (p.trace.gateway.is_empty()
            && p.trace.spans.iter().any(|s| {
                matches!(
                    s.status,
                    SpanStatus::Error | SpanStatus::Timeout | SpanStatus::Cancelled
                )
            }))
}

impl LiveDiagnoser {
    /// Trace ids of the traces to look up in the shared store before
    /// their verdict (see the module), each marked as looked up: the
    /// waiting ones that look failing or that a peer holds part of, quiet
    /// for the failure grace (the next [`LiveDiagnoser::tick`] may judge
    /// them), and the diagnosed ones a peer turned out to hold part of.
    pub fn to_complete(&mut self, now_us: i64) -> Vec<String> {
        let mut out = Vec::new();
        for p in self.pending.values_mut() {
            let quiet = now_us - p.last_update_us;
            if p.completed || quiet < self.failure_grace_us || !(p.elsewhere || looks_failing(p)) {
                continue;
            }
            p.completed = true;
            out.push(p.trace.id.clone());
        }
        for key in std::mem::take(&mut self.split) {
            if let Some(d) = self.done.get_mut(&key)
                && !d.pending.completed
            {
                d.pending.completed = true;
                out.push(d.pending.trace.id.clone());
            }
        }
        out
    }

    /// Takes the trace ids the peers hold summaries of: a trace held here
    /// too is split between collectors, and is looked up before (or,
    /// diagnosed already, after) its verdict ([`LiveDiagnoser::to_complete`]).
    pub fn note_peer_traces(&mut self, others: &[super::SharedTraces]) {
        for s in others.iter().flat_map(|o| &o.summaries) {
            let Some(key) = hex128(&s.trace_id).map(Key::Trace) else {
                continue;
            };
            if let Some(p) = self.pending.get_mut(&key) {
                p.elsewhere = true;
            } else if let Some(d) = self.done.get_mut(&key)
                && !d.pending.completed
                && !d.pending.elsewhere
            {
                d.pending.elsewhere = true;
                self.split.push(key);
            }
        }
    }

    /// Adds the records of `trace_id` found in the shared store that the
    /// live state lacks; returns how many were new (then the trace's
    /// verdict waits a grace period for them, as for any new record).
    pub fn complete(
        &mut self,
        trace_id: &str,
        gateway: Vec<GatewayRecord>,
        spans: Vec<SpanRecord>,
        now_us: i64,
    ) -> usize {
        let Some(key) = hex128(trace_id).map(Key::Trace) else {
            return 0;
        };
        let held = match self.pending.get(&key) {
            Some(p) => p,
            None => match self.done.get(&key) {
                Some(d) => &d.pending,
                None => return 0,
            },
        };
        let gateway: Vec<GatewayRecord> = gateway
            .into_iter()
            .filter(|g| {
                !held
                    .trace
                    .gateway
                    .iter()
                    .any(|h| h.source == g.source && h.line == g.line)
            })
            .collect();
        let spans: Vec<SpanRecord> = spans
            .into_iter()
            .filter(|s| !held.spans_seen.contains(&s.span_id))
            .collect();
        let new = gateway.len() + spans.len();
        // The collector that read a line counts its 504 for the timeout
        // inference; a line found in the store is not counted again.
        for g in gateway {
            self.attach_gateway(crate::assemble::sane_gateway(g), now_us);
        }
        if !spans.is_empty() {
            self.add_spans(spans, now_us);
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use crate::config::DiagnoseConfig;
    use crate::live::LiveDiagnoser;
    use overtime_model::{GatewayRecord, SpanRecord};

    const T: &str = "0af7651916cd43dd8448eb211c80319c";

    fn span(id: &str, parent: Option<&str>) -> SpanRecord {
        let mut s = SpanRecord::new(T, id, "agent", id, 1_000_000, 2_000_000);
        s.parent_span_id = parent.map(String::from);
        s
    }

    fn gateway_504() -> GatewayRecord {
        GatewayRecord {
            source: "edge".into(),
            line: 7,
            trace_id: Some(T.into()),
            status: Some(504),
            time_us: 2_000_000,
            request_time_ms: Some(1000.0),
            ..Default::default()
        }
    }

    #[test]
    fn a_failing_trace_is_looked_up_once_and_only_what_it_lacks_is_added() {
        let mut live = LiveDiagnoser::new(DiagnoseConfig::default(), 2_000, 60_000, 100)
            .with_failure_grace(1_000);
        live.add_gateway(vec![gateway_504()], 0);
        live.add_spans(vec![span("root", None)], 0);
        assert!(
            live.to_complete(500_000).is_empty(),
            "not quiet long enough"
        );
        assert_eq!(live.to_complete(1_000_000), vec![T.to_string()]);
        assert!(live.to_complete(1_500_000).is_empty(), "once per trace");

        // The store holds what this collector already has, and one span
        // the previous owner flushed.
        let found = live.complete(
            T,
            vec![gateway_504()],
            vec![span("root", None), span("dns", Some("root"))],
            1_000_000,
        );
        assert_eq!(found, 1, "only the missing span is new");
        assert!(live.tick(1_500_000).is_empty(), "the verdict waits for it");
        let v = live.tick(3_000_000);
        assert_eq!(v.len(), 1);
        assert_eq!(live.complete(T, vec![gateway_504()], vec![], 3_000_000), 0);
    }

    #[test]
    fn spans_alone_are_looked_up_when_one_failed_and_never_when_all_went_well() {
        let mut live = LiveDiagnoser::new(DiagnoseConfig::default(), 2_000, 60_000, 100)
            .with_failure_grace(1_000);
        live.add_spans(vec![span("root", None)], 0);
        assert!(live.to_complete(1_500_000).is_empty(), "nothing failed");
        let mut tool = span("tool", Some("root"));
        tool.status = overtime_model::SpanStatus::Timeout;
        live.add_spans(vec![tool], 1_500_000);
        assert_eq!(live.to_complete(2_500_000), vec![T.to_string()]);
    }

    /// What a peer that holds `spans` of the trace tells of it.
    fn peer_holding(spans: Vec<SpanRecord>) -> crate::live::SharedTraces {
        let mut peer = LiveDiagnoser::new(DiagnoseConfig::default(), 2_000, 60_000, 100);
        peer.add_spans(spans, 0);
        peer.tick(3_000_000);
        let mut m = crate::live::PeerMirror::default();
        m.apply(peer.shared_since(0));
        m.traces()
    }

    /// The records of the newest summary of `T` here.
    fn records_held(live: &LiveDiagnoser) -> u32 {
        let d = live.shared_since(0);
        d.summaries
            .iter()
            .rev()
            .find(|(_, s)| s.trace_id == T)
            .map_or(0, |(_, s)| s.records)
    }

    #[test]
    fn a_trace_a_peer_holds_part_of_is_completed_before_its_verdict_even_when_it_went_well() {
        let mut live = LiveDiagnoser::new(DiagnoseConfig::default(), 2_000, 60_000, 100)
            .with_failure_grace(1_000);
        live.add_spans(vec![span("root", None)], 0);
        live.note_peer_traces(&[peer_holding(vec![span("llm", Some("root"))])]);
        assert!(
            live.to_complete(500_000).is_empty(),
            "not quiet long enough"
        );
        assert_eq!(live.to_complete(1_000_000), vec![T.to_string()]);
        let found = live.complete(
            T,
            vec![],
            vec![span("root", None), span("llm", Some("root"))],
            1_000_000,
        );
        assert_eq!(found, 1);
        live.tick(3_000_000);
        assert_eq!(records_held(&live), 2, "judged on all of it");
        assert!(live.to_complete(9_000_000).is_empty(), "once per trace");
    }

    #[test]
    fn a_diagnosed_trace_found_split_later_is_looked_up_and_judged_again_whole() {
        // A restarted collector judged the part it had flushed before a
        // peer's summary of the rest came.
        let mut live = LiveDiagnoser::new(DiagnoseConfig::default(), 2_000, 60_000, 100)
            .with_failure_grace(1_000);
        live.add_spans(vec![span("root", None)], 0);
        live.tick(3_000_000);
        assert_eq!(records_held(&live), 1);
        assert!(
            live.to_complete(3_000_000).is_empty(),
            "nothing says it is split"
        );
        let peer = peer_holding(vec![span("llm", Some("root"))]);
        live.note_peer_traces(std::slice::from_ref(&peer));
        assert_eq!(live.to_complete(3_000_000), vec![T.to_string()]);
        live.complete(
            T,
            vec![],
            vec![span("root", None), span("llm", Some("root"))],
            3_000_000,
        );
        live.tick(6_000_000);
        assert_eq!(records_held(&live), 2, "reopened and judged on all of it");
        live.note_peer_traces(&[peer]);
        assert!(live.to_complete(6_000_000).is_empty(), "once per trace");
    }
}
