//! The durable outbox: one JSON file per pending incident, written to a
//! temporary name, fsynced, renamed into place and the folder fsynced — an
//! event is on disk before `incident_opened` returns.
//!
//! Layout of the outbox folder:
//! - `00000000000000000007.json`: a pending event (sequence number 7) with
//!   its delivery progress; rewritten the same atomic way whenever the
//!   progress changes (before each non-idempotent call to Jira);
//! - `delivered.jsonl`: the journal of delivered incidents (`incident_id`,
//!   issue key, action), appended and fsynced *before* the pending file is
//!   removed; a restart re-reads it, so an incident is never sent twice;
//! - `failed/`: events Jira refused for good (4xx) or that ran out of
//!   attempts, with the reason; move one back to retry it;
//! - `.*.tmp`: a write cut short by a crash; removed on open (its
//!   `incident_opened` never returned).

use crate::event::IncidentEvent;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{HashSet, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

/// An outbox file operation that failed.
#[derive(Debug, thiserror::Error)]
#[error("jira outbox {path}: {op}: {source}")]
pub struct OutboxError {
    /// The file or folder (under the outbox folder, `outbox_dir`).
    pub path: PathBuf,
    /// What was being done, in words (`create folder`, `rename into
    /// place`, `read`…).
    pub op: &'static str,
    /// The operating system's reason (a full disk, permissions).
    #[source]
    pub source: io::Error,
}

fn ctx<T>(r: io::Result<T>, path: &Path, op: &'static str) -> Result<T, OutboxError> {
    r.map_err(|source| OutboxError {
        path: path.to_path_buf(),
        op,
        source,
    })
}

/// What has already been sent for an event, recorded before each call to
/// Jira that is not safe to repeat.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Progress {
    /// An issue creation was sent (its answer may never have arrived).
    #[serde(default)]
    pub(crate) create_sent: bool,
    /// The reopen transition was sent on this issue.
    #[serde(default)]
    pub(crate) reopen_sent_on: Option<String>,
    /// The status the issue was reopened from.
    #[serde(default)]
    pub(crate) reopened_from: Option<String>,
    /// A comment was sent on this issue.
    #[serde(default)]
    pub(crate) comment_sent_on: Option<String>,
}

/// One pending event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Entry {
    pub(crate) seq: u64,
    pub(crate) event: IncidentEvent,
    pub(crate) queued_at: DateTime<Utc>,
    /// Failed delivery attempts so far.
    #[serde(default)]
    pub(crate) attempts: u32,
    #[serde(default)]
    pub(crate) progress: Progress,
    #[serde(default)]
    pub(crate) last_error: Option<String>,
}

/// A line of `delivered.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Delivered {
    pub(crate) incident_id: String,
    pub(crate) issue_key: String,
    /// `created`, `commented`, `reopened` or `found` (already there).
    pub(crate) action: String,
    pub(crate) at: DateTime<Utc>,
}

/// What [`Outbox::open`] found that it could not use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct OpenReport {
    /// Pending files that did not parse, moved to `failed/`.
    pub(crate) bad_files: usize,
    /// Journal lines that did not parse (a torn last line after a crash).
    pub(crate) bad_journal_lines: usize,
    /// Unfinished temporary files removed.
    pub(crate) removed_tmp: usize,
}

/// The outbox folder, loaded.
#[derive(Debug)]
pub(crate) struct Outbox {
    dir: PathBuf,
    pending: VecDeque<Entry>,
    delivered: HashSet<String>,
    next_seq: u64,
}

/// Journal lines kept when the journal is compacted on open.
pub(crate) const JOURNAL_KEEP: usize = 10_000;

fn seq_of(name: &str) -> Option<u64> {
    let name = name.strip_suffix(".unreadable").unwrap_or(name);
    let stem = name.strip_suffix(".json")?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

fn fsync_dir(dir: &Path) -> Result<(), OutboxError> {
    ctx(
        File::open(dir).and_then(|d| d.sync_all()),
        dir,
        "fsync folder",
    )
}

fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), OutboxError> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let dst = dir.join(name);
    ctx(
        (|| {
            let mut f = File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()
        })(),
        &tmp,
        "write",
    )?;
    ctx(fs::rename(&tmp, &dst), &dst, "rename into place")?;
    fsync_dir(dir)
}

