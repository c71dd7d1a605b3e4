//! A local stand-in for Jira (Cloud or Data Center, REST v2 or v3) that
//! serves only the endpoints overtime uses and answers everything that
//! does not follow Atlassian's documented payloads with Jira's own error
//! shape (`{"errorMessages": [...], "errors": {...}}`): 401 for a wrong
//! `Authorization`, 415 for a body that is not JSON, 400 for bad fields,
//! 404 for any other endpoint. Every rejection is recorded so a test can
//! assert that the notifier never sent one.

#![allow(dead_code)]

pub mod adf_check;
mod endpoints;

use endpoints::*;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use chrono::{DateTime, Utc};
use overtime_test_support::stand_in::{Served, lock};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub const PROJECT: &str = "OPS";
pub const EMAIL: &str = "sre-bot@acme.example";
pub const TOKEN: &str = "t0ken-for-tests";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Cloud,
    DataCenter,
}

#[derive(Debug, Clone)]
pub struct Comment {
    pub id: u64,
    pub body: Value,
    pub created: DateTime<Utc>,
}

#[derive(Debug, Clone)]
pub struct Issue {
    pub id: u64,
    pub key: String,
    pub summary: String,
    pub issue_type: String,
    pub description: Value,
    pub labels: Vec<String>,
    pub done: bool,
    pub resolved: Option<DateTime<Utc>>,
    pub updated: DateTime<Utc>,
    pub comments: Vec<Comment>,
}

pub use overtime_test_support::stand_in::{Fault, Logged};

#[derive(Default)]
pub struct State {
    pub issues: Vec<Issue>,
    pub log: Vec<Logged>,
    pub rejections: Vec<String>,
    pub faults: VecDeque<Fault>,
    pub unavailable: bool,
    /// Delay before answering an issue creation (after storing it).
    pub create_delay: Option<Duration>,
    /// Delay before answering a comment (after storing it).
    pub comment_delay: Option<Duration>,
    pub reopen_available: bool,
    next_id: u64,
}

pub struct Standin {
    pub addr: SocketAddr,
    pub flavor: Flavor,
    pub version: u8,
    pub state: Arc<Mutex<State>>,
    served: Served,
}

#[derive(Clone)]
struct Ctx {
    flavor: Flavor,
    version: u8,
    base: String,
    state: Arc<Mutex<State>>,
}

pub fn jira_time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.3f+0000").to_string()
}

fn err(status: u16, messages: &[&str], errors: Value) -> (u16, Value) {
    (status, json!({"errorMessages": messages, "errors": errors}))
}

type Answer = (u16, Value);

impl Standin {
    /// Starts on a free loopback port.
    pub async fn start(flavor: Flavor, version: u8) -> Standin {
        let l = overtime_test_support::stand_in::listener().await;
        Self::serve(l, flavor, version)
    }

    /// Starts on a given address (a port a notifier already points at).
    /// Starts on a socket bound beforehand (Jira coming back at the
    /// address its clients already use).
    pub fn start_on(socket: tokio::net::TcpSocket, flavor: Flavor, version: u8) -> Standin {
        Self::serve(socket.listen(1024).unwrap(), flavor, version)
    }

