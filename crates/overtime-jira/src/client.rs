//! The few Jira REST calls the notifier makes, with errors sorted into
//! what to retry and what not:
//! - 429 → [`CallError::RateLimited`] with the `Retry-After` delay;
//! - 5xx, connection errors, timeouts and unreadable 2xx bodies →
//!   [`CallError::Transient`];
//! - any other 4xx (and redirects, which mean a wrong `base_url`) →
//!   [`CallError::Permanent`] with Jira's `errorMessages` and `errors`.

use crate::config::{Deployment, JiraConfig};
use base64::Engine;
use chrono::{DateTime, Utc};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use serde_json::{Value, json};
use std::time::Duration;

/// A failed call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CallError {
    #[error("{what}: Jira is rate-limiting (429, Retry-After {retry_after:?})")]
    RateLimited {
        what: String,
        retry_after: Option<Duration>,
    },
    #[error("{what}: {detail}")]
    Transient { what: String, detail: String },
    #[error("{what}: Jira refused with HTTP {status}: {messages}")]
    Permanent {
        what: String,
        status: u16,
        messages: String,
    },
}

/// The `Authorization` header value; never printed.
#[derive(Clone)]
struct Auth(HeaderValue);

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Auth(<redacted>)")
    }
}

/// An issue as the dedup search sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IssueRef {
    pub(crate) key: String,
    pub(crate) labels: Vec<String>,
    /// `fields.status.statusCategory.key == "done"`.
    pub(crate) done: bool,
    pub(crate) status: String,
    pub(crate) resolved: Option<DateTime<Utc>>,
    pub(crate) updated: Option<DateTime<Utc>>,
}

/// A Jira site, signed in.
#[derive(Debug, Clone)]
pub(crate) struct JiraClient {
    http: reqwest::Client,
    api: String,
    base: String,
    deployment: Deployment,
    auth: Auth,
}

/// Parses Jira's timestamps (`2026-03-01T10:00:00.000+0000`) and RFC 3339.
pub(crate) fn parse_jira_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f%z")
        .or_else(|_| DateTime::parse_from_rfc3339(s))
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Jira's error body (`{"errorMessages": [...], "errors": {...}}`) as one
/// line; any other body, cut to 300 characters.
pub(crate) fn jira_messages(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let mut parts = Vec::new();
    if let Some(v) = &parsed {
        if let Some(msgs) = v["errorMessages"].as_array() {
            parts.extend(msgs.iter().filter_map(|m| m.as_str().map(str::to_string)));
        }
        if let Some(errs) = v["errors"].as_object() {
            for (field, msg) in errs {
                parts.push(format!(
                    "{field}: {}",
                    msg.as_str().unwrap_or(&msg.to_string())
                ));
            }
        }
    }
    if parts.is_empty() {
        let text = String::from_utf8_lossy(body);
        let cut: String = text.chars().take(300).collect();
        if cut.trim().is_empty() {
            "(empty body)".into()
        } else {
            cut
        }
    } else {
        parts.join("; ")
    }
}

use overtime_notify::parse_retry_after;

