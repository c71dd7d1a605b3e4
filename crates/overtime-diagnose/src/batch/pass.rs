//! Step 3: each partition's traces assembled and diagnosed, and what the
//! first pass learns for the second — the finished model calls, the
//! answers written in traces of their own and the models' token costs
//! (`crate::phasebook`, `crate::answers`, `crate::costs`).
//!
//! Design rules:
//! - **Split when too big.** A partition over twice its target is split
//!   again by key (up to four levels) before it is assembled.
//! - **Judged once with everything.** A trace whose verdict the first
//!   pass could only estimate — a model call its server said nothing of,
//!   or one whose prefill and decode were split by the fixed estimate — is
//!   set aside and judged in the second pass with the whole run's book.

use super::codec::In;
use super::partition::assemble_partition;
use super::results::PartOut;
use super::revisit::{Pass, PassCtx};
use super::spill::{Partitions, frame, key_hash, part_of};
use super::{BatchError, Engine};
use crate::assemble::{Assembled, AssemblyStats};
use crate::phasebook::PhaseBook;
use crate::verdict::{TraceSummary, diagnose_trace};

impl Engine {
    /// Step 3 for partition `p` of `parts` (split again when too big).
    pub(super) fn diagnose_partition(
        &self,
        parts: &Partitions,
        p: usize,
        level: u32,
        cx: &PassCtx,
    ) -> Result<(), BatchError> {
        let target = cx.target;
        let size = parts.size(p);
        if size > 2 * target && level < 4 {
            let k = (size / target + 1).min(256) as usize;
            let sub = Partitions::new(format!("p{level}-{p}"), k, target as usize);
            let mut local = vec![Vec::new(); k];
            let mut held = 0usize;
            parts.drain(p, &self.spill, |r| {
                let mut i = In::new(r);
                i.u8()?;
                i.seq()?;
                let h = key_hash(&i.key()?);
                frame(&mut local[part_of(h, level + 1, k)], r);
                held += r.len();
                if held > 8 << 20 {
                    sub.absorb(&mut local, &self.spill)?;
                    held = 0;
                }
                Ok(())
            })?;
            sub.absorb(&mut local, &self.spill)?;
            for q in 0..k {
                self.check_cancel()?;
                self.diagnose_partition(&sub, q, level + 1, cx)?;
            }
            return Ok(());
        }
        let buf = parts.take(p, &self.spill)?;
        let (a, deferred) = assemble_partition(&buf, self.cfg.all_verdicts)?;
        if !deferred.is_empty() {
            self.defer(deferred)?;
        }
        drop(buf);
        let mut out = self.diagnose_assembled(a, cx)?;
        out.sort();
        // The collector's lock is held for the bookkeeping only.
        let to_write = cx
            .collector
            .lock()
            .expect("collector lock")
            .add(out, &self.spill)?;
        to_write.write(cx.collector)
    }

    fn diagnose_assembled(&self, a: Assembled, cx: &PassCtx) -> Result<PartOut, BatchError> {
        let (timeouts, pass) = (cx.timeouts, cx.pass);
        let mut out = PartOut {
            // The requests set aside were counted when first assembled.
            stats: if pass == Pass::First {
                a.stats
            } else {
                AssemblyStats::default()
            },
            ..Default::default()
        };
        for l in &a.light {
            out.add(TraceSummary::light(l), None);
        }
        let mut aside = Vec::new();
        let mut book = PhaseBook::default();
        for t in &a.traces {
            if pass == Pass::First && self.revisit.waits(t, timeouts, &self.cfg) {
                aside.push(t);
                continue;
            }
            let (s, v) = diagnose_trace(t, timeouts, &self.cfg, cx.book);
            if pass == Pass::First {
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
                // A model call its server said nothing about waits for the
                // same model's finished calls (phasebook.rs).
                // So does one whose prefill and decode its server timed
                // together, split by an estimate the model's own calls
                // may better (costs.rs).
                let estimated = s.dominant.as_ref().is_some_and(|d| d.unsplit.is_some());
                if estimated
                    || v.as_ref().is_some_and(|v| {
                        v.root_cause.kind == overtime_model::RootCauseKind::LlmSlow
                    })
                {
                    aside.push(t);
                    continue;
                }
            }
            if let Some(hook) = &self.opts.on_trace {
                hook(t, &s, v.as_ref());
            }
            out.add(s, v);
        }
        self.revisit.set_aside(&aside, &self.spill)?;
        if !book.is_empty() {
            self.book.lock().expect("book lock").merge(&book);
        }
        Ok(out)
    }
}
