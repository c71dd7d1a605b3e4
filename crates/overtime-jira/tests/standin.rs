//! The stand-in Jira refuses what Jira refuses: without this, the
//! notifier's tests would prove nothing about its payloads.

use crate::support;

use base64::Engine;
use serde_json::{Value, json};
use support::{EMAIL, Flavor, Standin, TOKEN};

fn basic() -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{EMAIL}:{TOKEN}"))
    )
}

async fn post(s: &Standin, path: &str, auth: &str, ct: &str, body: &Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}{path}", s.url()))
        .header("authorization", auth)
        .header("accept", "application/json")
        .header("content-type", ct)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let code = r.status().as_u16();
    let text = r.text().await.unwrap();
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn adf(text: &str) -> Value {
    json!({"type": "doc", "version": 1, "content": [{"type": "paragraph", "content": [{"type": "text", "text": text}]}]})
}

fn fields(description: Value) -> Value {
    json!({"fields": {"project": {"key": "OPS"}, "summary": "s", "issuetype": {"name": "Bug"}, "description": description, "labels": ["overtime"]}})
}

#[tokio::test]
async fn cloud_v3_rejects_bad_auth_media_type_fields_and_adf() {
    let s = Standin::start(Flavor::Cloud, 3).await;
    let j = "application/json";
    let (c, _) = post(
        &s,
        "/rest/api/3/issue",
        &format!("Bearer {TOKEN}"),
        j,
        &fields(adf("x")),
    )
    .await;
    assert_eq!(c, 401, "Cloud wants basic auth");
    let (c, _) = post(
        &s,
        "/rest/api/3/issue",
        &basic(),
        "text/plain",
        &fields(adf("x")),
    )
    .await;
    assert_eq!(c, 415);
    let mut long = fields(adf("x"));
    long["fields"]["summary"] = json!("x".repeat(256));
    let (c, v) = post(&s, "/rest/api/3/issue", &basic(), j, &long).await;
    assert_eq!(
        (c, v["errors"]["summary"].as_str().is_some()),
        (400, true),
        "{v}"
    );
    let mut nl = fields(adf("x"));
    nl["fields"]["summary"] = json!("a\nb");
    assert_eq!(post(&s, "/rest/api/3/issue", &basic(), j, &nl).await.0, 400);
    let mut no_type = fields(adf("x"));
    no_type["fields"]
        .as_object_mut()
        .unwrap()
        .remove("issuetype");
    assert_eq!(
        post(&s, "/rest/api/3/issue", &basic(), j, &no_type).await.0,
        400
    );
    let mut spaced = fields(adf("x"));
    spaced["fields"]["labels"] = json!(["two words"]);
    assert_eq!(
        post(&s, "/rest/api/3/issue", &basic(), j, &spaced).await.0,
        400
    );
    // v3 wants ADF, not a string; and valid ADF at that
    for bad in [
        json!("plain text"),
        json!({"type": "doc", "version": 2, "content": []}),
        adf(""),
        json!({"type": "doc", "version": 1, "content": [{"type": "heading", "content": []}]}),
        json!({"type": "doc", "version": 1, "content": [{"type": "bulletList", "content": [{"type": "listItem", "content": [{"type": "bulletList", "content": []}]}]}]}),
        json!({"type": "doc", "version": 1, "content": [{"type": "paragraph", "content": [{"type": "text", "text": "x", "marks": [{"type": "code"}, {"type": "strong"}]}]}]}),
        json!({"type": "doc", "version": 1, "content": [{"type": "table", "content": [{"type": "tableRow", "content": [{"type": "tableCell", "content": []}]}]}]}),
        json!({"type": "doc", "version": 1, "content": [{"type": "text", "text": "inline at top level"}]}),
    ] {
        let (c, v) = post(&s, "/rest/api/3/issue", &basic(), j, &fields(bad.clone())).await;
        assert_eq!(c, 400, "accepted {bad}: {v}");
        assert!(v["errors"]["description"].is_string(), "{v}");
    }
    let (c, v) = post(&s, "/rest/api/3/issue", &basic(), j, &fields(adf("ok"))).await;
    assert_eq!((c, v["key"].as_str()), (201, Some("OPS-1")), "{v}");
    // comment and transition bodies
    let (c, _) = post(
        &s,
        "/rest/api/3/issue/OPS-1/comment",
        &basic(),
        j,
        &json!({"body": "text"}),
    )
    .await;
    assert_eq!(c, 400, "v3 comment body must be ADF");
    let (c, _) = post(
        &s,
        "/rest/api/3/issue/OPS-1/comment",
        &basic(),
        j,
        &json!({"body": adf("ok")}),
    )
    .await;
    assert_eq!(c, 201);
    let (c, _) = post(
        &s,
        "/rest/api/3/issue/OPS-1/transitions",
        &basic(),
        j,
        &json!({"id": "31"}),
    )
    .await;
    assert_eq!(c, 400);
    let (c, _) = post(
        &s,
        "/rest/api/3/issue/OPS-1/transitions",
        &basic(),
        j,
        &json!({"transition": {"id": "3"}}),
    )
    .await;
    assert_eq!(c, 400, "Reopen is not available on an open issue");
    let (c, _) = post(
        &s,
        "/rest/api/3/issue/OPS-1/transitions",
        &basic(),
        j,
        &json!({"transition": {"id": "31"}}),
    )
    .await;
    assert_eq!(c, 204);
    // search: the documented endpoint and JQL shape only
    let q = json!({"jql": "project = OPS AND labels = \"overtime\" ORDER BY updated DESC", "fields": ["status"]});
    let (c, v) = post(&s, "/rest/api/3/search/jql", &basic(), j, &q).await;
    assert_eq!(c, 200, "{v}");
    assert_eq!(
        v["issues"][0]["fields"]["status"]["statusCategory"]["key"],
        "done"
    );
    assert!(
        v["issues"][0]["fields"].get("summary").is_none(),
        "only the fields asked for"
    );
    let (c, _) = post(&s, "/rest/api/3/search", &basic(), j, &q).await;
    assert_eq!(c, 404, "Cloud's old search endpoint is gone");
    let bad_jql = json!({"jql": "labels = overtime-x", "fields": ["status"]});
    assert_eq!(
        post(&s, "/rest/api/3/search/jql", &basic(), j, &bad_jql)
            .await
            .0,
        400
    );
    let unknown = json!({"jql": q["jql"], "fields": ["status"], "startAt": 0});
    assert_eq!(
        post(&s, "/rest/api/3/search/jql", &basic(), j, &unknown)
            .await
            .0,
        400
    );
    assert_eq!(s.rejections().len(), 20);
}

