//! The latency model of one LLM: seed 000's dynamic-timeout form
//!
//! ```text
//! latency = base × (1 + a·tokens_in) × (1 + b·load) × ε,   ln ε ~ N(0, σ²)
//! ```
//!
//! and, when it fits clearly better (by AIC), the same form with a
//! quadratic prefill term `(1 + a·tokens_in + a2·tokens_in²)` — attention
//! cost grows with the square of the prompt, which is what made the long
//! attribution calls of seed 000 blow up. The noise is multiplicative: the
//! spread grows with the mean, as the seed's std-dev jump (3.2 s → 18.7 s
//! above 300 tokens) shows — and σ itself is fitted per input-token bucket
//! (short prompts vary with their answers' length, long ones mostly with
//! their prefill, which is steadier). Fitted by censored maximum
//! likelihood: a call cut by a timeout contributes P(latency > cut), never
//! a finish at the cut. The "margin" of the per-request timeout is then the
//! factor exp(z_target·σ) that covers the target share of calls.

use crate::optim::minimize;
use crate::stats::{cdf, ln_pdf, ln_sf, percentile, quantile_z};
use overtime_diagnose::report::{bucket_of, BUCKETS};
use serde::{Deserialize, Serialize};

/// One call for the fit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub tokens_in: f64,
    pub load: f64,
    pub ms: f64,
    pub finished: bool,
}

/// Which form was fitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Form {
    /// base × (1 + a·tokens) × (1 + b·load)
    Seed,
    /// base × (1 + a·tokens + a2·tokens²) × (1 + b·load)
    QuadraticPrefill,
}

/// Fitted coefficients and the fit's quality.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyModel {
    pub form: Form,
    /// Latency of an empty prompt on an idle server (ms).
    pub base_ms: f64,
    /// Per input token.
    pub a: f64,
    /// Per input token squared (0 in the seed form).
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
    pub n: usize,
    pub censored: usize,
    /// R² of ln(latency) over the calls that finished.
    pub r2: f64,
    /// Observed / predicted median, P10, P50, P90 over finished calls.
    pub residual_p10: f64,
    pub residual_p50: f64,
    pub residual_p90: f64,
    pub ln_likelihood: f64,
    /// AIC of the seed form and of the quadratic form (when fitted).
    pub aic_seed: f64,
    pub aic_quadratic: Option<f64>,
}

impl LatencyModel {
    /// The predicted median latency (ms).
    pub fn median_ms(&self, tokens_in: f64, load: f64) -> f64 {
        self.base_ms
            * (1.0 + self.a * tokens_in + self.a2 * tokens_in * tokens_in)
            * (1.0 + self.b * load)
    }

    /// The spread of ln(latency) for a prompt of `tokens_in`.
    pub fn sigma_for(&self, tokens_in: f64) -> f64 {
        self.sigma_by_bucket
            .get(bucket_of(tokens_in as i64))
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
        let mus: Vec<(f64, f64)> = calls
            .iter()
            .map(|&(t, l)| (self.median_ms(t, l).ln(), self.sigma_for(t)))
            .collect();
        let share =
            |y: f64| mus.iter().map(|(m, s)| cdf((y - m) / s)).sum::<f64>() / mus.len() as f64;
        let smax = mus.iter().map(|m| m.1).fold(0.0, f64::max);
        let lo0 = mus.iter().map(|m| m.0).fold(f64::INFINITY, f64::min) - 12.0 * smax;
        let hi0 = mus.iter().map(|m| m.0).fold(f64::NEG_INFINITY, f64::max) + 12.0 * smax;
        let (mut lo, mut hi) = (lo0, hi0);
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
        let tokens = if self.a2 > 0.0 {
            format!(
                "(1 + {:.3e}·tokens_in + {:.3e}·tokens_in²)",
                self.a, self.a2
            )
        } else {
            format!("(1 + {:.4}·tokens_in)", self.a)
        };
        let load = if self.b > 0.0 {
            format!(" × (1 + {:.3}·{})", self.b, self.load)
        } else {
            String::new()
        };
        let margins: Vec<String> = self
            .sigma_by_bucket
            .iter()
            .map(|(b, s)| format!("{:.2} ({b})", (s * quantile_z(q)).exp()))
            .collect();
        format!(
            "timeout = {:.0} ms × {tokens}{load} × margin {} (covering {:.1} %)",
            self.base_ms,
            margins.join(", "),
            q * 100.0
        )
    }
}

