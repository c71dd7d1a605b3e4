//! The Slack channel (docs/channels.md, "Slack"): one message per paged
//! incident, edited as the incident grows and marked resolved when it
//! closes.
//!
//! Design rules:
//! - With a bot token, a page is `chat.postMessage` (the message carries
//!   the incident id in its `metadata`), growth and resolution are
//!   `chat.update` on the stored `channel/ts`, and a rename carries the
//!   stored message over to the new id. The `ts` is in the outbox's
//!   journal, so an update after a restart edits the same message.
//! - An attempt whose post may have reached Slack (its answer lost) reads
//!   the channel's recent history for the incident's metadata before it
//!   posts again: never a second message.
//! - With an incoming webhook, a page posts the message and a resolution
//!   posts a follow-up: a webhook cannot edit what it posted (and growth
//!   is not posted, which would repeat the message on every change).
//! - Slack's Web API answers errors with HTTP 200 and `"ok": false`:
//!   `ratelimited` and Slack's own failures are retried, every other error
//!   is permanent.

mod blocks;
mod config;

pub use blocks::{State, escape, message};
pub use config::SlackConfig;

use crate::channel::ChannelError;
use crate::durable::{Deliver, Done, Durable, NoticeEntry, Persist};
use crate::notice::{Incident, Notice};
use crate::retry::{Failure, classify};
use serde_json::{Value, json};
use std::path::Path;

/// The metadata event type of overtime's messages.
pub const EVENT_TYPE: &str = "overtime_incident";

/// How far before an entry was queued the history lookup starts.
const HISTORY_SLACK_SECS: i64 = 120;

enum Mode {
    Webhook {
        url: String,
    },
    Bot {
        api: String,
        token: String,
        channel: String,
    },
}

/// Delivers notices to Slack.
pub struct Slack {
    http: reqwest::Client,
    mode: Mode,
}

/// Starts the Slack channel on its outbox folder, with `secret` the bot
/// token (`channel` set) or the webhook URL (`channel` empty).
pub fn start(
    cfg: &SlackConfig,
    secret: Option<String>,
    outbox_dir: &Path,
) -> Result<Durable<Slack>, ChannelError> {
    let (secret, http) = crate::config::prepare(
        "slack",
        cfg.validate(),
        secret,
        cfg.secret_env(),
        cfg.request_timeout_secs,
    )?;
    let mode = if cfg.uses_bot_token() {
        Mode::Bot {
            api: cfg.api_url.trim_end_matches('/').to_string(),
            token: secret,
            channel: cfg.channel.trim().to_string(),
        }
    } else {
        Mode::Webhook { url: secret }
    };
    Durable::start(
        &cfg.name,
        Slack { http, mode },
        outbox_dir,
        cfg.retry.clone(),
    )
}

/// A Web API error code: retry it or not.
fn api_failure(method: &str, error: &str) -> Failure {
    let why = format!("{method}: Slack answered error {error:?}");
    match error {
        "ratelimited"
        | "internal_error"
        | "fatal_error"
        | "service_unavailable"
        | "request_timeout" => Failure::retry(why),
        _ => Failure::Permanent(why),
    }
}

impl Slack {
    /// Calls a Web API method with a JSON body; the answer's JSON when
    /// `ok`. The bool: the request may have reached Slack.
    async fn call(&self, method: &str, body: &Value) -> (Result<Value, Failure>, bool) {
        let Mode::Bot { api, token, .. } = &self.mode else {
            unreachable!("Web API calls need the bot token");
        };
        let req = self
            .http
            .post(format!("{api}/{method}"))
            .bearer_auth(token)
            .header("content-type", "application/json; charset=utf-8")
            .body(body.to_string());
        let (answer, reached) = classify(method, req).await;
        let out = answer.and_then(|a| {
            let v: Value = serde_json::from_str(&a.body)
                .map_err(|e| Failure::retry(format!("{method}: unreadable answer: {e}")))?;
            if v["ok"].as_bool() == Some(true) {
                Ok(v)
            } else {
                Err(api_failure(method, v["error"].as_str().unwrap_or("(none)")))
            }
        });
        (out, reached)
    }

    /// The message already posted for `incident_id` (by its metadata) in
    /// the channel's history since `since`, as `channel/ts`.
    async fn find_posted(&self, incident_id: &str, since: i64) -> Result<Option<String>, Failure> {
        let Mode::Bot {
            api,
            token,
            channel,
        } = &self.mode
        else {
            return Ok(None);
        };
        let oldest = since.to_string();
        let req = self
            .http
            .get(format!("{api}/conversations.history"))
            .bearer_auth(token)
            .query(&[
                ("channel", channel.as_str()),
                ("oldest", oldest.as_str()),
                ("include_all_metadata", "true"),
                ("limit", "200"),
            ]);
        let a = classify("conversations.history", req).await.0?;
        let v: Value = serde_json::from_str(&a.body)
            .map_err(|e| Failure::retry(format!("conversations.history: {e}")))?;
        if v["ok"].as_bool() != Some(true) {
            return Err(api_failure(
                "conversations.history",
                v["error"].as_str().unwrap_or("(none)"),
            ));
        }
        let found = v["messages"].as_array().into_iter().flatten().find(|m| {
            m["metadata"]["event_type"] == EVENT_TYPE
                && m["metadata"]["event_payload"]["incident_id"] == incident_id
        });
        Ok(found.and_then(|m| m["ts"].as_str().map(|ts| format!("{channel}/{ts}"))))
    }

