//! The spans both store benchmarks load: traces of 8 spans (a root and
//! seven children), one trace starting every 17 ms, so 10 M spans cover
//! about 6 hours (6 hourly buckets). Every 50th trace is a 504 whose root
//! says so (`http_status` 504) and one child failed — an LLM call that
//! timed out, a tool call that timed out, or a rate-limited LLM call, in
//! turn: the causes the 504s-by-cause query counts.

// Each bench uses its part of this module.
#![allow(dead_code)]

use overtime_model::{SpanColumns, SpanRecord, SpanStatus, Stage};
use std::time::Duration;

pub const T0: i64 = 1_764_446_400_000_000;
pub const SPANS_PER_TRACE: u64 = 8;
pub const BATCH: u64 = 100_000;

/// Trace `i`'s id.
pub fn tid(i: u64) -> String {
    format!("{:032x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
}

/// Whether trace `t` is a 504, and if so which child failed and how.
pub fn failure(t: u64) -> Option<(Stage, &'static str)> {
    if !t.is_multiple_of(50) {
        return None;
    }
    Some(match (t / 50) % 3 {
        0 => (Stage::Llm, "timeout"),
        1 => (Stage::Tool, "timeout"),
        _ => (Stage::Llm, "rate_limited"),
    })
}

/// Spans `first..first+n` as one `spans` batch.
pub fn batch(first: u64, n: u64) -> arrow::record_batch::RecordBatch {
    let mut c = SpanColumns::new();
    for i in first..first + n {
        let trace = i / SPANS_PER_TRACE;
        let k = i % SPANS_PER_TRACE;
        let start = T0 + trace as i64 * 17_000 + k as i64 * 1_000;
        let root_id = format!("{:016x}", trace * SPANS_PER_TRACE);
        let mut s = SpanRecord::new(
            &tid(trace),
            &format!("{i:016x}"),
            "agent",
            if k == 0 { "POST /v1/agent" } else { "call" },
            start,
            start + 250_000,
        );
        s.stage = if k == 0 {
            Stage::Service
        } else if i.is_multiple_of(3) {
            Stage::Llm
        } else {
            Stage::Tool
        };
        s.status = SpanStatus::Ok;
        if k > 0 {
            s.parent_span_id = Some(root_id);
        }
        if let Some((stage, error)) = failure(trace) {
            if k == 0 {
                s.http_status = Some(504);
                s.status = SpanStatus::Error;
            } else if k == 3 {
                s.stage = stage;
                s.status = SpanStatus::Error;
                s.error_type = Some(error.to_string());
            }
        }
        s.model = (s.stage == Stage::Llm).then(|| "deepseek-v4-pro".to_string());
        s.input_tokens = Some((i % 900) as i64);
        s.line = i;
        c.append(&s);
    }
    c.finish()
}

/// The `p` quantile of `v`, ms.
pub fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1000.0
}

/// `n` trace ids spread over the first `traces` traces.
pub fn lookup_ids(n: usize, traces: u64) -> Vec<String> {
    (0..n as u64)
        .map(|k| tid((k * 7_919 + 13) % traces))
        .collect()
}
