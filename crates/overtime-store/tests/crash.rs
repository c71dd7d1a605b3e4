//! Recovery after a real crash: a child process writes from two threads,
//! flushing now and then, printing `ACK <thread> <batch>` after each
//! acknowledged write; the parent SIGKILLs it mid-stream, reopens the
//! store and checks that every acknowledged record is there exactly once.
//!
//! The child is this same test, run again by the parent (this binary,
//! `--exact` this test) with `OVERTIME_CRASH_DIR` naming the store: in
//! that process the test is the writer, and it never returns — it writes
//! until it is killed. So there is one test, and it always does its whole
//! work; nothing passes by skipping (a child that stops writing early
//! fails the parent, saying how it ended).

use crate::common;
use common::*;
use overtime_model::{Checkpoint, RecordSink, Table};
use overtime_store::Store;
use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ENV: &str = "OVERTIME_CRASH_DIR";
const ROWS: u64 = 20;

/// Lines of batch `b` of thread `t`.
fn first_line(t: u64, b: u64) -> u64 {
    t * 1_000_000_000 + b * ROWS
}

/// The child's work: writes into the store at `dir` from two threads
/// until the process is killed.
fn write_until_killed(dir: &std::path::Path) -> ! {
    let mut c = cfg(dir);
    c.memtable_bytes = 1 << 30;
    let store = Arc::new(Store::open(c).unwrap());
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let workers: Vec<_> = (0..2u64)
        .map(|t| {
            let (store, out) = (store.clone(), out.clone());
            std::thread::spawn(move || {
                for b in 0u64.. {
                    let first = first_line(t, b);
                    let batch = gateway(first, ROWS, |i| T0 + (i % 100_000) as i64 * 1000);
                    let ck = Checkpoint {
                        source: format!("thread-{t}"),
                        position: b.to_string(),
                    };
                    store
                        .write(Table::GatewayRequests, batch, Some(ck))
                        .unwrap();
                    let mut o = out.lock().unwrap();
                    writeln!(o, "ACK {t} {b}").unwrap();
                    o.flush().unwrap();
                    drop(o);
                    if t == 0 && b % 40 == 39 {
                        store.flush().unwrap();
                        let mut o = out.lock().unwrap();
                        writeln!(o, "FLUSHED").unwrap();
                        o.flush().unwrap();
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    unreachable!("the writers loop until the process is killed");
}

#[test]
fn kill_9_mid_stream_loses_no_ack() {
    // In the child this test is the writer (see the module header).
    if let Some(dir) = std::env::var_os(ENV) {
        write_until_killed(std::path::Path::new(&dir));
    }
    let dir = tempfile::tempdir().unwrap();
    // The child is this binary running only this test (its name is
    // relative to the test binary's root: `crash::kill_9_…`).
    let child_test = format!(
        "{}::kill_9_mid_stream_loses_no_ack",
        module_path!().split_once("::").map_or("", |(_, m)| m)
    );
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([&child_test, "--exact", "--nocapture", "--test-threads=1"])
        .env(ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let child_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let stdout = child.stdout.take().unwrap();
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = seen.clone();
    let flushes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let flushed = flushes.clone();
    let reader = std::thread::spawn(move || {
        let mut acks: Vec<(u64, u64)> = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut p = line.split_whitespace();
            let word = p.next();
            if word == Some("FLUSHED") {
                flushed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            if word == Some("ACK") {
                let t = p.next().unwrap().parse().unwrap();
                let b = p.next().unwrap().parse().unwrap();
                acks.push((t, b));
                counter.store(acks.len(), std::sync::atomic::Ordering::Relaxed);
            }
        }
        acks
    });
    // Let it run past a completed flush (thread 0 flushes every 40
    // batches) and 200 acknowledged writes, however slow the machine, then
    // kill -9 mid-stream.
    let started = Instant::now();
    while seen.load(std::sync::atomic::Ordering::Relaxed) <= 200
        || flushes.load(std::sync::atomic::Ordering::Relaxed) == 0
    {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the writer ended by itself ({status}) after {} acknowledged writes: {}",
                seen.load(std::sync::atomic::Ordering::Relaxed),
                child_err.join().unwrap()
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "in 120 s the child acknowledged only {} writes and completed {} flushes",
            seen.load(std::sync::atomic::Ordering::Relaxed),
            flushes.load(std::sync::atomic::Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let acks = reader.join().unwrap();
    assert!(
        acks.len() > 100,
        "child acknowledged only {} writes in {:?}",
        acks.len(),
        started.elapsed()
    );

    let store = Store::open(cfg(dir.path())).unwrap();
    let all = lines(&store.scan(Table::GatewayRequests, None, None).unwrap());
    let mut seen = HashSet::new();
    for l in &all {
        assert!(seen.insert(*l), "line {l} stored twice");
    }
    let mut last: BTreeMap<u64, u64> = BTreeMap::new();
    for (t, b) in &acks {
        for l in first_line(*t, *b)..first_line(*t, *b) + ROWS {
            assert!(
                seen.contains(&l),
                "acknowledged line {l} (thread {t}, batch {b}) lost"
            );
        }
        let e = last.entry(*t).or_default();
        *e = (*e).max(*b);
    }
    // Whole batches only, and checkpoints at least as far as the last ack.
    assert_eq!(all.len() as u64 % ROWS, 0);
    for (t, b) in last {
        let pos: u64 = store
            .checkpoint(&format!("thread-{t}"))
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            pos >= b,
            "thread {t}: checkpoint {pos} behind acknowledged batch {b}"
        );
    }
    assert!(
        store.stats().parquet_files > 0,
        "the child flushed before dying"
    );
}
