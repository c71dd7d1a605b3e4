//! Every failing request judged from the evidence there is (issue: cut
//! streams without nginx.conf, per-layer truth): a stream the gateway cut
//! is seen from its spans and the line together, a layer's read timeout is
//! inferred from the cuts it made itself (504s and cut streams), and a 504
//! a layer only passed on — an inner layer's, the service's own — is not
//! that layer's timeout.

use crate::common;
use common::*;
use overtime_diagnose::{DiagnoseConfig, LayerConfig};
use overtime_model::{
    FindingKind as F, Outcome, RootCauseKind as K, SpanStatus, Stage, gateway_records,
};
use overtime_parse::nginx::{GatewayParser, LogFormat};

/// A streamed answer of `agent-api`: chunks (ASGI `http send` spans) until
/// `last_chunk_ms`, then `silence_ms` without one; the gateway logged `200`
/// at the end. `left`: the spans show the caller going away there (an
/// `http.disconnect` receive), as when nginx cut the stream; otherwise the
/// answer finished normally (a last, empty `http send` at the end).
fn stream(n: u32, at_ms: i64, last_chunk_ms: f64, silence_ms: f64, left: bool) -> Builder {
    let end = last_chunk_ms + silence_ms;
    let mut b = Builder::new(n).at(at_ms);
    b.gateway(200, end).body_bytes_sent = Some(310);
    let r = b.root("agent-api", 1.0, end + 2.0);
    r.kind = Some("server".into());
    r.name = "POST /v1/agent/stream".into();
    r.http_status = Some(200);
    let mut t = 60.0;
    let mut i = 10;
    while t <= last_chunk_ms {
        send(&mut b, i, t);
        t += 100.0;
        i += 1;
    }
    send(&mut b, i, last_chunk_ms);
    let chat = b.child("8", "agent-api", Stage::Llm, last_chunk_ms + 1.0, end + 1.0);
    chat.model = Some("deepseek-v4".into());
    chat.name = "chat deepseek-v4".into();
    if left {
        chat.status = SpanStatus::Cancelled;
        let d = b.child("9", "agent-api", Stage::Other, 2.0, end + 2.0);
        d.name = "POST /v1/agent/stream http receive".into();
        d.attributes
            .push(("asgi.event.type".into(), "http.disconnect".into()));
    } else {
        send(&mut b, 99, end - 1.0);
    }
    b
}

fn send(b: &mut Builder, i: u32, at: f64) {
    let s = b.child(&i.to_string(), "agent-api", Stage::Other, at, at + 0.2);
    s.name = "POST /v1/agent/stream http send".into();
    s.attributes
        .push(("asgi.event.type".into(), "http.response.body".into()));
}

fn no_conf() -> DiagnoseConfig {
    DiagnoseConfig::default()
}

fn finding(v: &overtime_model::Verdict, k: F) -> Option<String> {
    v.findings
        .iter()
        .find(|f| f.kind == k)
        .map(|f| f.summary.clone())
}

#[test]
fn a_cut_stream_gets_a_verdict_from_its_spans_with_no_timeout_known() {
    // 3 s of silence: less than the 5 s a silence alone needs.
    let d = run(vec![stream(60, 0, 400.0, 3_002.0, true)], &no_conf());
    let v = only(&d);
    assert_eq!(v.outcome, Outcome::GatewayTimeout);
    assert_eq!(v.gateway.as_ref().unwrap().status, Some(200));
    assert_eq!(v.root_cause.kind, K::StreamIdleGap, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "agent-api");
    assert_evidence(v, "silent for 3.0 s");
}

