//! kill -9 in a loop during ingest. A writer appends gateway lines to a
//! tailed log (some lines in two writes, so a crash can land mid-line, and
//! the log rotated by rename while the collector is down), OTLP senders
//! post failing traces, and `overtime serve` is SIGKILLed at random points
//! and started again, `CYCLES` times. Afterwards:
//! - every line written is in `gateway_requests` exactly once;
//! - every span acknowledged with 200 is in `spans`, and no span is there
//!   twice (a post cut by the kill may or may not be stored, never twice);
//! - every failing trace has exactly one verdict.
//!
//! `serve_durability.rs` covers one kill with a real nginx and a rotation
//! while up; this one repeats the crash and varies where it lands.

use crate::support;

use overtime_test_support::net::{get_json, http, wait_for};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

/// Seconds a wait for something to happen may take before the test calls
/// it a hang: generous, so a slow, loaded machine still passes. Waits on a
/// whole backlog get twice as long.
const PATIENCE_SECS: u64 = 60;

const CYCLES: usize = 6;
/// Which cycle rotates the log while the collector is down.
const ROTATE_IN: usize = 2;
/// Every this-many-th line is a 504 (a failing trace).
const FAIL_EVERY: u64 = 7;

/// A tiny deterministic PRNG (xorshift), seeded from the clock and printed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn rid(i: u64) -> String {
    format!("{:032x}", (0x6a7e_u128 << 100) + i as u128)
}

/// Appends lines until stopped; rotates (rename to `.1`, new file) when
/// asked. Returns how many lines were written.
fn writer(log: PathBuf, stop: Arc<AtomicBool>, rotate: Arc<AtomicBool>, seed: u64) -> u64 {
    let mut rng = Rng(seed | 1);
    let open = |p: &Path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .unwrap()
    };
    let mut f = open(&log);
    let mut i = 0u64;
    while !stop.load(Relaxed) {
        if rotate.swap(false, Relaxed) {
            std::fs::rename(&log, log.with_extension("log.1")).unwrap();
            f = open(&log);
        }
        let status = if i.is_multiple_of(FAIL_EVERY) {
            504
        } else {
            200
        };
        let line = overtime_line(&rid(i), &format!("/w/{i}"), status);
        if rng.below(4) == 0 {
            // Half a line now, the rest a moment later.
            let cut = line.len() / 2;
            f.write_all(&line.as_bytes()[..cut]).unwrap();
            f.flush().unwrap();
            std::thread::sleep(Duration::from_millis(rng.below(20)));
            f.write_all(&line.as_bytes()[cut..]).unwrap();
        } else {
            f.write_all(line.as_bytes()).unwrap();
        }
        f.flush().unwrap();
        i += 1;
        std::thread::sleep(Duration::from_millis(2 + rng.below(6)));
    }
    i
}

