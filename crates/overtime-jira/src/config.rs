//! The `[jira]` section of overtime's config: where Jira is, how to sign
//! in, and how hard to try. Every field has a default; `enabled = false`
//! by default, so an embedded `overtime serve` talks to no Jira.
//!
//! Secrets are never in the file: `token_env` names the environment
//! variable that holds the API token (Cloud) or personal access token
//! (Data Center).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Which Jira product the notifier talks to: it decides the auth scheme
/// and the search endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Deployment {
    /// Jira Cloud (`https://<site>.atlassian.net`): basic auth with
    /// `email:api_token`; search on `/rest/api/{2|3}/search/jql`.
    #[default]
    Cloud,
    /// Jira Data Center / Server: `Authorization: Bearer <PAT>`; search on
    /// `/rest/api/2/search`; REST v2 only.
    DataCenter,
}

/// How transient failures are retried: the policy every alert channel
/// shares (`[jira.retry]`, like `[slack.retry]` and `[pagerduty.retry]`).
pub use overtime_notify::RetryPolicy;

/// The Jira notifier's configuration (`[jira]` in overtime's TOML).
///
/// ```
/// use overtime_jira::{Deployment, JiraConfig};
/// let cfg: JiraConfig = serde_json::from_str(r#"{
///     "enabled": true, "base_url": "https://acme.atlassian.net",
///     "project_key": "OPS", "email": "sre-bot@acme.example"
/// }"#).unwrap();
/// assert_eq!(cfg.deployment, Deployment::Cloud);
/// assert_eq!(cfg.api_version(), 3);
/// assert_eq!(cfg.issue_type, "Bug");
/// cfg.validate().unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JiraConfig {
    /// Open tickets at all. Default `false`.
    pub enabled: bool,
    /// The site, e.g. `https://acme.atlassian.net` or
    /// `https://jira.corp.example/jira` (a context path is kept).
    pub base_url: String,
    /// `cloud` (default) or `data_center`.
    pub deployment: Deployment,
    /// REST API version, 2 (wiki-markup text) or 3 (Atlassian Document
    /// Format). Default: 3 on Cloud, 2 on Data Center (which has no v3).
    pub api_version: Option<u8>,
    /// Project key the issues are created in, e.g. `OPS`.
    pub project_key: String,
    /// Issue type name of created issues. Default `Bug`.
    pub issue_type: String,
    /// Extra labels put on created issues, beside the fingerprint label,
    /// the incident label and `overtime`. No spaces (Jira refuses them).
    pub labels: Vec<String>,
    /// Cloud only: the Atlassian account email the API token belongs to.
    pub email: String,
    /// Environment variable holding the API token (Cloud) or personal
    /// access token (Data Center). Default `OVERTIME_JIRA_TOKEN`.
    pub token_env: String,
    /// A recurrence whose ticket was resolved at most this many hours
    /// before the incident opened reopens that ticket; older ones get a
    /// new ticket. Default 72.
    pub reopen_window_hours: u64,
    /// Name of the workflow transition that reopens a resolved issue
    /// (matched case-insensitively among the issue's transitions).
    /// Default `Reopen`.
    pub reopen_transition: String,
    /// Retries of transient failures.
    pub retry: RetryPolicy,
    /// The outbox folder. Empty (default): `<data dir>/jira-outbox`.
    pub outbox_dir: String,
    /// Timeout of one HTTP request, in seconds. Default 30.
    pub request_timeout_secs: u64,
    /// After an attempt whose issue creation may have reached Jira (a
    /// timeout or a crash after the POST), wait this long before the
    /// search that decides whether to create again: Jira Cloud's search
    /// index lags writes by a few seconds. Default 10.
    pub search_settle_secs: u64,
}

impl Default for JiraConfig {
    fn default() -> Self {
        JiraConfig {
            enabled: false,
            base_url: String::new(),
            deployment: Deployment::Cloud,
            api_version: None,
            project_key: String::new(),
            issue_type: "Bug".into(),
            labels: Vec::new(),
            email: String::new(),
            token_env: "OVERTIME_JIRA_TOKEN".into(),
            reopen_window_hours: 72,
            reopen_transition: "Reopen".into(),
            retry: RetryPolicy::default(),
            outbox_dir: String::new(),
            request_timeout_secs: 30,
            search_settle_secs: 10,
        }
    }
}

/// A `[jira]` section that cannot work; the message names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("jira config: {0}")]
pub struct ConfigError(
    /// What is wrong, naming the key (e.g. `issue_type is empty`).
    pub String,
);

impl JiraConfig {
    /// The REST API version in use: `api_version`, else 3 on Cloud and 2
    /// on Data Center.
    pub fn api_version(&self) -> u8 {
        self.api_version.unwrap_or(match self.deployment {
            Deployment::Cloud => 3,
            Deployment::DataCenter => 2,
        })
    }

