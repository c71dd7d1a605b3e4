//! The advice and the what-if report for humans: aligned text for a
//! terminal, or Markdown for a ticket.

use crate::Advice;
use crate::advice::{GroupAdvice, Method, Source};
use crate::whatif::WhatIf;
use overtime_diagnose::fmt::{dur, pct};

/// Text (aligned columns) or Markdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Aligned columns for a terminal.
    Text,
    /// Markdown with pipe tables (the API's `?format=md`).
    Markdown,
}

/// A table: aligned for a terminal, pipes for Markdown.
pub(crate) fn table(style: Style, head: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    match style {
        Style::Markdown => {
            out.push_str(&format!("| {} |\n", head.join(" | ")));
            out.push_str(&format!(
                "|{}|\n",
                head.iter().map(|_| "---").collect::<Vec<_>>().join("|")
            ));
            for r in rows {
                let cells: Vec<String> = r.iter().map(|c| c.replace('|', "\\|")).collect();
                out.push_str(&format!("| {} |\n", cells.join(" | ")));
            }
        }
        Style::Text => {
            let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
            for r in rows {
                for (i, c) in r.iter().enumerate() {
                    w[i] = w[i].max(c.chars().count());
                }
            }
            let line = |cells: Vec<&str>| {
                let mut s = String::new();
                for (i, c) in cells.iter().enumerate() {
                    s.push_str(c);
                    if i + 1 < cells.len() {
                        s.push_str(&" ".repeat(w[i] - c.chars().count() + 2));
                    }
                }
                s.trim_end().to_string() + "\n"
            };
            out.push_str(&line(head.to_vec()));
            for r in rows {
                out.push_str(&line(r.iter().map(String::as_str).collect()));
            }
        }
    }
    out
}

fn heading(style: Style, level: usize, text: &str) -> String {
    match style {
        Style::Markdown => format!("\n{} {text}\n\n", "#".repeat(level)),
        Style::Text => format!("\n{text}\n{}\n", "-".repeat(text.chars().count())),
    }
}

fn o(ms: Option<f64>) -> String {
    ms.map(dur).unwrap_or_else(|| "—".into())
}

/// "30.0 s (configured)", "none".
pub(crate) fn in_force(g: &GroupAdvice) -> String {
    match &g.timeout {
        None => "none".into(),
        Some(t) => {
            let src = match t.source {
                Source::Configured => "configured",
                Source::Observed => "observed",
                Source::Inferred => "inferred",
            };
            match t.range_ms {
                Some((lo, hi)) => format!("{} ({src}, {}–{})", dur(t.ms), dur(lo), dur(hi)),
                None => format!("{} ({src})", dur(t.ms)),
            }
        }
    }
}

fn method(m: Option<Method>) -> &'static str {
    match m {
        Some(Method::KaplanMeier) => "Kaplan–Meier",
        Some(Method::LognormalTail) => "censored log-normal",
        Some(Method::LatencyModel) => "latency model",
        Some(Method::Alignment) => "alignment rule",
        None => "—",
    }
}

/// One row of a group table.
fn group_row(g: &GroupAdvice, with_bucket: bool) -> Vec<String> {
    let mut r = vec![g.name.clone()];
    if with_bucket {
        r.push(g.bucket.clone().unwrap_or_default());
    }
    let censored = g.timed_out + g.cut;
    r.extend([
        g.count.to_string(),
        format!(
            "{} ({})",
            censored,
            pct(censored as f64 / g.count.max(1) as f64)
        ),
        o(g.finished_ms.p50),
        o(g.finished_ms.p90),
        o(g.finished_ms.p99),
        o(g.finished_ms.p999),
        o(g.survival_ms.p99),
        in_force(g),
        pct(g.share_timed_out),
        pct(g.share_504),
        match g.recommended_ms {
            Some(r) => format!("{} ({})", dur(r), g.change),
            None => "—".into(),
        },
        method(g.method).into(),
    ]);
    r
}

const GROUP_HEAD: [&str; 13] = [
    "calls",
    "censored",
    "P50",
    "P90",
    "P99",
    "P99.9",
    "P99 (KM)",
    "timeout in force",
    "timed out",
    "504",
    "recommended",
    "method",
    "",
];

