//! One decoded export request → the sink, shared by HTTP and gRPC.
//!
//! Design rules:
//! - Spans are written first: a `Full` or `Failed` there means nothing of
//!   the request was stored and the caller answers 429 / 503.
//! - Once the spans are durable the request is acknowledged; the
//!   rejections are then retried for a bounded time (never re-sent by the
//!   exporter, they would otherwise be lost on a busy store).

use super::{OtlpConfig, OtlpStats};
use overtime_model::{RecordSink, SinkError, Table};
use overtime_parse::spans::ParsedSpans;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What became of a request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Delivery {
    /// Durable; `rejected` spans were refused (partial success) with this
    /// summary.
    Stored {
        rejected: usize,
        error_message: String,
    },
    /// Nothing stored; ask the client to retry after this long.
    Full { retry_after_ms: u64 },
    /// Nothing stored; the store failed.
    Failed(String),
}

/// Writes `parsed` (blocking; run it on the blocking pool).
pub(crate) fn deliver_blocking(
    sink: &dyn RecordSink,
    stats: &OtlpStats,
    cfg: &OtlpConfig,
    parsed: ParsedSpans,
) -> Delivery {
    let (spans, rejected) = parsed.to_batches();
    let n_spans = spans.num_rows();
    let n_rejected = rejected.num_rows();
    if n_spans > 0 {
        match sink.write(Table::Spans, spans, None) {
            Ok(()) => {}
            Err(SinkError::Full { retry_after_ms }) => return Delivery::Full { retry_after_ms },
            Err(SinkError::Failed(m)) => return Delivery::Failed(m),
        }
    }
    OtlpStats::add(&stats.spans, n_spans as u64);
    if n_rejected == 0 {
        return Delivery::Stored {
            rejected: 0,
            error_message: String::new(),
        };
    }
    let error_message = summary(&parsed, n_spans);
    let deadline = Instant::now() + Duration::from_millis(cfg.max_rejected_wait_ms);
    loop {
        match sink.write(Table::Rejected, rejected.clone(), None) {
            Ok(()) => break,
            // Nothing stored yet: the client may send it all again.
            Err(SinkError::Full { retry_after_ms }) if n_spans == 0 => {
                return Delivery::Full { retry_after_ms };
            }
            Err(SinkError::Failed(m)) if n_spans == 0 => return Delivery::Failed(m),
            Err(e) => {
                let wait = match e {
                    SinkError::Full { retry_after_ms } => retry_after_ms.clamp(1, 1000),
                    SinkError::Failed(_) => 100,
                };
                if Instant::now() + Duration::from_millis(wait) > deadline {
                    OtlpStats::add(&stats.rejections_not_stored, n_rejected as u64);
                    break;
                }
                std::thread::sleep(Duration::from_millis(wait));
            }
        }
    }
    OtlpStats::add(&stats.rejected_spans, n_rejected as u64);
    for r in &parsed.rejected {
        stats.count_reason(&r.reason, 1);
    }
    Delivery::Stored {
        rejected: n_rejected,
        error_message,
    }
}

/// `2 of 5 spans rejected (bad_id: 2); first: …` for partial success.
fn summary(parsed: &ParsedSpans, n_spans: usize) -> String {
    let mut reasons = std::collections::BTreeMap::<&str, usize>::new();
    for r in &parsed.rejected {
        *reasons.entry(&r.reason).or_default() += 1;
    }
    let reasons: Vec<String> = reasons.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    let first = parsed.rejected.first().map_or(String::new(), |r| {
        format!("; first ({}): {}", r.position, r.detail)
    });
    format!(
        "{} of {} spans rejected ({}){first}",
        parsed.rejected.len(),
        parsed.rejected.len() + n_spans,
        reasons.join(", ")
    )
}

/// [`deliver_blocking`] on tokio's blocking pool.
pub(crate) async fn deliver(
    sink: Arc<dyn RecordSink>,
    stats: Arc<OtlpStats>,
    cfg: OtlpConfig,
    parsed: ParsedSpans,
) -> Delivery {
    let job = tokio::task::spawn_blocking(move || deliver_blocking(&*sink, &stats, &cfg, parsed));
    match job.await {
        Ok(d) => d,
        Err(e) => Delivery::Failed(format!("sink write panicked: {e}")),
    }
}

/// Seconds for `Retry-After`: at least 1, rounded up.
pub(crate) fn retry_after_secs(ms: u64) -> u64 {
    ms.div_ceil(1000).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use overtime_model::RejectedRecord;

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(0), 1);
        assert_eq!(retry_after_secs(1000), 1);
        assert_eq!(retry_after_secs(1001), 2);
    }

    #[test]
    fn summary_names_reasons_and_first() {
        let mut p = ParsedSpans::default();
        p.rejected.push(
            RejectedRecord::new("otlp-http", 3, "bad_id", "bad id `trace_id`", b"")
                .with_position("message 3, span 2"),
        );
        let s = summary(&p, 4);
        assert_eq!(
            s,
            "1 of 5 spans rejected (bad_id: 1); first (message 3, span 2): bad id `trace_id`"
        );
    }
}
