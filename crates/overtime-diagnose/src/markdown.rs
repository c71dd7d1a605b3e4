//! The report for humans: each incident's headline, example traces,
//! causes, statistics, LLM latency by input-token bucket and findings.

use crate::Diagnosis;
use crate::fmt::{dur, pct};
use crate::report::{BucketRow, IncidentReport};
use std::fmt::Write;

fn opt_dur(v: Option<f64>) -> String {
    v.map(dur).unwrap_or_else(|| "–".into())
}

/// The latency table as Markdown.
pub(crate) fn latency_table(rows: &[BucketRow]) -> String {
    let mut s = String::from(
        "| input tokens | calls | P50 | P90 | P99 | max | 504 share |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
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

/// `dns_per_attempt_ms` → `dns per attempt`.
fn stat_name(key: &str) -> String {
    key.strip_suffix("_ms").unwrap_or(key).replace('_', " ")
}

/// A statistic for people, as the UI shows it: durations for `*_ms` keys,
/// counts as integers, other numbers to two decimals; a distribution as
/// `n 22 · P50 28.1 s · P90 41.0 s · P99 58.7 s · max 60.0 s`.
///
pub(crate) fn stat_value(key: &str, v: &serde_json::Value) -> String {
    let durations = key.ends_with("_ms");
    let one = |x: &serde_json::Value| match x.as_f64() {
        None if x.is_null() => "none".to_string(),
        None => x.to_string(),
        Some(f) if durations => dur(f),
        Some(f) if f.fract() == 0.0 => format!("{f:.0}"),
        Some(f) => format!("{f:.2}"),
    };
    let Some(map) = v.as_object() else {
        return one(v);
    };
    const ORDER: [&str; 7] = ["n", "median", "p50", "p90", "p99", "max", "threshold"];
    let rank = |k: &str| ORDER.iter().position(|o| *o == k).unwrap_or(ORDER.len());
    let mut entries: Vec<(&String, &serde_json::Value)> = map.iter().collect();
    entries.sort_by_key(|(k, _)| (rank(k), (*k).clone()));
    entries
        .into_iter()
        .map(|(k, x)| {
            let label = match k.as_str() {
                "p50" | "p90" | "p99" => k.to_uppercase(),
                _ => k.clone(),
            };
            let value = if k == "n" { x.to_string() } else { one(x) };
            format!("{label} {value}")
        })
        .collect::<Vec<_>>()
        .join(" · ")
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
    let h = &r.headline_share;
    let _ = writeln!(
        s,
        "- the headline's share: {} of the {} {} from {} to {} (this incident's window joined with every incident overlapping it)",
        h.count, h.total, h.of, h.window.start, h.window.end
    );
    let t = &r.totals;
    let _ = writeln!(
        s,
        "- requests {}, failures {}, 504 {}, 503 {}, timeouts {}\n",
        t.requests, t.failures, t.gateway_504, t.gateway_503, t.timeouts
    );
    // The traces to open first come before the tables: a report cut to
    // its first lines (a terminal, a ticket's preview) still names them.
    s.push_str("### Example traces\n\n");
    for id in &r.example_trace_ids {
        let _ = writeln!(s, "- `{id}`");
    }
    if r.trace_count > r.example_trace_ids.len() {
        let _ = writeln!(
            s,
            "- … and {} more",
            r.trace_count - r.example_trace_ids.len()
        );
    }
    s.push('\n');
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
    s.push_str("\n### Statistics of this cause\n\n| statistic | value |\n|---|---|\n");
    for (k, v) in &r.cause_stats {
        let _ = writeln!(s, "| {} | {} |", stat_name(k), stat_value(k, v));
    }
    s.push_str("\n### LLM latency by input-token bucket\n\n");
    s.push_str(&latency_table(&r.llm_latency_by_input_tokens));
    if !r.findings.is_empty() {
        s.push_str("\n### Findings\n\n");
        for f in &r.findings {
            let _ = writeln!(s, "- **{}** ({} traces): {}", f.kind, f.traces, f.summary);
        }
    }
    s
}

/// What the report for humans is made of (a run too big for memory has
/// no [`Diagnosis`] to hand, only these).
pub struct Parts<'a> {
    /// Requests seen.
    pub requests: usize,
    /// Failing verdicts.
    pub failed: usize,
    /// The incidents, in report order.
    pub incidents: &'a [IncidentReport],
    /// LLM latency over every trace.
    pub latency: &'a [BucketRow],
    /// Failing verdicts with root cause `unknown`, and the first ten of
    /// them in verdict order: (trace id, summary).
    pub unknown_count: usize,
    /// The first of them: (trace id, summary).
    pub unknown: &'a [(&'a str, &'a str)],
}

/// The whole diagnosis: a summary line, then every incident.
pub fn render(d: &Diagnosis) -> String {
    let failing = || {
        d.verdicts
            .iter()
            .filter(|v| v.outcome != overtime_model::Outcome::Ok)
    };
    let unknown: Vec<(&str, &str)> = failing()
        .filter(|v| v.root_cause.kind == overtime_model::RootCauseKind::Unknown)
        .map(|v| (v.trace_id.as_str(), v.root_cause.summary.as_str()))
        .collect();
    render_parts(&Parts {
        requests: d.summaries_len,
        failed: failing().count(),
        incidents: &d.incidents,
        latency: &d.latency,
        unknown_count: unknown.len(),
        unknown: &unknown[..unknown.len().min(10)],
    })
}

/// [`render`] from its parts.
pub fn render_parts(d: &Parts) -> String {
    let mut s = String::from("# overtime diagnosis\n\n");
    let _ = writeln!(
        s,
        "{} requests, {} failed, {} incidents.\n",
        d.requests,
        d.failed,
        d.incidents.len()
    );
    if d.incidents.is_empty() {
        s.push_str("No incident: no failing traces with a known cause.\n\n");
        s.push_str("### LLM latency by input-token bucket\n\n");
        s.push_str(&latency_table(d.latency));
    } else {
        s.push_str("| incident | traces | headline |\n|---|---:|---|\n");
        for r in d.incidents {
            let _ = writeln!(
                s,
                "| `{}` | {} | {} |",
                r.fingerprint, r.trace_count, r.headline
            );
        }
        s.push('\n');
        for r in d.incidents {
            s.push_str(&incident(r));
            s.push('\n');
        }
    }
    if d.unknown_count > 0 {
        let _ = writeln!(
            s,
            "## {} failing traces with too little data\n",
            d.unknown_count
        );
        for (id, summary) in d.unknown.iter().take(10) {
            let _ = writeln!(s, "- `{id}`: {summary}");
        }
    }
    s
}

#[cfg(test)]
mod doc_examples {
    //! What were doc examples before the function became internal.

    #[test]
    fn stat_values_read_as_durations_or_numbers() {
        use super::stat_value;
        let v = serde_json::json!({"p50": 536.6999999999999, "p90": 1800.0, "n": 3, "p99": null});
        assert_eq!(
            stat_value("latency_ms", &v),
            "n 3 · P50 537 ms · P90 1.8 s · P99 none"
        );
        let t = serde_json::json!({"median": 412.0, "p90": 488.5, "threshold": 300, "n": 22});
        assert_eq!(
            stat_value("input_tokens", &t),
            "n 22 · median 412 · P90 488.50 · threshold 300"
        );
    }
}
