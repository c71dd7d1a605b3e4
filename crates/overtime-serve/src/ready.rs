//! What `overtime serve` bound, said once every listener is bound: a log
//! line for people, and with `--ready-file PATH` one JSON object for
//! programs (tests, `scripts/demo`, a supervisor) that started it with
//! port 0 and need to know where it listens.
//!
//! Design rules:
//! - **The kernel picks, the collector says.** A listen address may name
//!   port 0; what is reported is the address actually bound, so nothing
//!   ever has to find a free port and hand it over (a port found free and
//!   let go can be taken before the collector binds it).
//! - **Whole or absent.** The file is written to `PATH.tmp` and renamed
//!   over `PATH`, so a reader never sees half of it; one from an earlier
//!   run is removed before anything is bound, and the file is removed
//!   again when the collector stops gracefully. After a crash it stays:
//!   its `pid` tells a reader whether the process is still there.
//! - **Written when ready.** It is written when `/readyz` turns 200:
//!   every listener bound, every source started.
//!
//! ```
//! use overtime_serve::Bound;
//! let b = Bound {
//!     api: "127.0.0.1:41234".parse().unwrap(),
//!     otlp_http: Some("127.0.0.1:41235".parse().unwrap()),
//!     otlp_grpc: None,
//!     postgres: Some("127.0.0.1:41236".parse().unwrap()),
//! };
//! let v: serde_json::Value = serde_json::from_str(&b.to_json(7)).unwrap();
//! assert_eq!(v["api"], "127.0.0.1:41234");
//! assert_eq!(v["otlp_http"], "127.0.0.1:41235");
//! assert!(v["otlp_grpc"].is_null()); // not configured: off
//! assert_eq!(v["postgres"], "127.0.0.1:41236");
//! assert_eq!(v["pid"], 7);
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The addresses a running collector listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// The API, the UI and `/metrics` (`[server] listen`).
    pub api: SocketAddr,
    /// The OTLP/HTTP receiver (`[otlp] http_listen`); `None`: off.
    pub otlp_http: Option<SocketAddr>,
    /// The OTLP/gRPC receiver (`[otlp] grpc_listen`); `None`: off.
    pub otlp_grpc: Option<SocketAddr>,
    /// The PostgreSQL wire protocol (`[sql.postgres] listen`); `None`: off.
    pub postgres: Option<SocketAddr>,
}

impl Bound {
    /// The ready file's one JSON object: each listener's bound address
    /// (`null` when it is off) and the collector's process id.
    pub fn to_json(&self, pid: u32) -> String {
        let addr = |a: Option<SocketAddr>| a.map(|a| a.to_string());
        serde_json::json!({
            "api": self.api.to_string(),
            "otlp_http": addr(self.otlp_http),
            "otlp_grpc": addr(self.otlp_grpc),
            "postgres": addr(self.postgres),
            "pid": pid,
        })
        .to_string()
    }
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let or_off = |a: Option<SocketAddr>| a.map_or("off".to_string(), |a| a.to_string());
        write!(
            f,
            "http://{} (OTLP/HTTP {}, OTLP/gRPC {}, PostgreSQL {})",
            self.api,
            or_off(self.otlp_http),
            or_off(self.otlp_grpc),
            or_off(self.postgres)
        )
    }
}

/// Why the ready file could not be written or cleared.
#[derive(Debug, thiserror::Error)]
#[error("{what} the ready file {}: {source}", path.display())]
pub struct ReadyFileError {
    what: &'static str,
    path: PathBuf,
    source: std::io::Error,
}

/// `PATH.tmp`: where the file is written before it is renamed.
fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Removes a ready file left by an earlier run (absent is fine).
pub(crate) fn clear(path: &Path) -> Result<(), ReadyFileError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(ReadyFileError {
            what: "cannot remove",
            path: path.to_path_buf(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// Writes `bound` to `path` whole: to `PATH.tmp`, then renamed over it.
pub(crate) fn write(path: &Path, bound: &Bound) -> Result<(), ReadyFileError> {
    let tmp = tmp_path(path);
    let err = |what, source| ReadyFileError {
        what,
        path: path.to_path_buf(),
        source,
    };
    std::fs::write(&tmp, bound.to_json(std::process::id()) + "\n")
        .map_err(|e| err("cannot write", e))?;
    std::fs::rename(&tmp, path).map_err(|e| err("cannot rename into place", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_written_whole_and_replaces_an_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ready.json");
        std::fs::write(&path, "stale").unwrap();
        clear(&path).unwrap();
        assert!(!path.exists());
        clear(&path).unwrap(); // absent: fine
        let b = Bound {
            api: "127.0.0.1:1".parse().unwrap(),
            otlp_http: None,
            otlp_grpc: Some("[::1]:2".parse().unwrap()),
            postgres: None,
        };
        write(&path, &b).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["otlp_grpc"], "[::1]:2");
        assert_eq!(v["pid"], std::process::id());
        assert!(!dir.path().join("ready.json.tmp").exists());
        assert_eq!(
            b.to_string(),
            "http://127.0.0.1:1 (OTLP/HTTP off, OTLP/gRPC [::1]:2, PostgreSQL off)"
        );
    }

    #[test]
    fn a_ready_file_in_a_missing_directory_is_an_error_naming_it() {
        let b = Bound {
            api: "127.0.0.1:1".parse().unwrap(),
            otlp_http: None,
            otlp_grpc: None,
            postgres: None,
        };
        let e = write(Path::new("/nonexistent-dir/ready.json"), &b).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot write the ready file /nonexistent-dir/ready.json:"),
            "{e}"
        );
    }
}
