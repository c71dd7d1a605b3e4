//! The phase of a model call that was cut before its server could say
//! (docs/diagnosis.md, "Phases of a cut call").
//!
//! vLLM writes its `llm_request` span only when a request *finishes*: a
//! request aborted because the client went away gets none, so the calls
//! that timed out are exactly the ones without phases, while the same
//! model's calls that finished in the same minutes have them. A
//! [`PhaseBook`] holds what those finished calls said, per model and
//! minute; [`PhaseBook::infer`] gives a cut call the phases its own
//! evidence and its neighbours make likely.
//!
//! Design rules:
//! - **Neighbours are the same model, close in time.** Finished calls of
//!   the call's model that started within [`WINDOW_MINUTES`] minutes of
//!   it; fewer than [`MIN_NEIGHBOURS`] decide nothing, and the call stays
//!   `llm_slow`.
//! - **The call's own evidence first.** A first token that came splits
//!   the call at it: before it queue and prefill (shared as the
//!   neighbours shared them), after it decode. A streamed call that got no
//!   token spent all its time in queue and prefill. Only a call that says
//!   nothing is shared out as its neighbours' time was.
//! - **Said, never hidden.** The inferred phases carry their source — how
//!   many neighbours, over which minutes — into the evidence.
//! - **Bounded.** One small sum per (model, minute); old minutes are
//!   dropped past [`MAX_MINUTES`] per model.
//!
//! ```
//! use overtime_diagnose::phasebook::{Finished, PhaseBook, Cut};
//! let mut book = PhaseBook::default();
//! for i in 0..5 {
//!     book.add("qwen", &Finished { start_us: i * 10_000_000, queue_ms: 4_000.0, prefill_ms: 300.0, decode_ms: 700.0 });
//! }
//! let cut = Cut { model: "qwen", start_us: 30_000_000, duration_ms: 3_000.0, ttft_ms: None, streamed: false };
//! let p = book.infer(&cut).unwrap();
//! assert!(p.phases.queue_ms.unwrap() > p.phases.prefill_ms.unwrap());
//! assert!(p.source.contains("5 finished calls"));
//! ```

use overtime_model::LlmPhases;
use std::collections::{BTreeMap, HashMap};

/// Neighbours started within this many minutes of the cut call.
pub const WINDOW_MINUTES: i64 = 5;
/// Fewest neighbours that decide a phase.
pub const MIN_NEIGHBOURS: u32 = 3;
/// Minutes kept per model (a day).
pub const MAX_MINUTES: usize = 24 * 60;

/// What a finished call's server said.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Finished {
    /// When the call started, µs since the epoch.
    pub start_us: i64,
    /// Queue, prefill and decode, ms.
    pub queue_ms: f64,
    /// Prefill, ms.
    pub prefill_ms: f64,
    /// Decode, ms.
    pub decode_ms: f64,
}

/// What a cut call shows of itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cut<'a> {
    /// Its model.
    pub model: &'a str,
    /// When it started, µs since the epoch.
    pub start_us: i64,
    /// How long it ran, ms.
    pub duration_ms: f64,
    /// Time to its first token, when one came.
    pub ttft_ms: Option<f64>,
    /// It asked for a stream (so no token at all means no decode yet).
    pub streamed: bool,
}

/// Phases inferred for a cut call, and where from.
#[derive(Debug, Clone, PartialEq)]
pub struct Inferred {
    /// The phases, ms.
    pub phases: LlmPhases,
    /// For the evidence: "inferred from N finished calls of M within ±5
    /// min (…)".
    pub source: String,
    /// Those finished calls: how many, and what they spent on average.
    pub neighbours: overtime_model::PhaseNeighbours,
}

/// A minute's calls and their phase times, in whole microseconds: integer
/// sums are exact, so the books of a batch run's threads merged in any
/// order, and a call counted and taken back by a live revision, leave the
/// same sums to the last bit (float sums did not: inferred phases differed
/// in their last digits from one run to the next).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sums {
    n: u32,
    /// Of `n`, counted by the model server's metrics, not by a span.
    metered: u32,
    queue: i64,
    prefill: i64,
    decode: i64,
}

/// A phase time (ms) as the whole microseconds [`Sums`] counts, at most
/// 30 days (a minute of a million such calls still fits an `i64`).
fn us(ms: f64) -> i64 {
    (ms.min(2_592_000_000.0) * 1000.0).round() as i64
}

/// Finished calls' phases per model and minute.
#[derive(Debug, Clone, Default)]
pub struct PhaseBook {
    models: HashMap<String, BTreeMap<i64, Sums>>,
    /// Model servers' answers in traces of their own, joined to calls by
    /// the completion's id ([`crate::answers`]).
    pub answers: crate::answers::Answers,
    /// Each model's cost of a prompt and a generated token, learned from
    /// its calls whose server timed prefill and decode together
    /// ([`crate::costs`]).
    pub costs: crate::costs::TokenCosts,
    /// Finished calls whose prefill and decode were split by the fixed
    /// token estimate, waiting for their model's costs ([`Self::settle`]),
    /// with `[inference ms, prompt, generated]`.
    estimated: Vec<(String, Finished, [f64; 3])>,
}

