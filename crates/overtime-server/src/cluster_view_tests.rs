//! Which replayed gateway lines the peers' word settles.

use super::*;
use overtime_diagnose::DiagnoseConfig;
use overtime_diagnose::live::LiveDiagnoser;
use overtime_model::{GatewayRecord, SpanRecord};

const T: &str = "0af7651916cd43dd8448eb211c80319c";

fn line(rid: &str, status: u16) -> GatewayRecord {
    GatewayRecord {
        source: "edge".into(),
        line: 1,
        status: Some(status),
        request_time_ms: Some(10_000.0),
        request_id: Some(rid.into()),
        time_us: 10_000_000,
        ..Default::default()
    }
}

/// A view whose one peer judged `lines` and `spans` (alone, at once).
fn view_of(lines: Vec<GatewayRecord>, spans: Vec<SpanRecord>) -> ClusterView {
    let mut peer = LiveDiagnoser::new(DiagnoseConfig::default(), 0, 600_000, 100);
    peer.add_gateway(lines, 0);
    peer.add_spans(spans, 0);
    peer.tick(20_000_000);
    let mut mirror = PeerMirror::default();
    mirror.apply(peer.shared_since(0));
    let mut view = ClusterView::default();
    view.mirrors
        .insert("http://peer".into(), ("peer".into(), 1, mirror));
    view
}

#[test]
fn a_line_a_peer_judged_alone_as_failing_is_judged_again() {
    let rid = "23f1b586415451e9492f0d9124e9d971";
    let view = view_of(vec![line(rid, 504)], Vec::new());
    assert!(view.told_trace(rid), "the peer told of it");
    assert!(!view.told_line(rid, &view.told_joined()));
}

#[test]
fn a_line_that_joined_its_failing_trace_or_was_healthy_alone_is_settled() {
    let rid = "23f1b586415451e9492f0d9124e9d971";
    let mut root = SpanRecord::new(T, "b7ad6b7169203331", "agent", "POST /chat", 0, 11_000_000);
    root.request_id = Some(rid.into());
    let joined = view_of(vec![line(rid, 504)], vec![root]);
    assert!(joined.told_joined().contains(rid));
    assert!(joined.told_line(rid, &joined.told_joined()));
    let healthy = view_of(vec![line("r-7", 200)], Vec::new());
    assert!(healthy.told_line("r-7", &healthy.told_joined()));
    // Nobody told of it: judged here.
    assert!(!healthy.told_line("r-8", &healthy.told_joined()));
}
