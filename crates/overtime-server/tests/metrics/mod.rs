//! `GET /metrics` and `GET /api/slo` over the incident fixtures fed through
//! the pipeline's sinks: the text parses with a strict parser (and with
//! `promtool check metrics`), requests by outcome and root causes by kind
//! equal each fixture's truth.json, histograms are cumulative with
//! `+Inf` = count, the pipeline's own health is there, and the names are
//! exactly those of docs/metrics.md.
//!
//! Layout: [`harness`] builds the server state and feeds it a fixture,
//! [`exposition`] is the strict parser of the text format (and promtool),
//! [`truth`] checks each incident's metrics against its truth.json, and
//! [`health`] the pipeline's own health: rejections, backpressure, Kafka
//! lag, the token and the data-time clock of an idle collector.

mod exposition;
mod harness;
mod health;
mod truth;
