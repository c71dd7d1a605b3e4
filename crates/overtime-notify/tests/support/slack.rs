//! A stand-in for Slack: an incoming webhook (`POST /services/…`,
//! answering `ok` or an error word with a 4xx, as Slack's webhooks do)
//! and the three Web API methods overtime calls — `chat.postMessage`,
//! `chat.update` and `conversations.history` — answering, as the Web API
//! does, HTTP 200 with `{"ok": false, "error": …}` for a bad token
//! (`not_authed`, `invalid_auth`), an unknown channel or message, a
//! message without `text` or `blocks` (`no_text`), `text` over 40,000
//! characters (`msg_too_long`) and blocks that break Block Kit's rules
//! (`invalid_blocks`: at most 50 blocks; a header's plain text at most
//! 150 characters; a section's text at most 3000 and at most 10 fields of
//! 2000; buttons' text at most 75, `action_id` unique and at most 255,
//! `url` at most 3000; a context's elements at most 10). A JSON body
//! without `charset=utf-8` is answered with Slack's `missing_charset`
//! warning — and recorded as a rejection.

use super::{Common, HasCommon, StandIn, answer};
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use overtime_test_support::stand_in::lock;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const TOKEN: &str = "xoxb-0000-test-token";
pub const CHANNEL: &str = "C0OVERTIME";
pub const WEBHOOK_PATH: &str = "/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX";

#[derive(Debug, Clone)]
pub struct Message {
    pub channel: String,
    pub ts: String,
    pub text: String,
    pub blocks: Value,
    pub metadata: Value,
    pub edits: usize,
}

#[derive(Debug, Default)]
pub struct State {
    pub common: Common,
    /// Messages posted with the bot token, oldest first.
    pub messages: Vec<Message>,
    /// Bodies posted to the incoming webhook, oldest first.
    pub webhook_posts: Vec<Value>,
    /// Delay before answering a `chat.postMessage` (after storing it).
    pub post_delay: Option<Duration>,
    next: u64,
}

pub type Slack = StandIn<State>;

impl HasCommon for State {
    fn common(&mut self) -> &mut Common {
        &mut self.common
    }
}

impl StandIn<State> {
    pub async fn start() -> Slack {
        Self::serve(super::listener().await, handle)
    }

    /// Starts on a socket bound beforehand (the vendor coming back at the
    /// address its clients already use).
    pub fn start_on(socket: tokio::net::TcpSocket) -> Slack {
        Self::serve(socket.listen(1024).unwrap(), handle)
    }

    pub fn api_url(&self) -> String {
        format!("{}/api", self.url)
    }

    pub fn webhook_url(&self) -> String {
        format!("{}{WEBHOOK_PATH}", self.url)
    }

    pub fn messages(&self) -> Vec<Message> {
        self.state().messages.clone()
    }

    pub fn webhook_posts(&self) -> Vec<Value> {
        self.state().webhook_posts.clone()
    }

    /// Requests to a path ending with `suffix` that were answered 200.
    pub fn count(&self, suffix: &str) -> usize {
        self.state()
            .common
            .log
            .iter()
            .filter(|l| l.path.ends_with(suffix) && l.status == 200)
            .count()
    }
}

fn text_of(v: &Value, max: usize, what: &str) -> Result<(), String> {
    let t = v["text"].as_str().ok_or(format!("{what}: no text"))?;
    let ty = v["type"].as_str().unwrap_or("");
    if !matches!(ty, "plain_text" | "mrkdwn") {
        return Err(format!("{what}: text object of type {ty:?}"));
    }
    let n = t.chars().count();
    if n == 0 || n > max {
        return Err(format!("{what}: {n} characters (1..={max})"));
    }
    Ok(())
}

