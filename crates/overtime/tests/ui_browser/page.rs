//! The UI test's fixtures and page probes: the `overtime serve` it drives,
//! the generated 2,000-span trace, and what the tests read off the page.

use crate::support::{Serve, serve_command};
use overtime_test_support::chromium::Browser;
use overtime_test_support::net::request;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

pub(super) const BIN: &str = env!("CARGO_BIN_EXE_overtime");
/// The generated trace with 2,000 spans.
pub(super) const BIG: &str = "2000cafe00000000000000000000d00d";

pub(super) fn fixture(dir: &str, f: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/incidents")
        .join(dir)
        .join(f)
        .display()
        .to_string()
}

/// `$CARGO_TARGET_DIR/ui-artifacts` (the binary is `<target>/debug/overtime`).
pub(super) fn artifacts() -> PathBuf {
    let target = Path::new(BIN)
        .parent()
        .and_then(Path::parent)
        .expect("target dir");
    let dir = target.join("ui-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The collector the browser talks to: `overtime serve` on a port of its
/// own choosing (read from its ready file), stopped on drop.
pub(super) struct Server {
    _serve: Serve,
    pub(super) port: u16,
    pub(super) token: Option<String>,
    _dir: tempfile::TempDir,
}

impl Server {
    /// `overtime serve --config <toml>` with `files` (TOML `[[file]]`
    /// blocks) and, if given, the API token in `OVERTIME_TOKEN`.
    pub(super) fn start(
        files: &str,
        token: Option<&str>,
        write: impl FnOnce(&Path) -> String,
    ) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let extra = write(dir.path());
        let config = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[store]\ndata_dir = {data:?}\nfsync = false\n\
             [otlp]\nhttp_listen = \"\"\ngrpc_listen = \"\"\n[diagnose]\ngrace_ms = 1000\n\n{files}\n{extra}",
            data = dir.path().join("data").display().to_string(),
        );
        let cfg = dir.path().join("overtime.toml");
        std::fs::write(&cfg, config).unwrap();
        let mut cmd = serve_command(&cfg);
        cmd.stderr(Stdio::null());
        if let Some(t) = token {
            cmd.env("OVERTIME_TOKEN", t);
        }
        let serve = Serve::start_command(cmd);
        Server {
            port: serve.port,
            _serve: serve,
            token: token.map(String::from),
            _dir: dir,
        }
    }

    pub(super) fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// `GET path` with the bearer token: (status, JSON body).
    pub(super) fn api(&self, path: &str) -> Option<(u16, Value)> {
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> =
            auth.iter().map(|a| ("Authorization", a.as_str())).collect();
        let a = request(self.port, "GET", path, &headers, b"")?;
        Some((
            a.status,
            serde_json::from_slice(&a.body).unwrap_or(Value::Null),
        ))
    }

    /// Waits (bounded) until the live diagnosis holds `want` verdicts.
    pub(super) fn wait_for_verdicts(&self, want: u64) {
        let deadline = Instant::now() + Duration::from_secs(180);
        let mut last = Value::Null;
        while Instant::now() < deadline {
            if let Some((200, v)) = self.api("/api/traces?limit=1") {
                if v["total"].as_u64() == Some(want) {
                    return;
                }
                last = v["total"].clone();
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        panic!("overtime serve had {last} verdicts, not {want}, after 180 s");
    }

    pub(super) fn first_of_kind(&self, kind: &str) -> Value {
        let (status, v) = self
            .api(&format!("/api/traces?kind={kind}&limit=1"))
            .expect("the API answers");
        assert_eq!(status, 200, "{v}");
        v["traces"][0].clone()
    }
}

/// One agent request that looped 666 times through an LLM call, a tool and
/// a memory write (some tools retried, some without a timeout) until its
/// 100 s budget ran out: 2,000 spans in JSONL (docs/inputs.md#spans).
pub(super) fn big_trace_jsonl() -> String {
    const CHILDREN: usize = 1998;
    let t0: i64 = 1_795_748_400_000; // 2026-11-27T03:00:00Z
    let mut n = 0u64;
    let mut id = || {
        n += 1;
        format!("{:016x}", 0x0b16_0000_0000_0000u64 + n)
    };
    let (root, agent) = (id(), id());
    let mut lines: Vec<String> = Vec::new();
    let push = |lines: &mut Vec<String>, sid: String, body: Value| {
        if lines.len() < CHILDREN {
            let mut v = serde_json::json!({"trace_id": BIG, "span_id": sid, "parent_span_id": agent, "service": "agent-runtime"});
            v.as_object_mut()
                .unwrap()
                .extend(body.as_object().unwrap().clone());
            lines.push(v.to_string());
        }
    };
    let (mut at, mut round) = (20i64, 0i64);
    while lines.len() < CHILDREN {
        push(
            &mut lines,
            id(),
            serde_json::json!({"name": "chat qwen3-32b", "stage": "llm", "model": "qwen3-32b",
            "start_time": t0 + at, "duration_ms": 95.0, "status": "ok", "timeout_ms": 30000,
            "remaining_budget_ms": 100_000 - at, "input_tokens": 120 + round % 400, "output_tokens": 40,
            "llm_reason": "queue=5ms,kv_cache_build=20ms,decode_loop=60ms,io_wait=5ms"}),
        );
        at += 97;
        let tool = format!("lookup_{}", round % 5);
        let name = format!("execute_tool {tool}");
        let timeout = if round % 50 == 7 {
            Value::Null
        } else {
            Value::from(2000)
        };
        if round % 25 == 3 {
            push(
                &mut lines,
                id(),
                serde_json::json!({"name": name, "stage": "tool", "tool": tool,
                "start_time": t0 + at, "duration_ms": 40.0, "status": "error", "timeout_ms": timeout, "attempt": 0}),
            );
            at += 42;
            push(
                &mut lines,
                id(),
                serde_json::json!({"name": name, "stage": "tool", "tool": tool,
                "start_time": t0 + at, "duration_ms": 40.0, "status": "ok", "timeout_ms": timeout, "attempt": 1}),
            );
        } else {
            push(
                &mut lines,
                id(),
                serde_json::json!({"name": name, "stage": "tool", "tool": tool,
                "start_time": t0 + at, "duration_ms": 40.0, "status": "ok", "timeout_ms": timeout}),
            );
        }
        at += 42;
        push(
            &mut lines,
            id(),
            serde_json::json!({"name": "memory.save", "stage": "memory", "tool": "redis-session",
            "start_time": t0 + at, "duration_ms": 10.0, "status": "ok", "timeout_ms": 500}),
        );
        at += 12;
        round += 1;
    }
    let chunks: Vec<Value> = (0..60)
        .map(|i| serde_json::json!({"name": "chunk", "time": t0 + 500 + i * 400}))
        .collect();
    let mut all = vec![
        serde_json::json!({"trace_id": BIG, "span_id": root, "service": "agent-api", "name": "POST /v1/agent/batch",
            "stage": "service", "start_time": t0, "duration_ms": at + 40, "status": "timeout", "budget_ms": 100000,
            "events": chunks}).to_string(),
        serde_json::json!({"trace_id": BIG, "span_id": agent, "parent_span_id": root, "service": "agent-runtime",
            "name": "invoke_agent batch-researcher", "stage": "other", "start_time": t0 + 5,
            "duration_ms": at + 20, "status": "timeout"}).to_string(),
    ];
    all.extend(lines);
    assert_eq!(all.len(), 2000);
    all.join("\n") + "\n"
}

pub(super) fn incidents_b_and_c() -> String {
    let c_format = std::fs::read_to_string(fixture("c_dns_retry", "log_format.txt")).unwrap();
    format!(
        "[[file]]\npath = {b_log:?}\nkind = \"nginx\"\nnginx_conf = {b_conf:?}\nformat_name = \"agent_json\"\nlayer = \"edge-b\"\n\n\
         [[file]]\npath = {b_spans:?}\nkind = \"otlp-json\"\n\n\
         [[file]]\npath = {c_log:?}\nkind = \"nginx\"\nformat = {c_format:?}\nlayer = \"access-c\"\n\n\
         [[file]]\npath = {c_spans:?}\nkind = \"jsonl\"\n",
        b_log = fixture("b_tool_no_timeout", "access.log"),
        b_conf = fixture("b_tool_no_timeout", "nginx.conf"),
        b_spans = fixture("b_tool_no_timeout", "traces.otlp.jsonl"),
        c_log = fixture("c_dns_retry", "access.log"),
        c_spans = fixture("c_dns_retry", "spans.jsonl"),
    )
}

pub(super) fn text(b: &mut Browser, selector: &str) -> String {
    let v = b.eval(&format!(
        "(document.querySelector({selector:?}) || {{}}).textContent || ''"
    ));
    v.as_str().unwrap_or_default().trim().to_string()
}

pub(super) fn active(b: &mut Browser) -> Value {
    b.eval("({id: document.activeElement.id, row: document.activeElement.dataset ? document.activeElement.dataset.id || null : null, tag: document.activeElement.tagName})")
}

/// The page fits the 1366-px laptop screen without sideways scrolling.
pub(super) fn assert_fits(b: &mut Browser, what: &str) {
    let w = b
        .eval("document.documentElement.scrollWidth")
        .as_f64()
        .unwrap();
    assert!(w <= 1366.0, "{what}: the page is {w}px wide at 1366×768");
}

/// The waterfall's axis labels (deadline, gateway cut, read timeout, the
/// time ticks) do not overlap one another, and the gateway row's label is
/// not cut.
pub(super) fn assert_axis_readable(b: &mut Browser, what: &str) {
    let clashes = b.eval(
        "(() => { const r = (e) => e.getBoundingClientRect();
          const marks = [...document.querySelectorAll('#waterfall .axis .mark')];
          const ticks = [...document.querySelectorAll('#waterfall .axis .t')];
          const hit = (a, b) => { const x = r(a), y = r(b);
            return x.left < y.right - 1 && y.left < x.right - 1 && x.top < y.bottom - 1 && y.top < x.bottom - 1; };
          const out = [];
          marks.forEach((m, i) => { marks.slice(i + 1).forEach((n) => { if (hit(m, n)) out.push(m.textContent + ' / ' + n.textContent); });
                                   ticks.forEach((t) => { if (hit(m, t)) out.push(m.textContent + ' / tick ' + t.textContent); }); });
          return out; })()",
    );
    assert_eq!(
        clashes,
        serde_json::json!([]),
        "{what}: axis labels overlap"
    );
    let gw = b.eval(
        "(() => { const n = document.querySelector('#waterfall .wf-body .wf-row[data-i=\"0\"] .wf-label .nm');
          return n ? [n.textContent, n.scrollWidth <= n.clientWidth + 1] : null; })()",
    );
    if !gw.is_null() {
        assert_eq!(gw[1], true, "{what}: the gateway row's text is cut: {gw}");
    }
}