/// Fewest finished calls a model is fitted on.
pub const MIN_FINISHED: usize = 30;
/// Calls used at most (evenly spaced); more add time, not accuracy.
const MAX_FIT: usize = 20_000;

struct Params {
    base: f64,
    a: f64,
    a2: f64,
    b: f64,
    /// σ per slot (see [`Slots`]).
    sigma: Vec<f64>,
}

/// Which σ each input-token bucket uses: its own when it has enough
/// calls, else the busiest bucket's.
struct Slots {
    of_bucket: [usize; 4],
    n: usize,
    busiest: usize,
}

/// Calls (finished) a bucket needs for a σ of its own.
const MIN_SLOT: usize = 20;

impl Slots {
    fn new(samples: &[Sample]) -> Slots {
        let mut count = [0usize; 4];
        for s in samples.iter().filter(|s| s.finished) {
            count[bucket_of(s.tokens_in as i64)] += 1;
        }
        let busiest = (0..4).max_by_key(|&b| count[b]).unwrap_or(0);
        let mut of_bucket = [usize::MAX; 4];
        let mut n = 0;
        for b in 0..4 {
            if count[b] >= MIN_SLOT || b == busiest {
                of_bucket[b] = n;
                n += 1;
            }
        }
        let shared = of_bucket[busiest];
        for slot in of_bucket.iter_mut() {
            if *slot == usize::MAX {
                *slot = shared;
            }
        }
        Slots {
            of_bucket,
            n,
            busiest,
        }
    }
    fn of(&self, s: &Sample) -> usize {
        self.of_bucket[bucket_of(s.tokens_in as i64)]
    }
}

fn unpack(p: &[f64], quad: bool, with_load: bool, slots: &Slots) -> Params {
    let mut i = 2 + slots.n;
    let a2 = if quad {
        i += 1;
        p[i - 1].exp()
    } else {
        0.0
    };
    let b = if with_load { p[i].exp() } else { 0.0 };
    Params {
        base: p[0].exp(),
        a: p[1].exp(),
        a2,
        b,
        sigma: p[2..2 + slots.n].iter().map(|x| x.exp()).collect(),
    }
}

fn mean_ln(x: &Params, s: &Sample) -> f64 {
    x.base.ln()
        + (1.0 + x.a * s.tokens_in + x.a2 * s.tokens_in * s.tokens_in).ln()
        + (1.0 + x.b * s.load).ln()
}

fn neg_ll(x: &Params, samples: &[Sample], slot: &[usize]) -> f64 {
    -samples
        .iter()
        .zip(slot)
        .map(|(s, &k)| {
            let sigma = x.sigma[k];
            let z = (s.ms.ln() - mean_ln(x, s)) / sigma;
            if s.finished {
                ln_pdf(z) - sigma.ln()
            } else {
                ln_sf(z)
            }
        })
        .sum::<f64>()
}

/// A starting point: the best of a coarse grid of (a, b), base and σ
/// from the finished calls' logs.
fn start(samples: &[Sample], with_load: bool) -> (f64, f64, f64, f64) {
    let done: Vec<&Sample> = samples.iter().filter(|s| s.finished).collect();
    let mut best = (f64::INFINITY, 0.0, 1e-3, 0.0, 0.5);
    let loads: &[f64] = if with_load {
        &[0.0, 0.05, 0.2, 0.5, 1.0, 2.0]
    } else {
        &[0.0]
    };
    for k in -6..=1 {
        let a = 10f64.powi(k);
        for &b in loads {
            let r: Vec<f64> = done
                .iter()
                .map(|s| s.ms.ln() - (1.0 + a * s.tokens_in).ln() - (1.0 + b * s.load).ln())
                .collect();
            let m = r.iter().sum::<f64>() / r.len() as f64;
            let sse = r.iter().map(|x| (x - m).powi(2)).sum::<f64>();
            if sse < best.0 {
                best = (sse, m, a, b, (sse / r.len() as f64).sqrt().max(0.05));
            }
        }
    }
    (best.1.exp(), best.2, best.3.max(1e-3), best.4)
}

