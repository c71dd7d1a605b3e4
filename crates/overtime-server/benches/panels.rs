//! The shipped Grafana panels' SQL over a day of verdicts, as `POST
//! /api/sql` (and the PostgreSQL wire protocol) runs it: a new session
//! with every table registered (`sql::session_with_peers`), then the
//! query, each panel's macros expanded as Grafana's PostgreSQL data source
//! expands them (`$__timeGroupAlias(started_at, '1m')` →
//! `floor(extract(epoch from started_at)/60)*60 AS "time"`,
//! `$__timeFilter(started_at)` → `started_at BETWEEN '…' AND '…'`).
//!
//! ```text
//! cargo bench --profile release -p overtime-server --bench panels
//! OVERTIME_BENCH_VERDICTS=200000 cargo bench -p overtime-server --bench panels
//! ```
//! A day of verdicts: one failed request every second (86 400 verdicts,
//! each with a 12-span timeline), the store empty. Prints the median and
//! the slowest of 5 runs per panel, the session and the table's columns
//! built from the verdicts included.

use overtime_model::Verdict;
use overtime_server::{SqlConfig, sql};
use overtime_store::{Store, StoreConfig};
use std::time::{Duration, Instant};

const DAY_US: i64 = 86_400_000_000;
const T0_US: i64 = 1_764_460_800_000_000; // 2025-11-30T00:00:00Z
const RUNS: usize = 5;

const TIME_GROUP: &str = "floor(extract(epoch from started_at)/60)*60 AS \"time\"";

fn panels() -> Vec<(&'static str, String)> {
    let filter = "started_at BETWEEN '2025-11-30T00:00:00Z' AND '2025-12-01T00:00:00Z'";
    vec![
        (
            "504s per minute by root cause",
            format!(
                "SELECT {TIME_GROUP}, kind AS metric, count(*) AS value FROM verdicts \
                 WHERE {filter} AND outcome = 'gateway_timeout' GROUP BY 1, 2 ORDER BY 1, 2"
            ),
        ),
        (
            "504s per minute by component",
            format!(
                "SELECT {TIME_GROUP}, component AS metric, count(*) AS value FROM verdicts \
                 WHERE {filter} AND outcome = 'gateway_timeout' GROUP BY 1, 2 ORDER BY 1, 2"
            ),
        ),
        (
            "worst traces",
            format!(
                "SELECT started_at AS \"time\", trace_id, outcome, kind, component, share, \
                 elapsed_ms, budget_ms, gateway_status, summary FROM verdicts \
                 WHERE {filter} AND outcome <> 'ok' ORDER BY elapsed_ms DESC, trace_id LIMIT 50"
            ),
        ),
    ]
}

/// Verdict `i` of a day: one a second, a 12-span timeline, three causes.
fn verdict(template: &serde_json::Value, i: i64, n: i64) -> Verdict {
    let mut v = template.clone();
    let at = T0_US + i * (DAY_US / n);
    let at = chrono::DateTime::from_timestamp_micros(at).expect("time");
    v["trace_id"] = format!("{:032x}", (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).into();
    v["started_at"] = at
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        .into();
    v["outcome"] = if i % 10 == 0 {
        "error"
    } else {
        "gateway_timeout"
    }
    .into();
    let (kind, comp) = [
        ("tool_no_timeout", "weather_api"),
        ("llm_slow", "deepseek-v4-pro"),
        ("upstream_connect_slow", "agent"),
    ][i as usize % 3];
    v["root_cause"]["kind"] = kind.into();
    v["root_cause"]["component"] = comp.into();
    v["budget"]["consumed_ms"] = (60_000 + i % 977).into();
    serde_json::from_value(v).expect("a verdict")
}

fn template() -> serde_json::Value {
    let span = |k: usize| {
        serde_json::json!({"span_id": format!("{k:016x}"), "parent_span_id": "0000000000000000",
            "name": "execute_tool weather", "service": "tool-gateway", "stage": "tool",
            "component": "weather_api", "start_offset_ms": 8012 + k as u64, "duration_ms": 4500,
            "critical_ms": 4400, "timeout_ms": null, "remaining_budget_ms": 51988, "attempt": 0,
            "status": "ok", "phases": {}})
    };
    serde_json::json!({
        "trace_id": "", "request_id": "req-1", "started_at": "",
        "outcome": "gateway_timeout",
        "gateway": {"source": "edge", "status": 504, "request_time_ms": 60001,
            "upstream_connect_ms": 1, "upstream_header_ms": null,
            "upstream_response_ms": 60001, "upstream_status": "504",
            "upstream_tries": 1, "timeout_ms": 60000},
        "budget": {"total_ms": 60000, "source": "gateway", "consumed_ms": 60001},
        "timeline": (0..12).map(span).collect::<Vec<_>>(),
        "root_cause": {"kind": "", "component": "", "share": 0.73,
            "summary": "the weather tool held the request for 44 s with no timeout of its own",
            "evidence": ["execute_tool weather: 45.0 s of the 60.0 s budget"]},
        "contributing": [{"kind": "llm_slow", "component": "deepseek-v4-pro", "share": 0.12}],
        "findings": [{"kind": "no_timeout", "summary": "weather_api has no timeout"}]
    })
}

fn main() {
    let n: i64 = std::env::var("OVERTIME_BENCH_VERDICTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(86_400);
    let t = template();
    let verdicts: std::sync::Arc<[(u32, Verdict)]> =
        (0..n).map(|i| (1, verdict(&t, i, n))).collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(StoreConfig {
        data_dir: dir.path().into(),
        flush_interval_ms: 0,
        ..Default::default()
    })
    .expect("store");
    let limits = SqlConfig::default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("{n} verdicts over a day; {RUNS} runs per panel, a new session each");
    println!();
    println!("| panel | rows | median ms | slowest ms |");
    println!("|---|---:|---:|---:|");
    for (name, q) in panels() {
        let mut times: Vec<Duration> = Vec::new();
        let mut rows = 0;
        for _ in 0..RUNS {
            let t = Instant::now();
            let r = rt.block_on(async {
                // What `POST /api/sql` does, but for where the rows come
                // from: there the table reads the live diagnoser's verdicts
                // under its lock when scanned (no copy), here a slice.
                let rows = sql::VerdictRows::Copied(verdicts.clone());
                let ctx = sql::session_over(&store, rows, &[], &limits, None)?;
                sql::run(&ctx, &q, &limits).await
            });
            times.push(t.elapsed());
            rows = r.unwrap_or_else(|e| panic!("{name}: {e}")).rows;
        }
        times.sort();
        println!(
            "| {name} | {rows} | {:.0} | {:.0} |",
            times[RUNS / 2].as_secs_f64() * 1000.0,
            times[RUNS - 1].as_secs_f64() * 1000.0
        );
    }
}
