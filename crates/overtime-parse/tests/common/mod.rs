//! Helpers shared by the parser tests: the span fixtures' start and their
//! LLM call's events, attribute and span look-ups, and random bad lines.
#![allow(dead_code)]

use overtime_model::SpanRecord;
use overtime_parse::fuzz::Rng;
use overtime_parse::spans::{ParsedSpans, SpanFormat, parse_span_bytes};

/// 2024-05-01T11:00:00Z: where the span fixtures' traces start.
pub const T0_US: i64 = 1_714_561_200_000_000;

/// The spans of the file at `path`, read as `format` from `source`.
pub fn parse_file(format: SpanFormat, path: &str, source: &str) -> ParsedSpans {
    parse_span_bytes(format, &std::fs::read(path).unwrap(), source)
}

/// The value of attribute `k` of `s`, if it has one.
pub fn attr<'a>(s: &'a SpanRecord, k: &str) -> Option<&'a str> {
    s.attributes
        .iter()
        .find(|(n, _)| n == k)
        .map(|(_, v)| v.as_str())
}

fn find<'a>(p: &'a ParsedSpans, what: &str, hit: impl Fn(&SpanRecord) -> bool) -> &'a SpanRecord {
    p.spans
        .iter()
        .find(|s| hit(s))
        .unwrap_or_else(|| panic!("no span {what}"))
}

/// The span called `name` (the first, if several are).
pub fn by_name<'a>(p: &'a ParsedSpans, name: &str) -> &'a SpanRecord {
    find(p, name, |s| s.name == name)
}

/// The span with id `id` (the first, if several have it).
pub fn by_id<'a>(p: &'a ParsedSpans, id: &str) -> &'a SpanRecord {
    find(p, id, |s| s.span_id == id)
}

/// Asserts the events of the fixtures' LLM call, the same in the JSONL and
/// the OTLP fixture: a chunk, a heartbeat, a chunk, at their offsets from
/// [`T0_US`].
#[track_caller]
pub fn assert_fixture_llm_events(llm: &SpanRecord) {
    let evs: Vec<(&str, i64)> = llm
        .events
        .iter()
        .map(|e| (e.name.as_str(), e.time_us - T0_US))
        .collect();
    assert_eq!(
        evs,
        vec![
            ("chunk", 5_600_000),
            ("heartbeat", 15_000_000),
            ("chunk", 35_000_000)
        ]
    );
}

/// `len` random bytes with the newlines among them left out: one line of
/// garbage.
pub fn random_line(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| rng.next_u64() as u8)
        .filter(|&b| b != b'\n')
        .collect()
}
