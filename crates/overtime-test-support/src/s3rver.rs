//! `s3rver` (npm), an S3-compatible server in one node process, for the
//! tests of Parquet on object storage and of tansu on `s3://`: installed
//! into `~/.cache/overtime-s3rver` when missing (`scripts/test` installs
//! it), started on a port of 127.0.0.1 it is given (again on a fresh one
//! if that was taken first: [`crate::ports`]) with a private directory,
//! killed when the guard drops.
//!
//! Rules:
//! - node or npm missing, or the install failing, fails the test saying
//!   what to install; it never skips it.
//! - s3rver knows one access key, `S3RVER` (secret `S3RVER`; another key
//!   gets `InvalidAccessKeyId`); [`S3rver::env`] lists them with the
//!   endpoint, as the `AWS_*` variables S3 clients read.

use crate::ports::{Started, on_fresh_ports, spawn_listening};
use crate::program::Proc;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The s3rver release the tests run.
pub const S3RVER_VERSION: &str = "3.7.1";

/// The s3rver script, installed into `~/.cache/overtime-s3rver` if missing.
pub fn s3rver_bin() -> PathBuf {
    let home = std::env::var("HOME").expect("HOME");
    let prefix = PathBuf::from(home).join(".cache/overtime-s3rver");
    let bin = prefix.join("node_modules/.bin/s3rver");
    if !bin.exists() {
        std::fs::create_dir_all(&prefix).unwrap();
        let st = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&prefix)
            .arg(format!("s3rver@{S3RVER_VERSION}"))
            .status();
        assert!(
            st.is_ok_and(|s| s.success()) && bin.exists(),
            "the S3 emulator s3rver is missing and `npm install s3rver` failed: \
             install node and npm (apt-get install -y nodejs npm), then \
             npm install --prefix ~/.cache/overtime-s3rver s3rver@{S3RVER_VERSION}"
        );
    }
    bin
}

/// A running s3rver; killed and reaped on drop.
pub struct S3rver {
    _child: Proc,
    /// `http://127.0.0.1:<port>`: the endpoint.
    pub endpoint: String,
}

impl S3rver {
    /// s3rver on a port of its own (again on a fresh one if its port was
    /// taken first: [`crate::ports::on_fresh_ports`]), storing under
    /// `dir`, with `buckets` created; its output goes to `dir/s3rver.log`
    /// and `.err`. Waits up to 60 s until it listens.
    pub fn start(dir: &Path, buckets: &[&str]) -> S3rver {
        let data = dir.join("s3");
        std::fs::create_dir_all(&data).unwrap();
        let logs = [dir.join("s3rver.log"), dir.join("s3rver.err")];
        let file =
            |p: &Path| std::fs::File::create(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        on_fresh_ports("s3rver", 1, |ports| {
            let port = ports[0];
            let mut cmd = Command::new(s3rver_bin());
            cmd.arg("-d")
                .arg(&data)
                .args(["-a", "127.0.0.1", "-p", &port.to_string(), "--silent"]);
            for b in buckets {
                cmd.args(["--configure-bucket", b]);
            }
            cmd.stdin(Stdio::null())
                .stdout(file(&logs[0]))
                .stderr(file(&logs[1]));
            match spawn_listening("s3rver", cmd, ports, &logs, 60) {
                Started::Up(child) => Started::Up(S3rver {
                    _child: child,
                    endpoint: format!("http://127.0.0.1:{port}"),
                }),
                Started::PortTaken(why) => Started::PortTaken(why),
            }
        })
    }

    /// The environment an S3 client needs for this server: endpoint
    /// (both spellings), plain HTTP allowed, s3rver's credentials, a
    /// region.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", self.endpoint.clone()),
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", "S3RVER".into()),
            ("AWS_SECRET_ACCESS_KEY", "S3RVER".into()),
            ("AWS_DEFAULT_REGION", "us-east-1".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }
}
