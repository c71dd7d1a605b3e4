//! How a channel retries: the [`RetryPolicy`] every channel's config
//! embeds (`[jira.retry]`, `[slack.retry]`, `[pagerduty.retry]`), the
//! [`Failure`] a delivery attempt ends in, and [`classify`], which sorts
//! an HTTP answer into success, retry (429 with its `Retry-After`, 5xx,
//! connection errors, timeouts) and a permanent refusal (any other 4xx).
//!
//! The backoff is `backon`'s exponential schedule with jitter, capped;
//! `Retry-After` is honoured up to a ceiling. The outbox keeps a notice's
//! failure count across restarts, so the wait is asked for by that count
//! ([`RetryPolicy::backoff`]) rather than by a retry loop's state.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How transient failures (429, 5xx, connection errors, timeouts) are
/// retried. 4xx answers other than 429 are never retried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryPolicy {
    /// Delivery attempts per notice before it is moved to the outbox's
    /// `failed/` folder. `0` (the default): no limit — an outage, however
    /// long, loses nothing; the notice waits in the outbox.
    pub max_attempts: u32,
    /// First backoff after a transient failure, in milliseconds; doubled
    /// on each further failure of the same notice, with jitter (each wait
    /// is drawn between half and all of the exponential value, and never
    /// over `max_backoff_secs`).
    pub base_backoff_ms: u64,
    /// Ceiling of the exponential backoff, in seconds.
    pub max_backoff_secs: u64,
    /// Ceiling on a 429's `Retry-After`, in seconds (a misbehaving proxy
    /// cannot park the channel for days).
    pub max_retry_after_secs: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 0,
            base_backoff_ms: 500,
            max_backoff_secs: 300,
            max_retry_after_secs: 3600,
        }
    }
}

impl RetryPolicy {
    /// The wait before attempt `failures + 1` after `failures` transient
    /// failures in a row, jittered between half and all of
    /// `base × 2^(failures−1)`, capped at `max_backoff_secs`.
    ///
    /// ```
    /// use overtime_notify::RetryPolicy;
    /// let p = RetryPolicy { base_backoff_ms: 1000, max_backoff_secs: 3, ..Default::default() };
    /// let d = p.backoff(1).as_millis();
    /// assert!((500..=1000).contains(&d));
    /// assert!(p.backoff(10).as_millis() <= 3000);
    /// ```
    pub fn backoff(&self, failures: u32) -> Duration {
        use backon::BackoffBuilder;
        let cap = Duration::from_millis(self.max_backoff_secs.saturating_mul(1000).max(1));
        let half = Duration::from_millis(self.base_backoff_ms.max(1)).div_f64(2.0);
        // backon adds up to the delay itself as jitter: from half of the
        // exponential value, a wait between half and all of it.
        let mut schedule = backon::ExponentialBuilder::new()
            .with_min_delay(half.min(cap / 2))
            .with_max_delay(cap / 2)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times()
            .build();
        let nth = failures.saturating_sub(1).min(30) as usize;
        schedule.nth(nth).unwrap_or(cap).min(cap)
    }

    /// The wait after a failed attempt: the server's `Retry-After` (capped
    /// at `max_retry_after_secs`) when it gave one, else the backoff.
    pub fn wait(&self, failures: u32, retry_after: Option<Duration>) -> Duration {
        match retry_after {
            Some(d) => d.min(Duration::from_secs(self.max_retry_after_secs)),
            None => self.backoff(failures),
        }
    }
}

/// Why a delivery attempt did not deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Try again later (after `retry_after` when the server said so).
    Retry {
        /// What went wrong, for the logs and `failed/`.
        why: String,
        /// The server's `Retry-After`.
        retry_after: Option<Duration>,
        /// Answered 429.
        rate_limited: bool,
    },
    /// Refused for good (a 4xx other than 429, an API error that retrying
    /// cannot fix).
    Permanent(String),
}

impl Failure {
    /// A transient failure without a server-given delay.
    pub fn retry(why: impl Into<String>) -> Failure {
        Failure::Retry {
            why: why.into(),
            retry_after: None,
            rate_limited: false,
        }
    }
}

/// A progress that could not be saved: try the attempt again later.
impl From<crate::outbox::OutboxError> for Failure {
    fn from(e: crate::outbox::OutboxError) -> Self {
        Failure::retry(e.to_string())
    }
}

/// `Retry-After` as delta-seconds or an HTTP date.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(overtime_notify::parse_retry_after("7"), Some(Duration::from_secs(7)));
/// assert_eq!(overtime_notify::parse_retry_after("soon"), None);
/// ```
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at: DateTime<Utc> = DateTime::parse_from_rfc2822(v).ok()?.with_timezone(&Utc);
    Some((at - Utc::now()).to_std().unwrap_or(Duration::ZERO))
}

/// A request that reached the server and was answered 2xx: its status and
/// body.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The body, as text.
    pub body: String,
}

/// Sends `req` and sorts the outcome: 2xx → [`Answer`]; 429 →
/// [`Failure::Retry`] with `Retry-After`; 5xx, connection errors and
/// timeouts → retry; other statuses → [`Failure::Permanent`] with the
/// body. `what` names the call in the messages. The second value says
/// whether the request may have reached the server (false only for a
/// connection that was never made).
pub async fn classify(what: &str, req: reqwest::RequestBuilder) -> (Result<Answer, Failure>, bool) {
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            let reached = !e.is_connect();
            let why = if e.is_connect() {
                format!("{what}: could not connect: {e}")
            } else if e.is_timeout() {
                format!("{what}: timed out: {e}")
            } else {
                format!("{what}: {e}")
            };
            return (Err(Failure::retry(why)), reached);
        }
    };
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after);
    let body = resp.text().await.unwrap_or_default();
    let cut: String = body.chars().take(300).collect();
    let out = match status {
        200..=299 => Ok(Answer { status, body }),
        429 => Err(Failure::Retry {
            why: format!("{what}: rate-limited (429, Retry-After {retry_after:?})"),
            retry_after,
            rate_limited: true,
        }),
        500..=599 => Err(Failure::retry(format!("{what}: HTTP {status}: {cut}"))),
        _ => Err(Failure::Permanent(format!(
            "{what}: refused with HTTP {status}: {cut}"
        ))),
    };
    (out, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy {
            base_backoff_ms: 100,
            max_backoff_secs: 1,
            ..Default::default()
        };
        let mut drawn = std::collections::BTreeSet::new();
        for _ in 0..50 {
            let d1 = p.backoff(1).as_millis();
            assert!((50..=100).contains(&d1), "{d1}");
            drawn.insert(d1);
            let d3 = p.backoff(3).as_millis();
            assert!((200..=400).contains(&d3), "{d3}");
            assert!(p.backoff(40).as_millis() <= 1000);
        }
        // Jittered: collectors retrying together spread out.
        assert!(drawn.len() > 5, "{drawn:?}");
    }

    #[test]
    fn a_retry_after_is_honoured_up_to_its_ceiling() {
        let p = RetryPolicy {
            max_retry_after_secs: 10,
            ..Default::default()
        };
        assert_eq!(
            p.wait(1, Some(Duration::from_secs(3))),
            Duration::from_secs(3)
        );
        assert_eq!(
            p.wait(1, Some(Duration::from_secs(99_999))),
            Duration::from_secs(10)
        );
    }
}
