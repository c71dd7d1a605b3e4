//! `scripts/demo` as a newcomer runs it, with this build's binary: it must
//! leave nothing behind however it is stopped — Ctrl-C (SIGINT to the whole
//! foreground process group), `kill` (SIGTERM to the script alone), or a
//! crash of the simulator (SIGKILL) while the demo goes on. After each,
//! every process the demo started (the collector, the simulator, the
//! simulator's nginx master and workers) is gone and nothing it started
//! listens on the demo's ports. The demo is asked for port 0 (the test
//! picks no port for it) and its collector's addresses are read from what
//! it prints; a port it asks for that is busy makes it take a free one and
//! say so.

use crate::support::BIN;
use overtime_test_support::net::wait_for;
use overtime_test_support::ports::listening_pids;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

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

/// The command lines of the processes listening on `port` now.
fn listeners(port: u16) -> Vec<String> {
    let all = processes();
    listening_pids(port)
        .iter()
        .filter_map(|p| all.get(p).map(|(_, cmd)| cmd.clone()))
        .collect()
}

/// The port of the first `http://127.0.0.1:PORT` after `label` in `out`.
fn port_after(out: &str, label: &str) -> Option<u16> {
    let rest = &out[out.find(label)? + label.len()..];
    let rest = &rest[rest.find("http://127.0.0.1:")? + "http://127.0.0.1:".len()..];
    let end = rest.find(|c: char| !c.is_ascii_digit())?;
    rest[..end].parse().ok()
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
    /// for a foreground job), its collector on ports of the system's
    /// choosing, and waits until the simulator's nginx serves.
    fn start() -> Demo {
        Demo::start_asking(0)
    }

    /// [`Demo::start`] with the collector's API asked for on `api`.
    fn start_asking(api: u16) -> Demo {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/demo");
        let mut child = Command::new("bash")
            .arg(script)
            .env("OVERTIME_BIN", BIN)
            .env("OVERTIME_DEMO_PORT", api.to_string())
            .env("OVERTIME_DEMO_OTLP_PORT", "0")
            .env("OVERTIME_DEMO_PG_PORT", "0")
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
        let mut demo = Demo {
            child,
            api: 0,
            otlp: 0,
            out,
        };
        let pid = demo.child.id();
        wait_for(120, "the demo's collector, simulator and nginx", || {
            let d = descendants(pid);
            let has = |w: &str| d.values().any(|c| c.contains(w));
            has(" serve ") && has(" simulate ") && has("nginx: worker")
        });
        wait_for(60, "the demo to print the collector's addresses", || {
            let out = demo.output();
            demo.api = port_after(&out, "The UI:").unwrap_or(0);
            demo.otlp = port_after(&out, "spans to").unwrap_or(0);
            demo.api != 0 && demo.otlp != 0
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
        // Whatever listens on the demo's ports now (another process may
        // have been given one since) must not be one of the demo's.
        // (A worker's title is the same for every nginx: not telling.)
        let ours: Vec<&String> = started
            .values()
            .filter(|c| !c.starts_with("nginx: worker"))
            .collect();
        for port in [self.api, self.otlp] {
            let left: Vec<String> = listeners(port)
                .into_iter()
                .filter(|c| ours.contains(&c))
                .collect();
            assert!(
                left.is_empty(),
                "after {how}, port {port} still listens: {left:?}"
            );
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
fn a_busy_port_makes_the_demo_take_a_free_one_and_say_so() {
    // The test holds the port itself: busy for the demo's whole run.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let mut demo = Demo::start_asking(port);
    let started = descendants(demo.child.id());
    let out = demo.output();
    assert!(
        out.contains(&format!(
            "Busy: 127.0.0.1:{port}. The collector takes free ports"
        )),
        "the demo does not say its port was busy:\n{out}"
    );
    assert_ne!(demo.api, port, "{out}");
    let (status, _) = overtime_test_support::net::get(demo.api, "/readyz")
        .unwrap_or_else(|| panic!("nothing answers on the printed port {}:\n{out}", demo.api));
    assert_eq!(status, 200);
    signal(&demo.child.id().to_string(), "-TERM");
    demo.wait_exit();
    demo.assert_nothing_left(&started, "SIGTERM to scripts/demo");
    drop(busy);
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
