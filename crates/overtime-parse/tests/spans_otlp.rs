//! OTLP end to end: a Collector file-exporter line from the Python SDK,
//! protobuf round trips (bare and length-delimited), JSON and protobuf
//! agreeing on the same request, and bad input.

use crate::common;
use common::{T0_US, assert_fixture_llm_events, attr, by_id, parse_file, random_line};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, KeyValue, any_value::Value as V,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, span::Event};
use overtime_model::{SpanStatus, Stage, span_records};
use overtime_parse::fuzz::Rng;
use overtime_parse::spans::{
    ParsedSpans, SpanFormat, parse_otlp_json_line, parse_otlp_proto, parse_span_bytes,
    spans_from_otlp_request,
};
use prost::Message;
use serde_json::{Value, json};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/spans/collector_file_exporter.jsonl"
);
const T0_NS: u64 = 1_714_561_200_000_000_000;

fn collector_fixture() -> ParsedSpans {
    parse_file(SpanFormat::OtlpJson, FIXTURE, "traces.jsonl")
}

#[test]
fn collector_file_exporter_lines_from_the_python_sdk() {
    let p = collector_fixture();
    assert!(p.rejected.is_empty(), "{:#?}", p.rejected);
    // Line 2 repeats the HTTP span (an exporter retry): both are returned.
    assert_eq!(p.spans.len(), 6);
    assert_eq!(
        p.spans
            .iter()
            .filter(|s| s.span_id == "eee19b7ec3c1b177")
            .count(),
        2
    );
    assert!(
        p.spans
            .iter()
            .all(|s| s.service == "agent-api" && s.trace_id == "5b8efff798038103d269b633813fc60c")
    );
    assert_eq!(
        p.spans.iter().map(|s| s.line).collect::<Vec<_>>(),
        vec![1, 1, 1, 1, 2, 2]
    );

    let root = by_id(&p, "eee19b7ec3c1b174");
    assert_eq!(
        (root.stage, root.kind.as_deref()),
        (Stage::Service, Some("server"))
    );
    assert_eq!((root.start_us, root.end_us), (T0_US, T0_US + 60_001_000));
    assert_eq!(
        root.status,
        SpanStatus::Timeout,
        "ERROR with message 'Gateway Timeout'"
    );
    assert_eq!(root.status_message.as_deref(), Some("Gateway Timeout"));
    assert_eq!(root.http_status, Some(504));
    assert_eq!(root.request_id.as_deref(), Some("req-7f3a"));
    assert_eq!(
        root.max_wait_ms,
        Some(60000.0),
        "x-max-wait bare number is seconds"
    );
    assert_eq!(root.budget_ms, Some(60000.0));
    assert_eq!(root.peer, None, "a server span's own address is not a peer");
    assert_eq!(attr(root, "server.address"), Some("agent.internal:8080"));
    assert_eq!(attr(root, "url.path"), Some("/v1/agent"));

    let chat = by_id(&p, "eee19b7ec3c1b175");
    assert_eq!(chat.parent_span_id.as_deref(), Some("eee19b7ec3c1b174"));
    assert_eq!(
        (chat.stage, chat.kind.as_deref()),
        (Stage::Llm, Some("client"))
    );
    assert_eq!(chat.status, SpanStatus::Unset);
    assert_eq!(chat.model.as_deref(), Some("deepseek-v4-pro"));
    assert_eq!(
        attr(chat, "gen_ai.response.model"),
        Some("deepseek-v4-pro-0501")
    );
    assert_eq!(
        (chat.input_tokens, chat.output_tokens, chat.max_tokens),
        (Some(412), Some(1780), Some(2048))
    );
    assert_eq!(chat.temperature, Some(0.2));
    assert_eq!(chat.ttft_ms, Some(4100.0), "time_to_first_chunk is seconds");
    assert_eq!(chat.phases.prefill_ms, Some(3200.0));
    assert_eq!(chat.phases.decode_ms, Some(28100.0));
    assert_eq!(chat.llm_duration_ms, Some(33600.0));
    assert_eq!(
        (chat.timeout_ms, chat.remaining_budget_ms, chat.attempt),
        (Some(45000.0), Some(58500.0), Some(0))
    );
    assert_eq!(chat.gpu_load, Some(0.93));
    assert_eq!(chat.peer.as_deref(), Some("llm.internal:8000"));
    assert_eq!(attr(chat, "gen_ai.system"), Some("deepseek"));
    assert_eq!(
        attr(chat, "gen_ai.request.stop_sequences"),
        Some(r#"["\n\n"]"#)
    );
    assert_fixture_llm_events(chat);

    let tool = by_id(&p, "eee19b7ec3c1b176");
    assert_eq!(tool.stage, Stage::Tool);
    assert_eq!(tool.tool.as_deref(), Some("weather_api"));
    assert_eq!(tool.status, SpanStatus::Timeout);
    assert_eq!(tool.error_type.as_deref(), Some("timeout"));
    assert_eq!(
        tool.status_message.as_deref(),
        Some("ReadTimeout: timed out")
    );
    assert_eq!(tool.timeout_ms, None);
    assert_eq!(tool.attempt, Some(1));
    assert_eq!(tool.fallback.as_deref(), Some("cached_forecast"));
    assert_eq!(tool.fallback_accepted, Some(true));
    assert_eq!((tool.dns_ms, tool.connect_ms), (Some(20.0), Some(3100.0)));
    let names: Vec<&str> = tool.events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, vec!["dns", "connect", "exception"]);

    let http = by_id(&p, "eee19b7ec3c1b177");
    assert_eq!(http.stage, Stage::Network);
    assert_eq!(http.status, SpanStatus::Error, "UNSET with HTTP 503");
    assert_eq!(http.peer.as_deref(), Some("api.weather.example"));
    assert_eq!(
        attr(http, "url.full"),
        Some("https://api.weather.example/v1/now?city=Paris")
    );

    let judge = by_id(&p, "eee19b7ec3c1b178");
    assert_eq!(judge.stage, Stage::Judge, "agent.role says judge");
    assert_eq!(judge.status, SpanStatus::Ok);
    assert_eq!(judge.judge_score, Some(0.42));

    let (batch, _) = p.to_batches();
    assert_eq!(span_records(&batch).unwrap(), p.spans);
}

