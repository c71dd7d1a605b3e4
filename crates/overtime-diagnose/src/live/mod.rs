//! Live diagnosis for `overtime serve`: records arrive in any order, a
//! trace is diagnosed once it has been quiet for a grace period, and its
//! verdict is revised if late records arrive. A trace whose gateway has
//! already answered 5xx gets a first verdict sooner, after a shorter
//! `failure_grace` (the request is over; pages should not wait for the
//! stragglers), and is diagnosed again when the full grace period ends.
//! The verdict itself comes from
//! the same [`crate::verdict::diagnose_trace`] as `overtime diagnose`, so
//! on the same data the service and the batch tool agree.
//!
//! Design rules:
//! - Pure state: the caller supplies `now_us` (arrival clock) and drives
//!   [`LiveDiagnoser::tick`]; nothing here sleeps or does I/O.
//! - Bounded: a trace is kept for revision `keep_ms` after its verdict,
//!   then forgotten; per-layer 504 samples and summaries are capped.
//! - Each span counts once per trace, however often it arrives.
//! - A layer's timeout is inferred from its own 504s and the streams it
//!   cut (`cuts.rs`); the cuts of the traces a tick judges are counted
//!   before it judges them, as a batch run counts every cut first.
//! - Each trace is observed for the SLIs once, at its first diagnosis after
//!   the full grace period ([`LiveDiagnoser::drain_observations`]): an early
//!   verdict is not observed (its spans may still be on their way), and a
//!   revision is not a new request. Once its request is over it is also
//!   observed provisionally, for the fast early warning only
//!   (`provisional.rs`, [`LiveDiagnoser::drain_provisional`]).

use crate::Trace;
use crate::assemble::{Key, hex128, key_name, sane_gateway, sane_span};
use crate::config::DiagnoseConfig;
use crate::report::IncidentReport;
use crate::timeouts;
use crate::verdict::{TraceSummary, diagnose_trace};
use overtime_model::RequestObservation;
use overtime_model::{GatewayRecord, Outcome, SpanRecord, Verdict};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::{BTreeMap, VecDeque};

mod answers;
mod bounds;
mod complete;
mod cuts;
mod lines;
mod metrics;
mod provisional;
mod replayed;
mod requests;
mod revise;
mod share;
pub use requests::RequestLookup;
pub use share::{PeerMirror, SharedTraces, TracesDelta, held_as, judged_apart};

/// Most 504 request times kept per layer for timeout inference.
const MAX_SAMPLES: usize = 10_000;
/// Most observations waiting to be drained; beyond it the oldest are
/// dropped (and counted).
pub(crate) const MAX_OBSERVATIONS: usize = 100_000;

/// A verdict that is new or changed.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveVerdict {
    /// The verdict, as `overtime diagnose` would give it on the records
    /// seen so far.
    pub verdict: Verdict,
    /// 0 for the first verdict of a trace, then 1, 2… on revision.
    pub revision: u32,
}

#[derive(Debug, Default)]
struct Pending {
    trace: Trace,
    spans_seen: FxHashSet<String>,
    last_update_us: i64,
    /// The last verdict given (None: diagnosed, nothing failed), with its
    /// revision; `None` until the first diagnosis.
    given: Option<(u32, Option<Verdict>)>,
    /// `last_update_us` when the early verdict was given: no second early
    /// verdict until new records arrive.
    early_at_us: Option<i64>,
    /// Counted in the SLI observations already.
    observed: bool,
    /// Observed provisionally (`provisional.rs`): the latest end of the
    /// calls that observation held.
    provisional_until: Option<i64>,
    /// Looked up in the shared store already (see `complete.rs`).
    completed: bool,
    /// Another collector holds part of it too (its summary of the trace
    /// came in a peer's delta): completed before its verdict, whatever it
    /// looks like (see `complete.rs`).
    elsewhere: bool,
    /// Times its spans' request ids were looked for among other
    /// collectors' gateway lines (see `requests.rs`).
    line_lookups: u8,
    /// A gateway line held under its request id alone, with peers: what is
    /// known of the trace it belongs to (see `requests.rs`).
    orphan: Option<requests::Orphan>,
    /// What its finished model calls put in the phase book at its last
    /// diagnosis: taken out again before a revision puts them back.
    booked: Vec<(String, crate::phasebook::Finished)>,
}

