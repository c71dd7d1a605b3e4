//! Requests whose verdict waits for the whole run (every layer's final
//! read timeout, every model's finished calls: the rules of
//! [`overtime_diagnose::passes`]), set aside between the two passes.
//!
//! A layer's timeout, when no configuration gives it, is inferred from its
//! own 504s (known once every row is routed) and from the silences before
//! the streams it cut (known only once their traces are assembled). So in
//! step 3 a request the first pass cannot judge yet is encoded again into
//! partitions of its own; when every partition is done, each layer's
//! timeout is inferred from both kinds of cut, and the requests set aside
//! are judged with it.
//!
//! Design rules:
//! - Every request is still judged once, by the same code as any other.
//! - The set-aside partitions spill like the others: memory stays bounded.

use super::codec::{Out, SPAN, close_len, open_len, postcard_into, seq};
use super::results::Collector;
use super::spill::{Partitions, SpillDir, key_hash, part_of};
use super::{BatchError, Engine};
use overtime_diagnose::Trace;
use overtime_diagnose::assemble::{Key, hex128};
use overtime_diagnose::passes::{Judge, Learned};
use std::sync::Mutex;

/// What every partition of one pass of step 3 shares.
#[derive(Clone, Copy)]
pub(crate) struct PassCtx<'a> {
    /// Judges the requests of this pass.
    pub judge: Judge<'a>,
    /// Where the verdicts and summaries go.
    pub collector: &'a Mutex<Collector>,
    /// Encoded bytes a partition may hold for one worker.
    pub target: u64,
}

impl Engine {
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
    /// What the first pass learned: the cut streams, the finished calls.
    learned: Mutex<Learned>,
}

impl Revisit {
    /// `n` partitions, held in memory up to `budget` bytes.
    pub fn new(n: usize, budget: usize) -> Self {
        Revisit {
            parts: Partitions::new("r", n, budget),
            n,
            learned: Mutex::new(Learned::default()),
        }
    }

    /// Files what a partition's first pass learned.
    pub fn learned(&self, l: Learned) {
        self.learned.lock().expect("learned lock").merge(l);
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

    /// What the first pass learned, taken.
    pub fn take_learned(&self) -> Learned {
        std::mem::take(&mut *self.learned.lock().expect("learned lock"))
    }

    /// Whether any request was set aside.
    pub fn any(&self) -> bool {
        (0..self.n).any(|p| self.parts.size(p) > 0)
    }
}
