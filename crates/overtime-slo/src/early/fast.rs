//! The fast warnings: one alert per signal whose CUSUM ([`super::cusum`])
//! crossed `cusum_threshold`, under the early warning it belongs to —
//! timeouts creeping up under `OvertimeNearTimeoutRising`, the model
//! saturating (latency, time to first token, queue and prefill, queue
//! depth, KV cache) under `OvertimeLlmWaitRising` — with words that name
//! the windows really used.

use super::cusum::{ALLOWANCE, Detection};
use super::series::Signal;
use super::{LLM_WAIT_RISING, NEAR_TIMEOUT_RISING};
use crate::SloConfig;
use crate::alerts::Condition;
use crate::windows::window_name;

/// The alert a signal's fast warning is raised under.
pub fn alert_of(s: Signal) -> &'static str {
    match s {
        Signal::RequestTimeoutUse | Signal::CallTimeoutUse | Signal::RequestLatency => {
            NEAR_TIMEOUT_RISING
        }
        _ => LLM_WAIT_RISING,
    }
}

fn title(s: Signal) -> &'static str {
    match s {
        Signal::RequestTimeoutUse => "requests creeping toward their gateway timeout",
        Signal::RequestLatency => "requests slowing down",
        Signal::CallTimeoutUse => "calls creeping toward their timeout",
        Signal::LlmLatency => "LLM calls slowing down",
        Signal::Ttft => "time to first token creeping up",
        Signal::LlmQueuePrefill => "LLM queue and prefill rising",
        Signal::QueueDepth => "model server queue growing",
        Signal::KvCacheUse => "model server KV cache filling",
        Signal::LlmInFlight => "LLM calls piling up",
    }
}

/// A span in whole minutes from 2 minutes on (`23m`), else `30s`, `90s`.
fn minutes(s: f64) -> String {
    if s >= 120.0 {
        format!("{}m", (s / 60.0).round())
    } else {
        window_name(s)
    }
}

/// "the 4m before (all the history held)" or "the 55m before".
fn baseline_words(d: &Detection) -> String {
    let w = minutes(d.baseline_s);
    if d.baseline_short {
        format!("the {w} before (all the history held, since the collector's first data)")
    } else {
        format!("the {w} before")
    }
}

/// The fast warning of one detection, when its statistic crossed.
pub(super) fn condition(d: &Detection, cfg: &SloConfig) -> Option<Condition> {
    let h = cfg.early_warning.cusum_threshold;
    let recent = d.recent?;
    if d.stat < h || !d.relevant {
        return None;
    }
    let s = d.signal;
    let pen = if d.key.is_some() {
        super::cusum::key_penalty()
    } else {
        0.0
    };
    let unit = |n: u64| match (s.per_bucket(), n) {
        (true, 1) => "bucket",
        (true, _) => "buckets",
        _ => "items",
    };
    let summary = format!(
        "{}{}: {} {} over the last {} ({} {}), up from {} over {} ({} {}); CUSUM {:.1}{} >= {h} (30 s buckets, rises beyond half of {} counted)",
        title(s),
        d.key.as_ref().map_or(String::new(), |k| format!(" ({k})")),
        s.show(recent),
        s.what(),
        minutes(d.recent_s),
        d.recent_items,
        unit(d.recent_items),
        s.show(d.baseline),
        baseline_words(d),
        d.baseline_items,
        unit(d.baseline_items),
        d.stat + pen,
        if d.key.is_some() {
            format!(
                " less {pen:.1} (one of the signal's {} series tested)",
                super::cusum::TOP_KEYS + 1
            )
        } else {
            String::new()
        },
        match s {
            Signal::LlmLatency => "15 %".to_string(),
            Signal::RequestLatency => "20 %".to_string(),
            Signal::Ttft => "25 %".to_string(),
            Signal::QueueDepth => "1 request".to_string(),
            Signal::LlmInFlight => format!(
                "half the most in flight in a bucket of the baseline, {}",
                s.show(d.baseline_peak.unwrap_or(0.0))
            ),
            _ => format!("{:.0} points", s.min_shift() * 100.0),
        },
    );
    let description = format!(
        "one-sided CUSUM of each 30 s bucket's mean against the baseline (the history before the last 4 minutes, up to {}): z = (mean - baseline - half the minimum shift) / standard error (widened for a young baseline; at least a count's own noise for a queue), allowance {ALLOWANCE}; fires at {h} once the buckets since it left 0 average the minimum shift above the baseline",
        window_name(cfg.early_warning.baseline_window_s)
    );
    Some(Condition {
        name: alert_of(s),
        severity: "warning",
        labels: vec![("signal", s.as_str().to_string())],
        value: recent - d.baseline,
        summary,
        description,
        // The statistic is its own hold: it crossed on accumulated evidence.
        hold_us: 0,
    })
}
