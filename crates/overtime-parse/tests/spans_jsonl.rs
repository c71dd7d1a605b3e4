//! JSONL span logs end to end: a file with every docs/inputs.md#spans field, and bad
//! input of every kind (random bytes, truncated JSON, mixtures).

use crate::common;
use common::{T0_US, assert_fixture_llm_events, attr, by_name, parse_file, random_line};
use overtime_model::{SpanStatus, Stage, span_records};
use overtime_parse::fuzz::Rng;
use overtime_parse::spans::{ParsedSpans, SpanFormat, parse_jsonl_line, parse_span_bytes};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/spans/agent_trace.jsonl"
);
const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";

fn fixture() -> ParsedSpans {
    parse_file(SpanFormat::Jsonl, FIXTURE, "agent_trace.jsonl")
}

#[test]
fn every_span_of_the_fixture_is_read_with_its_line() {
    let p = fixture();
    assert!(p.rejected.is_empty(), "{:#?}", p.rejected);
    assert_eq!(p.spans.len(), 8);
    assert!(
        p.spans.iter().all(|s| s.trace_id == TRACE),
        "ids are lowercased"
    );
    // Line 3 is blank: the memory span is on line 4.
    let lines: Vec<u64> = p.spans.iter().map(|s| s.line).collect();
    assert_eq!(lines, vec![1, 2, 4, 5, 6, 7, 8, 9]);
    assert!(p.spans.iter().all(|s| s.source == "agent_trace.jsonl"));
    let stages: Vec<(&str, Stage)> = p.spans.iter().map(|s| (s.name.as_str(), s.stage)).collect();
    assert_eq!(
        stages,
        vec![
            ("POST /v1/agent", Stage::Service),
            ("worker_pool.acquire", Stage::Queue),
            ("load_memory", Stage::Memory),
            ("chat deepseek-v4-pro", Stage::Llm),
            ("call weather_api", Stage::Tool),
            ("answer_judge", Stage::Judge),
            ("POST /notify", Stage::Network),
            ("windows_line_ending", Stage::Other),
        ]
    );
}

#[test]
fn root_fields() {
    let p = fixture();
    let root = by_name(&p, "POST /v1/agent");
    assert_eq!(root.span_id, "00f067aa0ba902b7");
    assert_eq!(root.parent_span_id, None);
    assert_eq!(root.service, "agent-api");
    assert_eq!(root.kind.as_deref(), Some("server"));
    assert_eq!((root.start_us, root.end_us), (T0_US, T0_US + 60_001_000));
    assert_eq!(root.status, SpanStatus::Error);
    assert_eq!(root.http_status, Some(504));
    assert_eq!(root.budget_ms, Some(60000.0));
    assert_eq!(root.max_wait_ms, Some(60000.0));
    assert_eq!(root.request_id.as_deref(), Some("req-7f3a"));
    assert_eq!(
        attr(root, "region"),
        Some("eu-west-1"),
        "unknown fields are kept"
    );
}

