//! What a prompt token and a generated token cost one model, learned from
//! its own calls (docs/diagnosis.md, "Phases of a cut call").
//!
//! A server that times prefill and decode only together (TGI's
//! `x-inference-time`) cannot say from one call which of the two took the
//! time; across a model's calls it can. Each call says `inference ≈ a·P +
//! b·G` for its prompt tokens `P` and generated tokens `G`: a model's `a`
//! (time per prompt token) and `b` (time per generated token) are the
//! non-negative least-squares fit over its calls, and a call's prefill is
//! then `inference × a·P / (a·P + b·G)`.
//!
//! Design rules:
//! - **Only when the calls can tell.** A fit needs [`MIN_CALLS`] calls
//!   whose prompts and generations do not grow together (the normal
//!   equations' determinant is at least [`MIN_SPREAD`] of its scale);
//!   otherwise the split stays the fixed estimate of `calls::measure`.
//! - **Costs are never negative.** A fit that would make one negative
//!   gives that one zero and refits the other alone.
//! - **Bounded.** Six sums per model.
//!
//! ```
//! use overtime_diagnose::costs::TokenCosts;
//! let mut c = TokenCosts::default();
//! // Prefill 1.5 ms a prompt token, decode 25 ms a generated one.
//! for (p, g) in [(1_800, 48), (2_400, 48), (300, 400), (500, 800), (1_000, 100)] {
//!     c.add("tgi-model", 1.5 * p as f64 + 25.0 * g as f64, p, g);
//! }
//! let (a, b, n) = c.fit("tgi-model").unwrap();
//! assert!((a - 1.5).abs() < 1e-6 && (b - 25.0).abs() < 1e-6 && n == 5);
//! ```

use std::collections::HashMap;

/// Fewest calls that fit a model's costs.
pub const MIN_CALLS: u32 = 5;
/// Smallest determinant of the normal equations, as a share of the
/// product of their diagonal: below it prompts and generations grew
/// together and cannot be told apart.
pub const MIN_SPREAD: f64 = 1e-3;

#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sums {
    n: u32,
    pp: f64,
    pg: f64,
    gg: f64,
    pi: f64,
    gi: f64,
}

/// Per model, the sums of its calls' (prompt, generated, inference).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenCosts {
    models: HashMap<String, Sums>,
}

impl TokenCosts {
    /// Counts one call of `model`: `inference_ms` for `prompt` tokens read
    /// and `generated` tokens written.
    pub fn add(&mut self, model: &str, inference_ms: f64, prompt: i64, generated: i64) {
        if !(inference_ms.is_finite() && inference_ms >= 0.0) || prompt < 0 || generated < 0 {
            return;
        }
        let (p, g, i) = (prompt as f64, generated as f64, inference_ms);
        let s = self.models.entry(model.to_string()).or_default();
        s.n += 1;
        s.pp += p * p;
        s.pg += p * g;
        s.gg += g * g;
        s.pi += p * i;
        s.gi += g * i;
    }

    /// Adds `other`'s calls to these.
    pub fn merge(&mut self, other: &TokenCosts) {
        for (m, o) in &other.models {
            let s = self.models.entry(m.clone()).or_default();
            s.n += o.n;
            s.pp += o.pp;
            s.pg += o.pg;
            s.gg += o.gg;
            s.pi += o.pi;
            s.gi += o.gi;
        }
    }

    /// `(ms per prompt token, ms per generated token, calls)` of `model`,
    /// when its calls can tell them apart (see the module's rules).
    pub fn fit(&self, model: &str) -> Option<(f64, f64, u32)> {
        let s = self.models.get(model)?;
        let det = s.pp * s.gg - s.pg * s.pg;
        if s.n < MIN_CALLS || s.pp <= 0.0 || s.gg <= 0.0 || det < MIN_SPREAD * s.pp * s.gg {
            return None;
        }
        let a = (s.pi * s.gg - s.gi * s.pg) / det;
        let b = (s.gi * s.pp - s.pi * s.pg) / det;
        let (a, b) = if a < 0.0 {
            (0.0, (s.gi / s.gg).max(0.0))
        } else if b < 0.0 {
            ((s.pi / s.pp).max(0.0), 0.0)
        } else {
            (a, b)
        };
        (a + b > 0.0).then_some((a, b, s.n))
    }

    /// No call counted.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_and_generations_growing_together_decide_nothing() {
        let mut c = TokenCosts::default();
        for k in 1..10 {
            c.add("m", 100.0 * k as f64, 100 * k, 10 * k);
        }
        assert_eq!(c.fit("m"), None);
    }

    #[test]
    fn a_cost_that_would_be_negative_is_zero_and_the_other_is_refit() {
        // Only the prompt grows the time; generations are constant.
        let mut c = TokenCosts::default();
        for (p, i) in [
            (1_800, 2_000.0),
            (1_800, 2_000.0),
            (2_400, 3_600.0),
            (2_400, 3_600.0),
            (2_400, 3_600.0),
        ] {
            c.add("m", i, p, 48);
        }
        let (a, b, _) = c.fit("m").unwrap();
        assert_eq!(b, 0.0);
        assert!(a > 0.0);
    }

    #[test]
    fn too_few_calls_decide_nothing() {
        let mut c = TokenCosts::default();
        c.add("m", 100.0, 10, 1);
        c.add("m", 300.0, 10, 5);
        assert_eq!(c.fit("m"), None);
    }
}
