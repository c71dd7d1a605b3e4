//! Live: a model server's answer in a trace of its own meets the call
//! that asked for it ([`crate::answers`]).
//!
//! The answer and the call arrive in either order. A call that finished
//! with no phases and a completion id waits for its answer: a healthy one
//! becomes a neighbour of its model once the answer comes; a failing one
//! whose verdict could only say `llm_slow` is reopened and judged again
//! with it (a revision, as for any late record).
//!
//! Design rules:
//! - **Bounded like the rest.** Waiting failing traces are forgotten with
//!   their trace (`keep_ms`); answers and waiting calls older than the
//!   phase book's window are dropped ([`LiveDiagnoser::forget_answers`]).

use super::LiveDiagnoser;
use crate::Trace;
use crate::assemble::Key;
use crate::phasebook::WINDOW_MINUTES;
use crate::verdict::TraceSummary;
use overtime_model::RootCauseKind;

/// What of a trace waits for a model server's answer elsewhere, and what
/// it teaches of its models' token costs.
#[derive(Default)]
pub(super) struct Waiting {
    /// Its finished model calls with no phases: (completion id, model, start).
    calls: Vec<(String, String, i64)>,
    /// The completion id of its dominant call, when it has no phases.
    dominant: Option<String>,
    /// Its calls whose server timed prefill and decode together: (model,
    /// [inference ms, prompt, generated]) for the model's token costs.
    costs: Vec<(String, [f64; 3])>,
}

/// What of `summary`'s trace waits for an answer (allocates only when a
/// call has a completion id and no phases).
pub(super) fn waiting(summary: &TraceSummary) -> Waiting {
    Waiting {
        calls: summary
            .llm_calls
            .iter()
            .filter(|c| c.finished().is_none())
            .filter_map(|c| Some((c.response_id.clone()?, c.model.clone(), c.start_us)))
            .collect(),
        dominant: summary
            .dominant
            .as_ref()
            .filter(|d| d.phases.is_empty())
            .and_then(|d| d.response_id.clone()),
        costs: summary
            .llm_calls
            .iter()
            .filter_map(|c| Some((c.model.clone(), c.unsplit?)))
            .collect(),
    }
}

impl LiveDiagnoser {
    /// After a diagnosis of `key`'s trace: keeps the answer it is, notes
    /// the calls that wait for theirs ([`waiting`]; `first`: its first
    /// diagnosis), and reopens a failing trace whose answer this was.
    pub(super) fn join_answers(
        &mut self,
        key: &Key,
        trace: &Trace,
        waits: Waiting,
        first: bool,
        now_us: i64,
    ) {
        if first {
            for (id, model, start_us) in &waits.calls {
                self.book.answers.expect(id, model, *start_us);
            }
            for (model, [i, p, g]) in &waits.costs {
                self.book.costs.add(model, *i, *p as i64, *g as i64);
            }
        }
        let judged_blind = self
            .verdicts
            .get(&trace.id)
            .is_some_and(|(_, v)| v.root_cause.kind == RootCauseKind::LlmSlow);
        if judged_blind && let Some(id) = waits.dominant {
            self.awaiting.insert(id, key.clone());
        }
        if let Some((id, phases, source, at)) = crate::calls::server_answer(trace) {
            self.book.answers.answer(id, &phases, source, at);
            if let Some(k) = self.awaiting.remove(id)
                && self.done.contains_key(&k)
            {
                // Judged again with its answer, in this flush.
                self.entry(k.clone(), now_us);
                self.answered.push(k);
            }
        }
        for (model, f) in self.book.answers.resolve() {
            self.book.add(&model, &f);
        }
    }

    /// Forgets answers and waiting calls older than the phase book's
    /// window, and failing traces no longer kept.
    pub(super) fn forget_answers(&mut self, now_us: i64) {
        self.book
            .answers
            .forget_before(now_us - 2 * WINDOW_MINUTES * 60_000_000);
        let (done, pending) = (&self.done, &self.pending);
        self.awaiting
            .retain(|_, k| done.contains_key(k) || pending.contains_key(k));
    }
}
