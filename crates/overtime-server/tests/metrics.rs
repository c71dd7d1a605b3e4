//! `GET /metrics` and `GET /api/slo` over the incident fixtures fed through
//! the pipeline's sinks: the text parses with a strict parser (and with
//! `promtool check metrics`), requests by outcome and root causes by kind
//! equal each fixture's truth.json, histograms are cumulative with
//! `+Inf` = count, the pipeline's own health is there, and the names are
//! exactly those of docs/metrics.md.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use overtime_diagnose::live::LiveDiagnoser;
use overtime_diagnose::DiagnoseConfig;
use overtime_model::{gateway_records, RecordSink, SinkError, Table};
use overtime_parse::nginx::{GatewayParser, LogFormat};
use overtime_parse::spans::{parse_span_bytes, SpanFormat};
use overtime_server::metrics::Metrics;
use overtime_server::pipeline::{self, SourceSink};
use overtime_server::{router, AppState};
use overtime_store::{Store, StoreConfig};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use tower::ServiceExt;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures/incidents").join(name)
}

fn state(dir: &Path, token: Option<&str>, memtable_bytes: u64) -> Arc<AppState> {
    let store = Store::open(StoreConfig {
        data_dir: dir.to_path_buf(),
        memtable_bytes,
        flush_interval_ms: 3_600_000,
        ..Default::default()
    })
    .unwrap();
    Arc::new(AppState {
        live: Mutex::new(LiveDiagnoser::new(
            DiagnoseConfig::default(),
            0,
            600_000,
            100_000,
        )),
        store: Arc::new(store),
        diagnose: DiagnoseConfig::default(),
        sql: Default::default(),
        token: token.map(String::from),
        ready: AtomicBool::new(true),
        metrics: Metrics::new(Default::default()),
    })
}

struct Fed {
    truth: Value,
    gateway_statuses: BTreeMap<String, u64>,
    gateway_lines: u64,
    spans: u64,
}

/// Feeds a fixture through labelled sinks (the nginx log as a tailed file,
/// the spans as OTLP/HTTP), then one tick.
fn feed(s: &Arc<AppState>, name: &str) -> Fed {
    let dir = fixture(name);
    let truth: Value =
        serde_json::from_slice(&std::fs::read(dir.join("truth.json")).unwrap()).unwrap();
    let format = match name {
        "b_tool_no_timeout" => LogFormat::from_nginx_conf(
            &std::fs::read_to_string(dir.join("nginx.conf")).unwrap(),
            "agent_json",
        )
        .unwrap(),
        "c_dns_retry" => {
            LogFormat::compile(&std::fs::read_to_string(dir.join("log_format.txt")).unwrap())
                .unwrap()
        }
        _ => LogFormat::builtin("overtime").unwrap(),
    };
    let mut p = GatewayParser::new(format, "edge", 0);
    p.push_bytes(&std::fs::read(dir.join("access.log")).unwrap(), 1);
    let (g, rejected) = p.finish();
    assert_eq!(rejected.num_rows(), 0, "{name}: the fixture parses");
    let mut gateway_statuses = BTreeMap::new();
    for r in gateway_records(&g).unwrap() {
        let st = r.status.map_or("unknown".to_string(), |s| s.to_string());
        *gateway_statuses.entry(st).or_default() += 1;
    }
    let gateway_lines = g.num_rows() as u64;
    let file = SourceSink {
        state: s.clone(),
        source: "file",
    };
    file.write(Table::GatewayRequests, g, None).unwrap();
    let (file_name, format) = if name == "b_tool_no_timeout" {
        ("traces.otlp.jsonl", SpanFormat::OtlpJson)
    } else {
        ("spans.jsonl", SpanFormat::Jsonl)
    };
    let parsed = parse_span_bytes(
        format,
        &std::fs::read(dir.join(file_name)).unwrap(),
        file_name,
    );
    let (sp, _) = parsed.to_batches();
    let spans = sp.num_rows() as u64;
    SourceSink {
        state: s.clone(),
        source: "otlp_http",
    }
    .write(Table::Spans, sp, None)
    .unwrap();
    pipeline::tick(s);
    Fed {
        truth,
        gateway_statuses,
        gateway_lines,
        spans,
    }
}

async fn call(s: &Arc<AppState>, uri: &str, token: Option<&str>) -> (StatusCode, String, String) {
    let mut req = Request::builder().uri(uri);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = router(s.clone())
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, ct, String::from_utf8(bytes.to_vec()).unwrap())
}

