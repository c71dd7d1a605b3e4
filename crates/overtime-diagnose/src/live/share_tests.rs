//! Tests of `share.rs`: mirrors fed deltas, and merged views counting
//! each trace once.

use super::*;
use crate::DiagnoseConfig;
use overtime_model::{GatewayRecord, SpanRecord, Stage};

fn request(i: u64, status: u16, at_s: i64) -> GatewayRecord {
    GatewayRecord {
        source: "edge".into(),
        status: Some(status),
        request_time_ms: Some(1_000.0),
        request_id: Some(format!("r{i}")),
        trace_id: Some(format!("{i:032x}")),
        time_us: at_s * 1_000_000,
        ..Default::default()
    }
}

/// The trace ids a diagnoser's incidents would count, as (id, failed).
fn ids(t: &SharedTraces) -> Vec<(String, bool)> {
    let mut v: Vec<(String, bool)> = t
        .summaries
        .iter()
        .map(|s| (s.trace_id.clone(), s.outcome != Outcome::Ok))
        .collect();
    v.sort();
    v
}

fn own(d: &LiveDiagnoser) -> SharedTraces {
    let mut m = PeerMirror::default();
    m.apply(d.shared_since(0));
    m.traces()
}

#[test]
fn a_mirror_fed_deltas_holds_what_the_diagnoser_holds_through_evictions() {
    // Room for 4 traces: older ones are evicted as new ones come.
    let mut peer = LiveDiagnoser::new(DiagnoseConfig::default(), 0, 600_000, 4);
    let mut mirror = PeerMirror::default();
    for round in 0..5u64 {
        let recs = (0..3).map(|k| {
            let i = round * 3 + k;
            request(i, if i % 2 == 0 { 504 } else { 200 }, 100 + i as i64)
        });
        peer.add_gateway(recs.collect(), (200 + round as i64) * 1_000_000);
        peer.tick((300 + round as i64) * 1_000_000);
        let delta = peer.shared_since(mirror.cursor());
        assert!(round == 0 || !delta.full);
        mirror.apply(delta);
        assert_eq!(ids(&mirror.traces()), ids(&own(&peer)), "round {round}");
        assert_eq!(mirror.traces().verdicts.len(), own(&peer).verdicts.len());
    }
}

#[test]
fn a_cursor_from_before_a_restart_gets_the_whole_state() {
    let mut peer = LiveDiagnoser::new(DiagnoseConfig::default(), 0, 600_000, 100);
    peer.add_gateway(vec![request(1, 504, 100)], 200_000_000);
    peer.tick(300_000_000);
    let d = peer.shared_since(1_000);
    assert!(d.full);
    let mut mirror = PeerMirror::default();
    mirror.apply(d);
    assert_eq!(ids(&mirror.traces()), ids(&own(&peer)));
    assert_eq!(mirror.traces().verdicts.len(), 1);
}

/// A request whose minute went to a tool with no timeout, with its
/// gateway 504 and spans.
fn stuck_on_a_tool(d: &mut LiveDiagnoser, i: u64) {
    let (start, end) = (
        100_000_000 + i as i64 * 1_000_000,
        160_000_000 + i as i64 * 1_000_000,
    );
    let tid = format!("{i:032x}");
    let root = SpanRecord::new(
        &tid,
        &format!("{:016x}", 2 * i + 1),
        "agent",
        "POST /chat",
        start,
        end,
    );
    let mut tool = SpanRecord::new(
        &tid,
        &format!("{:016x}", 2 * i + 2),
        "agent",
        "crm_api",
        start + 1_000,
        end,
    );
    tool.parent_span_id = Some(root.span_id.clone());
    tool.stage = Stage::Tool;
    tool.tool = Some("crm_api".into());
    let g = GatewayRecord {
        request_time_ms: Some(60_000.0),
        time_us: end,
        ..request(i, 504, 0)
    };
    d.add_gateway(vec![g], end);
    d.add_spans(vec![root, tool], end);
}

#[test]
fn merged_incidents_count_a_trace_both_collectors_hold_once() {
    let mut a = LiveDiagnoser::new(DiagnoseConfig::default(), 0, 600_000, 100);
    let mut b = LiveDiagnoser::new(DiagnoseConfig::default(), 0, 600_000, 100);
    for d in [&mut a, &mut b] {
        for i in 1..=6 {
            stuck_on_a_tool(d, i);
        }
        d.tick(300_000_000);
    }
    let alone = a.incidents();
    assert_eq!(alone.len(), 1);
    assert_eq!(alone[0].trace_count, 6);
    let merged = a.incidents_with(&[own(&b)]);
    assert_eq!(
        serde_json::to_value(&alone).unwrap(),
        serde_json::to_value(&merged).unwrap()
    );
}

