//! OTLP requests that are broken in their structure, times or enums: each is
//! a counted rejection with its position and reason (JSON and protobuf
//! alike), never zero spans in silence nor a value put somewhere else; and
//! what OTLP carries besides spans (scope, links) is kept.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::trace::v1::{
    ResourceSpans, ScopeSpans, Span, Status,
    span::{Event, Link},
};
use overtime_parse::spans::{ParsedSpans, parse_otlp_json_line, spans_from_otlp_request};

fn json(line: &str) -> ParsedSpans {
    let mut out = ParsedSpans::default();
    parse_otlp_json_line(line.as_bytes(), "f", 3, &mut out);
    out
}

fn rejections(out: &ParsedSpans) -> Vec<(&str, &str)> {
    out.rejected
        .iter()
        .map(|r| (r.reason.as_str(), r.position.as_str()))
        .collect()
}

const SPAN: &str = r#"{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331","name":"chat","startTimeUnixNano":"1714561200000000000","endTimeUnixNano":"1714561201000000000"}"#;

#[test]
fn a_broken_structure_is_a_rejection_at_its_position() {
    // (request, where the rejection is, good spans kept beside it)
    let cases = [
        (
            r#"{"resourceSpans":[{}]}"#.to_string(),
            "line 3, resourceSpans[0]",
            0,
        ),
        (
            r#"{"resourceSpans":[{"scopeSpans":{}}]}"#.to_string(),
            "line 3, resourceSpans[0]",
            0,
        ),
        (
            r#"{"resourceSpans":[{"resource":7,"scopeSpans":[]}]}"#.to_string(),
            "line 3, resourceSpans[0]",
            0,
        ),
        (
            format!(r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{SPAN}]}},{{}}]}}]}}"#),
            "line 3, resourceSpans[0].scopeSpans[1]",
            1,
        ),
        (
            format!(
                r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{SPAN}]}},{{"spans":{{}}}}]}}]}}"#
            ),
            "line 3, resourceSpans[0].scopeSpans[1]",
            1,
        ),
        // A scope that is not `{name, version}` strings: its spans are not
        // read (one rejection for the scope), the next scope's are.
        (
            format!(
                r#"{{"resourceSpans":[{{"scopeSpans":[{{"scope":{{"name":5}},"spans":[{SPAN}]}},{{"spans":[{SPAN}]}}]}}]}}"#
            ),
            "line 3, resourceSpans[0].scopeSpans[0]",
            1,
        ),
    ];
    for (line, position, kept) in cases {
        let out = json(&line);
        let got = rejections(&out);
        assert!(got.contains(&("bad_otlp", position)), "{line}: {got:?}");
        // Good spans next to the broken part are kept.
        assert_eq!(out.spans.len(), kept, "{line}");
    }
}

#[test]
fn absurd_times_are_rejected_never_moved() {
    // The issue's event: a 70-digit time was stored at the span's start.
    let seventy = "1".repeat(70);
    let line = format!(
        r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331","name":"chat","startTimeUnixNano":"1714561200000000000","endTimeUnixNano":"1714561201000000000","events":[{{"name":"chunk","timeUnixNano":"{seventy}"}}]}}]}}]}}]}}"#
    );
    let out = json(&line);
    assert!(out.spans.is_empty());
    assert_eq!(out.rejected[0].reason, "bad_time");
    assert!(
        out.rejected[0].detail.contains("events[0]"),
        "{}",
        out.rejected[0].detail
    );
    // After 2262 (beyond a signed 64-bit nanosecond time), in protobuf.
    let mut s = span();
    s.end_time_unix_nano = 18_000_000_000_000_000_000;
    let out = proto(vec![s]);
    assert_eq!(out.rejected[0].reason, "bad_time");
    assert!(
        out.rejected[0].detail.contains("2262"),
        "{}",
        out.rejected[0].detail
    );
    let mut s = span();
    s.events.push(Event {
        name: "chunk".into(),
        time_unix_nano: 0,
        ..Default::default()
    });
    assert_eq!(proto(vec![s]).rejected[0].reason, "missing_field");
}

fn span() -> Span {
    Span {
        trace_id: vec![0x0a; 16],
        span_id: vec![0xb7; 8],
        name: "chat".into(),
        kind: 3,
        start_time_unix_nano: 1_714_561_200_000_000_000,
        end_time_unix_nano: 1_714_561_201_000_000_000,
        ..Default::default()
    }
}