impl Outbox {
    /// Opens (creating) the outbox folder and loads pending events in
    /// sequence order and the delivered journal.
    pub(crate) fn open(dir: &Path) -> Result<(Outbox, OpenReport), OutboxError> {
        let failed = dir.join("failed");
        ctx(fs::create_dir_all(&failed), &failed, "create folder")?;
        let mut report = OpenReport::default();
        let mut pending = Vec::new();
        let mut max_seq = 0u64;
        for d in [dir, failed.as_path()] {
            for item in ctx(fs::read_dir(d), d, "list")? {
                let item = ctx(item, d, "list")?;
                let name = item.file_name().to_string_lossy().into_owned();
                let path = item.path();
                if d == dir && name.starts_with('.') && name.ends_with(".tmp") {
                    ctx(fs::remove_file(&path), &path, "remove unfinished write")?;
                    report.removed_tmp += 1;
                    continue;
                }
                let Some(seq) = seq_of(&name) else { continue };
                max_seq = max_seq.max(seq);
                if d != dir {
                    continue;
                }
                let parsed = fs::read(&path)
                    .map_err(|e| e.to_string())
                    .and_then(|b| serde_json::from_slice::<Entry>(&b).map_err(|e| e.to_string()));
                match parsed {
                    Ok(e) => pending.push(e),
                    Err(why) => {
                        eprintln!(
                            "overtime-jira: outbox file {} is unreadable ({why}); moved to failed/",
                            path.display()
                        );
                        let to = failed.join(format!("{name}.unreadable"));
                        ctx(fs::rename(&path, &to), &path, "move unreadable file")?;
                        report.bad_files += 1;
                    }
                }
            }
        }
        pending.sort_by_key(|e| e.seq);
        let journal = dir.join("delivered.jsonl");
        let mut delivered = HashSet::new();
        let mut lines = Vec::new();
        if journal.exists() {
            let f = ctx(File::open(&journal), &journal, "open")?;
            for line in io::BufReader::new(f).lines() {
                let line = ctx(line, &journal, "read")?;
                if line.trim().is_empty() {
                    continue;
                }
                match serde_json::from_str::<Delivered>(&line) {
                    Ok(d) => {
                        delivered.insert(d.incident_id);
                        lines.push(line);
                    }
                    Err(_) => report.bad_journal_lines += 1,
                }
            }
        }
        if lines.len() > JOURNAL_KEEP || report.bad_journal_lines > 0 {
            let keep = &lines[lines.len().saturating_sub(JOURNAL_KEEP)..];
            let mut text = keep.join("\n");
            text.push('\n');
            write_atomic(dir, "delivered.jsonl", text.as_bytes())?;
        }
        let outbox = Outbox {
            dir: dir.to_path_buf(),
            pending: pending.into(),
            delivered,
            next_seq: max_seq + 1,
        };
        Ok((outbox, report))
    }

    /// Whether this incident is pending or already delivered.
    pub(crate) fn knows(&self, incident_id: &str) -> bool {
        self.delivered.contains(incident_id)
            || self
                .pending
                .iter()
                .any(|e| e.event.incident_id == incident_id)
    }

    /// Writes a new event durably and queues it; returns its sequence.
    pub(crate) fn push(&mut self, event: IncidentEvent) -> Result<u64, OutboxError> {
        let entry = Entry {
            seq: self.next_seq,
            event,
            queued_at: Utc::now(),
            attempts: 0,
            progress: Progress::default(),
            last_error: None,
        };
        self.save(&entry)?;
        self.next_seq += 1;
        let seq = entry.seq;
        self.pending.push_back(entry);
        Ok(seq)
    }

    fn name(seq: u64) -> String {
        format!("{seq:020}.json")
    }

    /// Rewrites a pending event (its progress) durably.
    pub(crate) fn save(&mut self, entry: &Entry) -> Result<(), OutboxError> {
        let bytes = serde_json::to_vec_pretty(entry).expect("an outbox entry serializes");
        write_atomic(&self.dir, &Self::name(entry.seq), &bytes)?;
        if let Some(p) = self.pending.iter_mut().find(|e| e.seq == entry.seq) {
            *p = entry.clone();
        }
        Ok(())
    }

    /// The oldest pending event.
    pub(crate) fn front(&self) -> Option<&Entry> {
        self.pending.front()
    }

