//! Each collector's manifest published in the bucket, the commit record of
//! its flushes: a flush that died before it is read by no other collector
//! and dropped when its writer restarts; one that died after it (before
//! the local manifest) is kept; and the positions it holds are what a
//! partition's next owner starts after.
//!
//! The bucket is a `file://` directory here, so a test can put a
//! manifest back as a crash at that instant would have left it; the same
//! code runs against S3 in `object_store.rs` and the cluster tests.

use crate::common::*;
use overtime_model::{Checkpoint, CommitPoints, RecordSink, Table};
use overtime_store::format::manifest_key;
use overtime_store::{Store, StoreConfig};
use std::fs;
use std::path::{Path, PathBuf};

const SOURCE: &str = "kafka:overtime/spans/0";

fn at(position: &str) -> Option<Checkpoint> {
    Some(Checkpoint {
        source: SOURCE.into(),
        position: position.into(),
    })
}

/// A store on the directory bucket `root/bucket`, prefix `p`.
fn on_dir_bucket(root: &Path, collector: &str) -> StoreConfig {
    StoreConfig {
        url: Some(format!("file://{}/p", root.join("bucket").display())),
        collector_id: Some(collector.into()),
        ..cfg(&root.join(collector))
    }
}

fn published_manifest(root: &Path, collector: &str) -> PathBuf {
    let key = manifest_key("p", collector);
    root.join("bucket").join(key)
}

/// The process holding `s` is killed: nothing more is written, and the OS
/// drops the data dir's lock.
fn kill(s: Store, root: &Path, collector: &str) {
    std::mem::forget(s);
    fs::remove_file(root.join(collector).join("LOCK")).unwrap();
}

/// Spans as another collector counts them (its listing, every file).
fn spans_seen_by(s: &Store) -> usize {
    rows(&s.scan(Table::Spans, None, None).unwrap())
}

fn shared_position(s: &Store) -> Vec<String> {
    s.shared_checkpoints()
        .unwrap()
        .into_iter()
        .filter(|c| c.source == SOURCE)
        .map(|c| c.position)
        .collect()
}

#[test]
fn a_flush_that_died_before_its_published_manifest_is_read_by_no_one_and_dropped_at_restart() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let a = Store::open(on_dir_bucket(root, "a")).unwrap();
    a.write_replayable(Table::Spans, spans(0, 40, |_| T0), at("40"))
        .unwrap();
    a.publish().unwrap();
    let first = fs::read(published_manifest(root, "a")).unwrap();
    let local_first = fs::read(root.join("a/MANIFEST.json")).unwrap();

    // The second flush writes its objects and dies before its manifests:
    // both are put back as they were.
    a.write_replayable(Table::Spans, spans(40, 20, |_| T0), at("60"))
        .unwrap();
    a.publish().unwrap();
    fs::write(published_manifest(root, "a"), first).unwrap();
    fs::write(root.join("a/MANIFEST.json"), local_first).unwrap();
    kill(a, root, "a");

    let b = Store::open(on_dir_bucket(root, "b")).unwrap();
    assert_eq!(
        spans_seen_by(&b),
        40,
        "40..60 are read again from Kafka by the next owner, never from the orphan file"
    );
    assert_eq!(shared_position(&b), vec!["40".to_string()]);

    let a = Store::open(on_dir_bucket(root, "a")).unwrap();
    let st = a.stats();
    assert_eq!(
        (
            st.tables["spans"].parquet_rows,
            st.tables["spans"].parquet_files
        ),
        (40, 1),
        "the unfinished flush's file is deleted at restart"
    );
    assert_eq!(a.checkpoint(SOURCE).as_deref(), Some("40"));
}

#[test]
fn a_flush_published_in_the_bucket_survives_a_crash_before_the_local_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let a = Store::open(on_dir_bucket(root, "a")).unwrap();
    a.write_replayable(Table::Spans, spans(0, 40, |_| T0), at("40"))
        .unwrap();
    // Durable rows of another source go through the WAL as well.
    a.write(Table::Spans, spans(100, 8, |_| T0), None).unwrap();
    a.publish().unwrap();
    // Killed after the bucket's manifest, before the local one.
    fs::remove_file(root.join("a/MANIFEST.json")).unwrap();
    kill(a, root, "a");

    let b = Store::open(on_dir_bucket(root, "b")).unwrap();
    assert_eq!(spans_seen_by(&b), 48);
    assert_eq!(
        shared_position(&b),
        vec!["40".to_string()],
        "the next owner of the partition starts at 40"
    );

    let a = Store::open(on_dir_bucket(root, "a")).unwrap();
    let st = a.stats();
    assert_eq!(
        (
            st.tables["spans"].parquet_rows,
            st.tables["spans"].memtable_rows
        ),
        (48, 0),
        "the published flush is kept and its WAL rows not replayed over it"
    );
    assert_eq!(a.checkpoint(SOURCE).as_deref(), Some("40"));
    assert_eq!(a.commit_point(SOURCE).as_deref(), Some("40"));
}

