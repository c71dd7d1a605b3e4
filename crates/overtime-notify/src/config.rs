//! `[[channels]]`: the alert channels to start, a list tagged by `type`
//! (`slack`, `pagerduty`), each entry its channel's own config type.
//!
//! Design rules:
//! - A channel owns its settings and their defaults (in its module); this
//!   enum only names it, so a new channel is one variant here and its
//!   module — `overtime serve` and `overtime-config` do not change.
//! - Entries are told apart by `name` (default: the type): it labels the
//!   channel's metrics and names its outbox folder, so two entries of one
//!   type (two Slack workspaces) need names of their own.
//!
//! ```
//! let list: Vec<overtime_notify::ChannelConfig> = serde_json::from_str(r#"[
//!     {"type": "slack", "channel": "C0123456789"},
//!     {"type": "pagerduty", "severity": "warning"},
//!     {"type": "slack", "name": "slack-oncall"}
//! ]"#).unwrap();
//! overtime_notify::validate_channels(&list).unwrap();
//! assert_eq!(list[2].name(), "slack-oncall");
//! ```

use crate::channel::{ChannelError, IncidentChannel};
use crate::pagerduty::{self, PagerDutyConfig};
use crate::slack::{self, SlackConfig};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One `[[channels]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ChannelConfig {
    /// A Slack message per paged incident ([`crate::slack`]).
    Slack(SlackConfig),
    /// A PagerDuty alert per paged fingerprint ([`crate::pagerduty`]).
    #[serde(rename = "pagerduty")]
    PagerDuty(PagerDutyConfig),
}

impl ChannelConfig {
    /// The entry's name (metrics label, outbox folder).
    pub fn name(&self) -> &str {
        match self {
            ChannelConfig::Slack(c) => &c.name,
            ChannelConfig::PagerDuty(c) => &c.name,
        }
    }

    /// Checks what can be checked without the environment.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            ChannelConfig::Slack(c) => c.validate(),
            ChannelConfig::PagerDuty(c) => c.validate(),
        }
    }

    /// Starts the channel (inside a tokio runtime), its secret read from
    /// the environment and its outbox under `data_dir` unless configured.
    pub fn start(&self, data_dir: &Path) -> Result<Box<dyn IncidentChannel>, ChannelError> {
        let started: Box<dyn IncidentChannel> = match self {
            ChannelConfig::Slack(c) => Box::new(slack::start(
                c,
                c.secret_from_env(),
                &c.outbox_path(data_dir),
            )?),
            ChannelConfig::PagerDuty(c) => Box::new(pagerduty::start(
                c,
                c.routing_key_from_env(),
                &c.outbox_path(data_dir),
            )?),
        };
        Ok(started)
    }
}

/// Checks every entry and that their names are unique and usable as a
/// folder name.
pub fn validate_channels(list: &[ChannelConfig]) -> Result<(), String> {
    let mut seen = HashSet::new();
    for c in list {
        c.validate()?;
        let n = c.name();
        if n.is_empty()
            || !n
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_')
        {
            return Err(format!(
                "[[channels]] name {n:?}: letters, digits, - and _ only"
            ));
        }
        if !seen.insert(n) {
            return Err(format!(
                "[[channels]] name {n:?} is used twice: give each entry of one type a name of its own"
            ));
        }
    }
    Ok(())
}

/// What every HTTP channel's `start` does first, written once: its config
/// checked, its secret required (trimmed, not empty), and its client built
/// with the request timeout (connecting within at most 10 s of it).
pub(crate) fn prepare(
    channel: &'static str,
    checked: Result<(), String>,
    secret: Option<String>,
    secret_var: &str,
    request_timeout_secs: u64,
) -> Result<(String, reqwest::Client), ChannelError> {
    checked.map_err(|message| ChannelError::Config { channel, message })?;
    let secret = secret
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ChannelError::MissingSecret {
            channel,
            var: secret_var.to_string(),
        })?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(request_timeout_secs))
        .connect_timeout(Duration::from_secs(request_timeout_secs.min(10)))
        .build()
        .map_err(|e| ChannelError::Client {
            channel,
            message: e.to_string(),
        })?;
    Ok((secret, http))
}

/// A secret from the environment variable `var`; `None` when unset or
/// empty. Never logged.
pub(crate) fn secret_from_env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|t| !t.trim().is_empty())
}

/// A channel's outbox folder: `outbox_dir`, or `<data_dir>/<name>-outbox`.
pub(crate) fn outbox_path(name: &str, outbox_dir: &str, data_dir: &Path) -> PathBuf {
    if outbox_dir.is_empty() {
        data_dir.join(format!("{name}-outbox"))
    } else {
        PathBuf::from(outbox_dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_entries_of_one_type_need_names_of_their_own() {
        let list: Vec<ChannelConfig> =
            serde_json::from_str(r#"[{"type": "slack"}, {"type": "slack"}]"#).unwrap();
        assert!(validate_channels(&list).unwrap_err().contains("used twice"));
    }

    #[test]
    fn an_unknown_type_or_key_is_refused() {
        assert!(serde_json::from_str::<ChannelConfig>(r#"{"type": "teams"}"#).is_err());
        let e = serde_json::from_str::<ChannelConfig>(r#"{"type": "slack", "chanel": "C1"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("chanel"), "{e}");
    }
}
