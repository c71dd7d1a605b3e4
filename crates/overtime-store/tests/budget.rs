//! The one global byte budget: writes beyond it get `Full`, memory stays
//! bounded, and a flush (on demand or by the background flusher) makes room.

mod common;
use common::*;
use overtime_model::{RecordSink, SinkError, Table};
use overtime_store::Store;
use std::time::{Duration, Instant};

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = s
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

#[test]
fn writes_beyond_the_budget_get_full_and_memory_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path());
    c.memtable_bytes = 4 << 20;
    c.fsync = false;
    let s = Store::open(c).unwrap();
    let mut accepted = 0u64;
    let mut full = 0u64;
    let rss_before = rss_bytes();
    for b in 0..2_000u64 {
        match s.write(
            Table::Spans,
            spans(b * 500, 500, |i| T0 + i as i64 * 1000),
            None,
        ) {
            Ok(()) => accepted += 1,
            Err(SinkError::Full { retry_after_ms }) => {
                assert!(retry_after_ms > 0);
                full += 1;
            }
            Err(e) => panic!("{e}"),
        }
        assert!(s.memtable_bytes() <= 4 << 20);
    }
    let grew = rss_bytes().saturating_sub(rss_before);
    assert!(
        accepted > 0 && full > 1_000,
        "accepted {accepted}, full {full}"
    );
    assert!(
        grew < 64 << 20,
        "RSS grew by {grew} bytes under a 4 MiB budget"
    );
    assert_eq!(s.stats().backpressure_events, full);
    // Full (less than an eighth free): sources are told early.
    assert!(s.memtable_bytes() > (4 << 20) * 7 / 8);
    assert_eq!(s.backpressure(), Some(overtime_store::RETRY_AFTER_MS));
    // a flush makes room again
    s.flush().unwrap();
    assert_eq!(s.memtable_bytes(), 0);
    assert_eq!(s.backpressure(), None);
    s.write(Table::Spans, spans(0, 10, |i| T0 + i as i64), None)
        .unwrap();
}

#[test]
fn a_batch_larger_than_the_budget_fails_instead_of_waiting_forever() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path());
    c.memtable_bytes = 64 << 10;
    let s = Store::open(c).unwrap();
    let err = s
        .write(Table::Spans, spans(0, 5_000, |i| T0 + i as i64), None)
        .unwrap_err();
    assert!(matches!(err, SinkError::Failed(_)), "{err}");
}

#[test]
fn background_flusher_makes_room_for_a_retrying_writer() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path());
    c.memtable_bytes = 2 << 20;
    c.flush_interval_ms = 60_000; // only the half-budget trigger can fire in time
    c.fsync = false;
    let s = Store::open(c).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut refused = 0;
    for b in 0..100u64 {
        loop {
            match s.write(
                Table::Spans,
                spans(b * 500, 500, |i| T0 + i as i64 * 1000),
                None,
            ) {
                Ok(()) => break,
                Err(SinkError::Full { retry_after_ms }) => {
                    refused += 1;
                    assert!(Instant::now() < deadline, "never made room");
                    std::thread::sleep(Duration::from_millis(retry_after_ms.min(20)));
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    let st = s.stats();
    assert!(st.flushes > 0, "{st:?} (refused {refused})");
    assert_eq!(
        st.tables["spans"].memtable_rows + st.tables["spans"].parquet_rows,
        50_000
    );
    assert_eq!(rows(&s.scan(Table::Spans, None, None).unwrap()), 50_000);
}
