//! Overload at the service level: `overtime serve` with a small memtable
//! budget (4 MiB), and 64 exporters that post OTLP as fast as they can and
//! ignore `Retry-After` (they post again at once): at least 10× what the
//! collector accepts is offered (asserted; measured here 30–34×). The
//! collector must:
//! - push back with 429 and a `Retry-After` header (never a 5xx, never a
//!   hang), and count it (`overtime_backpressure_total` in /metrics);
//!   refusals are cheap (decided before the body is decoded), so the
//!   collector keeps accepting while it refuses;
//! - keep its RSS within the bound its memory settings give (below);
//! - lose no acknowledged span: after the storm every request answered
//!   200 is in `spans` with all its spans, once, and nothing refused is.
//!
//! The store- and receiver-level versions live in overtime-store's
//! `budget.rs`, overtime-ingest's `otlp_http.rs` and the collector bench;
//! this one runs the whole binary (live diagnosis, metrics, API) too.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::*;

const BUDGET: u64 = 4 * 1024 * 1024;
const SENDERS: u64 = 64;
/// The live diagnosis' bound (`diagnose.max_live_records`).
const LIVE_RECORDS: u64 = 50_000;
const SPANS_PER_REQUEST: u64 = 400;
const STORM: Duration = Duration::from_secs(20);
/// RSS bound above idle, from the memory settings: the memtable budget,
/// 2.5 KiB per live record (measured ~2 KiB for these 400-span traces:
/// 156 MiB peak with 20 k records, 215 MiB with 50 k), and 128 MiB for
/// the rest — requests being decoded (at most `max_concurrent_decodes`,
/// 4 here), bodies read and waiting, Parquet writer buffers, allocator
/// arenas (measured ~92 MiB). Before early refusal and decode permits the
/// same storm took 563 MiB with 20 senders.
const RSS_BOUND_EXTRA_KIB: u64 = BUDGET / 1024 + LIVE_RECORDS * 5 / 2 + 128 * 1024;
/// Offered load at least this many times what is accepted.
const MIN_OVERLOAD: f64 = 10.0;

/// One OTLP JSON request: trace `id`, `SPANS_PER_REQUEST` spans under one root.
fn request_body(id: &str) -> String {
    let end = now_ns();
    let start = end - 1_000_000_000;
    let spans: Vec<serde_json::Value> = (0..SPANS_PER_REQUEST)
        .map(|i| {
            let mut s = serde_json::json!({
                "traceId": id, "spanId": format!("{:016x}", i + 1), "name": format!("step {i}"),
                "kind": if i == 0 { 2 } else { 3 },
                "startTimeUnixNano": (start + i as u128 * 1000).to_string(),
                "endTimeUnixNano": (end - i as u128 * 1000).to_string(),
                "attributes": [{"key": "gen_ai.tool.name", "value": {"stringValue": "search"}}],
                "status": {"code": 1}
            });
            if i > 0 {
                s["parentSpanId"] = "0000000000000001".into();
            }
            s
        })
        .collect();
    serde_json::json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "agent-api"}}]},
        "scopeSpans": [{"spans": spans}]
    }]})
    .to_string()
}

#[derive(Default)]
struct Tally {
    acked: Mutex<Vec<String>>,
    throttled: AtomicU64,
    other: Mutex<BTreeMap<u16, u64>>,
    no_retry_after: AtomicU64,
    sent: AtomicU64,
}

