//! Timeout advice per LLM model × input-token bucket, per tool and memory
//! store, per gateway layer and per service: the latency of the calls that
//! finished, the survival of all of them (cut calls censored), the timeout
//! in force, and a recommended timeout covering the target share.

use crate::extract::{Attempt, CallFacts, Class, Dataset, End};
use crate::latency_model::{self, LatencyModel, Sample};
use crate::lognormal::{self, TailFit};
use crate::stats::{KaplanMeier, Obs, percentile};
use overtime_diagnose::{BUCKETS, bucket_of};
use overtime_model::Outcome;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// P50, P90, P99, P99.9 (ms); `None` where unknown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    /// Median (ms).
    pub p50: Option<f64>,
    /// 90th percentile (ms).
    pub p90: Option<f64>,
    /// 99th percentile (ms).
    pub p99: Option<f64>,
    /// 99.9th percentile (ms).
    pub p999: Option<f64>,
}

const QS: [f64; 4] = [0.5, 0.9, 0.99, 0.999];

impl Quantiles {
    fn of(f: impl Fn(f64) -> Option<f64>) -> Self {
        Quantiles {
            p50: f(QS[0]),
            p90: f(QS[1]),
            p99: f(QS[2]),
            p999: f(QS[3]),
        }
    }
}

/// Where the timeout in force comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Recorded on the spans (`agent.timeout_ms`, `timeout_ms`) or given.
    Configured,
    /// Seen firing: calls ended by a timeout error at about this time.
    Observed,
    /// A gateway's, from where its 504s cluster.
    Inferred,
}

/// The timeout a group of calls ran under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InForce {
    /// The typical value (median over the calls that carried one).
    pub ms: f64,
    /// Where the value comes from: configured, observed firing, or inferred.
    pub source: Source,
    /// Calls that carried it.
    pub calls: usize,
    /// (min, max) when it varies (e.g. a share of the remaining budget).
    pub range_ms: Option<(f64, f64)>,
}

/// How the recommended value was computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// The Kaplan–Meier quantile: enough calls finished beyond it.
    KaplanMeier,
    /// The censored log-normal tail fitted to this group.
    LognormalTail,
    /// The model's latency law over this group's calls (tokens, load).
    LatencyModel,
    /// A gateway's: the alignment rule, above what it waits for.
    Alignment,
}

/// Advice for one group of calls (or one gateway layer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupAdvice {
    /// `llm`, `tool`, `memory` or `gateway`.
    pub kind: String,
    /// The model, tool or memory store, or the gateway layer's name.
    pub name: String,
    /// The input-token bucket of an LLM group.
    pub bucket: Option<String>,
    /// Attempts (calls × tries) or gateway requests.
    pub count: usize,
    /// Attempts that answered (their durations are latencies).
    pub finished: usize,
    /// Attempts that answered with an error other than a timeout.
    pub failed: usize,
    /// Ended by their own timeout (censored).
    pub timed_out: usize,
    /// Cut with their request (censored).
    pub cut: usize,
    /// Latency of the calls that finished.
    pub finished_ms: Quantiles,
    /// Kaplan–Meier over all of them, cut calls censored: `None` where the
    /// cuts leave a quantile unknown.
    pub survival_ms: Quantiles,
    /// The censored log-normal fitted to the group's tail; `None` with too
    /// few finished calls.
    pub tail: Option<TailFit>,
    /// The timeout the calls ran under; `None` when none was recorded,
    /// seen firing or inferred.
    pub timeout: Option<InForce>,
    /// Share of the attempts ended by their own timeout (0–1).
    pub share_timed_out: f64,
    /// Share whose request ended in a gateway timeout.
    pub share_504: f64,
    /// The timeout to set (ms); `None` when the data cannot support one.
    pub recommended_ms: Option<f64>,
    /// How `recommended_ms` was computed; `None` with no recommendation.
    pub method: Option<Method>,
    /// `raise`, `lower`, `keep`, `set` (none in force) or `unknown`.
    pub change: String,
}

