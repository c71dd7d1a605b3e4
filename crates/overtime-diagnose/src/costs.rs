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

/// Exact sums: tokens are integers and inference is counted in whole
/// microseconds, so the sums are integers and adding calls (or merging the
/// books of a batch run's threads) in any order gives the same fit to the
/// last bit.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sums {
    n: u32,
    pp: i128,
    pg: i128,
    gg: i128,
    pi: i128,
    gi: i128,
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
        // (Clamped: a day of inference is far past any call.)
        let us = (inference_ms.min(86_400_000.0) * 1000.0).round() as i128;
        let (p, g) = (prompt as i128, generated as i128);
        let s = self.models.entry(model.to_string()).or_default();
        s.n += 1;
        s.pp += p * p;
        s.pg += p * g;
        s.gg += g * g;
        s.pi += p * us;
        s.gi += g * us;
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
        let (pp, pg, gg) = (s.pp as f64, s.pg as f64, s.gg as f64);
        let (pi, gi) = (s.pi as f64 / 1000.0, s.gi as f64 / 1000.0);
        let det = pp * gg - pg * pg;
        if s.n < MIN_CALLS || pp <= 0.0 || gg <= 0.0 || det < MIN_SPREAD * pp * gg {
            return None;
        }
        let a = (pi * gg - gi * pg) / det;
        let b = (gi * pp - pi * pg) / det;
        let (a, b) = if a < 0.0 {
            (0.0, (gi / gg).max(0.0))
        } else if b < 0.0 {
            ((pi / pp).max(0.0), 0.0)
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
    fn the_fit_does_not_depend_on_the_order_calls_are_counted_or_merged_in() {
        let calls: Vec<(f64, i64, i64)> = (0..40)
            .map(|k| {
                (
                    123.456 + 17.3 * k as f64 + 0.1 * (k * k % 7) as f64,
                    300 + 97 * k % 1_100,
                    20 + 31 * k % 400,
                )
            })
            .collect();
        let mut forward = TokenCosts::default();
        calls.iter().for_each(|c| forward.add("m", c.0, c.1, c.2));
        // Backwards, in three books merged in another order.
        let mut parts = [
            TokenCosts::default(),
            TokenCosts::default(),
            TokenCosts::default(),
        ];
        for (i, c) in calls.iter().rev().enumerate() {
            parts[i % 3].add("m", c.0, c.1, c.2);
        }
        let mut merged = parts[2].clone();
        merged.merge(&parts[0]);
        merged.merge(&parts[1]);
        let (f, m) = (forward.fit("m").unwrap(), merged.fit("m").unwrap());
        assert_eq!(
            (f.0.to_bits(), f.1.to_bits(), f.2),
            (m.0.to_bits(), m.1.to_bits(), m.2)
        );
    }

    #[test]
    fn too_few_calls_decide_nothing() {
        let mut c = TokenCosts::default();
        c.add("m", 100.0, 10, 1);
        c.add("m", 300.0, 10, 5);
        assert_eq!(c.fit("m"), None);
    }
}
