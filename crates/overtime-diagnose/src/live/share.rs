//! Incidents over several collectors' traffic: what one diagnoser hands
//! its peers, and how a peer keeps a mirror of it.
//!
//! Design rules:
//! - Incremental: every summary a diagnoser keeps has a sequence number;
//!   a peer asks for what came after its cursor ([`TracesDelta`]) and
//!   applies it to its [`PeerMirror`], so each exchange carries only the
//!   traces diagnosed (or revised) since the last one. A verdict travels
//!   with its trace's newest summary (every diagnosis writes one).
//! - Exact: the mirror drops what the diagnoser dropped — summaries it
//!   evicted (below the delta's `oldest_seq`), replaced (same trace id)
//!   or removed (tombstones) — so the merged incidents are the ones a
//!   diagnoser given all the traffic would report (a trace held by
//!   several counts once).
//! - A diagnoser that restarted numbers from 1 again: a cursor past its
//!   `next_seq` gets the whole state, and the mirror starts over.
//!
//! ```
//! use overtime_diagnose::DiagnoseConfig;
//! use overtime_diagnose::live::{LiveDiagnoser, PeerMirror};
//! use overtime_model::GatewayRecord;
//! let mut peer = LiveDiagnoser::new(DiagnoseConfig::default(), 0, 600_000, 1_000);
//! let g = GatewayRecord { source: "edge".into(), status: Some(504), request_time_ms: Some(60_000.0),
//!                         request_id: Some("r1".into()), trace_id: Some("ab".repeat(16)),
//!                         time_us: 60_000_000, ..Default::default() };
//! peer.add_gateway(vec![g], 60_000_000);
//! peer.tick(61_000_000);
//! let mut mirror = PeerMirror::default();
//! mirror.apply(peer.shared_since(mirror.cursor()));
//! // The peer's trace, its verdict with it, as the peer holds them.
//! assert_eq!(mirror.traces().summaries.len(), 1);
//! assert_eq!(mirror.traces().verdicts[0].1.trace_id, "ab".repeat(16));
//! // Which peer holds a trace, and the verdict it told: where a lookup goes.
//! assert_eq!(mirror.holds(&"ab".repeat(16)).unwrap().unwrap().1.trace_id, "ab".repeat(16));
//! assert!(mirror.holds(&"cd".repeat(16)).is_none());
//! // Nothing new: the next delta is empty.
//! assert!(peer.shared_since(mirror.cursor()).summaries.is_empty());
//! ```

use super::LiveDiagnoser;
use crate::report::{self, IncidentReport};
use crate::verdict::TraceSummary;
use overtime_model::{Outcome, Verdict};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One collector's verdicts (with revisions) and trace summaries: what
/// incident reports are made of.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SharedTraces {
    /// Current verdicts with their revision.
    pub verdicts: Vec<(u32, Verdict)>,
    /// What incident reports need of every trace kept, failed or not.
    pub summaries: Vec<TraceSummary>,
    /// The request times (ms) of the 504s each gateway layer answered,
    /// each with its line's identity (a line several collectors read
    /// counts once): what its timeout is inferred from.
    #[serde(default)]
    pub gateway_504s: BTreeMap<String, Vec<(String, f64)>>,
    /// The silences (ms) before the streams each layer cut, each with its
    /// trace: the rest of what its timeout is inferred from (a trace
    /// several collectors hold counts once).
    #[serde(default)]
    pub cut_streams: BTreeMap<String, Vec<(String, f64)>>,
    /// Request ids whose gateway lines, held by another collector, it
    /// joined to a trace it holds (`requests.rs`): those lines are its.
    #[serde(default)]
    pub claimed: Vec<String>,
}

/// What changed in a diagnoser since a cursor ([`LiveDiagnoser::shared_since`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TracesDelta {
    /// The cursor to ask from next time.
    pub next_seq: u64,
    /// Summaries below this sequence number were evicted.
    pub oldest_seq: u64,
    /// The answer holds the whole state (the cursor was unknown): start over.
    pub full: bool,
    /// Summaries kept since the cursor, with their sequence numbers.
    pub summaries: Vec<(u64, TraceSummary)>,
    /// The current verdict of each trace among `summaries` that has one.
    pub verdicts: Vec<(u32, Verdict)>,
    /// Traces whose summary was removed with no replacement.
    pub removed: Vec<String>,
    /// Every layer's 504 request times, ms, with their lines' identity
    /// (small; sent whole).
    #[serde(default)]
    pub gateway_504s: BTreeMap<String, Vec<(String, f64)>>,
    /// Every layer's cut streams' silences, ms, with their traces (sent
    /// whole).
    #[serde(default)]
    pub cut_streams: BTreeMap<String, Vec<(String, f64)>>,
    /// Request ids claimed since the cursor, with their sequence numbers.
    #[serde(default)]
    pub claims: Vec<(u64, String)>,
    /// Claims below this sequence number were evicted.
    #[serde(default)]
    pub oldest_claim_seq: u64,
}

