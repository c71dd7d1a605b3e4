//! How a span ended: OTLP's three status codes (or a JSONL status word)
//! refined with `error.type`, the HTTP status and the error message into
//! the five of docs/inputs.md#spans (`unset ok error timeout cancelled`).

use overtime_model::SpanStatus;

/// Reads a status word: [`SpanStatus::parse_lenient`], then by content
/// (`"upstream_timeout"` → timeout, `"request_canceled"` → cancelled,
/// `"internal_error"` → error). `None` when it says nothing known.
pub fn parse_status_word(s: &str) -> Option<SpanStatus> {
    SpanStatus::parse_lenient(s).or_else(|| {
        classify_failure(s).or_else(|| {
            let l = s.to_ascii_lowercase();
            (l.contains("error") || l.contains("fail")).then_some(SpanStatus::Error)
        })
    })
}

/// Does an error type or message say timeout or cancellation?
///
/// Timeout: `timeout`, `timed out`, `deadline` (e.g. `TimeoutError`,
/// `httpx.ReadTimeout`, `DEADLINE_EXCEEDED`). Cancelled: `cancel`,
/// `client reset`, `client closed`/`disconnect` (the caller went away).
pub fn classify_failure(text: &str) -> Option<SpanStatus> {
    let l = text.to_ascii_lowercase();
    let has = |needles: &[&str]| needles.iter().any(|n| l.contains(n));
    if has(&["timeout", "timed out", "timed_out", "timedout", "deadline"]) {
        Some(SpanStatus::Timeout)
    } else if has(&[
        "cancel",
        "client reset",
        "client_reset",
        "client closed",
        "client_closed",
        "client disconnect",
        "client_disconnect",
    ]) {
        Some(SpanStatus::Cancelled)
    } else {
        None
    }
}

/// The final status of a span.
///
/// - `error` becomes `timeout`/`cancelled` when `error_type` (else the
///   message) says so ([`classify_failure`]);
/// - `unset` becomes `timeout`/`cancelled` when `error_type` says so, and
///   `error` (refined as above) when the HTTP status is ≥ 500; HTTP 499
///   (nginx's "client closed request") is `cancelled`;
/// - `ok`, `timeout` and `cancelled` stay.
pub fn refine_status(
    base: SpanStatus,
    http_status: Option<u16>,
    error_type: Option<&str>,
    message: Option<&str>,
) -> SpanStatus {
    let by_type = error_type.and_then(classify_failure);
    let by_type_or_message = || by_type.or_else(|| message.and_then(classify_failure));
    match base {
        SpanStatus::Error => by_type_or_message().unwrap_or(SpanStatus::Error),
        SpanStatus::Unset => match (by_type, http_status) {
            (Some(s), _) => s,
            (None, Some(499)) => SpanStatus::Cancelled,
            (None, Some(h)) if h >= 500 => by_type_or_message().unwrap_or(SpanStatus::Error),
            _ => SpanStatus::Unset,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_refined_by_type_then_message() {
        use SpanStatus::*;
        assert_eq!(
            refine_status(Error, None, None, Some("ReadTimeout: timed out")),
            Timeout
        );
        assert_eq!(
            refine_status(Error, None, Some("ValueError"), Some("deadline hit")),
            Timeout,
            "the message is read when the type says nothing"
        );
        assert_eq!(
            refine_status(Error, None, Some("client_reset"), None),
            Cancelled
        );
        assert_eq!(
            refine_status(Error, None, Some("KeyError"), Some("no key")),
            Error
        );
        assert_eq!(
            refine_status(Unset, Some(504), None, Some("Gateway Timeout")),
            Timeout
        );
        assert_eq!(refine_status(Unset, Some(499), None, None), Cancelled);
        assert_eq!(
            refine_status(Unset, None, Some("DEADLINE_EXCEEDED"), None),
            Timeout
        );
        assert_eq!(refine_status(Unset, Some(404), Some("404"), None), Unset);
        assert_eq!(refine_status(Timeout, Some(200), None, None), Timeout);
    }

    #[test]
    fn status_words() {
        assert_eq!(parse_status_word("canceled"), Some(SpanStatus::Cancelled));
        assert_eq!(
            parse_status_word("upstream_failed"),
            Some(SpanStatus::Error)
        );
        assert_eq!(parse_status_word("Timeout"), Some(SpanStatus::Timeout));
        assert_eq!(parse_status_word(""), Some(SpanStatus::Unset));
    }
}

#[cfg(test)]
mod doc_examples {
    //! What were doc examples before the module became internal.

    #[test]
    fn parse_status_word_example() {
        use crate::spans::status::parse_status_word;
        use overtime_model::SpanStatus;
        assert_eq!(parse_status_word("STATUS_CODE_OK"), Some(SpanStatus::Ok));
        assert_eq!(parse_status_word("read_timeout"), Some(SpanStatus::Timeout));
        assert_eq!(parse_status_word("purple"), None);
    }

    #[test]
    fn classify_failure_example() {
        use crate::spans::status::classify_failure;
        use overtime_model::SpanStatus;
        assert_eq!(
            classify_failure("httpx.ReadTimeout"),
            Some(SpanStatus::Timeout)
        );
        assert_eq!(
            classify_failure("asyncio.CancelledError"),
            Some(SpanStatus::Cancelled)
        );
        assert_eq!(classify_failure("ValueError"), None);
    }

    #[test]
    fn refine_status_example() {
        use crate::spans::status::refine_status;
        use overtime_model::SpanStatus;
        assert_eq!(
            refine_status(SpanStatus::Error, None, Some("timeout"), None),
            SpanStatus::Timeout
        );
        assert_eq!(
            refine_status(SpanStatus::Unset, Some(503), None, None),
            SpanStatus::Error
        );
        assert_eq!(
            refine_status(SpanStatus::Unset, Some(200), None, None),
            SpanStatus::Unset
        );
        assert_eq!(
            refine_status(SpanStatus::Ok, Some(504), Some("timeout"), None),
            SpanStatus::Ok
        );
    }
}
