//! Fuzz targets for `X-LLM-Reason` / durations and the three span
//! encodings (JSONL, OTLP JSON, OTLP protobuf).

use super::{assert_duration, assert_finite, lines};
use crate::duration::parse_duration_ms;
use crate::llm_reason::{parse_llm_duration, parse_llm_reason};
use crate::nginx::values::{duration_ms, secs_to_ms, trace_id};
use crate::spans::{
    ExportTraceServiceRequest, ParsedSpans, SpanFormat, parse_otlp_proto, parse_span_bytes,
    spans_from_otlp_request,
};
use overtime_model::{SpanRecord, rejected_records, span_records};
use prost::Message;
use serde_json::Value;

/// Rejection reasons the span parsers may give.
const SPAN_REASONS: &[&str] = &[
    "bad_json",
    "missing_field",
    "bad_field",
    "bad_id",
    "bad_time",
    "bad_otlp",
    "bad_proto",
];

/// `X-LLM-Reason`, `X-LLM-Duration` and the duration readers on arbitrary
/// text: every phase is finite and ≥ 0, phase names are trimmed,
/// lowercase and non-empty, and the nginx parser's fast readers agree with
/// the general ones (`duration_ms` with [`parse_duration_ms`], `secs_to_ms`
/// with `f64` parsing, the traceparent reader with the model's).
pub fn check_llm_reason(data: &[u8]) {
    let s = String::from_utf8_lossy(data);
    let p = parse_llm_reason(&s);
    for (name, ms) in p.iter() {
        assert_duration(name, Some(ms));
    }
    for (name, _) in &p.other {
        assert!(
            !name.is_empty() && *name == name.trim().to_ascii_lowercase(),
            "phase name {name:?}"
        );
        assert!(!name.contains([',', ';']), "phase name {name:?}");
    }
    if s.trim().is_empty() || s.trim() == "-" {
        assert!(p.is_empty() && !p.malformed);
    }
    assert_duration("X-LLM-Duration", parse_llm_duration(&s));
    for unit in [0.001, 1.0, 1000.0] {
        assert_duration("duration", parse_duration_ms(&s, unit));
    }
    let (fast, slow) = (duration_ms(&s), parse_duration_ms(&s, 1000.0));
    match (fast, slow) {
        (Some(a), Some(b)) => assert!(close(a, b), "duration_ms({s:?}): {a} vs {b}"),
        (a, b) => assert_eq!(a, b, "duration_ms({s:?})"),
    }
    if let Ok(Some(ms)) = secs_to_ms(&s) {
        assert_duration("secs_to_ms", Some(ms));
        if let Ok(v) = s.trim().parse::<f64>() {
            assert!(close(ms, v * 1000.0), "secs_to_ms({s:?}) = {ms}");
        }
    }
    assert_eq!(
        trace_id(&s).map(|c| c.into_owned()),
        overtime_model::trace_id_from_traceparent(&s),
        "traceparent {s:?}"
    );
}

/// Equal within a relative 1e-9 (the fast paths compute in integers).
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// JSONL span logs: see [`check_span_bytes`].
pub fn check_jsonl(data: &[u8]) {
    check_span_bytes(SpanFormat::Jsonl, data);
}

/// OTLP JSON lines: see [`check_span_bytes`].
pub fn check_otlp_json(data: &[u8]) {
    check_span_bytes(SpanFormat::OtlpJson, data);
}

/// A JSONL or OTLP JSON file: every non-blank line that is not an OTLP
/// request gives exactly one span or one rejection (an OTLP request
/// gives one per span, possibly none); every span passes
/// [`check_span`]; the `spans` and `rejected` batches read back to the
/// same records.
fn check_span_bytes(format: SpanFormat, data: &[u8]) {
    let out = parse_span_bytes(format, data, "fuzz");
    let body = data.strip_prefix(b"\xef\xbb\xbf").unwrap_or(data);
    for (n, line, blank) in lines(body) {
        let made = out.spans.iter().filter(|s| s.line == n).count()
            + out.rejected.iter().filter(|r| r.line == n).count();
        if blank {
            assert_eq!(made, 0, "blank line {n} made records");
            continue;
        }
        let otlp = serde_json::from_slice::<Value>(line)
            .ok()
            .and_then(|v| v.as_object().cloned())
            .is_some_and(|o| o.contains_key("resourceSpans") || o.contains_key("resource_spans"));
        if !otlp {
            assert_eq!(made, 1, "line {n} is one span or one rejection");
        }
    }
    check_parsed(&out);
}