#[test]
fn cut_streams_alone_infer_the_layers_read_timeout_and_say_so() {
    let streams = [3_001.0, 3_004.0, 3_002.5]
        .into_iter()
        .enumerate()
        .map(|(i, s)| stream(61 + i as u32, i as i64 * 10_000, 400.0, s, true))
        .collect();
    let d = run(streams, &no_conf());
    assert_eq!(d.verdicts.len(), 3);
    for v in &d.verdicts {
        assert_eq!(v.gateway.as_ref().unwrap().timeout_ms, Some(3_000.0));
        let f = finding(v, F::GatewayTimeoutInferred).expect("inferred");
        assert!(f.contains("3.0 s from 3 cut streams (3 of 3"), "{f}");
        assert_eq!(v.root_cause.kind, K::StreamIdleGap);
    }
}

#[test]
fn cut_streams_and_504s_infer_one_timeout_together() {
    let mut all = vec![
        stream(70, 0, 400.0, 3_001.0, true),
        stream(71, 10_000, 400.0, 3_003.0, true),
    ];
    for (i, rt) in [3_004.0, 3_002.0].into_iter().enumerate() {
        let mut b = Builder::new(72 + i as u32).at(20_000 + i as i64 * 10_000);
        b.gateway(504, rt);
        b.root("agent-api", 1.0, rt + 500.0);
        b.tool("2", "agent-api", "web_search", 5.0, rt + 400.0);
        all.push(b);
    }
    let d = run(all, &no_conf());
    assert_eq!(d.verdicts.len(), 4);
    for v in &d.verdicts {
        let f = finding(v, F::GatewayTimeoutInferred).expect("inferred");
        assert!(
            f.contains("3.0 s from 2 504s and 2 cut streams (4 of 4"),
            "{f}"
        );
    }
}

#[test]
fn a_stream_whose_client_left_before_the_read_timeout_is_not_a_cut() {
    // The timeout is 3 s: a caller that went away after 1.2 s of silence
    // closed the stream itself.
    let d = run(
        vec![stream(80, 0, 400.0, 1_200.0, true)],
        &cfg_with_timeout(3_000.0),
    );
    assert!(d.verdicts.is_empty(), "{:#?}", d.verdicts);
}

/// Healthy streams: heartbeats through a 6 s wait; a short stream; a long
/// pause that ended in the last chunk; a stream whose model span carries
/// its chunks as events, the last 2 s before the end, and no disconnect.
fn healthy() -> Vec<Builder> {
    let mut beats = stream(90, 0, 400.0, 6_000.0, false);
    for k in 1..12 {
        send(&mut beats, 200 + k, 400.0 + k as f64 * 500.0);
    }
    let short = stream(91, 10_000, 300.0, 40.0, false);
    let pause = stream(92, 20_000, 400.0, 4_000.0, false);
    let mut events = Builder::new(93).at(30_000);
    events.gateway(200, 4_000.0);
    events.root("agent-api", 1.0, 3_999.0).kind = Some("server".into());
    events
        .child("2", "agent-api", Stage::Llm, 5.0, 3_990.0)
        .model = Some("deepseek-v4".into());
    for t in [100.0, 600.0, 1_100.0, 2_000.0] {
        events.event("2", "chunk", t);
    }
    vec![beats, short, pause, events]
}

#[test]
fn healthy_streams_are_never_called_cut() {
    let alone = run(healthy(), &no_conf());
    assert!(alone.verdicts.is_empty(), "{:#?}", alone.verdicts);
    // Beside three cut streams that make a 3 s timeout known.
    let mut all = healthy();
    for i in 0..3 {
        all.push(stream(
            94 + i,
            40_000 + i as i64 * 10_000,
            400.0,
            3_001.0 + i as f64,
            true,
        ));
    }
    let d = run(all, &no_conf());
    let failed: Vec<String> = d.verdicts.iter().map(|v| v.trace_id.clone()).collect();
    let cut: Vec<String> = (94..97).map(trace_id).collect();
    assert_eq!(failed, cut);
    assert!(
        d.verdicts
            .iter()
            .all(|v| v.root_cause.kind == K::StreamIdleGap)
    );
}

