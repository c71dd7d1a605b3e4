//! Gateway lines keyed by request id on one collector, their spans on
//! another.
//!
//! When nginx logs no traceparent (none came in, or none is logged) its
//! shipper keys a line by `$request_id`, while the services —
//! auto-instrumented, starting traces of their own — produce spans keyed
//! by a trace id that is not the request id. The line and its spans then
//! land on different collectors of the group; only the spans say which
//! request they served (the `X-Request-ID` they captured). Alone, a
//! collector joins them by that id; with peers ([`LiveDiagnoser::with_peers`])
//! the trace is judged where its spans are:
//!
//! - **The spans' holder pulls the line.** A trace whose spans carry a
//!   request id no line held here has is due for a lookup of that line
//!   among the other collectors' gateway lines (their unflushed rows and
//!   the bucket) once quiet for the failure grace, and again, if nothing
//!   was found, at the full grace ([`LiveDiagnoser::lines_due`]). A line
//!   found joins the trace ([`LiveDiagnoser::join_lines`]) — without its
//!   504 counting again for the timeout inference (the collector that read
//!   it counts it) — and the trace's verdict waits for it as for any new
//!   record. Every request id so joined is a *claim*, shared with the
//!   peers ([`super::TracesDelta::claims`]).
//! - **The line's holder never judges a line a span elsewhere resolves.**
//!   A line held under its request id alone (an *orphan*) gets no verdict,
//!   early or not, until it has been quiet for the full grace and looked
//!   up among the spans ([`LiveDiagnoser::orphans_due`]). Claimed by a peer
//!   ([`LiveDiagnoser::set_peer_claims`]) it is forgotten here — withdrawn
//!   if it was judged — so it is counted once, in its trace. Found among
//!   the spans but not claimed within twice the grace (the spans' holder
//!   looked before the line was there), its trace's rows are pulled here
//!   instead ([`LiveDiagnoser::orphans_to_pull`], [`LiveDiagnoser::adopt_rows`]).
//!   Found nowhere, it is judged alone, as a single collector would, and
//!   looked up again at 2, 4, 8… times the grace until the group's
//!   takeover has passed ([`LiveDiagnoser::with_takeover`]): after a
//!   collector dies its partitions are read again by different survivors,
//!   so a line's spans can arrive after its first look; found then, they
//!   are pulled here and the line judged alone is withdrawn into its
//!   trace.
//!
//! Design rules: pure (the lookups are the caller's, outside the live
//! lock); bounded (two lookups per trace, a few per orphan — one, or
//! log₂ of the takeover over the grace when judged alone; the claims kept
//! like the summaries); off without peers, where nothing changes.
//!
//! ```
//! use overtime_diagnose::DiagnoseConfig;
//! use overtime_diagnose::live::LiveDiagnoser;
//! use overtime_model::{GatewayRecord, SpanRecord};
//! let line = GatewayRecord { source: "edge".into(), line: 1, status: Some(504),
//!     request_time_ms: Some(10_000.0), request_id: Some("r-1".into()),
//!     time_us: 10_000_000, ..Default::default() };
//! // The line's collector: no verdict before its lookup.
//! let mut l = LiveDiagnoser::new(DiagnoseConfig::default(), 2_000, 60_000, 100)
//!     .with_failure_grace(1_000).with_peers();
//! l.add_gateway(vec![line.clone()], 0);
//! assert!(l.tick(1_500_000).is_empty(), "no early verdict for a line alone");
//! assert_eq!(l.orphans_due(2_000_000)[0].request_ids, ["r-1"]);
//! // The spans' collector: its trace asks for the line, and judges it whole.
//! let t = "0af7651916cd43dd8448eb211c80319c";
//! let mut s = LiveDiagnoser::new(DiagnoseConfig::default(), 2_000, 60_000, 100)
//!     .with_failure_grace(1_000).with_peers();
//! let mut root = SpanRecord::new(t, "b7ad6b7169203331", "agent", "POST /chat", 0, 11_000_000);
//! root.request_id = Some("r-1".into());
//! s.add_spans(vec![root], 0);
//! let due = s.lines_due(1_000_000);
//! assert_eq!((due[0].trace_id.as_str(), due[0].request_ids.clone()), (t, vec!["r-1".to_string()]));
//! assert_eq!(s.join_lines(t, vec![line], 1_000_000), 1);
//! let v = s.tick(2_000_000);
//! assert_eq!(v[0].verdict.trace_id, t);
//! // Its claim reaches the line's collector, which forgets the line.
//! let mut mirror = overtime_diagnose::live::PeerMirror::default();
//! mirror.apply(s.shared_since(0));
//! l.set_peer_claims(&[mirror.traces()]);
//! assert!(l.tick(10_000_000).is_empty());
//! assert_eq!(l.pending_len(), 0);
//! ```