fn kv(k: &str, v: V) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn s(x: &str) -> V {
    V::StringValue(x.into())
}

/// A span of the test trace (id 01 02 … 10): `id` eight times over, under
/// `parent` when there is one.
fn span(id: u8, parent: Option<u8>, name: &str, start_ns: u64, end_ns: u64) -> Span {
    Span {
        trace_id: (1..=16).collect(),
        span_id: vec![id; 8],
        parent_span_id: parent.map(|p| vec![p; 8]).unwrap_or_default(),
        name: name.into(),
        start_time_unix_nano: start_ns,
        end_time_unix_nano: end_ns,
        ..Default::default()
    }
}

fn event(at_ns: u64, name: &str, attributes: Vec<KeyValue>) -> Event {
    Event {
        time_unix_nano: at_ns,
        name: name.into(),
        attributes,
        ..Default::default()
    }
}

fn error_status(message: &str) -> Option<Status> {
    Some(Status {
        code: 2,
        message: message.into(),
    })
}

fn request() -> ExportTraceServiceRequest {
    let root = Span {
        kind: 2,
        attributes: vec![
            kv("http.response.status_code", V::IntValue(504)),
            kv("agent.budget_ms", V::IntValue(60000)),
        ],
        status: error_status("deadline exceeded"),
        ..span(0xaa, None, "POST /v1/agent", T0_NS, T0_NS + 60_001_000_000)
    };
    let llm = Span {
        kind: 3,
        attributes: vec![
            kv("gen_ai.operation.name", s("chat")),
            kv("gen_ai.request.model", s("m")),
            kv("gen_ai.usage.input_tokens", V::IntValue(412)),
            kv("gen_ai.request.temperature", V::DoubleValue(0.7)),
            kv(
                "http.response.header.x-llm-reason",
                V::ArrayValue(ArrayValue {
                    values: vec![AnyValue {
                        value: Some(s("kv_cache_build=3.2s,tokenize=12ms")),
                    }],
                }),
            ),
            kv("agent.timeout_ms", V::DoubleValue(30000.0)),
            kv("agent.fallback_accepted", V::BoolValue(false)),
            kv("payload", V::BytesValue(vec![0xde, 0xad])),
        ],
        events: vec![
            event(T0_NS + 2_000_000_000, "chunk", vec![]),
            event(
                T0_NS + 31_000_000_000,
                "gen_ai.evaluation.result",
                vec![kv("gen_ai.evaluation.score.value", V::DoubleValue(0.9))],
            ),
        ],
        ..span(
            0xbb,
            Some(0xaa),
            "chat m",
            T0_NS + 1_000_000_000,
            T0_NS + 31_000_123_456,
        )
    };
    let tool = Span {
        attributes: vec![
            kv("gen_ai.tool.name", s("search")),
            kv("agent.dns_ms", V::IntValue(15)),
        ],
        events: vec![event(
            T0_NS + 31_000_000_000,
            "connect",
            vec![kv("duration_ms", V::DoubleValue(2500.0))],
        )],
        status: error_status(""),
        ..span(
            0xcc,
            Some(0xaa),
            "execute_tool search",
            T0_NS + 31_000_000_000,
            T0_NS + 60_000_000_000,
        )
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", s("agent"))],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: vec![root, llm, tool],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn check_request_spans(p: &ParsedSpans) {
    assert!(p.rejected.is_empty(), "{:#?}", p.rejected);
    assert_eq!(p.spans.len(), 3);
    let root = &p.spans[0];
    assert_eq!(root.trace_id, "0102030405060708090a0b0c0d0e0f10");
    assert_eq!(root.span_id, "aaaaaaaaaaaaaaaa");
    assert_eq!(
        (root.stage, root.status),
        (Stage::Service, SpanStatus::Timeout)
    );
    assert_eq!(
        (root.http_status, root.budget_ms),
        (Some(504), Some(60000.0))
    );
    let llm = &p.spans[1];
    assert_eq!(llm.parent_span_id.as_deref(), Some("aaaaaaaaaaaaaaaa"));
    assert_eq!((llm.stage, llm.service.as_str()), (Stage::Llm, "agent"));
    assert_eq!(
        llm.end_us - llm.start_us,
        30_000_123,
        "ns are truncated to µs"
    );
    assert_eq!((llm.input_tokens, llm.temperature), (Some(412), Some(0.7)));
    assert_eq!(llm.phases.prefill_ms, Some(3200.0));
    assert_eq!(llm.phases.other, vec![("tokenize".to_string(), 12.0)]);
    assert_eq!(
        (llm.timeout_ms, llm.fallback_accepted),
        (Some(30000.0), Some(false))
    );
    assert_eq!(llm.judge_score, Some(0.9));
    assert_eq!(attr(llm, "payload"), Some("dead"));
    assert_eq!(llm.events.len(), 2);
    let tool = &p.spans[2];
    assert_eq!((tool.stage, tool.kind.as_deref()), (Stage::Tool, None));
    assert_eq!(tool.status, SpanStatus::Error);
    assert_eq!((tool.dns_ms, tool.connect_ms), (Some(15.0), Some(2500.0)));
}

#[test]
fn protobuf_round_trip() {
    let bytes = request().encode_to_vec();
    let mut p = ParsedSpans::default();
    parse_otlp_proto(&bytes, "kafka:spans", 17, &mut p);
    check_request_spans(&p);
    assert!(
        p.spans
            .iter()
            .all(|s| s.line == 17 && s.source == "kafka:spans")
    );

    let file = parse_span_bytes(SpanFormat::OtlpProto, &bytes, "spans.pb");
    check_request_spans(&file);
}

#[test]
fn length_delimited_sequence_of_two() {
    let mut data = request().encode_length_delimited_to_vec();
    data.extend(request().encode_length_delimited_to_vec());
    let p = parse_span_bytes(SpanFormat::OtlpProto, &data, "spans.pb");
    assert!(p.rejected.is_empty());
    assert_eq!(p.spans.len(), 6);
    assert_eq!(
        p.spans.iter().map(|s| s.line).collect::<Vec<_>>(),
        vec![1, 1, 1, 2, 2, 2]
    );
    let first = ParsedSpans {
        spans: p.spans[..3].to_vec(),
        rejected: vec![],
    };
    check_request_spans(&first);
}

/// The request in OTLP JSON, as the OTLP/JSON spec writes it.
fn any_json(v: &AnyValue) -> Value {
    match v.value.as_ref().unwrap() {
        V::StringValue(x) => json!({"stringValue": x}),
        V::IntValue(i) => json!({"intValue": i.to_string()}),
        V::DoubleValue(d) => json!({"doubleValue": d}),
        V::BoolValue(b) => json!({"boolValue": b}),
        V::ArrayValue(a) => {
            json!({"arrayValue": {"values": a.values.iter().map(any_json).collect::<Vec<_>>()}})
        }
        V::BytesValue(b) => {
            json!({"bytesValue": if b == &[0xde, 0xad] { "3q0=" } else { panic!("test bytes") }})
        }
        other => panic!("not used in the test: {other:?}"),
    }
}

fn attrs_json(a: &[KeyValue]) -> Value {
    a.iter()
        .map(|kv| json!({"key": kv.key, "value": any_json(kv.value.as_ref().unwrap())}))
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn request_json(req: &ExportTraceServiceRequest) -> Value {
    let rs = &req.resource_spans[0];
    let spans: Vec<Value> = rs.scope_spans[0]
        .spans
        .iter()
        .map(|sp| {
            json!({
                "traceId": hex(&sp.trace_id), "spanId": hex(&sp.span_id), "parentSpanId": hex(&sp.parent_span_id),
                "name": sp.name, "kind": sp.kind,
                "startTimeUnixNano": sp.start_time_unix_nano.to_string(),
                "endTimeUnixNano": sp.end_time_unix_nano.to_string(),
                "attributes": attrs_json(&sp.attributes),
                "events": sp.events.iter().map(|e| json!({
                    "timeUnixNano": e.time_unix_nano.to_string(), "name": e.name, "attributes": attrs_json(&e.attributes)
                })).collect::<Vec<_>>(),
                "status": sp.status.as_ref().map_or(json!({}), |s| json!({"code": s.code, "message": s.message})),
            })
        })
        .collect();
    json!({"resourceSpans": [{
        "resource": {"attributes": attrs_json(&rs.resource.as_ref().unwrap().attributes)},
        "scopeSpans": [{"scope": rs.scope_spans[0].scope.as_ref().map(|sc| json!({"name": sc.name, "version": sc.version})), "spans": spans}]
    }]})
}

#[test]
fn json_and_protobuf_of_one_request_give_the_same_rows() {
    let req = request();
    let line = request_json(&req).to_string();
    let mut from_json = ParsedSpans::default();
    parse_otlp_json_line(line.as_bytes(), "x", 1, &mut from_json);
    let mut from_proto = ParsedSpans::default();
    parse_otlp_proto(&req.encode_to_vec(), "x", 1, &mut from_proto);
    check_request_spans(&from_json);
    assert_eq!(from_json, from_proto);
}

/// Each rejection's reason and position, in order.
fn reasons_and_positions(p: &ParsedSpans) -> Vec<(&str, &str)> {
    p.rejected
        .iter()
        .map(|r| (r.reason.as_str(), r.position.as_str()))
        .collect()
}

#[test]
fn one_bad_span_among_good_ones_rejects_only_it() {
    let mut req = request();
    req.resource_spans[0].scope_spans[0].spans[1].span_id = vec![1, 2, 3]; // 3 bytes
    let mut p = ParsedSpans::default();
    assert_eq!(spans_from_otlp_request(&req, "otlp-grpc", 5, &mut p), 1);
    assert_eq!(
        p.spans
            .iter()
            .map(|s| s.span_id.as_str())
            .collect::<Vec<_>>(),
        vec!["aaaaaaaaaaaaaaaa", "cccccccccccccccc"]
    );
    assert_eq!(p.rejected.len(), 1);
    let r = &p.rejected[0];
    assert_eq!(
        (r.reason.as_str(), r.position.as_str(), r.line),
        ("bad_id", "message 5, span 2", 5)
    );
    assert!(r.detail.contains("spanId"), "{}", r.detail);

    // The same in OTLP JSON: a bad hex id in the third span.
    let mut v = request_json(&request());
    v["resourceSpans"][0]["scopeSpans"][0]["spans"][2]["traceId"] = json!("0102-not-hex");
    v["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["endTimeUnixNano"] = json!("12");
    let mut p = ParsedSpans::default();
    parse_otlp_json_line(v.to_string().as_bytes(), "traces.jsonl", 8, &mut p);
    assert_eq!(p.spans.len(), 1);
    assert_eq!(p.spans[0].span_id, "bbbbbbbbbbbbbbbb");
    assert_eq!(
        reasons_and_positions(&p),
        vec![("bad_time", "line 8, span 1"), ("bad_id", "line 8, span 3")]
    );
    assert!(
        p.rejected[1].raw.contains("0102-not-hex"),
        "raw is the span itself"
    );
}

#[test]
fn spans_without_ids_are_each_rejected() {
    // The OTLP file-exporter spec's example writes empty ids.
    let line = r#"{"resourceSpans":[{"resource":{},"scopeSpans":[{"scope":{},"spans":[
        {"traceId":"","spanId":"","parentSpanId":"","name":"operationA","startTimeUnixNano":"1581452772000000321","endTimeUnixNano":"1581452773000000789","status":{"message":"status-cancelled","code":2}},
        {"traceId":"","spanId":"","name":"operationB","startTimeUnixNano":"1581452772000000321","endTimeUnixNano":"1581452773000000789","status":{}}]}]}]}"#
        .replace('\n', "");
    let p = parse_span_bytes(
        SpanFormat::OtlpJson,
        format!("{line}\n{line}\n").as_bytes(),
        "spec.jsonl",
    );
    assert!(p.spans.is_empty());
    assert_eq!(
        reasons_and_positions(&p),
        vec![
            ("missing_field", "line 1, span 1"),
            ("missing_field", "line 1, span 2"),
            ("missing_field", "line 2, span 1"),
            ("missing_field", "line 2, span 2"),
        ]
    );
}

