//! # overtime-test-support
//!
//! What the integration tests of every overtime crate share, in one place
//! instead of a copy per crate (a dev-dependency only; never published):
//!
//! - [`net`]: bounded waits, a plain HTTP/1.1 client;
//! - [`ports`]: starting a program that must be told its port, retried on
//!   fresh ports when it finds one in use; a port held closed;
//! - [`program`]: finding an installed program, or failing with the Debian
//!   package to install; a child process that is always stopped;
//! - [`nginx`]: a real nginx in a private prefix;
//! - [`tansu`]: the tansu Kafka-API broker;
//! - [`monitoring`]: real Prometheus and Alertmanager with the shipped
//!   rules and config;
//! - [`s3rver`]: an S3-compatible server (npm `s3rver`);
//! - [`chromium`]: a headless Chromium driven over the DevTools protocol;
//! - [`sink`]: a [`RecordSink`](overtime_model::RecordSink) that records
//!   every write and can push back;
//! - [`stand_in`]: what the local stand-ins of vendors' HTTP APIs share
//!   (serving, stopping, the request log, injected faults).
//!
//! Rules for everything here:
//! - A missing program fails the test (never skips it), naming what to
//!   install.
//! - Every wait is bounded, with a deadline generous enough for a loaded
//!   2-core machine; a timeout panics saying what it waited for.
//! - Every process started here is stopped and reaped when its guard drops,
//!   a panicking test included.
//! - No test finds a free port and hands it to another process
//!   ([`ports`] says what to do instead).
//! - Nothing crate-specific: a helper used by one crate's tests only stays
//!   in that crate's `tests/`.

#![warn(missing_docs)]

pub mod chromium;
pub mod monitoring;
pub mod net;
pub mod nginx;
pub mod ports;
pub mod program;
pub mod s3rver;
pub mod sink;
pub mod stand_in;
pub mod tansu;