#[test]
fn shared_checkpoints_hold_every_collectors_published_positions_and_none_without_a_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let a = Store::open(on_dir_bucket(root, "a")).unwrap();
    let b = Store::open(on_dir_bucket(root, "b")).unwrap();
    a.write_replayable(Table::Spans, spans(0, 4, |_| T0), at("7"))
        .unwrap();
    assert!(
        shared_position(&b).is_empty(),
        "nothing is published before a flush"
    );
    a.publish().unwrap();
    b.write_replayable(Table::Spans, spans(4, 4, |_| T0), at("9"))
        .unwrap();
    b.publish().unwrap();
    let mut seen = shared_position(&a);
    seen.sort();
    assert_eq!(seen, vec!["7".to_string(), "9".to_string()]);

    let local = Store::open(cfg(&root.join("local"))).unwrap();
    local
        .write_replayable(Table::Spans, spans(0, 4, |_| T0), at("4"))
        .unwrap();
    local.flush().unwrap();
    assert!(local.shared_checkpoints().unwrap().is_empty());
}

#[test]
fn files_from_before_published_manifests_stay_read_by_everyone_after_the_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let a = Store::open(on_dir_bucket(root, "a")).unwrap();
    a.write(Table::Spans, spans(0, 40, |_| T0), None).unwrap();
    a.flush().unwrap();
    drop(a);
    // An older version wrote no manifest to the bucket.
    fs::remove_file(published_manifest(root, "a")).unwrap();
    let b = Store::open(on_dir_bucket(root, "b")).unwrap();
    assert_eq!(spans_seen_by(&b), 40, "no manifest: every file is read");

    // The upgraded collector publishes one covering what it keeps.
    let a = Store::open(on_dir_bucket(root, "a")).unwrap();
    assert!(published_manifest(root, "a").exists());
    assert_eq!(a.stats().tables["spans"].parquet_rows, 40);
    let b2 = Store::open(on_dir_bucket(root, "b2")).unwrap();
    assert_eq!(spans_seen_by(&b2), 40);
}

#[test]
fn a_flush_whose_manifest_cannot_be_written_is_never_read_and_the_next_one_counts_each_row_once() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let a = Store::open(on_dir_bucket(root, "a")).unwrap();
    a.write(Table::Spans, spans(0, 10, |_| T0), None).unwrap();
    a.flush().unwrap();
    // The manifest's key becomes unwritable (a directory in its place).
    let m = published_manifest(root, "a");
    fs::remove_file(&m).unwrap();
    fs::create_dir(&m).unwrap();
    a.write(Table::Spans, spans(10, 5, |_| T0), None).unwrap();
    assert!(a.flush().is_err(), "no commit record, no flush");
    assert_eq!(a.stats().tables["spans"].memtable_rows, 5, "kept to retry");
    let b = Store::open(on_dir_bucket(root, "b")).unwrap();
    assert_eq!(
        spans_seen_by(&b),
        10,
        "the failed flush's objects are not read"
    );

    fs::remove_dir(&m).unwrap();
    a.flush().unwrap();
    let b2 = Store::open(on_dir_bucket(root, "b2")).unwrap();
    assert_eq!(spans_seen_by(&b2), 15, "each row once");
    let own: Vec<String> = overtime_store::format::Bucket::open(&format!(
        "file://{}/p",
        root.join("bucket").display()
    ))
    .unwrap()
    .list()
    .unwrap()
    .into_iter()
    .map(|(k, _)| k)
    .filter(|k| k.contains("/spans/") && k.rsplit('/').next().unwrap().starts_with("a-"))
    .collect();
    assert_eq!(own.len(), 2, "the failed flush's objects are gone: {own:?}");
}
