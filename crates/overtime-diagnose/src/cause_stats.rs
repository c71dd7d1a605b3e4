//! The statistics that explain one cause (docs/diagnosis.md#incidents-and-their-reports): prefill against the
//! input-token threshold, tools against their timeout, connect times, the
//! idle gaps of streams… and the short phrase the headline ends with.

use crate::config::DiagnoseConfig;
use crate::fmt::{dur, median, percentile};
use crate::report::med_dur;
use crate::verdict::TraceSummary;
use overtime_model::{RootCauseKind as K, Verdict};
use serde_json::{Value, json};
use std::collections::BTreeMap;

fn dist(v: &[f64]) -> Value {
    json!({
        "p50": percentile(v, 0.5), "p90": percentile(v, 0.9), "p99": percentile(v, 0.99),
        "max": percentile(v, 1.0), "n": v.len()
    })
}

/// Statistics for `kind` over the incident's traces, and the headline phrase.
pub fn cause_stats(
    kind: K,
    run: &[(&Verdict, &TraceSummary)],
    cfg: &DiagnoseConfig,
) -> (BTreeMap<String, Value>, Option<String>) {
    let mut s = BTreeMap::new();
    let calls: Vec<_> = run
        .iter()
        .filter_map(|(_, t)| t.dominant.as_ref())
        .collect();
    let f = |get: &dyn Fn(&crate::calls::Call) -> Option<f64>| -> Vec<f64> {
        calls.iter().filter_map(|c| get(c)).collect()
    };
    let latency = f(&|c| Some(c.raw_attempts_ms().iter().sum()));
    let elapsed: Vec<f64> = run.iter().map(|(v, _)| v.budget.consumed_ms).collect();
    s.insert("elapsed_ms".into(), dist(&elapsed));
    let line = match kind {
        K::LlmPrefillSlow | K::LlmDecodeSlow | K::LlmQueueing | K::LlmSlow | K::JudgeSlow => {
            let tokens = f(&|c| c.input_tokens.map(|t| t as f64));
            let out_tokens = f(&|c| c.output_tokens.map(|t| t as f64));
            let queue = f(&|c| c.phases.queue_ms);
            let prefill = f(&|c| c.phases.prefill_ms);
            let decode = f(&|c| c.phases.decode_ms);
            s.insert("latency_ms".into(), dist(&latency));
            s.insert(
                "input_tokens".into(),
                json!({"median": median(&tokens), "p90": percentile(&tokens, 0.9), "threshold": cfg.threshold_tokens, "n": tokens.len()}),
            );
            s.insert("output_tokens".into(), dist(&out_tokens));
            s.insert("queue_ms".into(), dist(&queue));
            s.insert("prefill_ms".into(), dist(&prefill));
            s.insert("decode_ms".into(), dist(&decode));
            let tok = median(&tokens).map(|m| {
                let cmp = if m > cfg.threshold_tokens as f64 {
                    ">"
                } else {
                    "≤"
                };
                format!("median input {m:.0} tokens {cmp} {}", cfg.threshold_tokens)
            });
            match kind {
                K::LlmPrefillSlow => {
                    tok.or_else(|| Some(format!("median prefill {}", med_dur(&prefill))))
                }
                K::LlmDecodeSlow => Some(match median(&out_tokens) {
                    Some(o) => format!(
                        "median decode {}, median output {o:.0} tokens",
                        med_dur(&decode)
                    ),
                    None => format!("median decode {}", med_dur(&decode)),
                }),
                K::LlmQueueing => {
                    let gpu = f(&|c| c.gpu_load.map(|g| if g > 1.0 { g / 100.0 } else { g }));
                    s.insert("gpu_load".into(), dist(&gpu));
                    Some(match median(&gpu) {
                        Some(g) => format!(
                            "median queue wait {} at GPU load {:.0} %",
                            med_dur(&queue),
                            g * 100.0
                        ),
                        None => format!("median queue wait {}", med_dur(&queue)),
                    })
                }
                K::JudgeSlow => Some(match median(&tokens) {
                    Some(t) => format!(
                        "median judge latency {} for {t:.0} input tokens",
                        med_dur(&latency)
                    ),
                    None => format!("median judge latency {}", med_dur(&latency)),
                }),
                _ => Some(format!("median LLM latency {}", med_dur(&latency))),
            }
        }
        K::ToolNoTimeout | K::ToolSlow => {
            let timeouts = f(&|c| c.timeout_ms);
            s.insert("duration_ms".into(), dist(&latency));
            s.insert("timeout_ms".into(), json!(median(&timeouts)));
            let against = median(&timeouts)
                .map(|t| format!("its timeout {}", dur(t)))
                .unwrap_or_else(|| "no timeout".into());
            Some(format!(
                "P50 {}, P99 {} against {against}",
                med_dur(&latency),
                percentile(&latency, 0.99).map(dur).unwrap_or_default()
            ))
        }
        K::UpstreamConnectSlow => {
            let connect = f(&|c| c.dns_connect_ms);
            let dns = f(&|c| c.dns_ms.map(|d| d / c.attempts() as f64));
            s.insert("connect_ms".into(), dist(&connect));
            s.insert("dns_per_attempt_ms".into(), dist(&dns));
            s.insert("call_ms".into(), dist(&latency));
            Some(match median(&dns) {
                Some(d) => format!(
                    "median DNS {} per attempt, DNS/connect {} of {}",
                    dur(d),
                    med_dur(&connect),
                    med_dur(&latency)
                ),
                None => format!(
                    "median DNS/connect {} of {}",
                    med_dur(&connect),
                    med_dur(&latency)
                ),
            })
        }
        K::RetryAmplification => {
            let attempts = f(&|c| Some(c.attempts() as f64));
            s.insert("attempts".into(), dist(&attempts));
            Some(format!(
                "median {:.0} attempts, {} in all",
                median(&attempts).unwrap_or(0.0),
                med_dur(&latency)
            ))
        }
        K::PoolSaturation => {
            let wait = f(&|c| Some(c.critical_us as f64 / 1000.0));
            s.insert("wait_ms".into(), dist(&wait));
            Some(format!("median wait before work {}", med_dur(&wait)))
        }
        K::StreamIdleGap => {
            let gaps: Vec<f64> = run.iter().filter_map(|(_, t)| t.stream_gap_ms).collect();
            s.insert("gap_ms".into(), dist(&gaps));
            Some(format!("median idle gap {}", med_dur(&gaps)))
        }
        K::GatewayTimeoutMismatch => {
            let gw: Vec<f64> = run
                .iter()
                .filter_map(|(v, _)| {
                    v.gateway
                        .as_ref()
                        .and_then(|g| g.timeout_ms.or(g.request_time_ms))
                })
                .collect();
            s.insert("gateway_timeout_ms".into(), dist(&gw));
            Some(format!("gateway gave up at {}", med_dur(&gw)))
        }
        K::SerialBudgetExhaustion => Some(format!(
            "median request {} with no dominant call",
            med_dur(&elapsed)
        )),
        K::Unknown => None,
    };
    (s, line)
}