/// Finished calls held for their model's costs at most (beyond, they are
/// counted as estimated).
const MAX_ESTIMATED: usize = 1_000_000;

fn minute(us: i64) -> i64 {
    us.div_euclid(60_000_000)
}

impl PhaseBook {
    /// Counts one finished call of `model`.
    pub fn add(&mut self, model: &str, f: &Finished) {
        let ok = |v: f64| v.is_finite() && v >= 0.0;
        if !(ok(f.queue_ms) && ok(f.prefill_ms) && ok(f.decode_ms)) {
            return;
        }
        let minutes = self.models.entry(model.to_string()).or_default();
        let s = minutes.entry(minute(f.start_us)).or_default();
        s.n += 1;
        s.queue += us(f.queue_ms);
        s.prefill += us(f.prefill_ms);
        s.decode += us(f.decode_ms);
        while minutes.len() > MAX_MINUTES {
            minutes.pop_first();
        }
    }

    /// Counts `n` finished calls of `model` at `time_us` that spent, all
    /// together, these phase times (ms): what the model server's phase
    /// histograms grew by ([`crate::server_metrics`]).
    pub fn add_many(
        &mut self,
        model: &str,
        time_us: i64,
        n: u32,
        queue_ms: f64,
        prefill_ms: f64,
        decode_ms: f64,
    ) {
        let ok = |v: f64| v.is_finite() && v >= 0.0;
        if n == 0 || !(ok(queue_ms) && ok(prefill_ms) && ok(decode_ms)) {
            return;
        }
        let minutes = self.models.entry(model.to_string()).or_default();
        let s = minutes.entry(minute(time_us)).or_default();
        s.n += n;
        s.metered += n;
        s.queue += us(queue_ms);
        s.prefill += us(prefill_ms);
        s.decode += us(decode_ms);
        while minutes.len() > MAX_MINUTES {
            minutes.pop_first();
        }
    }

    /// Takes back one call [`add`](Self::add) counted (the live engine
    /// revises a trace's verdict: its calls are counted again).
    pub fn remove(&mut self, model: &str, f: &Finished) {
        let Some(minutes) = self.models.get_mut(model) else {
            return;
        };
        let m = minute(f.start_us);
        if let Some(s) = minutes.get_mut(&m) {
            s.n = s.n.saturating_sub(1);
            s.queue -= us(f.queue_ms);
            s.prefill -= us(f.prefill_ms);
            s.decode -= us(f.decode_ms);
            if s.n == 0 {
                minutes.remove(&m);
            }
        }
        if minutes.is_empty() {
            self.models.remove(model);
        }
    }

    /// Counts the calls whose answer came in a trace of its own as
    /// finished calls of their model ([`crate::answers`]), and those whose
    /// server timed prefill and decode together, split by their model's
    /// costs ([`crate::costs`]).
    pub fn settle(&mut self) {
        for (model, f) in self.answers.resolve() {
            self.add(&model, &f);
        }
        for (model, f, unsplit) in std::mem::take(&mut self.estimated) {
            let f = self.split_by_costs(&model, &f, unsplit);
            self.add(&model, &f);
        }
    }

    /// Holds a finished call split by the fixed estimate until its model's
    /// costs are known ([`Self::settle`]).
    pub fn add_estimated(&mut self, model: &str, f: &Finished, unsplit: [f64; 3]) {
        if self.estimated.len() >= MAX_ESTIMATED {
            self.add(model, f);
        } else {
            self.estimated.push((model.to_string(), *f, unsplit));
        }
    }

    /// `f` with its prefill and decode split again by `model`'s learned
    /// costs, when they are known; else as it is.
    pub fn split_by_costs(&self, model: &str, f: &Finished, unsplit: [f64; 3]) -> Finished {
        let [inference, prompt, generated] = unsplit;
        match self.costs.fit(model) {
            Some((a, b, _)) if a * prompt + b * generated > 0.0 => {
                let prefill = inference * a * prompt / (a * prompt + b * generated);
                Finished {
                    prefill_ms: prefill,
                    decode_ms: (inference - prefill).max(0.0),
                    ..*f
                }
            }
            _ => *f,
        }
    }

    /// Adds every minute of `other` into this book.
    pub fn merge(&mut self, other: &PhaseBook) {
        self.answers.merge(&other.answers);
        self.costs.merge(&other.costs);
        self.estimated.extend(other.estimated.iter().cloned());
        for (model, minutes) in &other.models {
            let mine = self.models.entry(model.clone()).or_default();
            for (m, s) in minutes {
                let t = mine.entry(*m).or_default();
                t.n += s.n;
                t.metered += s.metered;
                t.queue += s.queue;
                t.prefill += s.prefill;
                t.decode += s.decode;
            }
            while mine.len() > MAX_MINUTES {
                mine.pop_first();
            }
        }
    }

