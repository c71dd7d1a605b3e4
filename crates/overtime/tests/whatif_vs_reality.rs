//! What-if against reality: `overtime simulate` runs the `latency_law`
//! scenario under timeouts X (seed 000's fixed 30 s LLM timeout, a search
//! tool with none, a 120 s budget behind a 60 s gateway); `overtime whatif`
//! predicts, from that run's access log and spans alone, the 504s under a
//! proposal Y; then the same seeded scenario runs under Y for real. The
//! predicted and the actual 504 counts must agree within 10 % (or ±2), for
//! three proposals: raise the model timeout, align the gateway, add a tool
//! timeout. The simulator knows nothing of the prediction, and the
//! prediction sees only what a production system would log.
//!
//! Twice: with every span (the model server's own spans say how long a
//! call the agent gave up on really took), and as a team calling a hosted
//! model API sees it — no model-server spans, so a cut call's latency is
//! drawn from the fitted laws; there the actual count must also fall
//! within the 5th–95th percentile of the draws when it misses by more.

use serde_json::Value;
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_overtime");
/// Nominal delays are divided by this: the 60 s gateway waits 1.2 s.
const SCALE: f64 = 50.0;
/// The scale of the 504-count comparison: the 60 s gateway waits 3 s. At
/// 50x a 60 ms stall of a busy test machine is 3 s nominal, which moved 3
/// of 240 requests across a 120 s timeout the prediction placed them under
/// (26 predicted, 23 happened); at 20x the same stall is 1.2 s.
const COUNT_SCALE: f64 = 20.0;
const REQUESTS: &str = "240";
const MODEL: &str = "deepseek-v4-pro";

/// Today's timeouts (nominal).
const X: &[&str] = &["llm.deepseek-v4-pro.timeout=30s"];

struct Run {
    log: String,
    spans: String,
    /// Status → count, from the access log.
    statuses: std::collections::BTreeMap<u16, usize>,
    /// `$request_time` of every line (ms).
    times: Vec<f64>,
    /// Its time scale.
    scale: f64,
}

fn simulate(dir: &Path, name: &str, set: &[String]) -> Run {
    simulate_scenario(dir, "latency_law", REQUESTS, name, set, COUNT_SCALE)
}

fn simulate_scenario(
    dir: &Path,
    scenario: &str,
    requests: &str,
    name: &str,
    set: &[String],
    scale: f64,
) -> Run {
    let log = dir.join(format!("{name}.log"));
    let spans = dir.join(format!("{name}.jsonl"));
    let mut cmd = Command::new(BIN);
    cmd.args([
        "simulate",
        "--scenario",
        scenario,
        "--no-nginx",
        "--no-otlp",
        "--quiet",
        "--time-scale",
        &scale.to_string(),
        "--requests",
        requests,
        "--rate",
        "25",
        "--concurrency",
        "8",
        "--seed",
        "7",
        "--access-log",
        log.to_str().unwrap(),
        "--spans-out",
        spans.to_str().unwrap(),
    ]);
    for s in set {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().expect("run overtime simulate");
    assert!(
        out.status.success(),
        "simulate {name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let mut statuses = std::collections::BTreeMap::new();
    let mut times = Vec::new();
    for line in text.lines() {
        if let Some(rt) = line
            .split(" rt=")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|r| r.parse::<f64>().ok())
        {
            times.push(rt * 1000.0);
        }
        // `... "POST /v1/agent/plan HTTP/1.1" 504 ...`
        let status = line
            .split("\" ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|s| s.parse::<u16>().ok())
            .unwrap_or_else(|| panic!("no status in access line {line:?}"));
        *statuses.entry(status).or_insert(0) += 1;
    }
    Run {
        log: log.display().to_string(),
        spans: spans.display().to_string(),
        statuses,
        times,
        scale,
    }
}

/// The span file without the model server's spans (a hosted model API).
fn without_model_server(spans: &str, out: &Path) -> String {
    let text = std::fs::read_to_string(spans).unwrap();
    let mut kept = String::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut doc: Value = serde_json::from_str(line).unwrap();
        if let Some(rs) = doc["resourceSpans"].as_array_mut() {
            rs.retain(|r| {
                !r["resource"]["attributes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|a| {
                        a["key"] == "service.name" && a["value"]["stringValue"] == "model-server"
                    })
            });
        }
        kept.push_str(&doc.to_string());
        kept.push('\n');
    }
    std::fs::write(out, kept).unwrap();
    out.display().to_string()
}

