//! `scripts/demo` as a newcomer runs it, with this build's binary: it must
//! leave nothing behind however it is stopped — Ctrl-C (SIGINT to the whole
//! foreground process group), `kill` (SIGTERM to the script alone), or a
//! crash of the simulator (SIGKILL) while the demo goes on. After each,
//! every process the demo started (the collector, the simulator, the
//! simulator's nginx master and workers) is gone and nothing listens on the
//! demo's ports.

use crate::support::BIN;
use overtime_test_support::net::{free_port, wait_for};

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Every live process: pid → (parent pid, command line).
fn processes() -> BTreeMap<u32, (u32, String)> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next().unwrap_or("");
        let ppid = f.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if state == "Z" {
            continue; // exited, waiting to be reaped: not running
        }
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        out.insert(pid, (ppid, cmd));
    }
    out
}

/// The descendants of `root` now: pid → command line.
fn descendants(root: u32) -> BTreeMap<u32, String> {
    let all = processes();
    let mut found = BTreeMap::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (pid, (ppid, cmd)) in &all {
            if *ppid == p && found.insert(*pid, cmd.clone()).is_none() {
                frontier.push(*pid);
            }
        }
    }
    found
}

/// Which of `procs` still run (same pid, same command line).
fn still_running(procs: &BTreeMap<u32, String>) -> BTreeMap<u32, String> {
    let now = processes();
    procs
        .iter()
        .filter(|(pid, cmd)| now.get(pid).is_some_and(|(_, c)| c == *cmd))
        .map(|(p, c)| (*p, c.clone()))
        .collect()
}

fn listening(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).is_ok()
}

fn signal(target: &str, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, "--", target])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {target}");
}

struct Demo {
    child: Child,
    api: u16,
    otlp: u16,
    out: Arc<Mutex<String>>,
}

impl Demo {
    /// Starts `scripts/demo` in its own process group (as a shell would
    /// for a foreground job) and waits until the simulator's nginx serves.
    fn start() -> Demo {
        let (api, otlp) = (free_port(), free_port());
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/demo");
        let mut child = Command::new("bash")
            .arg(script)
            .env("OVERTIME_BIN", BIN)
            .env("OVERTIME_DEMO_PORT", api.to_string())
            .env("OVERTIME_DEMO_OTLP_PORT", otlp.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("bash runs scripts/demo");
        let out = Arc::new(Mutex::new(String::new()));
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let out = out.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let mut o = out.lock().unwrap();
                    o.push_str(&line);
                    o.push('\n');
                }
            });
        }
        let demo = Demo {
            child,
            api,
            otlp,
            out,
        };
        let pid = demo.child.id();
        wait_for(120, "the demo's collector, simulator and nginx", || {
            let d = descendants(pid);
            let has = |w: &str| d.values().any(|c| c.contains(w));
            has(" serve ") && has(" simulate ") && has("nginx: worker")
        });
        demo
    }

    fn output(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    /// Waits for the script to end; its exit status.
    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let mut status = None;
        wait_for(60, "scripts/demo to exit", || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        status.unwrap()
    }

    fn assert_nothing_left(&self, started: &BTreeMap<u32, String>, how: &str) {
        let mut left = BTreeMap::new();
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_for(20, "every process the demo started to stop", || {
                left = still_running(started);
                left.is_empty()
            })
        }));
        // Clean up before failing, so a failure leaves nothing either.
        for pid in left.keys() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        assert!(
            left.is_empty(),
            "after {how}, still running: {left:#?}\nthe demo said:\n{}",
            self.output()
        );
        for port in [self.api, self.otlp] {
            assert!(!listening(port), "after {how}, port {port} still listens");
        }
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let pgid = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &pgid]).status();
        let _ = self.child.wait();
    }
}

#[test]
fn ctrl_c_stops_every_process_the_demo_started() {
    let mut demo = Demo::start();
    let started = descendants(demo.child.id());
    // Ctrl-C in a terminal: SIGINT to the foreground process group.
    signal(&format!("-{}", demo.child.id()), "-INT");
    demo.wait_exit();
    demo.assert_nothing_left(&started, "Ctrl-C");
    let out = demo.output();
    assert_eq!(
        out.matches("demo data kept in").count(),
        1,
        "the cleanup runs once:\n{out}"
    );
}

#[test]
fn kill_stops_every_process_the_demo_started() {
    let mut demo = Demo::start();
    let started = descendants(demo.child.id());
    // `kill PID`: SIGTERM to the script alone.
    signal(&demo.child.id().to_string(), "-TERM");
    demo.wait_exit();
    demo.assert_nothing_left(&started, "SIGTERM to scripts/demo");
    let out = demo.output();
    assert_eq!(
        out.matches("demo data kept in").count(),
        1,
        "the cleanup runs once:\n{out}"
    );
}

#[test]
fn a_crashed_simulator_takes_its_nginx_with_it() {
    let mut demo = Demo::start();
    let started = descendants(demo.child.id());
    let sim: BTreeMap<u32, String> = started
        .iter()
        .filter(|(_, c)| c.contains(" simulate "))
        .map(|(p, c)| (*p, c.clone()))
        .collect();
    let nginx: BTreeMap<u32, String> = started
        .iter()
        .filter(|(_, c)| c.starts_with("nginx: "))
        .map(|(p, c)| (*p, c.clone()))
        .collect();
    assert_eq!(sim.len(), 1, "one simulator: {started:#?}");
    assert!(nginx.len() >= 2, "nginx master and workers: {started:#?}");
    let sim_pid = *sim.keys().next().unwrap();
    // The simulator dies without running any cleanup of its own.
    signal(&sim_pid.to_string(), "-KILL");
    let mut left = BTreeMap::new();
    let gone = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(20, "the simulator's nginx to stop with it", || {
            left = still_running(&nginx);
            left.is_empty()
        })
    }));
    assert!(
        gone.is_ok(),
        "nginx outlived the simulator that started it: {left:#?}"
    );
    // The rest of the demo still stops cleanly.
    signal(&demo.child.id().to_string(), "-TERM");
    demo.wait_exit();
    demo.assert_nothing_left(&started, "SIGKILL of the simulator, then SIGTERM");
}
