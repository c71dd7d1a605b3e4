//! The one global byte budget: writes beyond it get `Full`, memory stays
//! bounded, and a flush (on demand or by the background flusher) makes room.

use crate::common;
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

/// A batch larger than the whole budget never fits under it: it is let in
/// once the memtable is at most half full (never stuck, memory at most
/// half the budget plus that batch), and refused as `Full` before that.
#[test]
fn a_batch_larger_than_the_budget_waits_for_half_the_budget_then_goes_in() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path());
    c.memtable_bytes = 256 << 10;
    c.flush_interval_ms = 0; // flushes only when asked
    let s = Store::open(c).unwrap();
    let big = spans(0, 5_000, |i| T0 + i as i64);
    assert!(big.get_array_memory_size() > 256 << 10);
    // Over half full: refused, nothing stored.
    while s.memtable_bytes() <= 128 << 10 {
        s.write(Table::Spans, spans(10_000, 100, |i| T0 + i as i64), None)
            .unwrap();
    }
    let held = s.memtable_bytes();
    let err = s.write(Table::Spans, big.clone(), None).unwrap_err();
    assert!(matches!(err, SinkError::Full { .. }), "{err}");
    assert_eq!(s.memtable_bytes(), held);
    // Once flushed, in it goes, alone over the budget.
    s.flush().unwrap();
    s.write(Table::Spans, big, None).unwrap();
    assert!(s.memtable_bytes() > 256 << 10);
    assert_eq!(s.backpressure(), Some(overtime_store::RETRY_AFTER_MS));
}

/// A refused write makes the flusher flush at once even below half the
/// budget: a source waiting with a large batch is not left for the
/// periodic flush (60 s here).
#[test]
fn a_refused_write_is_not_left_waiting_for_the_periodic_flush() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path());
    c.memtable_bytes = 1 << 20;
    c.flush_interval_ms = 60_000;
    c.fsync = false;
    c.retention_age_hours = None; // the background flush enforces retention; T0 is older
    let s = Store::open(c).unwrap();
    let small = spans(0, 200, |i| T0 + i as i64);
    s.write(Table::Spans, small, None).unwrap();
    assert!(s.memtable_bytes() * 2 < 1 << 20, "below half: no flush yet");
    // A batch that fits the budget but not beside what is held.
    let mut n = 500;
    let large = loop {
        let b = spans(100_000, n, |i| T0 + i as i64);
        let cost = b.get_array_memory_size() as u64;
        if cost + s.memtable_bytes() > 1 << 20 && cost <= 1 << 20 {
            break b;
        }
        n += 250;
    };
    let started = Instant::now();
    loop {
        match s.write(Table::Spans, large.clone(), None) {
            Ok(()) => break,
            Err(SinkError::Full { .. }) => {
                assert!(
                    started.elapsed() < Duration::from_secs(120),
                    "still refused after {:?}: waiting for the periodic flush",
                    started.elapsed()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(s.stats().flushes >= 1);
}

#[test]
fn background_flusher_makes_room_for_a_retrying_writer() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path());
    c.memtable_bytes = 2 << 20;
    c.flush_interval_ms = 60_000; // only the half-budget trigger can fire in time
    c.fsync = false;
    c.retention_age_hours = None; // the background flush enforces retention; T0 is older
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
