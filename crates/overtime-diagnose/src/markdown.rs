//! The report for humans: each incident's headline, causes, statistics,
//! LLM latency by input-token bucket, findings and example traces.

use crate::fmt::{dur, pct};
use crate::report::{BucketRow, IncidentReport};
use crate::Diagnosis;
use std::fmt::Write;

fn opt_dur(v: Option<f64>) -> String {
    v.map(dur).unwrap_or_else(|| "–".into())
}

/// The latency table as Markdown.
pub fn latency_table(rows: &[BucketRow]) -> String {
    let mut s = String::from("| input tokens | calls | P50 | P90 | P99 | max | 504 share |\n|---|---:|---:|---:|---:|---:|---:|\n");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.bucket,
            r.calls,
            opt_dur(r.p50_ms),
            opt_dur(r.p90_ms),
            opt_dur(r.p99_ms),
            opt_dur(r.max_ms),
            pct(r.share_504)
        );
    }
    s
}

/// One incident's report.
pub fn incident(r: &IncidentReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## {}\n", r.headline);
    let _ = writeln!(
        s,
        "- incident `{}` ({}), {} failing traces",
        r.id, r.status, r.trace_count
    );
    let _ = writeln!(s, "- window {} → {}", r.window.start, r.window.end);
    let t = &r.totals;
    let _ = writeln!(
        s,
        "- requests {}, failures {}, 504 {}, 503 {}, timeouts {}\n",
        t.requests, t.failures, t.gateway_504, t.gateway_503, t.timeouts
    );
    s.push_str("### Causes of the failures in this window\n\n| cause | component | traces | share |\n|---|---|---:|---:|\n");
    for c in &r.causes {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            c.kind,
            c.component,
            c.count,
            pct(c.share)
        );
    }
    s.push_str("\n### Statistics of this cause\n\n");
    for (k, v) in &r.cause_stats {
        let _ = writeln!(s, "- {k}: `{v}`");
    }
    s.push_str("\n### LLM latency by input-token bucket\n\n");
    s.push_str(&latency_table(&r.llm_latency_by_input_tokens));
    if !r.findings.is_empty() {
        s.push_str("\n### Findings\n\n");
        for f in &r.findings {
            let _ = writeln!(s, "- **{}** ({} traces): {}", f.kind, f.traces, f.summary);
        }
    }
    s.push_str("\n### Example traces\n\n");
    for id in &r.example_trace_ids {
        let _ = writeln!(s, "- `{id}`");
    }
    s
}

/// The whole diagnosis: a summary line, then every incident.
pub fn render(d: &Diagnosis) -> String {
    let mut s = String::from("# overtime diagnosis\n\n");
    let failed = d
        .verdicts
        .iter()
        .filter(|v| v.outcome != overtime_model::Outcome::Ok)
        .count();
    let _ = writeln!(
        s,
        "{} requests, {} failed, {} incidents.\n",
        d.summaries_len,
        failed,
        d.incidents.len()
    );
    if d.incidents.is_empty() {
        s.push_str("No incident: no failing traces with a known cause.\n\n");
        s.push_str("### LLM latency by input-token bucket\n\n");
        s.push_str(&latency_table(&d.latency));
    } else {
        s.push_str("| incident | traces | headline |\n|---|---:|---|\n");
        for r in &d.incidents {
            let _ = writeln!(
                s,
                "| `{}` | {} | {} |",
                r.fingerprint, r.trace_count, r.headline
            );
        }
        s.push('\n');
        for r in &d.incidents {
            s.push_str(&incident(r));
            s.push('\n');
        }
    }
    let unknown: Vec<_> = d
        .verdicts
        .iter()
        .filter(|v| {
            v.outcome != overtime_model::Outcome::Ok
                && v.root_cause.kind == overtime_model::RootCauseKind::Unknown
        })
        .collect();
    if !unknown.is_empty() {
        let _ = writeln!(
            s,
            "## {} failing traces with too little data\n",
            unknown.len()
        );
        for v in unknown.iter().take(10) {
            let _ = writeln!(s, "- `{}`: {}", v.trace_id, v.root_cause.summary);
        }
    }
    s
}
