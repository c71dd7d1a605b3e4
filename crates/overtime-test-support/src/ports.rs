//! Ports without races: no test finds a free port and hands it to another
//! process — a port found free and let go can be taken (by another test,
//! by anything on a busy machine) before that process binds it, and then
//! the test fails, or worse talks to the wrong server.
//!
//! Rules, in order of preference:
//! 1. A server the test runs itself binds `127.0.0.1:0` and keeps the
//!    listener (std or tokio; nothing here is needed).
//! 2. A program that can bind port 0 and say what it bound is started that
//!    way (`overtime serve` with `--ready-file`).
//! 3. A program that must be told its port (nginx, tansu, s3rver,
//!    Prometheus, Alertmanager, a collector whose peers must know its
//!    address) is started through [`on_fresh_ports`]: candidate ports are
//!    drawn at random below the kernel's ephemeral range (where no
//!    outgoing connection or port-0 bind lands) and checked free; the
//!    start counts only when the process started — read in `/proc`, not
//!    whoever answers — listens on every one of them; when it says its
//!    address is in use (EADDRINUSE, in its log or as it exits), it is
//!    started again on fresh ports. [`spawn_listening`] is the one start
//!    of one process that tells those cases apart.
//! 4. A program that must come back on the address it had (a broker or a
//!    collector restarted while its clients keep its address) is started
//!    again through [`on_same_ports`], which retries while the address is
//!    still in use, for a while.
//!
//! And [`ClosedPort`]: a port bound but not listening, held by the test —
//! connections to it are refused, and no one else can take it meanwhile
//! ("a peer that is down").
//!
//! ```
//! use overtime_test_support::ports::{ClosedPort, Started, on_fresh_ports};
//! let closed = ClosedPort::new();
//! assert!(std::net::TcpStream::connect(closed.addr()).is_err());
//! // A "server" that finds its first port taken, then comes up.
//! let mut tries = 0;
//! let port = on_fresh_ports("a server", 1, |ports| {
//!     tries += 1;
//!     if tries == 1 { Started::PortTaken("bind: address already in use".into()) }
//!     else { Started::Up(ports[0]) }
//! });
//! assert_eq!(tries, 2);
//! assert!(port > 1024);
//! ```

use crate::program::Proc;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, Hasher};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// Fresh starts before [`on_fresh_ports`] gives up: a port taken twice in
/// a row is already rare.
pub const ATTEMPTS: u32 = 8;

/// How long [`on_same_ports`] waits for an address to be free again.
pub const SAME_PORTS_SECS: u64 = 30;

/// What one start of a server on the ports it was given came to.
#[derive(Debug)]
pub enum Started<T> {
    /// It is up and listens on the ports it was given.
    Up(T),
    /// A port was in use: what the program said. Start it again.
    PortTaken(String),
}

/// Whether a program's output says an address it was to bind is in use
/// (Linux errno 98 as Rust, Go, node and nginx word it).
pub fn says_address_in_use(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.contains("address already in use") || t.contains("eaddrinuse")
}

/// Starts something on `n` ports it is told: `start` is given fresh
/// candidate ports and starts it on them; while it reports
/// [`Started::PortTaken`], it is started again on fresh ports, at most
/// [`ATTEMPTS`] times. Panics, with what the program said, after that.
pub fn on_fresh_ports<T>(what: &str, n: usize, mut start: impl FnMut(&[u16]) -> Started<T>) -> T {
    let mut said = Vec::new();
    for _ in 0..ATTEMPTS {
        let ports = candidates(n);
        match start(&ports) {
            Started::Up(t) => return t,
            Started::PortTaken(why) => said.push(format!("ports {ports:?}: {why}")),
        }
    }
    panic!(
        "{what}: every one of {ATTEMPTS} starts found a port in use:\n{}",
        said.join("\n")
    );
}

