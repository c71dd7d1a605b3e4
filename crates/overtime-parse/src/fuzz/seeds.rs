//! Seed inputs and mutation dictionaries per target: valid encodings the
//! mutations start from (the same ones `fuzz/` writes into its corpus),
//! and tokens worth splicing in.

use crate::nginx::{COMBINED_BODY, OVERTIME_LOG_FORMAT};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    ResourceSpans, ScopeSpans, Span, Status, span, status,
};
use prost::Message;

const AGENT_TRACE: &str = include_str!("../../tests/fixtures/spans/agent_trace.jsonl");
const OTLP_JSON: &str = include_str!("../../tests/fixtures/spans/collector_file_exporter.jsonl");

/// One valid line per entry of [`super::nginx::LINE_FORMATS`], in order.
const LINES: &[&str] = &[
    concat!(
        "10.0.0.1 [2026-11-29T10:00:00+00:00] \"POST /v1/chat HTTP/1.1\" 504 167 rt=60.001 ",
        "uct=\"0.001, 0.000\" uht=\"-, -\" urt=\"30.000, 30.001\" us=\"504, 504\" ",
        "ua=\"10.0.0.5:8000, 10.0.0.6:8000\" rid=4bf92f3577b34da6a3ce929d0e0e4736 ",
        "tp=\"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\" mw=\"120s\" ",
        "llm=\"kv_cache_build=3.2s,decode_loop=28.1s\" llmd=\"47.2s\""
    ),
    "203.0.113.7 - alice [29/Nov/2026:10:00:00 +0000] \"GET /v1/models HTTP/2.0\" 200 512 \"https://x.example/\" \"curl/8.5 \\x22q\\x22 \\xD0\\xBF\"",
    r#"{"t":1795946460.001,"s":504,"rt":60.001,"urt":"30.000, 30.001","us":"504, 504","tp":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","ua":"a \"q\" \\ \u00e9\n","mw":"90"}"#,
    "10.1.2.3 - [29/Nov/2026:05:00:00 -0500] \"POST /v1/agent HTTP/1.1\" 504 0 60.000 \"0.002 : 0.001\" \"-, 59.990\" \"10.0.0.5:8000, [::1]:8000 : unix:/run/llm.sock\" req-1 \"queue_wait=4700ms , prefill=900us\" 47.2",
    "https://api.example.com:8443/v1/chat?q=1 5040.123 acme200 [2026-11-29T10:00:00.250Z]",
    "1795946400.5|499|/v1/chat|python-httpx/0.27 \"raw\" \\",
];