/// OTLP protobuf: a stream (length-delimited or one message) and one
/// message. A message that decodes gives one span or one rejection per
/// span in it (plus one per empty resource or scope), [`spans_from_otlp_request`] reports the same rejections,
/// and the same request written as OTLP JSON maps to the same spans and
/// rejections; one that does not decode is exactly one `bad_proto`
/// rejection.
pub fn check_otlp_proto(data: &[u8]) {
    check_parsed(&parse_span_bytes(SpanFormat::OtlpProto, data, "fuzz"));
    let mut one = ParsedSpans::default();
    parse_otlp_proto(data, "fuzz", 1, &mut one);
    match ExportTraceServiceRequest::decode(data) {
        Ok(req) => {
            let n: usize = req
                .resource_spans
                .iter()
                .flat_map(|rs| &rs.scope_spans)
                .map(|ss| ss.spans.len())
                .sum();
            // Rejections of spans; the others are of an empty resource or
            // scope, each named by its position.
            let of_spans = one
                .rejected
                .iter()
                .filter(|r| r.position.contains(", span "))
                .count();
            for r in one
                .rejected
                .iter()
                .filter(|r| !r.position.contains(", span "))
            {
                assert!(r.position.contains("resourceSpans["), "{r:?}");
                assert_eq!(r.reason, "bad_otlp", "{r:?}");
            }
            assert_eq!(one.spans.len() + of_spans, n, "spans in == out");
            let mut again = ParsedSpans::default();
            let rejected = spans_from_otlp_request(&req, "fuzz", 1, &mut again);
            assert_eq!(rejected, of_spans);
            assert_eq!(again, one, "decoded request maps like the bytes");
            let mut re = ParsedSpans::default();
            parse_otlp_proto(&req.encode_to_vec(), "fuzz", 1, &mut re);
            assert_eq!(re.spans, one.spans, "re-encoded request maps the same");
            super::otlp_diff::check_json_matches_proto(&req, &one);
        }
        Err(_) => {
            assert!(one.spans.is_empty());
            assert_eq!(one.rejected.len(), 1);
            assert_eq!(one.rejected[0].reason, "bad_proto");
        }
    }
    check_parsed(&one);
}

/// Checks every span and rejection, and the Arrow round trip.
fn check_parsed(out: &ParsedSpans) {
    out.spans.iter().for_each(check_span);
    for r in &out.rejected {
        assert!(SPAN_REASONS.contains(&r.reason.as_str()), "{r:?}");
        assert!(!r.detail.is_empty(), "{r:?}");
    }
    let (spans, rejected) = out.to_batches();
    let back = span_records(&spans).expect("spans batch reads back");
    assert_eq!(back, out.spans, "spans survive the Arrow round trip");
    let rej = rejected_records(&rejected).expect("rejected batch reads back");
    assert_eq!(rej, out.rejected, "rejections survive the Arrow round trip");
}

fn is_hex_id(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && s.bytes().any(|b| b != b'0')
}

/// What every parsed span must satisfy: lowercase hex ids of the right
/// length (not all zeros), a non-empty service and name, an end not
/// before its start with a duration that fits, finite numbers, timeouts
/// > 0, non-negative LLM phases.
pub(crate) fn check_span(s: &SpanRecord) {
    assert!(is_hex_id(&s.trace_id, 32), "trace id {:?}", s.trace_id);
    assert!(is_hex_id(&s.span_id, 16), "span id {:?}", s.span_id);
    if let Some(p) = &s.parent_span_id {
        assert!(is_hex_id(p, 16), "parent id {p:?}");
    }
    assert!(!s.service.trim().is_empty(), "empty service");
    assert!(
        s.end_us >= s.start_us && s.end_us.checked_sub(s.start_us).is_some(),
        "span from {} to {} µs",
        s.start_us,
        s.end_us
    );
    assert_duration("duration_ms", Some(s.duration_ms()));
    if let Some(t) = s.timeout_ms {
        assert!(t.is_finite() && t > 0.0, "timeout_ms {t}");
    }
    for (what, v) in [
        ("budget_ms", s.budget_ms),
        ("remaining_budget_ms", s.remaining_budget_ms),
        ("max_wait_ms", s.max_wait_ms),
        ("temperature", s.temperature),
        ("ttft_ms", s.ttft_ms),
        ("gpu_load", s.gpu_load),
        ("llm_duration_ms", s.llm_duration_ms),
        ("judge_score", s.judge_score),
        ("dns_ms", s.dns_ms),
        ("connect_ms", s.connect_ms),
    ] {
        assert_finite(what, v);
    }
    for e in &s.events {
        assert_finite("event duration_ms", e.duration_ms);
    }
    for (name, ms) in s.phases.iter() {
        assert_duration(name, Some(ms));
    }
}