#[test]
fn kill_9_in_a_loop_loses_and_duplicates_nothing() {
    let seed = now_ns() as u64;
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    std::fs::write(&log, "").unwrap();
    let cfg = dir.path().join("overtime.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[store]\ndata_dir = {data:?}\nflush_interval_ms = 900\n\
             [otlp]\nhttp_listen = \"127.0.0.1:0\"\ngrpc_listen = \"\"\n[diagnose]\ngrace_ms = 500\n\n\
             [[file]]\npath = {log:?}\nkind = \"nginx\"\nformat = \"overtime\"\nlayer = \"edge\"\n",
            data = dir.path().join("data").display().to_string(),
            log = log.display().to_string(),
        ),
    )
    .unwrap();

    let mut serve = Some(Serve::start(&cfg));
    // Each start binds fresh ports (port 0 in the config): the senders
    // read the receiver's port here, 0 while the collector is down.
    let otlp = Arc::new(AtomicU16::new(serve.as_ref().unwrap().otlp()));
    let stop = Arc::new(AtomicBool::new(false));
    let rotate = Arc::new(AtomicBool::new(false));
    let lines = {
        let (log, stop, rotate) = (log.clone(), stop.clone(), rotate.clone());
        std::thread::spawn(move || writer(log, stop, rotate, seed.rotate_left(17)))
    };
    // Two OTLP senders; only 200s count as acknowledged.
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let posted = Arc::new(AtomicU64::new(0));
    let senders: Vec<_> = (0..2u64)
        .map(|s| {
            let (acked, stop, posted, otlp) =
                (acked.clone(), stop.clone(), posted.clone(), otlp.clone());
            std::thread::spawn(move || {
                let mut n = s;
                while !stop.load(Relaxed) {
                    let port = otlp.load(Relaxed);
                    if port == 0 {
                        std::thread::sleep(Duration::from_millis(3));
                        continue; // down: nothing to post to
                    }
                    let (trace, body) = otlp_failing_trace(0xc1a0, n);
                    posted.fetch_add(1, Relaxed);
                    if let Some((200, _)) = http(
                        port,
                        "POST",
                        "/v1/traces",
                        "application/json",
                        body.as_bytes(),
                    ) {
                        acked.lock().unwrap().insert(trace);
                    }
                    n += 2;
                    std::thread::sleep(Duration::from_millis(3));
                }
            })
        })
        .collect();

    for cycle in 0..CYCLES {
        // Up for 0.3–2.5 s, then killed wherever it is.
        std::thread::sleep(Duration::from_millis(300 + rng.below(2_200)));
        serve.take().unwrap().kill9();
        otlp.store(0, Relaxed);
        if cycle == ROTATE_IN {
            rotate.store(true, Relaxed);
            wait_for(PATIENCE_SECS, "the writer to rotate", || {
                !rotate.load(Relaxed)
            });
        }
        // Down for 0–1 s while the writer goes on.
        std::thread::sleep(Duration::from_millis(rng.below(1_000)));
        let up = Serve::start(&cfg);
        otlp.store(up.otlp(), Relaxed);
        serve = Some(up);
    }
    let api = serve.as_ref().unwrap().port;
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Relaxed);
    let written = lines.join().unwrap();
    for s in senders {
        s.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let posted = posted.load(Relaxed);
    assert!(
        written > 300 && acked.len() > 100,
        "too little traffic: {written} lines, {} acks",
        acked.len()
    );

    wait_for(2 * PATIENCE_SECS, "every written line stored", || {
        sql_count(api, None, "SELECT count(*) AS n FROM gateway_requests") >= written
    });
    let per_uri = stored_per_uri(api);
    let want: BTreeMap<String, u64> = (0..written).map(|i| (format!("/w/{i}"), 1)).collect();
    if per_uri != want {
        let missing: Vec<_> = want.keys().filter(|k| !per_uri.contains_key(*k)).collect();
        let twice: Vec<_> = per_uri.iter().filter(|(_, n)| **n != 1).collect();
        let extra: Vec<_> = per_uri.keys().filter(|k| !want.contains_key(*k)).collect();
        panic!(
            "seed {seed}: lines not stored exactly once: {} missing {missing:.10?}, {} not once {twice:.10?}, {} unknown {extra:.10?}",
            missing.len(),
            twice.len(),
            extra.len()
        );
    }
    let rejected = sql_count(api, None, "SELECT count(*) AS n FROM rejected");
    assert_eq!(
        rejected, 0,
        "seed {seed}: lines rejected (a torn line read?)"
    );

    let stored = spans_once_none_lost(api, &acked, &format!("seed {seed}"));
    let whole = sql_count(
        api,
        None,
        "SELECT count(*) AS n FROM (SELECT trace_id FROM spans GROUP BY trace_id HAVING count(*) = 2)",
    );
    assert_eq!(
        whole as usize,
        stored.len(),
        "seed {seed}: a trace stored in part"
    );

    // One verdict per failing trace: the 504 lines and each stored trace.
    let failing_lines = written.div_ceil(FAIL_EVERY);
    let expected = failing_lines + stored.len() as u64;
    let mut seen = 0;
    wait_for(2 * PATIENCE_SECS, "every failing trace diagnosed", || {
        seen = get_json(api, "/api/traces?limit=10000")["total"]
            .as_u64()
            .unwrap_or(0);
        seen >= expected
    });
    let list = get_json(api, "/api/traces?limit=10000");
    let ids: Vec<&str> = list["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["trace_id"].as_str().unwrap())
        .collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(
        ids.len(),
        unique.len(),
        "seed {seed}: a trace has two verdicts"
    );
    assert_eq!(ids.len() as u64, expected, "seed {seed}: verdicts");
    eprintln!(
        "faults_kill_loop: seed {seed}: {CYCLES} kill -9 cycles survived; {written} lines \
         ({failing_lines} failing) each stored once; {posted} OTLP posts, {} acknowledged, {} stored \
         (none twice); {expected} verdicts, one per failing trace",
        acked.len(),
        stored.len()
    );
    drop(serve);
}