/// A model's fitted latency law and the per-request timeout from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelAdvice {
    /// The LLM model the law is fitted to.
    pub model: String,
    /// The fitted law (its coefficients and fit quality, flattened into the
    /// JSON).
    #[serde(flatten)]
    pub fit: LatencyModel,
    /// The rule, written out.
    pub rule: String,
}

/// Fewest finished calls beyond the target quantile for Kaplan–Meier to
/// be trusted there on its own.
const KM_TAIL_CALLS: f64 = 20.0;

fn quantiles_of(done: &[f64]) -> Quantiles {
    Quantiles::of(|q| {
        // P99.9 of 50 calls is their maximum, not a P99.9.
        (done.len() as f64 * (1.0 - q) >= 0.5)
            .then(|| percentile(done, q))
            .flatten()
    })
}

/// The timeout in force over `calls`.
fn in_force(calls: &[&CallFacts]) -> Option<InForce> {
    let configured: Vec<f64> = calls
        .iter()
        .filter(|c| !c.timeout_observed)
        .filter_map(|c| c.timeout_ms)
        .collect();
    let (vals, source) = if !configured.is_empty() {
        (configured, Source::Configured)
    } else {
        let seen: Vec<f64> = calls
            .iter()
            .filter(|c| c.timeout_observed)
            .filter_map(|c| c.timeout_ms)
            .collect();
        if seen.is_empty() {
            return None;
        }
        (seen, Source::Observed)
    };
    let med = percentile(&vals, 0.5)?;
    let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let varies = source == Source::Configured && hi > lo * 1.02;
    Some(InForce {
        ms: med,
        source,
        calls: vals.len(),
        range_ms: varies.then_some((lo, hi)),
    })
}

pub(crate) fn change_word(rec: Option<f64>, current: Option<&InForce>) -> String {
    match (rec, current) {
        (None, _) => "unknown",
        (Some(_), None) => "set",
        (Some(r), Some(c)) if r > c.ms * 1.05 => "raise",
        (Some(r), Some(c)) if r < c.ms * 0.8 => "lower",
        _ => "keep",
    }
    .into()
}

/// Picks the recommended value: Kaplan–Meier when enough calls finished
/// beyond the target; else whichever parametric tail (this group's own,
/// or the model's law over its calls) follows the Kaplan–Meier curve
/// more closely where that curve is known.
fn recommend(
    km: &KaplanMeier,
    finished: usize,
    tail: Option<&TailFit>,
    model_q: Option<&dyn Fn(f64) -> Option<f64>>,
    target: f64,
) -> (Option<f64>, Option<Method>) {
    if let Some(q) = km.quantile(target)
        && finished as f64 * (1.0 - target) >= KM_TAIL_CALLS
    {
        return (Some(q), Some(Method::KaplanMeier));
    }
    let miss = |f: &dyn Fn(f64) -> Option<f64>| km_miss(km, f);
    let tail_f = tail.map(|t| move |q: f64| Some(t.dist.quantile(q)));
    let mut best: Option<(f64, f64, Method)> = None;
    if let Some(f) = &tail_f
        && let Some(v) = f(target)
    {
        best = Some((miss(f), v, Method::LognormalTail));
    }
    if let Some(f) = model_q
        && let Some(v) = f(target)
    {
        let m = miss(f);
        if best.is_none_or(|b| m < b.0) {
            best = Some((m, v, Method::LatencyModel));
        }
    }
    match best {
        Some((_, v, m)) => (Some(v), Some(m)),
        None => (None, None),
    }
}

/// How far a distribution's quantiles `f` stray from the Kaplan–Meier
/// curve where the curve is known (P50, P75, P90): the largest |ln ratio|.
pub(crate) fn km_miss(km: &KaplanMeier, f: &dyn Fn(f64) -> Option<f64>) -> f64 {
    [0.5, 0.75, 0.9]
        .iter()
        .filter_map(|&q| Some((km.quantile(q)?, f(q)?)))
        .map(|(v, p)| (p / v).ln().abs())
        .fold(0.0, f64::max)
}

