//! The notifier against a local stand-in Jira (tests/support): Cloud and
//! Data Center auth, REST v2 and v3, dedup, comments, reopen, outage, 429
//! and restarts — including a crash between Jira creating the issue and
//! the outbox hearing about it.

use crate::support;
use overtime_test_support::stand_in::{down_port, pending_files};

use chrono::{Duration as Days, Utc};
use overtime_jira::{
    Accepted, Deployment, IncidentEvent, JiraConfig, JiraStats, Notifier, RetryPolicy, body_text,
    fingerprint_label, incident_label,
};
use std::time::{Duration, Instant};
use support::{EMAIL, Fault, Flavor, Standin, TOKEN};

fn config(url: &str, flavor: Flavor, version: u8) -> JiraConfig {
    JiraConfig {
        enabled: true,
        base_url: url.to_string(),
        deployment: match flavor {
            Flavor::Cloud => Deployment::Cloud,
            Flavor::DataCenter => Deployment::DataCenter,
        },
        api_version: Some(version),
        project_key: "OPS".into(),
        email: if flavor == Flavor::Cloud {
            EMAIL.into()
        } else {
            String::new()
        },
        retry: RetryPolicy {
            base_backoff_ms: 50,
            max_backoff_secs: 1,
            ..Default::default()
        },
        search_settle_secs: 0,
        request_timeout_secs: 5,
        ..Default::default()
    }
}

fn cfg(s: &Standin) -> JiraConfig {
    config(&s.url(), s.flavor, s.version)
}

fn report(headline: &str, id: &str) -> String {
    format!(
        "## {headline}\n\n- incident `{id}` (open), 41 failing traces\n- window 2026-03-01T10:00:00Z → 2026-03-01T10:05:00Z\n- requests 900, failures 56, 504 41, 503 3, timeouts 12\n\n### Causes of the failures in this window\n\n| cause | component | traces | share |\n|---|---|---:|---:|\n| llm_prefill_slow | deepseek-v4-pro | 41 | 73 % |\n| tool_timeout | search | 15 | 27 % |\n\n### Statistics of this cause\n\n- input_tokens_p50: `412`\n\n### LLM latency by input-token bucket\n\n| input tokens | calls | P50 | P90 | P99 | max | 504 share |\n|---|---:|---:|---:|---:|---:|---:|\n| <50 | 120 | 1.2 s | 2.0 s | 3.1 s | 4.0 s | 0 % |\n| >500 | 80 | 31 s | 58 s | 61 s | 62 s | 51 % |\n\n### Findings\n\n- **no_timeout** (3 traces): the call to search ran with no timeout\n\n### Example traces\n\n- `4bf92f3577b34da6a3ce929d0e0e4736`\n"
    )
}

fn event(kind: &str, component: &str, at: chrono::DateTime<Utc>) -> IncidentEvent {
    let fingerprint = format!("{kind}:{component}");
    let incident_id = format!("{fingerprint}@{}", at.to_rfc3339());
    let headline = format!(
        "73 % of 504s came from {kind} on {component}; median input 412 tokens > 300 (at {})",
        at.format("%H:%M:%S")
    );
    IncidentEvent {
        report_markdown: report(&headline, &incident_id),
        report_url: Some(format!(
            "http://overtime.example:8080/api/incidents/{incident_id}?format=markdown"
        )),
        incident_id,
        fingerprint,
        kind: kind.into(),
        component: component.into(),
        headline,
        failures: 41,
        at,
    }
}

