//! Step 3: each partition's requests assembled and judged by the passes
//! every run makes ([`overtime_diagnose::passes`]); what waits for the
//! final pass is set aside in partitions of its own ([`crate::revisit`]).
//!
//! Design rules:
//! - **Split when too big.** A partition over twice its target is split
//!   again by key (up to four levels) before it is assembled.

use super::codec::In;
use super::partition::assemble_partition;
use super::results::PartOut;
use super::revisit::PassCtx;
use super::spill::{Partitions, frame, key_hash, part_of};
use super::{BatchError, Engine};
use overtime_diagnose::assemble::{Assembled, AssemblyStats};
use overtime_diagnose::passes::{Learned, Pass};
use overtime_diagnose::verdict::TraceSummary;

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
        let first = cx.judge.pass == Pass::First;
        let mut out = PartOut {
            // The requests set aside were counted when first assembled.
            stats: if first {
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
        let mut learned = Learned::default();
        for t in &a.traces {
            let Some((s, v)) = cx.judge.judge(t, &mut learned) else {
                aside.push(t);
                continue;
            };
            if let Some(hook) = &self.opts.on_trace {
                hook(t, &s, v.as_ref());
            }
            out.add(s, v);
        }
        self.revisit.set_aside(&aside, &self.spill)?;
        if first {
            self.revisit.learned(learned);
        }
        Ok(out)
    }
}
