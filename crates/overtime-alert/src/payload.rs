//! The JSON bodies: Alertmanager API v2 `postableAlerts` and the webhook
//! payload (Alertmanager's webhook format, version 4).

use crate::alert::fingerprint;
use crate::book::{Notice, Status};
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// RFC 3339 in UTC with milliseconds, as Alertmanager prints it.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The zero time Alertmanager's webhook shows as a firing alert's `endsAt`.
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// The body of `POST /api/v2/alerts`: a JSON array of postableAlert
/// (`labels`, `annotations`, `startsAt`, `endsAt`, `generatorURL`).
///
/// ```
/// use overtime_alert::{alertmanager_body, AlertBook, AlertConfig, Alert};
/// use chrono::{TimeZone, Utc};
/// let mut book = AlertBook::new(&AlertConfig::default());
/// let t0 = Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap();
/// let out = book.update(vec![Alert::new("OvertimeChainHealthLow", "page")], t0);
/// let body = alertmanager_body(&out.alertmanager);
/// assert_eq!(body[0]["labels"]["alertname"], "OvertimeChainHealthLow");
/// assert_eq!(body[0]["startsAt"], "2025-01-01T00:00:00.000Z");
/// assert_eq!(body[0]["endsAt"], "2025-01-01T00:04:00.000Z");
/// ```
pub fn alertmanager_body(notices: &[Notice]) -> Value {
    Value::Array(
        notices
            .iter()
            .map(|n| {
                json!({
                    "labels": n.alert.labels,
                    "annotations": n.alert.annotations,
                    "startsAt": rfc3339(n.starts_at),
                    "endsAt": rfc3339(n.ends_at),
                    "generatorURL": n.generator_url,
                })
            })
            .collect(),
    )
}

/// The webhook bodies for one batch: one object per (`alertname`, status)
/// group, shaped like Alertmanager's webhook payload (version "4",
/// `groupLabels` = `{alertname}`), so receivers written for Alertmanager
/// work unchanged.
///
/// ```
/// use overtime_alert::{webhook_bodies, AlertBook, AlertConfig, Alert};
/// use chrono::{TimeZone, Utc};
/// let mut book = AlertBook::new(&AlertConfig::default());
/// let t0 = Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap();
/// let out = book.update(vec![Alert::new("OvertimeChainHealthLow", "page")], t0);
/// let bodies = webhook_bodies(&out.webhook, "http://overtime:8080");
/// assert_eq!(bodies.len(), 1);
/// assert_eq!(bodies[0]["status"], "firing");
/// assert_eq!(bodies[0]["groupLabels"]["alertname"], "OvertimeChainHealthLow");
/// assert_eq!(bodies[0]["alerts"][0]["endsAt"], "0001-01-01T00:00:00Z");
/// ```
pub fn webhook_bodies(notices: &[Notice], external_url: &str) -> Vec<Value> {
    let mut groups: BTreeMap<(String, &'static str), Vec<&Notice>> = BTreeMap::new();
    for n in notices {
        groups
            .entry((n.alert.name().to_string(), n.status.as_str()))
            .or_default()
            .push(n);
    }
    groups
        .into_iter()
        .map(|((alertname, status), group)| {
            let alerts: Vec<Value> = group.iter().map(|n| webhook_alert(n)).collect();
            let common_labels = common(group.iter().map(|n| &n.alert.labels));
            let common_annotations = common(group.iter().map(|n| &n.alert.annotations));
            json!({
                "version": "4",
                "groupKey": format!("{{}}:{{alertname=\"{alertname}\"}}"),
                "truncatedAlerts": 0,
                "status": status,
                "receiver": "overtime",
                "groupLabels": {"alertname": alertname},
                "commonLabels": common_labels,
                "commonAnnotations": common_annotations,
                "externalURL": external_url,
                "alerts": alerts,
            })
        })
        .collect()
}

fn webhook_alert(n: &Notice) -> Value {
    let ends_at = match n.status {
        Status::Firing => ZERO_TIME.to_string(),
        Status::Resolved => rfc3339(n.ends_at),
    };
    json!({
        "status": n.status.as_str(),
        "labels": n.alert.labels,
        "annotations": n.alert.annotations,
        "startsAt": rfc3339(n.starts_at),
        "endsAt": ends_at,
        "generatorURL": n.generator_url,
        "fingerprint": fingerprint(&n.alert.labels),
    })
}

/// The pairs every map of the group has with the same value.
fn common<'a>(mut maps: impl Iterator<Item = &'a BTreeMap<String, String>>) -> Value {
    let Some(first) = maps.next() else {
        return Value::Object(Map::new());
    };
    let mut shared = first.clone();
    for m in maps {
        shared.retain(|k, v| m.get(k) == Some(v));
    }
    json!(shared)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Alert, AlertBook, AlertConfig};
    use chrono::{TimeDelta, TimeZone};

    #[test]
    fn webhook_groups_by_alertname_and_status_with_common_labels() {
        let mut book = AlertBook::new(&AlertConfig::default());
        let t0 = Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap();
        let l1 = |m: &str| Alert::new("OvertimeModelBreakerL1", "page").label("model", m);
        book.update(vec![l1("a"), l1("b")], t0);
        let out = book.update(
            vec![l1("b"), Alert::new("OvertimeChainHealthLow", "page")],
            t0 + TimeDelta::seconds(5),
        );
        let bodies = webhook_bodies(&out.webhook, "http://o:8080");
        let summary: Vec<(String, String, usize)> = bodies
            .iter()
            .map(|b| {
                (
                    b["groupLabels"]["alertname"].as_str().unwrap().to_string(),
                    b["status"].as_str().unwrap().to_string(),
                    b["alerts"].as_array().unwrap().len(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("OvertimeChainHealthLow".into(), "firing".into(), 1),
                ("OvertimeModelBreakerL1".into(), "resolved".into(), 1),
            ]
        );
        let resolved = &bodies[1];
        assert_eq!(resolved["commonLabels"]["model"], "a");
        assert_eq!(resolved["alerts"][0]["endsAt"], "2025-01-01T00:00:05.000Z");
        assert_eq!(
            resolved["alerts"][0]["fingerprint"].as_str().unwrap().len(),
            16
        );
    }

    #[test]
    fn common_keeps_only_shared_pairs() {
        let a: BTreeMap<String, String> =
            [("x".into(), "1".into()), ("y".into(), "2".into())].into();
        let b: BTreeMap<String, String> =
            [("x".into(), "1".into()), ("y".into(), "3".into())].into();
        assert_eq!(common([&a, &b].into_iter()), json!({"x": "1"}));
    }
}
