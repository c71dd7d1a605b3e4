//! The services export with the real `opentelemetry-otlp` exporter: a tiny
//! OTLP/HTTP receiver (hyper + the protobuf messages) gets every span the
//! spans file has; an unreachable endpoint is counted and reported, never
//! silent. And a simulation runs in the background until stopped.

use crate::common;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use overtime_simulate::{SimulateArgs, Simulation};
use prost::Message;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Received {
    requests: usize,
    /// (service.name, span id hex)
    spans: Vec<(String, String)>,
}

/// An OTLP/HTTP protobuf receiver on 127.0.0.1; returns its port.
fn receiver(rt: &tokio::runtime::Runtime, got: Arc<Mutex<Received>>) -> u16 {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    rt.spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let got = got.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let got = got.clone();
                        async move {
                            assert_eq!(req.uri().path(), "/v1/traces");
                            assert_eq!(req.headers()["content-type"], "application/x-protobuf");
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let msg = ExportTraceServiceRequest::decode(body)
                                .expect("a protobuf ExportTraceServiceRequest");
                            let mut g = got.lock().unwrap();
                            g.requests += 1;
                            for rs in msg.resource_spans {
                                let service = rs
                                    .resource
                                    .iter()
                                    .flat_map(|r| &r.attributes)
                                    .find(|kv| kv.key == "service.name")
                                    .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                                        AnyValue::StringValue(s) => Some(s.clone()),
                                        _ => None,
                                    })
                                    .unwrap_or_default();
                                for ss in rs.scope_spans {
                                    for s in ss.spans {
                                        let id: String =
                                            s.span_id.iter().map(|b| format!("{b:02x}")).collect();
                                        g.spans.push((service.clone(), id));
                                    }
                                }
                            }
                            let out = ExportTraceServiceResponse::default().encode_to_vec();
                            Ok::<_, std::convert::Infallible>(
                                hyper::Response::builder()
                                    .header("content-type", "application/x-protobuf")
                                    .body(Full::new(Bytes::from(out)))
                                    .unwrap(),
                            )
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    port
}

#[test]
fn spans_reach_an_otlp_http_receiver_and_match_the_spans_file() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let got = Arc::new(Mutex::new(Received::default()));
    let port = receiver(&rt, got.clone());
    let endpoint = format!("--otlp-endpoint=http://127.0.0.1:{port}");
    let r = common::run("healthy", 20.0, 12, &[&endpoint]);
    let s = &r.summary;
    let g = got.lock().unwrap();
    assert!(g.requests > 0);
    assert_eq!(g.spans.len() as u64, s.spans_exported, "{s}");
    assert_eq!(s.spans_exported, s.spans_ended, "{s}");
    let services: BTreeSet<&str> = g.spans.iter().map(|(svc, _)| svc.as_str()).collect();
    assert_eq!(
        services,
        BTreeSet::from([
            "agent-api",
            "legacy-llm",
            "memory-store",
            "model-server",
            "tool-gateway"
        ])
    );
    let exported: BTreeSet<&str> = g.spans.iter().map(|(_, id)| id.as_str()).collect();
    let written: BTreeSet<&str> = r.spans.iter().map(|s| s.span_id.as_str()).collect();
    assert_eq!(
        exported, written,
        "the OTLP export and --spans-out carry the same spans"
    );
}

#[test]
fn an_unreachable_endpoint_is_counted_and_reported() {
    // Port 1 on 127.0.0.1: connection refused.
    let r = common::run(
        "tool_no_timeout",
        50.0,
        4,
        &["--otlp-endpoint", "http://127.0.0.1:1"],
    );
    let s = &r.summary;
    assert!(s.spans_ended > 0);
    assert_eq!(s.spans_exported, 0);
    assert_eq!(s.spans_lost, s.spans_ended, "{s}");
    let e = s.last_error.as_deref().unwrap_or("");
    assert!(e.contains("OTLP export"), "{e}");
    assert!(s.to_string().contains("LOST"), "{s}");
    // The spans file is complete all the same.
    assert_eq!(s.spans_written, s.spans_ended);
}

#[test]
fn a_background_simulation_runs_until_stopped() {
    let _one = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let truth = dir.path().join("truth.jsonl");
    let args = SimulateArgs::from_flags([
        "--scenario",
        "mix",
        "--incident",
        "tool_no_timeout",
        "--incident-after",
        "300ms",
        "--duration",
        "0",
        "--time-scale",
        "50",
        "--rate",
        "20",
        "--no-nginx",
        "--no-otlp",
        "--quiet",
        "--access-log",
        log.to_str().unwrap(),
        "--truth",
        truth.to_str().unwrap(),
    ])
    .unwrap();
    let sim = Simulation::start(args);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!sim.is_finished(), "--duration 0 runs until stopped");
    sim.stop();
    let s = sim.join().unwrap();
    assert!(s.load.sent >= 5, "{s}");
    assert_eq!(s.access_lines, Some(s.load.sent), "{s}");
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(&truth)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len() as u64, s.load.sent);
    assert!(rows.iter().any(|r| r["scenario"] == "healthy"));
    assert!(
        rows.iter().any(|r| r["scenario"] == "tool_no_timeout"),
        "the incident was injected"
    );
}
