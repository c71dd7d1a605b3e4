//! The collector's own alerts: the names of docs/metrics.md, each a
//! condition over the windows plus a hold (`for:`) measured in data time,
//! as Prometheus would evaluate the shipped rules.

use serde::Serialize;
use std::collections::BTreeMap;

// The names of the catalog (one list for the rules, the evaluator and the
// sender).
pub use crate::alert_names::{
    BREAKER_L1, BREAKER_L2, BREAKER_L3, BURN_FAST, BURN_SLOW, BURN_TICKET, CHAIN_HEALTH_FALLING,
    CHAIN_HEALTH_LOW, LLM_WAIT_RISING, NEAR_TIMEOUT_RISING, SEMANTIC_SUCCESS_FALLING,
    SEMANTIC_SUCCESS_LOW, TTFT_SLO_BREACH,
};

/// Every alert this crate evaluates, in docs/metrics.md order.
/// (`Overtime504Incident` comes from incidents, not from SLOs.)
pub const ALERT_NAMES: [&str; 13] = [
    BURN_FAST,
    BURN_SLOW,
    BURN_TICKET,
    SEMANTIC_SUCCESS_LOW,
    CHAIN_HEALTH_LOW,
    TTFT_SLO_BREACH,
    BREAKER_L1,
    BREAKER_L2,
    BREAKER_L3,
    CHAIN_HEALTH_FALLING,
    NEAR_TIMEOUT_RISING,
    LLM_WAIT_RISING,
    SEMANTIC_SUCCESS_FALLING,
];

/// An alert that holds now (its condition held for its hold duration).
///
/// Its identity is its labels: `alertname`, `severity`, and `model` for
/// the per-model breakers. Annotations: `summary` (one sentence with the
/// numbers) and `description` (the condition).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    /// `alertname`, `severity`, and `model` for the per-model breakers.
    pub labels: BTreeMap<String, String>,
    /// `summary` (one sentence with the numbers) and `description` (the condition).
    pub annotations: BTreeMap<String, String>,
    /// The value compared with the threshold.
    pub value: f64,
    /// When the condition started to hold (data time, µs).
    pub active_since_us: i64,
}

impl Alert {
    /// The `alertname` label (`OvertimeModelBreakerL3`…).
    pub fn name(&self) -> &str {
        self.labels.get("alertname").map_or("", String::as_str)
    }
    /// The `severity` label: `page`, `ticket` or `warning`.
    pub fn severity(&self) -> &str {
        self.labels.get("severity").map_or("", String::as_str)
    }
    /// The `summary` annotation: what holds, with its numbers.
    pub fn summary(&self) -> &str {
        self.annotations.get("summary").map_or("", String::as_str)
    }
    /// Label `name`, if the alert has it.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.get(name).map(String::as_str)
    }
}

/// A condition that holds at one evaluation.
#[derive(Debug, Clone)]
pub(crate) struct Condition {
    pub name: &'static str,
    pub severity: &'static str,
    pub labels: Vec<(&'static str, String)>,
    pub value: f64,
    pub summary: String,
    pub description: String,
    pub hold_us: i64,
}

/// Pending conditions and since when they hold.
#[derive(Debug, Clone, Default)]
pub(crate) struct Holds {
    since: BTreeMap<String, i64>,
}

impl Holds {
    /// The alerts firing at `now_us` given the conditions holding now.
    /// A condition that stops holding forgets its start.
    pub fn apply(&mut self, now_us: i64, conditions: Vec<Condition>) -> Vec<Alert> {
        let mut next = BTreeMap::new();
        let mut firing = Vec::new();
        for c in conditions {
            let mut labels = BTreeMap::new();
            labels.insert("alertname".to_string(), c.name.to_string());
            labels.insert("severity".to_string(), c.severity.to_string());
            for (k, v) in &c.labels {
                labels.insert(k.to_string(), v.clone());
            }
            let key = format!("{labels:?}");
            let since = self.since.get(&key).copied().unwrap_or(now_us).min(now_us);
            next.insert(key, since);
            if now_us - since >= c.hold_us {
                let mut annotations = BTreeMap::new();
                annotations.insert("summary".to_string(), c.summary);
                annotations.insert("description".to_string(), c.description);
                firing.push(Alert {
                    labels,
                    annotations,
                    value: c.value,
                    active_since_us: since,
                });
            }
        }
        self.since = next;
        firing
    }
}

/// `16.0 %`
pub(crate) fn pct(r: f64) -> String {
    format!("{:.1} %", r * 100.0)
}

/// `2.61 s`
pub(crate) fn secs(s: f64) -> String {
    if s >= 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.2} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(hold_us: i64) -> Condition {
        Condition {
            name: BREAKER_L3,
            severity: "page",
            labels: vec![],
            value: 0.16,
            summary: "s".into(),
            description: "d".into(),
            hold_us,
        }
    }

    #[test]
    fn holds_in_data_time_and_reset_when_the_condition_breaks() {
        let mut h = Holds::default();
        assert!(h.apply(0, vec![cond(60)]).is_empty());
        assert!(h.apply(59, vec![cond(60)]).is_empty());
        let f = h.apply(60, vec![cond(60)]);
        assert_eq!((f.len(), f[0].active_since_us), (1, 0));
        assert!(h.apply(61, vec![]).is_empty());
        assert!(h.apply(62, vec![cond(60)]).is_empty(), "the hold restarts");
        assert_eq!(h.apply(5, vec![cond(0)]).len(), 1, "no hold: at once");
    }

    #[test]
    fn evaluates_every_alert_of_the_catalog_but_the_incident_page() {
        let catalog: Vec<&str> = crate::alert_names::CATALOG
            .iter()
            .map(|(name, _)| *name)
            .filter(|n| *n != crate::alert_names::INCIDENT)
            .collect();
        assert_eq!(ALERT_NAMES.to_vec(), catalog);
    }
}
