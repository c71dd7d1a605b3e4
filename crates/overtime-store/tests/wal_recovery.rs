//! WAL round trip and recovery from torn and corrupt tails.

use crate::common;
use common::*;
use overtime_model::{Checkpoint, RecordSink, Table};
use overtime_store::Store;
use overtime_store::format::{HEADER_LEN, list_segments, segment_path};
use std::fs;
use std::path::Path;

fn ck(pos: u64) -> Option<Checkpoint> {
    Some(Checkpoint {
        source: "file:edge.log".into(),
        position: format!("offset={pos}"),
    })
}

/// Byte offsets where each record of a segment starts.
fn record_starts(bytes: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + HEADER_LEN <= bytes.len() {
        out.push(at);
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        at += HEADER_LEN + len;
    }
    assert_eq!(at, bytes.len(), "records tile the segment");
    out
}

fn only_segment(dir: &Path) -> std::path::PathBuf {
    let wal = dir.join("wal");
    let segs: Vec<_> = list_segments(&wal)
        .unwrap()
        .into_iter()
        .filter(|s| fs::metadata(segment_path(&wal, *s)).unwrap().len() > 0)
        .collect();
    assert_eq!(segs.len(), 1, "one non-empty segment");
    segment_path(&wal, segs[0])
}

#[test]
fn wal_round_trip_restores_every_table_and_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Store::open(cfg(dir.path())).unwrap();
        s.write(Table::Spans, spans(0, 40, |i| T0 + i as i64), ck(1))
            .unwrap();
        s.write(
            Table::GatewayRequests,
            gateway(0, 10, |i| T0 + i as i64),
            ck(2),
        )
        .unwrap();
        s.write(Table::Rejected, rejected(0, 3), ck(3)).unwrap();
        assert!(s.wal_bytes() > 0);
    }
    let s = Store::open(cfg(dir.path())).unwrap();
    let st = s.stats();
    assert_eq!(st.tables["spans"].memtable_rows, 40);
    assert_eq!(st.tables["gateway_requests"].memtable_rows, 10);
    assert_eq!(st.tables["rejected"].memtable_rows, 3);
    assert_eq!(s.checkpoint("file:edge.log").as_deref(), Some("offset=3"));
    let back = s.scan(Table::Spans, None, None).unwrap();
    assert_eq!(back[0], spans(0, 40, |i| T0 + i as i64));
    // rejected rows carry the store's ingested_at side column
    let rej = s.scan(Table::Rejected, None, None).unwrap();
    assert_eq!(
        rej[0].schema().fields().last().unwrap().name(),
        "ingested_at"
    );
}

#[test]
fn torn_last_record_is_dropped_at_every_byte_offset() {
    let src = tempfile::tempdir().unwrap();
    {
        let s = Store::open(cfg(src.path())).unwrap();
        for i in 0..4 {
            s.write(Table::Rejected, rejected(i * 10, 10), ck(i))
                .unwrap();
        }
    }
    let seg = only_segment(src.path());
    let bytes = fs::read(&seg).unwrap();
    let starts = record_starts(&bytes);
    assert_eq!(starts.len(), 4);
    let last = *starts.last().unwrap();
    let name = seg.file_name().unwrap().to_owned();
    for cut in last..=bytes.len() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("wal")).unwrap();
        let torn = dir.path().join("wal").join(&name);
        fs::write(&torn, &bytes[..cut]).unwrap();
        let mut c = cfg(dir.path());
        c.fsync = false;
        let s = Store::open(c).unwrap();
        let whole = cut == bytes.len();
        let want = if whole { 40 } else { 30 };
        let got = lines(&s.scan(Table::Rejected, None, None).unwrap());
        assert_eq!(got, (0..want).collect::<Vec<u64>>(), "cut at {cut}");
        let pos = if whole { "offset=3" } else { "offset=2" };
        assert_eq!(
            s.checkpoint("file:edge.log").as_deref(),
            Some(pos),
            "cut at {cut}"
        );
        // the torn tail is cut off, so later appends are never hidden behind it
        let kept = fs::metadata(&torn).unwrap().len() as usize;
        assert_eq!(kept, if whole { bytes.len() } else { last }, "cut at {cut}");
    }
}

#[test]
fn corrupt_record_keeps_everything_before_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Store::open(cfg(dir.path())).unwrap();
        for i in 0..3 {
            s.write(Table::Rejected, rejected(i * 10, 10), ck(i))
                .unwrap();
        }
    }
    let seg = only_segment(dir.path());
    let mut bytes = fs::read(&seg).unwrap();
    let starts = record_starts(&bytes);
    let mid = starts[1] + HEADER_LEN + 20;
    bytes[mid] ^= 0xff;
    fs::write(&seg, &bytes).unwrap();
    let s = Store::open(cfg(dir.path())).unwrap();
    assert_eq!(
        lines(&s.scan(Table::Rejected, None, None).unwrap()),
        (0..10).collect::<Vec<u64>>()
    );
    assert_eq!(s.checkpoint("file:edge.log").as_deref(), Some("offset=0"));
    // new writes after recovery are durable too
    s.write(Table::Rejected, rejected(100, 1), ck(9)).unwrap();
    drop(s);
    let s = Store::open(cfg(dir.path())).unwrap();
    assert_eq!(rows(&s.scan(Table::Rejected, None, None).unwrap()), 11);
    assert_eq!(s.checkpoint("file:edge.log").as_deref(), Some("offset=9"));
}

#[test]
fn schema_mismatch_is_refused_not_stored() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(cfg(dir.path())).unwrap();
    let err = s
        .write(Table::Spans, gateway(0, 1, |_| T0), None)
        .unwrap_err();
    assert!(matches!(err, overtime_model::SinkError::Failed(_)), "{err}");
    assert_eq!(s.wal_bytes(), 0);
    assert_eq!(s.memtable_bytes(), 0);
}

/// Two writers on one WAL would corrupt it: a second open of a data dir in
/// use fails with a clear error naming the holder, and succeeds once the
/// first store is closed.
#[test]
fn a_data_dir_in_use_is_refused_then_free_after_close() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = overtime_store::StoreConfig {
        data_dir: dir.path().to_path_buf(),
        flush_interval_ms: 0,
        ..Default::default()
    };
    let first = overtime_store::Store::open(cfg.clone()).unwrap();
    let err = overtime_store::Store::open(cfg.clone())
        .err()
        .expect("second open refused");
    let text = err.to_string();
    assert!(text.contains("in use"), "{text}");
    assert!(text.contains(&std::process::id().to_string()), "{text}");
    drop(first);
    overtime_store::Store::open(cfg).expect("free again after close");
}