/// The seeds of target `name` (empty for an unknown name).
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let strs = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
    match name {
        "log_format" => {
            out = strs(&[
                COMBINED_BODY,
                OVERTIME_LOG_FORMAT,
                "$status $request_time",
                "'$Status ${request_time}s $status'",
                "escape=none '$uri'",
                "http {\n  # log_format main 'old';\n  log_format main '$remote_addr'\n     ' $status';\n  log_format j escape=json '{\"s\":$status}';\n}",
                "log_format x '\\'$a\\' \\\\ \\t' \"$b\";",
                "'$status",
                "escape=foo '$a'",
                "'${a'",
                "'$'",
            ]);
            out.extend(
                super::nginx::LINE_FORMATS
                    .iter()
                    .map(|f| f.as_bytes().to_vec()),
            );
        }
        "nginx_line" => {
            for (i, line) in LINES.iter().enumerate() {
                let mut v = vec![i as u8];
                v.extend_from_slice(line.as_bytes());
                v.extend_from_slice(b"\r\n\n");
                v.extend_from_slice(line.as_bytes());
                out.push(v);
            }
            out.push(b"\xff'$status $request_time $msec'\n504 60.001 1795946400.5\nx".to_vec());
            out.push(
                b"\xff$time_local|$upstream_status\n29/Nov/2026:10:00:00 +0000|502 : 504".to_vec(),
            );
        }
        "nginx_roundtrip" => {
            for sel in 0..3u8 {
                out.push(vec![sel]);
                out.push(
                    (0..160)
                        .map(|i: u8| sel.wrapping_add(i.wrapping_mul(37)))
                        .collect(),
                );
            }
        }
        "llm_reason" => {
            out = strs(&[
                "kv_cache_build=3.2s,decode_loop=28.1s,io_wait=1.4s",
                "queue_wait=4700ms , prefill=900us;tokenize=12ms",
                "decode:1e3ms,=1s,garbage",
                "47.2s",
                "60.001",
                "1500",
                "2m",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                "-",
            ]);
        }
        "jsonl" => {
            out.push(AGENT_TRACE.as_bytes().to_vec());
            out.extend(AGENT_TRACE.lines().map(|l| l.as_bytes().to_vec()));
        }
        "otlp_json" => {
            out.push(OTLP_JSON.as_bytes().to_vec());
            out.extend(OTLP_JSON.lines().map(|l| l.as_bytes().to_vec()));
        }
        "otlp_proto" => {
            let req = otlp_request();
            out.push(req.encode_to_vec());
            let mut two = req.encode_length_delimited_to_vec();
            two.extend(req.encode_length_delimited_to_vec());
            out.push(two);
        }
        "nginx_lists" => {
            for sel in [0u8, 2, 4] {
                out.push(vec![sel]);
                out.push(
                    (0..200)
                        .map(|i: u8| sel.wrapping_add(i.wrapping_mul(53)))
                        .collect(),
                );
            }
            out.push(b"\x03172.17.0.6:8080, 172.17.0.7:8080 : unix:/s 502, 200 : 404 0.100, 0.004 : - - - 61, 100 : 0 1, 2 : 3 3, 4 : 5 MISS 4bf92f3577b34da6a3ce929d0e0e4736".to_vec());
            out.push(b"\x05200 [[::1]:80, [::2]:80] 0.100, 0.004s 502, 200 my id".to_vec());
        }
        // Every byte is a choice of the generator: varied random bytes.
        "nginx_formats" => {
            for k in 1..=24u64 {
                let mut rng = super::Rng::new(k.wrapping_mul(0x9E37_79B9));
                out.push((0..400).map(|_| rng.next_u64() as u8).collect());
            }
        }
        _ => {}
    }
    out.extend(super::peer_seeds::peer_seeds(name));
    out
}

