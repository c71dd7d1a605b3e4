//! Bounded, deterministic fuzz runs for CI: every target of
//! `overtime_parse::fuzz` on its seeds plus a fixed number of mutations
//! from a generator seeded by the target's name, so a failure reproduces
//! anywhere (the panic message carries the input as a byte string). The
//! coverage-guided runs of the same checks live in `fuzz/` (cargo-fuzz);
//! docs/fuzzing.md has both and the recorded long run.

use overtime_parse::fuzz::{TARGETS, Target, run_bounded};

/// Mutations per target: together well under the 60 s CI budget in a
/// debug build, even on a shared 2-core machine.
const ITERATIONS: usize = 10_000;

/// No single input may take longer than this (a hang shows up as a
/// failure here, not as a stuck CI job); real inputs take microseconds.
const PER_INPUT_LIMIT_S: f64 = 5.0;

fn target(name: &str) -> &'static Target {
    TARGETS
        .iter()
        .find(|t| t.name == name)
        .expect("known target")
}

fn run(name: &str) {
    let stats = run_bounded(target(name), ITERATIONS, PER_INPUT_LIMIT_S);
    assert!(stats.inputs > ITERATIONS, "{name}: {stats:?}");
    eprintln!("{name}: {stats:?}");
}

#[test]
fn fuzz_log_format_compiler() {
    run("log_format");
}

#[test]
fn fuzz_nginx_lines_are_rows_or_counted_rejections() {
    run("nginx_line");
}

#[test]
fn fuzz_nginx_rendered_lines_parse_back() {
    run("nginx_roundtrip");
}

#[test]
fn fuzz_unquoted_upstream_lists_parse_back_or_are_rejected() {
    run("nginx_lists");
}

#[test]
fn fuzz_generated_formats_parse_back_or_are_truly_ambiguous() {
    run("nginx_formats");
}

#[test]
fn fuzz_llm_reason_and_durations() {
    run("llm_reason");
}

#[test]
fn fuzz_jsonl_spans() {
    run("jsonl");
}

#[test]
fn fuzz_otlp_json_spans() {
    run("otlp_json");
}

#[test]
fn fuzz_otlp_protobuf_spans() {
    run("otlp_proto");
}

#[test]
fn every_target_has_seeds_and_a_test() {
    for t in TARGETS {
        assert!(
            !overtime_parse::fuzz::seeds(t.name).is_empty(),
            "{} has no seeds",
            t.name
        );
    }
    assert_eq!(TARGETS.len(), 9);
}

/// Inputs the fuzzers found, minimized: each once crashed a parser or
/// broke a property, and now is a counted rejection.
#[test]
fn fuzz_regressions_stay_fixed() {
    use overtime_parse::fuzz::{check_jsonl, check_llm_reason, check_nginx_line};
    use overtime_parse::nginx::{GatewayParser, LogFormat};
    use overtime_parse::spans::{SpanFormat, parse_span_bytes};

    // `1e308` seconds is finite, in ms it was infinity: now not a number.
    check_llm_reason(b"1e308");

    // A pre-1970 time minus an absurd `$request_time` overflowed i64 µs
    // (a panic in debug builds, a wrapped start time in release).
    let fmt = "$time_iso8601 $request_time";
    let line = "0000-01-01T00:00:00+00:00 99999999999999";
    check_nginx_line(format!("\u{ff}{fmt}\n{line}").as_bytes());
    let mut p = GatewayParser::new(LogFormat::compile(fmt).unwrap(), "edge", 0);
    p.push_line(line.as_bytes(), 1);
    p.push_line(b"1970-01-01T00:00:00Z 99999999999999", 2);
    assert_eq!((p.rows(), p.rejected_by_reason()["bad_number"]), (1, 1));

    // A span from the year 294 000 (a float epoch read as ns) back to year
    // 1: the "end before start" message subtracted in i64; the other way
    // round the span's duration did not fit.
    let span = |start: &str, end: &str| {
        format!(
            r#"{{"trace_id":"0af7651916cd43dd8448eb211c80319c","span_id":"b7ad6b7169203331","service":"a","name":"n","start_time":{start},"end_time":{end}}}"#
        )
    };
    for (start, end) in [
        ("9.2e21", r#""0001-01-01T00:00:00Z""#),
        (r#""0001-01-01T00:00:00Z""#, "9.2e21"),
    ] {
        let line = span(start, end);
        check_jsonl(line.as_bytes());
        let out = parse_span_bytes(SpanFormat::Jsonl, line.as_bytes(), "s.jsonl");
        assert_eq!(out.rejected.len(), 1, "{line}");
        assert_eq!(out.rejected[0].reason, "bad_time");
    }
}
