//! Numbers as evidence and headlines print them: durations ≥ 1 s as
//! `2.8 s`, shorter ones as `320 ms`; shares as `73 %`.

/// ```
/// use overtime_diagnose::fmt::dur;
/// assert_eq!(dur(2800.0), "2.8 s");
/// assert_eq!(dur(10_000.0), "10.0 s");
/// assert_eq!(dur(320.4), "320 ms");
/// ```
pub fn dur(ms: f64) -> String {
    if ms.abs() >= 999.5 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        format!("{:.0} ms", ms)
    }
}

/// ```
/// assert_eq!(overtime_diagnose::fmt::pct(0.734), "73 %");
/// ```
pub fn pct(share: f64) -> String {
    format!("{:.0} %", share * 100.0)
}

/// A duration or "none".
pub(crate) fn dur_or_none(ms: Option<f64>) -> String {
    ms.map(dur).unwrap_or_else(|| "none".into())
}

/// Percentile by nearest rank over unsorted values (`q` in 0..=1).
pub(crate) fn percentile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}

/// Median (nearest rank, lower middle).
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    percentile(values, 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn percentiles() {
        let v: Vec<f64> = (1..=100).map(|x| x as f64).collect();
        assert_eq!(percentile(&v, 0.5), Some(50.0));
        assert_eq!(percentile(&v, 0.9), Some(90.0));
        assert_eq!(percentile(&v, 0.99), Some(99.0));
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(median(&[412.0, 380.0, 450.0]), Some(412.0));
    }
}
