//! The latency law of one LLM, in three nested forms, the best by AIC:
//!
//! ```text
//! seed:       latency = base × (1 + a·t) × (1 + b·load) × ε
//! quadratic:  latency = base × (1 + a·t + a2·t²) × (1 + b·load) × ε
//! additive:   latency = (base_bucket + a·t + a2·t²) × (1 + b·load) × ε
//! ln ε ~ N(0, σ_bucket²),  t = input tokens
//! ```
//!
//! The first is seed 000's dynamic-timeout form. The second adds the
//! attention cost of prefill, which grows with the square of the prompt
//! (what made the long attribution calls blow up). The third says prefill
//! and decode add up rather than multiply: the prompt's tokens cost prefill
//! time, while what the answer costs (decode) does not scale with the
//! prompt — it is a fixed part per input-token bucket (long prompts tend to
//! ask for long answers). Each richer form must beat the simpler by more
//! than 10 AIC points to be used. The noise is multiplicative (the spread
//! grows with the mean, as the seed's std-dev jump from 3.2 s to 18.7 s
//! above 300 tokens shows) and σ is fitted per input-token bucket. Fitted
//! by censored maximum likelihood: a call cut by a timeout contributes
//! P(latency > cut), never a finish at the cut. The per-request timeout is
//! the median times the margin exp(z_target · σ_bucket).

use crate::model_fit::{Params, Slots, fit_form, n_params, quality};
use crate::stats::{cdf, quantile_z};
use overtime_diagnose::{BUCKETS, bucket_of};
use serde::{Deserialize, Serialize};

/// One call for the fit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sample {
    pub tokens_in: f64,
    pub load: f64,
    pub ms: f64,
    pub finished: bool,
}

/// Which form was fitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Form {
    /// base × (1 + a·t) × (1 + b·load)
    Seed,
    /// base × (1 + a·t + a2·t²) × (1 + b·load)
    QuadraticPrefill,
    /// (base_bucket + a·t + a2·t²) × (1 + b·load)
    Additive,
}

/// Fitted coefficients and the fit's quality.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyModel {
    /// Which law was kept: the seed form unless another's AIC is lower by
    /// a clear margin.
    pub form: Form,
    /// Seed and quadratic forms: latency of an empty prompt on an idle
    /// server (ms). Additive: the busiest bucket's fixed part.
    pub base_ms: f64,
    /// Additive form: the fixed part per input-token bucket (ms).
    pub base_by_bucket: Vec<(String, f64)>,
    /// Per input token: a factor (seed, quadratic) or ms (additive).
    pub a: f64,
    /// Per input token squared: a factor, or ms (additive); 0 in the seed form.
    pub a2: f64,
    /// Per unit of load (`gpu_load` 0..1, else calls in flight on the model).
    pub b: f64,
    /// What `load` meant for this model.
    pub load: String,
    /// Spread of ln(latency) around the model, in the bucket with most calls.
    pub sigma: f64,
    /// Spread per input-token bucket (`<50`, `50-200`, `200-500`, `>500`);
    /// a bucket with too few calls shares the busiest bucket's.
    pub sigma_by_bucket: Vec<(String, f64)>,
    /// Calls the law was fitted on.
    pub n: usize,
    /// Of them, cut or timed out (censored): the law is fitted with them as
    /// lower bounds.
    pub censored: usize,
    /// R² of ln(latency) over the calls that finished.
    pub r2: f64,
    /// Observed / predicted median, P10, P50, P90 over finished calls.
    pub residual_p10: f64,
    /// Observed / predicted median ratio, median over finished calls (1.0 is
    /// unbiased).
    pub residual_p50: f64,
    /// Observed / predicted median ratio, P90 over finished calls.
    pub residual_p90: f64,
    /// ln-likelihood of the data under the kept law (censored calls
    /// included).
    pub ln_likelihood: f64,
    /// AIC of every form fitted.
    pub aic: Vec<(Form, f64)>,
}

impl LatencyModel {
    fn bucket(tokens_in: f64) -> usize {
        bucket_of(tokens_in as i64)
    }

    /// The predicted median latency (ms).
    pub fn median_ms(&self, tokens_in: f64, load: f64) -> f64 {
        let t = tokens_in;
        let tokens_part = match self.form {
            Form::Additive => {
                let base = self
                    .base_by_bucket
                    .get(Self::bucket(t))
                    .map_or(self.base_ms, |b| b.1);
                base + self.a * t + self.a2 * t * t
            }
            _ => self.base_ms * (1.0 + self.a * t + self.a2 * t * t),
        };
        tokens_part * (1.0 + self.b * load)
    }

    /// The spread of ln(latency) for a prompt of `tokens_in`.
    pub fn sigma_for(&self, tokens_in: f64) -> f64 {
        self.sigma_by_bucket
            .get(Self::bucket(tokens_in))
            .map_or(self.sigma, |b| b.1)
    }

    /// The factor over the median that covers a share `q` of calls with
    /// prompts of `tokens_in`.
    pub fn margin(&self, tokens_in: f64, q: f64) -> f64 {
        (self.sigma_for(tokens_in) * quantile_z(q)).exp()
    }

    /// The per-request timeout covering a share `q` of calls like this one.
    pub fn timeout_ms(&self, tokens_in: f64, load: f64, q: f64) -> f64 {
        self.median_ms(tokens_in, load) * self.margin(tokens_in, q)
    }