struct Group<'a> {
    calls: Vec<&'a CallFacts>,
    attempts: Vec<Attempt>,
    /// Calls whose request ended in a 504.
    in_504: usize,
}

fn group_advice(
    kind: &str,
    name: &str,
    bucket: Option<String>,
    g: &Group<'_>,
    model_q: Option<&dyn Fn(f64) -> Option<f64>>,
    target: f64,
) -> GroupAdvice {
    let obs: Vec<Obs> = g.attempts.iter().filter_map(|a| a.obs()).collect();
    let done: Vec<f64> = obs.iter().filter(|o| o.finished).map(|o| o.ms).collect();
    let count_end = |e: End| g.attempts.iter().filter(|a| a.end == e).count();
    let km = KaplanMeier::new(&obs);
    let tail = lognormal::fit(&obs);
    let timeout = in_force(&g.calls);
    let (recommended_ms, method) = recommend(&km, done.len(), tail.as_ref(), model_q, target);
    let n = g.attempts.len().max(1) as f64;
    GroupAdvice {
        kind: kind.into(),
        name: name.into(),
        bucket,
        count: g.attempts.len(),
        finished: done.len(),
        failed: count_end(End::Failed),
        timed_out: count_end(End::TimedOut),
        cut: count_end(End::Cut),
        finished_ms: quantiles_of(&done),
        survival_ms: Quantiles::of(|q| km.quantile(q)),
        tail,
        change: change_word(recommended_ms, timeout.as_ref()),
        timeout,
        share_timed_out: count_end(End::TimedOut) as f64 / n,
        share_504: g.in_504 as f64 / g.calls.len().max(1) as f64,
        recommended_ms,
        method,
    }
}

fn add<'a>(g: &mut Group<'a>, c: &'a CallFacts, was_504: bool) {
    g.calls.push(c);
    g.attempts.extend(c.attempts.iter().copied());
    g.in_504 += usize::from(was_504);
}

/// What `load` means for a model: `gpu_load` when most of its calls
/// carry it, else the calls in flight on it.
pub(crate) fn uses_gpu_load(calls: &[&CallFacts]) -> bool {
    calls.iter().filter(|c| c.gpu_load.is_some()).count() * 2 > calls.len()
}

/// The samples a model's law is fitted on: every attempt with its tokens.
/// Retries of the same work cut again are left out (they repeat the first
/// cut: `same_work`).
pub(crate) fn model_samples(calls: &[&CallFacts], gpu: bool, same_work: bool) -> Vec<Sample> {
    calls
        .iter()
        .filter_map(|c| c.tokens_in.map(|t| (c, t as f64)))
        .flat_map(|(c, t)| {
            c.latency_obs(same_work).into_iter().map(move |o| Sample {
                tokens_in: t,
                load: c.load(gpu),
                ms: o.ms,
                finished: o.finished,
            })
        })
        .collect()
}

/// Every model's fitted law (models with too few finished calls have none).
pub(crate) fn fit_models(ds: &Dataset) -> BTreeMap<String, (LatencyModel, bool)> {
    let mut by_model: BTreeMap<&str, Vec<&CallFacts>> = BTreeMap::new();
    for t in &ds.traces {
        for c in t.calls.iter().filter(|c| c.class == Class::Llm) {
            by_model.entry(c.component.as_str()).or_default().push(c);
        }
    }
    by_model
        .into_iter()
        .filter_map(|(m, calls)| {
            let gpu = uses_gpu_load(&calls);
            let name = if gpu { "gpu_load" } else { "calls_in_flight" };
            latency_model::fit(&model_samples(&calls, gpu, ds.repeats_work(m)), name)
                .map(|f| (m.to_string(), (f, gpu)))
        })
        .collect()
}

