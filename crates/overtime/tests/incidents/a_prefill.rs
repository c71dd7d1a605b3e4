//! Incident A (tests/fixtures/incidents/a_prefill): long-input LLM calls time out at the
//! service's 30 s budget, nginx answers 504 at 60 s.

use super::harness::{doc, fixture_args, overtime, truth};
use super::helpers::{by_trace, fail_all, finding_summaries, incidents_of, s};
use super::shape::{BUCKETS, check_shape};
use super::truth::{check_failing, check_findings, check_incidents};

#[test]
fn every_failing_trace() {
    check_failing("a_prefill");
}

#[test]
fn incidents() {
    check_incidents("a_prefill");
}

#[test]
fn findings() {
    check_findings("a_prefill");
}

#[test]
fn verdict_shape() {
    check_shape("a_prefill");
}

#[test]
fn gateway_hid_the_503() {
    // The "information black hole": nginx 504 at 60 s, service 503 at 30.5 s.
    let t = truth("a_prefill");
    let v = by_trace(doc("a_prefill"));
    let mut p = Vec::new();
    for tid in t["failing"].as_object().unwrap().keys() {
        let Some(got) = v.get(tid) else { continue };
        if got["gateway"]["upstream_status"].as_str() != Some("504") {
            p.push(format!(
                "{tid}: gateway.upstream_status {}",
                got["gateway"]["upstream_status"]
            ));
        }
        let summaries = finding_summaries(got, "semantic_mask");
        if !summaries
            .iter()
            .any(|x| x.contains("503") && x.contains("504"))
        {
            p.push(format!(
                "{tid}: semantic_mask must name 503 and 504: {summaries:?}"
            ));
        }
    }
    fail_all("a_prefill", p);
}

#[test]
fn latency_by_input_tokens() {
    let d = doc("a_prefill");
    let found = incidents_of(d, "llm_prefill_slow", "deepseek-v4-pro");
    let inc = found.first().expect("an llm_prefill_slow incident");
    let rows = inc["llm_latency_by_input_tokens"]
        .as_array()
        .expect("llm_latency_by_input_tokens");
    let names: Vec<&str> = rows.iter().map(|r| s(r, "bucket")).collect();
    assert_eq!(names, BUCKETS, "the four buckets, in order");
    let row = |b: &str| rows.iter().find(|r| s(r, "bucket") == b).unwrap();
    let f = |b: &str, k: &str| row(b)[k].as_f64().unwrap_or(f64::NAN);
    let mut p = Vec::new();
    for b in BUCKETS {
        let r = row(b);
        if r["calls"].as_u64().unwrap_or(0) == 0 {
            p.push(format!("{b}: no calls"));
            continue;
        }
        let (p50, p90, p99, max) = (
            f(b, "p50_ms"),
            f(b, "p90_ms"),
            f(b, "p99_ms"),
            f(b, "max_ms"),
        );
        if !(p50 <= p90 && p90 <= p99 && p99 <= max) {
            p.push(format!(
                "{b}: P50 {p50} ≤ P90 {p90} ≤ P99 {p99} ≤ max {max} broken"
            ));
        }
        let share = f(b, "share_504");
        if !(0.0..=1.0).contains(&share) {
            p.push(format!("{b}: share_504 {share} not in 0..1"));
        }
    }
    // The incident's table (a_prefill/README.md): < 50 tokens P50 1.2 s, P90 2.8 s, 0 % 504s.
    let within = |x: f64, want: f64, tol: f64| (x - want).abs() <= want * tol;
    if !within(f("<50", "p50_ms"), 1200.0, 0.15) {
        p.push(format!(
            "<50: P50 {} ms, expected ~1200",
            f("<50", "p50_ms")
        ));
    }
    if !within(f("<50", "p90_ms"), 2800.0, 0.2) {
        p.push(format!(
            "<50: P90 {} ms, expected ~2800",
            f("<50", "p90_ms")
        ));
    }
    if f("<50", "share_504") != 0.0 {
        p.push(format!(
            "<50: share_504 {} must be 0",
            f("<50", "share_504")
        ));
    }
    // 200-500 tokens P50 8.7 s; > 500 slower; the 504 share grows with input.
    if !within(f("200-500", "p50_ms"), 8700.0, 0.2) {
        p.push(format!(
            "200-500: P50 {} ms, expected ~8700",
            f("200-500", "p50_ms")
        ));
    }
    if !(f("<50", "p50_ms") < f("200-500", "p50_ms")
        && f("200-500", "p50_ms") < f(">500", "p50_ms"))
    {
        p.push("P50 must grow with input tokens".into());
    }
    if !(f(">500", "share_504") >= 0.4 && f(">500", "share_504") > f("200-500", "share_504")) {
        p.push(format!(
            ">500: share_504 {} must be high (≥ 0.4) and above 200-500's {}",
            f(">500", "share_504"),
            f("200-500", "share_504")
        ));
    }
    fail_all("a_prefill", p);
}

#[test]
fn markdown_report() {
    let d = doc("a_prefill");
    let inc = incidents_of(d, "llm_prefill_slow", "deepseek-v4-pro");
    let headline = s(
        inc.first().expect("an llm_prefill_slow incident"),
        "headline",
    )
    .to_string();
    let mut args = vec!["diagnose".to_string()];
    args.extend(fixture_args("a_prefill"));
    args.push("--markdown".into());
    let out = overtime(&args);
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "--markdown exited {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        md.contains(&headline),
        "markdown lacks the headline {headline:?}:\n{md}"
    );
    let table_rows: Vec<&str> = md
        .lines()
        .filter(|l| l.trim_start().starts_with('|'))
        .collect();
    for b in ["50-200", "200-500"] {
        let alt = b.replace('-', "–");
        assert!(
            table_rows.iter().any(|l| l.contains(b) || l.contains(&alt)),
            "markdown has no table row for bucket {b}:\n{md}"
        );
    }
    assert!(
        table_rows
            .iter()
            .any(|l| l.contains("500") && (l.contains('>') || l.contains("&gt;"))),
        "markdown has no table row for bucket >500:\n{md}"
    );
}
