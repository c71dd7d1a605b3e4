//! How far a short window is from its baseline, in standard errors: the
//! z-tests behind every early-warning alert.

use super::Tally;

/// Two-sample z for proportions: (p1 − p2) / pooled standard error.
pub(super) fn z_prop(k1: u64, n1: u64, k2: u64, n2: u64) -> Option<f64> {
    if n1 == 0 || n2 == 0 {
        return None;
    }
    let (p1, p2) = (k1 as f64 / n1 as f64, k2 as f64 / n2 as f64);
    let p = (k1 + k2) as f64 / (n1 + n2) as f64;
    let se = (p * (1.0 - p) * (1.0 / n1 as f64 + 1.0 / n2 as f64)).sqrt();
    Some(if se > 0.0 { (p1 - p2) / se } else { 0.0 })
}

/// The sums behind a ratio of sums R = Σw / Σt over n calls.
#[derive(Debug, Clone, Copy)]
pub(super) struct RatioSums {
    n: u64,
    w: f64,
    t: f64,
    ww: f64,
    wt: f64,
    tt: f64,
}

impl RatioSums {
    pub(super) fn of(t: &Tally) -> Self {
        RatioSums {
            n: t.llm_calls,
            w: t.wait_ms().min(t.llm_ms),
            t: t.llm_ms,
            ww: t.wait_sq,
            wt: t.wait_time,
            tt: t.time_sq,
        }
    }

    /// R and its variance by the delta method:
    /// Σ(wᵢ − R tᵢ)² / (Σt)², with n / (n − 1) for the sample.
    fn ratio_and_variance(&self) -> (f64, f64) {
        let r = self.w / self.t;
        let n = self.n as f64;
        let ss = (self.ww - 2.0 * r * self.wt + r * r * self.tt).max(0.0);
        (r, ss / (self.t * self.t) * n / (n - 1.0))
    }
}

/// z for the difference of two ratios of sums (the wait share of LLM
/// time, weighted by duration as the value is): long calls count for
/// their length, so a few long waits move it as they move the share.
pub(super) fn z_ratio(a: RatioSums, b: RatioSums) -> Option<f64> {
    if a.n < 2 || b.n < 2 || a.t <= 0.0 || b.t <= 0.0 {
        return None;
    }
    let ((ra, va), (rb, vb)) = (a.ratio_and_variance(), b.ratio_and_variance());
    // Shares are in [0, 1]: a floor on the error keeps two flat windows
    // from looking infinitely different.
    let se = (va + vb).sqrt().max(1e-3);
    Some((ra - rb) / se)
}

#[cfg(test)]
mod tests {
    use super::super::classify::LlmWait;
    use super::super::{Answer, Chain, Signals};
    use super::*;

    #[test]
    fn z_tests_separate_a_real_change_from_noise() {
        // 96 % of 600 vs 89 % of 150: clearly lower.
        let z = z_prop(576, 600, 133, 150).unwrap();
        assert!(z > 3.0, "{z}");
        // 92 % vs 90 % of 50: noise.
        let z = z_prop(552, 600, 45, 50).unwrap();
        assert!(z.abs() < 1.0, "{z}");
        assert_eq!(z_prop(0, 0, 1, 2), None);
        assert_eq!(z_prop(0, 0, 1, 2), None);
    }

    fn tally(calls: &[(f64, f64)]) -> Tally {
        let mut t = Tally::default();
        for &(wait, total) in calls {
            t.add(&Signals {
                llm: vec![LlmWait {
                    queue_ms: wait,
                    prefill_ms: 0.0,
                    first_token_ms: 0.0,
                    total_ms: total,
                    from_phases: true,
                    call: 0,
                }],
                chain: Chain::Healthy,
                answer: Answer::Success,
                failed_call: false,
                retried: false,
                fell_back: false,
                lost_call: false,
                judged_low: false,
                timed: Vec::new(),
                call_use: Vec::new(),
            });
        }
        t
    }

    #[test]
    fn the_wait_share_z_weighs_calls_by_their_length() {
        // 30 calls of 10 s waiting 3 ± 1 s, then 30 waiting 6 ± 1 s: a
        // share of 0.3 vs 0.6, far apart.
        let calm: Vec<(f64, f64)> = (0..30)
            .map(|i| (3000.0 + if i % 2 == 0 { 1000.0 } else { -1000.0 }, 10_000.0))
            .collect();
        let busy: Vec<(f64, f64)> = calm.iter().map(|(w, t)| (w + 3000.0, *t)).collect();
        let (a, b) = (RatioSums::of(&tally(&busy)), RatioSums::of(&tally(&calm)));
        assert!(z_ratio(a, b).unwrap() > 5.0);
        assert!(z_ratio(b, b).unwrap().abs() < 1e-9);
        // Many short calls that wait, among long ones that do not: the
        // share of time hardly moves when one short call more waits.
        let mut mixed: Vec<(f64, f64)> = (0..20).map(|_| (1000.0, 60_000.0)).collect();
        mixed.extend((0..20).map(|_| (400.0, 500.0)));
        let mut one_more = mixed.clone();
        one_more[0] = (1000.0, 60_000.0);
        one_more[20] = (500.0, 500.0);
        let z = z_ratio(
            RatioSums::of(&tally(&one_more)),
            RatioSums::of(&tally(&mixed)),
        )
        .unwrap();
        assert!(z.abs() < 1.0, "{z}");
        assert_eq!(z_ratio(RatioSums::of(&tally(&[(1.0, 2.0)])), b), None);
    }
}