/// Collects the text of a comment body: a v2 wiki string (with its escape
/// backslashes removed) or every `text` of a v3 ADF document.
pub fn body_text(body: &Value) -> String {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::Object(o) => {
                if let Some(Value::String(t)) = o.get("text") {
                    out.push_str(t);
                    out.push(' ');
                }
                if let Some(c) = o.get("content") {
                    walk(c, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    match body {
        Value::String(s) => s.replace('\\', ""),
        other => {
            let mut out = String::new();
            walk(other, &mut out);
            out
        }
    }
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl JiraClient {
    /// A client for the configured site. `token` is the API token (Cloud)
    /// or personal access token (Data Center).
    pub(crate) fn new(cfg: &JiraConfig, token: &str) -> Result<JiraClient, String> {
        let header = match cfg.deployment {
            Deployment::Cloud => format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{}:{token}", cfg.email))
            ),
            Deployment::DataCenter => format!("Bearer {token}"),
        };
        let mut header = HeaderValue::from_str(&header).map_err(|_| {
            "the Jira token holds characters not allowed in an HTTP header".to_string()
        })?;
        header.set_sensitive(true);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(cfg.request_timeout_secs.max(1)))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("overtime-jira/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        let base = cfg.base_url.trim_end_matches('/').to_string();
        Ok(JiraClient {
            http,
            api: format!("{base}/rest/api/{}", cfg.api_version()),
            base,
            deployment: cfg.deployment,
            auth: Auth(header),
        })
    }

    async fn call(&self, what: &str, req: reqwest::RequestBuilder) -> Result<Value, CallError> {
        let transient = |detail: String| CallError::Transient {
            what: what.to_string(),
            detail,
        };
        let resp = req
            .header(AUTHORIZATION, self.auth.0.clone())
            .header(ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| {
                let kind = if e.is_timeout() {
                    "timed out"
                } else if e.is_connect() {
                    "could not connect"
                } else {
                    "request failed"
                };
                transient(format!("{kind}: {e}"))
            })?;
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = resp
            .bytes()
            .await
            .map_err(|e| transient(format!("reading the answer: {e}")))?;
        if status.is_success() {
            if body.iter().all(u8::is_ascii_whitespace) {
                return Ok(Value::Null);
            }
            return serde_json::from_slice(&body).map_err(|e| {
                transient(format!(
                    "HTTP {status} with a body that is not JSON ({e}): {}",
                    jira_messages(&body)
                ))
            });
        }
        let code = status.as_u16();
        if code == 429 {
            return Err(CallError::RateLimited {
                what: what.to_string(),
                retry_after,
            });
        }
        if status.is_server_error() {
            return Err(transient(format!("HTTP {code}: {}", jira_messages(&body))));
        }
        let messages = if status.is_redirection() {
            format!(
                "redirected to {} — check jira.base_url",
                location.as_deref().unwrap_or("?")
            )
        } else {
            jira_messages(&body)
        };
        Err(CallError::Permanent {
            what: what.to_string(),
            status: code,
            messages,
        })
    }

    fn post(&self, url: &str, body: &Value) -> reqwest::RequestBuilder {
        self.http
            .post(url)
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string())
    }

    /// Issues of `project` carrying `label`, most recently updated first
    /// (at most 50).
    pub(crate) async fn search(
        &self,
        project: &str,
        label: &str,
    ) -> Result<Vec<IssueRef>, CallError> {
        let jql = format!("project = \"{project}\" AND labels = \"{label}\" ORDER BY updated DESC");
        const FIELDS: [&str; 5] = ["summary", "status", "resolutiondate", "updated", "labels"];
        let what = format!("search for label {label}");
        let v = match self.deployment {
            Deployment::Cloud => {
                let body = json!({"jql": jql, "fields": FIELDS, "maxResults": 50});
                let url = format!("{}/search/jql", self.api);
                self.call(&what, self.post(&url, &body)).await?
            }
            Deployment::DataCenter => {
                let url = format!("{}/rest/api/2/search", self.base);
                let fields = FIELDS.join(",");
                let q = [
                    ("jql", jql.as_str()),
                    ("fields", &fields),
                    ("maxResults", "50"),
                ];
                self.call(&what, self.http.get(url).query(&q)).await?
            }
        };
        let Some(issues) = v["issues"].as_array() else {
            return Err(CallError::Transient {
                what,
                detail: "the search answer has no `issues` array".into(),
            });
        };
        let mut out = Vec::new();
        for i in issues {
            let key = i["key"].as_str().unwrap_or_default().to_string();
            if !valid_key(&key) {
                return Err(CallError::Transient {
                    what,
                    detail: format!("the search answer has an issue without a valid key: {key:?}"),
                });
            }
            let f = &i["fields"];
            out.push(IssueRef {
                key,
                labels: f["labels"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|l| l.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default(),
                done: f["status"]["statusCategory"]["key"].as_str() == Some("done"),
                status: f["status"]["name"].as_str().unwrap_or("?").to_string(),
                resolved: f["resolutiondate"].as_str().and_then(parse_jira_time),
                updated: f["updated"].as_str().and_then(parse_jira_time),
            });
        }
        Ok(out)
    }

    /// Creates an issue from its `fields`; returns its key.
    pub(crate) async fn create_issue(&self, fields: Value) -> Result<String, CallError> {
        let url = format!("{}/issue", self.api);
        let v = self
            .call(
                "create issue",
                self.post(&url, &json!({ "fields": fields })),
            )
            .await?;
        match v["key"].as_str() {
            Some(k) if valid_key(k) => Ok(k.to_string()),
            _ => Err(CallError::Transient {
                what: "create issue".into(),
                detail: format!("the answer has no issue key: {v}"),
            }),
        }
    }

    /// Adds a comment (`body`: wiki string on v2, ADF on v3).
    pub(crate) async fn add_comment(&self, key: &str, body: Value) -> Result<(), CallError> {
        let url = format!("{}/issue/{key}/comment", self.api);
        self.call(
            &format!("comment on {key}"),
            self.post(&url, &json!({ "body": body })),
        )
        .await
        .map(drop)
    }

    /// The text of the issue's newest comments (at most 100).
    pub(crate) async fn comment_texts(&self, key: &str) -> Result<Vec<String>, CallError> {
        let url = format!("{}/issue/{key}/comment", self.api);
        let q = [("orderBy", "-created"), ("maxResults", "100")];
        let v = self
            .call(&format!("comments of {key}"), self.http.get(url).query(&q))
            .await?;
        Ok(v["comments"]
            .as_array()
            .map(|a| a.iter().map(|c| body_text(&c["body"])).collect())
            .unwrap_or_default())
    }

    /// The transitions available on the issue: `(id, name)`.
    pub(crate) async fn transitions(&self, key: &str) -> Result<Vec<(String, String)>, CallError> {
        let url = format!("{}/issue/{key}/transitions", self.api);
        let v = self
            .call(&format!("transitions of {key}"), self.http.get(url))
            .await?;
        Ok(v["transitions"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| {
                        Some((
                            t["id"].as_str()?.to_string(),
                            t["name"].as_str()?.to_string(),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Performs a transition.
    pub(crate) async fn transition(&self, key: &str, id: &str) -> Result<(), CallError> {
        let url = format!("{}/issue/{key}/transitions", self.api);
        self.call(
            &format!("transition {key}"),
            self.post(&url, &json!({"transition": {"id": id}})),
        )
        .await
        .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jira_times_and_retry_after_parse() {
        let t = parse_jira_time("2026-03-01T10:00:00.000+0100").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-03-01T09:00:00+00:00");
        assert!(parse_jira_time("2026-03-01T10:00:00Z").is_some());
        assert_eq!(parse_retry_after(" 7 "), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn error_bodies_become_one_line() {
        let b =
            br#"{"errorMessages":["Field 'x' cannot be set."],"errors":{"summary":"too long"}}"#;
        assert_eq!(
            jira_messages(b),
            "Field 'x' cannot be set.; summary: too long"
        );
        assert_eq!(
            jira_messages(b"<html>Bad Gateway</html>"),
            "<html>Bad Gateway</html>"
        );
        assert_eq!(jira_messages(b""), "(empty body)");
    }

    #[test]
    fn comment_text_from_wiki_and_adf() {
        assert_eq!(body_text(&json!("a \\_b\\_ c")), "a _b_ c");
        let adf = json!({"type": "doc", "version": 1, "content": [
            {"type": "paragraph", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y", "marks": [{"type": "code"}]}]}
        ]});
        assert_eq!(body_text(&adf), "x y ");
    }

    #[test]
    fn the_token_is_not_in_debug_output() {
        let cfg = JiraConfig {
            base_url: "https://acme.atlassian.net".into(),
            email: "bot@acme.example".into(),
            ..Default::default()
        };
        let c = JiraClient::new(&cfg, "s3cr3t-token").unwrap();
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("s3cr3t"), "{dbg}");
        let b64 = base64::engine::general_purpose::STANDARD.encode("bot@acme.example:s3cr3t-token");
        assert!(!dbg.contains(&b64), "{dbg}");
        assert!(dbg.contains("redacted"));
    }
}
