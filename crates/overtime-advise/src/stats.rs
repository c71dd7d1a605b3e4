//! The statistics under the advice: the normal distribution (its tail in
//! log space, so a call censored far out still counts), percentiles,
//! Kaplan–Meier survival, and a seeded random generator (so a what-if
//! run is reproducible). Public are only [`Rng`] and [`percentile`], for
//! the proofs and examples that draw synthetic calls.

use std::f64::consts::{PI, SQRT_2};

/// ln φ(z), the standard normal density.
pub(crate) fn ln_pdf(z: f64) -> f64 {
    -0.5 * z * z - 0.5 * (2.0 * PI).ln()
}

/// Φ(z), the standard normal distribution function.
pub(crate) fn cdf(z: f64) -> f64 {
    0.5 * libm::erfc(-z / SQRT_2)
}

/// ln(1 − Φ(z)): the log-probability of lasting longer than `z`, accurate
/// far into the tail (a call cut at 10 σ still weighs on the fit).
pub(crate) fn ln_sf(z: f64) -> f64 {
    if z < 30.0 {
        (0.5 * libm::erfc(z / SQRT_2)).ln()
    } else {
        // Mills' ratio, asymptotic series: 1 − Φ(z) = φ(z)/z · (1 − 1/z² + 3/z⁴ − 15/z⁶ …)
        let z2 = z * z;
        ln_pdf(z) - z.ln() + (1.0 - 1.0 / z2 + 3.0 / (z2 * z2) - 15.0 / (z2 * z2 * z2)).ln()
    }
}