/// Tokens the mutator splices in for target `name`.
pub fn dictionary(name: &str) -> Vec<&'static [u8]> {
    let nginx: &[&[u8]] = &[
        b"$",
        b"${",
        b"}",
        b"'",
        b"\"",
        b"\\",
        b"\\x22",
        b"\\u0022",
        b"\\\"",
        b"escape=json ",
        b"escape=none ",
        b"log_format ",
        b";",
        b"#",
        b"-",
        b", ",
        b" : ",
        b"\n",
        b"\r",
        b"\xff",
        b"99999999999999999",
        b"18446744073709551615",
        b"1e308",
        b"0.0001",
        b"0000-01-01T00:00:00+23:59",
        b"9999-12-31T23:59:59-14:00",
        b"31/Dec/9999:23:59:59 +1400",
        b"01/Jan/0000:00:00:00 +2359",
        b"$msec",
        b"$time_local",
        b"$time_iso8601",
        b"$request_time",
        b"$status",
        b"$upstream_response_time",
        b"$request",
        b"$http_x_max_wait",
    ];
    let spans: &[&[u8]] = &[
        b"\"trace_id\":",
        b"\"span_id\":",
        b"\"parent_span_id\":",
        b"\"start_time\":",
        b"\"end_time\":",
        b"\"duration_ms\":",
        b"\"events\":[{\"name\":\"dns\",\"offset_ms\":",
        b"1e308",
        b"-1",
        b"9223372036854775807",
        b"18446744073709551615",
        b"\"0001-01-01T00:00:00Z\"",
        b"\"9999-12-31T23:59:59Z\"",
        b"\"resourceSpans\":",
        b"\"stringValue\":",
        b"\"intValue\":",
        b"\"doubleValue\":",
        b"\"arrayValue\":{\"values\":[",
        b"\"kvlistValue\":",
        b"null",
        b"\"startTimeUnixNano\":",
        b"\"endTimeUnixNano\":",
        b"\"agent.timeout_ms\"",
        b"\"gen_ai.response.time_to_first_chunk\"",
        b"\"llm_duration\"",
        b"\"ttft_ms\"",
        b"{",
        b"}",
        b"[",
        b"]",
        b"\\u0000",
        b"\\ud800",
    ];
    let reason: &[&[u8]] = &[
        b"=",
        b":",
        b",",
        b";",
        b"s",
        b"ms",
        b"us",
        b"\xc2\xb5s",
        b"m",
        b"h",
        b"e",
        b"1e308",
        b"queue",
        b"prefill",
        b"decode",
        b"io_wait",
        b"-",
        b"NaN",
        b"inf",
        b"99999999999999999",
        b"00-",
    ];
    match name {
        "log_format" | "nginx_line" | "nginx_roundtrip" => nginx.to_vec(),
        "nginx_lists" => {
            let mut d = nginx.to_vec();
            d.extend_from_slice(&[
                b"[]" as &[u8],
                b"] [",
                b"unix:/run/a.sock",
                b"[fd00::1]:443",
                b"HTTP/1.1\" ",
                b"PATCHp ",
                b"MISS",
                b"0, 0",
                b"502 : 200",
            ]);
            d
        }
        "jsonl" | "otlp_json" | "otlp_proto" => spans.to_vec(),
        "llm_reason" => reason.to_vec(),
        _ => Vec::new(),
    }
}

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn s(v: &str) -> any_value::Value {
    any_value::Value::StringValue(v.into())
}

/// A request with a server span, an LLM client span (X-LLM-Reason as a
/// string array, tokens, a timeout error) and a tool span with events.
fn otlp_request() -> ExportTraceServiceRequest {
    let t0 = 1_714_561_200_000_000_000u64;
    let base = Span {
        trace_id: vec![0x0a; 16],
        span_id: vec![0xb7; 8],
        name: "POST /v1/agent".into(),
        kind: span::SpanKind::Server as i32,
        start_time_unix_nano: t0,
        end_time_unix_nano: t0 + 60_000_000_000,
        attributes: vec![kv(
            "http.response.status_code",
            any_value::Value::IntValue(504),
        )],
        ..Default::default()
    };
    let llm = Span {
        span_id: vec![0xc1; 8],
        parent_span_id: vec![0xb7; 8],
        name: "chat deepseek".into(),
        kind: span::SpanKind::Client as i32,
        attributes: vec![
            kv("gen_ai.request.model", s("deepseek-v4-pro")),
            kv("gen_ai.usage.input_tokens", any_value::Value::IntValue(412)),
            kv(
                "gen_ai.response.time_to_first_chunk",
                any_value::Value::DoubleValue(3.2),
            ),
            kv(
                "http.response.header.x-llm-reason",
                any_value::Value::ArrayValue(ArrayValue {
                    values: vec![AnyValue {
                        value: Some(s("kv_cache_build=3.2s,decode_loop=28.1s")),
                    }],
                }),
            ),
            kv("agent.timeout_ms", any_value::Value::IntValue(30_000)),
        ],
        status: Some(Status {
            code: status::StatusCode::Error as i32,
            message: "deadline exceeded".into(),
        }),
        ..base.clone()
    };
    let tool = Span {
        span_id: vec![0xd2; 8],
        parent_span_id: vec![0xb7; 8],
        name: "tool search".into(),
        events: vec![span::Event {
            name: "dns".into(),
            time_unix_nano: t0 + 1_000_000,
            attributes: vec![kv("duration_ms", any_value::Value::DoubleValue(12.5))],
            ..Default::default()
        }],
        ..base.clone()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", s("agent-api"))],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: vec![base, llm, tool],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}
