//! OTLP JSON judged by other projects' own test data
//! (`tests/fixtures/peers/`, see its README): Fluent Bit's OpenTelemetry
//! traces cases (each an input with the error Fluent Bit expects, or none),
//! Fluent Bit's `in_opentelemetry` integration inputs with the values its
//! test asserts, and the opentelemetry-proto example request.

use overtime_model::{SpanLink, SpanStatus};
use overtime_parse::spans::{ParsedSpans, parse_otlp_json_line};
use serde_json::{Value, json};
use std::path::PathBuf;

/// Where overtime and Fluent Bit part ways, on purpose.
pub const DIFFERENCES: &[(&str, &str)] = &[
    (
        "span-without-times",
        "Fluent Bit accepts a span with no startTimeUnixNano / endTimeUnixNano; \
         overtime rejects it (missing_field): a span that cannot be placed on the \
         request's timeline would be silently wrong in every verdict. Each such \
         case is also run with times added, and must then be accepted with every \
         field as written",
    ),
    (
        "error-refined-to-timeout",
        "an error status whose message says it timed out (`db timeout`) is \
         overtime's `timeout` status, a kind of error (the status column's \
         vocabulary in docs/inputs.md); Fluent Bit passes STATUS_CODE_ERROR through",
    ),
];

fn peers() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/peers")
}

fn json_file(path: &str) -> Value {
    let p = peers().join(path);
    serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{p:?}: {e}"))).unwrap()
}

fn parse(v: &Value) -> ParsedSpans {
    let mut out = ParsedSpans::default();
    parse_otlp_json_line(v.to_string().as_bytes(), "peer", 1, &mut out);
    out
}

const START: u64 = 1_714_561_200_000_000_000;