#[test]
fn every_collector_counts_a_split_trace_by_its_most_complete_holder() {
    // a saw only the gateway's 504 of trace 7 (it died before the
    // spans came); b saw all of it. Whichever asks, the trace counts
    // once with b's whole-trace verdict: one incident of 7.
    let mut a = LiveDiagnoser::new(DiagnoseConfig::default(), 0, 600_000, 100);
    let mut b = LiveDiagnoser::new(DiagnoseConfig::default(), 0, 600_000, 100);
    for i in 1..=6 {
        stuck_on_a_tool(&mut b, i);
    }
    stuck_on_a_tool(&mut b, 7);
    let g = GatewayRecord {
        request_time_ms: Some(60_000.0),
        time_us: 167_000_000,
        ..request(7, 504, 0)
    };
    a.add_gateway(vec![g], 167_000_000);
    for d in [&mut a, &mut b] {
        d.tick(300_000_000);
    }
    let from_a = a.incidents_with(&[own(&b)]);
    let from_b = b.incidents_with(&[own(&a)]);
    assert_eq!(
        serde_json::to_value(&from_a).unwrap(),
        serde_json::to_value(&from_b).unwrap()
    );
    assert_eq!(from_a.len(), 1, "{from_a:#?}");
    assert_eq!(from_a[0].trace_count, 7);
}

#[test]
fn two_holders_with_equal_records_are_ordered_by_content_not_by_who_asks() {
    // Same trace id, records, end and revision; different content.
    let mut a = LiveDiagnoser::new(DiagnoseConfig::default(), 0, 600_000, 100);
    let mut b = LiveDiagnoser::new(DiagnoseConfig::default(), 0, 600_000, 100);
    a.add_gateway(vec![request(9, 504, 100)], 200_000_000);
    b.add_gateway(vec![request(9, 502, 100)], 200_000_000);
    for d in [&mut a, &mut b] {
        d.tick(300_000_000);
    }
    let (ta, tb) = (own(&a), own(&b));
    let held = |t: &SharedTraces| {
        let (r, v) = &t.verdicts[0];
        (t.summaries[0].clone(), *r, v.clone())
    };
    let ((sa, ra, va), (sb, rb, vb)) = (held(&ta), held(&tb));
    assert_eq!((sa.records, sa.end_us, ra), (sb.records, sb.end_us, rb));
    let ha = Held {
        summary: &sa,
        verdict: Some((ra, &va)),
    };
    let hb = Held {
        summary: &sb,
        verdict: Some((rb, &vb)),
    };
    // Exactly one of them wins, whichever order they are met in.
    assert_ne!(most_complete(&ha, &hb), most_complete(&hb, &ha));
}

#[test]
fn a_504_line_two_collectors_read_counts_once_for_the_inferred_timeout() {
    // a read lines 1–4 and died before flushing 3 and 4; b, the next
    // owner of the partition, read 3 and 4 again, then 5. a's last
    // state stays in b's view while it is down.
    let line = |i: u64| GatewayRecord {
        line: i,
        request_time_ms: Some(10_000.0 + i as f64),
        ..request(i, 504, 100 + i as i64)
    };
    let mut a = LiveDiagnoser::new(DiagnoseConfig::default(), 0, 600_000, 100);
    let mut b = LiveDiagnoser::new(DiagnoseConfig::default(), 0, 600_000, 100);
    a.add_gateway((1..=4).map(line).collect(), 200_000_000);
    b.add_gateway((3..=5).map(line).collect(), 200_000_000);
    b.set_peer_samples(&[own(&a)]);
    let t = &b.layer_timeouts()["edge"];
    assert_eq!((t.ms, t.cluster, t.of), (10_000.0, 5, 5));
}

#[test]
fn a_line_judged_apart_under_its_request_id_is_not_a_request_of_its_own() {
    // A holds the whole request (its line names its request id; its
    // spans), B only the line, filed under the request id: after a
    // collector died, B judged it before the spans could be found.
    let mut a = LiveDiagnoser::new(DiagnoseConfig::default(), 0, 600_000, 100);
    stuck_on_a_tool(&mut a, 7);
    a.tick(400_000_000);
    let mut b = LiveDiagnoser::new(DiagnoseConfig::default(), 0, 600_000, 100);
    let line = GatewayRecord {
        trace_id: None,
        request_time_ms: Some(60_000.0),
        time_us: 167_000_000,
        ..request(7, 504, 0)
    };
    b.add_gateway(vec![line], 167_000_000);
    b.tick(400_000_000);
    assert_eq!(own(&b).verdicts.len(), 1, "B judged the line alone");
    for (here, there) in [(&a, own(&b)), (&b, own(&a))] {
        let merged = here.verdicts_with(std::slice::from_ref(&there));
        let ids: Vec<&str> = merged.iter().map(|(_, v)| v.trace_id.as_str()).collect();
        assert_eq!(
            ids,
            [format!("{:032x}", 7)],
            "one request, under its trace id"
        );
        let incidents = here.incidents_with(std::slice::from_ref(&there));
        let total: usize = incidents.iter().map(|i| i.trace_count).sum();
        assert_eq!(total, 1);
    }
}
