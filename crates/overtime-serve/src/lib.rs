//! # overtime-serve
//!
//! `overtime serve` as a library: the config read once and passed down;
//! the store opened and the WAL replayed into the live diagnosis; the
//! sources started (file tails, Kafka consumers, OTLP/HTTP, OTLP/gRPC)
//! into the diagnosing sink; the API and UI served; the periodic jobs run
//! — verdicts, paging and tickets, the SLO clock and alerts, retention —
//! until SIGINT or SIGTERM, then everything stopped in order. The binary
//! parses its arguments, loads the [`Config`](overtime_config::Config) and
//! calls [`run`].
//!
//! Design rules:
//! - **Wiring only.** Each config section is its component's own type,
//!   and its `build()` (in the crate that owns it) makes what the
//!   component runs with; nothing here copies a field from one struct to
//!   another.
//! - **Bound before ready.** Every listener is bound before the service
//!   says it is ready, so a port in use is a startup error, not a log line
//!   an SRE never sees. A listen address may name port 0: what was bound
//!   is logged and, with `--ready-file`, written for programs to read
//!   ([`Bound`]), so nobody has to find a free port for the collector.
//! - **One diagnosis.** The gateway layers are numbered across the file
//!   and Kafka sources in config order ([`diagnose_config`]); `overtime
//!   query` diagnoses stored records with the same configuration.
//! - **The notification policy is pure.** Whether a page, its update, its
//!   resolution or a Jira ticket goes out is decided by [`NotifyPolicy`],
//!   a state machine shown the incidents and the time, with no runtime,
//!   I/O or clock; the alert channels (`overtime_notify::IncidentChannel`:
//!   Alertmanager pages, Jira, each `[[channels]]` entry) only carry its
//!   [`Action`]s out. A new notification rule goes there; a new alert
//!   channel is a module of `overtime-notify`.
//!
//! ```
//! use overtime_serve::{Action, NotifyPolicy, Sighting};
//! use std::time::{Duration, Instant};
//!
//! let mut policy = NotifyPolicy::new(Duration::from_secs(30));
//! let incident = Sighting {
//!     id: "i1", fingerprint: "fp", open: true, gateway_504: 1, owned: true,
//!     failures: 1, headline: "all 504s: tool_timeout on search",
//! };
//! let t0 = Instant::now();
//! assert_eq!(policy.step(t0, &[incident]), [Action::Page { incident_id: "i1".into() }]);
//! assert_eq!(
//!     policy.step(t0 + Duration::from_secs(30), &[incident]),
//!     [Action::Ticket { incident_id: "i1".into() }]
//! );
//! ```

#![warn(missing_docs)]

mod notify;
mod policy;
mod ready;
mod schedule;
mod serve;
mod sources;
mod start;

pub use policy::{Action, NotifyPolicy, Sighting, UPDATE_EVERY};
pub use ready::{Bound, ReadyFileError};
pub use serve::{ServeError, run};
pub use sources::{SourceError, diagnose_config};
