//! How a component's client retries, learned from its calls: how many
//! attempts it makes at most, how long it waits before each retry, and
//! whether a retry of a call that timed out takes as long again.
//!
//! Design rules:
//! - **Attempts**: the most any call of the component made. A client that
//!   was never seen retrying is taken not to retry (nothing says how).
//! - **Backoff**: the openai Python client's rule is assumed — before
//!   retry *n* (1 for the first) it sleeps `min(0.5 s × 2^(n−1), 8 s) ×
//!   (1 − 0.25 × U[0,1))`, i.e. 0.375–0.5 s, 0.75–1 s, 1.5–2 s … (read
//!   from openai-python's `src/openai/_base_client.py`,
//!   `_calculate_retry_timeout` with `INITIAL_RETRY_DELAY = 0.5` and
//!   `MAX_RETRY_DELAY = 8.0` from `src/openai/_constants.py`, commit
//!   e43b422412a9e96c9cc5192c61fffbe2d7e04836; a `Retry-After` answer
//!   overrides it, which a timeout never has) — unless the gaps seen
//!   between a component's attempts do not follow it: then each retry
//!   waits the median gap seen before that retry (the last one seen for
//!   later retries). The report names the rule it used per component.
//! - **Same work, same time**: a retry asks the server for the same work.
//!   Whether it takes as long again is learned from the retries seen after
//!   a timeout: how much more often they timed out again than first
//!   attempts time out (`same_latency`, 0–1, [`crate::Dataset`]'s
//!   `same_work`; 1 with fewer than three such retries seen).
//!
//! ```
//! use overtime_advise::openai_backoff_ms;
//! assert_eq!(openai_backoff_ms(1, 0.0), 500.0);
//! assert_eq!(openai_backoff_ms(2, 0.999_999_9).round(), 750.0);
//! assert_eq!(openai_backoff_ms(6, 0.0), 8_000.0, "capped at 8 s");
//! ```

use crate::extract::{Dataset, End};
use crate::stats::{Rng, percentile};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The openai Python client's sleep before retry `n` (1 for the first),
/// ms, for a uniform draw `u` in [0, 1).
pub fn openai_backoff_ms(n: usize, u: f64) -> f64 {
    let exp = (n.max(1) - 1).min(1_000) as i32;
    let sleep = (500.0 * 2f64.powi(exp)).min(8_000.0);
    sleep * (1.0 - 0.25 * u)
}

/// Whether a gap seen before retry `n` fits the openai rule (with 60 ms
/// for the client's own work around the sleep).
fn fits_openai(n: usize, gap: f64) -> bool {
    gap >= openai_backoff_ms(n, 1.0) - 30.0 && gap <= openai_backoff_ms(n, 0.0) + 60.0
}

/// Which wait before a retry the replay assumes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backoff {
    /// The openai Python client's rule (see the module).
    OpenaiPython,
    /// The median gap seen before each retry, ms (first retry first).
    Observed(Vec<f64>),
}

/// How one component's client retries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryRule {
    /// The model or tool.
    pub component: String,
    /// Attempts at most (the first try included).
    pub attempts: usize,
    /// Whether it retries after a timeout (seen doing so).
    pub after_timeout: bool,
    /// The wait before each retry.
    pub backoff: Backoff,
    /// Gaps seen between its attempts, and how many fit the openai rule.
    pub gaps_seen: usize,
    /// Of `gaps_seen`, those within the openai rule.
    pub gaps_fitting_openai: usize,
    /// How much a retry after a timeout takes as long as the attempt
    /// before it (0: an independent draw, 1: the same time).
    pub same_latency: f64,
}

impl RetryRule {
    /// The wait before retry `n` (1 for the first), ms.
    pub(crate) fn backoff_ms(&self, n: usize, rng: &mut Rng) -> f64 {
        match &self.backoff {
            Backoff::OpenaiPython => openai_backoff_ms(n, rng.uniform()),
            Backoff::Observed(v) => v.get(n - 1).or(v.last()).copied().unwrap_or(0.0),
        }
    }

    /// The rule in words, for the report.
    pub fn describe(&self) -> String {
        let wait = match &self.backoff {
            Backoff::OpenaiPython => format!(
                "the openai Python client's backoff (0.5 s × 2ⁿ, jitter −25 %, at most 8 s; {} of {} gaps seen fit it)",
                self.gaps_fitting_openai, self.gaps_seen
            ),
            Backoff::Observed(v) => format!(
                "the gaps seen ({}; only {} of {} fit the openai Python client's backoff)",
                v.iter()
                    .map(|g| overtime_diagnose::fmt::dur(*g))
                    .collect::<Vec<_>>()
                    .join(", "),
                self.gaps_fitting_openai,
                self.gaps_seen
            ),
        };
        format!(
            "{}: {} attempts at most{}, waiting {}; a retry after a timeout takes as long again {:.0} % of the time",
            self.component,
            self.attempts,
            if self.after_timeout {
                ", retried after a timeout"
            } else {
                ", not retried after a timeout"
            },
            wait,
            self.same_latency * 100.0
        )
    }
}

/// The retry rule of every component seen retrying.
pub(crate) fn learn(ds: &Dataset) -> BTreeMap<String, RetryRule> {
    #[derive(Default)]
    struct Seen {
        attempts: usize,
        after_timeout: bool,
        gaps: Vec<Vec<f64>>,
        fitting: usize,
        n_gaps: usize,
    }
    let mut seen: BTreeMap<&str, Seen> = BTreeMap::new();
    for t in &ds.traces {
        for c in &t.calls {
            let s = seen.entry(c.component.as_str()).or_default();
            s.attempts = s.attempts.max(c.attempts.len());
            for (k, w) in c.attempts.windows(2).enumerate() {
                let gap = (w[1].start_ms - (w[0].start_ms + w[0].ms)).max(0.0);
                if s.gaps.len() <= k {
                    s.gaps.resize(k + 1, Vec::new());
                }
                s.gaps[k].push(gap);
                s.n_gaps += 1;
                s.fitting += usize::from(fits_openai(k + 1, gap));
                s.after_timeout |= w[0].end == End::TimedOut;
            }
        }
    }
    seen.into_iter()
        .filter(|(_, s)| s.attempts > 1)
        .map(|(comp, s)| {
            let backoff = if s.fitting * 10 >= s.n_gaps * 8 {
                Backoff::OpenaiPython
            } else {
                Backoff::Observed(s.gaps.iter().filter_map(|g| percentile(g, 0.5)).collect())
            };
            let same_latency = ds.same_work.get(comp).copied().unwrap_or(1.0);
            (
                comp.to_string(),
                RetryRule {
                    component: comp.to_string(),
                    attempts: s.attempts,
                    after_timeout: s.after_timeout,
                    backoff,
                    gaps_seen: s.n_gaps,
                    gaps_fitting_openai: s.fitting,
                    same_latency,
                },
            )
        })
        .collect()
}
