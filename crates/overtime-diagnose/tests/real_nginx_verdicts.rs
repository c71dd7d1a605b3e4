//! Verdicts on what a real nginx wrote (docs/diagnosis.md): nginx in front
//! of the small agent service of `agent_upstream.rs`, timeouts scaled down
//! to seconds, no nginx.conf or timeout given to the diagnosis — what it
//! knows of each layer's read timeout it infers from the log and spans.
//!
//! - two layers (edge 3 s → inner 1.5 s): the inner one gives up, the edge
//!   only relays its 504;
//! - streams nginx cut on `proxy_read_timeout` (logged `200`), beside
//!   healthy streams (heartbeats, short ones);
//! - a service answering `504` on its own tool timeout, beside nginx's own
//!   504s;
//! - `proxy_next_upstream … non_idempotent` over two servers that both hang
//!   on a tool with no timeout.
//!
//! Every case is also fed to the live engine (`live_parity.rs`): `serve`
//! must reach the same verdicts. nginx listens on unix sockets (no port is
//! picked for it). Needs the Debian package `nginx` (`/usr/sbin/nginx`).

use crate::agent_upstream::Agent;
use crate::live_parity::live_equals_batch;
use overtime_diagnose::{DiagnoseConfig, Diagnosis, LayerConfig, diagnose};
use overtime_model::{
    FindingKind as F, GatewayRecord, Outcome, RootCauseKind as K, SpanRecord, Verdict,
    gateway_records,
};
use overtime_parse::nginx::{GatewayParser, LogFormat};
use overtime_parse::spans::{SpanFormat, parse_span_bytes};
use overtime_test_support::nginx::{Nginx, temp_paths, user_directive};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// The issue's format: request and upstream times as `key="value"`.
const FORMAT: &str = r#"'$msec $status rt=$request_time uct="$upstream_connect_time" uht="$upstream_header_time" urt="$upstream_response_time" us="$upstream_status" ua="$upstream_addr" bytes=$body_bytes_sent rid=$request_id xrid=$http_x_request_id tp="$http_traceparent" req="$request"'"#;

/// nginx with `servers` (each a whole `server {…}` or `upstream {…}`
/// block) in `dir`; started once the first server's socket `ready` accepts.
fn start_nginx(dir: &Path, blocks: &str, ready: &Path) -> Nginx {
    let conf = format!(
        "{user}\nworker_processes 1;\nerror_log {d}/error.log info;\n\
         events {{ worker_connections 256; }}\n\
         http {{\n  {temp}\n  log_format verdicts {FORMAT};\n{blocks}\n}}\n",
        user = user_directive(),
        d = dir.display(),
        temp = temp_paths(dir),
    );
    Nginx::start_unix(dir, &conf, ready)
}

/// A server block listening on `sock`, logging to `log`, proxying with
/// `location` directives.
fn server(sock: &Path, log: &Path, location: &str) -> String {
    format!(
        "  server {{ listen unix:{}; access_log {} verdicts;\n    \
         location / {{ proxy_http_version 1.1; proxy_buffering off; {location} }} }}\n",
        sock.display(),
        log.display()
    )
}

fn trace_id(case: u32, i: usize) -> String {
    format!("4bf92f3577b34da6a3ce{case:04x}{i:08x}")
}

/// POSTs `path` through the nginx at `sock` with a traceparent for
/// `trace`; reads the whole answer; returns its status.
fn post(sock: &Path, path: &str, trace: &str) -> u16 {
    let mut s = UnixStream::connect(sock).expect("connect to nginx");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: agent.test\r\ntraceparent: 00-{trace}-00f067aa0ba902b7-01\r\n\
         Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"))
}

