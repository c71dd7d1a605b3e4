//! What fired and when: every alert's firing spans in data time, for the
//! charts over time (the UI's overview marks them on its time axis).
//!
//! Design rules:
//! - One entry per firing span of one alert (its name and labels): it
//!   opens at the evaluation that first finds it firing (dated by the
//!   alert's own `active_since_us`, when its condition began to hold) and
//!   closes at the first evaluation that finds it no longer firing.
//! - Bounded: the last [`MAX_SPANS`] spans; an older one is dropped.
//!
//! ```
//! use overtime_slo::{RequestObservation, Slo};
//! use overtime_model::Outcome;
//! let mut slo = Slo::new(Default::default());
//! let t0 = 1_764_000_000_000_000;
//! for i in 0..100 {
//!     let outcome = if i % 10 < 2 { Outcome::Error } else { Outcome::Ok };
//!     slo.observe(&RequestObservation::new("/chat", outcome, t0 + i * 1_200_000));
//! }
//! slo.evaluate();
//! let l3 = slo.alert_history().into_iter().find(|a| a.name == "OvertimeModelBreakerL3").unwrap();
//! assert!(l3.end_us.is_none(), "still firing");
//! assert!(l3.start_us >= t0);
//! ```

use crate::Alert;
use crate::alert_names::{
    CHAIN_HEALTH_FALLING, LLM_WAIT_RISING, NEAR_TIMEOUT_RISING, SEMANTIC_SUCCESS_FALLING,
};
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};

/// Most firing spans kept.
pub const MAX_SPANS: usize = 1_000;

/// The alerts that are early warnings (docs/advice.md#early-warning).
pub const EARLY_WARNINGS: [&str; 4] = [
    CHAIN_HEALTH_FALLING,
    NEAR_TIMEOUT_RISING,
    LLM_WAIT_RISING,
    SEMANTIC_SUCCESS_FALLING,
];

/// One alert firing from `start_us` to `end_us`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlertSpan {
    /// The `alertname`.
    pub name: String,
    /// `page`, `ticket` or `warning`.
    pub severity: String,
    /// Whether it is one of the early warnings ([`EARLY_WARNINGS`]).
    pub early_warning: bool,
    /// Every label (`model` for a breaker).
    pub labels: BTreeMap<String, String>,
    /// The summary when it began firing.
    pub summary: String,
    /// When its condition began to hold (data time, µs).
    pub start_us: i64,
    /// The first evaluation that found it no longer firing; `None` while it fires.
    pub end_us: Option<i64>,
}

/// The firing spans, oldest first.
#[derive(Debug, Clone, Default)]
pub(crate) struct AlertLog {
    spans: VecDeque<AlertSpan>,
}

impl AlertLog {
    /// Notes the alerts `firing` at the evaluation at `now_us`.
    pub fn update(&mut self, now_us: i64, firing: &[Alert]) {
        for open in self.spans.iter_mut().filter(|s| s.end_us.is_none()) {
            if !firing.iter().any(|a| a.labels == open.labels) {
                open.end_us = Some(now_us);
            }
        }
        for a in firing {
            let known = self
                .spans
                .iter()
                .any(|s| s.end_us.is_none() && s.labels == a.labels);
            if known {
                continue;
            }
            if self.spans.len() == MAX_SPANS {
                self.spans.pop_front();
            }
            self.spans.push_back(AlertSpan {
                name: a.name().to_string(),
                severity: a.severity().to_string(),
                early_warning: EARLY_WARNINGS.contains(&a.name()),
                labels: a.labels.clone(),
                summary: a.summary().to_string(),
                start_us: a.active_since_us.min(now_us),
                end_us: None,
            });
        }
    }

    /// Every span kept, oldest first.
    pub fn spans(&self) -> Vec<AlertSpan> {
        self.spans.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(name: &str, since: i64) -> Alert {
        Alert {
            labels: [
                ("alertname".to_string(), name.to_string()),
                ("severity".into(), "warning".into()),
            ]
            .into(),
            annotations: [("summary".to_string(), format!("{name} holds"))].into(),
            value: 1.0,
            active_since_us: since,
        }
    }

    #[test]
    fn a_span_opens_when_an_alert_fires_and_closes_when_it_stops() {
        let mut log = AlertLog::default();
        log.update(10, &[alert(CHAIN_HEALTH_FALLING, 5)]);
        log.update(
            20,
            &[
                alert(CHAIN_HEALTH_FALLING, 5),
                alert("OvertimeChainHealthLow", 18),
            ],
        );
        log.update(30, &[alert("OvertimeChainHealthLow", 18)]);
        log.update(40, &[alert(CHAIN_HEALTH_FALLING, 35)]);
        let s = log.spans();
        assert_eq!(s.len(), 3);
        assert_eq!(
            (s[0].start_us, s[0].end_us, s[0].early_warning),
            (5, Some(30), true)
        );
        assert_eq!(
            (s[1].start_us, s[1].end_us, s[1].early_warning),
            (18, Some(40), false)
        );
        assert_eq!(
            (s[2].start_us, s[2].end_us),
            (35, None),
            "a second firing is a new span"
        );
    }
}