/// Block Kit's rules for the blocks overtime sends.
pub fn check_blocks(blocks: &Value) -> Result<(), String> {
    let blocks = blocks.as_array().ok_or("blocks is not an array")?;
    if blocks.is_empty() || blocks.len() > 50 {
        return Err(format!("{} blocks (1..=50)", blocks.len()));
    }
    let mut block_ids = HashSet::new();
    let mut action_ids = HashSet::new();
    for (n, b) in blocks.iter().enumerate() {
        if let Some(id) = b.get("block_id") {
            let id = id.as_str().ok_or("block_id not a string")?;
            if id.len() > 255 || !block_ids.insert(id.to_string()) {
                return Err(format!("block {n}: block_id {id:?} too long or repeated"));
            }
        }
        match b["type"].as_str() {
            Some("header") => {
                if b["text"]["type"] != "plain_text" {
                    return Err(format!("block {n}: a header takes plain_text"));
                }
                text_of(&b["text"], 150, &format!("block {n} header"))?;
            }
            Some("section") => {
                let has_text = b.get("text").is_some();
                if has_text {
                    text_of(&b["text"], 3000, &format!("block {n} section"))?;
                }
                match b.get("fields") {
                    Some(f) => {
                        let f = f.as_array().ok_or("fields not an array")?;
                        if f.is_empty() || f.len() > 10 {
                            return Err(format!("block {n}: {} fields (1..=10)", f.len()));
                        }
                        for (k, x) in f.iter().enumerate() {
                            text_of(x, 2000, &format!("block {n} field {k}"))?;
                        }
                    }
                    None if !has_text => {
                        return Err(format!("block {n}: section without text or fields"));
                    }
                    None => {}
                }
            }
            Some("context") => {
                let e = b["elements"].as_array().ok_or("context without elements")?;
                if e.is_empty() || e.len() > 10 {
                    return Err(format!("block {n}: {} context elements (1..=10)", e.len()));
                }
                for x in e {
                    text_of(x, 3000, &format!("block {n} context"))?;
                }
            }
            Some("actions") => {
                let e = b["elements"].as_array().ok_or("actions without elements")?;
                if e.is_empty() || e.len() > 25 {
                    return Err(format!("block {n}: {} action elements (1..=25)", e.len()));
                }
                for x in e {
                    if x["type"] != "button" || x["text"]["type"] != "plain_text" {
                        return Err(format!(
                            "block {n}: an element that is not a plain-text button"
                        ));
                    }
                    text_of(&x["text"], 75, &format!("block {n} button"))?;
                    let id = x["action_id"].as_str().unwrap_or("");
                    if id.is_empty() || id.len() > 255 || !action_ids.insert(id.to_string()) {
                        return Err(format!(
                            "block {n}: action_id {id:?} missing, too long or repeated"
                        ));
                    }
                    if let Some(u) = x.get("url") {
                        let u = u.as_str().ok_or("url not a string")?;
                        if u.len() > 3000
                            || !(u.starts_with("http://") || u.starts_with("https://"))
                        {
                            return Err(format!("block {n}: url {u:?}"));
                        }
                    }
                }
            }
            Some("divider") => {}
            other => return Err(format!("block {n}: type {other:?}")),
        }
    }
    Ok(())
}

/// The checks every message body goes through: an error code, as Slack
/// names it, and the detail.
fn check_message(v: &Value) -> Result<(), (&'static str, String)> {
    let text = v.get("text");
    let blocks = v.get("blocks");
    if text.is_none() && blocks.is_none() {
        return Err(("no_text", "neither text nor blocks".into()));
    }
    if let Some(t) = text {
        let t = t
            .as_str()
            .ok_or(("invalid_arguments", "text not a string".to_string()))?;
        if t.chars().count() > 40_000 {
            return Err(("msg_too_long", "text over 40000 characters".into()));
        }
    }
    if let Some(b) = blocks {
        check_blocks(b).map_err(|e| ("invalid_blocks", e))?;
    }
    Ok(())
}

fn api(v: Value) -> Response {
    (StatusCode::OK, axum::Json(v)).into_response()
}

async fn handle(
    st: Arc<Mutex<State>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let throttled = json!({"ok": false, "error": "ratelimited"});
    let routed = route(&st, &method, &uri, &headers, &body);
    answer(&st, &method, uri.path().to_string(), throttled, routed).await
}

fn reject(st: &Mutex<State>, what: String) {
    lock(st).common.rejections.push(what);
}

