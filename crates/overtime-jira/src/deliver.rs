//! What one incident does to Jira, decided afresh on every attempt from
//! what Jira holds, so an attempt cut short anywhere can simply be run
//! again:
//!
//! 1. search the project for the fingerprint label;
//! 2. an issue carrying this incident's label → it was created already
//!    (by an attempt whose answer was lost): done;
//! 3. an issue not in the `done` status category → comment on it (the
//!    newest updated one);
//! 4. else the most recently resolved issue, resolved at most
//!    `reopen_window_hours` before the incident opened → transition it
//!    with `reopen_transition`, then comment; if the workflow has no such
//!    transition or refuses it, a new issue that names the old one;
//! 5. else → a new issue (naming the last resolved one, if any).
//!
//! Before each call that is not safe to repeat (create, transition,
//! comment) the intent is saved in the outbox entry. On a later attempt a
//! saved comment intent makes the notifier read the issue's comments for
//! the incident marker before commenting again; a saved create intent
//! makes it wait `search_settle_secs` and search once more before
//! creating again (Jira Cloud's search index lags writes).

use crate::client::{CallError, JiraClient};
use crate::config::JiraConfig;
use crate::label::{fingerprint_label, incident_label};
use crate::outbox::{Entry, Progress};
use crate::payload;
use overtime_notify::Failure;
use std::time::Duration;

/// What a delivered incident did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Created,
    Commented,
    Reopened,
    /// The issue for this incident was already there (found by its label).
    Found,
}

impl Action {
    /// The word in `delivered.jsonl` and the logs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Commented => "commented",
            Action::Reopened => "reopened",
            Action::Found => "found",
        }
    }
}

/// A delivered incident.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Done {
    pub(crate) key: String,
    pub(crate) action: Action,
}

impl From<CallError> for Failure {
    fn from(e: CallError) -> Self {
        match e {
            CallError::RateLimited { retry_after, .. } => Failure::Retry {
                why: e.to_string(),
                retry_after,
                rate_limited: true,
            },
            CallError::Transient { .. } => Failure::retry(e.to_string()),
            CallError::Permanent { .. } => Failure::Permanent(e.to_string()),
        }
    }
}

/// Saves an entry's progress durably.
pub(crate) type Persist<'a> = overtime_notify::Persist<'a, crate::event::IncidentEvent, Progress>;

/// One delivery attempt of `entry`.
pub(crate) async fn deliver(
    client: &JiraClient,
    cfg: &JiraConfig,
    entry: &mut Entry,
    persist: &mut Persist<'_>,
) -> Result<Done, Failure> {
    let ev = entry.event.clone();
    let fp = fingerprint_label(&ev.fingerprint);
    let mine = incident_label(&ev.incident_id);
    let mut issues = client.search(&cfg.project_key, &fp).await?;
    let has_mine = |issues: &[crate::client::IssueRef]| {
        issues
            .iter()
            .find(|i| i.labels.contains(&mine))
            .map(|i| i.key.clone())
    };
    if entry.progress.create_sent && has_mine(&issues).is_none() && cfg.search_settle_secs > 0 {
        tokio::time::sleep(Duration::from_secs(cfg.search_settle_secs)).await;
        issues = client.search(&cfg.project_key, &fp).await?;
    }
    if let Some(key) = has_mine(&issues) {
        let action = if entry.progress.create_sent {
            Action::Created
        } else {
            Action::Found
        };
        return Ok(Done { key, action });
    }
    // An open issue filed for an incident of this fingerprint that started
    // no earlier than this one is this incident under its former id (a
    // failure that started earlier joined it late and renamed it): not a
    // recurrence, which starts after the incident it recurs from.
    let at = ev.at.format("%Y-%m-%dT%H-%M-%S-%3fZ").to_string();
    if let Some(same) = issues.iter().find(|i| {
        !i.done
            && i.labels
                .iter()
                .any(|l| incident_started(l).is_some_and(|t| t >= at.as_str()))
    }) {
        return Ok(Done {
            key: same.key.clone(),
            action: Action::Found,
        });
    }
    if let Some(open) = issues.iter().find(|i| !i.done) {
        return comment(client, cfg, entry, persist, &open.key).await;
    }
    let window = chrono::Duration::hours(cfg.reopen_window_hours.min(1 << 20) as i64);
    let last_resolved = issues
        .iter()
        .filter_map(|i| i.resolved.or(i.updated).map(|t| (t, i)))
        .max_by_key(|(t, _)| *t);
    let mut note = None;
    if let Some((when, old)) = last_resolved {
        if when + window >= ev.at {
            match reopen(client, cfg, entry, persist, &old.key, &old.status).await {
                Ok(()) => return comment(client, cfg, entry, persist, &old.key).await,
                Err(Refused(why)) => {
                    tracing::warn!(
                        "overtime-jira: could not reopen {}: {why}; opening a new issue",
                        old.key
                    );
                    note = Some(format!(
                        "This fingerprint's ticket {} (resolved {}) could not be reopened: {why}",
                        old.key,
                        when.to_rfc3339()
                    ));
                }
                Err(Other(f)) => return Err(f),
            }
        } else {
            note = Some(format!(
                "This fingerprint's previous ticket: {} (resolved {}).",
                old.key,
                when.to_rfc3339()
            ));
        }
    }
    entry.progress.create_sent = true;
    persist(entry)?;
    let key = client
        .create_issue(payload::create_fields(cfg, &ev, note.as_deref()))
        .await?;
    Ok(Done {
        key,
        action: Action::Created,
    })
}

