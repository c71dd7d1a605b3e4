//! Requests whose verdict waits for every layer's final read timeout.
//!
//! A layer's timeout, when no configuration gives it, is inferred from its
//! own 504s (known once every row is routed) and from the silences before
//! the streams it cut (known only once their traces are assembled:
//! [`crate::outcome::cut_silence`]). So in step 3 a request whose verdict
//! depends on an inferred timeout — it failed, or it ended in a stream's
//! silence that a timeout may have cut — is not judged yet: the cut its
//! spans show, if any, is counted, and the request is set aside, encoded
//! again into partitions of its own. When every partition is done, each
//! layer's timeout is inferred from both kinds of cut, and the requests set
//! aside are diagnosed with it.
//!
//! Design rules:
//! - Every request is still diagnosed once, by the same code as any other.
//! - Nothing is set aside when every layer the request passed has a
//!   configured timeout: a run with the whole configuration pays nothing.
//! - The set-aside partitions spill like the others: memory stays bounded.

use super::codec::{Out, SPAN, close_len, open_len, postcard_into, seq};
use super::results::Collector;
use super::spill::{Partitions, SpillDir, key_hash, part_of};
use super::{BatchError, Engine, Samples};
use crate::Trace;
use crate::assemble::{Key, hex128};
use crate::config::DiagnoseConfig;
use crate::outcome::silent_end;
use crate::timeouts::LayerTimeout;
use overtime_model::SpanStatus;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Which pass of step 3 a partition is diagnosed in.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// Every request; those that wait for the final timeouts set aside.
    First,
    /// The requests set aside, with the final timeouts.
    Final,
}

/// What every partition of one pass of step 3 shares.
#[derive(Clone, Copy)]
pub(crate) struct PassCtx<'a> {
    /// The layers' timeouts this pass judges with.
    pub timeouts: &'a BTreeMap<String, LayerTimeout>,
    /// Where the verdicts and summaries go.
    pub collector: &'a Mutex<Collector>,
    /// Encoded bytes a partition may hold for one worker.
    pub target: u64,
    pub pass: Pass,
    /// The finished model calls the pass judges cut ones by.
    pub book: &'a crate::phasebook::PhaseBook,
}

impl Engine {
    /// Every layer's timeout: configured, else inferred from its own 504s
    /// (`samples`, as routed) and the silences before the streams it cut
    /// (`cuts`).
    pub(super) fn layer_timeouts(
        &self,
        samples: &Samples,
        cuts: &BTreeMap<String, Vec<f64>>,
    ) -> BTreeMap<String, LayerTimeout> {
        let rows = samples.iter().flat_map(|(src, rts)| {
            std::iter::once((src.as_str(), None, None)).chain(
                rts.iter()
                    .map(move |rt| (src.as_str(), Some(504), Some(*rt))),
            )
        });
        crate::timeouts::layer_timeouts_with_cuts(rows, cuts, &self.cfg)
    }

    /// The pass over the requests set aside, with the final timeouts;
    /// `Ok(false)` when none was.
    pub(super) fn diagnose_set_aside(&self, cx: &PassCtx) -> Result<bool, BatchError> {
        if !self.revisit.any() {
            return Ok(false);
        }
        self.each_partition(
            0..self.n,
            || (),
            |(), p| self.diagnose_partition(&self.revisit.parts, p, 0, cx),
        )?;
        Ok(true)
    }
}

/// The requests set aside and the cut streams seen in step 3.
pub(crate) struct Revisit {
    /// The requests set aside, by trace partition.
    pub parts: Partitions,
    n: usize,
    /// The silences (ms) before the streams each layer cut, by layer.
    cuts: Mutex<BTreeMap<String, Vec<f64>>>,
}

impl Revisit {
    /// `n` partitions, held in memory up to `budget` bytes.
    pub fn new(n: usize, budget: usize) -> Self {
        Revisit {
            parts: Partitions::new("r", n, budget),
            n,
            cuts: Mutex::new(BTreeMap::new()),
        }
    }

    /// Does `t`'s verdict wait for the final timeouts? Counts the cut its
    /// spans show. `timeouts`: the layers' timeouts from configuration and
    /// 504s alone.
    pub fn waits(
        &self,
        t: &Trace,
        timeouts: &BTreeMap<String, LayerTimeout>,
        cfg: &DiagnoseConfig,
    ) -> bool {
        if t.gateway
            .iter()
            .all(|g| cfg.layer_timeout_ms(&g.source).is_some())
        {
            return false;
        }
        if let Some(end) = silent_end(t, timeouts, cfg.clock_skew_ms) {
            if let Some(ms) = end.cut_silence_ms {
                let mut cuts = self.cuts.lock().expect("cuts lock");
                cuts.entry(end.layer).or_default().push(ms);
            }
            return true;
        }
        cfg.all_verdicts
            || t.gateway.iter().any(|g| g.status.is_some_and(|s| s >= 500))
            || t.spans.iter().any(|s| s.status == SpanStatus::Timeout)
    }

    /// Encodes `traces` again, each whole under its key, into the
    /// set-aside partitions.
    pub fn set_aside(&self, traces: &[&Trace], spill: &SpillDir) -> Result<(), BatchError> {
        if traces.is_empty() {
            return Ok(());
        }
        let mut local = vec![Vec::new(); self.n];
        for t in traces {
            let key = hex128(&t.id)
                .map(Key::Trace)
                .unwrap_or_else(|| Key::Other(t.id.clone()));
            let buf = &mut local[part_of(key_hash(&key), 0, self.n)];
            // Places within the request only: assembly orders by them.
            for (i, g) in t.gateway.iter().enumerate() {
                let at = open_len(buf);
                Out(buf).gateway_row(seq(0, i as u64, 0), &key, 0, |b| postcard_into(g, b));
                close_len(buf, at);
            }
            for (i, s) in t.spans.iter().enumerate() {
                let at = open_len(buf);
                let mut o = Out(buf);
                o.u8(SPAN);
                o.seq(seq(0, i as u64, 0));
                o.key(&key);
                o.record(s);
                close_len(buf, at);
            }
        }
        self.parts.absorb(&mut local, spill)
    }

    /// The cut streams' silences counted, by layer.
    pub fn take_cuts(&self) -> BTreeMap<String, Vec<f64>> {
        std::mem::take(&mut *self.cuts.lock().expect("cuts lock"))
    }

    /// Whether any request was set aside.
    pub fn any(&self) -> bool {
        (0..self.n).any(|p| self.parts.size(p) > 0)
    }
}