/// A peer's traces as mirrored here from its deltas.
#[derive(Debug, Clone, Default)]
pub struct PeerMirror {
    cursor: u64,
    summaries: BTreeMap<u64, TraceSummary>,
    seq_of: FxHashMap<String, u64>,
    verdicts: FxHashMap<String, (u32, Verdict)>,
    gateway_504s: BTreeMap<String, Vec<(String, f64)>>,
    cut_streams: BTreeMap<String, Vec<(String, f64)>>,
    claims: BTreeMap<u64, String>,
}

impl PeerMirror {
    /// The cursor to ask the peer from (0: everything).
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// Trace summaries mirrored.
    pub fn len(&self) -> usize {
        self.summaries.len()
    }

    /// Nothing mirrored?
    pub fn is_empty(&self) -> bool {
        self.summaries.is_empty()
    }

    /// Does the peer keep a summary of `trace_id` (judged there, failed
    /// or not)? The verdict it last told, with its revision, if it failed
    /// (the module's example).
    pub fn holds(&self, trace_id: &str) -> Option<Option<&(u32, Verdict)>> {
        self.seq_of
            .contains_key(trace_id)
            .then(|| self.verdicts.get(trace_id))
    }

    /// The verdicts the peer last told (with their revisions), in no
    /// order; [`PeerMirror::traces`] copies them sorted.
    pub fn verdicts(&self) -> impl Iterator<Item = &(u32, Verdict)> {
        self.verdicts.values()
    }

    /// Applies a delta from the peer.
    pub fn apply(&mut self, d: TracesDelta) {
        if d.full {
            *self = PeerMirror::default();
        }
        let evicted: Vec<u64> = self
            .summaries
            .range(..d.oldest_seq)
            .map(|(s, _)| *s)
            .collect();
        for s in evicted {
            self.drop_seq(s);
        }
        for id in d.removed {
            if let Some(s) = self.seq_of.get(&id).copied() {
                self.drop_seq(s);
            }
        }
        for (seq, s) in d.summaries {
            if !s.trace_id.is_empty() {
                if let Some(old) = self.seq_of.insert(s.trace_id.clone(), seq) {
                    self.summaries.remove(&old);
                }
                if s.outcome == Outcome::Ok {
                    self.verdicts.remove(&s.trace_id);
                }
            }
            self.summaries.insert(seq, s);
        }
        for (r, v) in d.verdicts {
            if self.seq_of.contains_key(&v.trace_id) {
                self.verdicts.insert(v.trace_id.clone(), (r, v));
            }
        }
        self.gateway_504s = d.gateway_504s;
        self.cut_streams = d.cut_streams;
        self.claims = self.claims.split_off(&d.oldest_claim_seq);
        self.claims.extend(d.claims);
        self.cursor = d.next_seq;
    }

    fn drop_seq(&mut self, seq: u64) {
        if let Some(s) = self.summaries.remove(&seq)
            && !s.trace_id.is_empty()
            && self.seq_of.get(&s.trace_id) == Some(&seq)
        {
            self.seq_of.remove(&s.trace_id);
            self.verdicts.remove(&s.trace_id);
        }
    }

    /// The mirrored state, for [`LiveDiagnoser::incidents_with`] and
    /// [`LiveDiagnoser::set_peer_samples`].
    pub fn traces(&self) -> SharedTraces {
        let mut verdicts: Vec<(u32, Verdict)> = self.verdicts.values().cloned().collect();
        verdicts.sort_by(|a, b| a.1.trace_id.cmp(&b.1.trace_id));
        SharedTraces {
            verdicts,
            summaries: self.summaries.values().cloned().collect(),
            gateway_504s: self.gateway_504s.clone(),
            cut_streams: self.cut_streams.clone(),
            claimed: self.claims.values().cloned().collect(),
        }
    }
}