/// The start an incident label ends with (`…-2026-01-02T03-04-05-000Z`,
/// [`incident_label`] of `kind:component@<RFC 3339 start>`), in that
/// spelling, which sorts as time does; `None` for another label.
fn incident_started(label: &str) -> Option<&str> {
    let rest = label.strip_prefix("overtime-incident-")?;
    let t = rest.get(rest.len().checked_sub(24)?..)?;
    let shape = "dddd-dd-ddTdd-dd-dd-dddZ";
    t.bytes()
        .zip(shape.bytes())
        .all(|(c, s)| {
            if s == b'd' {
                c.is_ascii_digit()
            } else {
                c == s
            }
        })
        .then_some(t)
}

enum ReopenError {
    Refused(String),
    Other(Failure),
}
use ReopenError::{Other, Refused};

impl From<CallError> for ReopenError {
    fn from(e: CallError) -> Self {
        Other(e.into())
    }
}

async fn reopen(
    client: &JiraClient,
    cfg: &JiraConfig,
    entry: &mut Entry,
    persist: &mut Persist<'_>,
    key: &str,
    status: &str,
) -> Result<(), ReopenError> {
    let ts = client.transitions(key).await?;
    let Some((id, _)) = ts.iter().find(|(_, name)| {
        name.trim()
            .eq_ignore_ascii_case(cfg.reopen_transition.trim())
    }) else {
        let names: Vec<&str> = ts.iter().map(|(_, n)| n.as_str()).collect();
        return Err(Refused(format!(
            "no transition named {:?} (available: {})",
            cfg.reopen_transition,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        )));
    };
    entry.progress.reopen_sent_on = Some(key.to_string());
    entry.progress.reopened_from = Some(status.to_string());
    persist(entry).map_err(|e| Other(e.into()))?;
    match client.transition(key, id).await {
        Ok(()) => Ok(()),
        Err(e @ CallError::Permanent { .. }) => Err(Refused(e.to_string())),
        Err(e) => Err(e.into()),
    }
}

async fn comment(
    client: &JiraClient,
    cfg: &JiraConfig,
    entry: &mut Entry,
    persist: &mut Persist<'_>,
    key: &str,
) -> Result<Done, Failure> {
    let reopened = entry.progress.reopen_sent_on.as_deref() == Some(key);
    let action = if reopened {
        Action::Reopened
    } else {
        Action::Commented
    };
    let done = Done {
        key: key.to_string(),
        action,
    };
    if entry.progress.comment_sent_on.as_deref() == Some(key) {
        let marker = incident_label(&entry.event.incident_id);
        if client
            .comment_texts(key)
            .await?
            .iter()
            .any(|t| t.contains(&marker))
        {
            return Ok(done);
        }
    }
    entry.progress.comment_sent_on = Some(key.to_string());
    persist(entry)?;
    let from = reopened
        .then(|| entry.progress.reopened_from.clone())
        .flatten();
    let body = payload::comment_body(cfg, &entry.event, from.as_deref());
    client.add_comment(key, body).await?;
    Ok(done)
}
