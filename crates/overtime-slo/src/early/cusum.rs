//! The fast early warning: a one-sided CUSUM on each signal's 30 s
//! series, against a baseline learned from the history before it.
//!
//! Why CUSUM (and not the window z-tests of the parent module, nor EWMA):
//! - A window test needs the whole short window (5 min) to fill with the
//!   new level before it moves, so it warns a fixed ~3.5 min after the
//!   onset whatever the ramp's speed. CUSUM accumulates evidence bucket by
//!   bucket: a steep rise crosses the threshold in one or two buckets, a
//!   slow one once enough small excesses have added up. Among sequential
//!   tests it detects a sustained shift of a given size fastest for a given
//!   false-alarm rate (Lorden; Moustakides), where EWMA is tuned for one
//!   shift size and lags on large ones unless its weight is high, when it
//!   becomes a noisy 1-bucket test.
//! - It is recomputed from the ring at every evaluation (the maximum over
//!   the last [`CUSUM_BUCKETS`] of the suffix sums, the usual recursion
//!   with its memory capped), so it holds no state of its own: what the
//!   ring holds — live traffic, or the store's recent history replayed
//!   into a new collector — is all it needs. The Prometheus rules compute
//!   the same statistic from 30 s recording rules (`sum_over_time`).
//!
//! Each bucket `i` of the last [`CUSUM_BUCKETS`] (fewer while the history
//! is short) gives `zᵢ = (x̄ᵢ − μ − δ/2) / seᵢ`, with `μ` the baseline mean,
//! `δ` the signal's minimum relevant shift ([`Signal::min_shift`]) and
//! `seᵢ² = c · (σ²/nᵢ + τ² + σ²/N)` (the bucket's sampling error, the
//! between-bucket variance the baseline showed beyond sampling — load
//! swings, bursts — and the baseline mean's own error; `c` widens it for a
//! young baseline, below). The statistic is `S = max(0, S + zᵢ − k)`
//! (allowance `k` = [`ALLOWANCE`]); the warning fires when `S ≥ h`
//! (`[slo.early_warning] cusum_threshold`) *and* the buckets of the
//! excursion (since `S` last left 0) average at least `δ` above `μ`
//! ([`Detection::relevant`]).
//!
//! Why the reference is `μ + δ/2`: a CUSUM built to detect a shift of `δ`
//! (Page's design) counts each bucket against the midpoint between the
//! two levels, so a rise adds evidence from the moment it passes half the
//! shift that matters. Counting only what exceeds `μ + δ` (as this
//! detector once did) makes a ramp wait until it has already risen by `δ`
//! before a single bucket counts — on a 5-minute ramp, most of a minute.
//! Whether the rise is *worth* a warning is then judged on the mean of
//! the excursion itself, the way the window tests ask for a change both
//! large and significant.
//!
//! ```
//! use overtime_slo::early::Signal;
//! // Timeout use: a bucket counts from 1.5 points up, a warning needs 3.
//! assert_eq!(Signal::RequestTimeoutUse.min_shift(), 0.03);
//! ```
//!
//! *A young baseline.* `σ²` and `τ²` estimated from `B` buckets have
//! `ν = B − 1` degrees of freedom; a bucket compared with them follows
//! Student's `t` with `ν` degrees of freedom, not a normal, and its
//! variance is `ν / (ν − 2)` times larger: `c = ν / (ν − 2)`, 1.4 for the
//! 4 minutes a collector with nothing to replay arms on, 1.02 for an hour.
//! Four minutes of history are never trusted like 55.
//!
//! *Counts.* The queue depth is a count of waiting requests: its variance
//! is at least its mean (Poisson; a real queue is burstier, never
//! steadier), so a bucket's error is at least `√(max(μ, 1) / nᵢ)` — the
//! noise of a count at the baseline's level, and of one request when the
//! queue was empty — whatever the baseline's own spread showed. A queue
//! that was empty for an hour and then holds three requests for half a
//! minute is one bucket at `z ≈ 3`, not a warning; a queue that keeps
//! growing is.
//!
//! *Sparse series.* A bucket of a request or call signal is tested once
//! it holds [`Signal::min_items`] (5): the mean of one or two skewed
//! values is no normal variate, and a lone slow request on a quiet flow
//! would read as many standard errors. A sparse series' buckets are
//! merged, oldest first, until they hold that many.
//!
//! Each signal is tested over everything and over each of its
//! [`TOP_KEYS`] busiest keys (routes, flows, call targets, models, model
//! servers: [`super::series::Keyed`]); the detection reported is the one furthest
//! along (a relevant one first), naming its key. More series tested means
//! more chances for noise to cross: a key's statistic pays [`key_penalty`]
//! before it is compared (the CUSUM's false-alarm rate falls as
//! `e^(-2kh)`, so adding `ln(n) / 2k` to the threshold of each of `n`
//! series keeps the rate of the whole family that of one).
//!
//! The baseline is every bucket before the test span still held (up to
//! `baseline_window_s`), once it has [`MIN_BASELINE_BUCKETS`] buckets with
//! [`MIN_BASELINE_ITEMS`] items: a collector with nothing to replay is
//! armed once it holds 5 minutes (4 of baseline, 2 buckets to test), and
//! says the baseline was 4 minutes. The test
//! span is 4 minutes ([`CUSUM_BUCKETS`]): long enough for a creep's small
//! excesses to add up, short enough that the baseline a ramp is compared
//! with is the recent past, not the hour before it.

