//! The two passes every run makes over its assembled requests — the
//! in-memory run ([`crate::diagnose_tables`]) and each partition of the
//! batch engine (crate `overtime-batch`) alike; they differ only in where
//! the requests wait between the passes.
//!
//! Design rules:
//! - **Judged once with everything.** A request whose verdict depends on
//!   what only the whole run knows waits for the second pass: a layer's
//!   inferred read timeout (it failed, or its stream ended in a silence a
//!   timeout may have cut — the cut is counted, [`Learned::cuts`]), a
//!   model call its server said nothing of, or one whose prefill and
//!   decode were split by the fixed estimate (judged against the whole
//!   run's [`PhaseBook`]).
//! - **Nothing waits when nothing is missing**: with every layer's timeout
//!   configured and every call's phases from its server, a request is
//!   judged in the first pass.
//! - **Order free**: what the first pass learns ([`Learned`]) merges in
//!   any order to the same result, so partitions may finish in any order.
//!
//! ```
//! use overtime_diagnose::passes::{Judge, Learned, Pass};
//! use overtime_diagnose::{DiagnoseConfig, Trace};
//! use overtime_diagnose::phasebook::PhaseBook;
//! use overtime_model::GatewayRecord;
//! use std::collections::BTreeMap;
//!
//! let cfg = DiagnoseConfig::default();
//! let (timeouts, book) = (BTreeMap::new(), PhaseBook::default());
//! let judge = Judge { cfg: &cfg, timeouts: &timeouts, pass: Pass::First, book: &book };
//! let failed = Trace {
//!     id: "line:nginx:1".into(),
//!     gateway: vec![GatewayRecord { source: "nginx".into(), status: Some(504), ..Default::default() }],
//!     spans: vec![],
//! };
//! let mut learned = Learned::default();
//! // nginx's timeout is not configured: the 504 waits for the inferred one.
//! assert!(judge.judge(&failed, &mut learned).is_none());
//! let last = Judge { pass: Pass::Final, ..judge };
//! assert!(last.judge(&failed, &mut learned).is_some_and(|(_, v)| v.is_some()));
//! ```

use crate::Trace;
use crate::config::DiagnoseConfig;
use crate::outcome::silent_end;
use crate::phasebook::PhaseBook;
use crate::timeouts::LayerTimeout;
use crate::verdict::{TraceSummary, diagnose_trace};
use overtime_model::{GatewayRecord, RootCauseKind, SpanStatus, Verdict};
use std::collections::BTreeMap;

/// Which pass a request is judged in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// Every request; those that need the whole run wait.
    First,
    /// The requests that waited, with the whole run's timeouts and book.
    Final,
}

/// Judges requests in one pass.
#[derive(Clone, Copy)]
pub struct Judge<'a> {
    /// The run's configuration.
    pub cfg: &'a DiagnoseConfig,
    /// The layers' timeouts this pass judges with ([`LayerSamples::timeouts`]).
    pub timeouts: &'a BTreeMap<String, LayerTimeout>,
    /// Which pass.
    pub pass: Pass,
    /// The finished model calls cut ones are judged by (empty in the first pass).
    pub book: &'a PhaseBook,
}

/// What the first pass learns for the second.
#[derive(Default)]
pub struct Learned {
    /// Finished model calls, answers in traces of their own, token costs.
    pub book: PhaseBook,
    /// The silences (ms) before the streams each layer cut, by layer.
    pub cuts: BTreeMap<String, Vec<f64>>,
}

impl Learned {
    /// Adds what another part of the run learned.
    pub fn merge(&mut self, other: Learned) {
        if !other.book.is_empty() {
            self.book.merge(&other.book);
        }
        for (layer, ms) in other.cuts {
            self.cuts.entry(layer).or_default().extend(ms);
        }
    }
}