/// `v` with a start and an end given to every span that has none, so that
/// it is accepted or rejected for its own reason.
fn with_times(v: &Value) -> Value {
    let mut v = v.clone();
    let arr = |x: &mut Value, k: &str| -> Vec<Value> {
        x.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let Some(resources) = v.get("resourceSpans").and_then(Value::as_array).cloned() else {
        return v;
    };
    let mut new_resources = Vec::new();
    for mut rs in resources {
        if !rs["scopeSpans"].is_array() {
            new_resources.push(rs);
            continue;
        }
        let mut scopes = Vec::new();
        for mut ss in arr(&mut rs, "scopeSpans") {
            if ss["spans"].is_array() {
                let spans: Vec<Value> = arr(&mut ss, "spans")
                    .into_iter()
                    .map(|mut sp| {
                        if let Some(o) = sp.as_object_mut() {
                            o.entry("startTimeUnixNano")
                                .or_insert(json!(START.to_string()));
                            o.entry("endTimeUnixNano")
                                .or_insert(json!((START + 1_000_000).to_string()));
                        }
                        sp
                    })
                    .collect();
                ss["spans"] = Value::Array(spans);
            }
            scopes.push(ss);
        }
        rs["scopeSpans"] = Value::Array(scopes);
        new_resources.push(rs);
    }
    v["resourceSpans"] = Value::Array(new_resources);
    v
}

/// Fluent Bit's error code → the rejection reasons overtime may give.
const FB_ERRORS: &[(&str, &[&str])] = &[
    ("RESOURCE_SPANS_MISSING", &["missing_field"]),
    ("UNEXPECTED_RESOURCE_SPANS_TYPE", &["bad_otlp"]),
    ("UNEXPECTED_RESOURCE_SPANS_ENTRY_TYPE", &["bad_otlp"]),
    ("UNEXPECTED_ROOT_OBJECT_TYPE", &["bad_otlp"]),
    ("SCOPE_SPANS_MISSING", &["bad_otlp"]),
    ("UNEXPECTED_SCOPE_SPANS_TYPE", &["bad_otlp"]),
    ("UNEXPECTED_SCOPE_SPANS_ENTRY_TYPE", &["bad_otlp"]),
    ("SPANS_MISSING", &["bad_otlp"]),
    ("UNEXPECTED_SPANS_TYPE", &["bad_otlp"]),
    ("UNEXPECTED_SPAN_ENTRY_TYPE", &["bad_otlp"]),
    ("SPAN_NAME_MISSING", &["missing_field"]),
    ("INVALID_TRACE_ID", &["bad_id", "missing_field"]),
    ("INVALID_SPAN_ID", &["bad_id", "missing_field"]),
    ("INVALID_PARENT_SPAN_ID", &["bad_id"]),
    ("INVALID_EVENT_ENTRY", &["missing_field", "bad_otlp"]),
    ("INVALID_EVENT_TIMESTAMP", &["bad_time"]),
    ("INVALID_LINK_ENTRY", &["bad_otlp"]),
    ("INVALID_LINK_TRACE_ID", &["bad_id", "missing_field"]),
    ("INVALID_LINK_SPAN_ID", &["bad_id", "missing_field"]),
    ("STATUS_FAILURE", &["bad_field"]),
];

#[test]
fn fluent_bit_error_cases_are_rejected_and_valid_cases_kept() {
    let cases = json_file("fluent-bit/traces.json");
    let (mut errors, mut valid) = (0, 0);
    for (name, case) in cases.as_object().unwrap() {
        let input = &case["input"];
        let timed = with_times(input);
        match case.get("expected_error") {
            Some(err) => {
                let code = err["code"].as_str().unwrap();
                let code = code.strip_prefix("FLB_OTEL_TRACES_ERR_").unwrap();
                let allowed = FB_ERRORS
                    .iter()
                    .find(|(c, _)| *c == code)
                    .unwrap_or_else(|| panic!("{name}: no mapping for {code}"))
                    .1;
                for (what, v) in [("as given", input), ("with times", &timed)] {
                    let out = parse(v);
                    assert!(out.spans.is_empty(), "{name} {what}: {:?}", out.spans);
                    assert!(!out.rejected.is_empty(), "{name} {what}: not rejected");
                }
                // With times, the rejection is for Fluent Bit's reason.
                let out = parse(&timed);
                let r = &out.rejected[0];
                assert!(
                    allowed.contains(&r.reason.as_str()),
                    "{name}: {} ({}) for {code}",
                    r.reason,
                    r.detail
                );
                errors += 1;
            }
            None => {
                let _ = DIFFERENCES[0].1;
                let out = parse(input);
                assert!(out.spans.is_empty(), "{name}: accepted without times");
                assert!(
                    out.rejected
                        .iter()
                        .all(|r| r.reason == "missing_field" && r.detail.contains("TimeUnixNano")),
                    "{name}: {:?}",
                    out.rejected
                );
                let out = parse(&timed);
                assert!(out.rejected.is_empty(), "{name}: {:?}", out.rejected);
                let want = &input["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
                let s = &out.spans[0];
                assert_eq!(s.name, want["name"].as_str().unwrap(), "{name}");
                assert_eq!(s.trace_id, want["traceId"].as_str().unwrap(), "{name}");
                assert_eq!(s.span_id, want["spanId"].as_str().unwrap(), "{name}");
                let parent = want["parentSpanId"].as_str().filter(|p| !p.is_empty());
                assert_eq!(s.parent_span_id.as_deref(), parent, "{name}");
                assert_eq!(s.service, "unknown_service", "{name}");
                let events: Vec<(String, i64)> = want["events"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|e| {
                                let ns: i64 = e["timeUnixNano"].as_str().unwrap().parse().unwrap();
                                (e["name"].as_str().unwrap().to_string(), ns / 1000)
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let got: Vec<(String, i64)> = s
                    .events
                    .iter()
                    .map(|e| (e.name.clone(), e.time_us))
                    .collect();
                assert_eq!(got, events, "{name}");
                let links: Vec<SpanLink> = want["links"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|l| SpanLink {
                                trace_id: l["traceId"].as_str().unwrap().into(),
                                span_id: l["spanId"].as_str().unwrap().into(),
                                trace_state: None,
                                attributes: vec![],
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                assert_eq!(s.links, links, "{name}");
                if want["status"]["code"] == "OK" {
                    assert_eq!(s.status, SpanStatus::Ok, "{name}");
                }
                valid += 1;
            }
        }
    }
    assert_eq!((errors, valid), (34, 4));
}

#[test]
fn fluent_bit_integration_inputs_give_what_its_test_asserts() {
    // test_in_opentelemetry_001.py, test_opentelemetry_to_opentelemetry_basic_traces
    let out = parse(&json_file("fluent-bit/test_traces_001.in.json"));
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
    assert_eq!(out.spans.len(), 1);
    let s = &out.spans[0];
    assert_eq!(s.name, "checkout-span");
    assert_eq!(s.kind.as_deref(), Some("server"));
    assert_eq!(s.trace_id, "5b8efff798038103d269b633813fc60c");
    assert_eq!(s.span_id, "eee19b7ec3c1b174");
    assert_eq!(s.service, "checkout");
    assert_eq!(s.scope_name.as_deref(), Some("trace-scope"));
    assert_eq!(s.scope_version.as_deref(), Some("1.0.0"));
    assert_eq!(
        (s.start_us, s.end_us),
        (1_650_917_400_000_000, 1_650_917_401_000_000)
    );

    // ..._parent_child_traces
    let out = parse(&json_file("fluent-bit/test_traces_002.in.json"));
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
    let by = |n: &str| out.spans.iter().find(|s| s.name == n).unwrap();
    let (parent, child) = (by("parent-span"), by("child-span"));
    assert_eq!(parent.service, "checkout");
    assert_eq!(parent.scope_name.as_deref(), Some("trace-advanced-scope"));
    assert_eq!(parent.scope_version.as_deref(), Some("2.0.0"));
    assert_eq!(parent.trace_id, child.trace_id);
    assert_eq!(
        child.parent_span_id.as_deref(),
        Some(parent.span_id.as_str())
    );
    assert_eq!(parent.events[0].name, "cache.miss");
    assert_eq!(parent.events[0].time_us, 1_650_917_400_500_000);
    assert_eq!(parent.status, SpanStatus::Ok);
    assert_eq!(parent.status_message.as_deref(), Some("ok"));
    let _ = DIFFERENCES[1].1;
    assert_eq!(child.status, SpanStatus::Timeout);
    assert_eq!(child.status_message.as_deref(), Some("db timeout"));
    assert_eq!(child.kind.as_deref(), Some("client"));
}

#[test]
fn the_opentelemetry_proto_example_keeps_every_field() {
    let out = parse(&json_file("opentelemetry-proto/trace.json"));
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
    let s = &out.spans[0];
    assert_eq!(s.service, "my.service");
    assert_eq!(s.scope_name.as_deref(), Some("my.library"));
    assert_eq!(s.scope_version.as_deref(), Some("1.0.0"));
    // W3C ids are lowercase hex; the example writes them upper case.
    assert_eq!(s.trace_id, "5b8efff798038103d269b633813fc60c");
    assert_eq!(s.span_id, "eee19b7ec3c1b174");
    assert_eq!(s.parent_span_id.as_deref(), Some("eee19b7ec3c1b173"));
    assert_eq!(s.name, "I'm a server span");
    assert_eq!(
        (s.start_us, s.end_us),
        (1_544_712_660_000_000, 1_544_712_661_000_000)
    );
    assert_eq!(s.kind.as_deref(), Some("server"));
    assert!(
        s.attributes
            .contains(&("my.span.attr".to_string(), "some value".to_string()))
    );
}