use super::{LiveDiagnoser, Pending, SharedTraces};
use crate::assemble::{Key, hex128};
use overtime_model::{GatewayRecord, SpanRecord};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::VecDeque;

/// How far around a record the records of its request are looked for.
const MARGIN_US: i64 = 15 * 60 * 1_000_000;

/// What is known of the trace an orphan line belongs to.
#[derive(Debug, Default, Clone)]
pub(super) struct Orphan {
    /// How many times it was looked up among the spans. The first look
    /// is at the grace; one that found nothing is judged alone and looked
    /// up again at 2, 4, 8… times the grace, until
    /// [`RequestJoin::late_looks_us`] (the spans may be read after the
    /// first look: a dead collector's partitions are read again by
    /// different survivors, after the group's takeover).
    looks: u32,
    /// The trace whose spans carry its request id, when found.
    trace: Option<String>,
}

impl Orphan {
    /// Whether it was looked up at least once.
    fn checked(&self) -> bool {
        self.looks > 0
    }
}

/// The state of the request-id join ([`LiveDiagnoser::with_peers`]).
#[derive(Debug, Default)]
pub(super) struct RequestJoin {
    /// With peers: on.
    pub(super) enabled: bool,
    /// How long after it went quiet a line judged alone is still looked
    /// up, µs past twice the grace ([`LiveDiagnoser::with_takeover`]).
    pub(super) late_looks_us: i64,
    /// Orphan lines by request id (entries whose trace is gone are
    /// skipped when met).
    pub(super) orphans: FxHashMap<String, Key>,
    /// Request ids whose lines this diagnoser joined from elsewhere, with
    /// the sequence number they were shared under.
    pub(super) claims: VecDeque<(u64, String)>,
}

/// A lookup by request id for the caller to make: the records of
/// `request_ids` within `[from_us, to_us)`, for `trace_id`.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestLookup {
    /// The trace the records would join (for an orphan line, the id it is
    /// held under).
    pub trace_id: String,
    /// The request ids to look for.
    pub request_ids: Vec<String>,
    /// Lower time bound, µs since the epoch.
    pub from_us: i64,
    /// Upper time bound, µs since the epoch.
    pub to_us: i64,
}