use super::series::{Moments, Signal};
use super::{BUCKET_S, Early};
use serde::Serialize;
use std::collections::BTreeMap;

/// Buckets (30 s) the statistic runs over: 4 minutes.
pub const CUSUM_BUCKETS: usize = 8;
/// Buckets of history with data before a signal is armed: 4 minutes.
pub const MIN_BASELINE_BUCKETS: usize = 8;
/// Items the baseline needs.
pub const MIN_BASELINE_ITEMS: f64 = 30.0;
/// The bucket still filling counts once it has this many items (a few
/// slow requests at its start are no trend yet).
pub const MIN_CURRENT_ITEMS: f64 = 5.0;
/// The allowance `k`, in standard errors per bucket.
pub const ALLOWANCE: f64 = 0.5;
/// Keys per signal tested besides the signal over everything: the
/// busiest over the history held.
pub const TOP_KEYS: usize = 4;

/// What a key's statistic pays: `ln(TOP_KEYS + 1) / (2 × ALLOWANCE)`, the
/// threshold's rise that keeps the false-alarm rate of the signal's
/// `TOP_KEYS + 1` series that of one.
pub fn key_penalty() -> f64 {
    ((TOP_KEYS + 1) as f64).ln() / (2.0 * ALLOWANCE)
}

/// One signal's fast detector at an evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Detection {
    /// The signal.
    pub signal: Signal,
    /// The route, call target, model or model server whose own series
    /// this is (`None`: over everything).
    pub key: Option<String>,
    /// The CUSUM statistic (standard errors beyond the allowance, summed);
    /// a key's less [`key_penalty`].
    pub stat: f64,
    /// The mean over the buckets since the statistic last left 0 (`None`:
    /// it is 0).
    pub recent: Option<f64>,
    /// Items behind `recent`.
    pub recent_items: u64,
    /// Nominal seconds behind `recent`.
    pub recent_s: f64,
    /// The baseline mean.
    pub baseline: f64,
    /// A [`Signal::per_bucket`] signal: its largest bucket in the baseline
    /// (the most the model served), whose half is the minimum shift.
    pub baseline_peak: Option<f64>,
    /// Items behind it.
    pub baseline_items: u64,
    /// Nominal seconds of history it spans.
    pub baseline_s: f64,
    /// The baseline is shorter than `baseline_window_s`: all the history
    /// held (a collector that started recently).
    pub baseline_short: bool,
    /// `recent` is at least the signal's minimum shift above `baseline`:
    /// a rise worth a warning, whatever `stat` says of its significance.
    pub relevant: bool,
}

impl Detection {
    /// Is `self` further along than `other`: relevant before not, then
    /// the larger statistic.
    fn ahead_of(&self, other: &Detection) -> bool {
        (self.relevant, self.stat) > (other.relevant, other.stat)
    }
}

