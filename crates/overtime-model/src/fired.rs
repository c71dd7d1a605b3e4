//! Timeouts that fired, read from the attempts' durations: a client
//! timeout makes every attempt it cuts last the same time, so attempts
//! that got no answer and cluster at one duration are a timeout that
//! fired (overtime-advise's `fired` module has the rules; the live early
//! warning in overtime-slo learns observed timeouts with the same
//! clustering).
//!
//! ```
//! use overtime_model::fired_cluster;
//! let (t, n) = fired_cluster(&[1_498.0, 1_503.0, 1_512.0, 40.0]).unwrap();
//! assert_eq!((t, n), (1_503.0, 3));
//! ```

/// The densest cluster of `durations` (±2 %, at least ±20 ms around its
/// first member): its median and size, when it has at least three.
pub fn fired_cluster(durations: &[f64]) -> Option<(f64, usize)> {
    let mut v: Vec<f64> = durations
        .iter()
        .copied()
        .filter(|d| d.is_finite())
        .collect();
    v.sort_by(f64::total_cmp);
    let mut best = (0, 0);
    let mut j = 0;
    for i in 0..v.len() {
        j = j.max(i);
        let hi = v[i] + (v[i] * 0.02).max(20.0);
        while j + 1 < v.len() && v[j + 1] <= hi {
            j += 1;
        }
        if j + 1 - i > best.1 - best.0 {
            best = (i, j + 1);
        }
    }
    let n = best.1 - best.0;
    (n >= 3).then(|| v[best.0 + (n - 1) / 2]).map(|m| (m, n))
}
