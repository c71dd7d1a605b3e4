//! The harness reads every nesting of a call the call model accepts
//! (docs/diagnosis.md, "Calls") as the call it is, on small traces shaped
//! like the recorded runs' (tests/fixtures/e2e_*), and writes back what it
//! read in every family, nesting and spelling.

use super::decompose::logical;
use super::emit::{self, Nesting};
use super::model::Logical;
use super::run::{self, Sample};
use super::write;
use overtime_model::{SpanRecord, SpanStatus, Stage};
use overtime_parse::spans::{SpanFormat, parse_span_bytes};

const T: &str = "0af7651916cd43dd8448eb211c80319c";
/// When the request began, µs (a real time: OTLP has no time 0).
const T0: i64 = 1_796_618_683_000_000;

/// A span of `stage` from `start` to `end` ms; `id` and `parent` are short
/// names made into span ids.
fn span(id: &str, parent: Option<&str>, stage: Stage, start: i64, end: i64) -> SpanRecord {
    let mut s = SpanRecord::new(
        T,
        &sid(id),
        "agent-api",
        id,
        T0 + start * 1000,
        T0 + end * 1000,
    );
    s.parent_span_id = parent.map(sid);
    s.stage = stage;
    match stage {
        Stage::Network => {
            s.kind = Some("client".into());
            s.name = "POST".into();
            s.peer = Some("10.0.0.9:8000".into());
        }
        Stage::Service => s.kind = Some("server".into()),
        _ => {}
    }
    s
}

fn sid(name: &str) -> String {
    format!("{:016x}", super::model::fnv(name))
}

fn llm(id: &str, parent: Option<&str>, start: i64, end: i64, model: &str) -> SpanRecord {
    let mut s = span(id, parent, Stage::Llm, start, end);
    s.model = Some(model.into());
    s
}

fn failed(mut s: SpanRecord) -> SpanRecord {
    s.status = SpanStatus::Error;
    s.error_type = Some("APIConnectionError".into());
    s
}

fn attempt_ids(l: &Logical, call: usize) -> Vec<String> {
    l.calls[call]
        .attempts
        .iter()
        .map(|a| a.span_id.clone())
        .collect()
}

#[test]
fn an_attempt_beside_its_operation_is_its_call_even_across_an_application_span() {
    // OpenInference's LangChain runs: each POST under the request, its
    // ChatOpenAI run under the app's judge span.
    let spans = vec![
        span("req", None, Stage::Service, 0, 4000),
        llm("chat", Some("req"), 7, 143, "deepseek-v4-pro"),
        span("post1", Some("req"), Stage::Network, 16, 126),
        span("answer_judge", Some("req"), Stage::Other, 144, 3675),
        llm(
            "judge-chat",
            Some("answer_judge"),
            159,
            3675,
            "qwen2.5-72b-instruct",
        ),
        span("post2", Some("req"), Stage::Network, 166, 3673),
    ];
    let l = logical(&spans);
    assert_eq!(l.calls.len(), 2, "{:#?}", l.calls);
    assert_eq!(attempt_ids(&l, 0), [sid("post1")]);
    assert_eq!(attempt_ids(&l, 1), [sid("post2")]);
    assert_eq!(
        l.calls[1].parent.as_deref(),
        Some(sid("answer_judge").as_str())
    );
    assert!(l.calls.iter().all(|c| c.original_shape == "beside"));
    assert_eq!(l.structure.len(), 2, "the request and the judge's span");
}

#[test]
fn orphans_of_one_lost_operation_are_one_call_and_their_connect_phase_is_theirs() {
    // Node's OpenInference: the OpenAI span never ended, its retries did.
    let mut spans = vec![
        span("req", None, Stage::Service, 0, 3000),
        span("handler", Some("req"), Stage::Other, 1, 3000),
        span("post1", Some("lost"), Stage::Network, 2, 1002),
        span("tcp", Some("lost"), Stage::Other, 2, 4),
        span("post2", Some("lost"), Stage::Network, 1471, 2471),
    ];
    spans[3].name = "tcp.connect".into();
    let l = logical(&spans);
    assert_eq!(l.calls.len(), 1, "{:#?}", l.calls);
    let c = &l.calls[0];
    assert_eq!(attempt_ids(&l, 0), [sid("post1"), sid("post2")]);
    assert_eq!(c.lost_op.as_deref(), Some(sid("lost").as_str()));
    assert_eq!(c.parent.as_deref(), Some(sid("handler").as_str()));
    assert_eq!(c.attempts[0].connect_ms, Some(2.0));
    assert_eq!(c.original_shape, "orphans");
}

#[test]
fn retries_under_one_operation_are_its_attempts_through_its_inner_operations() {
    // The AI SDK: generateText → doGenerate per try → the HTTP attempt.
    let spans = vec![
        span("req", None, Stage::Service, 0, 3000),
        llm("gen", Some("req"), 0, 3000, "m"),
        failed(llm("do1", Some("gen"), 0, 1000, "m")),
        failed(span("p1", Some("do1"), Stage::Network, 1, 999)),
        llm("do2", Some("gen"), 1000, 3000, "m"),
        span("p2", Some("do2"), Stage::Network, 1001, 2999),
    ];
    let l = logical(&spans);
    assert_eq!(l.calls.len(), 1, "{:#?}", l.calls);
    assert_eq!(attempt_ids(&l, 0), [sid("do1"), sid("do2")]);
    assert_eq!(l.calls[0].original_shape, "op+retried-ops");
    assert_eq!(l.calls[0].attempts[0].status, SpanStatus::Error);
    // One try: the chain down to the one HTTP span gives one attempt.
    let one = logical(&[
        span("req", None, Stage::Service, 0, 3000),
        llm("gen", Some("req"), 0, 3000, "m"),
        llm("do", Some("gen"), 0, 3000, "m"),
        span("p", Some("do"), Stage::Network, 1, 2999),
    ]);
    assert_eq!(attempt_ids(&one, 0), [sid("p")]);
}