/// The LLM, tool and memory groups, and the models' laws.
pub(crate) fn call_groups(
    ds: &Dataset,
    models: &BTreeMap<String, (LatencyModel, bool)>,
    target: f64,
) -> (Vec<GroupAdvice>, Vec<GroupAdvice>, Vec<ModelAdvice>) {
    let mut llm: BTreeMap<(String, usize), Group> = BTreeMap::new();
    let mut other: BTreeMap<(Class, String), Group> = BTreeMap::new();
    let empty = || Group {
        calls: vec![],
        attempts: vec![],
        in_504: 0,
    };
    for t in &ds.traces {
        let was_504 = t.outcome == Outcome::GatewayTimeout;
        for c in &t.calls {
            match c.class {
                Class::Llm => {
                    let b = c.tokens_in.map_or(BUCKETS.len(), bucket_of);
                    add(
                        llm.entry((c.component.clone(), b)).or_insert_with(empty),
                        c,
                        was_504,
                    );
                }
                cls => add(
                    other
                        .entry((cls, c.component.clone()))
                        .or_insert_with(empty),
                    c,
                    was_504,
                ),
            }
        }
    }
    let mut llm_out = Vec::new();
    for ((model, b), g) in &llm {
        let bucket = BUCKETS.get(*b).map_or("unknown tokens", |s| s).to_string();
        let law = models.get(model).filter(|_| *b < BUCKETS.len());
        let covariates: Vec<(f64, f64)> = law
            .map(|(_, gpu)| {
                g.calls
                    .iter()
                    .filter_map(|c| c.tokens_in.map(|t| (t as f64, c.load(*gpu))))
                    .collect()
            })
            .unwrap_or_default();
        let model_q = law.map(|(m, _)| move |q: f64| m.mixture_quantile(&covariates, q));
        let mq: Option<&dyn Fn(f64) -> Option<f64>> =
            model_q.as_ref().map(|f| f as &dyn Fn(f64) -> Option<f64>);
        llm_out.push(group_advice("llm", model, Some(bucket), g, mq, target));
    }
    let other_out = other
        .iter()
        .map(|((cls, name), g)| {
            let kind = if *cls == Class::Memory {
                "memory"
            } else {
                "tool"
            };
            group_advice(kind, name, None, g, None, target)
        })
        .collect();
    let model_out = models
        .iter()
        .map(|(m, (fit, _))| ModelAdvice {
            model: m.clone(),
            rule: fit.rule(target),
            fit: fit.clone(),
        })
        .collect();
    (llm_out, other_out, model_out)
}

/// One row per gateway layer: request times, 504s at the timeout censored.
pub(crate) fn gateway_groups(ds: &Dataset, target: f64) -> Vec<GroupAdvice> {
    ds.layers
        .iter()
        .map(|l| {
            let t = l.timeout.as_ref();
            let attempts: Vec<Attempt> = l
                .requests
                .iter()
                .map(|&(ms, st)| {
                    let at_timeout = t.is_some_and(|t| ms >= t.ms * 0.98);
                    let end = match st {
                        Some(504) if at_timeout || t.is_none() => End::Cut,
                        Some(s) if s >= 500 => End::Failed,
                        _ => End::Finished,
                    };
                    Attempt {
                        end,
                        ..Attempt::finished(0.0, ms)
                    }
                })
                .collect();
            let g = Group {
                calls: vec![],
                in_504: attempts.iter().filter(|a| a.end == End::Cut).count(),
                attempts,
            };
            let mut a = group_advice("gateway", &l.name, None, &g, None, target);
            a.share_504 = g.in_504 as f64 / g.attempts.len().max(1) as f64;
            a.timeout = t.map(|t| InForce {
                ms: t.ms,
                source: if t.inferred {
                    Source::Inferred
                } else {
                    Source::Configured
                },
                calls: if t.inferred {
                    t.cluster
                } else {
                    g.attempts.len()
                },
                range_ms: None,
            });
            a.change = change_word(a.recommended_ms, a.timeout.as_ref());
            a
        })
        .collect()
}