async fn wait_for(what: &str, n: &Notifier, cond: impl Fn(&JiraStats) -> bool) -> JiraStats {
    let start = Instant::now();
    loop {
        let s = n.stats();
        if cond(&s) {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A loopback port held but not listened on: a connection to it is
/// refused until [`Standin::start_on`] listens on it, and no other test
/// can take it meanwhile (a port found free and let go was, once, and
/// this test's "Jira is down" reached another test's stand-in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_incident_opens_one_issue_with_its_labels_and_report_cloud_v3() {
    let jira = Standin::start(Flavor::Cloud, 3).await;
    let dir = tempfile::tempdir().unwrap();
    let n = Notifier::start(cfg(&jira), Some(TOKEN.into()), dir.path().into()).unwrap();
    let ev = event("llm_prefill_slow", "deepseek-v4-pro", Utc::now());
    assert_eq!(n.incident_opened(ev.clone()).unwrap(), Accepted::Queued);
    wait_for("the issue", &n, |s| s.created == 1).await;

    let issues = jira.issues();
    assert_eq!(issues.len(), 1);
    let i = &issues[0];
    assert_eq!(i.summary, ev.headline);
    assert_eq!(i.issue_type, "Bug");
    assert!(
        i.labels.contains(&fingerprint_label(&ev.fingerprint)),
        "{:?}",
        i.labels
    );
    assert!(i.labels.contains(&"overtime".to_string()));
    assert!(i.labels.contains(&incident_label(&ev.incident_id)));
    // ADF (the stand-in validated its structure), with the report's tables
    assert_eq!(i.description["type"], "doc");
    let blocks = i.description["content"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "heading");
    assert_eq!(blocks.iter().filter(|b| b["type"] == "table").count(), 2);
    let text = body_text(&i.description);
    assert!(text.contains(&ev.headline));
    assert!(text.contains("deepseek-v4-pro") && text.contains("51 %"));
    assert!(jira.rejections().is_empty(), "{:?}", jira.rejections());
    assert_eq!(jira.count("POST", "/rest/api/3/search/jql"), 1);
    assert_eq!(n.stats().queued, 0);
    assert_eq!(pending_files(dir.path()), 0);
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recurrence_while_open_is_a_comment_not_a_new_issue_data_center_v2() {
    let jira = Standin::start(Flavor::DataCenter, 2).await;
    let dir = tempfile::tempdir().unwrap();
    let n = Notifier::start(cfg(&jira), Some(TOKEN.into()), dir.path().into()).unwrap();
    let t0 = Utc::now() - Days::minutes(30);
    let first = event("tool_timeout", "search", t0);
    let again = event("tool_timeout", "search", t0 + Days::minutes(20));
    assert_ne!(first.incident_id, again.incident_id);
    n.incident_opened(first).unwrap();
    n.incident_opened(again.clone()).unwrap();
    let s = wait_for("the comment", &n, |s| s.commented == 1).await;
    assert_eq!((s.created, s.reopened, s.failed), (1, 0, 0));

    let issues = jira.issues();
    assert_eq!(issues.len(), 1, "one ticket per fingerprint");
    let i = &issues[0];
    let wiki = i.description.as_str().expect("v2 description is a string");
    assert!(
        wiki.starts_with("h2. 73 % of 504s came from tool\\_timeout on search"),
        "{wiki}"
    );
    assert!(
        wiki.contains("||cause||component||traces||share||"),
        "{wiki}"
    );
    assert_eq!(i.comments.len(), 1);
    let c = body_text(&i.comments[0].body);
    assert!(c.contains(&again.headline), "{c}");
    assert!(c.contains(again.report_url.as_deref().unwrap()), "{c}");
    assert!(jira.rejections().is_empty(), "{:?}", jira.rejections());
    assert_eq!(jira.count("GET", "/rest/api/2/search"), 2);
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incident_renamed_by_an_earlier_failure_is_found_on_its_ticket_not_commented() {
    let jira = Standin::start(Flavor::Cloud, 3).await;
    let dir = tempfile::tempdir().unwrap();
    let n = Notifier::start(cfg(&jira), Some(TOKEN.into()), dir.path().into()).unwrap();
    // Incident ids as overtime writes them: fingerprint@start, ms, Z.
    let as_overtime = |mut e: IncidentEvent| {
        e.incident_id = format!(
            "{}@{}",
            e.fingerprint,
            e.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        );
        e
    };
    let t0 = Utc::now() - Days::minutes(30);
    let ticketed = as_overtime(event("tool_timeout", "search", t0));
    // A failure that started 4 s earlier joined late (another collector
    // held it): the same incident, now named by that failure.
    let renamed = as_overtime(event("tool_timeout", "search", t0 - Days::seconds(4)));
    // A later incident of the same cause is a recurrence all the same.
    let recurred = as_overtime(event("tool_timeout", "search", t0 + Days::minutes(20)));
    n.incident_opened(ticketed).unwrap();
    n.incident_opened(renamed).unwrap();
    let s = wait_for("the renamed one found", &n, |s| s.found_existing == 1).await;
    assert_eq!((s.created, s.commented, s.failed), (1, 0, 0));
    n.incident_opened(recurred).unwrap();
    let s = wait_for("the recurrence's comment", &n, |s| s.commented == 1).await;
    assert_eq!((s.created, s.found_existing, s.failed), (1, 1, 0));
    let issues = jira.issues();
    assert_eq!(issues.len(), 1, "one ticket per fingerprint");
    assert_eq!(issues[0].comments.len(), 1, "only the recurrence commented");
    assert!(jira.rejections().is_empty(), "{:?}", jira.rejections());
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recurrence_an_hour_after_resolution_reopens_and_comments() {
    let jira = Standin::start(Flavor::Cloud, 3).await;
    let dir = tempfile::tempdir().unwrap();
    let n = Notifier::start(cfg(&jira), Some(TOKEN.into()), dir.path().into()).unwrap();
    n.incident_opened(event("llm_decode_slow", "m1", Utc::now() - Days::hours(3)))
        .unwrap();
    wait_for("the issue", &n, |s| s.created == 1).await;
    jira.resolve("OPS-1", Utc::now() - Days::hours(1));

    n.incident_opened(event("llm_decode_slow", "m1", Utc::now()))
        .unwrap();
    let s = wait_for("the reopen", &n, |s| s.reopened == 1).await;
    assert_eq!((s.created, s.commented), (1, 0));
    let issues = jira.issues();
    assert_eq!(issues.len(), 1);
    assert!(!issues[0].done, "reopened");
    assert_eq!(issues[0].comments.len(), 1);
    assert!(body_text(&issues[0].comments[0].body).contains("reopened from Done"));
    assert_eq!(jira.count("POST", "/issue/OPS-1/transitions"), 1);
    assert!(jira.rejections().is_empty(), "{:?}", jira.rejections());
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recurrence_long_after_resolution_opens_a_new_issue_naming_the_old_one() {
    let jira = Standin::start(Flavor::Cloud, 2).await;
    let dir = tempfile::tempdir().unwrap();
    let n = Notifier::start(cfg(&jira), Some(TOKEN.into()), dir.path().into()).unwrap();
    n.incident_opened(event(
        "connect_slow",
        "10.0.0.7",
        Utc::now() - Days::days(10),
    ))
    .unwrap();
    wait_for("the issue", &n, |s| s.created == 1).await;
    jira.resolve("OPS-1", Utc::now() - Days::hours(100)); // window: 72 h

    n.incident_opened(event("connect_slow", "10.0.0.7", Utc::now()))
        .unwrap();
    wait_for("the second issue", &n, |s| s.created == 2).await;
    let issues = jira.issues();
    assert_eq!(issues.len(), 2);
    assert!(issues[0].done && !issues[1].done);
    assert!(
        issues[1]
            .description
            .as_str()
            .unwrap()
            .contains("previous ticket: OPS-1")
    );
    assert_eq!(jira.count("GET", "/transitions"), 0);
    assert!(jira.rejections().is_empty(), "{:?}", jira.rejections());
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_without_the_reopen_transition_gets_a_new_issue() {
    let jira = Standin::start(Flavor::DataCenter, 2).await;
    jira.state().reopen_available = false;
    let dir = tempfile::tempdir().unwrap();
    let n = Notifier::start(cfg(&jira), Some(TOKEN.into()), dir.path().into()).unwrap();
    n.incident_opened(event("tool_timeout", "crm", Utc::now() - Days::hours(2)))
        .unwrap();
    wait_for("the issue", &n, |s| s.created == 1).await;
    jira.resolve("OPS-1", Utc::now() - Days::minutes(30));
    n.incident_opened(event("tool_timeout", "crm", Utc::now()))
        .unwrap();
    wait_for("the second issue", &n, |s| s.created == 2).await;
    let d = body_text(&jira.issues()[1].description);
    assert!(
        d.contains("OPS-1") && d.contains("could not be reopened"),
        "{d}"
    );
    assert!(d.contains("Archive"), "names the transitions it saw: {d}");
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jira_outage_loses_nothing_and_delivers_each_event_once_in_order() {
    let (addr, port) = down_port();
    let dir = tempfile::tempdir().unwrap();
    let c = config(&format!("http://{addr}"), Flavor::DataCenter, 2);
    let n = Notifier::start(c, Some(TOKEN.into()), dir.path().into()).unwrap();
    let t = Utc::now() - Days::minutes(10);
    let a = event("llm_prefill_slow", "m1", t);
    let b = event("tool_timeout", "search", t + Days::minutes(1));
    let a2 = event("llm_prefill_slow", "m1", t + Days::minutes(2));
    for e in [&a, &b, &a2] {
        assert_eq!(n.incident_opened(e.clone()).unwrap(), Accepted::Queued);
    }
    let s = wait_for("retries while Jira is down", &n, |s| s.retries >= 3).await;
    assert_eq!(s.queued, 3);
    assert!(s.last_error.unwrap().contains("could not connect"));

    let jira = Standin::start_on(port, Flavor::DataCenter, 2);
    jira.state()
        .faults
        .extend([Fault::Status(503), Fault::Status(502)]);
    let s = wait_for("delivery after the outage", &n, |s| s.queued == 0).await;
    assert_eq!((s.created, s.commented, s.failed), (2, 1, 0));
    let issues = jira.issues();
    assert_eq!(issues.len(), 2);
    assert!(
        issues[0]
            .labels
            .contains(&fingerprint_label(&a.fingerprint)),
        "oldest first"
    );
    assert!(
        issues[1]
            .labels
            .contains(&fingerprint_label(&b.fingerprint))
    );
    assert_eq!(issues[0].comments.len(), 1);
    assert_eq!(jira.count("POST", "/rest/api/2/issue"), 2);
    assert!(jira.rejections().is_empty(), "{:?}", jira.rejections());
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_waits_for_retry_after_then_succeeds() {
    let jira = Standin::start(Flavor::Cloud, 3).await;
    jira.state().faults.push_back(Fault::RateLimit {
        retry_after_secs: 1,
    });
    let dir = tempfile::tempdir().unwrap();
    let n = Notifier::start(cfg(&jira), Some(TOKEN.into()), dir.path().into()).unwrap();
    n.incident_opened(event("tool_timeout", "search", Utc::now()))
        .unwrap();
    let s = wait_for("the issue", &n, |s| s.created == 1).await;
    assert_eq!((s.rate_limited, s.retries), (1, 1));
    let log = jira.state().log.clone();
    assert_eq!(log[0].status, 429);
    let waited = log[1].at.duration_since(log[0].at);
    assert!(waited >= Duration::from_secs(1), "retried after {waited:?}");
    assert_eq!(jira.issues().len(), 1);
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_events_in_the_outbox_files_each_exactly_once() {
    let (addr, port) = down_port();
    let dir = tempfile::tempdir().unwrap();
    let c = config(&format!("http://{addr}"), Flavor::Cloud, 2);
    let a = event("llm_prefill_slow", "m1", Utc::now());
    let b = event("tool_timeout", "search", Utc::now());

    let n1 = Notifier::start(c.clone(), Some(TOKEN.into()), dir.path().into()).unwrap();
    n1.incident_opened(a.clone()).unwrap();
    n1.incident_opened(b.clone()).unwrap();
    wait_for("a failed attempt", &n1, |s| s.retries >= 1).await;
    n1.shutdown().await;
    assert_eq!(pending_files(dir.path()), 2, "both events are on disk");

    // Restarted while Jira is still down: both events are read back from
    // disk (and nothing can be delivered yet to change the count).
    let n2 = Notifier::start(c.clone(), Some(TOKEN.into()), dir.path().into()).unwrap();
    assert_eq!(n2.stats().queued, 2);
    let jira = Standin::start_on(port, Flavor::Cloud, 2);
    wait_for("both issues", &n2, |s| s.created == 2).await;
    n2.shutdown().await;
    assert_eq!(jira.issues().len(), 2);

    // a third start: nothing left to send, and the same incident again is a duplicate
    let n3 = Notifier::start(c, Some(TOKEN.into()), dir.path().into()).unwrap();
    assert_eq!(n3.incident_opened(a).unwrap(), Accepted::Duplicate);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(n3.stats().skipped_duplicate, 1);
    assert_eq!(jira.issues().len(), 2);
    assert_eq!(jira.count("POST", "/rest/api/2/issue"), 2);
    n3.shutdown().await;
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

fn poll(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Jira stores the issue, the notifier's process dies before the answer
/// arrives: on restart the outbox still holds the event, and the notifier
/// must find the issue by the incident label instead of creating another.
#[test]
fn a_crash_after_jira_created_the_issue_but_before_the_ack_still_files_one_issue() {
    let rt_jira = runtime();
    let jira = rt_jira.block_on(Standin::start(Flavor::Cloud, 3));
    jira.state().create_delay = Some(Duration::from_secs(3));
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(&jira);
    c.search_settle_secs = 1;
    let ev = event("llm_prefill_slow", "deepseek-v4-pro", Utc::now());

    let rt_a = runtime();
    let n = rt_a
        .block_on(async { Notifier::start(c.clone(), Some(TOKEN.into()), dir.path().into()) })
        .unwrap();
    n.incident_opened(ev.clone()).unwrap();
    poll("Jira to store the issue", || jira.issues().len() == 1);
    rt_a.shutdown_background(); // the crash: the POST's answer is never read
    drop(n);
    let pending = std::fs::read_to_string(dir.path().join("00000000000000000001.json")).unwrap();
    assert!(pending.contains("\"create_sent\": true"), "{pending}");
    jira.state().create_delay = None;

    let rt_b = runtime();
    let n = rt_b
        .block_on(async { Notifier::start(c, Some(TOKEN.into()), dir.path().into()) })
        .unwrap();
    rt_b.block_on(wait_for("the restart to settle the event", &n, |s| {
        s.queued == 0
    }));
    let s = n.stats();
    assert_eq!((s.created, s.failed), (1, 0), "{s:?}");
    assert_eq!(jira.issues().len(), 1, "no second ticket");
    assert_eq!(jira.count("POST", "/rest/api/3/issue"), 1);
    let journal = std::fs::read_to_string(dir.path().join("delivered.jsonl")).unwrap();
    assert!(
        journal.contains(&ev.incident_id) && journal.contains("OPS-1"),
        "{journal}"
    );
    rt_b.block_on(n.shutdown());
}

#[test]
fn a_crash_after_jira_stored_the_comment_but_before_the_ack_still_comments_once() {
    let rt_jira = runtime();
    let jira = rt_jira.block_on(Standin::start(Flavor::DataCenter, 2));
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(&jira);
    let t = Utc::now() - Days::minutes(20);

    let rt_a = runtime();
    let n = rt_a
        .block_on(async { Notifier::start(c.clone(), Some(TOKEN.into()), dir.path().into()) })
        .unwrap();
    n.incident_opened(event("tool_timeout", "search", t))
        .unwrap();
    rt_a.block_on(wait_for("the issue", &n, |s| s.created == 1));
    jira.state().comment_delay = Some(Duration::from_secs(3));
    n.incident_opened(event("tool_timeout", "search", t + Days::minutes(10)))
        .unwrap();
    poll("Jira to store the comment", || {
        jira.issues().first().is_some_and(|i| i.comments.len() == 1)
    });
    rt_a.shutdown_background();
    drop(n);
    jira.state().comment_delay = None;

    let rt_b = runtime();
    let n = rt_b
        .block_on(async { Notifier::start(c, Some(TOKEN.into()), dir.path().into()) })
        .unwrap();
    let s = rt_b.block_on(wait_for("the restart to settle", &n, |s| s.queued == 0));
    assert_eq!(s.commented, 1, "{s:?}");
    assert_eq!(jira.issues()[0].comments.len(), 1, "no second comment");
    assert_eq!(
        jira.count("GET", "/issue/OPS-1/comment"),
        1,
        "it checked first"
    );
    rt_b.block_on(n.shutdown());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_a_permanent_failure_never_retried() {
    let jira = Standin::start(Flavor::DataCenter, 2).await;
    let dir = tempfile::tempdir().unwrap();
    let n = Notifier::start(cfg(&jira), Some("not-the-token".into()), dir.path().into()).unwrap();
    n.incident_opened(event("tool_timeout", "search", Utc::now()))
        .unwrap();
    let s = wait_for("the failure", &n, |s| s.failed == 1).await;
    assert_eq!(s.retries, 0);
    assert!(s.last_error.unwrap().contains("not authenticated"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(jira.state().log.len(), 1, "not retried");
    let dead =
        std::fs::read_to_string(dir.path().join("failed/00000000000000000001.json")).unwrap();
    assert!(dead.contains("HTTP 401"), "{dead}");
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_400_keeps_jiras_messages_and_the_queue_moves_on() {
    let jira = Standin::start(Flavor::Cloud, 3).await;
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(&jira);
    c.issue_type = "Epic".into(); // not an issue type of the project
    let n = Notifier::start(c, Some(TOKEN.into()), dir.path().into()).unwrap();
    n.incident_opened(event("tool_timeout", "search", Utc::now()))
        .unwrap();
    n.incident_opened(event("connect_slow", "db", Utc::now()))
        .unwrap();
    let s = wait_for("both failures", &n, |s| s.failed == 2).await;
    assert_eq!((s.retries, s.created, s.queued), (0, 0, 0));
    let dead =
        std::fs::read_to_string(dir.path().join("failed/00000000000000000002.json")).unwrap();
    assert!(dead.contains("issuetype: Specify an issue type"), "{dead}");
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_causes_and_repeated_ids_open_nothing_and_are_counted() {
    let jira = Standin::start(Flavor::Cloud, 3).await;
    let dir = tempfile::tempdir().unwrap();
    let n = Notifier::start(cfg(&jira), Some(TOKEN.into()), dir.path().into()).unwrap();
    let unknown = event("unknown", "-", Utc::now());
    assert_eq!(n.incident_opened(unknown).unwrap(), Accepted::Skipped);
    let ev = event("tool_timeout", "search", Utc::now());
    assert_eq!(n.incident_opened(ev.clone()).unwrap(), Accepted::Queued);
    assert_eq!(n.incident_opened(ev).unwrap(), Accepted::Duplicate);
    let s = wait_for("the issue", &n, |s| s.created == 1).await;
    assert_eq!((s.skipped_unknown, s.skipped_duplicate), (1, 1));
    assert_eq!(jira.issues().len(), 1);
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_refuses_a_missing_token_and_a_bad_config() {
    let dir = tempfile::tempdir().unwrap();
    let c = config("http://127.0.0.1:9", Flavor::Cloud, 3);
    let e = Notifier::start(c.clone(), None, dir.path().into())
        .err()
        .unwrap();
    assert!(e.to_string().contains("OVERTIME_JIRA_TOKEN"), "{e}");
    let mut bad = c;
    bad.api_version = Some(4);
    let e = Notifier::start(bad, Some(TOKEN.into()), dir.path().into())
        .err()
        .unwrap();
    assert!(e.to_string().contains("api_version"), "{e}");
}
