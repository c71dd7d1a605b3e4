//! End to end with the real monitoring stack (Debian `prometheus` and
//! `prometheus-alertmanager`, both started here):
//!
//! 1. Two `overtime serve` collectors tail incidents A and C as the logs are
//!    written; a real Prometheus scrapes both every second with the shipped
//!    rules loaded. Every PromQL expression of every shipped Grafana panel
//!    must return data, and the rules' burn-rate page must fire.
//! 2. A collector with `[alert]` pointing at a real Alertmanager: incident
//!    A's 504 lines are written to the tailed log → `Overtime504Incident`
//!    is firing in Alertmanager's API with the headline and a report link
//!    that answers; the healthy platform's traffic follows → it is resolved.
//!    Prints the time from the first 504 line written to the alert listed.

use crate::support;

use overtime_test_support::monitoring::{Alertmanager, FAST, prom_api, prometheus, repo};
use overtime_test_support::net::{get, wait_for};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::{Serve, fixture};

/// One collector: empty log files tailed from the start, written later.
struct Collector {
    serve: Serve,
    /// (fixture file, the tailed file it is written to)
    files: Vec<(PathBuf, PathBuf)>,
}

fn collector(dir: &Path, name: &str, incident: &str, format: &str, extra: &str) -> Collector {
    let home = dir.join(name);
    std::fs::create_dir_all(&home).unwrap();
    let log = home.join("access.log");
    let spans = home.join("spans.jsonl");
    std::fs::write(&log, "").unwrap();
    std::fs::write(&spans, "").unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\ndata_dir = {data:?}\nfsync = false\n\
         [otlp]\nhttp_listen = \"\"\ngrpc_listen = \"\"\n[diagnose]\ngrace_ms = 1000\n{extra}\n\
         [[file]]\npath = {log:?}\nkind = \"nginx\"\nformat = {format:?}\nlayer = \"access\"\n\n\
         [[file]]\npath = {spans:?}\nkind = \"jsonl\"\n",
        data = home.join("data").display().to_string(),
        log = log.display().to_string(),
        spans = spans.display().to_string(),
    );
    let cfg = home.join("overtime.toml");
    std::fs::write(&cfg, config).unwrap();
    Collector {
        serve: Serve::start(&cfg),
        files: vec![
            (fixture(incident, "spans.jsonl"), spans),
            (fixture(incident, "access.log"), log),
        ],
    }
}

impl Collector {
    fn port(&self) -> u16 {
        self.serve.port
    }

    /// Appends `incident`'s files, RFC 3339 timestamps moved by `shift`, to
    /// the tailed ones in `chunks` line-aligned
    /// slices, `pause` apart (spans first in each slice, as services log
    /// before the gateway answers). Returns when the first access-log line
    /// with a 504 was written.
    fn write_incident(
        &self,
        incident: &str,
        shift: chrono::TimeDelta,
        chunks: usize,
        pause: Duration,
    ) -> Option<Instant> {
        let read = |f: &str| {
            shift_times(
                &std::fs::read_to_string(fixture(incident, f)).unwrap(),
                shift,
            )
            .0
        };
        let spans: Vec<String> = read("spans.jsonl")
            .lines()
            .map(|l| format!("{l}\n"))
            .collect();
        let log: Vec<String> = read("access.log")
            .lines()
            .map(|l| format!("{l}\n"))
            .collect();
        let append = |path: &Path, lines: &[String]| {
            let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
            f.write_all(lines.concat().as_bytes()).unwrap();
        };
        let mut first_504 = None;
        for i in 0..chunks {
            let part = |v: &[String]| v[v.len() * i / chunks..v.len() * (i + 1) / chunks].to_vec();
            append(&self.files[0].1, &part(&spans));
            let log_part = part(&log);
            append(&self.files[1].1, &log_part);
            if first_504.is_none() && log_part.iter().any(|l| l.contains("\" 504 ")) {
                first_504 = Some(Instant::now());
            }
            std::thread::sleep(pause);
        }
        first_504
    }

