//! A real nginx (Debian's `nginx` package) in a private prefix: its config,
//! pid, logs and temp files all in the test's temp dir, listening on
//! 127.0.0.1 only.
//!
//! Rules:
//! - The config a test writes sets neither `daemon` nor `pid`: [`Nginx`]
//!   runs nginx in the foreground with its pid file in the prefix, so that
//!   `nginx -s reopen` and `-s stop` find it.
//! - Running as root, the workers run as root too ([`user_directive`]), so
//!   they can write and reopen logs in the private temp dir.
//! - nginx is stopped (`-s stop`, then SIGKILL if it lingers) and reaped
//!   when the guard drops; a missing nginx fails the test naming the
//!   package.

use crate::net::{listening, wait_until};
use crate::program::{find_program, is_root};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The nginx binary; panics with what to install when it is missing.
pub fn nginx_bin() -> PathBuf {
    find_program(&["nginx"], "nginx")
}

/// `user root;` when running as root, else nothing: the first line of a
/// test's config.
pub fn user_directive() -> &'static str {
    if is_root() { "user root;" } else { "" }
}

/// The `*_temp_path` directives of the `http` block, all inside `dir`.
pub fn temp_paths(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "client_body_temp_path {d}/client_body; proxy_temp_path {d}/proxy; \
         fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;"
    )
}

/// A running nginx with its prefix in a test's temp dir.
pub struct Nginx {
    child: Child,
    bin: PathBuf,
    prefix: PathBuf,
    conf: PathBuf,
}

impl Nginx {
    /// Writes `conf` to `dir/nginx.conf`, starts nginx with `dir` as its
    /// prefix and waits (30 s at most) until it listens on `port`; fails
    /// with nginx's error log if it exits or never listens.
    pub fn start(dir: &Path, conf: &str, port: u16) -> Nginx {
        let addr = format!("127.0.0.1:{port}");
        Self::spawn(dir, conf, &addr, || listening(&addr))
    }

    /// As [`start`](Self::start) for a config that listens on the UNIX
    /// socket `socket` (`listen unix:…;`): no TCP port is picked for nginx.
    pub fn start_unix(dir: &Path, conf: &str, socket: &Path) -> Nginx {
        Self::spawn(dir, conf, &socket.display().to_string(), || {
            std::os::unix::net::UnixStream::connect(socket).is_ok()
        })
    }

    fn spawn(dir: &Path, conf: &str, addr: &str, mut ready: impl FnMut() -> bool) -> Nginx {
        let bin = nginx_bin();
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = Self::args(&mut Command::new(&bin), dir, &conf_path)
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let mut n = Nginx {
            child,
            bin,
            prefix: dir.to_path_buf(),
            conf: conf_path,
        };
        let error_log = || std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
        wait_until(
            30,
            &format!("nginx to listen on {addr}"),
            || {
                if let Ok(Some(st)) = n.child.try_wait() {
                    panic!("nginx exited ({st}): {}", error_log());
                }
                ready()
            },
            error_log,
        );
        n
    }

    /// nginx on `port` proxying every request to 127.0.0.1:`upstream`,
    /// writing the access log `log` in the format `log_format` defines (a
    /// whole `log_format NAME …;` directive); `location` holds extra
    /// directives of the proxying location (`proxy_read_timeout 2s;`).
    pub fn proxy(
        dir: &Path,
        log_format: &str,
        log: &Path,
        port: u16,
        upstream: u16,
        location: &str,
    ) -> Nginx {
        let name = log_format
            .split_whitespace()
            .nth(1)
            .expect("a log_format directive");
        let conf = format!(
            "{user}\nworker_processes 1;\nerror_log {dir}/error.log info;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n  {log_format}\n  access_log {log} {name};\n  {temp}\n\
               server {{ listen 127.0.0.1:{port};\n\
                 location / {{ proxy_pass http://127.0.0.1:{upstream}; {location} }} }}\n}}\n",
            user = user_directive(),
            dir = dir.display(),
            log = log.display(),
            temp = temp_paths(dir),
        );
        Nginx::start(dir, &conf, port)
    }

    /// The prefix, error log, config and global directives every
    /// invocation shares.
    fn args<'c>(cmd: &'c mut Command, prefix: &Path, conf: &Path) -> &'c mut Command {
        let globals = format!("daemon off; pid {}/nginx.pid;", prefix.display());
        cmd.arg("-p")
            .arg(prefix)
            .arg("-e")
            .arg(prefix.join("error.log"))
            .arg("-c")
            .arg(conf)
            .arg("-g")
            .arg(globals)
    }

    /// `nginx -s <signal>` for this instance.
    fn signal(&self, signal: &str) -> std::io::Result<std::process::ExitStatus> {
        let mut cmd = Command::new(&self.bin);
        Self::args(&mut cmd, &self.prefix, &self.conf)
            .args(["-s", signal])
            .stdout(Stdio::null())
            .status()
    }

    /// `nginx -s reopen` (what logrotate's postrotate does): the master
    /// reopens the logs.
    pub fn reopen(&self) {
        let st = self.signal("reopen").unwrap();
        assert!(st.success(), "nginx -s reopen: {st}");
    }

    /// nginx's error log so far.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.prefix.join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.signal("stop");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