/// The issue's lines: three requests, each logged by the edge (which got
/// the inner layer's 504 as a response: `uht` set) and by the inner layer
/// (which gave up itself: `uht="-"`).
const LAYER_FORMAT: &str = r#"$msec $status rt=$request_time uht="$upstream_header_time" urt="$upstream_response_time" us="$upstream_status" rid=$request_id tp=$http_traceparent"#;

fn layer_lines(edge: bool) -> String {
    (0..3)
        .map(|i| {
            let t = trace_id(100 + i);
            let at = 1_764_410_400 + i * 10;
            if edge {
                format!("{at}.005 504 rt=3.004 uht=\"3.003\" urt=\"3.003\" us=\"504\" rid=r{i} tp=00-{t}-00f067aa0ba902b7-01\n")
            } else {
                format!("{at}.003 504 rt=3.002 uht=\"-\" urt=\"3.001\" us=\"504\" rid=r{i} tp=00-{t}-00f067aa0ba902b7-01\n")
            }
        })
        .collect()
}

#[test]
fn an_edge_that_relayed_the_inner_layers_504s_has_no_timeout_inferred_from_them() {
    let mut gw = Vec::new();
    for (layer, name) in ["edge", "inner"].into_iter().enumerate() {
        let mut p = GatewayParser::new(
            LogFormat::compile(LAYER_FORMAT).unwrap(),
            name,
            layer as u32,
        );
        p.push_bytes(layer_lines(layer == 0).as_bytes(), 1);
        let (good, bad) = p.finish_records();
        assert!(bad.is_empty(), "{bad:?}");
        gw.extend(gateway_records(&good).unwrap());
    }
    let cfg = DiagnoseConfig {
        layers: ["edge", "inner"]
            .map(|n| LayerConfig {
                name: n.into(),
                read_timeout_ms: None,
            })
            .to_vec(),
        ..Default::default()
    };
    let d = overtime_diagnose::diagnose(gw, vec![], &cfg);
    assert_eq!(d.verdicts.len(), 3);
    for v in &d.verdicts {
        assert_eq!(v.outcome, Outcome::GatewayTimeout);
        let g = v.gateway.as_ref().unwrap();
        assert_eq!((g.source.as_str(), g.timeout_ms), ("inner", Some(3_000.0)));
        assert_eq!(finding(v, F::TimeoutMisaligned), None, "{:#?}", v.findings);
        let f = finding(v, F::GatewayTimeoutInferred).unwrap();
        assert!(
            f.starts_with("gateway inner read timeout inferred as 3.0 s from 3 of 3 504s"),
            "{f}"
        );
    }
}

#[test]
fn a_504_the_service_answered_itself_is_a_service_timeout() {
    // No `$upstream_header_time` in the log: the server span's own 504,
    // sent well before the gateway's 3 s, says who gave up.
    let mut b = Builder::new(110);
    b.gateway(504, 1_010.0);
    let r = b.root("agent-api", 1.0, 1_005.0);
    r.kind = Some("server".into());
    r.http_status = Some(504);
    r.status = SpanStatus::Error;
    let t = b.tool("2", "agent-api", "crm_api", 5.0, 1_000.0);
    t.timeout_ms = Some(1_000.0);
    t.status = SpanStatus::Timeout;
    let v = verdict(b, 3_000.0);
    assert_eq!(v.outcome, Outcome::ServiceTimeout);
    assert_eq!(
        (v.root_cause.kind, v.root_cause.component.as_str()),
        (K::ToolSlow, "crm_api")
    );
}

#[test]
fn a_relayed_504_whose_service_ran_on_is_a_gateways_timeout() {
    // The layer logged got a 504 from upstream, but the service ran on
    // past it: a gateway in between (whose log is not here) gave up.
    let mut b = Builder::new(111);
    b.gateway(504, 3_004.0).upstream_header_ms = vec![Some(3_003.0)];
    b.root("agent-api", 1.0, 6_000.0).kind = Some("server".into());
    b.tool("2", "agent-api", "web_search", 5.0, 5_990.0);
    let d = run(vec![b], &no_conf());
    let v = only(&d);
    assert_eq!(v.outcome, Outcome::GatewayTimeout);
    assert_eq!(v.root_cause.kind, K::ToolNoTimeout);
}