    /// The phases of a cut call, from its own evidence and its neighbours
    /// (see the module's design rules); `None` when the neighbours are too
    /// few to decide.
    pub fn infer(&self, c: &Cut) -> Option<Inferred> {
        let at = minute(c.start_us);
        let near = self
            .models
            .get(c.model)?
            .range(at - WINDOW_MINUTES..=at + WINDOW_MINUTES)
            .fold(Sums::default(), |mut a, (_, s)| {
                a.n += s.n;
                a.metered += s.metered;
                a.queue += s.queue;
                a.prefill += s.prefill;
                a.decode += s.decode;
                a
            });
        let work = near.queue + near.prefill + near.decode;
        if near.n < MIN_NEIGHBOURS || work <= 0 || c.duration_ms <= 0.0 {
            return None;
        }
        let n = f64::from(near.n) * 1000.0;
        let (q, p, d) = (
            near.queue as f64 / n,
            near.prefill as f64 / n,
            near.decode as f64 / n,
        );
        let before_first = |t: f64| {
            let share = if q + p > 0.0 { q / (q + p) } else { 0.5 };
            (t * share, t * (1.0 - share))
        };
        let (queue, prefill, decode, how) = match c.ttft_ms {
            Some(t) => {
                let t = t.clamp(0.0, c.duration_ms);
                let (qq, pp) = before_first(t);
                (qq, pp, c.duration_ms - t, "its first token came at")
            }
            None if c.streamed => {
                let (qq, pp) = before_first(c.duration_ms);
                (qq, pp, 0.0, "no token came in")
            }
            None => {
                let k = c.duration_ms / (q + p + d);
                (q * k, p * k, d * k, "it said nothing of itself in")
            }
        };
        let own = match c.ttft_ms {
            Some(t) => format!("{how} {}", crate::fmt::dur(t)),
            None => format!("{how} {}", crate::fmt::dur(c.duration_ms)),
        };
        Some(Inferred {
            neighbours: overtime_model::PhaseNeighbours {
                calls: near.n,
                metered: near.metered,
                window_min: WINDOW_MINUTES,
                queue_ms: q,
                prefill_ms: p,
                decode_ms: d,
            },
            phases: LlmPhases {
                queue_ms: Some(queue),
                prefill_ms: Some(prefill),
                decode_ms: Some(decode),
                ..Default::default()
            },
            source: format!(
                "inferred: the server wrote nothing for this cut call; {own}; {} finished calls of {} within ±{WINDOW_MINUTES} min{} spent queue {}, prefill {}, decode {} on average",
                near.n,
                c.model,
                match near.metered {
                    0 => String::new(),
                    m if m == near.n => " (counted by the model server's metrics)".to_string(),
                    m => format!(" ({m} of them counted by the model server's metrics)"),
                },
                crate::fmt::dur(q),
                crate::fmt::dur(p),
                crate::fmt::dur(d),
            ),
        })
    }

    /// No finished call counted, no answer kept.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty() && self.answers.is_empty() && self.costs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book(queue: f64, prefill: f64, decode: f64, n: i64) -> PhaseBook {
        let mut b = PhaseBook::default();
        for i in 0..n {
            b.add(
                "m",
                &Finished {
                    start_us: i * 20_000_000,
                    queue_ms: queue,
                    prefill_ms: prefill,
                    decode_ms: decode,
                },
            );
        }
        b
    }

    fn cut(ttft_ms: Option<f64>, streamed: bool) -> Cut<'static> {
        Cut {
            model: "m",
            start_us: 60_000_000,
            duration_ms: 3_000.0,
            ttft_ms,
            streamed,
        }
    }

    #[test]
    fn too_few_or_far_neighbours_decide_nothing() {
        assert!(book(1.0, 1.0, 1.0, 2).infer(&cut(None, false)).is_none());
        let far = Cut {
            start_us: 60 * 60_000_000,
            ..cut(None, false)
        };
        assert!(book(1.0, 1.0, 1.0, 5).infer(&far).is_none());
        let other = Cut {
            model: "other",
            ..cut(None, false)
        };
        assert!(book(1.0, 1.0, 1.0, 5).infer(&other).is_none());
    }

    #[test]
    fn a_first_token_splits_the_call_at_it() {
        // Neighbours queued 3 times as long as they prefilled.
        let p = book(300.0, 100.0, 500.0, 5)
            .infer(&cut(Some(400.0), true))
            .unwrap()
            .phases;
        assert_eq!(p.queue_ms, Some(300.0));
        assert_eq!(p.prefill_ms, Some(100.0));
        assert_eq!(p.decode_ms, Some(2_600.0));
    }

    #[test]
    fn a_streamed_call_with_no_token_spent_it_all_before_the_first() {
        let p = book(100.0, 300.0, 5_000.0, 5)
            .infer(&cut(None, true))
            .unwrap()
            .phases;
        assert_eq!(p.decode_ms, Some(0.0));
        assert_eq!(p.prefill_ms, Some(2_250.0));
    }

    #[test]
    fn a_silent_call_is_shared_out_as_its_neighbours_time_was() {
        let p = book(2_000.0, 500.0, 500.0, 5)
            .infer(&cut(None, false))
            .unwrap()
            .phases;
        assert_eq!(p.queue_ms, Some(2_000.0));
    }
}