#[test]
fn overload_gets_429_with_retry_after_bounded_rss_and_loses_no_ack() {
    let dir = tempfile::tempdir().unwrap();
    let (api, otlp) = (free_port(), free_port());
    let cfg = dir.path().join("overtime.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:{api}\"\n\
             [store]\ndata_dir = {data:?}\nmemtable_bytes = {BUDGET}\nflush_interval_ms = 60000\n\
             [otlp]\nhttp_listen = \"127.0.0.1:{otlp}\"\ngrpc_listen = \"\"\n\
             [diagnose]\ngrace_ms = 500\nkeep_ms = 2000\nmax_traces = 10000\nmax_live_records = {LIVE_RECORDS}\n\
             [sql]\nmax_rows = 1000000\ntimeout_ms = 60000\n",
            data = dir.path().join("data").display().to_string()
        ),
    )
    .unwrap();
    let mut serve = Serve::start(&cfg, api);
    let idle = serve.rss_kib();

    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(idle));
    let sampler = {
        let (stop, peak, pid) = (stop.clone(), peak.clone(), serve.pid());
        std::thread::spawn(move || {
            while !stop.load(Relaxed) {
                peak.fetch_max(rss_kib(pid), Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let senders: Vec<_> = (0..SENDERS)
        .map(|s| {
            let (tally, stop) = (tally.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                // One body per sender, re-sent as is after a 429 (what an
                // exporter's retry does), a new one after a 200.
                let mut id = format!(
                    "{:032x}",
                    (0x0f1u128 << 96) + ((s as u128) << 32) + n as u128
                );
                let mut body = request_body(&id);
                while !stop.load(Relaxed) {
                    let a = request(
                        otlp,
                        "POST",
                        "/v1/traces",
                        &[("Content-Type", "application/json")],
                        body.as_bytes(),
                    );
                    tally.sent.fetch_add(1, Relaxed);
                    match a {
                        Some(a) if a.status == 200 => {
                            tally.acked.lock().unwrap().push(id.clone());
                            n += 1;
                            id = format!(
                                "{:032x}",
                                (0x0f1u128 << 96) + ((s as u128) << 32) + n as u128
                            );
                            body = request_body(&id);
                        }
                        Some(a) if a.status == 429 => {
                            tally.throttled.fetch_add(1, Relaxed);
                            let ok = a
                                .header("retry-after")
                                .and_then(|v| v.parse::<u64>().ok())
                                .is_some_and(|s| s >= 1);
                            if !ok {
                                tally.no_retry_after.fetch_add(1, Relaxed);
                            }
                        }
                        Some(a) => *tally.other.lock().unwrap().entry(a.status).or_default() += 1,
                        None => *tally.other.lock().unwrap().entry(0).or_default() += 1,
                    }
                }
            })
        })
        .collect();
    let started = Instant::now();
    // The API keeps answering under the storm.
    while started.elapsed() < STORM {
        std::thread::sleep(Duration::from_secs(1));
        assert!(serve.alive(), "overtime serve died under overload");
        let h = get(api, "/healthz");
        assert!(
            matches!(h, Some((200, _))),
            "/healthz under overload: {h:?}"
        );
    }
    stop.store(true, Relaxed);
    for s in senders {
        s.join().unwrap();
    }
    let storm = started.elapsed();
    stop.store(false, Relaxed);
    // Keep sampling while the backlog drains.
    let acked = tally.acked.lock().unwrap().clone();
    let want_spans = acked.len() as u64 * SPANS_PER_REQUEST;
    wait_for(120, "every acknowledged span queryable", || {
        sql_count(api, None, "SELECT count(*) AS n FROM spans") >= want_spans
    });
    stop.store(true, Relaxed);
    sampler.join().unwrap();

    let other = tally.other.lock().unwrap().clone();
    assert!(other.is_empty(), "answers other than 200/429: {other:?}");
    let throttled = tally.throttled.load(Relaxed);
    assert!(throttled > 0, "no 429 under a 10x overload");
    assert_eq!(
        tally.no_retry_after.load(Relaxed),
        0,
        "429s without Retry-After"
    );

    // Every acknowledged request is there, whole, once; nothing else is.
    let rows = sql_rows(
        api,
        None,
        "SELECT trace_id, count(*) AS n, count(DISTINCT span_id) AS d FROM spans GROUP BY trace_id",
    );
    let stored: BTreeMap<String, (u64, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["trace_id"].as_str().unwrap().to_string(),
                (r["n"].as_u64().unwrap(), r["d"].as_u64().unwrap()),
            )
        })
        .collect();
    let lost: Vec<_> = acked.iter().filter(|t| !stored.contains_key(*t)).collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged requests lost: {lost:.5?}",
        lost.len()
    );
    for t in &acked {
        assert_eq!(
            stored[t],
            (SPANS_PER_REQUEST, SPANS_PER_REQUEST),
            "trace {t}: spans stored (rows, distinct)"
        );
    }
    assert_eq!(
        stored.len(),
        acked.len(),
        "traces stored that were never acknowledged"
    );
    let metrics = get(api, "/metrics").unwrap().1;
    let bp: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("overtime_backpressure_total") && l.contains("otlp_http"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(bp >= 1.0, "backpressure not in /metrics:\n{metrics}");

    let peak = peak.load(Relaxed);
    let sent = tally.sent.load(Relaxed);
    let overload = sent as f64 / acked.len().max(1) as f64;
    eprintln!(
        "faults_overload: {SENDERS} senders x {SPANS_PER_REQUEST} spans/request for {:.0} s: \
         {sent} requests ({:.0} spans/s offered, {overload:.1}x), {} acknowledged ({:.0} spans/s), {throttled} x 429; \
         budget {} MiB, RSS idle {} MiB, peak {} MiB (bound {} MiB); {} spans checked, 0 lost",
        storm.as_secs_f64(),
        (sent * SPANS_PER_REQUEST) as f64 / storm.as_secs_f64(),
        acked.len(),
        want_spans as f64 / storm.as_secs_f64(),
        BUDGET >> 20,
        idle / 1024,
        peak / 1024,
        (idle + RSS_BOUND_EXTRA_KIB) / 1024,
        want_spans
    );
    assert!(
        overload >= MIN_OVERLOAD,
        "offered only {overload:.1}x what was accepted (want >= {MIN_OVERLOAD}x): not an overload"
    );
    assert!(!acked.is_empty(), "nothing accepted under overload");
    assert!(
        peak <= idle + RSS_BOUND_EXTRA_KIB,
        "peak RSS {} MiB > idle {} MiB + {} MiB",
        peak / 1024,
        idle / 1024,
        RSS_BOUND_EXTRA_KIB / 1024
    );
    drop(serve);
}
