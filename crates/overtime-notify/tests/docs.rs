//! docs/metrics.md's `overtime_channel_*` rows are the families the
//! channels' collector exposes, with the labels it writes, and the
//! exposition is valid Prometheus text.

use overtime_notify::{ChannelStats, ChannelsCollector};
use prometheus_client::encoding::prometheus_text::encode;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::Arc;

fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Family name → its labels, from the documented rows.
fn documented() -> BTreeMap<String, Vec<String>> {
    let doc = std::fs::read_to_string(repo().join("docs/metrics.md")).unwrap();
    doc.lines()
        .filter_map(|l| l.strip_prefix("| `overtime_channel_"))
        .map(|rest| {
            let cells: Vec<&str> = rest.split('|').map(str::trim).collect();
            let name = format!(
                "overtime_channel_{}",
                &cells[0][..cells[0].find('`').unwrap()]
            );
            let labels = cells[2]
                .split(',')
                .map(|l| l.trim().trim_matches('`').to_string())
                .filter(|l| !l.is_empty())
                .collect();
            (name, labels)
        })
        .collect()
}

#[test]
fn docs_metrics_md_lists_the_channel_families_with_their_labels() {
    let mut c = ChannelsCollector::default();
    c.add(
        "slack",
        Arc::new(|| ChannelStats {
            delivered: [("posted", 2), ("updated", 3)].into_iter().collect(),
            failed: 1,
            queued: 1,
            ..Default::default()
        }),
    );
    let mut registry = Registry::default();
    registry.register_collector(Box::new(c));
    let mut text = String::new();
    encode(&mut text, &registry).unwrap();
    let mut exposed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, rest) = l.split_once('{').unwrap();
        let labels = rest
            .split('}')
            .next()
            .unwrap()
            .split(',')
            .map(|kv| kv.split('=').next().unwrap().to_string())
            .collect();
        exposed.insert(name.to_string(), labels);
    }
    assert_eq!(
        exposed,
        documented(),
        "/metrics and docs/metrics.md\n{text}"
    );
    assert!(
        text.contains("overtime_channel_deliveries_total{channel=\"slack\",action=\"updated\"} 3")
    );
    assert!(text.contains("overtime_channel_notices_total{channel=\"slack\",result=\"failed\"} 1"));
}
