//! Trace lookups over several collectors: `GET /api/traces/{id}` for every
//! failing trace of a recorded incident, asked of
//!
//! - the **lone** collector, which read all the records itself (the peer
//!   this is measured against: "one collector given all the traffic");
//! - the **writer**, a collector of a two-collector deployment that read
//!   every record;
//! - the **reader**, the other one, which read none of them and shares
//!   the writer's bucket (`[store] url`, a `file://` bucket here) and lists
//!   it in `[cluster] peers`: its lookups go to the collector that holds
//!   the trace, not to every peer.
//!
//! Each collector is a real `overtime serve` of the build under test; the
//! lookups go round the incident's failing traces, one at a time, over a
//! fresh HTTP connection each (as `curl` asks). Prints p50 / p99 per
//! collector and the ratio to the lone one.
//!
//! ```sh
//! cargo bench --profile release -p overtime --bench cluster_lookup
//! OVERTIME_BENCH_LOOKUPS=2000 cargo bench --profile release -p overtime --bench cluster_lookup
//! # the collectors from another build (a release binary, the harness from the dev build):
//! OVERTIME_BENCH_BIN=target/release/overtime cargo bench -p overtime --bench cluster_lookup --profile dev
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use overtime_test_support::net::{get, wait_for};
use overtime_test_support::ports::{Started, on_fresh_ports};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;
use support::{Serve, fixture};

/// `overtime serve --config <file>` of the build under test
/// (`OVERTIME_BENCH_BIN`, else this one's).
fn serve_command(config: &Path) -> Command {
    let bin = std::env::var("OVERTIME_BENCH_BIN").unwrap_or_else(|_| support::BIN.to_string());
    let mut c = Command::new(bin);
    c.args(["serve", "--config", config.to_str().unwrap()])
        .env_remove("OVERTIME_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    c
}

const INCIDENT: &str = "c_dns_retry";

fn config(
    dir: &Path,
    id: &str,
    port: u16,
    tail: bool,
    bucket: Option<&str>,
    peers: &[u16],
) -> std::path::PathBuf {
    let home = dir.join(id);
    std::fs::create_dir_all(&home).unwrap();
    let mut toml = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\n\
         [store]\ndata_dir = {data:?}\ncollector_id = \"{id}\"\nfsync = false\n",
        data = home.join("data").display().to_string(),
    );
    if let Some(b) = bucket {
        toml += &format!("url = \"{b}\"\n");
    }
    toml += "[otlp]\nhttp_listen = \"\"\ngrpc_listen = \"\"\n[diagnose]\ngrace_ms = 1000\n";
    if !peers.is_empty() {
        let urls: Vec<String> = peers
            .iter()
            .map(|p| format!("\"http://127.0.0.1:{p}\""))
            .collect();
        toml += &format!("[cluster]\npeers = [{}]\n", urls.join(", "));
    }
    if tail {
        let format = std::fs::read_to_string(fixture(INCIDENT, "log_format.txt")).unwrap();
        toml += &format!(
            "[[file]]\npath = {log:?}\nkind = \"nginx\"\nformat = {format:?}\nlayer = \"access\"\n\n\
             [[file]]\npath = {spans:?}\nkind = \"jsonl\"\n",
            log = fixture(INCIDENT, "access.log").display().to_string(),
            spans = fixture(INCIDENT, "spans.jsonl").display().to_string(),
        );
    }
    let path = home.join("overtime.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

fn failing_ids(port: u16, want: usize) -> Vec<String> {
    let mut ids = Vec::new();
    wait_for(120, "every failing trace to be listed", || {
        let Some((200, body)) = get(port, "/api/traces?limit=1000") else {
            return false;
        };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        ids = v["traces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["trace_id"].as_str().unwrap().to_string())
            .collect();
        want == 0 && !ids.is_empty() || want > 0 && ids.len() == want
    });
    ids.sort();
    ids
}

/// p50 and p99 of `n` lookups going round `ids`, in ms.
fn lookups(port: u16, ids: &[String], n: usize) -> (f64, f64) {
    let mut took: Vec<f64> = (0..n)
        .map(|i| {
            let id = &ids[i % ids.len()];
            let t = Instant::now();
            let (status, body) = get(port, &format!("/api/traces/{id}")).expect("answers");
            let ms = t.elapsed().as_secs_f64() * 1e3;
            assert_eq!(status, 200, "{id}: {body}");
            ms
        })
        .collect();
    took.sort_by(f64::total_cmp);
    let at = |q: f64| took[((took.len() as f64 * q) as usize).min(took.len() - 1)];
    (at(0.5), at(0.99))
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n: usize = std::env::var("OVERTIME_BENCH_LOOKUPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let dir = tempfile::tempdir().unwrap();
    let bucket = format!("file://{}", dir.path().join("bucket").display());
    std::fs::create_dir_all(dir.path().join("bucket")).unwrap();

    let lone = Serve::start_command(serve_command(&config(
        dir.path(),
        "lone",
        0,
        true,
        None,
        &[],
    )));
    let pair: Vec<Serve> = on_fresh_ports("the two collectors", 2, |ports| {
        let mut up = Vec::new();
        for (i, (id, tail)) in [("writer", true), ("reader", false)]
            .into_iter()
            .enumerate()
        {
            let cfg = config(dir.path(), id, ports[i], tail, Some(&bucket), ports);
            let err = dir.path().join(format!("{id}.err"));
            let mut cmd = serve_command(&cfg);
            cmd.stderr(std::fs::File::create(&err).unwrap());
            match Serve::try_start_command(cmd, &err) {
                Started::Up(s) => up.push(s),
                Started::PortTaken(why) => return Started::PortTaken(why),
            }
        }
        Started::Up(up)
    });
    let ids = failing_ids(lone.port, 0);
    let (writer, reader) = (&pair[0], &pair[1]);
    assert_eq!(
        failing_ids(writer.port, 0),
        ids,
        "the writer judged as the lone one"
    );
    assert_eq!(
        failing_ids(reader.port, ids.len()),
        ids,
        "the reader lists every failing trace"
    );
    // Two refreshes of the reader's mirror of its peer (every 2 s).
    std::thread::sleep(std::time::Duration::from_secs(5));
    // Warm every path once.
    for s in [&lone, writer, reader] {
        lookups(s.port, &ids, ids.len());
    }
    let (lo50, lo99) = lookups(lone.port, &ids, n);
    println!(
        "{n} lookups of {} failing traces ({INCIDENT}), one at a time, fresh connection each\n",
        ids.len()
    );
    println!("| collector | p50 ms | p99 ms | p99 / lone |");
    println!("|---|---:|---:|---:|");
    println!("| lone (read every record) | {lo50:.2} | {lo99:.2} | 1.00 |");
    for (name, s) in [
        ("writer (of two, read every record)", writer),
        ("reader (of two, read none; asks the holder)", reader),
    ] {
        let (p50, p99) = lookups(s.port, &ids, n);
        println!("| {name} | {p50:.2} | {p99:.2} | {:.2} |", p99 / lo99);
    }
}
