//! What-if: every trace replayed under a proposal ([`crate::replay`]),
//! several times with seeded draws for the calls that were cut, and the
//! report: outcomes before and after, what changes and why, latency
//! P50/P99, and how many outcomes rest on the fitted laws.

use crate::context::Context;
use crate::extract::Dataset;
use crate::proposal::Proposal;
use crate::render::{Style, table};
use crate::replay::{Fate, observed, replay};
use crate::retry::RetryRule;
use crate::stats::{Rng, percentile};
use overtime_diagnose::fmt::dur;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The replay's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WhatIfOptions {
    /// Seed of the draws for cut calls: the same seed gives the same report.
    pub seed: u64,
    /// Replays with fresh draws for the cut calls (the counts are their mean).
    pub draws: usize,
    /// Changed traces listed at most.
    pub max_changed: usize,
}

impl Default for WhatIfOptions {
    fn default() -> Self {
        WhatIfOptions {
            seed: 1,
            draws: 25,
            max_changed: 1_000,
        }
    }
}

/// Requests by what the client got (means over the draws after).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    /// Answered.
    pub ok: f64,
    /// Answered by a fallback after a call failed.
    pub fallback: f64,
    /// The service gave up and answered 503 before the gateway cut.
    pub fast_503: f64,
    /// Cut by a gateway: 504.
    pub gateway_timeout: f64,
    /// Another failure.
    pub error: f64,
}

impl Counts {
    fn add(&mut self, f: Fate, w: f64) {
        *match f {
            Fate::Ok => &mut self.ok,
            Fate::Fallback => &mut self.fallback,
            Fate::Fast503 => &mut self.fast_503,
            Fate::GatewayTimeout => &mut self.gateway_timeout,
            Fate::Error => &mut self.error,
        } += w;
    }
}

/// P50 and P99 of what clients waited (ms).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median (ms); `None` with no requests.
    pub p50_ms: Option<f64>,
    /// 99th percentile (ms); `None` with no requests.
    pub p99_ms: Option<f64>,
}

/// One trace whose outcome changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceChange {
    /// The trace id.
    pub trace_id: String,
    /// What the client got.
    pub before: Fate,
    /// The most frequent outcome over the draws.
    pub after: Fate,
    /// Share of the draws that gave `after`.
    pub share: f64,
    /// What the client waited (ms).
    pub before_ms: f64,
    /// What the client would wait under the proposal (ms, in the first
    /// draw).
    pub after_ms: f64,
    /// The outcome came from a drawn latency.
    pub from_model: bool,
    /// A call that ended the request before now finishes; what would have
    /// run after it was never seen (taken to take no time).
    pub unseen_rest: bool,
    /// The call and timeout that decide the change, in words.
    pub why: String,
}

/// Requests that went from one outcome to another (mean over draws).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transition {
    /// The outcome before.
    pub from: Fate,
    /// The outcome under the proposal.
    pub to: Fate,
    /// Requests (mean over the draws).
    pub count: f64,
}

/// The report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhatIf {
    /// The proposal, `key=value` each.
    pub proposal: Vec<String>,
    /// Requests replayed.
    pub traces: usize,
    /// Replays with fresh draws for the cut calls.
    pub draws: usize,
    /// The seed of the draws.
    pub seed: u64,
    /// Requests by outcome as they happened.
    pub before: Counts,
    /// Requests by outcome under the proposal (mean over the draws).
    pub after: Counts,
    /// 5th and 95th percentile of the 504 count over the draws.
    pub after_504_range: (f64, f64),
    /// Failed before (504, 503, error), succeed now.
    pub now_finish: f64,
    /// 504s before that now fail fast (503) or fall back.
    pub cut_earlier: f64,
    /// Succeeded before, fail now.
    pub newly_fail: f64,
    /// Every change of outcome, by (before, after).
    pub transitions: Vec<Transition>,
    /// What clients waited as it happened.
    pub latency_before: Latency,
    /// What clients would wait under the proposal.
    pub latency_after: Latency,
    /// Requests whose outcome after rests on a drawn latency.
    pub from_model: usize,
    /// Of them, those whose outcome differs between draws.
    pub uncertain: usize,
    /// Cut calls with no fitted law (taken to outlast every timeout).
    pub no_law: usize,
    /// Requests that now go on past a call that ended them before: what
    /// would have run after it was never seen.
    pub unseen_rest: usize,
    /// The replay of today's settings gives today's outcome for this
    /// many requests (of `traces`): how far the replay can be trusted.
    pub today_reproduced: usize,
    /// The requests whose replay under today's settings does not give
    /// today's outcome (at most 20 listed; `today_reproduced` counts the
    /// others): the replay's picture of them is wrong, and so may be its
    /// prediction for them.
    pub today_not_reproduced: Vec<String>,
    /// A warning when the replay of today's settings does not reproduce
    /// today, naming the requests; `None` when it does.
    pub warning: Option<String>,
    /// How each component's client retries, as the replay assumes it
    /// (components seen retrying).
    pub retry_rules: Vec<RetryRule>,
    /// Requests whose outcome changes (all of them, `changed` may be
    /// shorter).
    pub changed_total: usize,
    /// The changed requests, at most `max_changed` of them.
    pub changed: Vec<TraceChange>,
}