impl LiveDiagnoser {
    /// What changed since `cursor` (0, or a cursor this diagnoser never
    /// gave: everything), for a peer's [`PeerMirror`].
    pub fn shared_since(&self, cursor: u64) -> TracesDelta {
        let full = cursor == 0 || cursor > self.next_seq;
        let from = if full { 0 } else { cursor };
        let mut d = TracesDelta {
            next_seq: self.next_seq,
            oldest_seq: self.summary_seq.front().copied().unwrap_or(self.next_seq),
            full,
            gateway_504s: self
                .samples
                .iter()
                .map(|(layer, v)| (layer.clone(), v.iter().cloned().collect()))
                .collect(),
            cut_streams: self.cuts.by_trace(),
            ..Default::default()
        };
        (d.claims, d.oldest_claim_seq) = self.claims_since(from);
        // Sequence numbers grow along the deque: scan from the back.
        let start = self.summary_seq.partition_point(|s| *s < from);
        for (seq, s) in self.summary_seq.iter().zip(&self.summaries).skip(start) {
            if let Some(v) = self.verdicts.get(&s.trace_id) {
                d.verdicts.push(v.clone());
            }
            d.summaries.push((*seq, s.clone()));
        }
        if !full {
            d.removed = self
                .tombstones
                .iter()
                .filter(|(s, _)| *s >= from)
                .map(|(_, id)| id.clone())
                .collect();
        }
        d
    }

    /// Takes the other collectors' 504 request times and cut streams into the inference of
    /// each gateway layer's timeout, replacing the ones taken before: a
    /// collector that saw half the 504s infers from all of them.
    pub fn set_peer_samples(&mut self, others: &[SharedTraces]) {
        self.peer_samples.clear();
        self.peer_cuts.clear();
        for o in others {
            for (layer, silences) in &o.cut_streams {
                self.peer_cuts
                    .entry(layer.clone())
                    .or_default()
                    .extend(silences.iter().cloned());
            }
            for (layer, times) in &o.gateway_504s {
                self.peer_samples
                    .entry(layer.clone())
                    .or_default()
                    .extend(times.iter().cloned());
            }
        }
    }

    /// Incidents over the traces kept here and those `others` hold: the
    /// same reports one diagnoser given all their traffic would make. A
    /// trace held by several counts once, by the holder chosen by
    /// [`most_complete`] — the same on every collector, whichever of them
    /// is "here" — with that holder's verdict.
    pub fn incidents_with(&self, others: &[SharedTraces]) -> Vec<IncidentReport> {
        let (summaries, verdicts) = self.merged_with(others);
        let verdicts: Vec<Verdict> = verdicts.into_iter().map(|(_, v)| v).collect();
        let mut incidents = report::incidents(&verdicts, &summaries, &self.cfg);
        // The model servers' load over each window, as `diagnose --metrics`
        // adds it (this collector's scrapes).
        self.metrics.annotate(&mut incidents);
        incidents
    }

    /// The current verdicts (with revisions) over the traces kept here and
    /// those `others` hold, one per trace, by the holder
    /// [`LiveDiagnoser::incidents_with`] counts: SQL's `verdicts` from any
    /// collector, the same rows one diagnoser given all the traffic would
    /// list. Sorted by trace id.
    pub fn verdicts_with(&self, others: &[SharedTraces]) -> Vec<(u32, Verdict)> {
        self.merged_with(others).1
    }

    /// Every trace summary kept here or by `others` and the chosen
    /// holder's verdict of each, a trace held by several counted once
    /// ([`most_complete`]).
    fn merged_with(&self, others: &[SharedTraces]) -> (Vec<TraceSummary>, Vec<(u32, Verdict)>) {
        let own = SharedRef::new(self.verdicts.values(), self.summaries.iter());
        let peers: Vec<SharedRef<'_>> = others
            .iter()
            .map(|o| SharedRef::new(o.verdicts.iter(), o.summaries.iter()))
            .collect();
        let mut chosen: FxHashMap<&str, Held<'_>> = FxHashMap::default();
        let mut summaries: Vec<TraceSummary> = Vec::new();
        for holder in std::iter::once(&own).chain(&peers) {
            for &s in &holder.summaries {
                // A request seen only by a gateway has no id and lives in
                // one collector: always counted.
                if s.trace_id.is_empty() {
                    summaries.push(s.clone());
                    continue;
                }
                let held = Held {
                    summary: s,
                    verdict: holder.verdicts.get(s.trace_id.as_str()).copied(),
                };
                match chosen.get_mut(s.trace_id.as_str()) {
                    Some(cur) => {
                        if most_complete(&held, cur) {
                            *cur = held;
                        }
                    }
                    None => {
                        chosen.insert(s.trace_id.as_str(), held);
                    }
                }
            }
        }
        // A trace filed under a request id that another holder's trace
        // names as its own request id is that trace's line judged apart
        // (its spans were elsewhere when it was judged, as after a
        // collector died): the other trace counts it, so it is not a
        // request of its own.
        let resolved = judged_apart(
            std::iter::once(&own)
                .chain(&peers)
                .flat_map(|h| h.verdicts.values())
                .map(|(_, v)| (v.trace_id.as_str(), v.request_id.as_deref())),
        );
        let mut held: Vec<Held<'_>> = chosen
            .into_values()
            .filter(|h| !resolved.contains(h.summary.trace_id.as_str()))
            .collect();
        held.sort_by(|a, b| a.summary.trace_id.cmp(&b.summary.trace_id));
        let mut verdicts: Vec<(u32, Verdict)> = Vec::new();
        for h in held {
            summaries.push(h.summary.clone());
            if let Some((r, v)) = h.verdict {
                verdicts.push((r, v.clone()));
            }
        }
        (summaries, verdicts)
    }
}