/// `overtime whatif` over run `x` with the proposal in real time.
fn whatif(x: &Run, spans: &str, proposal_real: &[String]) -> Value {
    let gateway_real_ms = 60_000.0 / x.scale;
    let mut args = vec![
        "whatif".to_string(),
        "--nginx-log".into(),
        x.log.clone(),
        "--log-format".into(),
        "overtime".into(),
        "--layer-name".into(),
        "edge".into(),
        "--gateway-timeout".into(),
        format!("{gateway_real_ms}ms"),
        "--otlp-json".into(),
        spans.to_string(),
        "--json".into(),
    ];
    for p in proposal_real {
        args.push("--set".into());
        args.push(p.clone());
    }
    let out = Command::new(BIN).args(&args).output().unwrap();
    assert!(
        out.status.success(),
        "whatif {proposal_real:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

/// A nominal `KEY=30s` as real time (`KEY=600ms` at scale 50).
fn real(kv: &str, scale: f64) -> String {
    let (k, v) = kv.split_once('=').unwrap();
    let secs: f64 = v.trim_end_matches('s').parse().unwrap();
    format!("{k}={}ms", secs * 1000.0 / scale)
}

#[test]
fn whatif_predicts_the_504s_a_proposal_really_gives_within_ten_percent() {
    let dir = tempfile::tempdir().unwrap();
    let x = simulate(
        dir.path(),
        "x",
        &X.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
    );
    let hosted = without_model_server(&x.spans, &dir.path().join("x-hosted.jsonl"));
    let x504 = x.statuses.get(&504).copied().unwrap_or(0);
    let x503 = x.statuses.get(&503).copied().unwrap_or(0);
    assert!(
        x504 > 0 && x503 > 0,
        "X must show both failures to change: {:?}",
        x.statuses
    );
    let proposals: [(&str, Vec<String>); 3] = [
        (
            "raise the model timeout",
            vec![format!("llm.{MODEL}.timeout=120s")],
        ),
        (
            "align the gateway",
            vec!["gateway.edge.read_timeout=130s".to_string()],
        ),
        (
            "add a tool timeout",
            vec!["tool.search_api.timeout=20s".to_string()],
        ),
    ];
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    for (name, y) in &proposals {
        let y_real: Vec<String> = y.iter().map(|k| real(k, COUNT_SCALE)).collect();
        let predicted = whatif(&x, &x.spans, &y_real);
        let blind = whatif(&x, &hosted, &y_real);
        // The same scenario, under X changed by Y, for real.
        let mut set: Vec<String> = X.iter().map(|s| s.to_string()).collect();
        set.extend(y.iter().cloned());
        let tag: String = name.split(' ').map(|w| &w[..1]).collect();
        let y_run = simulate(dir.path(), &format!("y-{tag}"), &set);
        let actual_504 = y_run.statuses.get(&504).copied().unwrap_or(0) as f64;
        let actual_503 = y_run.statuses.get(&503).copied().unwrap_or(0) as f64;
        let p504 = predicted["after"]["gateway_timeout"].as_f64().unwrap();
        let p503 = predicted["after"]["fast_503"].as_f64().unwrap();
        let from_model = predicted["from_model"].as_u64().unwrap();
        let reproduced = predicted["today_reproduced"].as_u64().unwrap();
        let traces = predicted["traces"].as_u64().unwrap();
        let b504 = blind["after"]["gateway_timeout"].as_f64().unwrap();
        let (lo, hi) = (
            blind["after_504_range"][0].as_f64().unwrap(),
            blind["after_504_range"][1].as_f64().unwrap(),
        );
        let b_model = blind["from_model"].as_u64().unwrap();
        rows.push(format!(
            "| {name} | `{}` | {x504} | {p504:.1} | {b504:.1} ({lo:.0}–{hi:.0}) | {actual_504} | {p503:.1} | {actual_503} | {from_model} / {b_model} | {reproduced}/{traces} |",
            y.join(" ")
        ));
        let near = |p: f64, a: f64| (p - a).abs() <= (0.1 * a).max(2.0);
        let covered = (lo..=hi).contains(&actual_504);
        if !near(b504, actual_504) && !covered {
            problems.push(format!(
                "{name}, no model-server spans: predicted {b504:.1} 504s ({lo}–{hi}), {actual_504} happened"
            ));
        }
        if (p504 - actual_504).abs() > (0.1 * actual_504).max(2.0) {
            problems.push(format!(
                "{name}: predicted {p504:.1} 504s, {actual_504} happened"
            ));
        }
        if (p503 - actual_503).abs() > (0.1 * actual_503).max(2.0) {
            problems.push(format!(
                "{name}: predicted {p503:.1} fast 503s, {actual_503} happened"
            ));
        }
    }
    eprintln!(
        "| proposal | keys (nominal) | 504 under X | 504 predicted | 504 predicted, no model-server spans (draws 5–95 %) | 504 actual | 503 predicted | 503 actual | outcomes drawn (all spans / none) | today's outcome reproduced |\n|---|---|---|---|---|---|---|---|---|---|\n{}",
        rows.join("\n")
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Nearest-rank percentile.
fn pct(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

#[test]
fn whatif_predicts_where_a_longer_budget_moves_the_fast_503s() {
    // `tool_slow`: crm_report takes 70 s. On the aligned route (50 s budget,
    // a tool gets half of what remains) its timeout fires at ~26 s: a fast
    // 503; on the legacy route (no budget) the gateway cuts at 60 s. A
    // 90 s budget for the service: the share is learned from the spans.
    let dir = tempfile::tempdir().unwrap();
    let x = simulate_scenario(dir.path(), "tool_slow", "40", "tx", &[], SCALE);
    let p = whatif(&x, &x.spans, &[real("service.budget=90s", SCALE)]);
    let y = simulate_scenario(
        dir.path(),
        "tool_slow",
        "40",
        "ty",
        &["service.budget=90s".into()],
        SCALE,
    );
    let near = |p: f64, a: f64| (p - a).abs() <= (0.1 * a).max(2.0);
    for (what, key, status) in [("504", "gateway_timeout", 504), ("503", "fast_503", 503)] {
        let predicted = p["after"][key].as_f64().unwrap();
        let actual = y.statuses.get(&status).copied().unwrap_or(0) as f64;
        assert!(
            near(predicted, actual),
            "{what}: predicted {predicted}, {actual} happened"
        );
    }
    let predicted = p["latency_after"]["p50_ms"].as_f64().unwrap();
    let actual = pct(&y.times, 0.5);
    let before = pct(&x.times, 0.5);
    assert!(
        (predicted / actual - 1.0).abs() < 0.1,
        "P50 after: predicted {predicted:.0} ms, {actual:.0} ms happened (before: {before:.0} ms)"
    );
    assert!(
        actual > before * 1.3,
        "the 503s came later: {before:.0} → {actual:.0} ms"
    );
}
