//! Incident C's traffic split between two collectors as a Kafka consumer
//! group splits it (by trace): after each has fetched the other's traces,
//! both report the same incidents as one collector given all the traffic,
//! and exactly one of them speaks for each fingerprint — the survivor,
//! once the other stops answering.

use super::cluster::incident_c;
use arrow::array::{Array, AsArray, BooleanArray};
use arrow::compute::filter_record_batch;
use arrow::record_batch::RecordBatch;
use overtime_model::{RecordSink, Table};
use overtime_server::pipeline::DiagnosingSink;
use overtime_server::{AppState, router};
use overtime_server::{ClusterConfig, Peers, refresh_peers};
use overtime_store::{Store, StoreConfig};
use std::collections::HashMap;
use std::sync::Arc;

/// The rows of `b` whose trace (by `trace_id`, else by the request id a
/// trace was joined by) falls in half `half` of the trace ids.
fn half(b: &RecordBatch, half: bool, by_request: &HashMap<String, String>) -> RecordBatch {
    let ids = b
        .column_by_name("trace_id")
        .unwrap()
        .as_string::<i32>()
        .clone();
    let rids = b
        .column_by_name("request_id")
        .map(|c| c.as_string::<i32>().clone());
    let mask: BooleanArray = (0..b.num_rows())
        .map(|i| {
            let id = if ids.is_null(i) {
                rids.as_ref()
                    .filter(|r| !r.is_null(i))
                    .and_then(|r| by_request.get(r.value(i)))
                    .cloned()
                    .unwrap_or_default()
            } else {
                ids.value(i).to_string()
            };
            Some(id.bytes().map(u32::from).sum::<u32>() % 2 == u32::from(half))
        })
        .collect();
    filter_record_batch(b, &mask).unwrap()
}

async fn collector(
    listener: tokio::net::TcpListener,
    id: &str,
    peers: Vec<String>,
    dirs: &(tempfile::TempDir, tempfile::TempDir),
) -> Arc<AppState> {
    let store = Store::open(StoreConfig {
        data_dir: dirs.0.path().join(id),
        url: Some(format!("file://{}", dirs.1.path().display())),
        collector_id: Some(id.into()),
        flush_interval_ms: 0,
        retention_age_hours: None,
        ..Default::default()
    })
    .unwrap();
    let cfg = ClusterConfig {
        peers,
        peer_timeout_ms: 2_000,

        ..Default::default()
    };
    let state = Arc::new(AppState {
        peers: Arc::new(Peers::new(&cfg, None, id)),
        ..AppState::with_defaults(store)
    });
    let app = router(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    state
}

fn feed(s: &Arc<AppState>, gw: RecordBatch, spans: RecordBatch) {
    let sink = DiagnosingSink { state: s.clone() };
    sink.write(Table::GatewayRequests, gw, None).unwrap();
    sink.write(Table::Spans, spans, None).unwrap();
}

fn json(reports: &[overtime_diagnose::IncidentReport]) -> serde_json::Value {
    serde_json::to_value(reports).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_collectors_with_half_the_traffic_each_report_what_one_with_all_of_it_reports() {
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let bind = || tokio::net::TcpListener::bind("127.0.0.1:0");
    let (la, lb, lall) = (
        bind().await.unwrap(),
        bind().await.unwrap(),
        bind().await.unwrap(),
    );
    let urls = vec![
        format!("http://{}", la.local_addr().unwrap()),
        format!("http://{}", lb.local_addr().unwrap()),
    ];
    let a = collector(la, "collector-a", urls.clone(), &dirs).await;
    let b = collector(lb, "collector-b", urls.clone(), &dirs).await;
    let all = collector(lall, "collector-all", vec![], &dirs).await;

    let (gw, spans) = incident_c();
    // Which request id each trace was joined by, to split like a producer
    // keying by trace.
    let d = overtime_diagnose::diagnose_batches(
        std::slice::from_ref(&gw),
        std::slice::from_ref(&spans),
        &overtime_diagnose::DiagnoseConfig {
            all_verdicts: true,
            ..Default::default()
        },
    )
    .unwrap();
    let by_request: HashMap<String, String> = d
        .verdicts
        .iter()
        .filter_map(|v| Some((v.request_id.clone()?, v.trace_id.clone())))
        .collect();
    feed(
        &a,
        half(&gw, false, &by_request),
        half(&spans, false, &by_request),
    );
    feed(
        &b,
        half(&gw, true, &by_request),
        half(&spans, true, &by_request),
    );
    feed(&all, gw, spans);
    // The collectors' periodic refresh comes before their verdicts: each
    // infers the gateway's timeout from every collector's 504s.
    refresh_peers(&a).await;
    refresh_peers(&b).await;
    for s in [&a, &b, &all] {
        overtime_server::pipeline::tick(s);
    }

    let whole = all.incidents();
    assert!(!whole.is_empty(), "incident C makes an incident");
    let own_a = a.live.lock().unwrap().incidents();
    assert_ne!(json(&own_a), json(&whole), "each half alone reports less");

    refresh_peers(&a).await;
    refresh_peers(&b).await;
    assert_eq!(json(&a.incidents()), json(&whole));
    assert_eq!(json(&b.incidents()), json(&whole));
    // And through the API, from either collector.
    for url in &urls {
        let r = reqwest::get(format!("{url}/api/incidents")).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        let listed = v["incidents"].as_array().unwrap_or_else(|| panic!("{v}"));
        assert_eq!(listed.len(), whole.len(), "{v}");
        assert_eq!(listed[0]["trace_count"], whole[0].trace_count, "{v}");
    }

    // One speaker per fingerprint.
    for r in &whole {
        assert!(
            a.owns(&r.fingerprint) ^ b.owns(&r.fingerprint),
            "{}",
            r.fingerprint
        );
    }
    // b stops answering: a speaks for every fingerprint, with b's last
    // traces gone from its view.
    // A port held closed: refused, and nobody else's meanwhile.
    let closed = overtime_test_support::ports::ClosedPort::new();
    let dead = closed.url();
    let a_alone = collector(
        bind().await.unwrap(),
        "collector-a2",
        vec![dead.clone()],
        &dirs,
    )
    .await;
    refresh_peers(&a_alone).await;
    for r in &whole {
        assert!(a_alone.owns(&r.fingerprint));
    }
    let view = a_alone.cluster.lock().unwrap();
    assert_eq!(view.report.unanswered.len(), 1);
    assert_eq!(view.report.unanswered[0].peer, dead);
}