fn latency(v: &[f64]) -> Latency {
    Latency {
        p50_ms: percentile(v, 0.5),
        p99_ms: percentile(v, 0.99),
    }
}

/// Replays every trace of `ds` under `p`.
///
/// ```
/// use overtime_advise::{synth, whatif, Proposal, WhatIfOptions};
/// // Calls cut by a 30 s timeout; a 90 s one lets most of them finish.
/// let ds = synth::seed_classes(300, synth::Cut::At(30_000.0), 3);
/// let mut p = Proposal::default();
/// p.set("llm.deepseek-v4-pro.timeout=90s").unwrap();
/// let w = whatif(&ds, &p, &WhatIfOptions::default());
/// assert!(w.before.fast_503 > 0.0);
/// assert!(w.now_finish > 0.9 * w.before.fast_503);
/// assert!(w.from_model > 0, "the cut calls' latencies were drawn");
/// ```
pub fn whatif(ds: &Dataset, p: &Proposal, o: &WhatIfOptions) -> WhatIf {
    let layers: Vec<&str> = ds.layers.iter().map(|l| l.name.as_str()).collect();
    let p = &p.with_layer_roles(&layers);
    let cx = Context::learn(ds);
    let draws = o.draws.max(1);
    let n = ds.traces.len();
    let before: Vec<Fate> = ds.traces.iter().map(observed).collect();
    let today = Proposal::default();
    let mut rng = Rng::new(o.seed);
    let not_reproduced: Vec<&str> = ds
        .traces
        .iter()
        .zip(&before)
        .filter(|(t, b)| replay(t, &today, &cx, &mut rng).fate != **b)
        .map(|(t, _)| t.trace_id.as_str())
        .collect();
    let today_reproduced = n - not_reproduced.len();
    let warning = (!not_reproduced.is_empty()).then(|| {
        format!(
            "replaying today's settings does not give today's outcome for {} of {} requests ({}{}): what the replay predicts for requests like them is not to be trusted",
            not_reproduced.len(),
            n,
            not_reproduced[..not_reproduced.len().min(5)].join(", "),
            if not_reproduced.len() > 5 { ", …" } else { "" }
        )
    });
    // runs[r][i]: (fate, elapsed); a trace that drew nothing is replayed once.
    let mut fates: Vec<Vec<Fate>> = vec![Vec::with_capacity(draws); n];
    let mut elapsed: Vec<Vec<f64>> = vec![Vec::new(); draws];
    let mut first = Vec::with_capacity(n);
    let mut no_law = 0;
    for (i, t) in ds.traces.iter().enumerate() {
        let mut rng = Rng::new(o.seed ^ (i as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
        let r0 = replay(t, p, &cx, &mut rng);
        no_law += usize::from(r0.no_law);
        fates[i].push(r0.fate);
        elapsed[0].push(r0.elapsed_ms);
        for e in elapsed.iter_mut().skip(1) {
            let rr = if r0.drawn {
                replay(t, p, &cx, &mut rng)
            } else {
                r0.clone()
            };
            fates[i].push(rr.fate);
            e.push(rr.elapsed_ms);
        }
        first.push(r0);
    }
    // Tallied in whole draws, divided once at the end (exact means).
    let w = 1.0;
    let mut b_counts = Counts::default();
    let mut a_counts = Counts::default();
    let mut trans: BTreeMap<(Fate, Fate), f64> = BTreeMap::new();
    let mut per_run_504 = vec![0.0; draws];
    let mut changed = Vec::new();
    let (mut now_finish, mut cut_earlier, mut newly_fail) = (0.0, 0.0, 0.0);
    let (mut from_model, mut uncertain, mut unseen_rest) = (0, 0, 0);
    for i in 0..n {
        let b = before[i];
        b_counts.add(b, 1.0);
        let mut tally: BTreeMap<Fate, usize> = BTreeMap::new();
        for (r, &f) in fates[i].iter().enumerate() {
            a_counts.add(f, w);
            *trans.entry((b, f)).or_default() += w;
            if f == Fate::GatewayTimeout {
                per_run_504[r] += 1.0;
            }
            if b.failed() && !f.failed() && f != Fate::Fallback {
                now_finish += w;
            }
            if b == Fate::GatewayTimeout && matches!(f, Fate::Fast503 | Fate::Fallback) {
                cut_earlier += w;
            }
            if !b.failed() && f.failed() {
                newly_fail += w;
            }
            *tally.entry(f).or_default() += 1;
        }
        if first[i].drawn {
            from_model += 1;
            uncertain += usize::from(tally.len() > 1);
        }
        unseen_rest += usize::from(first[i].unseen);
        let (after, k) = tally
            .iter()
            .max_by_key(|(f, k)| (**k, std::cmp::Reverse(**f)))
            .map(|(f, k)| (*f, *k))
            .unwrap_or((b, draws));
        if after != b {
            let t = &ds.traces[i];
            changed.push(TraceChange {
                trace_id: t.trace_id.clone(),
                before: b,
                after,
                share: k as f64 / draws as f64,
                before_ms: t.elapsed_ms,
                after_ms: first[i].elapsed_ms,
                from_model: first[i].drawn,
                unseen_rest: first[i].unseen,
                why: first[i].why.clone(),
            });
        }
    }
    let per = draws as f64;
    a_counts.ok /= per;
    a_counts.fallback /= per;
    a_counts.fast_503 /= per;
    a_counts.gateway_timeout /= per;
    a_counts.error /= per;
    for v in trans.values_mut() {
        *v /= per;
    }
    now_finish /= per;
    cut_earlier /= per;
    newly_fail /= per;
    per_run_504.sort_by(f64::total_cmp);
    let lat_after = {
        let runs: Vec<Latency> = elapsed.iter().map(|e| latency(e)).collect();
        let mean = |f: &dyn Fn(&Latency) -> Option<f64>| {
            let v: Vec<f64> = runs.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        Latency {
            p50_ms: mean(&|l| l.p50_ms),
            p99_ms: mean(&|l| l.p99_ms),
        }
    };
    let before_ms: Vec<f64> = ds.traces.iter().map(|t| t.elapsed_ms).collect();
    let changed_total = changed.len();
    changed.truncate(o.max_changed);
    WhatIf {
        proposal: p.keys.clone(),
        traces: n,
        draws,
        seed: o.seed,
        before: b_counts,
        after: a_counts,
        after_504_range: (
            percentile(&per_run_504, 0.05).unwrap_or(0.0),
            percentile(&per_run_504, 0.95).unwrap_or(0.0),
        ),
        now_finish,
        cut_earlier,
        newly_fail,
        transitions: trans
            .into_iter()
            .filter(|((a, b), c)| a != b && *c > 0.0)
            .map(|((from, to), count)| Transition { from, to, count })
            .collect(),
        latency_before: latency(&before_ms),
        latency_after: lat_after,
        from_model,
        uncertain,
        no_law,
        unseen_rest,
        today_reproduced,
        today_not_reproduced: not_reproduced
            .iter()
            .take(20)
            .map(|s| s.to_string())
            .collect(),
        warning,
        retry_rules: cx.retry.values().cloned().collect(),
        changed_total,
        changed,
    }
}

fn c(x: f64) -> String {
    if (x - x.round()).abs() < 0.05 {
        format!("{:.0}", x)
    } else {
        format!("{x:.1}")
    }
}

/// The report for humans.
pub(crate) fn render(w: &WhatIf, style: Style) -> String {
    let mut s = String::new();
    let title = format!(
        "What if: {}",
        if w.proposal.is_empty() {
            "today's settings".to_string()
        } else {
            w.proposal.join(", ")
        }
    );
    s.push_str(&match style {
        Style::Markdown => format!("# {title}\n\n"),
        Style::Text => format!("{title}\n\n"),
    });
    s.push_str(&format!(
        "{} requests replayed; {} would now finish, {} would fail fast or fall back instead of a 504, {} that succeeded would fail.\n",
        w.traces,
        c(w.now_finish),
        c(w.cut_earlier),
        c(w.newly_fail)
    ));
    s.push_str(&format!(
        "504s: {} → {} (over {} draws: {}–{}).\n",
        c(w.before.gateway_timeout),
        c(w.after.gateway_timeout),
        w.draws,
        c(w.after_504_range.0),
        c(w.after_504_range.1)
    ));
    s.push_str(&format!(
        "{} outcomes rest on latencies drawn from the fitted laws for calls that were cut ({} of them vary between draws){}{}; replaying today's settings reproduces today's outcome for {} of {} requests.\n\n",
        w.from_model,
        w.uncertain,
        if w.no_law > 0 {
            format!(", {} cut calls had no law and were taken to outlast every timeout", w.no_law)
        } else {
            String::new()
        },
        if w.unseen_rest > 0 {
            format!(
                "; {} go on past a call that ended them before (what ran after it was never seen: taken as nothing)",
                w.unseen_rest
            )
        } else {
            String::new()
        },
        w.today_reproduced,
        w.traces
    ));
    if let Some(w) = &w.warning {
        s.push_str(&format!("Warning: {w}.\n\n"));
    }
    if !w.retry_rules.is_empty() {
        s.push_str("Retries replayed as each client makes them:\n");
        for r in &w.retry_rules {
            s.push_str(&format!("- {}\n", r.describe()));
        }
        s.push('\n');
    }
    let row = |name: &str, b: f64, a: f64| vec![name.to_string(), c(b), c(a)];
    let rows = vec![
        row("ok", w.before.ok, w.after.ok),
        row("fallback", w.before.fallback, w.after.fallback),
        row("fast 503", w.before.fast_503, w.after.fast_503),
        row("504", w.before.gateway_timeout, w.after.gateway_timeout),
        row("error", w.before.error, w.after.error),
        vec![
            "latency P50".into(),
            w.latency_before.p50_ms.map(dur).unwrap_or_default(),
            w.latency_after.p50_ms.map(dur).unwrap_or_default(),
        ],
        vec![
            "latency P99".into(),
            w.latency_before.p99_ms.map(dur).unwrap_or_default(),
            w.latency_after.p99_ms.map(dur).unwrap_or_default(),
        ],
    ];
    s.push_str(&table(style, &["", "before", "after"], &rows));
    if !w.changed.is_empty() {
        s.push_str(&format!(
            "\n{} requests change{}:\n\n",
            w.changed_total,
            if w.changed_total > w.changed.len() {
                format!(" (first {} listed)", w.changed.len())
            } else {
                String::new()
            }
        ));
        let rows: Vec<Vec<String>> = w
            .changed
            .iter()
            .map(|x| {
                vec![
                    x.trace_id.clone(),
                    format!("{} ({})", x.before.as_str(), dur(x.before_ms)),
                    format!(
                        "{} ({}{})",
                        x.after.as_str(),
                        dur(x.after_ms),
                        if x.share < 1.0 {
                            format!(", {:.0} % of draws", x.share * 100.0)
                        } else {
                            String::new()
                        }
                    ),
                    if x.from_model {
                        "drawn"
                    } else if x.unseen_rest {
                        "observed, rest unseen"
                    } else {
                        "observed"
                    }
                    .into(),
                    x.why.clone(),
                ]
            })
            .collect();
        s.push_str(&table(
            style,
            &["trace", "before", "after", "latency", "why"],
            &rows,
        ));
    }
    s
}
