//! The one trait every alert channel implements: [`IncidentChannel`],
//! shown each [`Notice`] the notification policy decides, in order.
//!
//! Design rules:
//! - `notify` never waits on the network: it queues (durably, for the
//!   channels on [`crate::Durable`]) and returns; delivery is the
//!   channel's own background work.
//! - A channel takes the notices it is for and answers
//!   [`Accepted::Ignored`] to the rest (PagerDuty pages, Jira tickets).
//! - A channel's delivery metrics are either the shared
//!   `overtime_channel_*` families ([`ChannelMetrics::Shared`], every
//!   channel built on [`crate::Durable`]) or families of its own.

use crate::collector::ChannelStats;
use crate::notice::Notice;
use crate::outbox::OutboxError;
use prometheus_client::collector::Collector;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// What `notify` did with a notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// Durably queued for delivery.
    Queued,
    /// Already queued or delivered (or merged into a waiting update).
    Duplicate,
    /// Not for this channel.
    Ignored,
    /// Carried out at once (a channel without an outbox).
    Done,
}

/// Why a channel could not start or take a notice.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// The outbox could not be opened or written: the notice is not
    /// durable and was not accepted.
    #[error(transparent)]
    Outbox(#[from] OutboxError),
    /// The channel's section cannot work (the message names the key).
    #[error("{channel}: {message}")]
    Config {
        /// `slack`, `pagerduty`…
        channel: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A secret the section names is missing from the environment.
    #[error("{channel}: the environment variable {var} is unset or empty")]
    MissingSecret {
        /// `slack`, `pagerduty`…
        channel: &'static str,
        /// The variable's name (never its value).
        var: String,
    },
    /// The HTTP client could not be built.
    #[error("{channel}: {message}")]
    Client {
        /// `slack`, `pagerduty`…
        channel: &'static str,
        /// reqwest's reason.
        message: String,
    },
    /// Started outside a tokio runtime.
    #[error("{0}: must be started inside a tokio runtime")]
    NoRuntime(String),
    /// The channel refused the notice (another channel's own error).
    #[error("{0}")]
    Refused(String),
}

/// A channel's counters, read at each scrape.
pub type StatsSource = Arc<dyn Fn() -> ChannelStats + Send + Sync>;

/// How a channel's delivery shows in `/metrics`.
pub enum ChannelMetrics {
    /// In the shared `overtime_channel_*` families, labelled with the
    /// channel's name.
    Shared(StatsSource),
    /// Families of its own (`overtime_jira_*`, `overtime_alert_*`).
    Own(Box<dyn Collector>),
}

impl std::fmt::Debug for ChannelMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ChannelMetrics::Shared(_) => "Shared",
            ChannelMetrics::Own(_) => "Own",
        })
    }
}

/// A stop that finishes when the channel's background work has.
pub type Stopping = Pin<Box<dyn Future<Output = ()> + Send>>;

/// An alert channel: shown each notice of the notification policy.
pub trait IncidentChannel: Send + Sync {
    /// Its name in logs and metrics (`slack`, `pagerduty`, `jira`…).
    fn name(&self) -> &str;
    /// Takes a notice; returns once it is durable (or carried out, or not
    /// for this channel). Blocking file I/O at most; never the network.
    fn notify(&self, notice: &Notice) -> Result<Accepted, ChannelError>;
    /// Its delivery metrics.
    fn metrics(&self) -> ChannelMetrics;
    /// Stops its background work promptly (waiting notices stay queued).
    fn shutdown(self: Box<Self>) -> Stopping;
}
