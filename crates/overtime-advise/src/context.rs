//! What the replay learns from the traces before it replays any: each
//! model's latency law, each component's censored tail, how a service
//! shares its remaining budget out to calls, each component's timeout cap,
//! whether it retries after a timeout, and what its fallback costs.

use crate::advice::{fit_models, km_miss};
use crate::extract::{CallFacts, Class, Dataset, End};
use crate::latency_model::LatencyModel;
use crate::lognormal::{self, LogNormal, TailFit};
use crate::stats::KaplanMeier;
use crate::stats::{Obs, Rng, percentile};
use overtime_diagnose::bucket_of;
use std::collections::BTreeMap;

/// The laws and habits the replay needs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Context {
    /// Model → (law, whether `load` is gpu_load).
    pub(crate) models: BTreeMap<String, (LatencyModel, bool)>,
    /// Component → its censored log-normal tail.
    pub(crate) tails: BTreeMap<String, TailFit>,
    /// (model, input-token bucket) → its own tail, when that follows the
    /// bucket's Kaplan–Meier curve better than the model's law does.
    pub(crate) bucket_tails: BTreeMap<(String, usize), LogNormal>,
    /// Gateway layer → tail of its request times (504s censored).
    pub(crate) layer_tails: BTreeMap<String, TailFit>,
    /// The share of the remaining budget a call of this class gets, when
    /// the traces show such a rule.
    pub(crate) budget_share: BTreeMap<Class, f64>,
    /// Component → the timeout it gets when the budget does not bind.
    pub(crate) cap: BTreeMap<String, f64>,
    /// Components seen retrying after one of their attempts timed out.
    pub(crate) retry_on_timeout: BTreeMap<String, bool>,
    /// Component → median time its fallback took.
    pub(crate) fallback_ms: BTreeMap<String, f64>,
    /// Gateway layer → today's read timeout (configured or inferred).
    pub(crate) layer_timeout: BTreeMap<String, f64>,
    /// Services seen giving up at their budget (a deadline watchdog), with
    /// how long after the budget their answer came (ms, median).
    pub(crate) deadline: BTreeMap<String, f64>,
    /// Services whose failure answers never reached the gateway: it timed
    /// out although they had answered (seed 000's "information black hole").
    pub(crate) masks: BTreeMap<String, usize>,
    /// Component → how its client retries (components seen retrying).
    pub(crate) retry: BTreeMap<String, crate::retry::RetryRule>,
}

/// The densest cluster of timeout/remaining ratios (±2 %), if it holds
/// a good share of them and the ratio in it is steadier than the timeouts
/// themselves: a share of what remains keeps the ratio exact while the
/// timeouts follow the remaining budget; a fixed timeout under a barely
/// used budget keeps the timeout exact while the ratio drifts. Timeouts
/// that differ at all (beyond a hundred-thousandth: no configured value
/// does) while the ratio holds four times steadier are a share, however
/// steady the step before them keeps the remaining budget.
fn share_rule(pairs: &[(f64, f64)]) -> Option<f64> {
    if pairs.len() < 5 {
        return None;
    }
    let mut sorted = pairs.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let v: Vec<f64> = sorted.iter().map(|p| p.0).collect();
    let mut best = (0, 0);
    let mut j = 0;
    for i in 0..v.len() {
        j = j.max(i);
        while j + 1 < v.len() && v[j + 1] <= v[i] * 1.02 {
            j += 1;
        }
        if j + 1 - i > best.1 - best.0 {
            best = (i, j + 1);
        }
    }
    let n = best.1 - best.0;
    let spread = |it: &mut dyn Iterator<Item = f64>| {
        let (lo, hi) = it.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), x| {
            (l.min(x), h.max(x))
        });
        hi / lo - 1.0
    };
    let cluster = &sorted[best.0..best.1];
    let t_spread = spread(&mut cluster.iter().map(|p| p.1));
    let r_spread = spread(&mut cluster.iter().map(|p| p.0));
    let steadier = t_spread > 1e-5 && r_spread * 4.0 < t_spread;
    (n >= 5 && n * 10 >= v.len() * 3 && steadier).then(|| v[best.0 + n / 2])
}

