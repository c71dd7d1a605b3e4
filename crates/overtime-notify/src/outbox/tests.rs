//! The outbox across reopens: order, keys, references, merging, and what
//! a crash leaves behind.

use super::*;
use crate::notice::{Incident, Links};

type Notices = Outbox<Notice>;

fn inc(id: &str, failures: u64) -> Incident {
    Incident {
        id: id.into(),
        fingerprint: "k:c".into(),
        kind: "k".into(),
        component: "c".into(),
        open: true,
        headline: "h".into(),
        started_at: "2026-03-01T10:00:00Z".parse().unwrap(),
        failures,
        gateway_504: 1,
        requests: 10,
        timeouts: 1,
        top_cause: None,
        example_trace_ids: vec![],
        links: Links::default(),
        report_markdown: String::new(),
    }
}

fn done(key: &str, id: &str, reference: Option<&str>) -> Delivered {
    Delivered {
        key: key.into(),
        for_incident: id.into(),
        reference: reference.map(str::to_string),
        action: "posted".into(),
        at: Utc::now(),
    }
}

#[test]
fn notices_and_references_survive_a_reopen_and_a_delivered_page_is_never_queued_again() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut ob, rep) = Notices::open(dir.path()).unwrap();
        assert_eq!(rep, OpenReport::default());
        assert_eq!(ob.push(Notice::Page(inc("a", 1))).unwrap(), Pushed::Queued);
        assert_eq!(
            ob.push(Notice::Page(inc("a", 2))).unwrap(),
            Pushed::Duplicate
        );
        ob.push(Notice::Resolve(inc("a", 2))).unwrap();
        let seq = ob.front().unwrap().seq;
        ob.complete(seq, done("page:a", "a", Some("C1/1.5")))
            .unwrap();
    }
    let (mut ob, _) = Notices::open(dir.path()).unwrap();
    assert_eq!(ob.len(), 1);
    assert_eq!(ob.front().unwrap().key, "resolve:a");
    assert_eq!(ob.reference("a"), Some("C1/1.5"));
    assert_eq!(
        ob.push(Notice::Page(inc("a", 3))).unwrap(),
        Pushed::Duplicate
    );
    assert_eq!(ob.push(Notice::Page(inc("b", 1))).unwrap(), Pushed::Queued);
    assert_eq!(ob.pending.back().unwrap().seq, 3, "sequences continue");
}

#[test]
fn an_update_replaces_a_waiting_one_and_none_follows_a_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ob, _) = Notices::open(dir.path()).unwrap();
    ob.push(Notice::Page(inc("a", 1))).unwrap();
    assert_eq!(
        ob.push(Notice::Update(inc("a", 2))).unwrap(),
        Pushed::Queued
    );
    assert_eq!(
        ob.push(Notice::Update(inc("a", 3))).unwrap(),
        Pushed::Merged
    );
    assert_eq!(ob.len(), 2);
    assert_eq!(
        ob.pending[1].event,
        Notice::Update(inc("a", 3)),
        "the newest waits"
    );
    let (ob2, _) = Notices::open(dir.path()).unwrap();
    assert_eq!(ob2.pending[1].event, Notice::Update(inc("a", 3)));
    let seq = ob.front().unwrap().seq;
    ob.complete(seq, done("resolve:a", "a", None)).unwrap();
    assert_eq!(
        ob.push(Notice::Update(inc("a", 4))).unwrap(),
        Pushed::Duplicate
    );
}

#[test]
fn bad_files_torn_journal_lines_and_tmp_files_are_counted_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("00000000000000000003.json"), b"{not json").unwrap();
    fs::write(dir.path().join(".00000000000000000004.json.tmp"), b"{").unwrap();
    fs::write(
        dir.path().join("delivered.jsonl"),
        "{\"key\":\"page:x\",\"action\":\"posted\",\"at\":\"2026-03-01T10:00:00Z\"}\n{\"key\":\"pa",
    )
    .unwrap();
    let (mut ob, rep) = Notices::open(dir.path()).unwrap();
    assert_eq!(
        rep,
        OpenReport {
            bad_files: 1,
            bad_journal_lines: 1,
            removed_tmp: 1
        }
    );
    assert!(ob.knows("page:x"));
    assert!(
        dir.path()
            .join("failed/00000000000000000003.json.unreadable")
            .exists()
    );
    assert_eq!(ob.next_seq, 4, "a sequence is never reused");
    ob.complete(99, done("page:z", "z", None)).unwrap();
    let (ob2, rep2) = Notices::open(dir.path()).unwrap();
    assert_eq!(rep2.bad_journal_lines, 0, "the torn line was dropped");
    assert!(ob2.knows("page:x") && ob2.knows("page:z"));
}

#[test]
fn dead_letters_keep_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ob, _) = Notices::open(dir.path()).unwrap();
    ob.push(Notice::Page(inc("a", 1))).unwrap();
    let e = ob.front().unwrap().clone();
    ob.dead_letter(e, "HTTP 400: invalid_blocks").unwrap();
    assert!(ob.is_empty());
    let f = fs::read_to_string(dir.path().join("failed/00000000000000000001.json")).unwrap();
    assert!(f.contains("invalid_blocks"));
    let (mut ob2, _) = Notices::open(dir.path()).unwrap();
    assert!(ob2.is_empty());
    assert_eq!(ob2.push(Notice::Page(inc("b", 1))).unwrap(), Pushed::Queued);
    assert_eq!(ob2.front().unwrap().seq, 2);
}

/// An item keyed by its own id, with a progress of its own, as Jira's
/// incident events are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Ticket {
    incident_id: String,
}

impl Queued for Ticket {
    fn key(&self) -> Key {
        Key::Once(self.incident_id.clone())
    }

    fn about(&self) -> &str {
        &self.incident_id
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Progress {
    #[serde(default)]
    create_sent: bool,
}

#[test]
fn an_outbox_written_before_keys_and_references_still_reads() {
    // Jira's outbox before it was shared: no `key` in waiting files, and
    // journal lines of `incident_id` and `issue_key`.
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("00000000000000000002.json"),
        r#"{"seq": 2, "event": {"incident_id": "b"}, "queued_at": "2026-03-01T10:00:00Z",
            "attempts": 1, "progress": {"create_sent": true}, "last_error": null}"#,
    )
    .unwrap();
    fs::write(
        dir.path().join("delivered.jsonl"),
        "{\"incident_id\":\"a\",\"issue_key\":\"OPS-1\",\"action\":\"created\",\"at\":\"2026-03-01T10:00:00Z\"}\n",
    )
    .unwrap();
    let (mut ob, rep) = Outbox::<Ticket, Progress>::open(dir.path()).unwrap();
    assert_eq!(rep, OpenReport::default());
    assert!(ob.knows("a") && ob.knows("b"));
    assert_eq!(ob.reference("a"), Some("OPS-1"));
    let front = ob.front().unwrap();
    assert_eq!(
        (front.key.as_str(), front.progress.create_sent),
        ("b", true)
    );
    assert_eq!(
        ob.push(Ticket {
            incident_id: "a".into()
        })
        .unwrap(),
        Pushed::Duplicate
    );
}