    fn serve(l: tokio::net::TcpListener, flavor: Flavor, version: u8) -> Standin {
        let addr = l.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            reopen_available: true,
            next_id: 10_000,
            ..Default::default()
        }));
        let ctx = Arc::new(Ctx {
            flavor,
            version,
            base: format!("http://{addr}"),
            state: state.clone(),
        });
        let served = Served::serve(l, ctx, handle);
        Standin {
            addr,
            flavor,
            version,
            state,
            served,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn stop(&self) {
        self.served.stop();
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    pub fn issues(&self) -> Vec<Issue> {
        self.state().issues.clone()
    }

    pub fn rejections(&self) -> Vec<String> {
        self.state().rejections.clone()
    }

    /// Requests with this method whose path ends with `suffix`.
    pub fn count(&self, method: &str, suffix: &str) -> usize {
        self.state()
            .log
            .iter()
            .filter(|l| l.method == method && l.path.ends_with(suffix))
            .count()
    }

    /// Marks an issue resolved at `at` (as a human closing it would).
    pub fn resolve(&self, key: &str, at: DateTime<Utc>) {
        let mut s = self.state();
        let i = s.issues.iter_mut().find(|i| i.key == key).unwrap();
        i.done = true;
        i.resolved = Some(at);
        i.updated = at;
    }
}

async fn handle(
    ctx: Arc<Ctx>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let (status, value, extra_headers, delay) = answer(&ctx, &method, &uri, &headers, &body);
    {
        // logged on arrival: a client that hangs up during `delay` still counts
        let mut s = lock(&ctx.state);
        if (400..500).contains(&status) && status != 429 {
            s.rejections
                .push(format!("{method} {path} → {status} {value}"));
        }
        s.log.push(Logged {
            method: method.to_string(),
            path: path.clone(),
            status,
            at: Instant::now(),
        });
    }
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    let code = StatusCode::from_u16(status).unwrap();
    let mut resp = if value.is_null() {
        code.into_response()
    } else {
        (
            code,
            [("content-type", "application/json;charset=UTF-8")],
            value.to_string(),
        )
            .into_response()
    };
    for (k, v) in extra_headers {
        resp.headers_mut().insert(k, v.parse().unwrap());
    }
    resp
}

type Full = (u16, Value, Vec<(&'static str, String)>, Option<Duration>);

fn answer(ctx: &Ctx, method: &Method, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> Full {
    let mut s = lock(&ctx.state);
    if s.unavailable {
        return (503, Value::Null, vec![], None);
    }
    if let Some(f) = s.faults.pop_front() {
        return match f {
            Fault::Status(code) => (
                code,
                json!({"errorMessages": ["injected fault"]}),
                vec![],
                None,
            ),
            Fault::RateLimit { retry_after_secs } => (
                429,
                json!({"errorMessages": ["Rate limit exceeded."]}),
                vec![("retry-after", retry_after_secs.to_string())],
                None,
            ),
        };
    }
    // authentication
    let expected = match ctx.flavor {
        Flavor::Cloud => format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{EMAIL}:{TOKEN}"))
        ),
        Flavor::DataCenter => format!("Bearer {TOKEN}"),
    };
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
    if auth != Some(expected.as_str()) {
        let (c, v) = err(
            401,
            &["You are not authenticated. Authentication required to perform this operation."],
            json!({}),
        );
        return (c, v, vec![], None);
    }
    if !headers
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/json") || a.contains("*/*"))
    {
        let (c, v) = err(406, &["Accept must allow application/json"], json!({}));
        return (c, v, vec![], None);
    }
    let json_body = if *method == Method::POST || *method == Method::PUT {
        let ct = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !ct.starts_with("application/json") {
            let (c, v) = err(
                415,
                &[&format!("Unsupported Media Type: {ct:?}")],
                json!({}),
            );
            return (c, v, vec![], None);
        }
        match serde_json::from_slice::<Value>(body) {
            Ok(v) => Some(v),
            Err(e) => {
                let (c, v) = err(
                    400,
                    &[&format!("Unexpected character in the JSON body: {e}")],
                    json!({}),
                );
                return (c, v, vec![], None);
            }
        }
    } else {
        None
    };
    let query: HashMap<String, String> = uri.query().map(url_pairs).unwrap_or_default();
    let path = uri.path();
    let v = ctx.version;
    let api = format!("/rest/api/{v}");
    let segs: Vec<&str> = path.split('/').filter(|x| !x.is_empty()).collect();
    let mut delay = None;
    let (c, val) = match (method.as_str(), ctx.flavor, path) {
        ("POST", Flavor::Cloud, p) if p == format!("{api}/search/jql") => {
            search_post(&s, ctx, json_body.unwrap())
        }
        ("GET", Flavor::Cloud, p) if p == format!("{api}/search/jql") => {
            search_get(&s, ctx, &query)
        }
        ("POST", Flavor::DataCenter, "/rest/api/2/search") => {
            search_post(&s, ctx, json_body.unwrap())
        }
        ("GET", Flavor::DataCenter, "/rest/api/2/search") => search_get(&s, ctx, &query),
        ("POST", _, p) if p == format!("{api}/issue") => {
            delay = s.create_delay;
            create(&mut s, ctx, json_body.unwrap())
        }
        (m, _, _)
            if segs.len() == 6
                && path.starts_with(&format!("{api}/issue/"))
                && (segs[5] == "comment" || segs[5] == "transitions") =>
        {
            let key = segs[4].to_string();
            match (m, segs[5]) {
                ("POST", "comment") => {
                    delay = s.comment_delay;
                    add_comment(&mut s, ctx, &key, json_body.unwrap())
                }
                ("GET", "comment") => list_comments(&s, &key, &query),
                ("GET", "transitions") => transitions(&s, &key),
                ("POST", "transitions") => transition(&mut s, &key, json_body.unwrap()),
                _ => err(405, &["Method not allowed"], json!({})),
            }
        }
        _ => err(
            404,
            &[&format!("null for uri: {path} (not served by this Jira)")],
            json!({}),
        ),
    };
    (c, val, vec![], delay)
}
