//! What can stop a simulation, each with the context an operator needs.

use std::path::PathBuf;

/// A simulation could not start or finish.
///
/// ```
/// use overtime_simulate::SimulateError;
/// let e = SimulateError::Usage("--rate must be > 0".into());
/// assert!(e.to_string().contains("--rate"));
/// assert!(e.is_usage());
/// ```
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// A bad flag value (the CLI exits 2 on it).
    #[error("{0}")]
    Usage(String),
    /// A file could not be created or written.
    #[error("{what} {path}: {source}")]
    File {
        /// What was being done, in words.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A socket or the runtime could not be set up.
    #[error("{what}: {source}")]
    Io {
        /// What was being set up (the socket's address, the runtime).
        what: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// nginx was found but would not start, or would not stop.
    #[error("nginx: {0}")]
    Nginx(String),
    /// The OpenTelemetry exporter could not be built.
    #[error("telemetry: {0}")]
    Telemetry(String),
}

impl SimulateError {
    /// True for a bad flag value: the CLI maps it to exit code 2.
    pub fn is_usage(&self) -> bool {
        matches!(self, SimulateError::Usage(_))
    }

    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        SimulateError::Io {
            what: what.into(),
            source,
        }
    }
}
