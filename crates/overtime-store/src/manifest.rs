//! The manifest: the small JSON file that says how far the WAL has been
//! moved to Parquet (`flushed_through`, a WAL segment sequence) and the
//! sources' checkpoints as of that point. It is replaced atomically
//! (write a temp file, fsync, rename, fsync the directory), so a crash
//! leaves either the old or the new manifest, never a torn one.
//!
//! Checkpoints newer than the manifest live in the WAL records that
//! follow it; open reads the manifest, then replays the WAL over it.
//! With a bucket the same manifest is also published there, first
//! (`published.rs`), and open takes the later of the two.

use crate::StoreError;
use crate::wal::sync_dir;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

const FILE: &str = "MANIFEST.json";

/// What survives a WAL truncation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Every WAL segment `<=` this is in Parquet.
    pub flushed_through: u64,
    /// Source name → last durable position, as of `flushed_through`.
    pub checkpoints: BTreeMap<String, String>,
}

impl Manifest {
    fn path(dir: &Path) -> PathBuf {
        dir.join(FILE)
    }

    /// The manifest as stored (pretty JSON).
    pub(crate) fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("a manifest always serializes")
    }

    /// A manifest read from `origin` (a path or an object's URL).
    pub(crate) fn from_json(bytes: &[u8], origin: &str) -> Result<Manifest, StoreError> {
        serde_json::from_slice(bytes).map_err(|e| StoreError::Manifest {
            path: origin.into(),
            detail: e.to_string(),
        })
    }

    /// Reads the manifest in `dir`; a missing one is the empty manifest.
    pub fn load(dir: &Path) -> Result<Manifest, StoreError> {
        let p = Self::path(dir);
        match fs::read(&p) {
            Ok(bytes) => Self::from_json(&bytes, &p.to_string_lossy()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Manifest::default()),
            Err(e) => Err(StoreError::io("reading", p, e)),
        }
    }

    /// Replaces the manifest in `dir` atomically.
    pub fn save(&self, dir: &Path, fsync: bool) -> Result<(), StoreError> {
        let p = Self::path(dir);
        let tmp = dir.join(format!("{FILE}.tmp"));
        let body = self.to_json();
        let mut f = fs::File::create(&tmp).map_err(|e| StoreError::io("creating", &tmp, e))?;
        f.write_all(&body)
            .map_err(|e| StoreError::io("writing", &tmp, e))?;
        if fsync {
            f.sync_all()
                .map_err(|e| StoreError::io("fsyncing", &tmp, e))?;
        }
        drop(f);
        fs::rename(&tmp, &p).map_err(|e| StoreError::io("renaming", &tmp, e))?;
        if fsync {
            sync_dir(dir)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod module_example {
    use super::Manifest;

    #[test]
    fn a_saved_manifest_loads_back_equal() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = Manifest {
            flushed_through: 7,
            ..Default::default()
        };
        m.checkpoints
            .insert("file:edge.log".into(), "offset=10".into());
        m.save(dir.path(), true).unwrap();
        assert_eq!(Manifest::load(dir.path()).unwrap(), m);
    }
}