impl Context {
    pub(crate) fn learn(ds: &Dataset) -> Context {
        let mut cx = Context {
            models: fit_models(ds),
            ..Default::default()
        };
        let mut by_comp: BTreeMap<&str, Vec<&CallFacts>> = BTreeMap::new();
        let mut ratios: BTreeMap<Class, Vec<(f64, f64)>> = BTreeMap::new();
        for t in &ds.traces {
            for c in &t.calls {
                by_comp.entry(c.component.as_str()).or_default().push(c);
                if let (Some(to), Some(rem), false) =
                    (c.timeout_ms, c.remaining_budget_ms, c.timeout_observed)
                    && rem > 0.0
                    && to < rem * 0.999
                {
                    ratios.entry(c.class).or_default().push((to / rem, to));
                }
            }
        }
        let mut late: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for t in &ds.traces {
            let (Some(svc), Some(end), Some(st)) = (&t.service, t.service_end_ms, t.service_status)
            else {
                continue;
            };
            if st < 500 {
                continue;
            }
            if let Some(b) = t.budget_ms
                && (end - b).abs() <= (b * 0.03).max(500.0)
            {
                late.entry(svc.as_str()).or_default().push(end - b);
            }
            if t.outcome == overtime_model::Outcome::GatewayTimeout
                && end < t.elapsed_ms * 0.95
                && t.stream_gap_ms.is_none()
            {
                *cx.masks.entry(svc.clone()).or_default() += 1;
            }
        }
        for (svc, v) in late {
            if let Some(m) = percentile(&v, 0.5) {
                cx.deadline.insert(svc.to_string(), m.max(0.0));
            }
        }
        for (cls, r) in &ratios {
            if let Some(f) = share_rule(r) {
                cx.budget_share.insert(*cls, f);
            }
        }
        cx.learn_buckets(&by_comp, ds);
        for (comp, calls) in &by_comp {
            let same = ds.repeats_work(comp);
            let obs: Vec<Obs> = calls.iter().flat_map(|c| c.latency_obs(same)).collect();
            if let Some(f) = lognormal::fit(&obs) {
                cx.tails.insert(comp.to_string(), f);
            }
            // The cap: the largest timeout not bound by the budget share.
            let share = cx.budget_share.get(&calls[0].class).copied();
            let caps: Vec<f64> = calls
                .iter()
                .filter(|c| !c.timeout_observed)
                .filter_map(|c| {
                    let to = c.timeout_ms?;
                    match (share, c.remaining_budget_ms) {
                        (Some(f), Some(rem)) if to >= f * rem * 0.98 => None,
                        _ => Some(to),
                    }
                })
                .collect();
            if let Some(cap) = caps.iter().copied().reduce(f64::max) {
                cx.cap.insert(comp.to_string(), cap);
            }
            let retries = calls
                .iter()
                .any(|c| c.attempts.windows(2).any(|w| w[0].end == End::TimedOut));
            cx.retry_on_timeout.insert(comp.to_string(), retries);
            let fb: Vec<f64> = calls.iter().filter_map(|c| c.fallback_ms).collect();
            if let Some(m) = percentile(&fb, 0.5) {
                cx.fallback_ms.insert(comp.to_string(), m);
            }
        }
        for l in &ds.layers {
            if let Some(t) = &l.timeout {
                cx.layer_timeout.insert(l.name.clone(), t.ms);
            }
            let cut_at = l.timeout.as_ref().map(|t| t.ms);
            let obs: Vec<Obs> = l
                .requests
                .iter()
                .filter(|(_, st)| st.is_none_or(|s| s < 500 || s == 504))
                .map(|&(ms, st)| Obs {
                    ms,
                    finished: !(st == Some(504) && cut_at.is_none_or(|c| ms >= c * 0.98)),
                })
                .collect();
            if let Some(f) = lognormal::fit(&obs) {
                cx.layer_tails.insert(l.name.clone(), f);
            }
        }
        cx.retry = crate::retry::learn(ds);
        cx
    }