// ---- a strict parser of the text format (0.0.4)

#[derive(Debug, Default)]
struct Family {
    kind: String,
    help: bool,
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

type Exposition = BTreeMap<String, Family>;

fn is_name(s: &str, colon: bool) -> bool {
    let mut c = s.chars();
    let ok_first = |ch: char| ch.is_ascii_alphabetic() || ch == '_' || (colon && ch == ':');
    c.next().is_some_and(ok_first)
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || (colon && ch == ':'))
}

fn parse_value(v: &str) -> Result<f64, String> {
    match v {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => v.parse::<f64>().map_err(|e| format!("value {v:?}: {e}")),
    }
}

/// `{a="x",b="y\"z"}` → labels; rejects anything the format does not allow.
fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while !rest.is_empty() {
        let eq = rest.find('=').ok_or(format!("label without '=': {rest}"))?;
        let name = &rest[..eq];
        if !is_name(name, false) {
            return Err(format!("bad label name {name:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("bad escape {other:?}")),
                },
                Some((i, '"')) => break i,
                Some((_, '\n')) => return Err("raw newline in a label value".into()),
                Some((_, c)) => value.push(c),
                None => return Err("unterminated label value".into()),
            }
        };
        if out.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        rest = &rest[end + 1..];
        rest = match rest.strip_prefix(',') {
            Some(r) => r,
            None if rest.is_empty() => rest,
            None => return Err(format!("expected ',' before {rest:?}")),
        };
    }
    Ok(out)
}

fn family_of(sample: &str, families: &Exposition) -> Option<String> {
    if families.contains_key(sample) {
        return Some(sample.to_string());
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = sample.strip_suffix(suffix) {
            if families.get(base).is_some_and(|f| f.kind == "histogram") {
                return Some(base.to_string());
            }
        }
    }
    None
}

fn parse_exposition(text: &str) -> Result<Exposition, String> {
    let mut fams: Exposition = BTreeMap::new();
    let mut seen_series = BTreeSet::new();
    let mut finished = BTreeSet::new();
    let mut current: Option<String> = None;
    if !text.ends_with('\n') {
        return Err("the text must end with a newline".into());
    }
    for (n, line) in text.lines().enumerate() {
        let err = |m: String| format!("line {}: {m}: {line:?}", n + 1);
        if let Some(rest) = line.strip_prefix("# ") {
            let (kw, rest) = rest
                .split_once(' ')
                .ok_or_else(|| err("bad comment".into()))?;
            let (name, arg) = rest
                .split_once(' ')
                .ok_or_else(|| err("no argument".into()))?;
            if !is_name(name, true) {
                return Err(err("bad metric name".into()));
            }
            if current.as_deref() != Some(name) {
                if let Some(c) = current.take() {
                    finished.insert(c);
                }
                if finished.contains(name) {
                    return Err(err("family split in two groups".into()));
                }
                current = Some(name.to_string());
            }
            let f = fams.entry(name.to_string()).or_default();
            match kw {
                "HELP" => {
                    if f.help {
                        return Err(err("HELP twice".into()));
                    }
                    f.help = true;
                }
                "TYPE" => {
                    if !f.kind.is_empty() || !f.samples.is_empty() {
                        return Err(err("TYPE twice or after samples".into()));
                    }
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&arg) {
                        return Err(err("unknown type".into()));
                    }
                    f.kind = arg.to_string();
                }
                _ => return Err(err("unknown keyword".into())),
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            return Err(err("empty line or bare comment".into()));
        }
        let (series, value) = line
            .rsplit_once(' ')
            .ok_or_else(|| err("no value".into()))?;
        let value = parse_value(value).map_err(err)?;
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (
                n,
                parse_labels(l.strip_suffix('}').ok_or_else(|| err("no '}'".into()))?)
                    .map_err(err)?,
            ),
            None => (series, BTreeMap::new()),
        };
        if !is_name(name, true) {
            return Err(err("bad metric name".into()));
        }
        let fam = family_of(name, &fams).ok_or_else(|| err("sample before its TYPE".into()))?;
        if current.as_deref() != Some(fam.as_str()) {
            return Err(err("sample outside its family's group".into()));
        }
        if !seen_series.insert(format!("{name}{labels:?}")) {
            return Err(err("duplicate series".into()));
        }
        fams.get_mut(&fam)
            .unwrap()
            .samples
            .push((name.to_string(), labels, value));
    }
    // Histograms: per series, le ascending, cumulative, +Inf = _count, a _sum.
    for (name, f) in fams.iter().filter(|(_, f)| f.kind == "histogram") {
        let mut groups: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        let mut counts = BTreeMap::new();
        let mut sums = BTreeSet::new();
        for (s, labels, v) in &f.samples {
            let mut key = labels.clone();
            let le = key.remove("le");
            let key = format!("{key:?}");
            match s.strip_prefix(name.as_str()) {
                Some("_bucket") => {
                    let le = parse_value(&le.ok_or(format!("{s}: bucket without le"))?)?;
                    groups.entry(key).or_default().push((le, *v));
                }
                Some("_count") => {
                    counts.insert(key, *v);
                }
                Some("_sum") => {
                    sums.insert(key);
                }
                _ => return Err(format!("{s}: not a histogram series of {name}")),
            }
        }
        for (key, buckets) in &groups {
            for w in buckets.windows(2) {
                if !(w[0].0 < w[1].0 && w[0].1 <= w[1].1) {
                    return Err(format!(
                        "{name}{key}: buckets not ascending/cumulative: {buckets:?}"
                    ));
                }
            }
            let last = buckets.last().unwrap();
            if last.0 != f64::INFINITY || Some(&last.1) != counts.get(key) || !sums.contains(key) {
                return Err(format!(
                    "{name}{key}: +Inf bucket {last:?} vs count {:?}",
                    counts.get(key)
                ));
            }
        }
    }
    for (name, f) in &fams {
        if f.kind.is_empty() || !f.help {
            return Err(format!("{name}: HELP and TYPE required"));
        }
        if f.kind == "counter" && !name.ends_with("_total") {
            return Err(format!("{name}: a counter's name ends in _total"));
        }
    }
    Ok(fams)
}