impl Judge<'_> {
    /// The request's summary and verdict (none for a healthy request
    /// unless every verdict was asked for); `None` when it waits for the
    /// final pass. The first pass files what it learns in `learned`.
    pub fn judge(
        &self,
        t: &Trace,
        learned: &mut Learned,
    ) -> Option<(TraceSummary, Option<Verdict>)> {
        let first = self.pass == Pass::First;
        if first && waits_for_timeouts(t, self.timeouts, self.cfg, &mut learned.cuts) {
            return None;
        }
        let (s, v) = diagnose_trace(t, self.timeouts, self.cfg, self.book);
        if !first {
            return Some((s, v));
        }
        let book = &mut learned.book;
        if let Some((id, phases, source, at)) = crate::calls::server_answer(t) {
            book.answers.answer(id, &phases, source, at);
        }
        for c in &s.llm_calls {
            if let (Some(f), Some(u)) = (c.finished(), c.unsplit) {
                book.add_estimated(&c.model, &f, u);
            } else if let Some(f) = c.finished() {
                book.add(&c.model, &f);
            } else if let Some(id) = &c.response_id {
                book.answers.expect(id, &c.model, c.start_us);
            }
            if let Some([i, p, g]) = c.unsplit {
                book.costs.add(&c.model, i, p as i64, g as i64);
            }
        }
        // A model call its server said nothing about waits for the same
        // model's finished calls (phasebook.rs); so does one whose prefill
        // and decode its server timed together, split by an estimate the
        // model's own calls may better (costs.rs).
        let estimated = s.dominant.as_ref().is_some_and(|d| d.unsplit.is_some());
        let llm_slow = v
            .as_ref()
            .is_some_and(|v| v.root_cause.kind == RootCauseKind::LlmSlow);
        (!(estimated || llm_slow)).then_some((s, v))
    }
}

/// Does `t`'s verdict wait for the layers' final timeouts? Counts the cut
/// its spans show in `cuts`. `timeouts`: from configuration and 504s alone.
fn waits_for_timeouts(
    t: &Trace,
    timeouts: &BTreeMap<String, LayerTimeout>,
    cfg: &DiagnoseConfig,
    cuts: &mut BTreeMap<String, Vec<f64>>,
) -> bool {
    if t.gateway
        .iter()
        .all(|g| cfg.layer_timeout_ms(&g.source).is_some())
    {
        return false;
    }
    if let Some(end) = silent_end(t, timeouts, cfg.clock_skew_ms) {
        if let Some(ms) = end.cut_silence_ms {
            cuts.entry(end.layer).or_default().push(ms);
        }
        return true;
    }
    cfg.all_verdicts
        || t.gateway.iter().any(|g| g.status.is_some_and(|s| s >= 500))
        || t.spans.iter().any(|s| s.status == SpanStatus::Timeout)
}

/// Each layer's timeouts' raw material, gathered as lines are read: every
/// layer seen, with the request time of each 504 it gave itself (not one
/// it relayed; one try's worth when it tried several servers).
#[derive(Default, Debug)]
pub struct LayerSamples(BTreeMap<String, Vec<f64>>);

impl LayerSamples {
    /// Files one line, given as its parts (a batch reader has no record).
    pub fn add(
        &mut self,
        source: &str,
        status: Option<u16>,
        relayed: bool,
        request_time_ms: Option<f64>,
        (tries, last_try_ms): (usize, Option<f64>),
    ) {
        if !self.0.contains_key(source) {
            self.0.insert(source.to_string(), Vec::new());
        }
        let own = crate::timeouts::own_504_ms(status, relayed, request_time_ms, tries, last_try_ms);
        if let Some(rt) = own {
            self.0.get_mut(source).expect("inserted above").push(rt);
        }
    }

    /// Files one line.
    pub fn add_record(&mut self, g: &GatewayRecord) {
        let last = g.upstream_response_ms.last().copied().flatten();
        self.add(
            &g.source,
            g.status,
            crate::outcome::relayed(g),
            g.request_time_ms,
            (g.upstream_response_ms.len(), last),
        );
    }

    /// Adds what another reader gathered.
    pub fn merge(&mut self, other: LayerSamples) {
        for (src, rts) in other.0 {
            self.0.entry(src).or_default().extend(rts);
        }
    }

    /// Whether nothing was filed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every layer's timeout: configured, else inferred from its own 504s
    /// and the silences before the streams it cut (`cuts`).
    pub fn timeouts(
        &self,
        cuts: &BTreeMap<String, Vec<f64>>,
        cfg: &DiagnoseConfig,
    ) -> BTreeMap<String, LayerTimeout> {
        let rows = self.0.iter().flat_map(|(src, rts)| {
            std::iter::once((src.as_str(), None, None)).chain(
                rts.iter()
                    .map(move |rt| (src.as_str(), Some(504), Some(*rt))),
            )
        });
        crate::timeouts::layer_timeouts_with_cuts(rows, cuts, cfg)
    }
}
