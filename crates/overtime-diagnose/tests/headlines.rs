//! An incident's headline states its denominator, and the shares of
//! incidents that overlap in time are shares of the same failures, so they
//! add up for the SRE who reads them side by side.

use crate::common::*;
use overtime_model::{RootCauseKind as K, SpanStatus, Stage};

/// A failing request at `at_ms`: the gateway answered `status`; the
/// service's tool `tool` ran 9 s with no timeout.
fn tool_failure(n: u32, at_ms: i64, status: u16, tool: &str) -> Builder {
    let mut b = Builder::new(n).at(at_ms);
    b.gateway(status, 10_000.0);
    b.root("agent-api", 1.0, 9_990.0);
    b.tool("2", "agent-api", tool, 10.0, 9_900.0);
    b
}

/// A request whose LLM call on `model` ran into its 8 s timeout after a
/// long prefill, and the service answered `status`.
fn prefill_failure(n: u32, at_ms: i64, status: u16) -> Builder {
    let mut b = Builder::new(n).at(at_ms);
    b.gateway(status, 10_000.0);
    b.root("agent-api", 1.0, 9_990.0);
    let l = b.child("2", "agent-api", Stage::Llm, 10.0, 8_010.0);
    l.model = Some("deepseek-v4-pro".into());
    l.timeout_ms = Some(8_000.0);
    l.status = SpanStatus::Timeout;
    l.input_tokens = Some(420);
    l.phases = overtime_parse::llm_reason::parse_llm_reason("kv_cache_build=6s,decode_loop=1.9s");
    b
}

#[test]
fn a_headline_over_504s_and_503s_counts_failures_not_only_504s() {
    let mut all = Vec::new();
    for i in 0..6 {
        all.push(prefill_failure(i, i as i64 * 2_000, 504));
    }
    for i in 0..3 {
        all.push(prefill_failure(10 + i, 1_000 + i as i64 * 2_000, 503));
    }
    all.push(tool_failure(20, 3_000, 504, "search_api"));
    let d = run(all, &cfg_with_timeout(10_000.0));
    let prefill = d
        .incidents
        .iter()
        .find(|i| i.kind == K::LlmPrefillSlow)
        .expect("a prefill incident");
    // Every 504 but one is prefill, yet 3 of its failures were 503s: the
    // headline is over all 10 failures, and says so.
    assert!(
        prefill.headline.starts_with(
            "90 % of failures came from llm_prefill_slow on deepseek-v4-pro (9 of 10)"
        ),
        "{}",
        prefill.headline
    );
    assert_eq!(prefill.headline_share.of, "failures");
    // The report for people: statistics as durations in a table, no JSON.
    let md = overtime_diagnose::markdown::render(&d);
    assert!(md.contains("| statistic | value |"), "{md}");
    assert!(md.contains("| latency | n 9 · P50 8.0 s"), "{md}");
    assert!(!md.contains("\"p50\"") && !md.contains("{\""), "{md}");
    assert!(md.contains("9 of the 10 failures from"), "{md}");
    assert_eq!(
        (prefill.headline_share.count, prefill.headline_share.total),
        (9, 10)
    );
}

#[test]
fn overlapping_incidents_share_one_denominator_and_their_shares_add_up() {
    // 20 failures in one stretch of time: 11 on search_api, 9 on
    // weather_api, interleaved so that the two incidents' own windows
    // differ but overlap.
    let mut all = Vec::new();
    for i in 0..11u32 {
        all.push(tool_failure(i, i as i64 * 3_000, 504, "search_api"));
    }
    for i in 0..9u32 {
        all.push(tool_failure(
            100 + i,
            10_000 + i as i64 * 3_000,
            504,
            "weather_api",
        ));
    }
    let d = run(all, &cfg_with_timeout(10_000.0));
    let tools: Vec<_> = d
        .incidents
        .iter()
        .filter(|i| i.kind == K::ToolNoTimeout)
        .collect();
    assert_eq!(tools.len(), 2, "{:#?}", d.incidents);
    for i in &tools {
        assert_eq!(i.headline_share.total, 20, "{}", i.headline);
        assert_eq!(i.headline_share.of, "504s");
        assert_eq!(i.headline_share.window, tools[0].headline_share.window);
    }
    let search = tools.iter().find(|i| i.component == "search_api").unwrap();
    let weather = tools.iter().find(|i| i.component == "weather_api").unwrap();
    assert!(
        search
            .headline
            .starts_with("55 % of 504s came from tool_no_timeout on search_api (11 of 20)"),
        "{}",
        search.headline
    );
    assert!(
        weather
            .headline
            .starts_with("45 % of 504s came from tool_no_timeout on weather_api (9 of 20)"),
        "{}",
        weather.headline
    );
    assert_eq!(
        search.headline_share.count + weather.headline_share.count,
        20,
        "the shares of overlapping incidents add up"
    );
}

#[test]
fn incidents_apart_in_time_keep_their_own_denominators() {
    let mut all = Vec::new();
    for i in 0..4u32 {
        all.push(tool_failure(i, i as i64 * 3_000, 504, "search_api"));
    }
    // An hour later, another tool, alone.
    for i in 0..2u32 {
        all.push(tool_failure(
            50 + i,
            3_600_000 + i as i64 * 3_000,
            504,
            "weather_api",
        ));
    }
    let d = run(all, &cfg_with_timeout(10_000.0));
    assert_eq!(d.incidents.len(), 2);
    for i in &d.incidents {
        assert!(i.headline.starts_with("100 % of 504s"), "{}", i.headline);
        assert_eq!(i.headline_share.count, i.headline_share.total);
    }
}

#[test]
fn the_example_traces_open_a_long_report_before_its_tables() {
    // 63 traces of one incident: the report runs to its tables of causes,
    // statistics and LLM latency; a view cut to its first lines (a
    // terminal's `head`, a ticket's preview) must still name the traces
    // to open first.
    let all: Vec<Builder> = (0..63)
        .map(|i| prefill_failure(200 + i, i as i64 * 1_000, 504))
        .collect();
    let d = run(all, &Default::default());
    assert_eq!(d.incidents.len(), 1);
    let r = &d.incidents[0];
    assert_eq!(r.trace_count, 63);
    let md = overtime_diagnose::markdown::incident(r);
    let examples = md.find("### Example traces").expect(&md);
    let tables = md.find("### Causes").expect(&md);
    assert!(examples < tables, "{md}");
    let listed: Vec<&str> = md[examples..tables]
        .lines()
        .filter(|l| l.starts_with("- `"))
        .collect();
    assert_eq!(listed.len(), r.example_trace_ids.len().max(1), "{md}");
    for id in &r.example_trace_ids {
        assert!(md[examples..tables].contains(id.as_str()), "{md}");
    }
    assert!(md[examples..tables].contains("… and 58 more"), "{md}");
}
