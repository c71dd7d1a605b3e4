//! The stand-ins refuse what Slack and PagerDuty refuse: without this,
//! the channels' tests would prove nothing about their payloads.

use crate::support::pagerduty::{PagerDuty, ROUTING_KEY};
use crate::support::slack::{CHANNEL, Slack, TOKEN};
use serde_json::{Value, json};

async fn post(url: &str, auth: Option<&str>, ct: &str, body: &Value) -> (u16, String) {
    let mut r = reqwest::Client::new()
        .post(url)
        .header("content-type", ct)
        .body(body.to_string());
    if let Some(a) = auth {
        r = r.header("authorization", a);
    }
    let r = r.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

fn error_of(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap();
    v["error"].as_str().unwrap_or("").to_string()
}

#[tokio::test]
async fn the_slack_stand_in_refuses_bad_auth_charset_and_block_kit_limits() {
    let s = Slack::start().await;
    let url = format!("{}/chat.postMessage", s.api_url());
    let bearer = format!("Bearer {TOKEN}");
    let ct = "application/json; charset=utf-8";
    let ok = json!({"channel": CHANNEL, "text": "hi"});
    assert_eq!(error_of(&post(&url, None, ct, &ok).await.1), "not_authed");
    assert_eq!(
        error_of(&post(&url, Some("Bearer xoxb-other"), ct, &ok).await.1),
        "invalid_auth"
    );
    let (code, body) = post(&url, Some(&bearer), ct, &ok).await;
    assert_eq!((code, error_of(&body)), (200, String::new()), "{body}");
    let no_text = json!({"channel": CHANNEL});
    assert_eq!(
        error_of(&post(&url, Some(&bearer), ct, &no_text).await.1),
        "no_text"
    );
    let long_header = json!({"channel": CHANNEL, "text": "t", "blocks": [
        {"type": "header", "text": {"type": "plain_text", "text": "h".repeat(151)}}]});
    assert_eq!(
        error_of(&post(&url, Some(&bearer), ct, &long_header).await.1),
        "invalid_blocks"
    );
    let many: Vec<Value> = (0..51).map(|_| json!({"type": "divider"})).collect();
    let too_many = json!({"channel": CHANNEL, "text": "t", "blocks": many});
    assert_eq!(
        error_of(&post(&url, Some(&bearer), ct, &too_many).await.1),
        "invalid_blocks"
    );
    let fields: Vec<Value> = (0..11)
        .map(|_| json!({"type": "mrkdwn", "text": "f"}))
        .collect();
    let eleven =
        json!({"channel": CHANNEL, "text": "t", "blocks": [{"type": "section", "fields": fields}]});
    assert_eq!(
        error_of(&post(&url, Some(&bearer), ct, &eleven).await.1),
        "invalid_blocks"
    );
    let update = json!({"channel": CHANNEL, "ts": "1.000001", "text": "t"});
    let (_, body) = post(
        &format!("{}/chat.update", s.api_url()),
        Some(&bearer),
        ct,
        &update,
    )
    .await;
    assert_eq!(error_of(&body), "message_not_found");
    let before = s.rejections().len();
    post(&url, Some(&bearer), "application/json", &ok).await;
    assert_eq!(
        s.rejections().len(),
        before + 1,
        "JSON without a charset is flagged"
    );
    let (code, body) = post(
        &s.webhook_url(),
        None,
        "application/json",
        &json!({"blocks": []}),
    )
    .await;
    assert_eq!((code, body.as_str()), (400, "invalid_blocks"));
    let (code, body) = post(&s.webhook_url(), None, "text/plain", &json!({"text": "t"})).await;
    assert_eq!((code, body.as_str()), (400, "invalid_payload"));
    let (code, body) = post(
        &s.webhook_url(),
        None,
        "application/json",
        &json!({"text": "t"}),
    )
    .await;
    assert_eq!((code, body.as_str()), (200, "ok"));
}

#[tokio::test]
async fn the_pagerduty_stand_in_refuses_what_the_events_api_refuses() {
    let pd = PagerDuty::start().await;
    let url = pd.events_url();
    let ct = "application/json";
    let trigger = |f: &dyn Fn(&mut Value)| {
        let mut v = json!({
            "routing_key": ROUTING_KEY, "event_action": "trigger", "dedup_key": "k",
            "payload": {"summary": "s", "source": "overtime", "severity": "critical"},
        });
        f(&mut v);
        v
    };
    assert_eq!(post(&url, None, ct, &trigger(&|_| {})).await.0, 202);
    for (why, v) in [
        (
            "summary over 1024",
            trigger(&|v| v["payload"]["summary"] = json!("s".repeat(1025))),
        ),
        (
            "bad severity",
            trigger(&|v| v["payload"]["severity"] = json!("high")),
        ),
        (
            "no source",
            trigger(&|v| {
                v["payload"].as_object_mut().unwrap().remove("source");
            }),
        ),
        (
            "dedup_key over 255",
            trigger(&|v| v["dedup_key"] = json!("k".repeat(256))),
        ),
        (
            "wrong routing key",
            trigger(&|v| v["routing_key"] = json!("nope")),
        ),
        (
            "bad action",
            trigger(&|v| v["event_action"] = json!("escalate")),
        ),
        (
            "link without href",
            trigger(&|v| v["links"] = json!([{"text": "t"}])),
        ),
        (
            "resolve without key",
            json!({"routing_key": ROUTING_KEY, "event_action": "resolve"}),
        ),
    ] {
        let (code, body) = post(&url, None, ct, &v).await;
        assert_eq!(code, 400, "{why}: {body}");
        let b: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(b["status"], "invalid event", "{why}");
    }
    assert_eq!(
        post(&url, None, "text/plain", &trigger(&|_| {})).await.0,
        400
    );
    assert_eq!(pd.alerts().len(), 1);
}
