//! The Slack message of an incident: Block Kit blocks and the `text`
//! Slack shows in notifications (and screen readers read).
//!
//! Design rules:
//! - Every string is clipped to Block Kit's limits (header 150
//!   characters, a section's text 3000, a field 2000, a button's text 75,
//!   a URL 3000), so a long headline never gets a message refused.
//! - User text goes through [`escape`] (`&`, `<`, `>`), so a component
//!   named `<!channel>` never pings anyone.
//! - The same function renders the open and the resolved message, so an
//!   update replaces every block.

use crate::notice::{Incident, clip};
use serde_json::{Value, json};

/// Block Kit's limits used here.
pub(crate) const HEADER_MAX: usize = 150;
pub(crate) const SECTION_MAX: usize = 3000;
pub(crate) const FIELD_MAX: usize = 2000;
pub(crate) const BUTTON_TEXT_MAX: usize = 75;
pub(crate) const URL_MAX: usize = 3000;
/// Example traces linked as buttons.
const TRACE_BUTTONS: usize = 3;

/// Whether the message shows the incident open or resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Failing now.
    Open,
    /// Closed (or gone): the message says so.
    Resolved,
}

/// Escapes the three characters Slack's mrkdwn reserves.
///
/// ```
/// assert_eq!(overtime_notify::slack::escape("<!channel> & co"), "&lt;!channel&gt; &amp; co");
/// ```
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn mrkdwn(text: String) -> Value {
    json!({"type": "mrkdwn", "text": text})
}

fn button(text: &str, url: &str, action_id: &str) -> Option<Value> {
    (url.chars().count() <= URL_MAX).then(|| {
        json!({
            "type": "button",
            "text": {"type": "plain_text", "text": clip(text, BUTTON_TEXT_MAX)},
            "url": url,
            "action_id": action_id,
        })
    })
}

/// The notification text and the blocks of `i`'s message.
///
/// ```
/// use overtime_notify::slack::{State, message};
/// # let i: overtime_notify::Incident = serde_json::from_value(serde_json::json!({
/// #   "id": "tool_timeout:search@2026-03-01T10:00:00Z", "fingerprint": "tool_timeout:search",
/// #   "kind": "tool_timeout", "component": "search", "open": true,
/// #   "headline": "80 % of 504s: tool_timeout on search", "started_at": "2026-03-01T10:00:00Z",
/// #   "failures": 8, "gateway_504": 8, "requests": 100, "timeouts": 8, "top_cause": null,
/// #   "example_trace_ids": [], "links": {"incident": "http://o/#/incidents/x", "report": "", "traces": []}
/// # })).unwrap();
/// let (text, blocks) = message(&i, State::Resolved);
/// assert!(text.starts_with("Resolved: "));
/// assert_eq!(blocks[0]["type"], "header");
/// ```
pub fn message(i: &Incident, state: State) -> (String, Value) {
    let (mark, word) = match state {
        State::Open => ("🔴", "Incident"),
        State::Resolved => ("✅", "Resolved"),
    };
    let header = clip(
        &format!("{mark} {word}: {} on {}", i.kind, i.component),
        HEADER_MAX,
    );
    let text = clip(
        &match state {
            State::Open => escape(&i.headline),
            State::Resolved => format!("Resolved: {}", escape(&i.headline)),
        },
        SECTION_MAX,
    );
    let top = match &i.top_cause {
        Some(c) => format!(
            "*Top cause*\n{} on {}: {} of the window's failures ({:.0} %)",
            escape(&c.kind),
            escape(&c.component),
            c.count,
            c.share * 100.0
        ),
        None => format!(
            "*Top cause*\n{} on {}",
            escape(&i.kind),
            escape(&i.component)
        ),
    };
    let fields: Vec<Value> = [
        top,
        format!("*Failures*\n{}", i.failures),
        format!("*Gateway 504s*\n{}", i.gateway_504),
        format!("*Timeouts*\n{}", i.timeouts),
        format!("*Requests in its window*\n{}", i.requests),
        format!(
            "*Started*\n{}",
            i.started_at.format("%Y-%m-%d %H:%M:%S UTC")
        ),
    ]
    .into_iter()
    .map(|f| mrkdwn(clip(&f, FIELD_MAX)))
    .collect();
    let mut buttons: Vec<Value> = button("Open the incident", &i.links.incident, "incident")
        .into_iter()
        .collect();
    for (n, (id, url)) in i.links.traces.iter().take(TRACE_BUTTONS).enumerate() {
        let short: String = id.chars().take(12).collect();
        buttons.extend(button(
            &format!("Trace {short}"),
            url,
            &format!("trace-{n}"),
        ));
    }
    let mut context = format!(
        "overtime · fingerprint `{}` · incident `{}`",
        escape(&i.fingerprint),
        escape(&i.id)
    );
    if state == State::Resolved {
        context.push_str(&format!(
            " · resolved {}",
            chrono::Utc::now().format("%Y-%m-%d %H:%M:%S UTC")
        ));
    }
    let mut blocks = vec![
        json!({"type": "header", "text": {"type": "plain_text", "text": header}}),
        json!({"type": "section", "text": mrkdwn(clip(&escape(&i.headline), SECTION_MAX))}),
        json!({"type": "section", "fields": fields}),
    ];
    if !buttons.is_empty() {
        blocks.push(json!({"type": "actions", "elements": buttons}));
    }
    blocks.push(json!({"type": "context", "elements": [mrkdwn(clip(&context, SECTION_MAX))]}));
    (text, Value::Array(blocks))
}
