//! # overtime-jira
//!
//! Deduplicated Jira tickets for overtime's incidents (docs/jira.md): a new
//! incident fingerprint opens one issue (the report as its description —
//! wiki markup on REST v2, Atlassian Document Format on v3 — and the
//! fingerprint as a label); a recurrence while the issue is open adds a
//! comment; a recurrence shortly after it was resolved reopens it; healthy
//! traffic and `unknown` causes open nothing.
//!
//! Delivery goes through a durable outbox (a folder under the data dir,
//! [`JiraConfig::outbox_path`]): an event is on disk before
//! [`Notifier::incident_opened`] returns, a background task delivers
//! in order, honours 429 `Retry-After`, backs off with jitter on 5xx and
//! connection errors, never retries other 4xx, and a restart — even one
//! between Jira creating the issue and the outbox hearing about it — never
//! opens a second ticket: each attempt first searches Jira for the
//! fingerprint's label ([`fingerprint_label`]) and finds an issue already
//! created for this incident by its own label ([`incident_label`]).
//!
//! ```no_run
//! # async fn serve() -> Result<(), overtime_jira::JiraError> {
//! use overtime_jira::{IncidentEvent, JiraConfig, Notifier};
//! let cfg = JiraConfig { enabled: true, base_url: "https://acme.atlassian.net".into(),
//!     project_key: "OPS".into(), email: "sre-bot@acme.example".into(), ..Default::default() };
//! let token = cfg.token_from_env();
//! let outbox = cfg.outbox_path(std::path::Path::new("/var/lib/overtime"));
//! let notifier = Notifier::start(cfg, token, outbox)?;
//! let ev = IncidentEvent {
//!     incident_id: "llm_prefill_slow:deepseek-v4-pro@2026-03-01T10:00:00Z".into(),
//!     fingerprint: "llm_prefill_slow:deepseek-v4-pro".into(),
//!     kind: "llm_prefill_slow".into(),
//!     component: "deepseek-v4-pro".into(),
//!     headline: "73 % of 504s came from llm_prefill_slow on deepseek-v4-pro".into(),
//!     report_markdown: "## 73 % of 504s came from llm_prefill_slow …".into(),
//!     report_url: None,
//!     failures: 41,
//!     at: "2026-03-01T10:00:00Z".parse().unwrap(),
//! };
//! notifier.incident_opened(ev)?; // durable on return
//! println!("{:?}", notifier.stats());
//! notifier.shutdown().await;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod adf;
mod channel;
mod client;
mod collector;
mod config;
mod deliver;
mod event;
mod label;
mod markup;
mod notifier;
mod outbox;
mod payload;
mod wiki;

pub use client::body_text;
pub use collector::JiraCollector;
pub use config::{ConfigError, Deployment, JiraConfig, RetryPolicy};
pub use event::IncidentEvent;
pub use label::{fingerprint_label, incident_label};
pub use notifier::{Accepted, JiraError, JiraStats, Notifier};
pub use outbox::OutboxError;
