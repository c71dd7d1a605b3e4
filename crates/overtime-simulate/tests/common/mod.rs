//! Runs a scenario into a temp dir and reads back what it wrote with
//! overtime's own parsers: the access log with the built-in `overtime`
//! format, the spans file as OTLP JSON lines.

#![allow(dead_code)]

use overtime_model::{GatewayRecord, SpanRecord, gateway_records};
use overtime_parse::nginx::{GatewayParser, LogFormat};
use overtime_parse::spans::{SpanFormat, parse_span_bytes};
use overtime_simulate::{SimulateArgs, Summary, simulate};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

/// One simulation at a time per test binary: the scenarios are timed, and
/// two at once on a 2-core machine would blur each other's ratios.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct Run {
    pub dir: tempfile::TempDir,
    pub summary: Summary,
    pub truth: Vec<Value>,
    pub gateway: Vec<GatewayRecord>,
    pub spans: Vec<SpanRecord>,
}

impl Run {
    pub fn path(&self, f: &str) -> PathBuf {
        self.dir.path().join(f)
    }

    /// The gateway line of a request id.
    pub fn line(&self, rid: &str) -> &GatewayRecord {
        self.gateway
            .iter()
            .find(|g| g.request_id.as_deref() == Some(rid))
            .unwrap_or_else(|| panic!("no gateway line for request {rid}"))
    }

    /// Spans of a trace.
    pub fn trace(&self, tid: &str) -> Vec<&SpanRecord> {
        self.spans.iter().filter(|s| s.trace_id == tid).collect()
    }

    /// Truth rows that failed as the client saw it.
    pub fn failed(&self) -> Vec<&Value> {
        self.truth.iter().filter(|t| t["outcome"] != "ok").collect()
    }

    /// Trace ids of the failed requests that were sampled.
    pub fn failed_traces(&self) -> Vec<String> {
        self.failed()
            .iter()
            .filter(|t| t["traceparent"] != "unsampled")
            .filter_map(|t| t["trace_id"].as_str().map(str::to_string))
            .collect()
    }

