//! A channel's durable outbox: one JSON file per waiting item, written
//! to a temporary name, fsynced, renamed into place and the folder
//! fsynced — an item is on disk before `notify` returns. Generic over
//! what waits ([`Queued`]): the [`Notice`]s of the channels on
//! [`crate::Durable`], Jira's incident events; and over what a channel
//! records of its progress in an entry (Jira: which calls it sent).
//!
//! Layout of the outbox folder (one per channel):
//! - `00000000000000000007.json`: a waiting notice (sequence number 7)
//!   with its attempts and whether a call that is not safe to repeat may
//!   have reached the server (`sent`); rewritten the same atomic way;
//! - `delivered.jsonl`: the journal of delivered notices (their key, the
//!   incident they recorded something for, and that reference — a Slack
//!   message's `channel/ts`), appended and fsynced *before* the waiting
//!   file is removed; a restart re-reads it, so a notice is never sent
//!   twice and an update after a restart still finds its message;
//! - `failed/`: notices refused for good or out of attempts, with the
//!   reason; move one back to retry it;
//! - `.*.tmp`: a write cut short by a crash; removed on open.

use crate::notice::Notice;
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

/// An outbox file operation that failed.
#[derive(Debug, thiserror::Error)]
#[error("outbox {path}: {op}: {source}")]
pub struct OutboxError {
    /// The file or folder.
    pub path: PathBuf,
    /// What was being done, in words (`create folder`, `rename into place`…).
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

/// How an item is deduplicated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    /// Delivered at most once, ever (`page:{id}`).
    Once(String),
    /// The newest replaces one of the same key still waiting, and none is
    /// queued once `moot` was delivered (an update after the resolution).
    Latest {
        /// The key it replaces by.
        key: String,
        /// The once-key whose delivery makes it moot.
        moot: String,
    },
}

/// What can wait in an outbox.
pub trait Queued: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {
    /// How it is deduplicated.
    fn key(&self) -> Key;
    /// The incident whose recorded reference its delivery reads.
    fn about(&self) -> &str;
    /// The incident what its delivery records stands for.
    fn records_for(&self) -> &str {
        self.about()
    }
}

impl Queued for Notice {
    fn key(&self) -> Key {
        match Notice::key(self) {
            Some(k) => Key::Once(k),
            None => Key::Latest {
                key: format!("{}:{}", self.name(), self.about()),
                moot: format!("resolve:{}", self.about()),
            },
        }
    }

    fn about(&self) -> &str {
        Notice::about(self)
    }

    fn records_for(&self) -> &str {
        Notice::records_for(self)
    }
}

/// One waiting item, with what `P` records of its progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry<E, P = ()> {
    /// Its place in the queue; never reused.
    pub seq: u64,
    /// Its key ([`Queued::key`]); filled in on open when missing.
    #[serde(default)]
    pub key: String,
    /// What to deliver.
    pub event: E,
    /// When it was queued.
    pub queued_at: DateTime<Utc>,
    /// Failed attempts so far.
    #[serde(default)]
    pub attempts: u32,
    /// A call that is not safe to repeat may have reached the server:
    /// the next attempt looks before it sends again.
    #[serde(default)]
    pub sent: bool,
    /// What the channel recorded of its progress.
    #[serde(default)]
    pub progress: P,
    /// The last attempt's error.
    #[serde(default)]
    pub last_error: Option<String>,
}

/// A line of `delivered.jsonl` (Jira's journals of before, with
/// `incident_id` and `issue_key`, read as key and reference).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivered {
    /// The item's key.
    #[serde(alias = "incident_id")]
    pub key: String,
    /// The incident the reference stands for (empty: the key).
    #[serde(default)]
    pub for_incident: String,
    /// What the channel keeps for the incident (a Slack message's
    /// `channel/ts`, a Jira issue key).
    #[serde(default, alias = "issue_key")]
    pub reference: Option<String>,
    /// What the delivery did (`posted`, `updated`, `triggered`…).
    pub action: String,
    /// When.
    pub at: DateTime<Utc>,
}

/// What [`Outbox::open`] found that it could not use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Waiting files that did not parse, moved to `failed/`.
    pub bad_files: usize,
    /// Journal lines that did not parse (a torn last line after a crash).
    pub bad_journal_lines: usize,
    /// Unfinished temporary files removed.
    pub removed_tmp: usize,
}

/// What [`Outbox::push`] did with an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Written and queued.
    Queued,
    /// A [`Key::Latest`] item that replaced one waiting.
    Merged,
    /// Already waiting or delivered (or moot).
    Duplicate,
}

/// The outbox folder, loaded.
#[derive(Debug)]
pub struct Outbox<E, P = ()> {
    dir: PathBuf,
    pending: VecDeque<Entry<E, P>>,
    delivered: HashSet<String>,
    references: HashMap<String, String>,
    next_seq: u64,
}