#[test]
fn operations_side_by_side_are_one_call_only_when_the_earlier_ones_failed() {
    let retried = logical(&[
        span("req", None, Stage::Service, 0, 3000),
        failed(llm("c1", Some("req"), 0, 1000, "m")),
        llm("c2", Some("req"), 1000, 2000, "m"),
    ]);
    assert_eq!(retried.calls.len(), 1);
    assert_eq!(retried.calls[0].original_shape, "repeated");
    assert_eq!(retried.calls[0].attempts.len(), 2);
    let twice = logical(&[
        span("req", None, Stage::Service, 0, 3000),
        llm("c1", Some("req"), 0, 1000, "m"),
        llm("c2", Some("req"), 1000, 2000, "m"),
    ]);
    assert_eq!(twice.calls.len(), 2, "an agent asking one model twice");
}

#[test]
fn a_connection_phase_span_is_its_attempts_connect_time_not_an_attempt() {
    // Node's GenAI: `tcp.connect` beside the POST, both under `chat`.
    let mut spans = vec![
        span("req", None, Stage::Service, 0, 3000),
        llm("chat", Some("req"), 6, 3001, "deepseek-v4-pro"),
        span("post", Some("chat"), Stage::Network, 7, 3001),
        span("tcp", Some("chat"), Stage::Other, 10, 11),
    ];
    spans[3].name = "tcp.connect".into();
    let l = logical(&spans);
    assert_eq!(attempt_ids(&l, 0), [sid("post")]);
    assert_eq!(l.calls[0].attempts[0].connect_ms, Some(1.0));
}

/// An AI SDK agent loop: `generateText` running a tool between its steps.
fn agent_loop() -> Vec<SpanRecord> {
    let mut tool = span("calc", Some("gen"), Stage::Tool, 1000, 1500);
    tool.tool = Some("calc".into());
    vec![
        span("req", None, Stage::Service, 0, 3000),
        llm("gen", Some("req"), 0, 3000, "m"),
        llm("step1", Some("gen"), 0, 1000, "m"),
        span("p1", Some("step1"), Stage::Network, 1, 999),
        tool,
        span("p2", Some("calc"), Stage::Network, 1001, 1499),
        llm("step2", Some("gen"), 1500, 3000, "m"),
        span("p3", Some("step2"), Stage::Network, 1501, 2999),
    ]
}

#[test]
fn an_agent_loop_is_structure_and_its_steps_and_tools_are_the_calls() {
    let l = logical(&agent_loop());
    let ops: Vec<&str> = l.calls.iter().map(|c| c.op_name.as_str()).collect();
    assert_eq!(ops, ["step1", "calc", "step2"]);
    assert!(l.structure.iter().any(|s| s.name == "gen"));
}

#[test]
fn every_shape_above_reads_back_as_written_in_every_rewrite() {
    let mut tcp = span("tcp", Some("lost"), Stage::Other, 2, 4);
    tcp.name = "tcp.connect".into();
    let traces = [
        agent_loop(),
        vec![
            span("req", None, Stage::Service, 0, 3000),
            span("handler", Some("req"), Stage::Other, 1, 3000),
            span("post1", Some("lost"), Stage::Network, 2, 1002),
            tcp,
            span("post2", Some("lost"), Stage::Network, 1471, 2471),
        ],
    ];
    for (k, spans) in traces.into_iter().enumerate() {
        let s = Sample {
            trace_id: T.into(),
            logical: logical(&spans),
            spans: spans.clone(),
            want: None,
            dominant: None,
            original: None,
        };
        for c in run::combos(true) {
            let e = emit::trace(&s.logical, c.family, c.nesting, c.naming);
            let (text, format) = if c.family.jsonl() {
                (write::jsonl(&e.outs, T), SpanFormat::Jsonl)
            } else {
                (write::otlp(&e.outs, T), SpanFormat::OtlpJson)
            };
            let parsed = parse_span_bytes(format, text.as_bytes(), "test");
            let rejected: Vec<String> = parsed
                .rejected
                .iter()
                .map(|r| format!("{} {}", r.reason, r.detail))
                .collect();
            assert!(rejected.is_empty(), "{}: {rejected:?}", c.label());
            let errs = run::faithful(&s, &e.outs, &parsed.spans);
            assert!(errs.is_empty(), "{}: {errs:?}", c.label());
            // The agent loop's calls each have an operation: children
            // writes them. The orphans' POSTs are a network call (no
            // family writes an operation for it) that did not fail before
            // its last try: one call only as orphans of their lost parent.
            if c.nesting == Nesting::Children {
                let fell: usize = e.fallbacks.values().sum();
                assert_eq!(fell, usize::from(k == 1), "{}", c.label());
            }
        }
    }
}