    /// The time by which a share `q` of the given calls (tokens, load)
    /// finish, under the model: the mixture of their distributions.
    pub fn mixture_quantile(&self, calls: &[(f64, f64)], q: f64) -> Option<f64> {
        if calls.is_empty() {
            return None;
        }
        // 5 000 calls (evenly spaced) describe the mixture to well under 1 %.
        let every = calls.len().div_ceil(5_000).max(1);
        let mus: Vec<(f64, f64)> = calls
            .iter()
            .step_by(every)
            .map(|&(t, l)| (self.median_ms(t, l).ln(), self.sigma_for(t)))
            .collect();
        let share =
            |y: f64| mus.iter().map(|(m, s)| cdf((y - m) / s)).sum::<f64>() / mus.len() as f64;
        let smax = mus.iter().map(|m| m.1).fold(0.0, f64::max);
        let mut lo = mus.iter().map(|m| m.0).fold(f64::INFINITY, f64::min) - 12.0 * smax;
        let mut hi = mus.iter().map(|m| m.0).fold(f64::NEG_INFINITY, f64::max) + 12.0 * smax;
        for _ in 0..100 {
            let mid = 0.5 * (lo + hi);
            if share(mid) < q {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Some((0.5 * (lo + hi)).exp())
    }

    /// The rule as an SRE would write it down.
    pub fn rule(&self, q: f64) -> String {
        let load = if self.b > 0.0 {
            format!(" × (1 + {:.3}·{})", self.b, self.load)
        } else {
            String::new()
        };
        let tokens = match self.form {
            Form::Seed => format!("{:.0} ms × (1 + {:.4}·tokens_in)", self.base_ms, self.a),
            Form::QuadraticPrefill => format!(
                "{:.0} ms × (1 + {:.3e}·tokens_in + {:.3e}·tokens_in²)",
                self.base_ms, self.a, self.a2
            ),
            Form::Additive => {
                let bases: Vec<String> = self
                    .base_by_bucket
                    .iter()
                    .map(|(b, v)| format!("{v:.0} ms ({b})"))
                    .collect();
                format!(
                    "({} + {:.3e} ms·tokens_in + {:.3e} ms·tokens_in²)",
                    bases.join(" | "),
                    self.a,
                    self.a2
                )
            }
        };
        let margins: Vec<String> = self
            .sigma_by_bucket
            .iter()
            .map(|(b, s)| format!("{:.2} ({b})", (s * quantile_z(q)).exp()))
            .collect();
        format!(
            "timeout = {tokens}{load} × margin {} (covering {:.1} %)",
            margins.join(", "),
            q * 100.0
        )
    }
}

/// Fewest finished calls a model is fitted on.
pub(crate) const MIN_FINISHED: usize = 30;
/// Calls used at most (evenly spaced); more add time, not accuracy.
const MAX_FIT: usize = 12_000;
/// AIC points a richer form must win by.
const AIC_MARGIN: f64 = 10.0;

/// Fits the model over `samples`; `None` with fewer than [`MIN_FINISHED`]
/// finished calls. `load_name` says what `load` is (`gpu_load`,
/// `calls_in_flight`); a load that never varies is left out (b = 0).
pub(crate) fn fit(samples: &[Sample], load_name: &str) -> Option<LatencyModel> {
    let ok: Vec<Sample> = samples
        .iter()
        .copied()
        .filter(|s| s.ms.is_finite() && s.ms > 0.0 && s.tokens_in >= 0.0 && s.load.is_finite())
        .collect();
    if ok.iter().filter(|s| s.finished).count() < MIN_FINISHED {
        return None;
    }
    let every = ok.len().div_ceil(MAX_FIT).max(1);
    let used: Vec<Sample> = ok.iter().copied().step_by(every).collect();
    let lmin = used.iter().map(|s| s.load).fold(f64::INFINITY, f64::min);
    let lmax = used
        .iter()
        .map(|s| s.load)
        .fold(f64::NEG_INFINITY, f64::max);
    let with_load = lmax > lmin;
    let slots = Slots::new(&used);
    let aic = |form: Form, nll: f64| 2.0 * n_params(form, with_load, &slots) as f64 + 2.0 * nll;
    let (seed, nll_seed) = fit_form(&used, Form::Seed, with_load, &slots, None);
    let mut best: (Params, f64) = (seed.clone(), nll_seed);
    let mut aics = vec![(Form::Seed, aic(Form::Seed, nll_seed))];
    for form in [Form::QuadraticPrefill, Form::Additive] {
        let (p, nll) = fit_form(&used, form, with_load, &slots, Some(&seed));
        let a = aic(form, nll);
        aics.push((form, a));
        if a + AIC_MARGIN < aic(best.0.form, best.1) {
            best = (p, nll);
        }
    }
    let (p, nll) = best;
    let (r2, [r10, r50, r90]) = quality(&p, &used, &slots);
    let per_bucket = |v: &dyn Fn(usize) -> f64| -> Vec<(String, f64)> {
        BUCKETS
            .iter()
            .enumerate()
            .map(|(b, name)| (name.to_string(), v(slots.of_bucket[b])))
            .collect()
    };
    let busiest = slots.of_bucket[slots.busiest];
    Some(LatencyModel {
        form: p.form,
        base_ms: p.base_for(busiest),
        base_by_bucket: if p.form == Form::Additive {
            per_bucket(&|k| p.base_for(k))
        } else {
            Vec::new()
        },
        a: p.a,
        a2: p.a2,
        b: p.b,
        load: load_name.to_string(),
        sigma: p.sigma[busiest],
        sigma_by_bucket: per_bucket(&|k| p.sigma[k]),
        n: used.len(),
        censored: used.iter().filter(|s| !s.finished).count(),
        r2,
        residual_p10: r10,
        residual_p50: r50,
        residual_p90: r90,
        ln_likelihood: -nll,
        aic: aics,
    })
}