/// Φ⁻¹(p): Acklam's rational approximation polished by two Newton steps
/// (accurate to ~1e-12 over (1e-300, 1 − 1e-16)).
pub(crate) fn quantile_z(p: f64) -> f64 {
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let lo = 0.02425;
    let mut x = if p < lo {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - lo {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        let q = (-2.0 * (1.0 - p).ln()).sqrt();
        -(((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    for _ in 0..2 {
        let e = cdf(x) - p;
        let d = ln_pdf(x).exp();
        if d > 0.0 {
            x -= e / d;
        }
    }
    x
}

/// Percentile by nearest rank over values (`q` in 0..=1); `None` when empty.
///
/// ```
/// use overtime_advise::stats::percentile;
/// assert_eq!(percentile(&[3.0, 1.0, 2.0, 4.0], 0.5), Some(2.0));
/// assert_eq!(percentile(&[], 0.5), None);
/// ```
pub fn percentile(values: &[f64], q: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(percentile_sorted(&v, q))
}

/// [`percentile`] over values already sorted (not empty).
pub(crate) fn percentile_sorted(v: &[f64], q: f64) -> f64 {
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// One observation for survival: how long, and whether it ended on its
/// own (`true`) or was cut (censored: it would have lasted longer).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Obs {
    pub ms: f64,
    pub finished: bool,
}

/// The Kaplan–Meier survival curve: S(t) after each distinct finish time.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct KaplanMeier {
    /// (time, survival just after it), at each time a call finished.
    pub steps: Vec<(f64, f64)>,
    /// The longest observation (finished or cut).
    pub horizon_ms: f64,
}

impl KaplanMeier {
    /// The product-limit estimate; at tied times finishes count before cuts.
    pub fn new(obs: &[Obs]) -> Self {
        let mut v: Vec<Obs> = obs.iter().copied().filter(|o| o.ms.is_finite()).collect();
        v.sort_by(|a, b| a.ms.total_cmp(&b.ms).then(b.finished.cmp(&a.finished)));
        let mut at_risk = v.len() as f64;
        let mut s = 1.0;
        let mut steps = Vec::new();
        let mut i = 0;
        while i < v.len() {
            let t = v[i].ms;
            let (mut d, mut n) = (0.0, 0.0);
            while i < v.len() && v[i].ms == t {
                if v[i].finished {
                    d += 1.0;
                }
                n += 1.0;
                i += 1;
            }
            if d > 0.0 {
                s *= 1.0 - d / at_risk;
                steps.push((t, s));
            }
            at_risk -= n;
        }
        KaplanMeier {
            steps,
            horizon_ms: v.last().map_or(0.0, |o| o.ms),
        }
    }

    /// The time by which a share `q` has finished; `None` when the cut
    /// calls leave it unknown (the curve never falls that low).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        self.steps
            .iter()
            .find(|(_, s)| *s <= 1.0 - q + 1e-12)
            .map(|(t, _)| *t)
    }

    /// S(t): the share still running at `t`.
    #[cfg(test)]
    pub(crate) fn survival(&self, t: f64) -> f64 {
        self.steps
            .iter()
            .take_while(|(st, _)| *st <= t)
            .last()
            .map_or(1.0, |(_, s)| *s)
    }
}

/// SplitMix64: small, fast, seeded; what-if draws and synthetic data are
/// reproducible from their seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`: the same seed gives the same draws.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    /// The next 64 random bits (SplitMix64).
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1).
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (inverse transform: one uniform per draw).
    pub fn normal(&mut self) -> f64 {
        quantile_z(self.uniform())
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kaplan_meier_with_a_cut() {
        let f = |ms| Obs { ms, finished: true };
        let c = |ms| Obs {
            ms,
            finished: false,
        };
        let km = KaplanMeier::new(&[f(1.0), c(2.0), f(3.0), f(4.0)]);
        // 1 of 4 finished by 1; the cut at 2 leaves 2 at risk; 3 halves them.
        assert_eq!(km.quantile(0.25), Some(1.0));
        assert_eq!(km.quantile(0.5), Some(3.0));
        assert_eq!(km.quantile(0.99), Some(4.0));
    }

    #[test]
    fn quantile_z_example() {
        assert!((quantile_z(0.99) - 2.326_347_874_040_841).abs() < 1e-9);
        assert!((quantile_z(0.5)).abs() < 1e-12);
    }

    #[test]
    fn cdf_example() {
        assert!((cdf(0.0) - 0.5).abs() < 1e-12);
        assert!((cdf(2.326_347_874) - 0.99).abs() < 1e-9);
    }

    #[test]
    fn the_log_tail_is_continuous_where_the_series_takes_over() {
        let below = ln_sf(29.999_999);
        let above = ln_sf(30.0);
        assert!((below - above).abs() < 1e-4, "{below} {above}");
        assert!(ln_sf(40.0).is_finite() && ln_sf(40.0) < ln_sf(30.0));
    }

    #[test]
    fn the_quantile_inverts_the_distribution_function() {
        for p in [1e-10, 0.001, 0.02, 0.3, 0.5, 0.9, 0.999, 1.0 - 1e-10] {
            let z = quantile_z(p);
            assert!((cdf(z) - p).abs() < 1e-12 * p.max(1e-3) * 1e3, "{p}: {z}");
        }
    }

    #[test]
    fn kaplan_meier_without_cuts_is_the_empirical_distribution() {
        let obs: Vec<Obs> = (1..=100)
            .map(|i| Obs {
                ms: i as f64,
                finished: true,
            })
            .collect();
        let km = KaplanMeier::new(&obs);
        assert_eq!(km.quantile(0.5), Some(50.0));
        assert_eq!(km.quantile(0.99), Some(99.0));
        assert!((km.survival(10.0) - 0.9).abs() < 1e-12);
    }

    #[test]
    fn kaplan_meier_leaves_quantiles_beyond_the_cuts_unknown() {
        let mut obs: Vec<Obs> = (1..=70)
            .map(|i| Obs {
                ms: i as f64,
                finished: true,
            })
            .collect();
        obs.extend((0..30).map(|_| Obs {
            ms: 70.5,
            finished: false,
        }));
        let km = KaplanMeier::new(&obs);
        assert_eq!(km.quantile(0.5), Some(50.0));
        assert_eq!(km.quantile(0.9), None);
    }

    #[test]
    fn the_generator_is_seeded_and_roughly_normal() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        assert_eq!(a.next_u64(), b.next_u64());
        let xs: Vec<f64> = (0..20_000).map(|_| a.normal()).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!(
            mean.abs() < 0.03 && (var - 1.0).abs() < 0.05,
            "{mean} {var}"
        );
    }
}