impl Pending {
    /// The gateway has answered with a 5xx: the request is over.
    fn gateway_failed(&self) -> bool {
        self.trace
            .gateway
            .iter()
            .any(|g| g.status.is_some_and(|s| s >= 500))
    }
}

#[derive(Debug)]
struct Done {
    pending: Pending,
    diagnosed_at_us: i64,
}

/// The live state of the diagnosis.
pub struct LiveDiagnoser {
    cfg: DiagnoseConfig,
    grace_us: i64,
    failure_grace_us: i64,
    keep_us: i64,
    max_records: usize,
    forced: u64,
    max_summaries: usize,
    pending: FxHashMap<Key, Pending>,
    done: FxHashMap<Key, Done>,
    /// Which trace each request id belongs to: the one join, shared with
    /// the batch engine ([`crate::join`]).
    request_ids: crate::join::RequestIds<String>,
    /// Per layer, the request times of its own 504s, each with its line
    /// ([`line_id`]): a line two collectors read (the new owner of a dead
    /// one's partition reads again what it had not flushed) counts once.
    samples: FxHashMap<String, VecDeque<(String, f64)>>,
    /// Other collectors' 504 request times per layer (their `samples`),
    /// as of the last [`LiveDiagnoser::set_peer_samples`].
    peer_samples: FxHashMap<String, Vec<(String, f64)>>,
    /// The streams each layer cut: the other half of what its timeout is
    /// inferred from.
    cuts: cuts::CutStreams,
    /// Other collectors' cut streams' silences per layer.
    peer_cuts: FxHashMap<String, Vec<(String, f64)>>,
    summaries: VecDeque<TraceSummary>,
    /// The sequence number of each summary (parallel to `summaries`):
    /// what a peer's [`TracesDelta`] cursor counts.
    summary_seq: VecDeque<u64>,
    /// The next summary's sequence number.
    next_seq: u64,
    /// Traces whose summary was dropped without a replacement, with the
    /// sequence number of the drop (bounded like the summaries).
    tombstones: VecDeque<(u64, String)>,
    verdicts: FxHashMap<String, (u32, Verdict)>,
    observations: VecDeque<RequestObservation>,
    /// Provisional observations (`provisional.rs`) not drained yet.
    provisional: VecDeque<RequestObservation>,
    /// Failing verdicts as they stood when their trace's grace period
    /// ended: what root-cause counts are made of.
    settled: VecDeque<Verdict>,
    observations_dropped: u64,
    /// Records keyed by request id meet their trace across collectors
    /// (`requests.rs`); off when this diagnoser answers alone.
    requests: requests::RequestJoin,
    /// The phases of the finished model calls seen so far, for the cut
    /// ones ([`crate::phasebook`]).
    book: crate::phasebook::PhaseBook,
    /// Failing traces judged `llm_slow` whose call's answer may come in a
    /// trace of its own, by the completion's id (`answers.rs`).
    awaiting: FxHashMap<String, Key>,
    /// Those of them whose answer came, reopened to be judged again.
    answered: Vec<Key>,
    /// Diagnosed traces a peer turned out to hold part of, due for a
    /// lookup in the shared store (`complete.rs`).
    split: Vec<Key>,
    /// The model servers' metrics scraped so far (`metrics.rs`).
    metrics: crate::server_metrics::ServerMetrics,
    /// The layers' timeouts the last judging used: when one moves, the
    /// failing traces judged with it are judged again (`revise.rs`).
    judged_with: BTreeMap<String, timeouts::LayerTimeout>,
}

