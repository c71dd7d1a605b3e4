//! # overtime-notify
//!
//! Alert channels built from one trait (docs/channels.md). The
//! notification policy of `overtime serve` decides *whether* to tell
//! anyone; its actions reach every configured channel as [`Notice`]s
//! (page, update, resolve, hand over, rename, ticket) about an
//! [`Incident`] snapshot, through [`IncidentChannel::notify`].
//!
//! Design rules:
//! - **A channel is one module.** It implements [`Deliver`] — which
//!   notices it takes and one attempt at delivering one — and
//!   [`Durable`] gives it the rest: a durable outbox (a notice is on disk
//!   before `notify` returns), delivery in order, each notice at most once
//!   across restarts ([`Notice::key`]), retries with backoff and
//!   `Retry-After` ([`RetryPolicy`]), a `failed/` folder for refusals, and
//!   the shared `overtime_channel_*` metrics ([`ChannelsCollector`]).
//!   Slack ([`slack`]) and PagerDuty ([`pagerduty`]) are built this way,
//!   and so is Jira (`overtime-jira`, a `Deliver` of its own incident
//!   events on the same outbox); Alertmanager pages (`overtime-alert`)
//!   implement [`IncidentChannel`] over the alert sender's queues.
//! - **No decisions here.** Whether a notice goes out is the policy's
//!   (`overtime_serve::NotifyPolicy`); a channel only carries it out.
//! - **Below `overtime-serve`.** No overtime crate is a dependency: a
//!   notice carries plain values, so channels are tested with them.
//!
//! Configured as a `[[channels]]` list ([`ChannelConfig`], tagged by
//! `type`): each entry builds its channel, so `overtime serve` starts them
//! in a loop and a new channel is a new variant, not a new section.
//!
//! ```no_run
//! # async fn demo(incident: overtime_notify::Incident) -> Result<(), overtime_notify::ChannelError> {
//! use overtime_notify::{ChannelConfig, IncidentChannel, Notice};
//! let cfg: ChannelConfig = serde_json::from_str(r#"{"type": "pagerduty", "severity": "error"}"#).unwrap();
//! let pd = cfg.start(std::path::Path::new("/var/lib/overtime"))?; // routing key from the environment
//! pd.notify(&Notice::Page(incident))?; // durable on return
//! pd.shutdown().await;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod channel;
mod collector;
mod config;
mod durable;
mod notice;
mod outbox;
pub mod pagerduty;
mod retry;
pub mod slack;

pub use channel::{Accepted, ChannelError, ChannelMetrics, IncidentChannel, StatsSource, Stopping};
pub use collector::{ChannelStats, ChannelsCollector};
pub use config::{ChannelConfig, validate_channels};
pub use durable::{Deliver, Done, Durable, NoticeEntry, Persist};
pub use notice::{Incident, Links, Notice, TopCause, clip};
pub use outbox::{Delivered, Entry, Key, OpenReport, Outbox, OutboxError, Pushed, Queued};
pub use retry::{Answer, Failure, RetryPolicy, classify, parse_retry_after};
