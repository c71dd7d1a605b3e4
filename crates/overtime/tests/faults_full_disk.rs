//! A full disk under the data dir. The data dir is a small tmpfs (root
//! only: `mount -t tmpfs`), filled with a filler file while `overtime
//! serve` ingests a tailed log and OTLP posts. While it is full:
//! - OTLP answers 503 (or 429), never 200, and the process stays up;
//! - the failure is visible: logged on stderr with the OS error, and
//!   `/readyz` answers 503 saying the store cannot write (`/healthz`
//!   stays 200: restarting would not help);
//!
//! then the filler is deleted and:
//! - ingestion resumes by itself (OTLP 200 again, the tail catches up),
//!   `/readyz` is 200 again;
//! - nothing acknowledged is lost and nothing is stored twice, also after
//!   a kill -9 and restart on the same data dir;
//! - no half-written Parquet file of a failed flush is left behind.
//!
//! The tmpfs is unmounted at the end, whatever happens (a Drop guard).

use crate::support;

use overtime_test_support::net::{get, http, wait_for};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

/// Seconds a wait for something to happen may take before the test calls
/// it a hang: generous, so a slow, loaded machine still passes. Waits on a
/// whole backlog get twice as long.
const PATIENCE_SECS: u64 = 60;

const TMPFS_MIB: u64 = 24;
/// Space left free once the filler is written.
const LEFT_FREE: u64 = 1024 * 1024;

/// A tmpfs mounted on `dir`, unmounted on drop.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, mib: u64) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("running mount (util-linux)");
        assert!(
            out.status.success(),
            "this test needs root to mount a tmpfs as the data dir (mount -t tmpfs): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs {
            dir: dir.to_path_buf(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// Writes `path` in 256 KiB pieces until the disk is full, then gives
/// back `LEFT_FREE` bytes. Returns the filler's size.
fn fill(path: &Path) -> u64 {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0x5au8; 256 * 1024];
    let mut size = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(n) => size += n as u64,
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("writing the filler: {e}"),
        }
    }
    let keep = size.saturating_sub(LEFT_FREE);
    f.set_len(keep).unwrap();
    f.sync_all().unwrap();
    keep
}

fn files_named(dir: &Path, suffix: &str, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            files_named(&p, suffix, out);
        } else if p.to_string_lossy().ends_with(suffix) {
            out.push(p);
        }
    }
}

fn rid(i: u64) -> String {
    format!("{:032x}", (0xd15c_u128 << 100) + i as u128)
}