    async fn post(
        &self,
        entry: &mut NoticeEntry,
        i: &Incident,
        persist: &mut Persist<'_>,
    ) -> Result<Done, Failure> {
        let (text, blocks) = message(i, State::Open);
        match &self.mode {
            Mode::Webhook { url } => {
                let req = self
                    .http
                    .post(url)
                    .json(&json!({"text": text, "blocks": blocks}));
                classify("incoming webhook", req).await.0?;
                Ok(Done {
                    action: "posted",
                    reference: None,
                })
            }
            Mode::Bot { channel, .. } => {
                if entry.sent {
                    let since = entry.queued_at.timestamp() - HISTORY_SLACK_SECS;
                    match self.find_posted(&i.id, since).await {
                        Ok(Some(r)) => {
                            return Ok(Done {
                                action: "found",
                                reference: Some(r),
                            });
                        }
                        Ok(None) => {}
                        Err(Failure::Permanent(why)) => {
                            // Without the history scope it cannot look:
                            // posting again is better than losing the page.
                            tracing::warn!("overtime: slack: {why}; posting {} again", i.id);
                        }
                        Err(retry) => return Err(retry),
                    }
                }
                entry.sent = true;
                persist(entry).map_err(|e| Failure::retry(e.to_string()))?;
                let body = json!({
                    "channel": channel,
                    "text": text,
                    "blocks": blocks,
                    "unfurl_links": false,
                    "metadata": {
                        "event_type": EVENT_TYPE,
                        "event_payload": {"incident_id": i.id, "fingerprint": i.fingerprint},
                    },
                });
                let (r, reached) = self.call("chat.postMessage", &body).await;
                if r.is_err() && !reached {
                    entry.sent = false;
                    persist(entry).map_err(|e| Failure::retry(e.to_string()))?;
                }
                let v = r?;
                let ch = v["channel"].as_str().unwrap_or(channel);
                let ts = v["ts"]
                    .as_str()
                    .ok_or_else(|| Failure::retry("chat.postMessage: no ts in the answer"))?;
                Ok(Done {
                    action: "posted",
                    reference: Some(format!("{ch}/{ts}")),
                })
            }
        }
    }

    async fn edit(&self, reference: &str, i: &Incident, state: State) -> Result<(), Failure> {
        let (channel, ts) = reference
            .split_once('/')
            .ok_or_else(|| Failure::Permanent(format!("bad message reference {reference:?}")))?;
        let (text, blocks) = message(i, state);
        let body = json!({"channel": channel, "ts": ts, "text": text, "blocks": blocks});
        self.call("chat.update", &body).await.0.map(|_| ())
    }
}

impl Deliver for Slack {
    type Event = Notice;
    type Progress = ();

    fn wants(&self, notice: &Notice) -> bool {
        match notice {
            Notice::Page(_) | Notice::Resolve(_) | Notice::Rename { .. } => true,
            Notice::Update(_) => matches!(self.mode, Mode::Bot { .. }),
            Notice::HandOver(_) | Notice::Ticket(_) => false,
        }
    }

    async fn deliver(
        &self,
        entry: &mut NoticeEntry,
        reference: Option<String>,
        persist: &mut Persist<'_>,
    ) -> Result<Done, Failure> {
        let skipped = Done {
            action: "skipped",
            reference: None,
        };
        match (entry.event.clone(), &self.mode) {
            (Notice::Page(_), _) if reference.is_some() => Ok(Done {
                action: "found",
                reference,
            }),
            (Notice::Page(i), _) => self.post(entry, &i, persist).await,
            (Notice::Update(i), Mode::Bot { .. }) => match reference {
                Some(r) => self.edit(&r, &i, State::Open).await.map(|()| Done {
                    action: "updated",
                    reference: None,
                }),
                None => Ok(skipped),
            },
            (Notice::Resolve(i), Mode::Bot { .. }) => match reference {
                Some(r) => self.edit(&r, &i, State::Resolved).await.map(|()| Done {
                    action: "resolved",
                    reference: None,
                }),
                None => Ok(skipped),
            },
            (Notice::Resolve(i), Mode::Webhook { url }) => {
                let (text, blocks) = message(&i, State::Resolved);
                let req = self
                    .http
                    .post(url)
                    .json(&json!({"text": text, "blocks": blocks}));
                classify("incoming webhook", req).await.0?;
                Ok(Done {
                    action: "followed_up",
                    reference: None,
                })
            }
            (Notice::Rename { .. }, _) => Ok(Done {
                action: "renamed",
                reference,
            }),
            _ => Ok(skipped),
        }
    }
}
