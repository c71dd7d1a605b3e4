//! A model server's answer written in a trace of its own, joined to the
//! call that asked for it by the id both carry (docs/diagnosis.md, "Calls"
//! and "Phases of a cut call").
//!
//! An LLM gateway that does not pass `traceparent` on — the LiteLLM proxy
//! continues the caller's trace for its own spans only — leaves the model
//! server's spans in traces of their own. What joins them is the id of the
//! completion: vLLM writes the id it served the request under as
//! `gen_ai.request.id` on its `llm_request` span, and that id is the `id`
//! of the completion the client got back (`chatcmpl-…`), which the
//! gateway's and the client's spans write as `gen_ai.response.id`.
//!
//! Design rules:
//! - **Exact ids only.** An answer belongs to the call whose spans carry
//!   its id; nothing is joined by time or model here (that is the phase
//!   book's inference, which says so in the evidence).
//! - **Joined answers are finished calls.** A call that finished with an
//!   answer elsewhere counts as a neighbour of its model, so the calls of
//!   that model that were cut (and got no answer at all) are inferred from
//!   it ([`crate::phasebook`]).
//! - **Bounded.** At most [`MAX_ANSWERS`] answers and [`MAX_EXPECTED`]
//!   calls waiting for theirs, keyed by a 64-bit hash of the id; beyond
//!   them new ones are counted as dropped, never stored.
//!
//! ```
//! use overtime_diagnose::answers::Answers;
//! use overtime_model::LlmPhases;
//! let mut a = Answers::default();
//! let vllm = LlmPhases { queue_ms: Some(50.0), prefill_ms: Some(40.0), decode_ms: Some(3_400.0), ..Default::default() };
//! a.answer("chatcmpl-2dedfe2db6f4", &vllm, "vLLM span", 1_000_000);
//! a.expect("chatcmpl-2dedfe2db6f4", "mixtral-8x22b", 1_000_000);
//! let (phases, source) = a.get("chatcmpl-2dedfe2db6f4").unwrap();
//! assert_eq!(phases.decode_ms, Some(3_400.0));
//! assert!(source.contains("joined by response id chatcmpl-2dedfe2db6f4"));
//! let finished = a.resolve();
//! assert_eq!(finished[0].0, "mixtral-8x22b");
//! ```

use crate::phasebook::Finished;
use overtime_model::LlmPhases;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// Answers kept at most.
pub const MAX_ANSWERS: usize = 1_000_000;
/// Calls waiting for their answer kept at most.
pub const MAX_EXPECTED: usize = 1_000_000;

/// One answer: queue, prefill and decode (ms, NaN when not said) and
/// where it was read.
#[derive(Debug, Clone, Copy)]
struct Answer {
    phases: [f32; 3],
    source: &'static str,
    /// When the server's span started, µs since the epoch.
    at_us: i64,
}

/// A finished call whose server answered in another trace.
#[derive(Debug, Clone)]
struct Expected {
    id: u64,
    model: String,
    start_us: i64,
}

/// Model servers' answers in traces of their own, by the id of the
/// completion, and the finished calls that wait for theirs.
#[derive(Debug, Clone, Default)]
pub struct Answers {
    by_id: HashMap<u64, Answer>,
    expected: Vec<Expected>,
    /// Answers and expectations not kept (over the bounds).
    pub dropped: u64,
}

fn key(id: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.trim().hash(&mut h);
    h.finish()
}

fn f(v: Option<f64>) -> f32 {
    v.map_or(f32::NAN, |x| x as f32)
}

fn back(v: f32) -> Option<f64> {
    (!v.is_nan()).then_some(f64::from(v))
}

impl Answers {
    /// Keeps what a model server said of the request it served under `id`,
    /// starting at `at_us`.
    pub fn answer(&mut self, id: &str, phases: &LlmPhases, source: &'static str, at_us: i64) {
        if self.by_id.len() >= MAX_ANSWERS && !self.by_id.contains_key(&key(id)) {
            self.dropped += 1;
            return;
        }
        let phases = [
            f(phases.queue_ms),
            f(phases.prefill_ms),
            f(phases.decode_ms),
        ];
        self.by_id.insert(
            key(id),
            Answer {
                phases,
                source,
                at_us,
            },
        );
    }

    /// Notes a finished call of `model` whose server's answer carries `id`.
    pub fn expect(&mut self, id: &str, model: &str, start_us: i64) {
        if self.expected.len() >= MAX_EXPECTED {
            self.dropped += 1;
            return;
        }
        self.expected.push(Expected {
            id: key(id),
            model: model.to_string(),
            start_us,
        });
    }

    /// The phases answered under `id`, and the evidence's words for them.
    pub fn get(&self, id: &str) -> Option<(LlmPhases, String)> {
        let a = self.by_id.get(&key(id))?;
        let phases = LlmPhases {
            queue_ms: back(a.phases[0]),
            prefill_ms: back(a.phases[1]),
            decode_ms: back(a.phases[2]),
            ..Default::default()
        };
        Some((
            phases,
            format!(
                "{}, a trace of its own joined by response id {}",
                a.source,
                id.trim()
            ),
        ))
    }

    /// The calls that waited and whose answer has come, with all three
    /// phases, as finished calls of their model; they wait no more (the
    /// others still do).
    pub fn resolve(&mut self) -> Vec<(String, Finished)> {
        let mut out = Vec::new();
        let (answered, waiting): (Vec<Expected>, Vec<Expected>) =
            std::mem::take(&mut self.expected)
                .into_iter()
                .partition(|e| self.by_id.contains_key(&e.id));
        self.expected = waiting;
        for e in answered {
            let a = self.by_id[&e.id];
            if let [Some(q), Some(p), Some(d)] = a.phases.map(back) {
                out.push((
                    e.model,
                    Finished {
                        start_us: e.start_us,
                        queue_ms: q,
                        prefill_ms: p,
                        decode_ms: d,
                    },
                ));
            }
        }
        out
    }

    /// Adds `other`'s answers and waiting calls to these.
    pub fn merge(&mut self, other: &Answers) {
        for (k, a) in &other.by_id {
            if self.by_id.len() >= MAX_ANSWERS && !self.by_id.contains_key(k) {
                self.dropped += 1;
                continue;
            }
            self.by_id.insert(*k, *a);
        }
        for e in &other.expected {
            if self.expected.len() >= MAX_EXPECTED {
                self.dropped += 1;
                continue;
            }
            self.expected.push(e.clone());
        }
        self.dropped += other.dropped;
    }

    /// Forgets the answers given and the calls still waiting from before
    /// `us` (a live engine's memory: their calls were judged long ago).
    pub fn forget_before(&mut self, us: i64) {
        self.expected.retain(|e| e.start_us >= us);
        self.by_id.retain(|_, a| a.at_us >= us);
    }

    /// Nothing answered and nothing waiting.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty() && self.expected.is_empty()
    }
}