impl LiveDiagnoser {
    /// `grace_ms`: quiet time before a verdict; `keep_ms`: how long a
    /// diagnosed trace can still be revised; `max_summaries`: traces kept
    /// for incident reports.
    pub fn new(cfg: DiagnoseConfig, grace_ms: u64, keep_ms: u64, max_summaries: usize) -> Self {
        LiveDiagnoser {
            cfg,
            grace_us: grace_ms as i64 * 1000,
            failure_grace_us: grace_ms as i64 * 1000,
            max_records: usize::MAX,
            forced: 0,
            keep_us: keep_ms as i64 * 1000,
            max_summaries,
            pending: FxHashMap::default(),
            done: FxHashMap::default(),
            request_ids: Default::default(),
            samples: FxHashMap::default(),
            peer_samples: FxHashMap::default(),
            cuts: cuts::CutStreams::default(),
            peer_cuts: FxHashMap::default(),
            summaries: VecDeque::new(),
            summary_seq: VecDeque::new(),
            next_seq: 1,
            tombstones: VecDeque::new(),
            verdicts: FxHashMap::default(),
            observations: VecDeque::new(),
            provisional: VecDeque::new(),
            settled: VecDeque::new(),
            observations_dropped: 0,
            requests: requests::RequestJoin::default(),
            book: Default::default(),
            awaiting: FxHashMap::default(),
            answered: Vec::new(),
            split: Vec::new(),
            metrics: Default::default(),
            judged_with: BTreeMap::new(),
        }
    }

    /// Gives traces whose gateway answered 5xx a first verdict after
    /// `ms` of quiet instead of the full grace period (never longer than
    /// it). The full grace period still ends in a second diagnosis, which
    /// revises the verdict if late spans changed it.
    ///
    /// ```
    /// use overtime_diagnose::{live::LiveDiagnoser, DiagnoseConfig};
    /// let live = LiveDiagnoser::new(DiagnoseConfig::default(), 30_000, 600_000, 1_000)
    ///     .with_failure_grace(2_000);
    /// assert_eq!(live.pending_len(), 0);
    /// ```
    pub fn with_failure_grace(mut self, ms: u64) -> Self {
        self.failure_grace_us = (ms as i64 * 1000).min(self.grace_us);
        self
    }

    /// Keeps at most `n` records (spans and gateway lines) in memory across
    /// waiting and diagnosed traces: the live state's bound under overload,
    /// beside the store's memtable budget. Past it, the traces diagnosed
    /// longest ago are forgotten first (late spans can no longer revise
    /// them), then the waiting traces quiet longest are diagnosed at once
    /// and forgotten ([`LiveDiagnoser::forced`]).
    pub fn with_max_records(mut self, n: usize) -> Self {
        self.max_records = n.max(1);
        self
    }

    /// How long a trace waits after its last record for its verdict, ms.
    pub fn grace_ms(&self) -> u64 {
        (self.grace_us / 1000) as u64
    }

    /// Traces diagnosed before their grace period ended because the live
    /// state was full.
    pub fn forced(&self) -> u64 {
        self.forced
    }

    /// Takes the observations of the traces diagnosed since the last call
    /// (one per trace, at its first diagnosis), in diagnosis order.
    pub fn drain_observations(&mut self) -> Vec<RequestObservation> {
        self.observations.drain(..).collect()
    }

    /// Takes the failing verdicts settled since the last call: each trace's
    /// verdict when its full grace period first ended (an early verdict
    /// may still change; later revisions are counted as revisions). For
    /// counting root causes once per trace.
    pub fn drain_settled(&mut self) -> Vec<Verdict> {
        self.settled.drain(..).collect()
    }

    /// Observations dropped because nobody drained them in time.
    pub fn observations_dropped(&self) -> u64 {
        self.observations_dropped
    }