fn fit_form(samples: &[Sample], quad: bool, with_load: bool, slots: &Slots) -> (Params, f64) {
    let (base, a, b, sigma) = start(samples, with_load);
    let slot: Vec<usize> = samples.iter().map(|s| slots.of(s)).collect();
    let mut x0 = vec![base.ln(), a.ln()];
    let mut step = vec![0.5, 1.0];
    for _ in 0..slots.n {
        x0.push(sigma.ln());
        step.push(0.3);
    }
    if quad {
        let tmax = samples.iter().map(|s| s.tokens_in).fold(1.0f64, f64::max);
        x0.push((a / tmax * 0.1).max(1e-12).ln());
        step.push(2.0);
    }
    if with_load {
        x0.push(b.ln());
        step.push(1.0);
    }
    let (x, v) = minimize(
        |p| neg_ll(&unpack(p, quad, with_load, slots), samples, &slot),
        &x0,
        &step,
        1e-9,
        6000 * x0.len(),
    );
    (unpack(&x, quad, with_load, slots), v)
}

/// Fits the model over `samples`; `None` with fewer than [`MIN_FINISHED`]
/// finished calls. `load_name` says what `load` is (`gpu_load`,
/// `calls_in_flight`); a load that never varies is left out (b = 0).
pub fn fit(samples: &[Sample], load_name: &str) -> Option<LatencyModel> {
    let ok: Vec<Sample> = samples
        .iter()
        .copied()
        .filter(|s| s.ms.is_finite() && s.ms > 0.0 && s.tokens_in >= 0.0 && s.load.is_finite())
        .collect();
    let finished = ok.iter().filter(|s| s.finished).count();
    if finished < MIN_FINISHED {
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
    let k_seed = 2 + slots.n + usize::from(with_load);
    let (seed, nll_seed) = fit_form(&used, false, with_load, &slots);
    let aic_seed = 2.0 * k_seed as f64 + 2.0 * nll_seed;
    let (quad, nll_quad) = fit_form(&used, true, with_load, &slots);
    let aic_quad = 2.0 * (k_seed + 1) as f64 + 2.0 * nll_quad;
    // The quadratic term must earn its place: a clearly better AIC.
    let (p, nll, form) = if aic_quad + 10.0 < aic_seed {
        (quad, nll_quad, Form::QuadraticPrefill)
    } else {
        (seed, nll_seed, Form::Seed)
    };
    let done: Vec<&Sample> = used.iter().filter(|s| s.finished).collect();
    let ys: Vec<f64> = done.iter().map(|s| s.ms.ln()).collect();
    let preds: Vec<f64> = done.iter().map(|s| mean_ln(&p, s)).collect();
    let ybar = ys.iter().sum::<f64>() / ys.len() as f64;
    let ss_tot: f64 = ys.iter().map(|y| (y - ybar).powi(2)).sum();
    let ss_res: f64 = ys.iter().zip(&preds).map(|(y, f)| (y - f).powi(2)).sum();
    let ratios: Vec<f64> = ys.iter().zip(&preds).map(|(y, f)| (y - f).exp()).collect();
    Some(LatencyModel {
        form,
        base_ms: p.base,
        a: p.a,
        a2: p.a2,
        b: p.b,
        load: load_name.to_string(),
        sigma: p.sigma[slots.of_bucket[slots.busiest]],
        sigma_by_bucket: BUCKETS
            .iter()
            .enumerate()
            .map(|(b, name)| (name.to_string(), p.sigma[slots.of_bucket[b]]))
            .collect(),
        n: used.len(),
        censored: used.len() - done.len(),
        r2: if ss_tot > 0.0 {
            1.0 - ss_res / ss_tot
        } else {
            0.0
        },
        residual_p10: percentile(&ratios, 0.1).unwrap_or(1.0),
        residual_p50: percentile(&ratios, 0.5).unwrap_or(1.0),
        residual_p90: percentile(&ratios, 0.9).unwrap_or(1.0),
        ln_likelihood: -nll,
        aic_seed,
        aic_quadratic: Some(aic_quad),
    })
}
