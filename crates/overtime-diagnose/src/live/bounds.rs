//! Live: what keeps the live state bounded — diagnosed traces forgotten
//! past `keep_ms`, the records held to `max_records`, the summaries to
//! `max_summaries` — and the bookkeeping of what was forgotten (request
//! ids, tombstones for peers mirroring this diagnoser).
//!
//! Design rules:
//! - **Oldest first.** Over `max_records`, diagnosed traces go first,
//!   oldest diagnosis first; then waiting traces are judged early,
//!   quietest first (each counted in [`LiveDiagnoser::forced`]).
//! - **Nothing points at what is gone.** A request id whose trace was
//!   forgotten is dropped with it; a summary dropped without a
//!   replacement leaves a tombstone for peers.

use super::{LiveDiagnoser, LiveVerdict, Pending};
use crate::assemble::Key;
use crate::verdict::TraceSummary;
use overtime_model::Outcome;
use rustc_hash::FxHashSet;

impl LiveDiagnoser {
    /// Holds the live state to `max_records` (see
    /// [`LiveDiagnoser::with_max_records`]).
    pub(super) fn enforce_max_records(&mut self, now_us: i64, out: &mut Vec<LiveVerdict>) {
        if self.max_records == usize::MAX {
            return;
        }
        let size = |p: &Pending| p.trace.spans.len() + p.trace.gateway.len();
        let mut total: usize = self.pending.values().map(size).sum::<usize>()
            + self.done.values().map(|d| size(&d.pending)).sum::<usize>();
        if total <= self.max_records {
            return;
        }
        let mut oldest: Vec<(i64, Key)> = self
            .done
            .iter()
            .map(|(k, d)| (d.diagnosed_at_us, k.clone()))
            .collect();
        oldest.sort_unstable_by_key(|(t, _)| *t);
        for (_, k) in oldest {
            if total <= self.max_records {
                break;
            }
            if let Some(d) = self.done.remove(&k) {
                total -= size(&d.pending);
            }
        }
        if total > self.max_records {
            let timeouts = self.layer_timeouts();
            let mut quietest: Vec<(i64, Key)> = self
                .pending
                .iter()
                .map(|(k, p)| (p.last_update_us, k.clone()))
                .collect();
            quietest.sort_unstable_by_key(|(t, _)| *t);
            for (_, k) in quietest {
                if total <= self.max_records {
                    break;
                }
                total -= self.pending.get(&k).map_or(0, size);
                out.extend(self.finish(k, now_us, &timeouts, false));
                self.forced += 1;
            }
        }
        self.drop_stale_request_ids();
    }

    /// Forgets diagnosed traces past `keep_ms`, and the request ids that
    /// pointed at them.
    pub(super) fn forget(&mut self, now_us: i64) {
        let keep = self.keep_us;
        let before = self.done.len();
        self.done.retain(|_, d| now_us - d.diagnosed_at_us < keep);
        if self.done.len() != before {
            self.drop_stale_request_ids();
        }
        self.forget_answers(now_us);
    }

    pub(super) fn drop_stale_request_ids(&mut self) {
        let live: FxHashSet<&Key> = self.done.keys().chain(self.pending.keys()).collect();
        self.request_ids.retain(|k| live.contains(k));
        self.drop_stale_orphans();
    }

    pub(super) fn push_summary(&mut self, s: TraceSummary) {
        // A revised trace replaces its earlier summary.
        if !s.trace_id.is_empty()
            && let Some(i) = self
                .summaries
                .iter()
                .rposition(|x| x.trace_id == s.trace_id)
        {
            self.summaries.remove(i);
            self.summary_seq.remove(i);
        }
        if self.summaries.len() == self.max_summaries
            && let Some(old) = self.summaries.pop_front()
        {
            self.summary_seq.pop_front();
            if old.outcome != Outcome::Ok {
                self.verdicts.remove(&old.trace_id);
            }
        }
        self.summaries.push_back(s);
        self.summary_seq.push_back(self.next_seq);
        self.next_seq += 1;
    }

    /// Records that `trace_id`'s summary is gone with no replacement, so
    /// peers mirroring this diagnoser drop it too.
    pub(super) fn tombstone(&mut self, trace_id: String) {
        if self.tombstones.len() == self.max_summaries.max(1) {
            self.tombstones.pop_front();
        }
        self.tombstones.push_back((self.next_seq, trace_id));
        self.next_seq += 1;
    }
}