async fn route(
    st: &Mutex<State>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let path = uri.path();
    let ct = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if path == WEBHOOK_PATH && method == Method::POST {
        let parsed: Option<Value> = ct
            .starts_with("application/json")
            .then(|| serde_json::from_slice(body).ok())
            .flatten();
        let Some(v) = parsed else {
            reject(st, format!("webhook: content-type {ct:?} or body not JSON"));
            return (StatusCode::BAD_REQUEST, "invalid_payload").into_response();
        };
        if let Err((code, why)) = check_message(&v) {
            reject(st, format!("webhook: {code}: {why}"));
            return (StatusCode::BAD_REQUEST, code).into_response();
        }
        lock(st).webhook_posts.push(v);
        return (StatusCode::OK, [("content-type", "text/html")], "ok").into_response();
    }
    let Some(m) = path.strip_prefix("/api/") else {
        reject(st, format!("{method} {path}: no such endpoint"));
        return (StatusCode::NOT_FOUND, "no_service").into_response();
    };
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
    match auth {
        None => {
            reject(st, format!("{m}: no Authorization header"));
            return api(json!({"ok": false, "error": "not_authed"}));
        }
        Some(a) if a != format!("Bearer {TOKEN}") => {
            reject(st, format!("{m}: wrong token"));
            return api(json!({"ok": false, "error": "invalid_auth"}));
        }
        Some(_) => {}
    }
    if m == "conversations.history" && method == Method::GET {
        let q: Vec<(String, String)> = uri
            .query()
            .map(|q| {
                q.split('&')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        if get("channel").as_deref() != Some(CHANNEL) {
            reject(st, "conversations.history: unknown channel".into());
            return api(json!({"ok": false, "error": "channel_not_found"}));
        }
        let oldest: f64 = get("oldest").and_then(|o| o.parse().ok()).unwrap_or(0.0);
        let meta = get("include_all_metadata").as_deref() == Some("true");
        let s = lock(st);
        let msgs: Vec<Value> = s
            .messages
            .iter()
            .rev()
            .filter(|x| x.ts.parse::<f64>().unwrap_or(0.0) >= oldest)
            .map(|x| {
                let mut v = json!({"type": "message", "ts": x.ts, "text": x.text});
                if meta && !x.metadata.is_null() {
                    v["metadata"] = x.metadata.clone();
                }
                v
            })
            .collect();
        return api(json!({"ok": true, "messages": msgs, "has_more": false}));
    }
    if method != Method::POST || !matches!(m, "chat.postMessage" | "chat.update") {
        reject(st, format!("{method} {path}: not a method overtime calls"));
        return api(json!({"ok": false, "error": "unknown_method"}));
    }
    if !ct.starts_with("application/json") {
        reject(st, format!("{m}: content-type {ct:?}"));
        return api(json!({"ok": false, "error": "invalid_form_data"}));
    }
    let warning = !ct.contains("charset=utf-8");
    if warning {
        reject(st, format!("{m}: JSON without charset=utf-8"));
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        reject(st, format!("{m}: body not JSON"));
        return api(json!({"ok": false, "error": "invalid_json"}));
    };
    if v["channel"].as_str() != Some(CHANNEL) {
        reject(st, format!("{m}: channel {:?}", v["channel"]));
        return api(json!({"ok": false, "error": "channel_not_found"}));
    }
    if let Err((code, why)) = check_message(&v) {
        reject(st, format!("{m}: {code}: {why}"));
        return api(json!({"ok": false, "error": code}));
    }
    let text = v["text"].as_str().unwrap_or("").to_string();
    let blocks = v.get("blocks").cloned().unwrap_or(Value::Null);
    if m == "chat.postMessage" {
        if let Some(md) = v.get("metadata")
            && (!md["event_type"].is_string() || !md["event_payload"].is_object())
        {
            reject(
                st,
                format!("{m}: metadata needs event_type and event_payload"),
            );
            return api(json!({"ok": false, "error": "invalid_metadata_format"}));
        }
        let (ts, delay) = {
            let mut s = lock(st);
            s.next += 1;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            let ts = format!("{now}.{:06}", s.next);
            let msg = Message {
                channel: CHANNEL.into(),
                ts: ts.clone(),
                text: text.clone(),
                blocks,
                metadata: v.get("metadata").cloned().unwrap_or(Value::Null),
                edits: 0,
            };
            s.messages.push(msg);
            (ts, s.post_delay)
        };
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        let mut out = json!({"ok": true, "channel": CHANNEL, "ts": ts, "message": {"text": text}});
        if warning {
            out["warning"] = json!("missing_charset");
        }
        return api(out);
    }
    let ts = v["ts"].as_str().unwrap_or("");
    let mut s = lock(st);
    let Some(msg) = s.messages.iter_mut().find(|x| x.ts == ts) else {
        drop(s);
        reject(st, format!("chat.update: no message {ts:?}"));
        return api(json!({"ok": false, "error": "message_not_found"}));
    };
    msg.text = text.clone();
    msg.blocks = blocks;
    msg.edits += 1;
    api(json!({"ok": true, "channel": CHANNEL, "ts": ts, "text": text}))
}