    fn incidents(&self) -> Vec<Value> {
        let (status, body) = get(self.port(), "/api/incidents").expect("incidents answer");
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        v["incidents"].as_array().cloned().unwrap_or_default()
    }
}

/// `YYYY-MM-DDTHH:MM:SS` at the start of `b`.
fn is_timestamp(b: &[u8]) -> bool {
    b.len() >= 19
        && b[..19].iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            _ => c.is_ascii_digit(),
        })
}

/// Every RFC 3339 timestamp of `text` (`Z` or `±HH:MM`, any fraction),
/// moved by `by`, written back in the same form; and the latest one seen.
fn shift_times(
    text: &str,
    by: chrono::TimeDelta,
) -> (String, Option<chrono::DateTime<chrono::FixedOffset>>) {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut i, mut copied) = (0, 0);
    let mut latest = None;
    while i < b.len() {
        if !is_timestamp(&b[i..]) {
            i += 1;
            continue;
        }
        let mut j = i + 19;
        let mut digits = 0;
        if b.get(j) == Some(&b'.') {
            j += 1;
            while b.get(j).is_some_and(u8::is_ascii_digit) {
                j += 1;
                digits += 1;
            }
        }
        let end = match b.get(j) {
            Some(b'Z') => j + 1,
            Some(b'+' | b'-') if j + 6 <= b.len() => j + 6,
            _ => {
                i = j;
                continue;
            }
        };
        let Ok(t) = chrono::DateTime::parse_from_rfc3339(&text[i..end]) else {
            i = end;
            continue;
        };
        latest = latest.max(Some(t));
        let t = t + by;
        out.push_str(&text[copied..i]);
        out.push_str(&t.format("%Y-%m-%dT%H:%M:%S").to_string());
        if digits > 0 {
            let frac = t.timestamp_subsec_nanos() / 10u32.pow(9 - digits as u32);
            out.push_str(&format!(".{frac:0digits$}"));
        }
        if b[j] == b'Z' {
            out.push('Z');
        } else {
            out.push_str(&t.format("%:z").to_string());
        }
        copied = end;
        i = end;
    }
    out.push_str(&text[copied..]);
    (out, latest)
}

/// How far to move `incident`'s RFC 3339 timestamps so that its last one
/// falls at `at` (the live SLO windows are wall-clock windows).
fn shift_to_end_at(incident: &str, at: chrono::DateTime<chrono::Utc>) -> chrono::TimeDelta {
    let text = std::fs::read_to_string(fixture(incident, "access.log")).unwrap()
        + &std::fs::read_to_string(fixture(incident, "spans.jsonl")).unwrap();
    let (_, latest) = shift_times(&text, chrono::TimeDelta::zero());
    at.signed_duration_since(latest.expect("RFC 3339 timestamps in the fixture"))
}

/// Every target of every shipped dashboard: (where, expr, instant?), with
/// Grafana's variables replaced for a short test run.
fn dashboard_queries() -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    let dir = repo().join("dashboards/overtime");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in files
        .iter()
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
    {
        let d: Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        for p in d["panels"].as_array().unwrap() {
            for t in p["targets"].as_array().into_iter().flatten() {
                // SQL panels (the PostgreSQL data source) are run as Grafana
                // expands them by the postgres test, not by Prometheus.
                if t["rawSql"].is_string() {
                    continue;
                }
                let expr = t["expr"].as_str().unwrap_or_else(|| {
                    panic!(
                        "{}: a target with neither expr nor rawSql: {t}",
                        f.display()
                    )
                });
                out.push((
                    format!(
                        "{} / {}",
                        f.file_name().unwrap().to_string_lossy(),
                        p["title"].as_str().unwrap()
                    ),
                    expr.replace("$__rate_interval", "1m")
                        .replace("$__range", "10m")
                        .replace("$__interval", "15s")
                        .replace("$model", ".*"),
                    t["instant"].as_bool() == Some(true),
                ));
            }
        }
    }
    assert!(out.len() > 40, "dashboards not found in {}", dir.display());
    out
}