    /// Per LLM (model, bucket): whether its own tail or the model's law
    /// draws its cut calls — whichever follows its Kaplan–Meier curve
    /// more closely (as the advice chooses its recommendation).
    fn learn_buckets(&mut self, by_comp: &BTreeMap<&str, Vec<&CallFacts>>, ds: &Dataset) {
        for (comp, calls) in by_comp {
            let same = ds.repeats_work(comp);
            let mut by_bucket: BTreeMap<usize, Vec<&CallFacts>> = BTreeMap::new();
            for c in calls.iter().filter(|c| c.class == Class::Llm) {
                if let Some(t) = c.tokens_in {
                    by_bucket.entry(bucket_of(t)).or_default().push(c);
                }
            }
            for (b, cs) in by_bucket {
                let obs: Vec<Obs> = cs.iter().flat_map(|c| c.latency_obs(same)).collect();
                let Some(tail) = lognormal::fit(&obs) else {
                    continue;
                };
                let km = KaplanMeier::new(&obs);
                let own = km_miss(&km, &|q| Some(tail.dist.quantile(q)));
                let model = self.models.get(*comp).map(|(m, gpu)| {
                    let cov: Vec<(f64, f64)> = cs
                        .iter()
                        .filter_map(|c| c.tokens_in.map(|t| (t as f64, c.load(*gpu))))
                        .collect();
                    km_miss(&km, &|q| m.mixture_quantile(&cov, q))
                });
                if model.is_none_or(|m| own < m) {
                    self.bucket_tails.insert((comp.to_string(), b), tail.dist);
                }
            }
        }
    }

    /// The distribution a call's attempt is drawn from: its bucket's own
    /// tail or its model's law at its tokens and load (whichever fits the
    /// bucket better), else its component's tail.
    pub(crate) fn law_of(&self, c: &CallFacts) -> Option<LogNormal> {
        if let (Class::Llm, Some(t)) = (c.class, c.tokens_in)
            && let Some(d) = self.bucket_tails.get(&(c.component.clone(), bucket_of(t)))
        {
            return Some(*d);
        }
        if c.class == Class::Llm
            && let (Some((m, gpu)), Some(t)) = (self.models.get(&c.component), c.tokens_in)
        {
            return Some(LogNormal {
                mu: m.median_ms(t as f64, c.load(*gpu)).ln(),
                sigma: m.sigma_for(t as f64),
            });
        }
        self.tails.get(&c.component).map(|t| t.dist)
    }

    /// What a call cut at `ran_ms` would have taken: a draw from its law
    /// beyond `ran_ms`; `None` when no law is known (then it is taken to
    /// outlast every timeout).
    pub(crate) fn draw_beyond(&self, c: &CallFacts, ran_ms: f64, rng: &mut Rng) -> Option<f64> {
        self.law_of(c).map(|d| d.draw_above(ran_ms, rng))
    }
}

#[cfg(test)]
mod tests {
    use super::share_rule;

    /// (timeout / remaining, timeout) for each remaining budget.
    fn pairs(remaining: &[f64], timeout: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        remaining
            .iter()
            .map(|r| (timeout(*r) / r, timeout(*r)))
            .collect()
    }

    #[test]
    fn half_of_a_remaining_budget_is_a_share_even_after_a_steady_step() {
        // A 200 ms step with a millisecond of jitter before the tool: the
        // remaining budget varies by 0.04 %, the timeouts with it.
        let rem: Vec<f64> = (0..16).map(|i| 2297.0 + i as f64 * 0.06).collect();
        assert_eq!(share_rule(&pairs(&rem, |r| r * 0.5)), Some(0.5));
    }

    #[test]
    fn a_fixed_timeout_is_no_share_whatever_the_budget_left() {
        let wide: Vec<f64> = (0..16).map(|i| 2000.0 + i as f64 * 30.0).collect();
        assert_eq!(share_rule(&pairs(&wide, |_| 1000.0)), None);
        // A barely used budget: the ratio is steady too, the timeout exact.
        let barely: Vec<f64> = (0..16).map(|i| 29_990.0 + i as f64 * 0.5).collect();
        assert_eq!(share_rule(&pairs(&barely, |_| 1000.0)), None);
    }
}
