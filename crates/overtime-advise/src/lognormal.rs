//! The censored log-normal tail: ln(latency) ~ N(μ, σ²), fitted by maximum
//! likelihood where a finished call contributes its density and a call cut
//! at `c` contributes P(T > c) — it would have lasted longer, which is all
//! that is known. Never "it finished at the timeout".

use crate::optim::minimize;
use crate::stats::{Obs, Rng, cdf, ln_pdf, ln_sf, quantile_z};
use serde::{Deserialize, Serialize};

/// A log-normal distribution of milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LogNormal {
    /// Mean of ln(ms).
    pub mu: f64,
    /// Standard deviation of ln(ms).
    pub sigma: f64,
}

impl LogNormal {
    /// The time by which a share `q` has finished.
    ///
    /// ```
    /// use overtime_advise::LogNormal;
    /// let d = LogNormal { mu: 1000f64.ln(), sigma: 0.5 };
    /// assert!((d.quantile(0.5) - 1000.0).abs() < 1e-6);
    /// ```
    pub fn quantile(&self, q: f64) -> f64 {
        (self.mu + self.sigma * quantile_z(q)).exp()
    }

    /// P(T ≤ t).
    pub fn cdf(&self, t: f64) -> f64 {
        if t <= 0.0 {
            return 0.0;
        }
        cdf((t.ln() - self.mu) / self.sigma)
    }

    /// A draw of T given T > `above` (ms): what a call cut at `above`
    /// would have taken. Exact inverse transform in the tail.
    ///
    /// ```
    /// use overtime_advise::{LogNormal, stats::Rng};
    /// let d = LogNormal { mu: 1000f64.ln(), sigma: 0.5 };
    /// let mut rng = Rng::new(1);
    /// assert!((0..100).all(|_| d.draw_above(5000.0, &mut rng) > 5000.0));
    /// ```
    pub fn draw_above(&self, above: f64, rng: &mut Rng) -> f64 {
        if above <= 0.0 {
            return (self.mu + self.sigma * rng.normal()).exp();
        }
        let zc = (above.ln() - self.mu) / self.sigma;
        // The tail beyond zc holds `s`; pick a point uniformly inside it.
        let s = ln_sf(zc).exp();
        let tail = s * rng.uniform();
        let z = if tail > 0.0 {
            -quantile_z(tail)
        } else {
            zc + 1e-9
        };
        (self.mu + self.sigma * z.max(zc)).exp().max(above)
    }
}

/// A fitted tail and what it was fitted on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TailFit {
    /// The fitted distribution (μ and σ of ln ms, flattened into the JSON).
    #[serde(flatten)]
    pub dist: LogNormal,
    /// Observations used, and how many of them were cut (censored).
    pub n: usize,
    /// Of `n`, the observations that were cut (censored).
    pub censored: usize,
}

/// Fewest finished calls a tail is fitted on.
pub(crate) const MIN_FINISHED: usize = 8;
/// Observations used at most.
const MAX_FIT: usize = 20_000;

/// The censored log-likelihood of `obs` (natural-log times) under N(μ, σ²).
fn ln_likelihood(mu: f64, sigma: f64, logs: &[(f64, bool)]) -> f64 {
    let ln_s = sigma.ln();
    logs.iter()
        .map(|&(y, finished)| {
            let z = (y - mu) / sigma;
            if finished { ln_pdf(z) - ln_s } else { ln_sf(z) }
        })
        .sum()
}