/// At least one sample of a query result that is a finite number.
fn has_finite(result: &Value) -> bool {
    let finite = |v: &Value| {
        v[1].as_str()
            .and_then(|s| s.parse::<f64>().ok())
            .is_some_and(f64::is_finite)
    };
    result.as_array().into_iter().flatten().any(|series| {
        series.get("value").is_some_and(finite)
            || series["values"]
                .as_array()
                .into_iter()
                .flatten()
                .any(finite)
    })
}

fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn every_dashboard_query_returns_data_from_prometheus_scraping_two_collectors() {
    let tmp = tempfile::tempdir().unwrap();
    let c_format = std::fs::read_to_string(fixture("c_dns_retry", "log_format.txt")).unwrap();
    let a = collector(tmp.path(), "a", "a_prefill", "overtime", "");
    let c = collector(tmp.path(), "c", "c_dns_retry", &c_format, "");
    let prom = prometheus(tmp.path(), &[a.port(), c.port()], None, FAST);

    wait_for(30, "both collectors scraped", || {
        let up = prom_api(
            prom.port(),
            "/api/v1/query",
            &[("query", "sum(up{job=\"overtime\"})".into())],
        );
        up["result"][0]["value"][1] == "2"
    });
    // both written at once over ~16 s while Prometheus scrapes every
    // second, so every counter grows between scrapes, as in production. A
    // is played as if it just happened (timestamps moved to end now) so the
    // collector's live windows hold it; C as logged (epoch timestamps, long
    // past: counted, too old for the live windows).
    let start = now_s();
    let shift = shift_to_end_at("a_prefill", chrono::Utc::now());
    std::thread::scope(|s| {
        s.spawn(|| a.write_incident("a_prefill", shift, 16, Duration::from_secs(1)));
        s.spawn(|| {
            c.write_incident(
                "c_dns_retry",
                chrono::TimeDelta::zero(),
                16,
                Duration::from_secs(1),
            )
        });
    });
    wait_for(90, "both incidents diagnosed", || {
        !a.incidents().is_empty() && !c.incidents().is_empty()
    });
    std::thread::sleep(Duration::from_secs(5)); // a few more scrapes and rule evaluations

    let end = now_s();
    let mut empty = Vec::new();
    let queries = dashboard_queries();
    for (place, expr, instant) in &queries {
        let data = if *instant {
            prom_api(
                prom.port(),
                "/api/v1/query",
                &[("query", expr.clone()), ("time", format!("{end:.3}"))],
            )
        } else {
            prom_api(
                prom.port(),
                "/api/v1/query_range",
                &[
                    ("query", expr.clone()),
                    ("start", format!("{:.3}", start - 5.0)),
                    ("end", format!("{end:.3}")),
                    ("step", "1".into()),
                ],
            )
        };
        if !has_finite(&data["result"]) {
            empty.push(format!("{place}: {expr} → {}", data["result"]));
        }
    }
    assert!(
        empty.is_empty(),
        "{} of {} dashboard queries returned no data:\n{}\n/metrics of collector a:\n{}",
        empty.len(),
        queries.len(),
        empty.join("\n"),
        get(a.port(), "/metrics").map(|r| r.1).unwrap_or_default()
    );

    // the shipped rules on real data: ~9 % of requests timed out, an 18x
    // burn over every window, so the fast-burn page fires in Prometheus
    wait_for(
        30,
        "OvertimeTimeoutBudgetBurnFast firing in Prometheus",
        || {
            let (_, body) = get(prom.port(), "/api/v1/alerts").expect("prometheus answers");
            let alerts: Value = serde_json::from_str::<Value>(&body).unwrap()["data"].clone();
            alerts["alerts"].as_array().into_iter().flatten().any(|x| {
                x["labels"]["alertname"] == "OvertimeTimeoutBudgetBurnFast"
                    && x["state"] == "firing"
            })
        },
    );
    drop(prom);
}

