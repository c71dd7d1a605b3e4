//! The notifier's durable outbox: overtime's shared one
//! ([`overtime_notify::Outbox`], one JSON file per waiting incident event,
//! fsynced before `incident_opened` returns; `delivered.jsonl`, the
//! journal of delivered events; `failed/`), holding [`IncidentEvent`]s
//! keyed by incident id and, in each entry, what has been sent to Jira
//! for it ([`Progress`]). An outbox written before it was shared reads as
//! it was.

use crate::event::IncidentEvent;
use overtime_notify::{Key, Queued};
use serde::{Deserialize, Serialize};

pub use overtime_notify::OutboxError;

/// What has already been sent for an event, recorded before each call to
/// Jira that is not safe to repeat.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Progress {
    /// An issue creation was sent (its answer may never have arrived).
    #[serde(default)]
    pub(crate) create_sent: bool,
    /// The reopen transition was sent on this issue.
    #[serde(default)]
    pub(crate) reopen_sent_on: Option<String>,
    /// The status the issue was reopened from.
    #[serde(default)]
    pub(crate) reopened_from: Option<String>,
    /// A comment was sent on this issue.
    #[serde(default)]
    pub(crate) comment_sent_on: Option<String>,
}

/// An event is filed once per incident id.
impl Queued for IncidentEvent {
    fn key(&self) -> Key {
        Key::Once(self.incident_id.clone())
    }

    fn about(&self) -> &str {
        &self.incident_id
    }
}

/// One pending event (the journal records the incident id as the key,
/// the issue key as the reference).
pub(crate) type Entry = overtime_notify::Entry<IncidentEvent, Progress>;