impl Early {
    /// Every armed signal's detector at `now_us`.
    pub(crate) fn detections(&self, now_us: i64, baseline_buckets: usize) -> Vec<Detection> {
        let cur = self.ring.index_of(now_us);
        let entries: Vec<(usize, &super::Tally)> = self
            .ring
            .entries()
            .into_iter()
            .filter(|(i, _)| *i <= cur && cur - *i < self.ring.len() as i64)
            .map(|(i, t)| ((cur - i) as usize, t))
            .collect();
        // (buckets back from now, moments), newest first.
        let points = |get: &dyn Fn(&super::Tally) -> Option<Moments>| {
            let mut pts: Vec<(usize, Moments)> = entries
                .iter()
                .filter_map(|(b, t)| get(t).filter(|m| m.n > 0.0).map(|m| (*b, m)))
                .collect();
            pts.sort_by_key(|p| p.0);
            pts
        };
        Signal::ALL
            .iter()
            .filter_map(|s| {
                let k = s.index();
                let mut best = detect(
                    *s,
                    &per_bucket(*s, points(&|t| Some(t.series[k]))),
                    baseline_buckets,
                );
                let mut busy: BTreeMap<&str, Moments> = BTreeMap::new();
                let mut all = Moments::default();
                for (_, t) in &entries {
                    all.merge(&t.series[k]);
                    for ((sig, key), m) in &t.keyed.0 {
                        if sig == s {
                            busy.entry(key.as_str()).or_default().merge(m);
                        }
                    }
                }
                // One key: its series is the one over everything.
                let several = busy.len() > 1;
                let mut keys: Vec<(&str, Moments)> = busy
                    .into_iter()
                    .filter(|(_, m)| !s.at_risk_keys_only() || m.mean() >= all.mean())
                    .collect();
                keys.sort_by(|a, b| b.1.n.total_cmp(&a.1.n).then(a.0.cmp(b.0)));
                keys.truncate(TOP_KEYS);
                for (key, _) in keys.iter().filter(|_| several) {
                    let id = (*s, key.to_string());
                    let pts = per_bucket(*s, points(&|t| t.keyed.0.get(&id).copied()));
                    let Some(d) = detect(*s, &pts, baseline_buckets) else {
                        continue;
                    };
                    let d = Detection {
                        key: Some(key.to_string()),
                        stat: d.stat - key_penalty(),
                        ..d
                    };
                    if best.as_ref().is_none_or(|b| d.ahead_of(b)) {
                        best = Some(d);
                    }
                }
                best
            })
            .collect()
    }
}

/// A [`Signal::per_bucket`] signal's points as one item a bucket (its
/// total), the bucket still filling left out; others as they are.
fn per_bucket(signal: Signal, pts: Vec<(usize, Moments)>) -> Vec<(usize, Moments)> {
    if !signal.per_bucket() {
        return pts;
    }
    pts.into_iter()
        .filter(|(back, _)| *back > 0)
        .map(|(back, m)| {
            let mut one = Moments::default();
            one.add(m.sum);
            (back, one)
        })
        .collect()
}