/// Starts something again on the `ports` it had (its clients know them):
/// while `start` reports [`Started::PortTaken`], waits and tries again,
/// for [`SAME_PORTS_SECS`] at most; then panics with what it said.
pub fn on_same_ports<T>(
    what: &str,
    ports: &[u16],
    mut start: impl FnMut(&[u16]) -> Started<T>,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(SAME_PORTS_SECS);
    loop {
        match start(ports) {
            Started::Up(t) => return t,
            Started::PortTaken(why) if Instant::now() >= deadline => {
                panic!("{what}: ports {ports:?} still in use after {SAME_PORTS_SECS} s: {why}")
            }
            Started::PortTaken(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// Spawns `cmd` and waits (`secs` at most) until it — the process or one
/// of its descendants — listens on every one of `ports`. `logs` are the
/// files its stdout and stderr go to (what it wrote there before this
/// start is not looked at). [`Started::PortTaken`] when it exits, or
/// writes, saying an address is in use (it is killed then); panics with
/// its logs when it exits otherwise or does not listen in time.
pub fn spawn_listening(
    what: &str,
    mut cmd: Command,
    ports: &[u16],
    logs: &[PathBuf],
    secs: u64,
) -> Started<Proc> {
    let skip: Vec<u64> = logs
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .collect();
    let said = || -> String {
        logs.iter()
            .zip(&skip)
            .map(|(p, from)| {
                let all = std::fs::read(p).unwrap_or_default();
                let new = all.get(*from as usize..).unwrap_or_default();
                format!("--- {}:\n{}", p.display(), String::from_utf8_lossy(new))
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("starting {what} ({:?}): {e}", cmd.get_program()));
    let mut proc = Proc(child);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut pause = Duration::from_millis(10);
    loop {
        let exited = proc.0.try_wait().ok().flatten();
        let text = said();
        if says_address_in_use(&text) {
            return Started::PortTaken(text); // `proc` dropped: killed, reaped
        }
        if let Some(status) = exited {
            panic!("{what} exited ({status}) before it listened on {ports:?}:\n{text}");
        }
        let bound = listening_ports(proc.id());
        if ports.iter().all(|p| bound.contains(p)) {
            return Started::Up(proc);
        }
        if Instant::now() >= deadline {
            panic!(
                "{what} did not listen on {ports:?} within {secs} s (it listens on {bound:?}):\n{text}"
            );
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// A loopback port bound but not listening, held until dropped:
/// connections to it are refused, and no other process can bind it
/// meanwhile — "a server that is down", without the race of a port found
/// free and let go.
pub struct ClosedPort {
    _socket: socket2::Socket,
    addr: SocketAddr,
}

impl ClosedPort {
    /// A fresh one on 127.0.0.1 (the kernel picks the port).
    pub fn new() -> ClosedPort {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("a TCP socket");
        socket
            .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .expect("binding 127.0.0.1:0");
        let addr = socket
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .expect("the bound address");
        ClosedPort {
            _socket: socket,
            addr,
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Default for ClosedPort {
    fn default() -> Self {
        ClosedPort::new()
    }
}

/// `n` distinct ports free right now, drawn at random below the kernel's
/// ephemeral range.
fn candidates(n: usize) -> Vec<u16> {
    let (lo, hi) = candidate_range();
    let mut out: Vec<u16> = Vec::with_capacity(n);
    while out.len() < n {
        let p = lo + (random() % u64::from(hi - lo)) as u16;
        if !out.contains(&p) && TcpListener::bind(("127.0.0.1", p)).is_ok() {
            out.push(p);
        }
    }
    out
}

/// Where candidates are drawn from: the 12 000 ports (or fewer) below the
/// ephemeral range (`net.ipv4.ip_local_port_range`, 32768 by default),
/// above the registered low ports.
fn candidate_range() -> (u16, u16) {
    let low_ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    if low_ephemeral > 12_000 {
        (
            low_ephemeral.saturating_sub(12_000).max(10_000),
            low_ephemeral,
        )
    } else {
        (20_000, 32_000) // an odd range setting: any unprivileged stretch
    }
}

/// A random number from the standard library's per-process hash keys.
fn random() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish()
}

/// The TCP ports `pid` or any of its descendants listens on (any
/// address), read from `/proc`.
pub fn listening_ports(pid: u32) -> BTreeSet<u16> {
    let by_inode = listening_sockets();
    process_tree(pid)
        .into_iter()
        .flat_map(socket_inodes)
        .filter_map(|i| by_inode.get(&i).copied())
        .collect()
}

/// The processes (that this user may look into) holding a socket that
/// listens on TCP `port`, read from `/proc`.
pub fn listening_pids(port: u16) -> BTreeSet<u32> {
    let inodes: BTreeSet<u64> = listening_sockets()
        .into_iter()
        .filter(|(_, p)| *p == port)
        .map(|(i, _)| i)
        .collect();
    if inodes.is_empty() {
        return BTreeSet::new();
    }
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| socket_inodes(*pid).iter().any(|i| inodes.contains(i)))
        .collect()
}

/// The inodes of the sockets `pid` holds open.
fn socket_inodes(pid: u32) -> Vec<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.flatten()
        .filter_map(|fd| {
            let target = std::fs::read_link(fd.path()).ok()?;
            target
                .to_string_lossy()
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// Listening TCP sockets (IPv4 and IPv6): inode → local port.
fn listening_sockets() -> BTreeMap<u64, u16> {
    let mut out = BTreeMap::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            if f.len() < 10 || f[3] != "0A" {
                continue; // 0A: LISTEN
            }
            let port = f[1]
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if let (Some(port), Ok(inode)) = (port, f[9].parse::<u64>()) {
                out.insert(inode, port);
            }
        }
    }
    out
}

/// `root` and every process descending from it now.
fn process_tree(root: u32) -> Vec<u32> {
    let mut parent = BTreeMap::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
        if let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok())
        {
            parent.insert(pid, ppid);
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parent.iter().filter(|(_, pp)| **pp == p).map(|(c, _)| *c));
        i += 1;
    }
    tree
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_distinct_free_and_below_the_ephemeral_range() {
        let (lo, hi) = candidate_range();
        let ports = candidates(20);
        assert_eq!(ports.iter().collect::<BTreeSet<_>>().len(), 20);
        for p in ports {
            assert!((lo..hi).contains(&p), "{p} not in {lo}..{hi}");
        }
    }

    #[test]
    fn a_listener_is_found_under_its_process_and_a_closed_port_refuses() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(listening_ports(std::process::id()).contains(&port));
        assert!(listening_pids(port).contains(&std::process::id()));
        let closed = ClosedPort::new();
        assert!(!listening_ports(std::process::id()).contains(&closed.port()));
        assert!(std::net::TcpStream::connect(closed.addr()).is_err());
        // Held: nobody else can bind it meanwhile.
        assert!(TcpListener::bind(closed.addr()).is_err());
    }

    #[test]
    fn address_in_use_is_recognised_as_each_program_words_it() {
        for said in [
            "nginx: [emerg] bind() to 127.0.0.1:8080 failed (98: Address already in use)",
            "listen tcp 127.0.0.1:9090: bind: address already in use",
            "Error: listen EADDRINUSE: address already in use 127.0.0.1:4568",
            "Address already in use (os error 98)",
        ] {
            assert!(says_address_in_use(said), "{said}");
        }
        assert!(!says_address_in_use("Connection refused (os error 111)"));
    }

    #[test]
    fn a_program_that_finds_its_port_taken_is_told_apart_from_one_that_fails() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("out.log");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo 'bind: address already in use' >&2; exit 1"])
            .stderr(std::fs::File::create(&log).unwrap());
        assert!(matches!(
            spawn_listening("sh", cmd, &[1], std::slice::from_ref(&log), 10),
            Started::PortTaken(_)
        ));
        // What the log held before this start does not count.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "exit 3"]);
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            spawn_listening("sh", cmd, &[1], std::slice::from_ref(&log), 10)
        }));
        let msg = *failed.unwrap_err().downcast::<String>().unwrap();
        assert!(msg.contains("sh exited (exit status: 3)"), "{msg}");
    }

    #[test]
    fn on_same_ports_waits_for_its_address() {
        let mut tries = 0;
        let got = on_same_ports("a broker", &[4242], |p| {
            tries += 1;
            if tries < 3 {
                Started::PortTaken("EADDRINUSE".into())
            } else {
                Started::Up(p[0])
            }
        });
        assert_eq!((got, tries), (4242, 3));
    }
}
