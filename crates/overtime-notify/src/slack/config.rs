//! A Slack entry of `[[channels]]` (`type = "slack"`): where the messages
//! go and how hard to try. Every field has a default.
//!
//! Two ways to post, chosen by `channel`:
//! - `channel` set (a channel ID such as `C0123456789`): a Slack app's bot
//!   token (from the variable `token_env`) posts with `chat.postMessage`
//!   and edits the same message with `chat.update` as the incident grows
//!   and when it resolves;
//! - `channel` empty: an incoming webhook (its URL, a secret, from the
//!   variable `webhook_url_env`) posts the message; a webhook cannot edit
//!   what it posted, so the resolution is a follow-up message and growth
//!   is not posted.
//!
//! Secrets are never in the file.

use crate::retry::RetryPolicy;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The Slack channel's configuration (a `[[channels]]` entry with
/// `type = "slack"` in overtime's TOML).
///
/// ```
/// let cfg: overtime_notify::slack::SlackConfig = serde_json::from_str(
///     r#"{"channel": "C0123456789"}"#).unwrap();
/// assert!(cfg.uses_bot_token());
/// assert_eq!(cfg.token_env, "OVERTIME_SLACK_BOT_TOKEN");
/// cfg.validate().unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlackConfig {
    /// The channel's name in logs, metrics (`channel` label) and its
    /// outbox folder; unique among `[[channels]]`. Default `slack`.
    pub name: String,
    /// The channel ID to post in with the bot token (`chat.update` takes
    /// IDs only, not names). Empty (default): use the incoming webhook.
    pub channel: String,
    /// Environment variable holding the bot token (`xoxb-…`; scopes
    /// `chat:write`, and `channels:history` or `groups:history` so an
    /// attempt whose answer was lost finds its message instead of posting
    /// twice). Default `OVERTIME_SLACK_BOT_TOKEN`.
    pub token_env: String,
    /// Environment variable holding the incoming webhook's URL. Default
    /// `OVERTIME_SLACK_WEBHOOK_URL`.
    pub webhook_url_env: String,
    /// The Web API's base. Default `https://slack.com/api`.
    pub api_url: String,
    /// The outbox folder. Empty (default): `<data dir>/<name>-outbox`.
    pub outbox_dir: String,
    /// Timeout of one HTTP request, in seconds. Default 30.
    pub request_timeout_secs: u64,
    /// Retries of transient failures.
    pub retry: RetryPolicy,
}

impl Default for SlackConfig {
    fn default() -> Self {
        SlackConfig {
            name: "slack".into(),
            channel: String::new(),
            token_env: "OVERTIME_SLACK_BOT_TOKEN".into(),
            webhook_url_env: "OVERTIME_SLACK_WEBHOOK_URL".into(),
            api_url: "https://slack.com/api".into(),
            outbox_dir: String::new(),
            request_timeout_secs: 30,
            retry: RetryPolicy::default(),
        }
    }
}

impl SlackConfig {
    /// Posts with the bot token (`channel` set), not the webhook.
    pub fn uses_bot_token(&self) -> bool {
        !self.channel.trim().is_empty()
    }

    /// The variable holding the secret in use (token or webhook URL).
    pub fn secret_env(&self) -> &str {
        if self.uses_bot_token() {
            &self.token_env
        } else {
            &self.webhook_url_env
        }
    }

    /// The secret in use from the environment; `None` when unset or empty.
    /// Never logged.
    pub fn secret_from_env(&self) -> Option<String> {
        crate::config::secret_from_env(self.secret_env())
    }

    /// The outbox folder: `outbox_dir`, or `<data_dir>/<name>-outbox`.
    pub fn outbox_path(&self, data_dir: &Path) -> PathBuf {
        crate::config::outbox_path(&self.name, &self.outbox_dir, data_dir)
    }

    /// Checks what can be checked without the environment.
    pub fn validate(&self) -> Result<(), String> {
        let ch = self.channel.trim();
        if !ch.is_empty() && (ch.starts_with('#') || ch.chars().any(char::is_whitespace)) {
            return Err(format!(
                "[[channels]] slack: channel must be a channel ID such as C0123456789 (chat.update takes no names), got {ch:?}"
            ));
        }
        if self.secret_env().is_empty() {
            return Err(format!(
                "[[channels]] slack: {} is empty",
                if self.uses_bot_token() {
                    "token_env"
                } else {
                    "webhook_url_env"
                }
            ));
        }
        if !(self.api_url.starts_with("https://") || self.api_url.starts_with("http://")) {
            return Err(format!(
                "[[channels]] slack: api_url must start with https://, got {:?}",
                self.api_url
            ));
        }
        if self.request_timeout_secs == 0 {
            return Err("[[channels]] slack: request_timeout_secs must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_name_is_refused_and_the_webhook_is_the_default_way() {
        let c = SlackConfig::default();
        assert!(!c.uses_bot_token());
        assert_eq!(c.secret_env(), "OVERTIME_SLACK_WEBHOOK_URL");
        c.validate().unwrap();
        let named = SlackConfig {
            channel: "#ops".into(),
            ..Default::default()
        };
        assert!(named.validate().unwrap_err().contains("channel ID"));
    }

    #[test]
    fn unknown_fields_are_refused() {
        let r: Result<SlackConfig, _> = serde_json::from_str(r#"{"chanel": "C1"}"#);
        assert!(r.unwrap_err().to_string().contains("chanel"));
    }
}