/// Needs `overtime serve` to run an `overtime-alert` AlertSender from its
/// `[alerts]` config section: `fire_once` on each new incident, `resolve_once`
/// when it closes, `update` with the SLO alerts every evaluation.
#[test]
fn a_504_incident_fires_in_alertmanager_and_resolves_after_recovery() {
    let tmp = tempfile::tempdir().unwrap();
    let am = Alertmanager::start();
    let alert = format!(
        "[alerts]\nalertmanager_urls = [\"http://127.0.0.1:{}\"]\nresend_interval_ms = 1000\n\
         external_url = \"http://overtime.test\"\n",
        am.port()
    );
    let col = collector(tmp.path(), "a", "a_prefill", "overtime", &alert);
    let shift = shift_to_end_at("a_prefill", chrono::Utc::now());
    let written = col
        .write_incident("a_prefill", shift, 4, Duration::from_millis(250))
        .expect("incident A has 504 lines");

    let deadline = Instant::now() + Duration::from_secs(90);
    let page = loop {
        let pages = am.named("Overtime504Incident");
        if let Some(p) = pages
            .iter()
            .find(|p| p["labels"]["kind"] == "llm_prefill_slow")
        {
            break p.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no llm_prefill_slow incident page in Alertmanager after 90 s; it lists {pages:#?}; collector incidents {:#?}",
            col.incidents()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let latency = written.elapsed();
    eprintln!(
        "BENCH 504 line written → Overtime504Incident in Alertmanager: {:.2} s",
        latency.as_secs_f64()
    );
    assert_eq!(page["labels"]["component"], "deepseek-v4-pro");
    assert_eq!(page["labels"]["severity"], "page");
    assert_eq!(page["status"]["state"], "active");
    let summary = page["annotations"]["summary"].as_str().unwrap();
    assert!(summary.contains("llm_prefill_slow"), "{summary}");
    let report = page["annotations"]["report_url"].as_str().unwrap();
    let path = report
        .strip_prefix("http://overtime.test")
        .unwrap_or_else(|| panic!("{report}"));
    let (status, body) = get(col.port(), path).expect("the report link answers");
    assert_eq!(status, 200, "{report}: {body}");
    assert!(body.contains("llm_prefill_slow"), "{body}");
    // recovery: the platform after the fix, its 40 minutes played right
    // after — the incident goes quiet and closes, the page resolves
    let after = chrono::Utc::now() + chrono::TimeDelta::minutes(45);
    col.write_incident(
        "healthy",
        shift_to_end_at("healthy", after),
        4,
        Duration::from_millis(250),
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    while am
        .named("Overtime504Incident")
        .iter()
        .any(|p| p["labels"]["kind"] == "llm_prefill_slow")
    {
        let statuses: Vec<String> = col
            .incidents()
            .iter()
            .map(|i| format!("{} {} {}", i["id"], i["fingerprint"], i["status"]))
            .collect();
        assert!(
            Instant::now() < deadline,
            "the incident page is still firing in Alertmanager 90 s after recovery; \
             the collector's incidents: {statuses:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let metrics = get(col.port(), "/metrics").map(|r| r.1).unwrap_or_default();
    assert!(
        !metrics.contains("overtime_alerts_firing{alertname=\"Overtime504Incident\"} 1"),
        "{metrics}"
    );
    // The delivery counters (docs/metrics.md, Delivery): the page and its
    // resolve were sent, nothing failed; Jira is off, so nothing queued.
    let sample = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} not in /metrics:\n{metrics}"))
    };
    let target = format!("target=\"alertmanager:127.0.0.1:{}\"", am.port());
    assert!(
        sample(&format!(
            "overtime_alert_notifications_total{{{target},result=\"sent\"}}"
        )) >= 2.0,
        "{metrics}"
    );
    assert_eq!(
        sample(&format!(
            "overtime_alert_notifications_total{{{target},result=\"failed\"}}"
        )),
        0.0
    );
    assert_eq!(sample("overtime_jira_outbox_queued"), 0.0);
    assert_eq!(
        sample("overtime_jira_events_total{result=\"created\"}"),
        0.0
    );
}