    /// Pending events.
    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }

    /// No pending event.
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Records the delivery in the journal (fsynced), then removes the
    /// pending file.
    pub(crate) fn complete(&mut self, seq: u64, done: Delivered) -> Result<(), OutboxError> {
        let journal = self.dir.join("delivered.jsonl");
        let mut line = serde_json::to_string(&done).expect("a journal line serializes");
        line.push('\n');
        ctx(
            (|| {
                let mut f = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&journal)?;
                f.write_all(line.as_bytes())?;
                f.sync_all()
            })(),
            &journal,
            "append",
        )?;
        self.delivered.insert(done.incident_id);
        self.remove(seq)
    }

    /// Moves a pending event to `failed/` with the reason.
    pub(crate) fn dead_letter(&mut self, mut entry: Entry, why: &str) -> Result<(), OutboxError> {
        entry.last_error = Some(why.to_string());
        let bytes = serde_json::to_vec_pretty(&entry).expect("an outbox entry serializes");
        write_atomic(&self.dir.join("failed"), &Self::name(entry.seq), &bytes)?;
        self.remove(entry.seq)
    }

    fn remove(&mut self, seq: u64) -> Result<(), OutboxError> {
        let path = self.dir.join(Self::name(seq));
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return ctx(Err(e), &path, "remove delivered event"),
        }
        fsync_dir(&self.dir)?;
        self.pending.retain(|e| e.seq != seq);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: &str) -> IncidentEvent {
        IncidentEvent {
            incident_id: id.into(),
            fingerprint: "k:c".into(),
            kind: "k".into(),
            component: "c".into(),
            headline: "h".into(),
            report_markdown: "r".into(),
            report_url: None,
            failures: 1,
            at: "2026-03-01T10:00:00Z".parse().unwrap(),
        }
    }

    #[test]
    fn events_survive_a_reopen_in_order_and_delivered_ones_are_remembered() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut ob, rep) = Outbox::open(dir.path()).unwrap();
            assert_eq!(rep, OpenReport::default());
            ob.push(ev("a")).unwrap();
            ob.push(ev("b")).unwrap();
            ob.push(ev("c")).unwrap();
            let a = ob.front().unwrap().seq;
            ob.complete(
                a,
                Delivered {
                    incident_id: "a".into(),
                    issue_key: "OPS-1".into(),
                    action: "created".into(),
                    at: Utc::now(),
                },
            )
            .unwrap();
            let mut b = ob.front().unwrap().clone();
            b.progress.create_sent = true;
            ob.save(&b).unwrap();
        }
        let (ob, _) = Outbox::open(dir.path()).unwrap();
        assert!(ob.knows("a"));
        assert_eq!(ob.len(), 2);
        assert_eq!(ob.front().unwrap().event.incident_id, "b");
        assert!(ob.front().unwrap().progress.create_sent);
        let mut ob = ob;
        let d = ob.push(ev("d")).unwrap();
        assert_eq!(d, 4, "sequence numbers continue after a restart");
    }

    #[test]
    fn bad_files_torn_journal_lines_and_tmp_files_are_counted_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("00000000000000000003.json"), b"{not json").unwrap();
        fs::write(dir.path().join(".00000000000000000004.json.tmp"), b"{").unwrap();
        fs::write(
            dir.path().join("delivered.jsonl"),
            "{\"incident_id\":\"x\",\"issue_key\":\"OPS-1\",\"action\":\"created\",\"at\":\"2026-03-01T10:00:00Z\"}\n{\"incident_id\":\"y\",\"iss",
        )
        .unwrap();
        let (mut ob, rep) = Outbox::open(dir.path()).unwrap();
        assert_eq!(
            rep,
            OpenReport {
                bad_files: 1,
                bad_journal_lines: 1,
                removed_tmp: 1
            }
        );
        assert!(ob.knows("x") && !ob.knows("y"));
        assert!(
            dir.path()
                .join("failed/00000000000000000003.json.unreadable")
                .exists()
        );
        assert!(!dir.path().join(".00000000000000000004.json.tmp").exists());
        // the journal was rewritten without the torn line: appends stay parseable
        ob.complete(
            99,
            Delivered {
                incident_id: "z".into(),
                issue_key: "OPS-2".into(),
                action: "commented".into(),
                at: Utc::now(),
            },
        )
        .unwrap();
        let (ob2, rep2) = Outbox::open(dir.path()).unwrap();
        assert_eq!(rep2.bad_journal_lines, 0);
        assert!(ob2.knows("x") && ob2.knows("z"));
        assert_eq!(
            ob.next_seq, 4,
            "a sequence is never reused, even of an unreadable file"
        );
    }

    #[test]
    fn dead_letters_keep_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let (mut ob, _) = Outbox::open(dir.path()).unwrap();
        ob.push(ev("a")).unwrap();
        let e = ob.front().unwrap().clone();
        ob.dead_letter(e, "HTTP 400: summary too long").unwrap();
        assert!(ob.is_empty());
        let f = fs::read_to_string(dir.path().join("failed/00000000000000000001.json")).unwrap();
        assert!(f.contains("summary too long"));
        let (ob2, _) = Outbox::open(dir.path()).unwrap();
        assert!(ob2.is_empty());
        let mut ob2 = ob2;
        assert_eq!(ob2.push(ev("b")).unwrap(), 2);
    }
}