/// The detector of `signal` over `pts` (buckets back from now with their
/// moments, newest first).
fn detect(signal: Signal, pts: &[(usize, Moments)], baseline_max: usize) -> Option<Detection> {
    let oldest = pts.last()?.0;
    let span = (oldest + 1).saturating_sub(MIN_BASELINE_BUCKETS);
    let m = span.min(CUSUM_BUCKETS);
    if m < 2 {
        return None;
    }
    let base: Vec<Moments> = pts
        .iter()
        .filter(|(b, _)| *b >= m && *b < m + baseline_max)
        .map(|p| p.1)
        .collect();
    let mut b = Moments::default();
    for x in &base {
        b.merge(x);
    }
    let min_items = if signal.per_bucket() {
        0.0
    } else {
        MIN_BASELINE_ITEMS
    };
    if base.len() < MIN_BASELINE_BUCKETS || b.n < min_items {
        return None;
    }
    let mu = b.sum / b.n;
    let var = b.variance();
    // One-way random effects: the between-bucket variance beyond what
    // sampling explains (method of moments).
    let between: f64 = base.iter().map(|x| x.n * (x.sum / x.n - mu).powi(2)).sum();
    let denom = b.n - base.iter().map(|x| x.n * x.n).sum::<f64>() / b.n;
    let tau2 = if denom > 0.0 {
        ((between - (base.len() as f64 - 1.0) * var) / denom).max(0.0)
    } else {
        0.0
    };
    // A total's shift is a share of the most the baseline saw (at least 1).
    let peak = signal
        .per_bucket()
        .then(|| base.iter().map(|x| x.sum).fold(0.0, f64::max));
    let delta = signal.min_shift() * peak.map_or(1.0, |p| p.max(1.0));
    let reference = mu + delta / 2.0;
    let floor = delta / 4.0;
    // Student's t with ν = B − 1: its variance is ν / (ν − 2) (B ≥ 8).
    let nu = base.len() as f64 - 1.0;
    let young = nu / (nu - 2.0);
    let (mut stat, mut run) = (0.0f64, Moments::default());
    let mut run_from = 0;
    // Oldest first; a sparse bucket waits for the ones after it until
    // they hold the signal's `min_items` together.
    let (mut pending, mut pending_from) = (Moments::default(), None);
    let tested = pts
        .iter()
        .rev()
        .filter(|(b, x)| *b < m && (*b > 0 || x.n >= MIN_CURRENT_ITEMS));
    for (back, x) in tested {
        pending.merge(x);
        let from = *pending_from.get_or_insert(*back);
        if pending.n < signal.min_items() {
            continue;
        }
        let x = std::mem::take(&mut pending);
        pending_from = None;
        let mean = x.sum / x.n;
        let mut se2 = (var / x.n + tau2 + var / b.n) * young;
        if signal == Signal::QueueDepth {
            // A count: at least Poisson's noise at the baseline's level
            // (one request when it was empty).
            se2 = se2.max(mu.max(1.0) / x.n);
        }
        let z = (mean - reference) / se2.sqrt().max(floor);
        let next = stat + z - ALLOWANCE;
        if next <= 0.0 {
            stat = 0.0;
            run = Moments::default();
        } else {
            if stat == 0.0 {
                run_from = from;
            }
            stat = next;
            run.merge(&x);
        }
    }
    let baseline_s = pts
        .iter()
        .filter(|(b, _)| *b >= m && *b < m + baseline_max)
        .map(|p| p.0 + 1 - m)
        .max()
        .unwrap_or(0) as f64
        * BUCKET_S;
    Some(Detection {
        signal,
        key: None,
        stat,
        recent: run.mean(),
        recent_items: run.n as u64,
        recent_s: (run_from + 1) as f64 * BUCKET_S,
        baseline: mu,
        baseline_peak: peak,
        baseline_items: b.n as u64,
        baseline_s,
        baseline_short: oldest + 1 < m + baseline_max,
        relevant: run.mean().is_some_and(|r| r - mu >= delta),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` items per bucket at `mean` ± `sd` (alternating), `back` buckets
    /// from now.
    fn bucket(back: usize, n: usize, mean: f64, sd: f64) -> (usize, Moments) {
        let mut m = Moments::default();
        for i in 0..n {
            m.add(mean + if i % 2 == 0 { sd } else { -sd });
        }
        (back, m)
    }

    fn run(levels: &[f64]) -> Option<Detection> {
        run_sd(levels, 0.1)
    }

    /// Oldest first in `levels`; the last is the current bucket. 15
    /// items a bucket at ± `sd`.
    fn run_sd(levels: &[f64], sd: f64) -> Option<Detection> {
        let n = levels.len();
        let pts: Vec<(usize, Moments)> = levels
            .iter()
            .enumerate()
            .map(|(i, x)| bucket(n - 1 - i, 15, *x, sd))
            .rev()
            .collect();
        detect(Signal::RequestTimeoutUse, &pts, 110)
    }

    #[test]
    fn a_steep_rise_crosses_in_a_bucket_or_two_and_noise_never() {
        let mut flat = vec![0.4; 40];
        let d = run(&flat).unwrap();
        assert_eq!(d.stat, 0.0);
        assert!(!d.baseline_short || d.baseline_s > 0.0);
        flat.extend([0.55, 0.7]);
        let d = run(&flat).unwrap();
        assert!(d.stat >= 5.0, "{d:?}");
        assert_eq!(d.recent_s, 60.0, "{d:?}");
    }

    #[test]
    fn a_slow_creep_adds_up() {
        let mut v = vec![0.4; 40];
        // +0.02 per bucket: 4 points a minute.
        let creep: Vec<f64> = (1..=8).map(|i| 0.4 + 0.02 * i as f64).collect();
        v.extend(&creep[..3]);
        assert!(
            run(&v).unwrap().stat < 5.0,
            "not yet past the minimum shift"
        );
        v.extend(&creep[3..]);
        assert!(run(&v).unwrap().stat >= 5.0, "{:?}", run(&v));
    }

    /// The queue depth's series: `base` buckets of 2 scrapes at 0 waiting,
    /// then `tail` (the depth of each later bucket's 2 scrapes).
    fn queue(base: usize, tail: &[f64]) -> Option<Detection> {
        let mut levels = vec![0.0; base];
        levels.extend(tail);
        let n = levels.len();
        let pts: Vec<(usize, Moments)> = levels
            .iter()
            .enumerate()
            .map(|(i, x)| bucket(n - 1 - i, 2, *x, 0.0))
            .rev()
            .collect();
        detect(Signal::QueueDepth, &pts, 110)
    }

    #[test]
    fn a_silent_queue_bursting_for_half_a_minute_does_not_warn_and_a_growing_one_does() {
        // An hour of an empty queue, then 3 waiting for one bucket (the
        // bucket still filling, 2 scrapes, is not counted yet): a burst.
        let d = queue(120, &[3.0, 0.0]).unwrap();
        assert!(d.stat > 0.0 && d.stat < 5.0, "{d:?}");
        for quiet in 2..5 {
            let mut tail = vec![3.0];
            tail.extend(vec![0.0; quiet]);
            let d = queue(120, &tail).unwrap();
            assert!(d.stat < 5.0, "{d:?}");
        }
        let d = queue(120, &[3.0, 0.0, 0.0, 0.0, 0.0]).unwrap();
        assert_eq!(d.stat, 0.0, "gone after a minute and a half: {d:?}");
        // Without the count's own noise, the empty baseline's error would
        // be its floor (a quarter of a request) and that burst a warning.
        // A queue that keeps growing: 2, 4, 8 waiting.
        let d = queue(120, &[2.0, 4.0, 8.0, 0.0]).unwrap();
        assert!(d.stat >= 5.0 && d.relevant, "{d:?}");
    }

    #[test]
    fn a_rise_counts_from_half_the_minimum_shift_and_warns_only_past_the_whole() {
        // A steady series: 2.5 points up (half of 3 is 1.5) is
        // significant, bucket after bucket…
        let mut v = vec![0.4; 40];
        v.extend([0.425; 8]);
        let d = run_sd(&v, 0.02).unwrap();
        assert!(d.stat >= 5.0, "{d:?}");
        // …but an excursion averaging less than 3 points is no warning,
        // however long.
        assert!(!d.relevant, "{d:?}");
        let mut v = vec![0.4; 40];
        v.extend([0.435; 4]);
        let d = run_sd(&v, 0.02).unwrap();
        assert!(d.relevant && d.stat >= 5.0, "{d:?}");
    }

    /// A sparse series: an hour of buckets of 2 requests at 7.5 % ± 1
    /// point, then the 4 minutes tested (`tail`, each bucket's requests;
    /// the last is the one still filling).
    fn sparse(tail: [&[f64]; CUSUM_BUCKETS]) -> Option<Detection> {
        let mut pts: Vec<(usize, Moments)> = (CUSUM_BUCKETS..CUSUM_BUCKETS + 110)
            .map(|back| bucket(back, 2, 0.075, 0.01))
            .collect();
        for (j, xs) in tail.iter().enumerate() {
            let mut m = Moments::default();
            xs.iter().for_each(|x| m.add(*x));
            pts.push((CUSUM_BUCKETS - 1 - j, m));
        }
        pts.sort_by_key(|p| p.0);
        detect(Signal::RequestTimeoutUse, &pts, 110)
    }

    #[test]
    fn a_sparse_series_waits_for_five_requests_so_one_slow_request_is_no_trend() {
        let usual: &[f64] = &[0.065, 0.075, 0.085];
        // One request at 16 %: 8 standard errors of a bucket of one, but
        // one slow request.
        let one = [usual, usual, usual, usual, usual, usual, &[0.16], &[]];
        let d = sparse(one).unwrap();
        assert_eq!(d.stat, 0.0, "{d:?}");
        // Five of them, over three buckets, are a trend.
        let five = [
            usual,
            usual,
            usual,
            usual,
            &[0.16],
            &[0.16, 0.16],
            &[0.16, 0.16],
            &[],
        ];
        let d = sparse(five).unwrap();
        assert!(d.stat >= 5.0 && d.relevant, "{d:?}");
        assert_eq!((d.recent_items, d.recent_s), (5, 120.0), "{d:?}");
    }

    #[test]
    fn a_young_baseline_is_trusted_less_than_a_long_one() {
        // The same rise after 4 minutes of history and after 55.
        let rise = [0.43, 0.44];
        let mut young = vec![0.4; 8 + CUSUM_BUCKETS - rise.len()];
        young.extend(rise);
        let mut old = vec![0.4; 110 + CUSUM_BUCKETS - rise.len()];
        old.extend(rise);
        let (y, o) = (run(&young).unwrap(), run(&old).unwrap());
        assert!(y.baseline_short && !o.baseline_short);
        assert!(y.stat < o.stat, "young {y:?}\nold {o:?}");
    }

    #[test]
    fn a_short_history_arms_after_four_minutes_and_says_how_long_it_was() {
        assert!(run(&[0.4; 9]).is_none(), "4.5 min: 1 bucket to test");
        let d = run(&[0.4; 14]).unwrap();
        assert!(d.baseline_short);
        assert_eq!(d.baseline_s, 4.0 * 60.0, "{d:?}");
    }
}
