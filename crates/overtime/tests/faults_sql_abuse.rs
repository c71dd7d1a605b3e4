//! `POST /api/sql` under abuse, against a real `overtime serve` holding
//! a few thousand spans: huge cross joins, deep recursion (recursive CTEs,
//! deeply nested expressions and subqueries), very long strings and
//! literals, memory bombs in scalar functions, many statements, DDL, DML
//! and file access. Each is answered with a JSON error naming a reason
//! (or a cut result) within the configured time limit plus slack; the
//! server keeps answering `/healthz` and a plain query meanwhile, never
//! crashes, and its RSS stays within a stated bound above its idle RSS.

use crate::support;

use overtime_test_support::net::{get, http, wait_for};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use support::*;

const TIMEOUT_MS: u64 = 3_000;
const MAX_ROWS: u64 = 1_000;
const MEMORY_BYTES: u64 = 64 * 1024 * 1024;
/// Answers may come this long after the time limit (a loaded 2-core box).
const SLACK: Duration = Duration::from_secs(30);
/// Peak RSS may pass the idle RSS by at most this much: the SQL memory
/// pool, plus room for the unaccounted buffers of one query per worker
/// (JSON of `max_rows` rows, operator scratch) and the allocator.
const RSS_ALLOWANCE_KIB: u64 = 4 * MEMORY_BYTES / 1024 + 256 * 1024;

const SPANS: u64 = 3_000;

/// (name, SQL, what must come back). `Err(reasons)`: a JSON error whose
/// `reason` is one of them; `CutOrTimeout`: 200 with at most `MAX_ROWS`
/// rows, or — when this machine is too slow to finish it within the limit —
/// a clean `sql_timeout` (never another error: the query is legal);
/// `Either`: a cut result or any `sql_*` error (which one depends on the
/// plan DataFusion picks). No query's outcome depends on the speed of the
/// machine except through `sql_timeout`, which is the bound this test proves.
enum Want {
    Err(&'static [&'static str]),
    CutOrTimeout,
    Either,
}