/// Journal lines kept when the journal is compacted on open.
pub const JOURNAL_KEEP: usize = 10_000;

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

impl<E: Queued, P> Outbox<E, P>
where
    P: Serialize + DeserializeOwned + Clone + Default,
{
    /// Opens (creating) the outbox folder and loads the waiting items in
    /// sequence order and the journal.
    pub fn open(dir: &Path) -> Result<(Outbox<E, P>, OpenReport), OutboxError> {
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
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Entry<E, P>>(&b).ok());
                match parsed {
                    Some(mut e) => {
                        if e.key.is_empty() {
                            e.key = key_of(&e.event);
                        }
                        pending.push(e)
                    }
                    None => {
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
        let mut references = HashMap::new();
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
                        if let Some(r) = d.reference {
                            let id = if d.for_incident.is_empty() {
                                d.key.clone()
                            } else {
                                d.for_incident
                            };
                            references.insert(id, r);
                        }
                        delivered.insert(d.key);
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
            references,
            next_seq: max_seq + 1,
        };
        Ok((outbox, report))
    }

    /// Whether an item with this key is waiting or delivered.
    pub fn knows(&self, key: &str) -> bool {
        self.delivered.contains(key) || self.pending.iter().any(|e| e.key == key)
    }

    /// What was recorded for an incident (a Slack message), if anything.
    pub fn reference(&self, incident_id: &str) -> Option<&str> {
        self.references.get(incident_id).map(String::as_str)
    }

    /// Writes an item durably and queues it — unless it is a duplicate;
    /// a [`Key::Latest`] item replaces one of its key still waiting that no
    /// attempt has picked up yet (the newest is what counts).
    pub fn push(&mut self, event: E) -> Result<Pushed, OutboxError> {
        let key = match event.key() {
            Key::Once(k) if self.knows(&k) => return Ok(Pushed::Duplicate),
            Key::Once(k) => k,
            Key::Latest { moot, .. } if self.knows(&moot) => return Ok(Pushed::Duplicate),
            Key::Latest { key, .. } => {
                let waiting = self
                    .pending
                    .iter()
                    .skip(1) // the front may be in flight
                    .find(|e| e.key == key && e.attempts == 0)
                    .cloned();
                if let Some(mut e) = waiting {
                    e.event = event;
                    self.save(&e)?;
                    return Ok(Pushed::Merged);
                }
                key
            }
        };
        let entry = Entry {
            seq: self.next_seq,
            key,
            event,
            queued_at: Utc::now(),
            attempts: 0,
            sent: false,
            progress: P::default(),
            last_error: None,
        };
        self.save(&entry)?;
        self.next_seq += 1;
        self.pending.push_back(entry);
        Ok(Pushed::Queued)
    }

    fn name(seq: u64) -> String {
        format!("{seq:020}.json")
    }

    /// Rewrites a waiting item durably.
    pub fn save(&mut self, entry: &Entry<E, P>) -> Result<(), OutboxError> {
        let bytes = serde_json::to_vec_pretty(entry).expect("an outbox entry serializes");
        write_atomic(&self.dir, &Self::name(entry.seq), &bytes)?;
        if let Some(p) = self.pending.iter_mut().find(|e| e.seq == entry.seq) {
            *p = entry.clone();
        }
        Ok(())
    }

    /// The oldest waiting item.
    pub fn front(&self) -> Option<&Entry<E, P>> {
        self.pending.front()
    }

    /// Waiting items.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Nothing waiting.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Records the delivery in the journal (fsynced), then removes the
    /// waiting file.
    pub fn complete(&mut self, seq: u64, done: Delivered) -> Result<(), OutboxError> {
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
        let once = self
            .pending
            .iter()
            .find(|e| e.seq == seq)
            .is_none_or(|e| matches!(e.event.key(), Key::Once(_)));
        if let Some(r) = done.reference {
            let id = if done.for_incident.is_empty() {
                done.key.clone()
            } else {
                done.for_incident
            };
            self.references.insert(id, r);
        }
        // A `Latest` key stays reusable: only once-keys are remembered.
        if once {
            self.delivered.insert(done.key);
        }
        self.remove(seq)
    }

    /// Moves a waiting item to `failed/` with the reason.
    pub fn dead_letter(&mut self, mut entry: Entry<E, P>, why: &str) -> Result<(), OutboxError> {
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
            Err(e) => return ctx(Err(e), &path, "remove delivered item"),
        }
        fsync_dir(&self.dir)?;
        self.pending.retain(|e| e.seq != seq);
        Ok(())
    }
}

/// The key an item is stored under.
fn key_of<E: Queued>(e: &E) -> String {
    match e.key() {
        Key::Once(k) | Key::Latest { key: k, .. } => k,
    }
}

#[cfg(test)]
mod tests;
