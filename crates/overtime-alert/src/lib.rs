//! # overtime-alert
//!
//! overtime's own alert delivery, for those who run it without Prometheus
//! (docs/metrics.md): the caller evaluates its SLOs and hands the set of active
//! alerts to an [`AlertSender`] every evaluation; the sender sends what
//! changed to every Alertmanager (`POST /api/v2/alerts`) and to a generic
//! JSON webhook, re-sends what is still firing so Alertmanager keeps it
//! active, and sends `endsAt` when an alert is gone. One-shot alerts carry
//! one page per new 504 incident, with its headline and a link to its report.
//!
//! Layout: [`Alert`] and the alert-name [`CATALOG`] (docs/metrics.md);
//! [`AlertConfig`]; [`AlertBook`], the pure diff of active sets into
//! [`Notice`]s; [`alertmanager_body`] / [`webhook_bodies`], the JSON; the
//! [`AlertSender`] with bounded per-target queues, retries and
//! [`AlertStats`]; [`PageChannel`], the incident pages as one of
//! overtime's alert channels. Delivery semantics are described in
//! docs/alerts.md.
//!
//! ```
//! use overtime_alert::{Alert, AlertBook, AlertConfig, Status};
//! use chrono::{TimeDelta, TimeZone, Utc};
//! let mut book = AlertBook::new(&AlertConfig::default());
//! let t0 = Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap();
//! let l1 = Alert::new("OvertimeModelBreakerL1", "page").label("model", "deepseek-v4-pro");
//! assert_eq!(book.update(vec![l1.clone()], t0).alertmanager.len(), 1); // fires
//! assert!(book.update(vec![l1.clone()], t0 + TimeDelta::seconds(15)).is_empty()); // not due
//! let resolved = book.update(vec![], t0 + TimeDelta::seconds(30));
//! assert_eq!(resolved.alertmanager[0].status, Status::Resolved);
//! ```

#![warn(missing_docs)]

mod alert;
mod book;
mod channel;
mod collector;
mod config;
mod deliver;
mod payload;
mod sender;

pub use alert::{Alert, fingerprint};
pub use book::{AlertBook, BookSettings, Notice, Outgoing, Status};
pub use channel::PageChannel;
pub use collector::AlertCollector;
pub use config::{AlertConfig, ConfigError};
pub use deliver::TargetStats;
pub use overtime_slo::alert_names::{CATALOG, INCIDENT};
pub use payload::{ZERO_TIME, alertmanager_body, rfc3339, webhook_bodies};
pub use sender::{AlertError, AlertSender, AlertStats};
