//! Each collector's manifest in the bucket — the commit record of its
//! flushes on object storage:
//!
//! ```text
//! <prefix>/_manifests/<collector id>.json   {"flushed_through": 7, "checkpoints": {…}}
//! ```
//!
//! Design rules:
//! - A flush writes its Parquet objects, then this manifest (one PUT,
//!   atomic), then the local `MANIFEST.json`. The bucket's copy decides:
//!   - other collectors read a collector's objects only up to its published
//!     `flushed_through`. An object past it is a flush that died before its
//!     commit record: its rows are still in its writer's memory, or are
//!     read again from Kafka by the next owner, so reading the object too
//!     would count them twice;
//!   - a Kafka partition's next owner starts after the furthest position
//!     any collector published ([`CommitPoints::shared_checkpoints`]), so a
//!     collector killed after a flush and before committing its offsets
//!     leaves nothing to be read twice;
//!   - a collector reopening its data dir takes the later of its two
//!     manifests: killed between the two writes, it keeps the flush the
//!     bucket has published (others may already have seeked past its rows).
//! - A collector with no manifest in the bucket (files written before this
//!   record existed) has all its objects read; when it opens, it publishes
//!   one covering every object it keeps.
//! - Once the bucket's manifest is written the flush is committed, even if
//!   the local save then fails (open takes the later one). A PUT that
//!   fails is checked by reading the manifest back; when even that fails,
//!   the flush's objects are kept as *orphans*, consistent with either
//!   answer, and the next flush first puts the last manifest back, then
//!   deletes them, before it publishes a sequence past them: an orphan is
//!   never covered by a later manifest, so never read beside its rows'
//!   second flush.
//! - The directory starts with `_`, outside every table's directory: an
//!   engine reading `<prefix>/<table>/` never sees it.
//!
//! [`CommitPoints::shared_checkpoints`]: overtime_model::CommitPoints::shared_checkpoints
//!
//! ```
//! use overtime_store::format::{manifest_key, parse_manifest_key};
//! let k = manifest_key("prod", "web-1");
//! assert_eq!(k, "prod/_manifests/web-1.json");
//! assert_eq!(parse_manifest_key("prod", &k).as_deref(), Some("web-1"));
//! assert_eq!(parse_manifest_key("prod", "prod/spans/date=2026-12-03/x.parquet"), None);
//! ```

use crate::StoreError;
use crate::flush::remove;
use crate::manifest::Manifest;
use crate::objects::Bucket;
use crate::store::Inner;
use overtime_model::Checkpoint;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// The directory of the manifests, under the prefix.
const DIR: &str = "_manifests";

/// The key of `collector`'s manifest under `prefix`.
pub fn manifest_key(prefix: &str, collector: &str) -> String {
    let sep = if prefix.is_empty() { "" } else { "/" };
    format!("{prefix}{sep}{DIR}/{collector}.json")
}

/// The collector whose manifest `key` is; `None` for any other key.
pub fn parse_manifest_key(prefix: &str, key: &str) -> Option<String> {
    let id = crate::objects::under_prefix(prefix, key)?
        .strip_prefix(DIR)?
        .strip_prefix('/')?
        .strip_suffix(".json")?;
    crate::objects::valid_collector_id(id).then(|| id.to_string())
}

/// Writes `collector`'s manifest to the bucket (replacing the last one).
pub(crate) fn publish(b: &Bucket, collector: &str, m: &Manifest) -> Result<(), StoreError> {
    b.put(&manifest_key(b.prefix(), collector), m.to_json().into())
}

/// `collector`'s manifest in the bucket, if it has one.
pub(crate) fn read_one(b: &Bucket, collector: &str) -> Result<Option<Manifest>, StoreError> {
    let key = manifest_key(b.prefix(), collector);
    match b.get(&key)? {
        None => Ok(None),
        Some(body) => Manifest::from_json(&body, &b.display_key(&key)).map(Some),
    }
}

/// The manifests read last, by key with their version: a listing that
/// shows the same version is answered without a GET.
#[derive(Default)]
pub(crate) struct ManifestCache(Mutex<HashMap<String, (String, Manifest)>>);

/// Every collector's manifest in the bucket, by collector id. A manifest
/// deleted between the listing and its read is skipped.
pub(crate) fn read_all(
    b: &Bucket,
    cache: &ManifestCache,
) -> Result<BTreeMap<String, Manifest>, StoreError> {
    let mut out = BTreeMap::new();
    let listed = b.list_versions(DIR)?;
    let mut cache = cache.0.lock().expect("manifest cache lock");
    cache.retain(|k, _| listed.iter().any(|(key, _, _)| key == k));
    for (key, _, version) in listed {
        let Some(id) = parse_manifest_key(b.prefix(), &key) else {
            continue;
        };
        if let Some((v, m)) = cache.get(&key)
            && *v == version
        {
            out.insert(id, m.clone());
            continue;
        }
        if let Some(body) = b.get(&key)? {
            let m = Manifest::from_json(&body, &b.display_key(&key))?;
            cache.insert(key, (version, m.clone()));
            out.insert(id, m);
        }
    }
    Ok(out)
}

impl Inner {
    /// Every (source, position) in every collector's published manifest,
    /// this one's included; none without a bucket.
    pub(crate) fn shared_checkpoints(&self) -> Result<Vec<Checkpoint>, StoreError> {
        let Some(b) = &self.bucket else {
            return Ok(Vec::new());
        };
        Ok(read_all(b, &self.manifests)?
            .into_values()
            .flat_map(|m| m.checkpoints)
            .map(|(source, position)| Checkpoint { source, position })
            .collect())
    }
}

/// How publishing a flush's manifest ended.
pub(crate) enum Commit {
    /// The bucket holds it: the flush is committed.
    Yes,
    /// It is not in the bucket: the flush is not committed.
    No(StoreError),
    /// The PUT failed and the bucket could not say whether it landed.
    Unknown(StoreError),
}

impl Inner {
    /// The flush's commit: publishes `m`, then saves it locally.
    pub(crate) fn publish_flush(&self, b: &Bucket, m: &Manifest) -> Commit {
        if let Err(e) = publish(b, &self.collector_id, m) {
            match read_one(b, &self.collector_id) {
                Ok(Some(got)) if got.flushed_through == m.flushed_through => {}
                Ok(_) => return Commit::No(e),
                Err(_) => return Commit::Unknown(e),
            }
        }
        if let Err(e) = m.save(&self.root, self.cfg.fsync) {
            // Committed all the same: open takes the bucket's manifest.
            *self.last_flush_error.lock().expect("error lock") = Some(format!(
                "saving the local manifest (the bucket's holds the flush): {e}"
            ));
        }
        Commit::Yes
    }

    /// Before a flush publishes a sequence past them: the last published
    /// manifest is put back (the orphans are then surely uncommitted) and
    /// the orphans deleted. Any failure fails the flush, which is retried.
    pub(crate) fn clear_orphans(&self, b: &Bucket) -> Result<(), StoreError> {
        let mut orphans = self.orphans.lock().expect("orphans lock");
        if orphans.is_empty() {
            return Ok(());
        }
        let last = {
            let st = self.state.read().expect("state lock");
            Manifest {
                flushed_through: st.flushed_through,
                checkpoints: st.flushed_checkpoints.clone(),
            }
        };
        publish(b, &self.collector_id, &last)?;
        while let Some(f) = orphans.last() {
            remove(f)?;
            orphans.pop();
        }
        Ok(())
    }
}
