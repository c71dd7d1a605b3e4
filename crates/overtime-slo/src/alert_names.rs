//! The catalog of alert names and severities (docs/metrics.md, docs/alerts.md):
//! one list for the Prometheus rules, the collector's evaluator and the
//! delivery crate, which re-exports it.

/// `OvertimeTimeoutBudgetBurnFast`: burn rate > 14.4 over 1 h and 5 min.
pub const BURN_FAST: &str = "OvertimeTimeoutBudgetBurnFast";
/// `OvertimeTimeoutBudgetBurnSlow`: burn rate > 6 over 6 h and 30 min.
pub const BURN_SLOW: &str = "OvertimeTimeoutBudgetBurnSlow";
/// `OvertimeTimeoutBudgetBurnTicket`: burn rate > 1 over 3 d and 6 h.
pub const BURN_TICKET: &str = "OvertimeTimeoutBudgetBurnTicket";
/// `OvertimeSemanticSuccessLow`: semantic success < 0.75 for 2 min.
pub const SEMANTIC_SUCCESS_LOW: &str = "OvertimeSemanticSuccessLow";
/// `OvertimeChainHealthLow`: chain health < 0.8.
pub const CHAIN_HEALTH_LOW: &str = "OvertimeChainHealthLow";
/// `OvertimeTtftSloBreach`: TTFT ≤ 800 ms for < 90 %, or P99 > 2.5 s.
pub const TTFT_SLO_BREACH: &str = "OvertimeTtftSloBreach";
/// `OvertimeModelBreakerL1`: 3 consecutive timeouts on one model.
pub const BREAKER_L1: &str = "OvertimeModelBreakerL1";
/// `OvertimeModelBreakerL2`: model P99 > 2× its baseline for 2 min.
pub const BREAKER_L2: &str = "OvertimeModelBreakerL2";
/// `OvertimeModelBreakerL3`: global error ratio > 15 % for 1 min.
pub const BREAKER_L3: &str = "OvertimeModelBreakerL3";
/// `OvertimeChainHealthFalling`: the share of requests whose chain
/// completed healthily fell below its baseline (early warning).
pub const CHAIN_HEALTH_FALLING: &str = "OvertimeChainHealthFalling";
/// `OvertimeNearTimeoutRising`: more calls use ≥ 80 % of their timeout.
pub const NEAR_TIMEOUT_RISING: &str = "OvertimeNearTimeoutRising";
/// `OvertimeLlmWaitRising`: the queue + prefill share of LLM time rose.
pub const LLM_WAIT_RISING: &str = "OvertimeLlmWaitRising";
/// `OvertimeSemanticSuccessFalling`: fewer answers are real successes.
pub const SEMANTIC_SUCCESS_FALLING: &str = "OvertimeSemanticSuccessFalling";
/// `Overtime504Incident`: a new 504 incident.
pub const INCIDENT: &str = "Overtime504Incident";

/// Every alert name of docs/metrics.md with its severity, in table order.
/// The Prometheus rules and the collector use exactly these.
///
/// ```
/// let (name, severity) = overtime_slo::alert_names::CATALOG[2];
/// assert_eq!((name, severity), ("OvertimeTimeoutBudgetBurnTicket", "ticket"));
/// ```
pub const CATALOG: [(&str, &str); 14] = [
    (BURN_FAST, "page"),
    (BURN_SLOW, "page"),
    (BURN_TICKET, "ticket"),
    (SEMANTIC_SUCCESS_LOW, "page"),
    (CHAIN_HEALTH_LOW, "page"),
    (TTFT_SLO_BREACH, "page"),
    (BREAKER_L1, "page"),
    (BREAKER_L2, "page"),
    (BREAKER_L3, "page"),
    (CHAIN_HEALTH_FALLING, "warning"),
    (NEAR_TIMEOUT_RISING, "warning"),
    (LLM_WAIT_RISING, "warning"),
    (SEMANTIC_SUCCESS_FALLING, "warning"),
    (INCIDENT, "page"),
];

/// The severity of a catalog alert, `None` for a name not in it.
///
/// ```
/// assert_eq!(overtime_slo::alert_names::severity_of("OvertimeModelBreakerL3"), Some("page"));
/// assert_eq!(overtime_slo::alert_names::severity_of("Nope"), None);
/// ```
pub fn severity_of(alertname: &str) -> Option<&'static str> {
    CATALOG
        .iter()
        .find(|(n, _)| *n == alertname)
        .map(|(_, s)| *s)
}