#[test]
fn a_full_disk_refuses_clearly_and_ingestion_resumes_when_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mount = Tmpfs::mount(&data, TMPFS_MIB);
    let log = dir.path().join("access.log");
    std::fs::write(&log, "").unwrap();
    let stderr_path = dir.path().join("serve.stderr");
    let cfg = dir.path().join("overtime.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\
             [store]\ndata_dir = {data:?}\nmemtable_bytes = 67108864\nflush_interval_ms = 1000\n\
             [otlp]\nhttp_listen = \"127.0.0.1:0\"\ngrpc_listen = \"\"\n[diagnose]\ngrace_ms = 500\n\n\
             [[file]]\npath = {log:?}\nkind = \"nginx\"\nformat = \"overtime\"\nlayer = \"edge\"\n",
            data = data.display().to_string(),
            log = log.display().to_string(),
        ),
    )
    .unwrap();
    let start = || {
        let mut cmd = serve_command(&cfg);
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&stderr_path)
            .unwrap();
        cmd.stderr(Stdio::from(err));
        Serve::start_command(cmd)
    };
    let mut serve = start();
    let (api, otlp) = (serve.port, serve.otlp());

    // Traffic through the whole test: log lines and OTLP posts.
    let stop = Arc::new(AtomicBool::new(false));
    let lines = Arc::new(AtomicU64::new(0));
    let writer = {
        let (log, stop, lines) = (log.clone(), stop.clone(), lines.clone());
        std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
            while !stop.load(Relaxed) {
                let i = lines.load(Relaxed);
                let status = if i.is_multiple_of(5) { 504 } else { 200 };
                f.write_all(overtime_line(&rid(i), &format!("/d/{i}"), status).as_bytes())
                    .unwrap();
                lines.store(i + 1, Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let answers = Arc::new(Mutex::new(BTreeMap::<u16, u64>::new()));
    let sender = {
        let (acked, answers, stop) = (acked.clone(), answers.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Relaxed) {
                let (trace, body) = otlp_failing_trace(0xf011, n);
                let st = http(
                    otlp,
                    "POST",
                    "/v1/traces",
                    "application/json",
                    body.as_bytes(),
                )
                .map_or(0, |a| a.0);
                *answers.lock().unwrap().entry(st).or_default() += 1;
                if st == 200 {
                    acked.lock().unwrap().insert(trace);
                }
                n += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    wait_for(PATIENCE_SECS, "some spans acknowledged", || {
        acked.lock().unwrap().len() >= 50
    });

    // Fill the disk.
    let filler = data.join("filler.bin");
    let filler_bytes = fill(&filler);
    let before = answers.lock().unwrap().clone();
    wait_for(
        2 * PATIENCE_SECS,
        "OTLP refusals once the disk is full",
        || {
            let now = answers.lock().unwrap().clone();
            now.get(&503).unwrap_or(&0) - before.get(&503).unwrap_or(&0) >= 20
        },
    );
    // While full: alive, healthy, not ready, and it says why.
    let mut readyz = String::new();
    wait_for(
        PATIENCE_SECS,
        "/readyz to say the store cannot write",
        || {
            let a = get(api, "/readyz").expect("readyz answers");
            readyz = a.1;
            a.0 == 503
        },
    );
    assert!(
        readyz.contains("No space left") || readyz.contains("os error 28"),
        "/readyz does not say why: {readyz}"
    );
    assert_eq!(get(api, "/healthz").unwrap().0, 200);
    assert!(serve.alive(), "overtime serve died on a full disk");
    let metrics = get(api, "/metrics").unwrap();
    assert_eq!(metrics.0, 200);
    let failures: f64 = metrics
        .1
        .lines()
        .filter(|l| l.starts_with("overtime_store_write_failures_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        failures >= 1.0,
        "failed writes are not in /metrics:\n{}",
        metrics.1
    );
    // The log line comes from the next tick (every 500 ms), so it can
    // follow /readyz by a moment.
    wait_for(PATIENCE_SECS, "the full disk logged on stderr", || {
        std::fs::read_to_string(&stderr_path)
            .unwrap_or_default()
            .contains("No space left on device")
    });
    // Stay full a while: retries and failed flushes must not pile up.
    std::thread::sleep(Duration::from_secs(3));

    // Space returns.
    std::fs::remove_file(&filler).unwrap();
    let freed_at = answers.lock().unwrap().clone();
    wait_for(PATIENCE_SECS, "OTLP accepting again", || {
        *answers.lock().unwrap().get(&200).unwrap_or(&0) > freed_at.get(&200).unwrap_or(&0) + 50
    });
    wait_for(PATIENCE_SECS, "/readyz 200 again", || {
        matches!(get(api, "/readyz"), Some((200, _)))
    });
    let mut tmp = Vec::new();
    wait_for(PATIENCE_SECS, "no half-written Parquet file left", || {
        tmp.clear();
        files_named(&data, ".tmp", &mut tmp);
        tmp.is_empty()
    });
    stop.store(true, Relaxed);
    writer.join().unwrap();
    sender.join().unwrap();
    let written = lines.load(Relaxed);
    let acked = acked.lock().unwrap().clone();
    let answers = answers.lock().unwrap().clone();
    let other: Vec<_> = answers
        .keys()
        .filter(|s| ![200, 429, 503].contains(*s))
        .collect();
    assert!(other.is_empty(), "unexpected OTLP answers: {answers:?}");

    let check = |api: u16, when: &str| {
        wait_for(
            2 * PATIENCE_SECS,
            &format!("{when}: every line stored"),
            || sql_count(api, None, "SELECT count(*) AS n FROM gateway_requests") >= written,
        );
        let per_uri = stored_per_uri(api);
        let want: BTreeMap<String, u64> = (0..written).map(|i| (format!("/d/{i}"), 1)).collect();
        assert!(
            per_uri == want,
            "{when}: lines not stored exactly once ({} distinct of {written})",
            per_uri.len()
        );
        spans_once_none_lost(api, &acked, when).len()
    };
    let stored = check(api, "after recovery");
    serve.kill9();
    // Restarted, it binds fresh ports (port 0 in the config).
    let serve = start();
    assert_eq!(check(serve.port, "after kill -9 and restart"), stored);
    eprintln!(
        "faults_full_disk: tmpfs {TMPFS_MIB} MiB, filler {} MiB; OTLP answers by status {answers:?} \
         ({} refused before space returned); {written} lines and {} acknowledged traces all stored once \
         (also after kill -9); /readyz while full: {readyz}",
        filler_bytes >> 20,
        freed_at.get(&503).unwrap_or(&0) + freed_at.get(&429).unwrap_or(&0),
        acked.len()
    );
    drop(serve);
    drop(mount);
}