/// Request ids the spans of `p` carry that none of its gateway lines has.
fn unmatched(p: &Pending) -> Vec<String> {
    let logged: FxHashSet<&str> = p
        .trace
        .gateway
        .iter()
        .filter_map(|g| g.request_id.as_deref())
        .collect();
    let mut ids: Vec<String> = p
        .trace
        .spans
        .iter()
        .filter_map(|s| s.request_id.as_deref())
        .filter(|r| !logged.contains(r))
        .map(str::to_string)
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

impl LiveDiagnoser {
    /// Several collectors share the traffic: records keyed by request id
    /// join their trace wherever it is judged (module docs).
    pub fn with_peers(mut self) -> Self {
        self.requests.enabled = true;
        self
    }

    /// A dead collector's partitions wait up to `takeover_ms` for a new
    /// owner (the group's session timeout and a rebalance): a line judged
    /// alone is looked up again at 2, 4, 8… times the grace until that
    /// long past twice the grace, so that spans read by the new owner
    /// still join it. Without it, twice: at the grace and at twice it.
    ///
    /// ```
    /// use overtime_diagnose::DiagnoseConfig;
    /// use overtime_diagnose::live::LiveDiagnoser;
    /// use overtime_model::GatewayRecord;
    /// let line = GatewayRecord { source: "edge".into(), line: 1, status: Some(504),
    ///     request_time_ms: Some(10_000.0), request_id: Some("r-1".into()),
    ///     time_us: 10_000_000, ..Default::default() };
    /// let mut l = LiveDiagnoser::new(DiagnoseConfig::default(), 2_000, 600_000, 100)
    ///     .with_peers().with_takeover(20_000);
    /// l.add_gateway(vec![line], 0);
    /// // Looks at 2, 4, 8 and 16 s of quiet, and a last one at 24 s.
    /// let looks: Vec<i64> = (1..=40)
    ///     .map(|s| s * 1_000_000)
    ///     .filter(|&t| !l.orphans_due(t).is_empty())
    ///     .map(|t| t / 1_000_000)
    ///     .collect();
    /// assert_eq!(looks, [2, 4, 8, 16, 24]);
    /// ```
    pub fn with_takeover(mut self, takeover_ms: u64) -> Self {
        self.requests.late_looks_us = (takeover_ms as i64).saturating_mul(1000);
        self
    }

    /// Whether `p` waits for a lookup before any verdict (an orphan line
    /// not yet looked up, or found elsewhere and not yet claimed) — never
    /// longer than four grace periods, whatever the lookups do.
    pub(super) fn held_back(&self, p: &Pending, quiet_us: i64) -> bool {
        let waiting = p.trace.spans.is_empty()
            && p.orphan
                .as_ref()
                .is_some_and(|o| !o.checked() || o.trace.is_some());
        waiting && quiet_us < 4 * self.grace_us
    }

    /// Traces whose spans carry request ids no line here has, due for a
    /// lookup of those lines elsewhere: quiet for the failure grace (first
    /// look) or the full grace (second). Each is counted as looked up.
    pub fn lines_due(&mut self, now_us: i64) -> Vec<RequestLookup> {
        if !self.requests.enabled {
            return Vec::new();
        }
        let (fg, g) = (self.failure_grace_us, self.grace_us);
        let mut out = Vec::new();
        for p in self.pending.values_mut() {
            let quiet = now_us - p.last_update_us;
            let due = match p.line_lookups {
                0 => quiet >= fg,
                1 => quiet >= g,
                _ => false,
            };
            if !due || p.trace.spans.is_empty() {
                continue;
            }
            let ids = unmatched(p);
            if ids.is_empty() {
                continue;
            }
            p.line_lookups += 1;
            let start = p.trace.spans.iter().map(|s| s.start_us).min().unwrap_or(0);
            let end = p
                .trace
                .spans
                .iter()
                .map(|s| s.end_us)
                .max()
                .unwrap_or(start);
            out.push(RequestLookup {
                trace_id: p.trace.id.clone(),
                request_ids: ids,
                from_us: start.saturating_sub(MARGIN_US),
                to_us: end.saturating_add(MARGIN_US),
            });
        }
        out
    }

    /// Adds gateway lines found elsewhere for `trace_id` (lines of its
    /// request ids that log no other trace): each new one joins the trace
    /// and is claimed, without counting again for the timeout inference.
    /// Returns how many were new.
    pub fn join_lines(&mut self, trace_id: &str, lines: Vec<GatewayRecord>, now_us: i64) -> usize {
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
        let fresh: Vec<GatewayRecord> = lines
            .into_iter()
            .filter(|g| {
                g.trace_id.as_deref().is_none_or(|t| t == trace_id)
                    && !held
                        .trace
                        .gateway
                        .iter()
                        .any(|h| h.source == g.source && h.line == g.line)
            })
            .collect();
        let n = fresh.len();
        for g in fresh {
            if let Some(rid) = &g.request_id {
                // (The spans that asked for it bound the id already.)
                if self.request_ids.bound(rid).is_none() {
                    self.request_ids
                        .bind_span(rid.clone(), g.time_us, key.clone());
                }
                self.claim(rid.clone());
            }
            self.attach_gateway(crate::assemble::sane_gateway(g), now_us);
        }
        n
    }

    fn claim(&mut self, rid: String) {
        if self.requests.claims.len() >= self.max_summaries.max(1) {
            self.requests.claims.pop_front();
        }
        self.requests.claims.push_back((self.next_seq, rid));
        self.next_seq += 1;
    }

    /// The request ids this diagnoser claimed with a sequence number from
    /// `from` on, and the oldest it still keeps.
    pub(super) fn claims_since(&self, from: u64) -> (Vec<(u64, String)>, u64) {
        let start = self.requests.claims.partition_point(|(s, _)| *s < from);
        let oldest = self
            .requests
            .claims
            .front()
            .map_or(self.next_seq, |(s, _)| *s);
        (
            self.requests.claims.iter().skip(start).cloned().collect(),
            oldest,
        )
    }

    /// Orphan lines quiet for the full grace and not looked up yet, due for
    /// a lookup of the spans that carry their request id; each is counted
    /// as looked up.
    pub fn orphans_due(&mut self, now_us: i64) -> Vec<RequestLookup> {
        let g = self.grace_us;
        let last = 2 * g + self.requests.late_looks_us;
        let mut out = Vec::new();
        let done = self.done.values_mut().map(|d| &mut d.pending);
        for p in self.pending.values_mut().chain(done) {
            let Some(o) = p.orphan.as_mut() else { continue };
            let quiet = now_us - p.last_update_us;
            // The first look at the grace; then, for one found nowhere,
            // at 2, 4, 8… times it, the last at `last`.
            let due = g.saturating_mul(1 << o.looks.min(20)).min(last);
            let past_last = o.looks > 0 && g.saturating_mul(1 << (o.looks - 1).min(20)) >= last;
            if !p.trace.spans.is_empty() || o.trace.is_some() || past_last || quiet < due {
                continue;
            }
            o.looks += 1;
            let ids: Vec<String> = p
                .trace
                .gateway
                .iter()
                .filter_map(|l| l.request_id.clone())
                .collect();
            let from = p.trace.gateway.iter().map(|l| l.start_us()).min();
            let to = p.trace.gateway.iter().map(|l| l.time_us).max();
            if let (Some(from), Some(to), false) = (from, to, ids.is_empty()) {
                out.push(RequestLookup {
                    trace_id: p.trace.id.clone(),
                    request_ids: ids,
                    from_us: from.saturating_sub(MARGIN_US),
                    to_us: to.saturating_add(MARGIN_US),
                });
            }
        }
        out
    }

    /// The lookup of orphan `held_as` found spans of trace `trace_id`
    /// elsewhere: it waits for that trace's holder to claim it.
    pub fn orphan_found(&mut self, held_as: &str, trace_id: &str) {
        let key = hex128(held_as)
            .map(Key::Trace)
            .unwrap_or_else(|| Key::Other(held_as.to_string()));
        let held = match self.pending.get_mut(&key) {
            Some(p) => Some(p),
            None => self.done.get_mut(&key).map(|d| &mut d.pending),
        };
        if let Some(o) = held.and_then(|p| p.orphan.as_mut()) {
            o.trace = Some(trace_id.to_string());
        }
    }

    /// Orphans found elsewhere but not claimed after twice the grace: the
    /// traces whose rows the caller pulls here ([`LiveDiagnoser::adopt_rows`]).
    pub fn orphans_to_pull(&mut self, now_us: i64) -> Vec<String> {
        let g = self.grace_us;
        let mut out = Vec::new();
        let done = self.done.values_mut().map(|d| &mut d.pending);
        for p in self.pending.values_mut().chain(done) {
            let quiet = now_us - p.last_update_us;
            if let Some(o) = p.orphan.as_mut()
                && quiet >= 2 * g
                && let Some(t) = o.trace.take()
            {
                out.push(t);
            }
        }
        out
    }

    /// Adds `trace_id`'s rows found elsewhere (spans and gateway lines),
    /// held here or not: the spans join the orphan lines of the request
    /// ids they carry. Lines are not counted again for the timeout
    /// inference. Returns how many records were new.
    pub fn adopt_rows(
        &mut self,
        trace_id: &str,
        gateway: Vec<GatewayRecord>,
        spans: Vec<SpanRecord>,
        now_us: i64,
    ) -> usize {
        let Some(key) = hex128(trace_id).map(Key::Trace) else {
            return 0;
        };
        let seen: FxHashSet<String> = self
            .pending
            .get(&key)
            .map(|p| &p.spans_seen)
            .or_else(|| self.done.get(&key).map(|d| &d.pending.spans_seen))
            .cloned()
            .unwrap_or_default();
        let spans: Vec<SpanRecord> = spans
            .into_iter()
            .filter(|s| !seen.contains(&s.span_id))
            .collect();
        let n = spans.len();
        self.add_spans(spans, now_us);
        n + self.join_lines(trace_id, gateway, now_us)
    }

    /// Takes the peers' claims: orphan lines of request ids a peer joined
    /// to a trace it holds are forgotten here (withdrawn when judged).
    pub fn set_peer_claims(&mut self, others: &[SharedTraces]) {
        if !self.requests.enabled || self.requests.orphans.is_empty() {
            return;
        }
        let claimed: FxHashSet<&str> = others
            .iter()
            .flat_map(|o| o.claimed.iter().map(String::as_str))
            .collect();
        let mut gone = Vec::new();
        self.requests.orphans.retain(|rid, key| {
            if claimed.contains(rid.as_str()) {
                gone.push(key.clone());
                false
            } else {
                true
            }
        });
        for key in gone {
            let is_orphan = |p: &Pending| p.orphan.is_some() && p.trace.spans.is_empty();
            let p = if self.pending.get(&key).is_some_and(is_orphan) {
                self.pending.remove(&key)
            } else if self.done.get(&key).is_some_and(|d| is_orphan(&d.pending)) {
                self.done.remove(&key).map(|d| d.pending)
            } else {
                None
            };
            if p.is_some_and(|p| p.given.is_some()) {
                self.withdraw(&key);
            }
        }
    }

    /// Drops the orphan index entries whose line is gone.
    pub(super) fn drop_stale_orphans(&mut self) {
        let (pending, done) = (&self.pending, &self.done);
        self.requests
            .orphans
            .retain(|_, k| pending.contains_key(k) || done.contains_key(k));
    }
}