#[test]
fn a_504_the_service_sent_after_the_gateways_own_is_the_gateways() {
    // nginx gave up at 3 s; the service's own timeout answered 504 half a
    // second later, to a connection nginx had already closed.
    let mut b = Builder::new(112);
    b.gateway(504, 3_000.0);
    let r = b.root("agent-api", 1.0, 3_500.0);
    r.kind = Some("server".into());
    r.http_status = Some(504);
    let t = b.tool("2", "agent-api", "crm_api", 5.0, 3_490.0);
    t.timeout_ms = Some(3_480.0);
    t.status = SpanStatus::Timeout;
    let v = verdict(b, 3_000.0);
    assert_eq!(v.outcome, Outcome::GatewayTimeout);
}

/// An express-like streamed answer (no chunk spans, no events): nginx got
/// the headers at 4 ms and held the stream 3 s; the service's server span
/// ends `server_end_ms` and a tool call under it ends `call_end_ms` with
/// `status` — Node aborts the call on the socket's close, before or after
/// it ends the server span.
fn held(n: u32, server_end_ms: f64, call_end_ms: f64, status: SpanStatus) -> Builder {
    let mut b = Builder::new(n);
    let g = b.gateway(200, 3_001.0);
    g.upstream_header_ms = vec![Some(4.0)];
    g.body_bytes_sent = Some(248);
    let r = b.root("agent-api", 0.5, server_end_ms);
    r.kind = Some("server".into());
    r.name = "POST /v1/agent/stream".into();
    r.http_status = Some(200);
    let t = b.child("2", "agent-api", Stage::Tool, 150.0, call_end_ms);
    t.kind = Some("client".into());
    t.name = "GET".into();
    t.peer = Some("127.0.0.1:40913".into());
    t.status = status;
    b
}

#[test]
fn a_held_stream_is_cut_whichever_of_the_answer_and_its_aborted_call_ended_first() {
    for (n, server_end, call_end) in [(140, 3_000.9, 3_002.5), (141, 3_000.9, 3_000.8)] {
        let v = verdict(held(n, server_end, call_end, SpanStatus::Error), 3_000.0);
        assert_eq!(v.root_cause.kind, K::StreamIdleGap, "{:?}", v.root_cause);
        assert_eq!(v.outcome, Outcome::GatewayTimeout);
    }
    // OpenInference marks a completed operation OK: one left UNSET as the
    // answer ended was aborted with it.
    let mut b = held(145, 3_000.9, 3_000.6, SpanStatus::Unset);
    b.spans[1]
        .attributes
        .push(("openinference.span.kind".into(), "LLM".into()));
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::StreamIdleGap, "{:?}", v.root_cause);
}

#[test]
fn a_long_stream_whose_last_call_finished_well_before_its_end_is_not_cut() {
    for (n, call_end) in [(142, 3_000.8), (143, 2_990.0)] {
        let d = run(
            vec![held(n, 3_000.9, call_end, SpanStatus::Ok)],
            &cfg_with_timeout(3_000.0),
        );
        assert!(d.verdicts.is_empty(), "{:#?}", d.verdicts);
    }
    // UNSET from an instrumentation that never says OK says nothing.
    let d = run(
        vec![held(146, 3_000.9, 3_000.8, SpanStatus::Unset)],
        &cfg_with_timeout(3_000.0),
    );
    assert!(d.verdicts.is_empty(), "{:#?}", d.verdicts);
    // Aborted, but long before the answer ended: the service answered on.
    let d = run(
        vec![held(144, 3_000.9, 2_000.0, SpanStatus::Error)],
        &cfg_with_timeout(3_000.0),
    );
    assert!(d.verdicts.is_empty(), "{:#?}", d.verdicts);
}