/// Maximum-likelihood log-normal over finished and cut observations;
/// `None` with fewer than [`MIN_FINISHED`] finished ones (no tail can be
/// told from so little).
pub(crate) fn fit(obs: &[Obs]) -> Option<TailFit> {
    let all: Vec<(f64, bool)> = obs
        .iter()
        .filter(|o| o.ms.is_finite() && o.ms > 0.0)
        .map(|o| (o.ms.ln(), o.finished))
        .collect();
    // Two parameters: 20 000 observations (evenly spaced) pin them down.
    let every = all.len().div_ceil(MAX_FIT).max(1);
    let logs: Vec<(f64, bool)> = all.iter().copied().step_by(every).collect();
    let done: Vec<f64> = logs.iter().filter(|o| o.1).map(|o| o.0).collect();
    if done.len() < MIN_FINISHED {
        return None;
    }
    let m = done.iter().sum::<f64>() / done.len() as f64;
    let var = done.iter().map(|y| (y - m).powi(2)).sum::<f64>() / done.len() as f64;
    let s0 = var.sqrt().max(0.05);
    let (x, _) = minimize(
        |p| -ln_likelihood(p[0], p[1].exp(), &logs),
        &[m, s0.ln()],
        &[s0, 0.3],
        1e-10,
        4000,
    );
    let sigma = x[1].exp();
    if !(x[0].is_finite() && sigma.is_finite() && sigma > 0.0) {
        return None;
    }
    Some(TailFit {
        dist: LogNormal { mu: x[0], sigma },
        n: all.len(),
        censored: all.iter().filter(|o| !o.1).count(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_censored_fit_recovers_the_tail() {
        let mut rng = Rng::new(3);
        // 2 000 calls with median 2 s, σ 0.6, every one over 3 s cut there.
        let obs: Vec<Obs> = (0..2000)
            .map(|_| {
                let t = (2000f64.ln() + 0.6 * rng.normal()).exp();
                Obs {
                    ms: t.min(3000.0),
                    finished: t < 3000.0,
                }
            })
            .collect();
        let f = fit(&obs).unwrap();
        assert!(f.censored > 400);
        assert!((f.dist.quantile(0.99) / 8_071.0 - 1.0).abs() < 0.1);
    }

    fn sample(n: usize, median: f64, sigma: f64, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        (0..n)
            .map(|_| (median.ln() + sigma * rng.normal()).exp())
            .collect()
    }

    #[test]
    fn without_cuts_the_fit_is_the_sample_mean_and_spread_of_the_logs() {
        let xs = sample(5000, 1200.0, 0.7, 11);
        let obs: Vec<Obs> = xs.iter().map(|&ms| Obs { ms, finished: true }).collect();
        let f = fit(&obs).unwrap();
        assert!((f.dist.mu.exp() / 1200.0 - 1.0).abs() < 0.05, "{f:?}");
        assert!((f.dist.sigma - 0.7).abs() < 0.03, "{f:?}");
        assert_eq!(f.censored, 0);
    }

    #[test]
    fn treating_cut_calls_as_finished_would_underestimate_the_tail() {
        let xs = sample(4000, 8_700.0, 0.55, 5);
        let cut_at = 12_000.0;
        let honest: Vec<Obs> = xs
            .iter()
            .map(|&t| Obs {
                ms: t.min(cut_at),
                finished: t < cut_at,
            })
            .collect();
        let naive: Vec<Obs> = honest
            .iter()
            .map(|o| Obs {
                finished: true,
                ..*o
            })
            .collect();
        let truth = LogNormal {
            mu: 8_700f64.ln(),
            sigma: 0.55,
        }
        .quantile(0.99);
        let good = fit(&honest).unwrap().dist.quantile(0.99);
        let bad = fit(&naive).unwrap().dist.quantile(0.99);
        assert!((good / truth - 1.0).abs() < 0.1, "{good} vs {truth}");
        assert!(bad < 0.8 * truth, "the naive fit {bad} vs {truth}");
    }

    #[test]
    fn draws_above_a_cut_follow_the_conditional_tail() {
        let d = LogNormal {
            mu: 1000f64.ln(),
            sigma: 0.5,
        };
        let mut rng = Rng::new(9);
        let draws: Vec<f64> = (0..20_000)
            .map(|_| d.draw_above(1500.0, &mut rng))
            .collect();
        // P(T > 2500 | T > 1500) for this law.
        let want = (1.0 - d.cdf(2500.0)) / (1.0 - d.cdf(1500.0));
        let got = draws.iter().filter(|&&t| t > 2500.0).count() as f64 / draws.len() as f64;
        assert!((got - want).abs() < 0.015, "{got} vs {want}");
        assert!(draws.iter().all(|&t| t >= 1500.0));
        // Far in the tail the draw still lands beyond the cut.
        assert!(d.draw_above(1e7, &mut rng) >= 1e7);
    }
}