#[tokio::test]
async fn data_center_v2_wants_bearer_and_wiki_strings() {
    let s = Standin::start(Flavor::DataCenter, 2).await;
    let j = "application/json";
    let bearer = format!("Bearer {TOKEN}");
    assert_eq!(
        post(&s, "/rest/api/2/issue", &basic(), j, &fields(json!("x")))
            .await
            .0,
        401
    );
    assert_eq!(
        post(&s, "/rest/api/2/issue", &bearer, j, &fields(adf("x")))
            .await
            .0,
        400
    );
    assert_eq!(
        post(&s, "/rest/api/3/issue", &bearer, j, &fields(adf("x")))
            .await
            .0,
        404
    );
    assert_eq!(
        post(
            &s,
            "/rest/api/2/issue",
            &bearer,
            j,
            &fields(json!("h2. ok"))
        )
        .await
        .0,
        201
    );
    assert_eq!(
        post(
            &s,
            "/rest/api/2/issue/OPS-1/comment",
            &bearer,
            j,
            &json!({"body": adf("x")})
        )
        .await
        .0,
        400
    );
    assert_eq!(
        post(
            &s,
            "/rest/api/2/issue/OPS-9/comment",
            &bearer,
            j,
            &json!({"body": "x"})
        )
        .await
        .0,
        404
    );
    let q = json!({"jql": "project = OPS AND labels = \"overtime\" ORDER BY updated DESC", "fields": ["status"]});
    assert_eq!(
        post(&s, "/rest/api/2/search/jql", &bearer, j, &q).await.0,
        404
    );
    let r = reqwest::Client::new()
        .get(format!("{}/rest/api/2/search", s.url()))
        .header("authorization", &bearer)
        .header("accept", "application/json")
        .query(&[
            ("jql", q["jql"].as_str().unwrap()),
            ("fields", "status,labels"),
            ("maxResults", "50"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["total"], 1);
    assert_eq!(v["issues"][0]["fields"]["labels"], json!(["overtime"]));
}