#[test]
fn random_and_corrupted_protobuf_never_panics() {
    let mut rng = Rng::new(42);
    let good = request().encode_to_vec();
    for i in 0..3000u64 {
        let bytes: Vec<u8> = if i % 2 == 0 {
            let len = rng.below(300);
            (0..len).map(|_| rng.next_u64() as u8).collect()
        } else {
            // Flip a few bytes of a valid request.
            let mut b = good.clone();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(b.len());
                b[at] = rng.next_u64() as u8;
            }
            b
        };
        let mut p = ParsedSpans::default();
        parse_otlp_proto(&bytes, "fuzz", i + 1, &mut p);
        match ExportTraceServiceRequest::decode(&bytes[..]) {
            Ok(req) => {
                let n: usize = req
                    .resource_spans
                    .iter()
                    .flat_map(|r| &r.scope_spans)
                    .map(|s| s.spans.len())
                    .sum();
                // Rejections of a span (not of an empty resource or scope).
                let of_spans = p
                    .rejected
                    .iter()
                    .filter(|r| r.position.contains(", span "))
                    .count();
                assert_eq!(p.spans.len() + of_spans, n, "each span is kept or rejected");
            }
            Err(_) => {
                assert!(p.spans.is_empty());
                assert_eq!(p.rejected.len(), 1);
                assert_eq!(p.rejected[0].reason, "bad_proto");
            }
        }
        for r in &p.rejected {
            assert_eq!(r.line, i + 1);
            assert!(
                [
                    "bad_proto",
                    "bad_id",
                    "bad_time",
                    "missing_field",
                    "bad_field",
                    "bad_otlp"
                ]
                .contains(&r.reason.as_str()),
                "{r:?}"
            );
            assert!(r.position.starts_with(&format!("message {}", i + 1)));
        }
        // Whole streams too: nothing panics and each frame is accounted for.
        let _ = parse_span_bytes(SpanFormat::OtlpProto, &bytes, "fuzz");
    }
}