#[test]
fn llm_fields_phases_and_events() {
    let p = fixture();
    let llm = by_name(&p, "chat deepseek-v4-pro");
    assert_eq!(llm.parent_span_id.as_deref(), Some("00f067aa0ba902b7"));
    assert_eq!(
        llm.start_us,
        T0_US + 1_500_000,
        "epoch seconds are recognised"
    );
    assert_eq!(llm.duration_ms(), 33600.0);
    assert_eq!(llm.status, SpanStatus::Ok);
    assert_eq!(llm.timeout_ms, Some(45000.0));
    assert_eq!(llm.remaining_budget_ms, Some(58500.0));
    assert_eq!(llm.attempt, Some(0));
    assert_eq!(llm.model.as_deref(), Some("deepseek-v4-pro"));
    assert_eq!(
        (llm.input_tokens, llm.output_tokens, llm.max_tokens),
        (Some(412), Some(1780), Some(2048))
    );
    assert_eq!(llm.temperature, Some(0.2));
    assert_eq!(llm.ttft_ms, Some(4100.0));
    assert_eq!(llm.gpu_load, Some(0.93));
    assert_eq!(
        llm.llm_reason.as_deref(),
        Some("queue_wait=0.9s, kv_cache_build=3.2s,decode_loop=28.1s,io_wait=1.4s")
    );
    assert_eq!(llm.llm_duration_ms, Some(33600.0));
    let ph = &llm.phases;
    assert_eq!(
        (ph.queue_ms, ph.prefill_ms, ph.decode_ms, ph.io_ms),
        (Some(900.0), Some(3200.0), Some(28100.0), Some(1400.0))
    );
    assert!(!ph.malformed);
    assert_fixture_llm_events(llm);
    assert_eq!(attr(llm, "tags"), Some(r#"["prod","canary"]"#));
    assert_eq!(attr(llm, "gen_ai.system"), Some("deepseek"));
    assert_eq!(attr(llm, "customer.id"), Some("42"));
}

#[test]
fn tool_judge_network_fields() {
    let p = fixture();
    let tool = by_name(&p, "call weather_api");
    assert_eq!(
        tool.start_us,
        T0_US + 35_100_000,
        "epoch µs strings are recognised"
    );
    assert_eq!(tool.tool.as_deref(), Some("weather_api"));
    assert_eq!(tool.timeout_ms, None, "null timeout is no timeout");
    assert_eq!(tool.attempt, Some(1));
    assert_eq!(tool.status, SpanStatus::Timeout);
    assert_eq!(tool.error_type.as_deref(), Some("ReadTimeout"));
    assert_eq!(tool.peer.as_deref(), Some("api.weather.example:443"));
    assert_eq!((tool.dns_ms, tool.connect_ms), (Some(20.0), Some(3100.0)));
    assert_eq!(tool.fallback.as_deref(), Some("cached_forecast"));
    assert_eq!(tool.fallback_accepted, Some(true));
    let durations: Vec<(&str, Option<f64>)> = tool
        .events
        .iter()
        .map(|e| (e.name.as_str(), e.duration_ms))
        .collect();
    assert_eq!(
        durations,
        vec![("dns", Some(20.0)), ("connect", Some(3100.0))]
    );

    let judge = by_name(&p, "answer_judge");
    assert_eq!(judge.judge_score, Some(0.42));
    assert_eq!(judge.model.as_deref(), Some("judge-small"));

    let net = by_name(&p, "POST /notify");
    assert_eq!(net.kind.as_deref(), Some("client"));
    assert_eq!(net.status, SpanStatus::Cancelled);
    assert_eq!(net.http_status, Some(499));
    assert_eq!(net.duration_ms(), 101.0);
}

#[test]
fn fixture_round_trips_through_the_arrow_table() {
    let p = fixture();
    let (spans, rejected) = p.to_batches();
    assert_eq!((spans.num_rows(), rejected.num_rows()), (8, 0));
    assert_eq!(span_records(&spans).unwrap(), p.spans);
}

fn good_line(i: u64) -> String {
    format!(
        r#"{{"trace_id":"{i:032x}","span_id":"{:016x}","service":"svc","name":"op {i}","start_time":{},"duration_ms":{}}}"#,
        i + 1,
        1_714_561_200_000 + i,
        i % 1000
    )
}

#[test]
fn random_bytes_and_good_lines_mixed_every_line_accounted_for() {
    // Deterministic, so a failure reproduces.
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut data = Vec::new();
    let mut good = Vec::new();
    let mut bad_lines = Vec::new();
    for line_no in 1..=5000u64 {
        if rng.below(4) == 0 {
            good.push(line_no);
            data.extend(good_line(line_no).as_bytes());
        } else {
            let len = 1 + rng.below(200);
            let mut line = random_line(&mut rng, len);
            // Some random lines start like JSON, to go deeper into the parser.
            if rng.below(3) == 0 {
                line.insert(0, b'{');
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                line.push(b'x');
            }
            bad_lines.push(line_no);
            data.extend(&line);
        }
        data.push(b'\n');
    }
    assert!(
        good.len() > 1000 && bad_lines.len() > 3000,
        "the mix has both kinds"
    );
    let p = parse_span_bytes(SpanFormat::Jsonl, &data, "fuzz.jsonl");
    let got_good: Vec<u64> = p.spans.iter().map(|s| s.line).collect();
    assert_eq!(got_good, good, "every good span is kept, at its line");
    let got_bad: Vec<u64> = p.rejected.iter().map(|r| r.line).collect();
    let bad_without_cr: Vec<u64> = bad_lines.clone();
    assert_eq!(
        got_bad, bad_without_cr,
        "every bad line is rejected, at its line"
    );
    assert!(
        p.rejected
            .iter()
            .all(|r| r.reason == "bad_json" && r.source == "fuzz.jsonl")
    );
    assert!(
        p.rejected
            .iter()
            .all(|r| r.position == format!("line {}", r.line))
    );
    assert!(
        p.rejected
            .iter()
            .all(|r| r.raw.len() <= overtime_model::RAW_KEEP)
    );
}

#[test]
fn every_truncation_of_a_good_line_is_bad_json() {
    let full = std::fs::read_to_string(FIXTURE).unwrap();
    let line = full.lines().nth(4).unwrap(); // the LLM span, with nested events
    for cut in 1..line.len() {
        if !line.is_char_boundary(cut) {
            continue;
        }
        let r = parse_jsonl_line(&line.as_bytes()[..cut], "t.jsonl", 5).unwrap_err();
        assert_eq!(r.reason, "bad_json", "cut at {cut}");
        assert_eq!(r.raw, &line[..cut]);
    }
    assert!(parse_jsonl_line(line.as_bytes(), "t.jsonl", 5).is_ok());
}

#[test]
fn a_mixture_of_good_and_bad_lines() {
    let lines = [
        good_line(1),                                                                           // 1 ok
        r#"{"trace_id":"zz","span_id":"0000000000000001","service":"s","name":"n","start_time":1,"duration_ms":1}"#.into(), // 2 bad_id
        good_line(3),                                                                           // 3 ok
        r#"{"trace_id":"00000000000000000000000000000003","span_id":"0000000000000004","service":"s","start_time":1,"duration_ms":1}"#.into(), // 4 missing name
        r#"{"trace_id":"00000000000000000000000000000003","span_id":"0000000000000004","service":"s","name":"n","start_time":1714561200000,"end_time":1714561100000}"#.into(), // 5 bad_time
        "[1,2,3]".into(),                                                                       // 6 bad_json
        good_line(7).replace(r#""duration_ms""#, r#""status":"weird","duration_ms""#),          // 7 ok, status kept
        "   ".into(),                                                                           // 8 blank
        good_line(9),                                                                           // 9 ok
        r#"{"trace_id":"00000000000000000000000000000009","span_id":"000000000000000a","service":"s","name":"n","start_time":1714561200000}"#.into(), // 10 missing end
    ];
    let data = lines.join("\n");
    let p = parse_span_bytes(SpanFormat::Jsonl, data.as_bytes(), "mix.jsonl");
    assert_eq!(
        p.spans.iter().map(|s| s.line).collect::<Vec<_>>(),
        vec![1, 3, 7, 9]
    );
    let rej: Vec<(u64, &str)> = p
        .rejected
        .iter()
        .map(|r| (r.line, r.reason.as_str()))
        .collect();
    assert_eq!(
        rej,
        vec![
            (2, "bad_id"),
            (4, "missing_field"),
            (5, "bad_time"),
            (6, "bad_json"),
            (10, "missing_field")
        ]
    );
    assert!(p.rejected[1].detail.contains("name"));
    assert!(p.rejected[4].detail.contains("end_time or duration_ms"));
    let weird = &p.spans[2];
    assert_eq!(weird.status, SpanStatus::Unset);
    assert_eq!(
        attr(weird, "status"),
        Some("weird"),
        "an unknown status is kept, not lost"
    );
}

#[test]
fn duplicates_are_returned_not_merged() {
    let line = good_line(5);
    let data = format!("{line}\n{line}\n");
    let p = parse_span_bytes(SpanFormat::Jsonl, data.as_bytes(), "dup.jsonl");
    assert_eq!(p.spans.len(), 2);
    assert_eq!(p.spans[0].span_id, p.spans[1].span_id);
}

#[test]
fn line_by_line_reading_matches_whole_file_reading_even_with_mixed_formats() {
    let otlp = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/spans/collector_file_exporter.jsonl"
    ))
    .unwrap();
    let jsonl = std::fs::read_to_string(FIXTURE).unwrap();
    // A BOM, JSONL spans, then an OTLP request line, then more bad input.
    let data = format!(
        "\u{feff}{jsonl}{}\nnot json\n",
        otlp.lines().next().unwrap()
    );
    let whole = parse_span_bytes(SpanFormat::Jsonl, data.as_bytes(), "mixed");
    assert_eq!(
        whole.spans.len(),
        8 + 4,
        "JSONL spans and the OTLP line's spans"
    );
    assert_eq!(whole.spans[8].service, "agent-api");
    assert_eq!(whole.spans[8].line, 10);
    assert_eq!(whole.rejected.len(), 1);
    assert_eq!(whole.rejected[0].line, 11);

    let body = data.strip_prefix('\u{feff}').unwrap();
    let mut by_line = ParsedSpans::default();
    for (i, line) in body.split('\n').enumerate() {
        overtime_parse::spans::parse_span_line(
            SpanFormat::Jsonl,
            line.as_bytes(),
            "mixed",
            i as u64 + 1,
            &mut by_line,
        );
    }
    assert_eq!(by_line, whole);
}