fn abuses() -> Vec<(&'static str, String, Want)> {
    use Want::*;
    let refused: &[&str] = &["sql_refused"];
    let bounded: &[&str] = &["sql_timeout", "sql_failed", "sql_refused"];
    let nested_parens = format!("SELECT {}1{}", "(".repeat(5_000), ")".repeat(5_000));
    let long_sum = format!("SELECT 1{}", "+1".repeat(32_000));
    let long_and = format!("SELECT true{}", " AND true".repeat(6_000));
    let deep_case = format!(
        "SELECT {} 1 {}",
        "CASE WHEN true THEN ".repeat(2_000),
        " END".repeat(2_000)
    );
    let nested_sub = format!(
        "SELECT * FROM {} spans {}",
        "(SELECT * FROM ".repeat(2_000),
        ") t".repeat(2_000)
    );
    let in_list = format!(
        "SELECT count(*) AS n FROM spans WHERE name IN ({})",
        (0..8_000)
            .map(|i| format!("'n{i}'"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let many = "SELECT 1;".repeat(5_000);
    vec![
        ("cross join x3, count", "SELECT count(*) AS n FROM spans a, spans b, spans c".into(), Err(bounded)),
        ("cross join x3, sorted", "SELECT a.span_id, b.name, c.service FROM spans a, spans b, spans c ORDER BY 1, 2, 3".into(), Err(bounded)),
        ("cross join x2, all rows", "SELECT a.*, b.* FROM spans a CROSS JOIN spans b".into(), Either),
        ("self-join group by", "SELECT a.trace_id, count(*) FROM spans a JOIN spans b ON a.service = b.service GROUP BY a.trace_id, b.span_id ORDER BY 2 DESC".into(), Err(bounded)),
        ("infinite recursive CTE", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) AS n FROM r".into(), Err(bounded)),
        ("exploding recursive CTE", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT r.n + 1 FROM r, (VALUES (1), (2), (3)) v(x)) SELECT count(*) AS n FROM r".into(), Err(bounded)),
        ("recursive CTE sorted", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r ORDER BY n DESC".into(), Err(bounded)),
        ("5000 nested parentheses", nested_parens, Err(bounded)),
        ("32000-term sum (64 KB)", long_sum, Err(refused)),
        ("6000-term AND", long_and, Err(refused)),
        ("1900-term sum", format!("SELECT 1{}", "+1".repeat(1_900)), CutOrTimeout),
        ("2000 nested CASE", deep_case, Err(bounded)),
        ("2000 nested subqueries", nested_sub, Err(bounded)),
        ("8000-item IN list", in_list, CutOrTimeout),
        ("1 GB repeat()", "SELECT repeat('x', 1000000000) AS s".into(), Err(bounded)),
        ("repeat() per row", "SELECT repeat(name, 100000000) AS s FROM spans".into(), Err(bounded)),
        ("nested repeat()", "SELECT length(repeat(repeat('ab', 50000), 20000)) AS n".into(), Err(bounded)),
        ("lpad 1 GB", "SELECT lpad('x', 1000000000, 'y') AS s".into(), Err(bounded)),
        ("range() 1e9", "SELECT cardinality(range(1, 1000000000)) AS n".into(), Err(bounded)),
        ("array_repeat 1e9", "SELECT cardinality(array_repeat(1, 1000000000)) AS n".into(), Err(bounded)),
        ("generate_series 1e12", "SELECT count(*) AS n FROM generate_series(1, 1000000000000)".into(), Err(bounded)),
        ("string_agg of a cross join", "SELECT length(string_agg(a.name || b.name, ',')) AS n FROM spans a, spans b".into(), Err(bounded)),
        ("100 KiB literal", format!("SELECT '{}' AS s", "x".repeat(100_000)), Err(refused)),
        ("60 KiB literal", format!("SELECT length('{}') AS n", "y".repeat(60_000)), CutOrTimeout),
        ("5000 statements", many, Err(refused)),
        ("create table", "CREATE TABLE x AS SELECT * FROM spans".into(), Err(refused)),
        ("create external table", "CREATE EXTERNAL TABLE pw (l VARCHAR) STORED AS CSV LOCATION '/etc/passwd'".into(), Err(refused)),
        ("copy to a file", "COPY (SELECT * FROM spans) TO '/tmp/overtime-faults-sql-copy.csv'".into(), Err(refused)),
        ("insert", "INSERT INTO spans SELECT * FROM spans".into(), Err(refused)),
        ("delete", "DELETE FROM spans".into(), Err(refused)),
        ("drop", "DROP TABLE spans".into(), Err(refused)),
        ("set", "SET datafusion.execution.batch_size = 1".into(), Err(refused)),
        ("url table", "SELECT * FROM '/etc/passwd'".into(), Err(bounded)),
        ("explain analyze cross join", "EXPLAIN ANALYZE SELECT count(*) FROM spans a, spans b, spans c".into(), Err(bounded)),
    ]
}

/// Posts spans until the store holds `SPANS`.
fn load(otlp: u16, api: u16) {
    for n in 0..SPANS / 2 {
        let (_, body) = otlp_failing_trace(0x5a1, n);
        let (st, b) = http(
            otlp,
            "POST",
            "/v1/traces",
            "application/json",
            body.as_bytes(),
        )
        .expect("OTLP answers");
        assert_eq!(st, 200, "{b}");
    }
    wait_for(60, "the spans in SQL", || {
        sql_count(api, None, "SELECT count(*) AS n FROM spans") == SPANS
    });
}

#[test]
fn sql_abuse_is_bounded_and_the_server_stays_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("overtime.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[store]\ndata_dir = {data:?}\n\
             [otlp]\nhttp_listen = \"127.0.0.1:0\"\ngrpc_listen = \"\"\n\
             [sql]\ntimeout_ms = {TIMEOUT_MS}\nmax_rows = {MAX_ROWS}\nmemory_bytes = {MEMORY_BYTES}\n",
            data = dir.path().join("data").display().to_string()
        ),
    )
    .unwrap();
    let mut serve = Serve::start(&cfg);
    let (api, otlp) = (serve.port, serve.otlp());
    load(otlp, api);
    // Idle RSS after loading, with one plain query run.
    sql_count(api, None, "SELECT count(*) AS n FROM spans");
    let idle = serve.rss_kib();

    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(idle));
    let sampler = {
        let (stop, peak, pid) = (stop.clone(), peak.clone(), serve.pid());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    // Meanwhile: health and a plain query keep answering.
    let health = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut probes, mut slowest) = (0u32, Duration::ZERO);
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let h = get(api, "/healthz");
                assert!(matches!(h, Some((200, _))), "/healthz during abuse: {h:?}");
                assert_eq!(
                    sql_count(api, None, "SELECT count(*) AS n FROM spans"),
                    SPANS,
                    "a plain query during abuse"
                );
                slowest = slowest.max(t.elapsed());
                probes += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            (probes, slowest)
        })
    };

    let mut report = Vec::new();
    let mut overall = idle;
    for (name, sql, want) in abuses() {
        overall = overall.max(peak.swap(serve.rss_kib(), Ordering::Relaxed));
        let t = Instant::now();
        let a = sql_answer(api, None, &sql)
            .unwrap_or_else(|| panic!("{name}: no answer (the server died?)"));
        let took = t.elapsed();
        assert!(
            serve.alive(),
            "{name}: overtime serve died (peak RSS {} MiB)",
            peak.load(Ordering::Relaxed) / 1024
        );
        assert!(
            took <= Duration::from_millis(TIMEOUT_MS) + SLACK,
            "{name}: answered after {took:?}"
        );
        let j: serde_json::Value = serde_json::from_slice(&a.body)
            .unwrap_or_else(|e| panic!("{name}: {} not JSON ({e}): {:.300}", a.status, a.text()));
        match want {
            Want::Err(reasons) => {
                let reason = j["reason"].as_str().unwrap_or_default();
                assert!(
                    (400..500).contains(&a.status) && reasons.contains(&reason),
                    "{name}: want an error in {reasons:?}, got {} {:.400}",
                    a.status,
                    a.text()
                );
                assert!(
                    !j["error"].as_str().unwrap_or_default().is_empty(),
                    "{name}: the error says nothing: {}",
                    a.text()
                );
            }
            Want::CutOrTimeout if a.status == 200 => {
                assert!(j["row_count"].as_u64().unwrap() <= MAX_ROWS, "{name}");
            }
            Want::CutOrTimeout => {
                assert_eq!(
                    (a.status, j["reason"].as_str().unwrap_or_default()),
                    (408, "sql_timeout"),
                    "{name}: a legal query may only time out: {:.400}",
                    a.text()
                );
            }
            Want::Either if a.status == 200 => {
                assert!(j["row_count"].as_u64().unwrap() <= MAX_ROWS, "{name}");
            }
            Want::Either => {
                let reason = j["reason"].as_str().unwrap_or_default();
                assert!(
                    (400..500).contains(&a.status) && reason.starts_with("sql_"),
                    "{name}: {} {:.400}",
                    a.status,
                    a.text()
                );
            }
        }
        report.push(format!(
            "{name}: {} {} in {:.1} s, peak RSS {} MiB",
            a.status,
            j["reason"].as_str().unwrap_or("ok"),
            took.as_secs_f64(),
            peak.load(Ordering::Relaxed) / 1024
        ));
    }
    // Several at once: the same limits hold, health answers.
    let burst: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                sql_answer(
                    api,
                    None,
                    "SELECT a.span_id, b.name FROM spans a, spans b, spans c ORDER BY 1, 2",
                )
                .map(|a| a.status)
            })
        })
        .collect();
    for b in burst {
        let st = b.join().unwrap();
        assert!(
            matches!(st, Some(400 | 408)),
            "a concurrent cross join: {st:?}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let (probes, slowest) = health.join().unwrap();
    let peak = peak.load(Ordering::Relaxed).max(overall);
    assert!(!std::path::Path::new("/tmp/overtime-faults-sql-copy.csv").exists());
    assert!(serve.alive(), "overtime serve died");
    assert_eq!(
        sql_count(api, None, "SELECT count(*) AS n FROM spans"),
        SPANS
    );
    eprintln!(
        "faults_sql_abuse: idle RSS {} MiB, peak {} MiB (allowance +{} MiB); {probes} health probes, slowest {:.1} s\n  {}",
        idle / 1024,
        peak / 1024,
        RSS_ALLOWANCE_KIB / 1024,
        slowest.as_secs_f64(),
        report.join("\n  ")
    );
    assert!(
        peak <= idle + RSS_ALLOWANCE_KIB,
        "peak RSS {} MiB > idle {} MiB + {} MiB",
        peak / 1024,
        idle / 1024,
        RSS_ALLOWANCE_KIB / 1024
    );
    drop(serve);
}
