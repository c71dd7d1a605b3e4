//! The programs tests run for real (nginx, Chromium, Prometheus' tools…):
//! where they are installed, and child processes that never outlive a test.
//!
//! Rules:
//! - A missing program fails the test with the Debian package to install;
//!   it never skips it.
//! - A child process is held by a guard that kills (SIGKILL) and reaps it
//!   when dropped, a panicking test included.

use std::path::{Path, PathBuf};
use std::process::Child;

/// Where Debian installs programs, looked at before `PATH`.
const DEBIAN_DIRS: [&str; 4] = ["/usr/bin", "/usr/sbin", "/usr/local/bin", "/bin"];

/// The first of `names` found in the usual Debian places or on `PATH`;
/// panics naming the Debian `package` to install when none is.
pub fn find_program(names: &[&str], package: &str) -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    for name in names {
        let found = DEBIAN_DIRS
            .into_iter()
            .chain(path.split(':').filter(|d| !d.is_empty()))
            .map(|dir| Path::new(dir).join(name))
            .find(|p| p.is_file());
        if let Some(p) = found {
            return p;
        }
    }
    panic!(
        "{} not found: install it with `{}` (scripts/test does this)",
        names.join(" / "),
        install(package)
    );
}

/// The command that installs the Debian `package`.
pub fn install(package: &str) -> String {
    format!("apt-get install -y --no-install-recommends {package}")
}

/// Whether this process runs as root (then nginx's workers must be told to
/// run as root too, to write in a private temp dir).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

/// A child process killed (SIGKILL) and reaped on drop.
#[derive(Debug)]
pub struct Proc(pub Child);

impl Proc {
    /// The process id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_program_debian_always_has() {
        assert!(find_program(&["no-such-program-here", "sh"], "dash").is_file());
    }

    #[test]
    #[should_panic(expected = "apt-get install -y --no-install-recommends a-package")]
    fn a_missing_program_names_its_package() {
        find_program(&["no-such-program-here"], "a-package");
    }
}
