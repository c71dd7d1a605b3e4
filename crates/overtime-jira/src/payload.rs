//! The bodies the notifier sends: an issue's fields and a recurrence
//! comment, as wiki markup (v2) or ADF (v3).

use crate::config::JiraConfig;
use crate::event::IncidentEvent;
use crate::label::{OVERTIME_LABEL, fingerprint_label, incident_label};
use crate::{adf, wiki};
use serde_json::{Value, json};

/// Jira's limit on `summary`.
pub(crate) const MAX_SUMMARY: usize = 255;
/// Reports longer than this (characters of Markdown) are cut at a line
/// boundary, well under Jira's 32,767-character limit on text fields.
pub(crate) const MAX_REPORT: usize = 20_000;

/// The summary: the headline on one line, at most 255 characters.
pub(crate) fn summary(headline: &str, fingerprint: &str) -> String {
    let one_line = headline.split_whitespace().collect::<Vec<_>>().join(" ");
    let s = if one_line.is_empty() {
        format!("overtime incident {fingerprint}")
    } else {
        one_line
    };
    if s.chars().count() <= MAX_SUMMARY {
        s
    } else {
        s.chars().take(MAX_SUMMARY - 1).collect::<String>() + "…"
    }
}

fn cut_report(md: &str, url: Option<&str>) -> String {
    if md.chars().count() <= MAX_REPORT {
        return md.to_string();
    }
    let mut out = String::new();
    for line in md.lines() {
        if out.chars().count() + line.chars().count() + 1 > MAX_REPORT {
            break;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.push_str("\n*(report cut to fit Jira");
    if url.is_some() {
        out.push_str("; the full report is at the link below");
    }
    out.push_str(")*\n");
    out
}

fn link(url: Option<&str>) -> String {
    match url {
        Some(u) => format!("[Live report]({u})"),
        None => "(no report link configured)".into(),
    }
}

fn render(cfg: &JiraConfig, md: &str) -> Value {
    if cfg.api_version() == 2 {
        Value::String(wiki::from_markdown(md))
    } else {
        adf::from_markdown(md)
    }
}

/// The Markdown of the description: the report, then where it came from.
pub(crate) fn description_markdown(ev: &IncidentEvent, note: Option<&str>) -> String {
    let mut md = cut_report(&ev.report_markdown, ev.report_url.as_deref());
    md.push_str(&format!(
        "\n---\n\nOpened by overtime for incident `{}` (fingerprint `{}`, {} failing traces, opened {}). {}\n",
        ev.incident_id,
        ev.fingerprint,
        ev.failures,
        ev.at.to_rfc3339(),
        link(ev.report_url.as_deref())
    ));
    if let Some(n) = note {
        md.push_str(&format!("\n{n}\n"));
    }
    md.push_str(&format!(
        "\nIncident marker: `{}`\n",
        incident_label(&ev.incident_id)
    ));
    md
}

/// The labels of a created issue: fingerprint label, `overtime`, incident
/// label, then the configured ones (no duplicates).
pub(crate) fn labels(cfg: &JiraConfig, ev: &IncidentEvent) -> Vec<String> {
    let mut out = vec![
        fingerprint_label(&ev.fingerprint),
        OVERTIME_LABEL.to_string(),
        incident_label(&ev.incident_id),
    ];
    for l in &cfg.labels {
        if !out.contains(l) {
            out.push(l.clone());
        }
    }
    out
}

/// `fields` of the issue for a new incident.
pub(crate) fn create_fields(cfg: &JiraConfig, ev: &IncidentEvent, note: Option<&str>) -> Value {
    json!({
        "project": {"key": cfg.project_key},
        "summary": summary(&ev.headline, &ev.fingerprint),
        "issuetype": {"name": cfg.issue_type},
        "description": render(cfg, &description_markdown(ev, note)),
        "labels": labels(cfg, ev),
    })
}

/// The comment for a recurrence; `reopened` names the status the issue
/// was reopened from.
pub(crate) fn comment_body(cfg: &JiraConfig, ev: &IncidentEvent, reopened: Option<&str>) -> Value {
    let what = match reopened {
        Some(from) => format!("**The incident recurred; reopened from {from}.**"),
        None => "**The incident recurred.**".to_string(),
    };
    let md = format!(
        "{what} {}\n\n- incident `{}`, {} failing traces, opened {}\n- {}\n- incident marker: `{}`\n",
        ev.headline.split_whitespace().collect::<Vec<_>>().join(" "),
        ev.incident_id,
        ev.failures,
        ev.at.to_rfc3339(),
        link(ev.report_url.as_deref()),
        incident_label(&ev.incident_id)
    );
    render(cfg, &md)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_is_one_line_of_at_most_255() {
        assert_eq!(summary("a\nb\tc ", "fp"), "a b c");
        assert_eq!(summary("x".repeat(300).as_str(), "fp").chars().count(), 255);
        assert_eq!(
            summary("  ", "tool_timeout:search"),
            "overtime incident tool_timeout:search"
        );
    }

    fn ev() -> IncidentEvent {
        IncidentEvent {
            incident_id: "tool_timeout:search@2026-03-01T10:00:00.000Z".into(),
            fingerprint: "tool_timeout:search".into(),
            kind: "tool_timeout".into(),
            component: "search".into(),
            headline: "61 % of 504s came from tool_timeout on search".into(),
            report_markdown: "## 61 % of 504s came from tool_timeout on search\n\n- x\n".into(),
            report_url: Some("http://ot.example/api/incidents/1".into()),
            failures: 9,
            at: "2026-03-01T10:00:00Z".parse().unwrap(),
        }
    }

    #[test]
    fn v2_description_is_wiki_text_with_the_marker() {
        let cfg = JiraConfig {
            api_version: Some(2),
            project_key: "OPS".into(),
            labels: vec!["sre".into(), "overtime".into()],
            ..Default::default()
        };
        let f = create_fields(&cfg, &ev(), None);
        let d = f["description"].as_str().unwrap();
        assert!(
            d.starts_with("h2. 61 % of 504s came from tool\\_timeout on search"),
            "{d}"
        );
        assert!(d.contains("[Live report|http://ot.example/api/incidents/1]"));
        assert!(
            crate::client::body_text(&f["description"])
                .contains(&incident_label(&ev().incident_id))
        );
        assert_eq!(
            f["labels"],
            json!([
                "overtime-tool_timeout-search",
                "overtime",
                "overtime-incident-tool_timeout-search-2026-03-01T10-00-00-000Z",
                "sre"
            ])
        );
        assert_eq!(f["issuetype"]["name"], "Bug");
    }

    #[test]
    fn v3_comment_is_adf_with_the_marker() {
        let cfg = JiraConfig::default();
        let c = comment_body(&cfg, &ev(), Some("Done"));
        assert_eq!(c["type"], "doc");
        let text = crate::client::body_text(&c);
        assert!(text.contains("reopened from Done"), "{text}");
        assert!(text.contains(&incident_label(&ev().incident_id)));
    }

    #[test]
    fn long_reports_are_cut_at_a_line() {
        let mut e = ev();
        e.report_markdown = "- line of the report\n".repeat(5000);
        let md = description_markdown(&e, None);
        assert!(md.chars().count() < MAX_REPORT + 1000);
        assert!(md.contains("report cut to fit Jira"));
    }
}
