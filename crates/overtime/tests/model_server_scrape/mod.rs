//! `overtime serve` scraping a model server's Prometheus endpoint for
//! real: a stand-in vLLM server whose `/metrics` is written by the real
//! Python `prometheus_client` under vLLM's own names and labels
//! (`vllm_metrics.py`, which cites the vLLM source it follows). Three
//! requests are cut by the gateway before the model answered, with no
//! span from the model server (vLLM writes none for an aborted request):
//! their phase comes from the scraped histograms, and the incident shows
//! the server's queue depth and KV-cache use over its window. Then the
//! same spans and the same metrics (read back from the store over SQL)
//! go to `overtime diagnose --metrics`: the same verdicts, the same
//! incident statistics.
//!
//! Needs python3 and `prometheus-client` from PyPI (pinned in
//! tests/e2e/requirements.txt, which scripts/test installs): missing, the
//! test fails saying so.

use crate::support::{BIN, Serve, sql_rows};
use overtime_test_support::net::{get, wait_for};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const MODEL: &str = "qwen2.5-7b";

/// The stand-in vLLM server, killed on drop.
struct ModelServer {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
    port: u16,
}

impl ModelServer {
    fn start() -> ModelServer {
        let has = Command::new("python3")
            .args(["-c", "import prometheus_client"])
            .output();
        match has {
            Ok(o) if o.status.success() => {}
            Ok(o) => panic!(
                "the real Python prometheus_client is needed: python3 -m pip install -r tests/e2e/requirements.txt (prometheus-client==0.26.0)\n{}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => panic!("python3 is needed (apt-get install python3): {e}"),
        }
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/model_server_scrape/vllm_metrics.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(MODEL)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the model server printed no port: {line:?}"));
        ModelServer { child, out, port }
    }

    /// No more requests finish; the gauges stay.
    fn stop_requests(&mut self) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"stop\n").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "stopped");
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A counter or gauge of the collector's `/metrics`, by its exact labels.
fn own_metric(port: u16, series: &str) -> Option<f64> {
    let (_, body) = get(port, "/metrics")?;
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

fn rfc3339(us: i64) -> String {
    chrono::DateTime::from_timestamp_micros(us)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Three requests cut at 2 s by the gateway, starting at `starts_us`:
/// the agent's span, its chat call to the model with no answer and no
/// server span; and the gateway's 504 lines.
fn cut_requests(starts_us: &[i64]) -> (String, String) {
    let (mut spans, mut log) = (String::new(), String::new());
    for (i, &t0) in starts_us.iter().enumerate() {
        let trace = format!("{:032x}", 0xabc0 + i);
        let root = format!("{:016x}", 0x100 + i);
        let chat = format!("{:016x}", 0x200 + i);
        let end = t0 + 2_000_000;
        spans += &serde_json::json!({
            "trace_id": trace, "span_id": root, "service": "agent-api",
            "name": "POST /api/agent/execute", "stage": "service",
            "start_time": rfc3339(t0), "end_time": rfc3339(end + 300_000),
            "status": "error", "request_id": trace,
        })
        .to_string();
        spans.push('\n');
        spans += &serde_json::json!({
            "trace_id": trace, "span_id": chat, "parent_span_id": root,
            "service": "agent-api", "name": format!("chat {MODEL}"), "stage": "llm",
            "start_time": rfc3339(t0 + 5_000), "end_time": rfc3339(end + 290_000),
            "status": "error", "model": MODEL, "input_tokens": 900,
        })
        .to_string();
        spans.push('\n');
        let at = chrono::DateTime::from_timestamp_micros(end)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        log += &format!(
            "10.0.0.1 [{at}] \"POST /api/agent/execute HTTP/1.1\" 504 167 rt=2.000 uct=\"0.001\" \
             uht=\"-\" urt=\"2.000\" us=\"504\" ua=\"10.0.0.5:8000\" rid={trace} \
             tp=\"00-{trace}-{root}-01\" mw=\"-\" llm=\"-\" llmd=\"-\"\n"
        );
    }
    (spans, log)
}

fn model_server_stats(incident: &serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    incident["cause_stats"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| k.starts_with("model_server_"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn serve_scrapes_a_vllm_metrics_endpoint_and_its_incidents_match_diagnose_with_the_same_metrics() {
    let mut vllm = ModelServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (spans_path, log_path) = (
        dir.path().join("spans.jsonl"),
        dir.path().join("access.log"),
    );
    // A server that is down: its scrapes fail, are counted, and nothing
    // else stops. (A port just released: nothing listens there.)
    let down = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\ndata_dir = {data:?}\nfsync = false\n\
         [otlp]\nhttp_listen = \"\"\ngrpc_listen = \"\"\n[diagnose]\ngrace_ms = 1000\n\n\
         [[file]]\npath = {log:?}\nkind = \"nginx\"\nformat = \"overtime\"\nlayer = \"access\"\n\n\
         [[file]]\npath = {spans:?}\nkind = \"jsonl\"\n\n\
         [[model_server]]\nurl = \"http://127.0.0.1:{port}/metrics\"\nname = \"vllm-0\"\ninterval_ms = 250\n\n\
         [[model_server]]\nurl = \"http://127.0.0.1:{down}/metrics\"\nname = \"down\"\ninterval_ms = 250\ntimeout_ms = 500\n",
        data = dir.path().join("data").display().to_string(),
        log = log_path.display().to_string(),
        spans = spans_path.display().to_string(),
        port = vllm.port,
    );
    let cfg_path = dir.path().join("overtime.toml");
    std::fs::write(&cfg_path, config).unwrap();
    let serve = Serve::start(&cfg_path);
    let port = serve.port;
    let ok = |server: &str| {
        own_metric(
            port,
            &format!("overtime_model_server_scrapes_total{{server=\"{server}\",result=\"ok\"}}"),
        )
        .unwrap_or(0.0)
    };
    wait_for(30, "a first scrape of the model server", || {
        ok("vllm-0") >= 1.0
    });
    let t1 = chrono::Utc::now().timestamp_micros();
    // Requests finish on the model server for 4 s while it is scraped.
    std::thread::sleep(Duration::from_secs(4));
    vllm.stop_requests();
    let scraped = ok("vllm-0");
    wait_for(30, "three scrapes after the requests stopped", || {
        ok("vllm-0") >= scraped + 3.0
    });
    // The down server: failures counted, `up` 0, never ok.
    let failed = own_metric(
        port,
        "overtime_model_server_scrapes_total{server=\"down\",result=\"failed\"}",
    )
    .unwrap_or(0.0);
    assert!(
        failed >= 1.0,
        "the down server's failed scrapes are counted"
    );
    assert_eq!(ok("down"), 0.0);
    assert_eq!(
        own_metric(port, "overtime_model_server_up{server=\"down\"}"),
        Some(0.0)
    );
    assert_eq!(
        own_metric(port, "overtime_model_server_up{server=\"vllm-0\"}"),
        Some(1.0)
    );
    // Every scrape kept the 8 series the diagnosis reads (2 gauges, 3
    // histograms' sum and count).
    let samples = own_metric(
        port,
        "overtime_model_server_samples_total{server=\"vllm-0\"}",
    )
    .unwrap();
    assert!(
        samples >= 8.0 && samples % 8.0 == 0.0,
        "{samples} samples kept"
    );

    // Three requests in the minutes the model server was scraped, cut by
    // the gateway with nothing from the model server.
    let starts: Vec<i64> = [300_000, 800_000, 1_300_000]
        .iter()
        .map(|d| t1 + d)
        .collect();
    let (spans, log) = cut_requests(&starts);
    std::fs::write(&spans_path, &spans).unwrap();
    std::fs::write(&log_path, &log).unwrap();

    let ids: Vec<String> = (0..3).map(|i| format!("{:032x}", 0xabc0 + i)).collect();
    let mut live_incident = serde_json::Value::Null;
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let found = |live_incident: &mut serde_json::Value| {
        let all = ids
            .iter()
            .all(|id| matches!(get(port, &format!("/api/traces/{id}")), Some((200, _))));
        if let Some((200, body)) = get(port, "/api/incidents") {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            // The list gives summaries; the report, its statistics.
            let reports = v["incidents"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|i| i["trace_count"] == 3)
                .filter_map(|i| {
                    let id = i["id"].as_str()?.replace('@', "%40").replace(':', "%3A");
                    let (code, body) = get(port, &format!("/api/incidents/{id}"))?;
                    (code == 200).then(|| serde_json::from_str::<serde_json::Value>(&body).ok())?
                });
            for r in reports {
                if !model_server_stats(&r).is_empty() {
                    *live_incident = r;
                }
            }
        }
        all && !live_incident.is_null()
    };
    while !found(&mut live_incident) {
        // What the collector holds, when it never comes.
        assert!(
            std::time::Instant::now() < deadline,
            "no live incident of the three traces with the model server's load after 90 s: \
             incidents {:?}; traces {:?}",
            get(port, "/api/incidents").map(|x| x.1),
            ids.iter()
                .map(|id| get(port, &format!("/api/traces/{id}")).map(|x| x.0))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let live_stats = model_server_stats(&live_incident);
    let q = &live_stats[&format!("model_server_queue_depth ({MODEL})")];
    assert!(q["n"].as_u64().unwrap() >= 2, "{q}");
    assert!(
        (3.0..=7.0).contains(&q["max"].as_f64().unwrap()),
        "the queue depth the server's gauge showed: {q}"
    );
    let kv = &live_stats[&format!("model_server_kv_cache_use ({MODEL})")];
    assert!(kv["max"].as_f64().unwrap() >= 0.9, "{kv}");
    let mut live_verdicts = Vec::new();
    for id in &ids {
        let (_, body) = get(port, &format!("/api/traces/{id}")).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v.as_object_mut().unwrap().remove("revision");
        // The histograms said 2.4 s of 3.0 s in the queue.
        assert_eq!(v["root_cause"]["kind"], "llm_queueing", "{v:#}");
        let ev = v["root_cause"]["evidence"].to_string();
        assert!(
            ev.contains("(counted by the model server's metrics)"),
            "{ev}"
        );
        live_verdicts.push(v);
    }

    // The store kept the series (SQL sees them), and only those the
    // diagnosis reads.
    let rows = sql_rows(
        port,
        None,
        "SELECT CAST(time AS BIGINT) AS t, name, model, value FROM model_server_metrics \
         WHERE server = 'vllm-0' ORDER BY t, name",
    );
    assert!(rows.len() >= 40, "{} rows", rows.len());
    assert!(rows.iter().all(|r| r["model"] == MODEL));
    assert!(
        rows.iter()
            .any(|r| r["name"] == "vllm:request_queue_time_seconds_sum")
    );
    assert!(
        !rows
            .iter()
            .any(|r| r["name"] == "vllm:num_requests_running")
    );

    // The same metrics as the Prometheus HTTP API would give them, and the
    // same spans and log, to `overtime diagnose --metrics`.
    let mut series: std::collections::BTreeMap<String, Vec<serde_json::Value>> = Default::default();
    for r in &rows {
        let t = r["t"].as_i64().unwrap() as f64 / 1e6;
        let v = r["value"].as_f64().unwrap().to_string();
        series
            .entry(r["name"].as_str().unwrap().to_string())
            .or_default()
            .push(serde_json::json!([t, v]));
    }
    let result: Vec<serde_json::Value> = series
        .into_iter()
        .map(|(name, values)| {
            serde_json::json!({"metric": {"__name__": name, "model_name": MODEL}, "values": values})
        })
        .collect();
    let export = serde_json::json!({"status": "success", "data": {"resultType": "matrix", "result": result}});
    let metrics_path = dir.path().join("metrics.json");
    std::fs::write(&metrics_path, export.to_string()).unwrap();
    let out = Command::new(BIN)
        .args(["diagnose", "--nginx-log", log_path.to_str().unwrap()])
        .args(["--log-format", "overtime", "--layer-name", "access"])
        .args(["--spans", spans_path.to_str().unwrap()])
        .args(["--metrics", metrics_path.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let batch: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for live in &live_verdicts {
        let id = &live["trace_id"];
        let want = batch["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| &v["trace_id"] == id)
            .unwrap_or_else(|| panic!("diagnose gave no verdict of {id}"));
        assert_eq!(
            live, want,
            "trace {id}: serve and diagnose --metrics differ"
        );
    }
    let batch_incident = &batch["incidents"][0];
    assert_eq!(
        live_stats,
        model_server_stats(batch_incident),
        "the incident's model-server statistics in serve and in diagnose --metrics"
    );
    drop(serve);
}
