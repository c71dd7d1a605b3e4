//! Fitting the latency forms of [`crate::latency_model`] by censored
//! maximum likelihood: a finished call contributes the density of its
//! ln(latency), a cut one the probability of lasting longer. Every
//! coefficient is optimised as its logarithm (they are all positive).

use crate::latency_model::{Form, Sample};
use crate::optim::minimize;
use crate::stats::{ln_pdf, ln_sf, percentile};
use overtime_diagnose::bucket_of;

/// Which parameter each input-token bucket uses (its own base in the
/// additive form, its own σ in every form): its own when it has enough
/// finished calls, else the busiest bucket's.
#[derive(Debug, Clone)]
pub(crate) struct Slots {
    pub of_bucket: [usize; 4],
    pub n: usize,
    pub busiest: usize,
}

/// Finished calls a bucket needs for parameters of its own.
const MIN_SLOT: usize = 20;

impl Slots {
    pub fn new(samples: &[Sample]) -> Slots {
        let mut count = [0usize; 4];
        for s in samples.iter().filter(|s| s.finished) {
            count[bucket_of(s.tokens_in as i64)] += 1;
        }
        let busiest = (0..4).max_by_key(|&b| count[b]).unwrap_or(0);
        let mut of_bucket = [usize::MAX; 4];
        let mut n = 0;
        for (b, slot) in of_bucket.iter_mut().enumerate() {
            if count[b] >= MIN_SLOT || b == busiest {
                *slot = n;
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
    pub fn of(&self, tokens: f64) -> usize {
        self.of_bucket[bucket_of(tokens as i64)]
    }
}

/// Coefficients of one form, unpacked.
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub form: Form,
    /// One base (seed, quadratic) or one per slot (additive), ms.
    pub base: Vec<f64>,
    pub a: f64,
    pub a2: f64,
    pub b: f64,
    pub sigma: Vec<f64>,
}

impl Params {
    pub fn base_for(&self, slot: usize) -> f64 {
        self.base[slot.min(self.base.len() - 1)]
    }

    /// ln of the median latency of a call at `slot`.
    pub fn mean_ln(&self, tokens: f64, load: f64, slot: usize) -> f64 {
        let t = tokens;
        let tokens_part = match self.form {
            Form::Additive => (self.base_for(slot) + self.a * t + self.a2 * t * t).ln(),
            _ => self.base[0].ln() + (1.0 + self.a * t + self.a2 * t * t).ln(),
        };
        tokens_part + (1.0 + self.b * load).ln()
    }
}

/// How the parameter vector is laid out for one form.
struct Layout {
    form: Form,
    bases: usize,
    quad: bool,
    sigmas: usize,
    load: bool,
}

impl Layout {
    fn len(&self) -> usize {
        self.bases + 1 + usize::from(self.quad) + self.sigmas + usize::from(self.load)
    }
    fn unpack(&self, p: &[f64]) -> Params {
        let mut i = 0;
        let mut take = |n: usize| {
            let v: Vec<f64> = p[i..i + n].iter().map(|x| x.exp()).collect();
            i += n;
            v
        };
        let base = take(self.bases);
        let a = take(1)[0];
        let a2 = if self.quad { take(1)[0] } else { 0.0 };
        let sigma = take(self.sigmas);
        let b = if self.load { take(1)[0] } else { 0.0 };
        Params {
            form: self.form,
            base,
            a,
            a2,
            b,
            sigma,
        }
    }
}

fn neg_ll(x: &Params, samples: &[Sample], slot: &[usize]) -> f64 {
    -samples
        .iter()
        .zip(slot)
        .map(|(s, &k)| {
            let sigma = x.sigma[k];
            let z = (s.ms.ln() - x.mean_ln(s.tokens_in, s.load, k)) / sigma;
            if s.finished {
                ln_pdf(z) - sigma.ln()
            } else {
                ln_sf(z)
            }
        })
        .sum::<f64>()
}

/// A starting point for the seed form: the best of a coarse grid of
/// (a, b), with base and σ from the finished calls' logs.
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

/// Fits `form`; `from` (a fitted seed form) seeds the richer forms.
/// Returns the coefficients and the negative log-likelihood.
pub(crate) fn fit_form(
    samples: &[Sample],
    form: Form,
    with_load: bool,
    slots: &Slots,
    from: Option<&Params>,
) -> (Params, f64) {
    let slot: Vec<usize> = samples.iter().map(|s| slots.of(s.tokens_in)).collect();
    let lay = Layout {
        form,
        bases: if form == Form::Additive { slots.n } else { 1 },
        quad: form != Form::Seed,
        sigmas: slots.n,
        load: with_load,
    };
    let (base, a, b, sigma) = match from {
        Some(p) => (
            p.base[0],
            p.a,
            p.b.max(1e-4),
            p.sigma[slots.of_bucket[slots.busiest]],
        ),
        None => start(samples, with_load),
    };
    let tmax = samples.iter().map(|s| s.tokens_in).fold(1.0f64, f64::max);
    let mut x0 = Vec::with_capacity(lay.len());
    let mut step = Vec::with_capacity(lay.len());
    if form == Form::Additive {
        // Per bucket: what its finished calls take beyond the token terms.
        for k in 0..slots.n {
            let v: Vec<f64> = samples
                .iter()
                .zip(&slot)
                .filter(|(s, sk)| s.finished && **sk == k)
                .map(|(s, _)| s.ms - base * a * s.tokens_in)
                .collect();
            let m = percentile(&v, 0.5).unwrap_or(base).max(base * 0.1);
            x0.push(m.ln());
            step.push(0.5);
        }
        x0.push((base * a * 0.5).max(1e-9).ln());
    } else {
        x0.push(base.ln());
        step.push(0.5);
        x0.push(a.max(1e-9).ln());
    }
    step.push(1.0);
    if lay.quad {
        let scale = if form == Form::Additive { base } else { 1.0 };
        x0.push((scale * a / tmax * 0.1).max(1e-12).ln());
        step.push(2.0);
    }
    for k in 0..slots.n {
        let s = from.map_or(sigma, |p| p.sigma.get(k).copied().unwrap_or(sigma));
        x0.push(s.max(0.01).ln());
        step.push(0.3);
    }
    if with_load {
        x0.push(b.ln());
        step.push(1.0);
    }
    let (x, v) = minimize(
        |p| neg_ll(&lay.unpack(p), samples, &slot),
        &x0,
        &step,
        1e-9,
        3000 * x0.len(),
    );
    (lay.unpack(&x), v)
}

/// Free parameters of a form (for AIC).
pub(crate) fn n_params(form: Form, with_load: bool, slots: &Slots) -> usize {
    let bases = if form == Form::Additive { slots.n } else { 1 };
    bases + 1 + usize::from(form != Form::Seed) + slots.n + usize::from(with_load)
}

/// R² of ln(latency) and observed/predicted ratios over finished calls.
pub(crate) fn quality(p: &Params, samples: &[Sample], slots: &Slots) -> (f64, [f64; 3]) {
    let done: Vec<&Sample> = samples.iter().filter(|s| s.finished).collect();
    let ys: Vec<f64> = done.iter().map(|s| s.ms.ln()).collect();
    let preds: Vec<f64> = done
        .iter()
        .map(|s| p.mean_ln(s.tokens_in, s.load, slots.of(s.tokens_in)))
        .collect();
    let ybar = ys.iter().sum::<f64>() / ys.len().max(1) as f64;
    let ss_tot: f64 = ys.iter().map(|y| (y - ybar).powi(2)).sum();
    let ss_res: f64 = ys.iter().zip(&preds).map(|(y, f)| (y - f).powi(2)).sum();
    let ratios: Vec<f64> = ys.iter().zip(&preds).map(|(y, f)| (y - f).exp()).collect();
    let r2 = if ss_tot > 0.0 {
        1.0 - ss_res / ss_tot
    } else {
        0.0
    };
    let q = |x| percentile(&ratios, x).unwrap_or(1.0);
    (r2, [q(0.1), q(0.5), q(0.9)])
}
