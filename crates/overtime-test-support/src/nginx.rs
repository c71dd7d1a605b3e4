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
//! - The test does not choose nginx's port: it writes the config for the
//!   port it is given ([`Nginx::start`]), and nginx is started again on a
//!   fresh one if that was taken before nginx bound it.
//! - nginx is stopped (`-s stop`, then SIGKILL if it lingers) and reaped
//!   when the guard drops; a missing nginx fails the test naming the
//!   package.

use crate::ports::{Started, on_fresh_ports, spawn_listening};
use crate::program::{Proc, find_program, is_root};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
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
    child: Proc,
    bin: PathBuf,
    prefix: PathBuf,
    conf: PathBuf,
    port: u16,
}

impl Nginx {
    /// Starts nginx with `dir` as its prefix on a port of its own: `conf`
    /// makes the nginx.conf (written to `dir/nginx.conf`) for a candidate
    /// port; nginx is started and waited for (30 s at most) until it
    /// listens there, and started again on a fresh port if that one was
    /// taken meanwhile ([`crate::ports::on_fresh_ports`]). Fails with
    /// nginx's error log if it exits or never listens.
    pub fn start(dir: &Path, conf: impl Fn(u16) -> String) -> Nginx {
        let bin = nginx_bin();
        let conf_path = dir.join("nginx.conf");
        let logs = [dir.join("error.log"), dir.join("nginx.stderr")];
        on_fresh_ports("nginx", 1, |ports| {
            std::fs::write(&conf_path, conf(ports[0])).unwrap();
            let mut cmd = Command::new(&bin);
            Self::args(&mut cmd, dir, &conf_path)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&logs[1]).unwrap());
            match spawn_listening("nginx", cmd, ports, &logs, 30) {
                Started::Up(child) => Started::Up(Nginx {
                    child,
                    bin: bin.clone(),
                    prefix: dir.to_path_buf(),
                    conf: conf_path.clone(),
                    port: ports[0],
                }),
                Started::PortTaken(why) => Started::PortTaken(why),
            }
        })
    }

    /// nginx for a config whose server listens on the unix socket `socket`
    /// (`listen unix:…;`: no port at all); writes `conf` to
    /// `dir/nginx.conf` and waits (30 s at most) until it accepts
    /// connections there. Fails with nginx's error log if it exits first.
    pub fn start_unix(dir: &Path, conf: &str, socket: &Path) -> Nginx {
        let bin = nginx_bin();
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = Self::args(&mut Command::new(&bin), dir, &conf_path)
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let mut n = Nginx {
            child: Proc(child),
            bin,
            prefix: dir.to_path_buf(),
            conf: conf_path,
            port: 0,
        };
        let error_log = || std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
        crate::net::wait_until(
            30,
            &format!("nginx to listen on unix:{}", socket.display()),
            || {
                if !n.child.alive() {
                    panic!("nginx exited: {}", error_log());
                }
                std::os::unix::net::UnixStream::connect(socket).is_ok()
            },
            error_log,
        );
        n
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// nginx proxying every request to 127.0.0.1:`upstream`, writing the
    /// access log `log` in the format `log_format` defines (a whole
    /// `log_format NAME …;` directive); `location` holds extra directives
    /// of the proxying location (`proxy_read_timeout 2s;`).
    pub fn proxy(dir: &Path, log_format: &str, log: &Path, upstream: u16, location: &str) -> Nginx {
        let name = log_format
            .split_whitespace()
            .nth(1)
            .expect("a log_format directive");
        let conf = |port: u16| {
            format!(
                "{user}\nworker_processes 1;\nerror_log {dir}/error.log info;\n\
                 events {{ worker_connections 256; }}\n\
                 http {{\n  {log_format}\n  access_log {log} {name};\n  {temp}\n\
                   server {{ listen 127.0.0.1:{port};\n\
                     location / {{ proxy_pass http://127.0.0.1:{upstream}; {location} }} }}\n}}\n",
                user = user_directive(),
                dir = dir.display(),
                log = log.display(),
                temp = temp_paths(dir),
            )
        };
        Nginx::start(dir, conf)
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
            if !self.child.alive() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // `child` is killed and reaped as it drops.
    }
}