    /// The outbox folder: `outbox_dir`, or `<data_dir>/jira-outbox`.
    ///
    /// ```
    /// use overtime_jira::JiraConfig;
    /// let p = JiraConfig::default().outbox_path(std::path::Path::new("/var/lib/overtime"));
    /// assert_eq!(p, std::path::Path::new("/var/lib/overtime/jira-outbox"));
    /// ```
    pub fn outbox_path(&self, data_dir: &Path) -> PathBuf {
        if self.outbox_dir.is_empty() {
            data_dir.join("jira-outbox")
        } else {
            PathBuf::from(&self.outbox_dir)
        }
    }

    /// The token from the environment variable `token_env`; `None` when
    /// unset or empty. The value is never logged.
    pub fn token_from_env(&self) -> Option<String> {
        std::env::var(&self.token_env)
            .ok()
            .filter(|t| !t.trim().is_empty())
    }

    /// Checks what can be checked without talking to Jira.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError(m));
        if !(self.base_url.starts_with("https://") || self.base_url.starts_with("http://")) {
            return err(format!(
                "base_url must start with https:// (or http://), got {:?}",
                self.base_url
            ));
        }
        match (self.deployment, self.api_version()) {
            (_, 2) | (Deployment::Cloud, 3) => {}
            (Deployment::DataCenter, 3) => {
                return err(
                    "api_version 3 (ADF) exists only on Jira Cloud; use 2 for data_center".into(),
                );
            }
            (_, v) => return err(format!("api_version must be 2 or 3, got {v}")),
        }
        let key_ok = self
            .project_key
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
            && self
                .project_key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !key_ok {
            return err(format!(
                "project_key must be a Jira project key like OPS, got {:?}",
                self.project_key
            ));
        }
        if self.issue_type.trim().is_empty() {
            return err("issue_type is empty".into());
        }
        if let Some(bad) = self
            .labels
            .iter()
            .find(|l| l.is_empty() || l.chars().any(char::is_whitespace) || l.len() > 255)
        {
            return err(format!(
                "label {bad:?}: Jira labels are 1-255 characters without spaces"
            ));
        }
        if self.deployment == Deployment::Cloud && !self.email.contains('@') {
            return err("email (the account of the API token) is required on Jira Cloud".into());
        }
        if self.token_env.is_empty() {
            return err("token_env is empty".into());
        }
        if self.reopen_transition.trim().is_empty() {
            return err("reopen_transition is empty".into());
        }
        if self.request_timeout_secs == 0 {
            return err("request_timeout_secs must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cloud() -> JiraConfig {
        JiraConfig {
            enabled: true,
            base_url: "https://acme.atlassian.net".into(),
            project_key: "OPS".into(),
            email: "bot@acme.example".into(),
            ..Default::default()
        }
    }

    #[test]
    fn defaults_are_off_and_documented_values() {
        let c = JiraConfig::default();
        assert!(!c.enabled);
        assert_eq!(c.token_env, "OVERTIME_JIRA_TOKEN");
        assert_eq!(c.reopen_window_hours, 72);
        assert_eq!(c.reopen_transition, "Reopen");
        assert_eq!(c.api_version(), 3);
        let dc = JiraConfig {
            deployment: Deployment::DataCenter,
            ..Default::default()
        };
        assert_eq!(dc.api_version(), 2);
    }

    #[test]
    fn validation_names_the_problem() {
        cloud().validate().unwrap();
        let e = JiraConfig {
            email: String::new(),
            ..cloud()
        };
        assert!(e.validate().unwrap_err().0.contains("email"));
        let dc3 = JiraConfig {
            deployment: Deployment::DataCenter,
            api_version: Some(3),
            ..cloud()
        };
        assert!(dc3.validate().unwrap_err().0.contains("Cloud"));
        let lbl = JiraConfig {
            labels: vec!["two words".into()],
            ..cloud()
        };
        assert!(lbl.validate().unwrap_err().0.contains("two words"));
        let key = JiraConfig {
            project_key: "ops team".into(),
            ..cloud()
        };
        assert!(key.validate().unwrap_err().0.contains("project_key"));
        let url = JiraConfig {
            base_url: "acme.atlassian.net".into(),
            ..cloud()
        };
        assert!(url.validate().unwrap_err().0.contains("base_url"));
    }

    #[test]
    fn unknown_fields_are_refused() {
        let r: Result<JiraConfig, _> = serde_json::from_str(r#"{"projectkey": "OPS"}"#);
        assert!(r.unwrap_err().to_string().contains("projectkey"));
    }
}