    pub fn outcomes(&self) -> HashMap<String, usize> {
        let mut m = HashMap::new();
        for t in &self.truth {
            *m.entry(t["outcome"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        m
    }
}

/// Runs `scenario` (`--no-nginx --no-otlp` unless `extra` says otherwise)
/// and parses its outputs; panics on any rejected line or span.
pub fn run(scenario: &str, scale: f64, requests: u64, extra: &[&str]) -> Run {
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let mut flags: Vec<String> = [
        "--scenario",
        scenario,
        "--duration",
        "0",
        "--rate",
        "40",
        "--seed",
        "7",
        "--spans-out",
        &p("spans.jsonl"),
        "--access-log",
        &p("access.log"),
        "--truth",
        &p("truth.jsonl"),
        "--quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    flags.extend([
        "--time-scale".into(),
        scale.to_string(),
        "--requests".into(),
        requests.to_string(),
    ]);
    if !extra.contains(&"--nginx-please") {
        flags.push("--no-nginx".into());
    }
    if !extra.iter().any(|f| f.starts_with("--otlp-endpoint")) {
        flags.push("--no-otlp".into());
    }
    flags.extend(
        extra
            .iter()
            .filter(|f| **f != "--nginx-please")
            .map(|s| s.to_string()),
    );
    let args = SimulateArgs::from_flags(&flags).unwrap();
    let summary = simulate(&args, Arc::new(AtomicBool::new(false)))
        .unwrap_or_else(|e| panic!("simulate {scenario}: {e}"));

    let log = std::fs::read(dir.path().join("access.log")).unwrap();
    let mut parser = GatewayParser::new(LogFormat::builtin("overtime").unwrap(), "access.log", 0);
    parser.push_bytes(&log, 1);
    assert_eq!(
        parser.total_rejected(),
        0,
        "rejected: {:?}",
        parser.rejected_by_reason()
    );
    let (batch, _) = parser.finish();
    let gateway = gateway_records(&batch).unwrap();

    let spans_raw = std::fs::read(dir.path().join("spans.jsonl")).unwrap();
    let parsed = parse_span_bytes(SpanFormat::OtlpJson, &spans_raw, "spans.jsonl");
    assert!(
        parsed.rejected.is_empty(),
        "rejected spans: {:?}",
        parsed.rejected
    );

    let truth: Vec<Value> = std::fs::read_to_string(dir.path().join("truth.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let r = Run {
        dir,
        summary,
        truth,
        gateway,
        spans: parsed.spans,
    };
    check_common(&r, requests);
    r
}

/// What holds for every scenario.
fn check_common(r: &Run, requests: u64) {
    let s = &r.summary;
    assert_eq!(s.load.sent, requests, "{s}");
    assert_eq!(r.truth.len() as u64, requests);
    if s.otlp_url.is_none() {
        assert_eq!(s.spans_lost, 0, "{s}");
    }
    assert_eq!(s.spans_written, s.spans_ended, "{s}");
    assert_eq!(r.spans.len() as u64, s.spans_written);
    assert!(s.notes.is_empty(), "{s}");
    // One gateway line per request, with the status the client saw.
    assert_eq!(r.gateway.len() as u64, requests);
    let read_timeout = s.read_timeout_ms;
    for t in &r.truth {
        let rid = t["request_id"]
            .as_str()
            .expect("every answer carries X-Request-ID");
        let g = r.line(rid);
        let status = t["status"].as_u64().unwrap() as u16;
        if status != 499 {
            assert_eq!(g.status, Some(status), "{t}");
        }
        let rt = g.request_time_ms.unwrap();
        match status {
            504 => {
                assert_eq!(g.upstream_status, vec![Some(504)], "{t}");
                assert!(
                    g.upstream_header_ms.iter().all(Option::is_none),
                    "nginx logs uht=- on a read timeout"
                );
                let urt = g.upstream_response_ms[0].unwrap();
                assert!(
                    urt >= read_timeout - 1.0,
                    "504 after {urt} ms < {read_timeout}"
                );
                assert!(rt + 1.0 >= urt, "{t}: nginx rounds each to the ms");
            }
            404 if g.uri.as_deref() == Some("/nope") => {
                assert!(
                    g.upstream_status.iter().all(Option::is_none),
                    "the gateway answered itself"
                );
            }
            _ => {
                let uht = g.upstream_header_ms[0].unwrap();
                let urt = g.upstream_response_ms[0].unwrap();
                assert!(uht <= urt && urt <= rt + 1.0, "{t}: {g:?}");
            }
        }
        // The trace is known for every request that reached the agent; a
        // sampled one has spans, an unsampled one none.
        if g.upstream_status.iter().any(Option::is_some) {
            let tid = t["trace_id"]
                .as_str()
                .unwrap_or_else(|| panic!("no trace id: {t}"));
            let spans = r.trace(tid);
            if t["traceparent"] == "unsampled" {
                assert!(spans.is_empty(), "{t}");
                continue;
            }
            assert!(!spans.is_empty(), "no spans for {t}");
            if t["traceparent"] == "sampled" {
                assert_eq!(
                    g.trace_id.as_deref(),
                    Some(tid),
                    "traceparent logged by the gateway"
                );
            }
            let server = spans
                .iter()
                .find(|s| s.service == "agent-api" && s.kind.as_deref() == Some("server"))
                .unwrap_or_else(|| panic!("no agent-api server span in {tid}"));
            assert_eq!(
                server.request_id.as_deref(),
                Some(rid),
                "X-Request-ID recorded"
            );
            // Trace context crossed real HTTP: one span without a parent in
            // the trace (the agent's server span), all others linked.
            let ids: Vec<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
            let orphans: Vec<_> = spans
                .iter()
                .filter(|s| {
                    s.parent_span_id
                        .as_deref()
                        .is_none_or(|p| !ids.contains(&p))
                })
                .collect();
            assert_eq!(
                orphans.len(),
                1,
                "{tid}: {:?}",
                orphans.iter().map(|s| &s.name).collect::<Vec<_>>()
            );
            assert_eq!(orphans[0].span_id, server.span_id);
        }
    }
}