fn group_table(style: Style, first: &[&str], groups: &[GroupAdvice]) -> String {
    let with_bucket = first.len() > 1;
    let mut head: Vec<&str> = first.to_vec();
    head.extend(&GROUP_HEAD[..12]);
    let rows: Vec<Vec<String>> = groups.iter().map(|g| group_row(g, with_bucket)).collect();
    table(style, &head, &rows)
}

/// The advice, for humans.
pub fn advice(a: &Advice, style: Style) -> String {
    let mut s = String::new();
    let title = format!(
        "Timeout advice: {} requests{}; recommended timeouts cover {:.1} % of calls",
        a.traces,
        a.window
            .as_ref()
            .map(|(f, t)| format!(", {f} – {t}"))
            .unwrap_or_default(),
        a.target * 100.0
    );
    s.push_str(&match style {
        Style::Markdown => format!("# {title}\n"),
        Style::Text => format!("{title}\n"),
    });
    s.push_str(
        "\nP50–P99.9 are over calls that finished; censored calls (cut by a timeout or with \
         their request) count only as lasting at least as long as they ran: P99 (KM) is the \
         Kaplan–Meier estimate over all calls, — where the cuts leave it unknown.\n",
    );
    if !a.llm.is_empty() {
        s.push_str(&heading(style, 2, "LLM calls by model and input tokens"));
        s.push_str(&group_table(style, &["model", "tokens"], &a.llm));
    }
    if !a.models.is_empty() {
        s.push_str(&heading(style, 2, "Latency law per model"));
        let rows: Vec<Vec<String>> = a
            .models
            .iter()
            .map(|m| {
                let f = &m.fit;
                vec![
                    m.model.clone(),
                    serde_json::to_value(f.form)
                        .ok()
                        .and_then(|v| v.as_str().map(|s| s.replace('_', " ")))
                        .unwrap_or_default(),
                    dur(f.base_ms),
                    format!("{:.4e}", f.a),
                    format!("{:.3e}", f.a2),
                    format!("{:.3} ({})", f.b, f.load),
                    format!("{:.3}", f.sigma),
                    format!("{} ({} censored)", f.n, f.censored),
                    format!("{:.3}", f.r2),
                    format!(
                        "{:.2} / {:.2} / {:.2}",
                        f.residual_p10, f.residual_p50, f.residual_p90
                    ),
                ]
            })
            .collect();
        s.push_str(&table(
            style,
            &[
                "model",
                "form",
                "base",
                "a (per token)",
                "a2 (per token²)",
                "b (per load)",
                "σ (ln)",
                "calls",
                "R² (ln)",
                "residual P10/P50/P90",
            ],
            &rows,
        ));
        s.push('\n');
        for m in &a.models {
            s.push_str(&format!("- {}: {}\n", m.model, m.rule));
        }
    }
    if !a.tools.is_empty() {
        s.push_str(&heading(style, 2, "Tools and memory stores"));
        s.push_str(&group_table(style, &["tool"], &a.tools));
    }
    if !a.gateways.is_empty() {
        s.push_str(&heading(style, 2, "Gateway layers (request time)"));
        s.push_str(&group_table(style, &["layer"], &a.gateways));
    }
    for al in &a.alignment {
        s.push_str(&heading(
            style,
            2,
            &format!(
                "Alignment, service {} ({} requests): {}",
                al.service,
                al.traces,
                if al.holds_now {
                    "the rule holds today"
                } else {
                    "the rule is broken today"
                }
            ),
        ));
        if let Some(f) = &al.first {
            s.push_str(&format!("Change first: {f}\n\n"));
        }
        let rows: Vec<Vec<String>> = al
            .steps
            .iter()
            .map(|st| {
                vec![
                    st.layer.clone(),
                    st.current_ms.map(dur).unwrap_or_else(|| "none".into()),
                    o(st.recommended_ms),
                    st.change_ms
                        .map(|c| format!("{}{}", if c >= 0.0 { "+" } else { "−" }, dur(c.abs())))
                        .unwrap_or_else(|| "—".into()),
                    st.why.clone(),
                ]
            })
            .collect();
        s.push_str(&table(
            style,
            &[
                "layer (outermost first)",
                "now",
                "recommended",
                "change",
                "why",
            ],
            &rows,
        ));
    }
    s
}

/// The what-if report, for humans.
pub fn whatif(w: &WhatIf, style: Style) -> String {
    crate::whatif::render(w, style)
}
