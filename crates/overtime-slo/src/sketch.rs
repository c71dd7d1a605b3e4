//! A bounded quantile sketch: log-spaced bins with 1 % relative accuracy
//! (the DDSketch idea), stored sparsely. A sketch never holds more than
//! [`MAX_BINS`] bins whatever it is fed, so a 3-day window costs the same
//! as a 5-minute one.

/// Bin growth factor: a quantile is returned within ±1 % of a true sample.
const GAMMA: f64 = 1.02;
/// Values at or below this (ms) share the lowest bin.
const MIN_VALUE: f64 = 0.01;
/// Values above this (30 days in ms) share the highest bin.
const MAX_VALUE: f64 = 30.0 * 24.0 * 3600.0 * 1000.0;
/// Upper bound on the number of bins of one sketch.
pub const MAX_BINS: usize = 1400;

fn ln_gamma() -> f64 {
    GAMMA.ln()
}

fn bin_of(v: f64) -> i16 {
    let v = if v.is_finite() { v } else { MAX_VALUE };
    let v = v.clamp(MIN_VALUE, MAX_VALUE);
    (v.ln() / ln_gamma()).ceil() as i16
}

fn value_of(bin: i16) -> f64 {
    // The middle of (γ^(i-1), γ^i] in the relative sense.
    2.0 * GAMMA.powi(bin as i32) / (GAMMA + 1.0)
}

/// Sparse log-binned counts of positive values (milliseconds by convention).
///
/// ```
/// use overtime_slo::LogSketch;
/// let mut s = LogSketch::default();
/// for ms in 1..=100 { s.add(ms as f64 * 10.0); }
/// let p99 = s.quantile(0.99).unwrap();
/// assert!((p99 - 990.0).abs() / 990.0 < 0.011, "{p99}");
/// assert_eq!(s.count(), 100);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogSketch {
    /// (bin, count), sorted by bin.
    bins: Vec<(i16, u32)>,
    count: u64,
}

impl LogSketch {
    /// Adds one value; NaN is ignored, negatives count as the lowest bin.
    pub fn add(&mut self, v: f64) {
        if v.is_nan() {
            return;
        }
        let b = bin_of(v);
        match self.bins.binary_search_by_key(&b, |x| x.0) {
            Ok(i) => self.bins[i].1 = self.bins[i].1.saturating_add(1),
            Err(i) => self.bins.insert(i, (b, 1)),
        }
        self.count += 1;
    }

    /// Values added.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// No value added yet?
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &LogSketch) {
        if other.bins.is_empty() {
            return;
        }
        let mut out = Vec::with_capacity(self.bins.len() + other.bins.len());
        let (mut i, mut j) = (0, 0);
        while i < self.bins.len() || j < other.bins.len() {
            let a = self.bins.get(i);
            let b = other.bins.get(j);
            match (a, b) {
                (Some(x), Some(y)) if x.0 == y.0 => {
                    out.push((x.0, x.1.saturating_add(y.1)));
                    i += 1;
                    j += 1;
                }
                (Some(x), Some(y)) if x.0 < y.0 => {
                    out.push(*x);
                    i += 1;
                }
                (Some(_), Some(y)) | (None, Some(y)) => {
                    out.push(*y);
                    j += 1;
                }
                (Some(x), None) => {
                    out.push(*x);
                    i += 1;
                }
                (None, None) => break,
            }
        }
        self.bins = out;
        self.count += other.count;
    }

    /// The `q` quantile (nearest rank), within 1 % of a sample; `None`
    /// when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (b, c) in &self.bins {
            seen += *c as u64;
            if seen >= rank {
                return Some(value_of(*b));
            }
        }
        self.bins.last().map(|(b, _)| value_of(*b))
    }

    /// Bins in use (never more than [`MAX_BINS`]).
    pub fn bins(&self) -> usize {
        self.bins.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_within_one_percent() {
        let mut s = LogSketch::default();
        // seed incident 000, <50 tokens: P50 1.2 s, P99 5.1 s, max 12.3 s.
        for _ in 0..50 {
            s.add(1200.0);
        }
        for _ in 0..49 {
            s.add(2800.0);
        }
        s.add(12_300.0);
        let p50 = s.quantile(0.5).unwrap();
        assert!((p50 - 1200.0).abs() / 1200.0 <= 0.01, "{p50}");
        let p99 = s.quantile(0.99).unwrap();
        assert!((p99 - 2800.0).abs() / 2800.0 <= 0.01, "{p99}");
        let max = s.quantile(1.0).unwrap();
        assert!((max - 12_300.0).abs() / 12_300.0 <= 0.01, "{max}");
        assert_eq!(LogSketch::default().quantile(0.99), None);
    }

    #[test]
    fn merge_equals_adding_everything() {
        let (mut a, mut b, mut all) = (
            LogSketch::default(),
            LogSketch::default(),
            LogSketch::default(),
        );
        for i in 0..500 {
            let v = (i * 37 % 1000) as f64 + 0.5;
            if i % 3 == 0 {
                a.add(v)
            } else {
                b.add(v)
            }
            all.add(v);
        }
        a.merge(&b);
        assert_eq!(a, all);
    }

    #[test]
    fn bounded_whatever_the_input() {
        let mut s = LogSketch::default();
        for v in [f64::INFINITY, -5.0, 0.0, 1e300, f64::MIN_POSITIVE] {
            s.add(v);
        }
        s.add(f64::NAN);
        assert_eq!(s.count(), 5);
        let mut v = 0.001;
        while v < 1e12 {
            s.add(v);
            v *= 1.001;
        }
        assert!(s.bins() <= MAX_BINS, "{}", s.bins());
    }
}
