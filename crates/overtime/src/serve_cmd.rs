//! `overtime serve`: loads the config and runs the collector
//! (`overtime-serve`).

use crate::UsageError;
use anyhow::Result;
use overtime_config::Config;
use std::path::PathBuf;

/// Runs the collector with the config at `config` (the embedded default
/// without one) until a signal stops it; with `ready_file`, the bound
/// addresses are written there once it is ready.
pub fn run(config: Option<PathBuf>, ready_file: Option<PathBuf>) -> Result<()> {
    // A config that cannot be read, parsed or accepted is a usage error:
    // one line, exit 2.
    let cfg = match &config {
        Some(p) => Config::load(p).map_err(|e| UsageError(e.to_string()))?,
        None => Config::default(),
    };
    overtime_serve::run(cfg, ready_file.as_deref()).map_err(Into::into)
}
