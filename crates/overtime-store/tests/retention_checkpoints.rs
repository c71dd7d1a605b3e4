//! Retention by age and by size; checkpoints across restart and flush.

use crate::common;
use common::*;
use overtime_model::{Checkpoint, RecordSink, Table};
use overtime_store::Store;

fn write_hours(s: &Store, hours: i64) {
    for h in 0..hours {
        let first = (h * 100) as u64;
        s.write(
            Table::Spans,
            spans(first, 100, |i| T0 + h * HOUR + i as i64),
            None,
        )
        .unwrap();
    }
    s.flush().unwrap();
}

#[test]
fn retention_by_age_drops_whole_hour_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path());
    c.retention_age_hours = Some(2);
    let s = Store::open(c).unwrap();
    write_hours(&s, 4);
    assert_eq!(s.stats().parquet_files, 4);
    // at T0+4h with 2h retention, hours 0 and 1 (ending at T0+1h, T0+2h) expire
    let r = s.enforce_retention(T0 + 4 * HOUR).unwrap();
    assert_eq!(r.files_removed.len(), 2, "{r:?}");
    assert_eq!(r.rows_removed, 200);
    for p in &r.files_removed {
        assert!(!p.exists());
    }
    let left = lines(&s.scan(Table::Spans, None, None).unwrap());
    assert!(left.iter().all(|l| *l >= 200), "{left:?}");
    assert_eq!(left.len(), 200);
    // an hour still inside the window is kept
    let r = s.enforce_retention(T0 + 4 * HOUR).unwrap();
    assert!(r.files_removed.is_empty());
    // and it stays gone after a restart
    drop(s);
    let s = Store::open(cfg(dir.path())).unwrap();
    assert_eq!(s.stats().parquet_files, 2);
}

#[test]
fn retention_by_size_drops_the_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(cfg(dir.path())).unwrap();
    write_hours(&s, 4);
    let total = s.parquet_bytes();
    let per = total / 4;
    drop(s);
    let mut c = cfg(dir.path());
    c.retention_bytes = Some(total - per / 2); // a bit too much: one file must go
    let s = Store::open(c).unwrap();
    let r = s.enforce_retention(T0).unwrap();
    assert_eq!(r.files_removed.len(), 1, "{r:?}");
    assert!(s.parquet_bytes() <= total - per / 2);
    let left = lines(&s.scan(Table::Spans, None, None).unwrap());
    assert!(left.iter().all(|l| *l >= 100), "the oldest hour went first");
}

#[test]
fn checkpoints_survive_restart_and_flush() {
    let dir = tempfile::tempdir().unwrap();
    let ck = |src: &str, pos: &str| {
        Some(Checkpoint {
            source: src.into(),
            position: pos.into(),
        })
    };
    {
        let s = Store::open(cfg(dir.path())).unwrap();
        s.write(
            Table::Spans,
            spans(0, 4, |i| T0 + i as i64),
            ck("kafka:spans/0", "10"),
        )
        .unwrap();
        s.write(
            Table::Spans,
            spans(4, 4, |i| T0 + i as i64),
            ck("kafka:spans/0", "20"),
        )
        .unwrap();
        s.write(
            Table::GatewayRequests,
            gateway(0, 4, |i| T0 + i as i64),
            ck("file:edge.log", "inode=1 offset=99"),
        )
        .unwrap();
        assert_eq!(s.checkpoint("kafka:spans/0").as_deref(), Some("20"));
        assert_eq!(s.checkpoint("nobody"), None);
    }
    {
        let s = Store::open(cfg(dir.path())).unwrap();
        assert_eq!(s.checkpoint("kafka:spans/0").as_deref(), Some("20"));
        s.flush().unwrap();
        assert_eq!(s.wal_bytes(), 0);
    }
    {
        // the WAL was truncated: checkpoints come from the manifest
        let s = Store::open(cfg(dir.path())).unwrap();
        assert_eq!(s.checkpoint("kafka:spans/0").as_deref(), Some("20"));
        assert_eq!(
            s.checkpoint("file:edge.log").as_deref(),
            Some("inode=1 offset=99")
        );
        // a checkpoint-only write (nothing parsed from that stretch) is durable too
        s.write(Table::Spans, spans(0, 0, |_| T0), ck("kafka:spans/0", "30"))
            .unwrap();
    }
    let s = Store::open(cfg(dir.path())).unwrap();
    assert_eq!(s.checkpoint("kafka:spans/0").as_deref(), Some("30"));
    assert_eq!(rows(&s.scan(Table::Spans, None, None).unwrap()), 8);
}

#[test]
fn unfinished_flush_files_are_discarded_and_the_wal_replayed() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Store::open(cfg(dir.path())).unwrap();
        s.write(Table::Spans, spans(0, 10, |i| T0 + i as i64), None)
            .unwrap();
        s.flush().unwrap();
        s.write(Table::Spans, spans(10, 10, |i| T0 + i as i64), None)
            .unwrap();
    }
    // Simulate a crash after a flush wrote its file but before the manifest:
    // a file whose sequence is past `flushed_through`.
    let sdir = dir.path().join("parquet/spans");
    let f = std::fs::read_dir(&sdir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let fake = sdir.join("20251129T200000Z-0000000000000099.parquet");
    std::fs::copy(&f, &fake).unwrap();
    let s = Store::open(cfg(dir.path())).unwrap();
    assert!(!fake.exists());
    let mut l = lines(&s.scan(Table::Spans, None, None).unwrap());
    l.sort();
    assert_eq!(l, (0..20).collect::<Vec<u64>>());
}