fn sum_by(fams: &Exposition, name: &str, label: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (_, labels, v) in &fams[name].samples {
        *out.entry(labels.get(label).cloned().unwrap_or_default())
            .or_default() += v;
    }
    out
}

fn value(fams: &Exposition, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    fams.get(name)?.samples.iter().find_map(|(s, labels, v)| {
        (s == name
            && want
                .iter()
                .all(|(k, val)| labels.get(*k).map(String::as_str) == Some(*val)))
        .then_some(*v)
    })
}

/// `promtool check metrics` (Debian package `prometheus`) agrees.
fn promtool_check(text: &str) {
    use std::io::Write;
    let promtool = ["/usr/bin/promtool", "/usr/local/bin/promtool"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .expect("promtool not found: apt-get install -y --no-install-recommends prometheus (scripts/test does this)");
    let mut child = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `overtime_*` names of docs/metrics.md's tables, but for the
/// Delivery section's: those come from `overtime serve`'s alert sender and
/// Jira notifier (checked by the binary's Alertmanager end-to-end test).
fn documented_names() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(repo().join("docs/metrics.md")).unwrap();
    let mut delivery = false;
    let mut names = BTreeSet::new();
    for l in doc.lines() {
        if l.starts_with("## ") {
            delivery = l.starts_with("## Delivery");
        }
        if let Some(rest) = l.strip_prefix("| `overtime_").filter(|_| !delivery) {
            names.insert(format!("overtime_{}", &rest[..rest.find('`').unwrap()]));
        }
    }
    names
}

#[tokio::test]
async fn metrics_of_each_incident_match_its_truth() {
    let names = documented_names();
    assert!(names.len() > 40, "{names:?}");
    for name in ["a_prefill", "b_tool_no_timeout", "c_dns_retry", "healthy"] {
        let dir = tempfile::tempdir().unwrap();
        let s = state(dir.path(), None, 256 * 1024 * 1024);
        let fed = feed(&s, name);
        let (st, ct, text) = call(&s, "/metrics", None).await;
        assert_eq!(st, StatusCode::OK);
        assert_eq!(ct, "text/plain; version=0.0.4; charset=utf-8");
        let fams = parse_exposition(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
        promtool_check(&text);
        let exposed: BTreeSet<String> = fams.keys().cloned().collect();
        assert_eq!(
            exposed, names,
            "{name}: /metrics and docs/metrics.md name the same families"
        );

        // Requests by outcome: the fixture's failing traces by outcome, the
        // rest ok; one request per gateway line (one layer, every trace logged).
        let truth = &fed.truth;
        let mut want: BTreeMap<String, f64> = BTreeMap::new();
        for f in truth["failing"].as_object().unwrap().values() {
            *want
                .entry(f["outcome"].as_str().unwrap().to_string())
                .or_default() += 1.0;
        }
        let failing: f64 = want.values().sum();
        assert_eq!(failing, truth["failing_count"].as_f64().unwrap());
        want.insert("ok".into(), fed.gateway_lines as f64 - failing);
        let by_outcome = sum_by(&fams, "overtime_requests_total", "outcome");
        assert_eq!(by_outcome, want, "{name}: requests by outcome");
        let timed_out: f64 = fams["overtime_requests_timed_out_total"]
            .samples
            .iter()
            .map(|x| x.2)
            .sum();
        let want_timed_out = want.get("gateway_timeout").unwrap_or(&0.0)
            + want.get("service_timeout").unwrap_or(&0.0);
        assert_eq!(timed_out, want_timed_out, "{name}");

        // Root causes by kind = truth.json's failing_by_kind.
        let kinds = sum_by(&fams, "overtime_root_causes_total", "kind");
        let want_kinds: BTreeMap<String, f64> = truth["failing_by_kind"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
            .collect();
        assert_eq!(kinds, want_kinds, "{name}: root causes by kind");

        // Gateway records by status, as parsed.
        let statuses: BTreeMap<String, u64> =
            sum_by(&fams, "overtime_gateway_responses_total", "status")
                .into_iter()
                .map(|(k, v)| (k, v as u64))
                .collect();
        assert_eq!(statuses, fed.gateway_statuses, "{name}");

        // Every LLM call has a histogram observation; buckets are checked above.
        let llm_calls: f64 = fams["overtime_llm_calls_total"]
            .samples
            .iter()
            .map(|x| x.2)
            .sum();
        let llm_hist: f64 = fams["overtime_llm_call_duration_seconds"]
            .samples
            .iter()
            .filter(|x| x.0.ends_with("_count"))
            .map(|x| x.2)
            .sum();
        assert!(
            llm_calls > 0.0 && llm_calls == llm_hist,
            "{name}: {llm_calls} {llm_hist}"
        );
        let stage = sum_by(&fams, "overtime_stage_calls_total", "stage");
        assert!(
            stage["llm"] + stage.get("judge").unwrap_or(&0.0) == llm_calls,
            "{name}: {stage:?}"
        );

        // Pipeline health.
        assert_eq!(
            value(
                &fams,
                "overtime_records_ingested_total",
                &[("source", "file"), ("table", "gateway_requests")]
            ),
            Some(fed.gateway_lines as f64)
        );
        assert_eq!(
            value(
                &fams,
                "overtime_records_ingested_total",
                &[("source", "otlp_http"), ("table", "spans")]
            ),
            Some(fed.spans as f64)
        );
        assert_eq!(
            value(&fams, "overtime_backpressure_total", &[("source", "file")]),
            Some(0.0)
        );
        assert!(value(&fams, "overtime_memtable_bytes", &[]).unwrap() > 0.0);
        assert!(value(&fams, "overtime_wal_bytes", &[]).unwrap() > 0.0);
        assert_eq!(
            value(&fams, "overtime_memtable_budget_bytes", &[]),
            Some(256.0 * 1024.0 * 1024.0)
        );
        assert_eq!(value(&fams, "overtime_pending_traces", &[]), Some(0.0));
        // SLO gauges over the replayed data time.
        let r = value(&fams, "overtime_timeout_ratio", &[("window", "3d")]).unwrap();
        assert!(
            (r - want_timed_out / fed.gateway_lines as f64).abs() < 1e-9,
            "{name}: {r}"
        );
        assert!(
            value(&fams, "overtime_chain_health", &[]).is_some(),
            "{name}"
        );
        // Incidents opened: one per report (a fingerprint may fail in
        // several runs apart by more than the quiet period), of the kinds
        // truth.json names.
        let (_, _, body) = call(&s, "/api/incidents", None).await;
        let reports: Value = serde_json::from_str(&body).unwrap();
        let opened = sum_by(&fams, "overtime_incidents_opened_total", "kind");
        assert_eq!(
            opened.values().sum::<f64>(),
            reports["incidents"].as_array().unwrap().len() as f64,
            "{name}: {opened:?}"
        );
        let kinds: BTreeSet<&str> = truth["incidents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            opened.keys().map(String::as_str).collect::<BTreeSet<_>>(),
            kinds,
            "{name}"
        );
        // Asked again, nothing new opened.
        let (_, _, again) = call(&s, "/metrics", None).await;
        let again = parse_exposition(&again).unwrap();
        assert_eq!(
            sum_by(&again, "overtime_incidents_opened_total", "kind"),
            opened
        );

        let (st, _, body) = call(&s, "/api/slo", None).await;
        assert_eq!(st, StatusCode::OK);
        let slo: Value = serde_json::from_str(&body).unwrap();
        assert!(
            slo["watermark"].as_str().unwrap().starts_with("2026-11-"),
            "{body}"
        );
        let w3d = slo["windows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["window"] == "3d")
            .unwrap();
        assert_eq!(w3d["requests"].as_f64().unwrap(), fed.gateway_lines as f64);
        assert!(!slo["models"].as_array().unwrap().is_empty());
    }
}

#[tokio::test]
async fn incident_c_judge_ttft_and_fallback_counters() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), None, 256 * 1024 * 1024);
    feed(&s, "c_dns_retry");
    let spans = parse_span_bytes(
        SpanFormat::Jsonl,
        &std::fs::read(fixture("c_dns_retry").join("spans.jsonl")).unwrap(),
        "spans.jsonl",
    )
    .spans;
    let judged: BTreeSet<&str> = spans
        .iter()
        .filter(|s| s.judge_score.is_some())
        .map(|s| s.trace_id.as_str())
        .collect();
    let ok: BTreeSet<&str> = spans
        .iter()
        .filter(|s| s.judge_score.is_some_and(|j| j >= 0.8))
        .map(|s| s.trace_id.as_str())
        .collect();
    let ttft = spans.iter().filter(|s| s.ttft_ms.is_some()).count();
    let (_, _, text) = call(&s, "/metrics", None).await;
    let fams = parse_exposition(&text).unwrap();
    let total = |n: &str| fams[n].samples.iter().map(|x| x.2).sum::<f64>();
    assert_eq!(total("overtime_judged_requests_total"), judged.len() as f64);
    assert_eq!(total("overtime_semantic_success_total"), ok.len() as f64);
    let ttft_count: f64 = fams["overtime_ttft_seconds"]
        .samples
        .iter()
        .filter(|x| x.0 == "overtime_ttft_seconds_count")
        .map(|x| x.2)
        .sum();
    assert_eq!(ttft_count, ttft as f64);
    // 23 callers got the cache fallback (INCIDENTS C).
    assert_eq!(
        value(&fams, "overtime_fallbacks_total", &[("model", "cache")]),
        Some(23.0)
    );
    assert_eq!(
        value(
            &fams,
            "overtime_fallbacks_accepted_total",
            &[("model", "cache")]
        ),
        Some(0.0)
    );
    // The weather tool's timeouts, by stage and by tool.
    assert!(value(&fams, "overtime_stage_timeouts_total", &[("stage", "tool")]).unwrap() > 0.0);
    assert!(
        value(
            &fams,
            "overtime_tool_calls_total",
            &[("tool", "weather_api"), ("status", "ok")]
        )
        .unwrap()
            > 0.0
    );
}

#[tokio::test]
async fn rejections_backpressure_lag_and_the_token() {
    let dir = tempfile::tempdir().unwrap();
    // A small budget so that the store pushes back.
    let s = state(dir.path(), Some("s3cret"), 1024 * 1024);
    // A bad nginx line becomes a rejected row, counted by reason.
    let mut p = GatewayParser::new(LogFormat::builtin("overtime").unwrap(), "edge", 0);
    p.push_bytes(b"this is not an nginx line\n", 1);
    let (_, rejected) = p.finish();
    assert_eq!(rejected.num_rows(), 1);
    let file = SourceSink {
        state: s.clone(),
        source: "file",
    };
    file.write(Table::Rejected, rejected, None).unwrap();
    s.metrics
        .register_rejections("otlp_grpc", || [("bad_proto".to_string(), 2u64)].into());
    s.metrics
        .register_kafka_lag(|| [("spans/3".to_string(), 17u64)].into());
    // Fill the memtable until the store answers Full.
    let mut p = GatewayParser::new(LogFormat::builtin("overtime").unwrap(), "edge", 0);
    p.push_bytes(
        &std::fs::read(fixture("a_prefill").join("access.log")).unwrap(),
        1,
    );
    let (g, _) = p.finish();
    let kafka = SourceSink {
        state: s.clone(),
        source: "kafka",
    };
    let mut full = 0;
    for _ in 0..200 {
        match kafka.write(Table::GatewayRequests, g.clone(), None) {
            Err(SinkError::Full { .. }) => {
                full += 1;
                break;
            }
            Err(e) => panic!("{e}"),
            Ok(()) => {}
        }
    }
    assert_eq!(full, 1, "the store pushed back");

    assert_eq!(call(&s, "/metrics", None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(call(&s, "/api/slo", None).await.0, StatusCode::UNAUTHORIZED);
    let (st, _, text) = call(&s, "/metrics", Some("s3cret")).await;
    assert_eq!(st, StatusCode::OK);
    let fams = parse_exposition(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let reasons = sum_by(&fams, "overtime_records_rejected_total", "reason");
    assert_eq!(reasons.values().sum::<f64>(), 3.0, "{reasons:?}");
    assert_eq!(
        value(
            &fams,
            "overtime_records_rejected_total",
            &[("source", "otlp_grpc"), ("reason", "bad_proto")]
        ),
        Some(2.0)
    );
    assert_eq!(
        value(&fams, "overtime_backpressure_total", &[("source", "kafka")]),
        Some(1.0)
    );
    assert_eq!(
        value(
            &fams,
            "overtime_kafka_lag",
            &[("topic", "spans"), ("partition", "3")]
        ),
        Some(17.0)
    );
    assert_eq!(
        value(&fams, "overtime_memtable_budget_bytes", &[]),
        Some(1024.0 * 1024.0)
    );
    promtool_check(&text);
}

#[test]
fn the_strict_parser_refuses_what_prometheus_refuses() {
    let ok = "# HELP a_total x\n# TYPE a_total counter\na_total{l=\"q\\\"\\n\\\\\"} 1\n";
    let f = parse_exposition(ok).unwrap();
    assert_eq!(f["a_total"].samples[0].1["l"], "q\"\n\\");
    for bad in [
        "a_total 1\n",                                                         // no TYPE
        "# HELP a_total x\n# TYPE a_total counter\na_total{l=\"x} 1\n",        // unterminated
        "# HELP a_total x\n# TYPE a_total counter\na_total 1\na_total 2\n",    // duplicate
        "# HELP a x\n# TYPE a counter\na 1\n",                                 // counter without _total
        "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", // not cumulative
        "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 2\n", // +Inf != count
        "# HELP g x\n# TYPE g gauge\ng 1",                                     // no final newline
        "# HELP g x\n# TYPE g gauge\ng one\n",                                 // bad value
    ] {
        assert!(parse_exposition(bad).is_err(), "{bad:?}");
    }
    // Label values are escaped on the way out.
    let m = Metrics::new(Default::default());
    m.register_kafka_lag(|| [("we\"ird\\topic\n/0".to_string(), 1u64)].into());
    let text = m.render_text(&Default::default());
    let fams = parse_exposition(&text).unwrap();
    assert_eq!(
        fams["overtime_kafka_lag"].samples[0].1["topic"],
        "we\"ird\\topic\n"
    );
}

#[tokio::test]
async fn an_idle_collector_moves_on_in_data_time() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), None, 256 * 1024 * 1024);
    feed(&s, "a_prefill");
    let five = |text: &str| {
        let fams = parse_exposition(text).unwrap();
        (
            value(&fams, "overtime_error_ratio", &[("window", "5m")]),
            value(&fams, "overtime_error_ratio", &[("window", "3d")]),
        )
    };
    let now = pipeline::now_us();
    // Not idle long enough: replayed data keeps its own time.
    s.metrics.advance_if_idle(now, 60_000_000);
    let (_, _, text) = call(&s, "/metrics", None).await;
    assert!(
        matches!(five(&text), (Some(_), Some(_))),
        "{:?}",
        five(&text)
    );
    // 10 min without a completed request: the 5 min window is empty, the
    // 3 d one still holds the incident.
    s.metrics.advance_if_idle(now + 600_000_000, 60_000_000);
    let (_, _, text) = call(&s, "/metrics", None).await;
    assert!(
        matches!(five(&text), (None, Some(r)) if r > 0.08),
        "{:?}",
        five(&text)
    );
}