    /// Traces waiting for their grace period.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// The pending entry for `key`, reopening a diagnosed trace if needed.
    fn entry(&mut self, key: Key, now_us: i64) -> &mut Pending {
        if !self.pending.contains_key(&key) {
            let p = match self.done.remove(&key) {
                Some(d) => d.pending,
                None => Pending {
                    trace: Trace {
                        id: key_name(&key),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            };
            self.pending.insert(key.clone(), p);
        }
        let p = self.pending.get_mut(&key).expect("inserted above");
        p.last_update_us = now_us;
        p
    }

    /// Adds gateway records (any layer, any order).
    pub fn add_gateway(&mut self, records: Vec<GatewayRecord>, now_us: i64) {
        for g in records {
            let g = sane_gateway(g);
            // A 504 the layer passed on is not its timeout.
            if let Some(rt) = crate::timeouts::own_504_ms(
                g.status,
                crate::outcome::relayed(&g),
                g.request_time_ms,
                g.upstream_response_ms.len(),
                g.upstream_response_ms.last().copied().flatten(),
            ) {
                let s = self.samples.entry(g.source.clone()).or_default();
                if s.len() == MAX_SAMPLES {
                    s.pop_front();
                }
                s.push_back((line_id(&g), rt));
            }
            self.attach_gateway(g, now_us);
        }
    }

    /// Adds spans; duplicates of a span already seen are ignored.
    pub fn add_spans(&mut self, spans: Vec<SpanRecord>, now_us: i64) {
        for mut s in spans {
            sane_span(&mut s);
            let key = hex128(&s.trace_id)
                .map(Key::Trace)
                .unwrap_or_else(|| Key::Other(s.trace_id.clone()));
            if let Some(rid) = s.request_id.clone() {
                let before = self.request_ids.bound(&rid);
                if self
                    .request_ids
                    .bind_span(rid.clone(), s.start_us, key.clone())
                {
                    let before = before.unwrap_or_else(|| crate::join::unbound(&rid).0);
                    self.rebind(&rid, before, now_us);
                }
            }
            let p = self.entry(key, now_us);
            if p.spans_seen.insert(s.span_id.clone()) {
                p.trace.spans.push(s);
            }
        }
    }

    /// Diagnoses every trace quiet for the grace period (or for the
    /// failure grace when its gateway answered 5xx); returns the verdicts
    /// that are new or changed. Forgets traces past `keep_ms`.
    pub fn tick(&mut self, now_us: i64) -> Vec<LiveVerdict> {
        let mut due = Vec::new();
        let mut early = Vec::new();
        for (k, p) in &self.pending {
            let quiet = now_us - p.last_update_us;
            if self.held_back(p, quiet) {
                continue;
            }
            if quiet >= self.grace_us {
                due.push(k.clone());
            } else if quiet >= self.failure_grace_us
                && p.early_at_us != Some(p.last_update_us)
                && p.gateway_failed()
            {
                early.push(k.clone());
            }
        }
        // The traces whose gateway answered go first: their finished model
        // calls are in the phase book before the failing ones' cut calls
        // are judged, as a batch run counts every finished call first.
        due.sort_by_key(|k| self.pending.get(k).is_some_and(|p| p.gateway_failed()));
        let mut out = Vec::new();
        if !due.is_empty() || !early.is_empty() {
            // The cuts of the traces about to be judged count for the
            // timeouts they are judged with, as in a batch run.
            self.note_cuts(early.iter().chain(&due));
            let timeouts = self.layer_timeouts();
            for key in early {
                let mut pending = self.pending.remove(&key).expect("early keys are pending");
                pending.early_at_us = Some(pending.last_update_us);
                out.extend(self.diagnose(&mut pending, &timeouts));
                self.pending.insert(key, pending);
            }
            for key in due {
                out.extend(self.finish(key, now_us, &timeouts, true));
            }
            // Failing traces whose model server's answer just came in a
            // trace of its own: judged again now (answers.rs).
            for key in std::mem::take(&mut self.answered) {
                out.extend(self.finish(key, now_us, &timeouts, true));
            }
            self.revise_moved(now_us, timeouts, &mut out);
        } else if !self.done.is_empty() {
            // Nothing new to judge, but the peers' 504s may have moved a
            // layer's timeout.
            let timeouts = self.layer_timeouts();
            self.revise_moved(now_us, timeouts, &mut out);
        }
        self.observe_provisional(now_us);
        self.forget(now_us);
        self.enforce_max_records(now_us, &mut out);
        out
    }

    /// The final diagnosis of a waiting trace: verdict, observation (once
    /// per trace), settled verdict; kept for revision when `keep`.
    fn finish(
        &mut self,
        key: Key,
        now_us: i64,
        timeouts: &BTreeMap<String, timeouts::LayerTimeout>,
        keep: bool,
    ) -> Option<LiveVerdict> {
        let mut pending = self.pending.remove(&key)?;
        let fresh = self.diagnose(&mut pending, timeouts);
        let waits = self
            .summaries
            .back()
            .map(answers::waiting)
            .unwrap_or_default();
        self.join_answers(&key, &pending.trace, waits, !pending.observed, now_us);
        if !pending.observed {
            pending.observed = true;
            if self.observations.len() == MAX_OBSERVATIONS {
                self.observations.pop_front();
                self.observations_dropped += 1;
            }
            let summary = self.summaries.back().expect("diagnose keeps a summary");
            let mut o = crate::observe::observe_with_timeouts(&pending.trace, summary, timeouts);
            o.provisional_calls_until_us = pending.provisional_until;
            self.observations.push_back(o);
            if let Some((_, Some(v))) = &pending.given
                && v.outcome != Outcome::Ok
            {
                if self.settled.len() == MAX_OBSERVATIONS {
                    self.settled.pop_front();
                }
                self.settled.push_back(v.clone());
            }
        }
        if keep {
            self.done.insert(
                key,
                Done {
                    pending,
                    diagnosed_at_us: now_us,
                },
            );
        }
        fresh
    }

    /// One diagnosis of a trace: its summary kept (last in `summaries`),
    /// its verdict recorded; the verdict returned when new or changed.
    fn diagnose(
        &mut self,
        pending: &mut Pending,
        timeouts: &BTreeMap<String, timeouts::LayerTimeout>,
    ) -> Option<LiveVerdict> {
        pending.trace.normalize();
        let needs_verdict =
            self.cfg.all_verdicts || !pending.trace.spans.is_empty() || pending.gateway_failed();
        let (summary, verdict) = if needs_verdict {
            diagnose_trace(&pending.trace, timeouts, &self.cfg, &self.book)
        } else {
            (light_summary(&pending.trace), None)
        };
        for (model, f) in pending.booked.drain(..) {
            self.book.remove(&model, &f);
        }
        for c in &summary.llm_calls {
            if let Some(f) = c.finished() {
                let f = match c.unsplit {
                    Some(u) => self.book.split_by_costs(&c.model, &f, u),
                    None => f,
                };
                self.book.add(&c.model, &f);
                pending.booked.push((c.model.clone(), f));
            }
        }
        self.push_summary(summary);
        let (mut revision, previous) = match pending.given.take() {
            Some((r, v)) => (r, v),
            None => (0, None),
        };
        let mut fresh = None;
        if let Some(v) = &verdict {
            let changed = previous.as_ref() != Some(v);
            if previous.is_some() && changed {
                revision += 1;
            }
            if changed {
                self.verdicts
                    .insert(v.trace_id.clone(), (revision, v.clone()));
                fresh = Some(LiveVerdict {
                    verdict: v.clone(),
                    revision,
                });
            }
        } else if let Some(old) = &previous {
            // Failed before, fine now (e.g. the gateway line moved to the
            // trace it belongs to): the old verdict no longer holds.
            self.verdicts.remove(&old.trace_id);
        }
        pending.given = Some((revision, verdict));
        fresh
    }

    /// The latest verdict of a trace, with its revision.
    pub fn verdict(&self, trace_id: &str) -> Option<(u32, &Verdict)> {
        self.verdicts.get(trace_id).map(|(r, v)| (*r, v))
    }

    /// Every current verdict.
    pub fn verdicts(&self) -> impl Iterator<Item = (u32, &Verdict)> {
        self.verdicts.values().map(|(r, v)| (*r, v))
    }

    /// Incidents over the traces kept.
    pub fn incidents(&self) -> Vec<IncidentReport> {
        self.incidents_with(&[])
    }
}

/// What tells a gateway line from another across collectors: its line
/// (or Kafka offset), its time and its request id — the same wherever the
/// line is read, so a line read twice (by a collector that died before
/// flushing it, then by the next owner of its partition) is one line.
fn line_id(g: &GatewayRecord) -> String {
    format!(
        "{}@{}/{}",
        g.line,
        g.time_us,
        g.request_id.as_deref().unwrap_or_default()
    )
}

fn light_summary(t: &Trace) -> TraceSummary {
    let g = t.gateway.first();
    let end = g.map_or(0, |g| g.time_us);
    let start = g.map_or(0, |g| g.start_us());
    TraceSummary {
        trace_id: t.id.clone(),
        start_us: start,
        end_us: end,
        outcome: Outcome::Ok,
        gateway_status: g.and_then(|g| g.status),
        llm_calls: Vec::new(),
        dominant: None,
        stream_gap_ms: None,
        records: crate::verdict::record_count(t),
    }
}