#[test]
fn random_otlp_json_lines_mixed_with_good_ones() {
    let mut rng = Rng::new(7);
    let good = request_json(&request()).to_string();
    let mut data = Vec::new();
    let mut good_lines = Vec::new();
    let mut bad_lines = Vec::new();
    for line_no in 1..=3000u64 {
        match rng.below(4) {
            0 => {
                good_lines.push(line_no);
                data.extend(good.as_bytes());
            }
            1 => {
                // Truncated JSON.
                let cut = 1 + rng.below(good.len() - 1);
                bad_lines.push(line_no);
                data.extend(&good.as_bytes()[..cut]);
            }
            _ => {
                let len = 1 + rng.below(120);
                let mut l = random_line(&mut rng, len);
                l.insert(0, b'#');
                bad_lines.push(line_no);
                data.extend(l);
            }
        }
        data.push(b'\n');
    }
    assert!(
        good_lines.len() > 500 && bad_lines.len() > 2000,
        "the mix has both kinds"
    );
    let p = parse_span_bytes(SpanFormat::OtlpJson, &data, "fuzz.jsonl");
    assert_eq!(
        p.spans.len(),
        3 * good_lines.len(),
        "every span of every good line"
    );
    let span_lines: Vec<u64> = p.spans.iter().map(|s| s.line).step_by(3).collect();
    assert_eq!(span_lines, good_lines);
    let rejected_lines: Vec<u64> = p.rejected.iter().map(|r| r.line).collect();
    assert_eq!(rejected_lines, bad_lines, "one rejection per bad line");
    assert!(p.rejected.iter().all(|r| r.reason == "bad_json"));
}
