//! What a channel is told: a [`Notice`] (one of the notification policy's
//! actions) about an [`Incident`] (the incident as it was when the policy
//! decided), with the [`Links`] to its views in overtime's UI.
//!
//! Design rules:
//! - A notice carries everything its delivery needs, so it can wait in an
//!   outbox across a restart and be delivered without the live state.
//! - The UI's routes (`#/incidents/{id}`, `#/trace/{id}`) and the report's
//!   endpoint are spelled here once; every channel links through [`Links`].
//! - [`Notice::key`] names what must never be delivered twice; updates
//!   have no key of their own (the newest snapshot replaces a waiting one).

use chrono::{DateTime, Utc};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::{Deserialize, Serialize};

/// The root cause that explains most of an incident's failures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopCause {
    /// Root-cause kind (docs/diagnosis.md).
    pub kind: String,
    /// The model, tool, service or gateway it names.
    pub component: String,
    /// Failures with this cause.
    pub count: u64,
    /// Of all failures in the incident's window, 0..=1.
    pub share: f64,
}

/// Where an incident is in overtime's UI and API.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Links {
    /// The incident's page in the UI.
    pub incident: String,
    /// The report in Markdown (`/api/incidents/{id}?format=markdown`).
    pub report: String,
    /// The UI's trace view of each example trace, in the incident's order.
    pub traces: Vec<(String, String)>,
}

/// What `encodeURIComponent` leaves alone (the UI builds its links with it).
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'!')
    .remove(b'~')
    .remove(b'*')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')');

impl Links {
    /// The links of incident `id` under `external_url` (the UI's base, as
    /// `[alerts] external_url`), with the trace views of `trace_ids`.
    ///
    /// ```
    /// let l = overtime_notify::Links::new("http://overtime:8080/", "tool_timeout:search@2026-03-01T10:00:00Z", &["abc".into()]);
    /// assert_eq!(l.incident, "http://overtime:8080/#/incidents/tool_timeout%3Asearch%402026-03-01T10%3A00%3A00Z");
    /// assert_eq!(l.report, "http://overtime:8080/api/incidents/tool_timeout:search@2026-03-01T10:00:00Z?format=markdown");
    /// assert_eq!(l.traces, [("abc".to_string(), "http://overtime:8080/#/trace/abc".to_string())]);
    /// ```
    pub fn new(external_url: &str, id: &str, trace_ids: &[String]) -> Links {
        let base = external_url.trim_end_matches('/');
        let enc = |s: &str| utf8_percent_encode(s, COMPONENT).to_string();
        Links {
            incident: format!("{base}/#/incidents/{}", enc(id)),
            report: format!("{base}/api/incidents/{id}?format=markdown"),
            traces: trace_ids
                .iter()
                .map(|t| (t.clone(), format!("{base}/#/trace/{}", enc(t))))
                .collect(),
        }
    }
}

/// An incident as the policy saw it when it decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Incident {
    /// The incident's id (`kind:component@start`).
    pub id: String,
    /// `kind:component`, shared by the incidents of one cause.
    pub fingerprint: String,
    /// Root-cause kind.
    pub kind: String,
    /// The component blamed.
    pub component: String,
    /// Still failing within the quiet period.
    pub open: bool,
    /// The report's one-line headline.
    pub headline: String,
    /// When its first failure started.
    pub started_at: DateTime<Utc>,
    /// Failing traces in the incident.
    pub failures: u64,
    /// Gateway 504s among the failures of its window.
    pub gateway_504: u64,
    /// Requests in its window, failing or not.
    pub requests: u64,
    /// Gateway or service timeouts in its window.
    pub timeouts: u64,
    /// The cause with the most failures in its window.
    pub top_cause: Option<TopCause>,
    /// Its first traces, to open first.
    pub example_trace_ids: Vec<String>,
    /// Its views in the UI.
    pub links: Links,
    /// The report in Markdown (a ticket's description).
    #[serde(default)]
    pub report_markdown: String,
}

/// One of the notification policy's actions, with the incident it is about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "notice", rename_all = "snake_case")]
pub enum Notice {
    /// An incident with 504s seen open: page about it.
    Page(Incident),
    /// A paged incident grew (more failures, another headline).
    Update(Incident),
    /// A paged incident closed or disappeared (the last snapshot seen).
    Resolve(Incident),
    /// Another collector owns the incident's fingerprint now and pages it.
    HandOver(Incident),
    /// The incident `from` is listed as `to` now: what was sent for
    /// `from` stands for `to`.
    Rename {
        /// The id it had.
        from: String,
        /// The id it has now.
        to: String,
    },
    /// The incident has been open for the full grace period: file it.
    Ticket(Incident),
}

impl Notice {
    /// The notice's name: `page`, `update`, `resolve`, `hand_over`,
    /// `rename`, `ticket`.
    pub fn name(&self) -> &'static str {
        match self {
            Notice::Page(_) => "page",
            Notice::Update(_) => "update",
            Notice::Resolve(_) => "resolve",
            Notice::HandOver(_) => "hand_over",
            Notice::Rename { .. } => "rename",
            Notice::Ticket(_) => "ticket",
        }
    }

    /// The incident it is about (none for a rename).
    pub fn incident(&self) -> Option<&Incident> {
        match self {
            Notice::Page(i)
            | Notice::Update(i)
            | Notice::Resolve(i)
            | Notice::HandOver(i)
            | Notice::Ticket(i) => Some(i),
            Notice::Rename { .. } => None,
        }
    }

    /// The id whose earlier deliveries this one builds on (a rename: the
    /// old id).
    pub fn about(&self) -> &str {
        match self {
            Notice::Rename { from, .. } => from,
            n => n.incident().map(|i| i.id.as_str()).unwrap_or_default(),
        }
    }

    /// The id what this delivery records stands for (a rename: the new id).
    pub fn records_for(&self) -> &str {
        match self {
            Notice::Rename { to, .. } => to,
            n => n.about(),
        }
    }

    /// What must be delivered at most once (`page:{id}`, `resolve:{id}`…);
    /// `None` for an update, which the next one replaces.
    ///
    /// ```
    /// use overtime_notify::Notice;
    /// let n = Notice::Rename { from: "a".into(), to: "b".into() };
    /// assert_eq!(n.key().as_deref(), Some("rename:a>b"));
    /// ```
    pub fn key(&self) -> Option<String> {
        match self {
            Notice::Update(_) => None,
            Notice::Rename { from, to } => Some(format!("rename:{from}>{to}")),
            n => Some(format!("{}:{}", n.name(), n.about())),
        }
    }
}

/// `s` cut to at most `max` characters, ending in `…` when cut.
///
/// ```
/// assert_eq!(overtime_notify::clip("abcdef", 4), "abc…");
/// assert_eq!(overtime_notify::clip("abc", 4), "abc");
/// ```
pub fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}