/// The id a gateway line keyed by `request_id` alone is held (and
/// judged) under when no span joins it: the request id itself when it is
/// a trace id's 32 hex digits, else `request:` and the request id.
///
/// ```
/// use overtime_diagnose::live::held_as;
/// assert_eq!(held_as("23F1B586415451E9492F0D9124E9D971"), "23f1b586415451e9492f0d9124e9d971");
/// assert_eq!(held_as("r-1"), "request:r-1");
/// ```
pub fn held_as(request_id: &str) -> String {
    crate::assemble::key_name(&crate::join::unbound(request_id).0)
}

/// The ids of the lines judged apart from their traces: for each trace
/// (its id and the request id its records name) whose request id is held
/// under another id than its own ([`held_as`]), that id. A trace listed
/// under one of them is a line whose spans were elsewhere when it was
/// judged (its collector looked before they were read, or died before it
/// could withdraw it); the trace that names the request id counts it, so
/// it is not a request of its own — in the incidents, in SQL and in the
/// search alike.
///
/// ```
/// use overtime_diagnose::live::judged_apart;
/// let t = "0af7651916cd43dd8448eb211c80319c";
/// let apart = judged_apart([(t, Some("23f1b586415451e9492f0d9124e9d971"))]);
/// assert!(apart.contains("23f1b586415451e9492f0d9124e9d971"));
/// // A request id that is its trace's own id names no line apart.
/// assert!(judged_apart([(t, Some(t)), (t, None)]).is_empty());
/// ```
pub fn judged_apart<'a>(
    traces: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> FxHashSet<String> {
    traces
        .into_iter()
        .filter_map(|(trace_id, request_id)| {
            let apart = held_as(request_id?);
            (apart != trace_id).then_some(apart)
        })
        .collect()
}

/// One holder's view, borrowed: its verdicts by trace id and its summaries.
struct SharedRef<'a> {
    verdicts: FxHashMap<&'a str, (u32, &'a Verdict)>,
    summaries: Vec<&'a TraceSummary>,
}

impl<'a> SharedRef<'a> {
    fn new(
        verdicts: impl Iterator<Item = &'a (u32, Verdict)>,
        summaries: impl Iterator<Item = &'a TraceSummary>,
    ) -> Self {
        SharedRef {
            verdicts: verdicts
                .map(|(r, v)| (v.trace_id.as_str(), (*r, v)))
                .collect(),
            summaries: summaries.collect(),
        }
    }
}

/// One holder's summary of a trace, with its verdict (and revision).
#[derive(Clone, Copy)]
struct Held<'a> {
    summary: &'a TraceSummary,
    verdict: Option<(u32, &'a Verdict)>,
}

/// Whether `a` is to be preferred to `b` (two holders of one trace id).
/// The rule depends only on what they hold, never on who is asking, so
/// every collector picks the same: the most records (a collector that saw
/// only part of a trace loses to one that saw all of it), then the later
/// end, then the higher revision, then the smaller serialized verdict and
/// summary (any total order on content will do; ties here are copies).
fn most_complete(a: &Held<'_>, b: &Held<'_>) -> bool {
    use std::cmp::Ordering;
    let key = |h: &Held<'_>| {
        (
            h.summary.records,
            h.summary.end_us,
            h.verdict.map_or(0, |(r, _)| r),
        )
    };
    match key(a).cmp(&key(b)) {
        Ordering::Greater => true,
        Ordering::Less => false,
        Ordering::Equal => {
            let content = |h: &Held<'_>| {
                (
                    h.verdict
                        .map(|(_, v)| serde_json::to_string(v).unwrap_or_default()),
                    serde_json::to_string(h.summary).unwrap_or_default(),
                )
            };
            content(a) < content(b)
        }
    }
}

#[cfg(test)]
#[path = "share_tests.rs"]
mod tests;
