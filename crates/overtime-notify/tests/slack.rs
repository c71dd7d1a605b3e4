//! The Slack channel against the stand-in: one message per incident,
//! edited as it grows and marked resolved, through rate limits, outages,
//! restarts and a lost answer — never a second message.

use crate::support::slack::{CHANNEL, Slack, TOKEN};
use crate::support::{Fault, down_port, fast_retry, incident, pending_files, stop, wait_for};
use overtime_notify::slack::{self, SlackConfig};
use overtime_notify::{Accepted, Durable, IncidentChannel, Notice};
use std::path::Path;
use std::time::Duration;

fn bot(api_url: &str) -> SlackConfig {
    SlackConfig {
        channel: CHANNEL.into(),
        api_url: api_url.into(),
        request_timeout_secs: 5,
        retry: fast_retry(),
        ..Default::default()
    }
}

fn start_bot(api_url: &str, dir: &Path) -> Durable<slack::Slack> {
    slack::start(&bot(api_url), Some(TOKEN.into()), dir).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slack_message_is_posted_once_updated_as_the_incident_grows_and_marked_resolved() {
    let s = Slack::start().await;
    let dir = tempfile::tempdir().unwrap();
    let c = start_bot(&s.api_url(), dir.path());
    let first = incident("llm_prefill_slow", "deepseek-v4-pro", 3);
    assert_eq!(
        c.notify(&Notice::Page(first.clone())).unwrap(),
        Accepted::Queued
    );
    wait_for("the post", || c.stats(), |s| s.delivered("posted") == 1).await;
    for n in [5, 9] {
        c.notify(&Notice::Update(incident(
            "llm_prefill_slow",
            "deepseek-v4-pro",
            n,
        )))
        .unwrap();
    }
    // The policy pages an incident once; a second page is a duplicate.
    assert_eq!(c.notify(&Notice::Page(first)).unwrap(), Accepted::Duplicate);
    wait_for("the updates", || c.stats(), |s| s.queued == 0).await;
    let grown = s.messages();
    assert_eq!(grown.len(), 1, "one message per incident");
    let blocks = grown[0].blocks.to_string();
    assert!(blocks.contains("*Failures*\\n9"), "{blocks}");
    assert!(
        blocks.contains("#/incidents/llm_prefill_slow%3Adeepseek-v4-pro%40"),
        "{blocks}"
    );
    assert!(
        blocks.contains("#/trace/4bf92f3577b34da6a3ce929d0e0e4736"),
        "{blocks}"
    );
    assert_eq!(
        grown[0].metadata["event_payload"]["incident_id"],
        incident("llm_prefill_slow", "deepseek-v4-pro", 9).id
    );

    let mut closed = incident("llm_prefill_slow", "deepseek-v4-pro", 9);
    closed.open = false;
    c.notify(&Notice::Resolve(closed)).unwrap();
    let st = wait_for(
        "the resolution",
        || c.stats(),
        |s| s.delivered("resolved") == 1,
    )
    .await;
    let m = &s.messages()[0];
    assert!(m.text.starts_with("Resolved: "), "{}", m.text);
    assert!(
        m.blocks[0]["text"]["text"]
            .as_str()
            .unwrap()
            .contains("Resolved")
    );
    assert_eq!(s.messages().len(), 1);
    assert_eq!(s.count("/chat.postMessage"), 1);
    assert!(st.delivered("updated") >= 1, "{st:?}");
    assert_eq!(st.failed, 0);
    assert!(s.rejections().is_empty(), "{:?}", s.rejections());
    stop(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_posts_once_and_follows_up_on_resolve_since_it_cannot_edit() {
    let s = Slack::start().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = SlackConfig {
        channel: String::new(),
        ..bot("http://unused.invalid")
    };
    let c = slack::start(&cfg, Some(s.webhook_url()), dir.path()).unwrap();
    let i = incident("tool_timeout", "search", 4);
    c.notify(&Notice::Page(i.clone())).unwrap();
    assert_eq!(
        c.notify(&Notice::Update(incident("tool_timeout", "search", 7)))
            .unwrap(),
        Accepted::Ignored,
        "a webhook cannot edit its message"
    );
    c.notify(&Notice::Resolve(i)).unwrap();
    wait_for("post and follow-up", || c.stats(), |s| s.queued == 0).await;
    let posts = s.webhook_posts();
    assert_eq!(posts.len(), 2, "{posts:?}");
    assert!(
        posts[0]["text"]
            .as_str()
            .unwrap()
            .contains("tool_timeout on search")
    );
    assert!(posts[1]["text"].as_str().unwrap().starts_with("Resolved: "));
    assert_eq!(c.stats().delivered("followed_up"), 1);
    assert!(s.rejections().is_empty(), "{:?}", s.rejections());
    stop(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_from_slack_is_waited_out_for_its_retry_after() {
    let s = Slack::start().await;
    s.fault(Fault::RateLimit {
        retry_after_secs: 1,
    });
    let dir = tempfile::tempdir().unwrap();
    let c = start_bot(&s.api_url(), dir.path());
    c.notify(&Notice::Page(incident("tool_timeout", "search", 2)))
        .unwrap();
    let st = wait_for("the post", || c.stats(), |s| s.delivered("posted") == 1).await;
    assert_eq!((st.rate_limited, st.retries), (1, 1));
    let log = s.log();
    assert_eq!(log[0].status, 429);
    let waited = log[1].at.duration_since(log[0].at);
    assert!(waited >= Duration::from_secs(1), "retried after {waited:?}");
    assert_eq!(s.messages().len(), 1);
    stop(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slack_outage_and_a_restart_deliver_each_message_once_and_updates_find_it() {
    let (addr, port) = down_port();
    let api = format!("http://{addr}/api");
    let dir = tempfile::tempdir().unwrap();
    let a = incident("llm_prefill_slow", "m1", 3);
    let b = incident("tool_timeout", "search", 2);
    let c1 = start_bot(&api, dir.path());
    c1.notify(&Notice::Page(a.clone())).unwrap();
    c1.notify(&Notice::Page(b.clone())).unwrap();
    let st = wait_for(
        "retries while Slack is down",
        || c1.stats(),
        |s| s.retries >= 2,
    )
    .await;
    assert!(st.last_error.unwrap().contains("could not connect"));
    stop(c1).await;
    assert_eq!(pending_files(dir.path()), 2, "both pages are on disk");

    let s = Slack::start_on(port);
    s.fault(Fault::Status(503));
    s.fault(Fault::Status(502));
    let c2 = start_bot(&api, dir.path());
    assert_eq!(c2.stats().queued, 2);
    wait_for("both posts", || c2.stats(), |s| s.delivered("posted") == 2).await;
    stop(c2).await;
    assert_eq!(s.messages().len(), 2);

    // A third start: the same page again is a duplicate, and an update
    // edits the message posted before the restart.
    let c3 = start_bot(&api, dir.path());
    assert_eq!(c3.notify(&Notice::Page(a)).unwrap(), Accepted::Duplicate);
    c3.notify(&Notice::Update(incident("llm_prefill_slow", "m1", 8)))
        .unwrap();
    wait_for("the update", || c3.stats(), |s| s.delivered("updated") == 1).await;
    let msgs = s.messages();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0].edits, 1);
    assert!(msgs[0].blocks.to_string().contains("*Failures*\\n8"));
    assert_eq!(s.count("/chat.postMessage"), 2);
    assert!(s.rejections().is_empty(), "{:?}", s.rejections());
    stop(c3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_whose_answer_was_lost_is_found_in_the_history_not_posted_twice() {
    let s = Slack::start().await;
    // Slack stores the message, then answers after the client gave up.
    s.state().post_delay = Some(Duration::from_secs(3));
    let dir = tempfile::tempdir().unwrap();
    let cfg = SlackConfig {
        request_timeout_secs: 1,
        ..bot(&s.api_url())
    };
    let c = slack::start(&cfg, Some(TOKEN.into()), dir.path()).unwrap();
    c.notify(&Notice::Page(incident("tool_timeout", "search", 2)))
        .unwrap();
    let st = wait_for(
        "the message found",
        || c.stats(),
        |s| s.delivered("found") == 1,
    )
    .await;
    assert!(st.retries >= 1, "{st:?}");
    assert_eq!(s.messages().len(), 1, "never a second message");
    assert!(s.count("/conversations.history") >= 1);
    // The found message is the one later updates edit.
    s.state().post_delay = None;
    c.notify(&Notice::Update(incident("tool_timeout", "search", 6)))
        .unwrap();
    wait_for("the update", || c.stats(), |s| s.delivered("updated") == 1).await;
    assert_eq!(s.messages()[0].edits, 1);
    stop(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_incident_keeps_its_slack_message() {
    let s = Slack::start().await;
    let dir = tempfile::tempdir().unwrap();
    let c = start_bot(&s.api_url(), dir.path());
    let old = incident("tool_timeout", "search", 2);
    let mut new = incident("tool_timeout", "search", 5);
    new.id = "tool_timeout:search@2026-03-01T09:59:00.000Z".into();
    c.notify(&Notice::Page(old.clone())).unwrap();
    c.notify(&Notice::Rename {
        from: old.id.clone(),
        to: new.id.clone(),
    })
    .unwrap();
    c.notify(&Notice::Update(new.clone())).unwrap();
    c.notify(&Notice::Resolve(new)).unwrap();
    let st = wait_for("all four", || c.stats(), |s| s.queued == 0).await;
    assert_eq!(
        (
            st.delivered("posted"),
            st.delivered("renamed"),
            st.delivered("updated"),
            st.delivered("resolved")
        ),
        (1, 1, 1, 1),
        "{st:?}"
    );
    let msgs = s.messages();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].edits, 2);
    assert!(msgs[0].text.starts_with("Resolved: "));
    stop(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_a_permanent_failure_and_the_queue_moves_on() {
    let s = Slack::start().await;
    let dir = tempfile::tempdir().unwrap();
    let c = slack::start(&bot(&s.api_url()), Some("xoxb-wrong".into()), dir.path()).unwrap();
    c.notify(&Notice::Page(incident("tool_timeout", "search", 2)))
        .unwrap();
    c.notify(&Notice::Page(incident("llm_prefill_slow", "m1", 2)))
        .unwrap();
    let st = wait_for("both failed", || c.stats(), |s| s.failed == 2).await;
    assert_eq!(st.retries, 0, "invalid_auth is never retried");
    assert!(st.last_error.unwrap().contains("invalid_auth"));
    assert_eq!(
        std::fs::read_dir(dir.path().join("failed"))
            .unwrap()
            .count(),
        2
    );
    stop(c).await;
}

#[tokio::test]
async fn start_refuses_a_missing_secret_and_a_channel_name() {
    let dir = tempfile::tempdir().unwrap();
    let e = slack::start(&bot("http://x"), None, dir.path())
        .err()
        .unwrap();
    assert!(e.to_string().contains("OVERTIME_SLACK_BOT_TOKEN"), "{e}");
    let named = SlackConfig {
        channel: "#ops".into(),
        ..bot("http://x")
    };
    let e = slack::start(&named, Some(TOKEN.into()), dir.path())
        .err()
        .unwrap();
    assert!(e.to_string().contains("channel ID"), "{e}");
}
