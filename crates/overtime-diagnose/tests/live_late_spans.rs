//! A line keyed by its request id alone, whose spans another collector
//! reads only after the line's first lookup (a dead collector's
//! partitions are read again by different survivors, each when the group
//! gets to it): judged alone at first, it is looked up again — once more,
//! or until the group's takeover has passed — and,
//! its trace's rows pulled, counted in its trace — the line judged alone
//! withdrawn.

use overtime_diagnose::DiagnoseConfig;
use overtime_diagnose::live::LiveDiagnoser;
use overtime_model::{GatewayRecord, SpanRecord};

const T: &str = "0af7651916cd43dd8448eb211c80319c";
const RID: &str = "206304bce7d201778e160cfeded5f404";

/// One failing request, under its trace id: the line judged alone withdrawn.
fn assert_counted_in_its_trace(l: &LiveDiagnoser) {
    let verdicts: Vec<(String, Option<String>)> = l
        .verdicts()
        .map(|(_, v)| (v.trace_id.clone(), v.request_id.clone()))
        .collect();
    assert_eq!(
        verdicts,
        [(T.to_string(), Some(RID.to_string()))],
        "one failing request, under its trace id, the line judged alone withdrawn"
    );
}

/// The 504 line of the request, keyed by its request id alone.
fn line_504() -> GatewayRecord {
    GatewayRecord {
        source: "edge".into(),
        line: 1,
        status: Some(504),
        request_time_ms: Some(10_000.0),
        request_id: Some(RID.into()),
        time_us: 10_000_000,
        ..Default::default()
    }
}

#[test]
fn a_line_judged_alone_is_looked_up_again_and_joins_its_trace_when_its_spans_come_later() {
    let line = line_504();
    let mut l = LiveDiagnoser::new(DiagnoseConfig::default(), 2_000, 600_000, 100)
        .with_failure_grace(1_000)
        .with_peers();
    l.add_gateway(vec![line], 0);
    // The first look finds no spans anywhere: judged alone.
    assert_eq!(l.orphans_due(2_000_000)[0].request_ids, [RID]);
    let alone = l.tick(8_000_000);
    assert_eq!(alone.len(), 1);
    assert_eq!(alone[0].verdict.trace_id, RID);
    assert!(l.orphans_due(3_000_000).is_empty(), "not again at once");
    // Twice the grace on, once more: the spans are there now.
    let again = l.orphans_due(8_000_000);
    assert_eq!(again.len(), 1, "a second look");
    assert!(l.orphans_due(20_000_000).is_empty(), "and no third");
    l.orphan_found(RID, T);
    assert_eq!(l.orphans_to_pull(8_000_000), [T]);
    let mut root = SpanRecord::new(T, "b7ad6b7169203331", "agent", "POST /chat", 0, 11_000_000);
    root.request_id = Some(RID.into());
    assert!(l.adopt_rows(T, Vec::new(), vec![root], 9_000_000) > 0);
    l.tick(20_000_000);
    assert_counted_in_its_trace(&l);
}

/// The spans' collector died before reading them; its partitions' new
/// owner reads them after the group's takeover, long after the line's
/// second look. The line judged alone is looked up until the takeover has
/// passed, joins its trace when they are found, and is not a request of
/// its own any more.
#[test]
fn a_line_judged_alone_is_looked_up_until_the_takeover_has_passed() {
    let line = line_504();
    let mut l = LiveDiagnoser::new(DiagnoseConfig::default(), 2_000, 600_000, 100)
        .with_failure_grace(1_000)
        .with_peers()
        .with_takeover(20_000);
    l.add_gateway(vec![line], 0);
    let mut looks = Vec::new();
    let mut judged = Vec::new();
    // Found nowhere until the spans' new owner has read them (at 18 s).
    for s in 1..=30 {
        let now = s * 1_000_000;
        judged.extend(l.tick(now).into_iter().map(|v| v.verdict.trace_id));
        if !l.orphans_due(now).is_empty() {
            looks.push(s);
            if s >= 18 {
                l.orphan_found(RID, T);
            }
        }
        for t in l.orphans_to_pull(now) {
            let mut root =
                SpanRecord::new(&t, "b7ad6b7169203331", "agent", "POST /chat", 0, 11_000_000);
            root.request_id = Some(RID.into());
            assert!(l.adopt_rows(&t, Vec::new(), vec![root], now) > 0);
        }
    }
    assert_eq!(
        looks,
        [2, 4, 8, 16, 24],
        "looked up until the takeover passed"
    );
    assert_eq!(
        judged.first().map(String::as_str),
        Some(RID),
        "judged alone at first"
    );
    assert_counted_in_its_trace(&l);
}