/// Sends every (path, trace) at once, each from its own thread.
fn post_all(sock: &Path, reqs: &[(String, String)]) -> Vec<u16> {
    std::thread::scope(|s| {
        let hs: Vec<_> = reqs
            .iter()
            .map(|(p, t)| s.spawn(move || post(sock, p, t)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The layer `source`'s lines in `log`, as nginx wrote them.
fn read_log(log: &Path, source: &str, layer: u32) -> Vec<GatewayRecord> {
    let mut p = GatewayParser::new(LogFormat::compile(FORMAT).unwrap(), source, layer);
    let text = std::fs::read(log).unwrap();
    p.push_bytes(&text, 1);
    let (good, bad) = p.finish_records();
    assert!(bad.is_empty(), "nginx's own lines refused: {bad:?}");
    gateway_records(&good).unwrap()
}

fn read_spans(files: &[&Path]) -> Vec<SpanRecord> {
    let mut out = Vec::new();
    for f in files {
        let parsed = parse_span_bytes(SpanFormat::Jsonl, &std::fs::read(f).unwrap(), "spans");
        assert!(parsed.rejected.is_empty(), "{:?}", parsed.rejected);
        out.extend(parsed.spans);
    }
    out
}

/// The layers in order, no timeout known for any.
fn layers(names: &[&str]) -> DiagnoseConfig {
    DiagnoseConfig {
        layers: names
            .iter()
            .map(|n| LayerConfig {
                name: n.to_string(),
                read_timeout_ms: None,
            })
            .collect(),
        ..Default::default()
    }
}

fn finding(v: &Verdict, k: F) -> Option<&str> {
    v.findings
        .iter()
        .find(|f| f.kind == k)
        .map(|f| f.summary.as_str())
}

/// Diagnoses the records, then checks that the live engine agrees.
fn judge(
    name: &str,
    gw: Vec<GatewayRecord>,
    spans: Vec<SpanRecord>,
    cfg: DiagnoseConfig,
    late: impl Fn(&SpanRecord) -> bool,
) -> Diagnosis {
    let d = diagnose(gw.clone(), spans.clone(), &cfg);
    live_equals_batch(name, gw, spans, cfg, late);
    d
}

#[test]
fn an_outer_layer_that_only_relays_the_inner_layers_504_is_not_said_to_time_out() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let agent = Agent::start(d, "agent-api", "spans.jsonl");
    let (edge_sock, inner_sock) = (d.join("edge.sock"), d.join("inner.sock"));
    let (edge_log, inner_log) = (d.join("edge.log"), d.join("inner.log"));
    let blocks = server(
        &edge_sock,
        &edge_log,
        &format!(
            "proxy_pass http://unix:{}; proxy_read_timeout 3s; proxy_set_header X-Request-ID $request_id;",
            inner_sock.display()
        ),
    ) + &server(
        &inner_sock,
        &inner_log,
        &format!(
            "proxy_pass http://127.0.0.1:{}; proxy_read_timeout 1500ms;",
            agent.port
        ),
    );
    let nginx = start_nginx(d, &blocks, &edge_sock);
    let reqs: Vec<(String, String)> = (0..4)
        .map(|i| ("/run?hang_ms=4000".to_string(), trace_id(1, i)))
        .collect();
    assert_eq!(post_all(&edge_sock, &reqs), vec![504; 4]);
    agent.wait_idle();
    drop(nginx);

    let edge = read_log(&edge_log, "edge", 0);
    let inner = read_log(&inner_log, "inner", 1);
    // What nginx wrote: the edge got the inner's 504 as a response (its
    // header time is set), the inner gave up itself (no header).
    let header = |g: &GatewayRecord| g.upstream_header_ms.clone();
    assert!(
        edge.iter()
            .all(|g| g.status == Some(504) && header(g).len() == 1 && header(g)[0].is_some()),
        "{edge:#?}"
    );
    assert!(
        inner
            .iter()
            .all(|g| g.status == Some(504) && header(g).iter().all(Option::is_none)),
        "{inner:#?}"
    );
    let spans = read_spans(&[&agent.spans]);
    let gw: Vec<GatewayRecord> = edge.into_iter().chain(inner).collect();
    let d = judge("two layers", gw, spans, layers(&["edge", "inner"]), |s| {
        s.trace_id.ends_with('1')
    });
    assert_eq!(d.verdicts.len(), 4, "{:#?}", d.verdicts);
    for v in &d.verdicts {
        assert_eq!(v.outcome, Outcome::GatewayTimeout);
        let g = v.gateway.as_ref().unwrap();
        assert_eq!(
            (g.source.as_str(), g.timeout_ms),
            ("inner", Some(1_500.0)),
            "{g:?}"
        );
        assert_eq!(finding(v, F::TimeoutMisaligned), None, "{:#?}", v.findings);
        let inferred = finding(v, F::GatewayTimeoutInferred).expect("the inner timeout inferred");
        assert!(
            inferred.starts_with("gateway inner read timeout inferred as 1.5 s from 4 of 4 504s"),
            "{inferred}"
        );
        assert_eq!(
            (v.root_cause.kind, v.root_cause.component.as_str()),
            (K::ToolNoTimeout, "web_search"),
            "{:?}",
            v.root_cause
        );
    }
}

#[test]
fn streams_nginx_cut_on_its_read_timeout_are_judged_without_its_conf() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let agent = Agent::start(d, "agent-api", "spans.jsonl");
    let (sock, log) = (d.join("gw.sock"), d.join("gw.log"));
    let blocks = server(
        &sock,
        &log,
        &format!(
            "proxy_pass http://127.0.0.1:{}; proxy_read_timeout 2s;",
            agent.port
        ),
    );
    let nginx = start_nginx(d, &blocks, &sock);
    let mut reqs = Vec::new();
    // Cut: 3 chunks, then a model call silent for 5 s.
    for i in 0..4 {
        reqs.push((
            "/stream?chunks=3&silence_ms=5000".to_string(),
            trace_id(2, i),
        ));
    }
    // Healthy: a 3.5 s silence with a heartbeat every 400 ms; a pause
    // shorter than the timeout; a short stream.
    reqs.push((
        "/stream?chunks=3&silence_ms=3500&beat_ms=400".into(),
        trace_id(2, 10),
    ));
    reqs.push((
        "/stream?chunks=3&silence_ms=3500&beat_ms=400".into(),
        trace_id(2, 11),
    ));
    reqs.push(("/stream?chunks=2&silence_ms=1200".into(), trace_id(2, 12)));
    reqs.push(("/stream?chunks=2&silence_ms=50".into(), trace_id(2, 13)));
    assert_eq!(post_all(&sock, &reqs), vec![200; 8]);
    agent.wait_idle();
    drop(nginx);

    let gw = read_log(&log, "gw", 0);
    let spans = read_spans(&[&agent.spans]);
    // The model call spans of every stream arrive late: a revision, with
    // the cut each stream shows already there.
    let d = judge("cut streams", gw, spans, layers(&["gw"]), |s| {
        s.name.starts_with("chat")
    });
    let cut: Vec<String> = (0..4).map(|i| trace_id(2, i)).collect();
    let mut got: Vec<&str> = d.verdicts.iter().map(|v| v.trace_id.as_str()).collect();
    got.sort_unstable();
    assert_eq!(got, cut, "only the cut streams fail: {:#?}", d.verdicts);
    for v in &d.verdicts {
        assert_eq!(v.outcome, Outcome::GatewayTimeout);
        let g = v.gateway.as_ref().unwrap();
        assert_eq!(
            (g.status, g.timeout_ms),
            (Some(200), Some(2_000.0)),
            "{g:?}"
        );
        assert_eq!(
            (v.root_cause.kind, v.root_cause.component.as_str()),
            (K::StreamIdleGap, "agent-api"),
            "{:?}",
            v.root_cause
        );
        let inferred = finding(v, F::GatewayTimeoutInferred).expect("inferred");
        assert!(
            inferred.contains("from 4 cut streams (4 of 4"),
            "{inferred}"
        );
    }
}

#[test]
fn a_service_that_answers_504_on_its_own_tool_timeout_is_a_service_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let agent = Agent::start(d, "agent-api", "spans.jsonl");
    let (sock, log) = (d.join("gw.sock"), d.join("gw.log"));
    let blocks = server(
        &sock,
        &log,
        &format!(
            "proxy_pass http://127.0.0.1:{}; proxy_read_timeout 2s;",
            agent.port
        ),
    );
    let nginx = start_nginx(d, &blocks, &sock);
    let mut reqs = Vec::new();
    for i in 0..4 {
        reqs.push(("/own504?tool_timeout_ms=400".to_string(), trace_id(3, i)));
    }
    for i in 10..13 {
        reqs.push(("/run?hang_ms=3000".to_string(), trace_id(3, i)));
    }
    assert_eq!(post_all(&sock, &reqs), vec![504; 7]);
    agent.wait_idle();
    drop(nginx);

    let gw = read_log(&log, "gw", 0);
    let spans = read_spans(&[&agent.spans]);
    let d = judge("own 504", gw, spans, layers(&["gw"]), |s| {
        s.trace_id.ends_with('2')
    });
    assert_eq!(d.verdicts.len(), 7);
    for v in &d.verdicts {
        let own = u32::from_str_radix(&v.trace_id[24..], 16).unwrap() < 10;
        // nginx's timeout is inferred from its own three 504s only.
        assert_eq!(
            v.gateway.as_ref().unwrap().timeout_ms,
            Some(2_000.0),
            "{:?}",
            v.gateway
        );
        if own {
            assert_eq!(v.outcome, Outcome::ServiceTimeout, "{}", v.trace_id);
            assert_eq!(
                (v.root_cause.kind, v.root_cause.component.as_str()),
                (K::ToolSlow, "crm_api"),
                "{:?}",
                v.root_cause
            );
        } else {
            assert_eq!(v.outcome, Outcome::GatewayTimeout, "{}", v.trace_id);
            let f = finding(v, F::GatewayTimeoutInferred).unwrap();
            assert!(f.contains("from 3 of 3 504s"), "{f}");
            assert_eq!(v.root_cause.kind, K::ToolNoTimeout, "{:?}", v.root_cause);
        }
    }
}

/// Every request of [`next_upstream`]: both tries hung on the tool.
fn next_upstream(cancel: bool, case: u32) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a = Agent::start(d, "agent-api", "a.jsonl");
    let b = Agent::start(d, "agent-api", "b.jsonl");
    let (sock, log) = (d.join("gw.sock"), d.join("gw.log"));
    let blocks = format!(
        // max_fails=0: a server that timed out stays in the group, so every
        // request tries both.
        "  upstream agents {{ server 127.0.0.1:{} max_fails=0; server 127.0.0.1:{} max_fails=0; }}\n",
        a.port, b.port
    ) + &server(
        &sock,
        &log,
        "proxy_pass http://agents; proxy_read_timeout 1s; \
        proxy_next_upstream error timeout non_idempotent;",
    );
    let nginx = start_nginx(d, &blocks, &sock);
    let path = format!("/run?hang_ms=3000&cancel={}", u8::from(cancel));
    let reqs: Vec<(String, String)> = (0..6).map(|i| (path.clone(), trace_id(case, i))).collect();
    assert_eq!(post_all(&sock, &reqs), vec![504; 6]);
    a.wait_idle();
    b.wait_idle();
    drop(nginx);

    let gw = read_log(&log, "gw", 0);
    assert!(
        gw.iter()
            .all(|g| g.upstream_addr.len() == 2 && g.upstream_status == vec![Some(504), Some(504)]),
        "{gw:#?}"
    );
    let spans = read_spans(&[&a.spans, &b.spans]);
    let d = judge("next upstream", gw, spans, layers(&["gw"]), |s| {
        s.trace_id.ends_with('4')
    });
    assert_eq!(d.verdicts.len(), 6);
    for v in &d.verdicts {
        assert_eq!(v.outcome, Outcome::GatewayTimeout);
        let g = v.gateway.as_ref().unwrap();
        // Each try waited one read timeout: 1 s, not the 2 s of both.
        assert_eq!(
            (g.upstream_tries, g.timeout_ms),
            (2, Some(1_000.0)),
            "{g:?}"
        );
        assert_eq!(
            (v.root_cause.kind, v.root_cause.component.as_str()),
            (K::ToolNoTimeout, "web_search"),
            "{}: {:#?}",
            v.trace_id,
            v.root_cause
        );
    }
}

#[test]
fn both_tries_of_a_next_upstream_retry_hung_on_a_tool_with_no_timeout() {
    next_upstream(false, 4);
}

#[test]
fn both_tries_of_a_next_upstream_retry_cancelled_at_each_cut_had_no_timeout() {
    next_upstream(true, 5);
}