fn request(scopes: Vec<ScopeSpans>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: scopes,
            ..Default::default()
        }],
    }
}

fn proto(spans: Vec<Span>) -> ParsedSpans {
    let mut out = ParsedSpans::default();
    let req = request(vec![ScopeSpans {
        spans,
        ..Default::default()
    }]);
    spans_from_otlp_request(&req, "grpc", 1, &mut out);
    out
}

#[test]
fn unknown_enum_values_are_flagged() {
    // A status code OTLP does not define: the verdict depends on it, so the
    // span is rejected rather than read as unset.
    let mut s = span();
    s.status = Some(Status {
        code: 7,
        message: String::new(),
    });
    let out = proto(vec![s]);
    assert!(out.spans.is_empty());
    assert_eq!(out.rejected[0].reason, "bad_field");
    assert!(out.rejected[0].detail.contains("status.code"));
    let line = SPAN.replace(
        "\"name\":\"chat\"",
        "\"name\":\"chat\",\"status\":{\"code\":\"NOT_A_STATUS\"}",
    );
    let out = json(&format!(
        r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{line}]}}]}}]}}"#
    ));
    assert_eq!(out.rejected[0].reason, "bad_field");
    // An unknown kind: the span is kept, the kind null and the value kept.
    let mut s = span();
    s.kind = 9;
    let out = proto(vec![s]);
    assert_eq!(out.spans[0].kind, None);
    assert!(
        out.spans[0]
            .attributes
            .contains(&("overtime.unknown_span_kind".to_string(), "9".to_string()))
    );
    let line = SPAN.replace(
        "\"name\":\"chat\"",
        "\"name\":\"chat\",\"kind\":\"SPAN_KIND_SIDEWAYS\"",
    );
    let out = json(&format!(
        r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{line}]}}]}}]}}"#
    ));
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
    assert!(out.spans[0].attributes.contains(&(
        "overtime.unknown_span_kind".to_string(),
        "SPAN_KIND_SIDEWAYS".to_string()
    )));
}

#[test]
fn an_empty_resource_or_scope_in_protobuf_is_a_rejection_too() {
    let mut out = ParsedSpans::default();
    let mut req = request(vec![
        ScopeSpans::default(),
        ScopeSpans {
            spans: vec![span()],
            ..Default::default()
        },
    ]);
    req.resource_spans.push(ResourceSpans::default());
    let rejected_spans = spans_from_otlp_request(&req, "grpc", 4, &mut out);
    assert_eq!(rejected_spans, 0, "no span was rejected");
    assert_eq!(out.spans.len(), 1);
    assert_eq!(
        rejections(&out),
        vec![
            ("bad_otlp", "message 4, resourceSpans[0].scopeSpans[0]"),
            ("bad_otlp", "message 4, resourceSpans[1]"),
        ]
    );
}

#[test]
fn scope_and_links_are_kept_in_the_spans_table() {
    let mut s = span();
    s.links.push(Link {
        trace_id: vec![0x4b; 16],
        span_id: vec![0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7],
        trace_state: "vendor=1".into(),
        ..Default::default()
    });
    let req = request(vec![ScopeSpans {
        scope: Some(InstrumentationScope {
            name: "opentelemetry.instrumentation.httpx".into(),
            version: "0.48b0".into(),
            ..Default::default()
        }),
        spans: vec![s.clone()],
        ..Default::default()
    }]);
    let mut out = ParsedSpans::default();
    spans_from_otlp_request(&req, "grpc", 1, &mut out);
    let (batch, _) = out.to_batches();
    let back = overtime_model::span_records(&batch).unwrap();
    let r = &back[0];
    assert_eq!(
        r.scope_name.as_deref(),
        Some("opentelemetry.instrumentation.httpx")
    );
    assert_eq!(r.scope_version.as_deref(), Some("0.48b0"));
    assert_eq!(r.links.len(), 1);
    assert_eq!(r.links[0].trace_id, "4b".repeat(16));
    assert_eq!(r.links[0].span_id, "00f067aa0ba902b7");
    assert_eq!(r.links[0].trace_state.as_deref(), Some("vendor=1"));
    // A link without a span id is not a link: the span is rejected.
    s.links[0].span_id.clear();
    let out = proto(vec![s]);
    assert_eq!(out.rejected[0].reason, "missing_field");
    assert!(out.rejected[0].detail.contains("links[0].spanId"));
}
