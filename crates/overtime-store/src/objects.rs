//! Parquet on object storage (`[store] url = "s3://bucket/prefix"` or
//! `file:///path`): the bucket, its layout, and a Parquet reader over
//! ranged GETs. The WAL, the manifest and the memtable stay in `data_dir`.
//!
//! Layout (hive-style, readable by any engine that reads Parquet):
//!
//! ```text
//! <prefix>/<table>/date=YYYY-MM-DD/hour=HH/<collector id>-<bucket start UTC>-<flush seq>.parquet
//! s3://overtime/prod/spans/date=2026-12-03/hour=18/web-1-3f2a9c1e-20261203T180000Z-0000000000000007.parquet
//! ```
//!
//! The collector id in the name keeps the files of several collectors
//! sharing one prefix apart: a store owns (recovers, flushes, bounds by
//! `retention_bytes`) the files with its own id, and sees the others' by
//! listing the prefix (at most every [`LIST_CACHE`]).
//!
//! ```
//! use overtime_model::Table;
//! use overtime_store::format::{object_key, parse_key};
//! let k = object_key("prod", Table::Spans, "web-1", 1_764_446_400_000_000, 7);
//! assert_eq!(k, "prod/spans/date=2025-11-29/hour=20/web-1-20251129T200000Z-0000000000000007.parquet");
//! let p = parse_key("prod", &k).unwrap();
//! assert_eq!((p.table, p.collector.as_str(), p.seq), (Table::Spans, "web-1", 7));
//! ```

use crate::StoreError;
use crate::segment::bucket_name;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use futures::FutureExt;
use futures::TryStreamExt;
use futures::future::BoxFuture;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use overtime_model::Table;
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, RowFilter};
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::{ChunkReader, Length};
use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

/// How long a listing of the prefix is reused before a read lists again:
/// files another collector flushed are seen at most this late.
pub const LIST_CACHE: Duration = Duration::from_secs(5);

/// Bound on the whole start-up check (list the prefix): a wrong endpoint
/// fails `Store::open` instead of hanging it.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// The store's own small runtime: object-store I/O runs on it, and the
/// store's sync API (the flush thread, trace lookups) blocks on it from
/// any thread — an async caller's runtime included.
struct Io {
    rt: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
}

impl Drop for Io {
    fn drop(&mut self) {
        // The last reference may go in an async context (a DataFusion
        // table dropped in a task), where a blocking shutdown panics.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Io {
    fn new() -> Result<Io, StoreError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("overtime-store-io")
            .enable_all()
            .build()
            .map_err(|e| StoreError::io("starting the object-store runtime", "", e))?;
        Ok(Io {
            handle: rt.handle().clone(),
            rt: Some(rt),
        })
    }

    /// Runs `f` on the store's runtime and waits for it.
    fn run<F>(&self, f: F) -> F::Output
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let _ = tx.send(f.await);
        });
        rx.recv()
            .expect("the object-store runtime runs while the store lives")
    }
}

/// The bucket (or directory) the Parquet files live in.
pub struct Bucket {
    pub(crate) store: Arc<dyn ObjectStore>,
    /// Scheme and authority, as DataFusion registers the store:
    /// `s3://bucket`, `file://`.
    pub(crate) base: String,
    /// Key prefix, without leading or trailing `/` (may be empty).
    pub(crate) prefix: String,
    io: Io,
}

impl fmt::Debug for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bucket({})", self.display_key(""))
    }
}

/// One file name parsed back: see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedKey {
    /// The table, from the key's first segment after the prefix.
    pub table: Table,
    /// The id of the collector that wrote the object.
    pub collector: String,
    /// Start of its time bucket as in the name, e.g. `20251129T200000Z`.
    pub bucket: String,
    /// That collector's flush sequence.
    pub seq: u64,
}

/// The key of a flushed file (module docs).
pub fn object_key(
    prefix: &str,
    t: Table,
    collector: &str,
    bucket_start_us: i64,
    seq: u64,
) -> String {
    let b = bucket_name(bucket_start_us); // YYYYMMDDTHHMMSSZ
    let (date, hour) = (format!("{}-{}-{}", &b[0..4], &b[4..6], &b[6..8]), &b[9..11]);
    let sep = if prefix.is_empty() { "" } else { "/" };
    format!("{prefix}{sep}{t}/date={date}/hour={hour}/{collector}-{b}-{seq:016}.parquet")
}

/// Parses a key written by [`object_key`] under `prefix`; `None` for
/// anything else (a file some other tool put there is ignored).
pub fn parse_key(prefix: &str, key: &str) -> Option<ParsedKey> {
    let rest = under_prefix(prefix, key)?;
    let mut parts = rest.split('/');
    let first = parts.next()?;
    let table = Table::ALL.into_iter().find(|t| t.as_str() == first)?;
    let (date, hour, name) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !date.starts_with("date=") || !hour.starts_with("hour=") {
        return None;
    }
    let stem = name.strip_suffix(".parquet")?;
    let (rest, seq) = stem.rsplit_once('-')?;
    let (collector, bucket) = rest.rsplit_once('-')?;
    if collector.is_empty() || bucket.len() != 16 {
        return None;
    }
    Some(ParsedKey {
        table,
        collector: collector.to_string(),
        bucket: bucket.to_string(),
        seq: seq.parse().ok()?,
    })
}

/// `key` less `prefix/` (the whole key with an empty prefix); `None` when
/// the key is not under the prefix.
pub(crate) fn under_prefix<'k>(prefix: &str, key: &'k str) -> Option<&'k str> {
    if prefix.is_empty() {
        Some(key)
    } else {
        key.strip_prefix(prefix)?.strip_prefix('/')
    }
}

/// A collector id as it may appear in a file name.
pub fn valid_collector_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

fn object_err(op: &'static str, path: String, source: object_store::Error) -> StoreError {
    StoreError::Object { op, path, source }
}

impl Bucket {
    /// Connects to `url` (`s3://bucket[/prefix]`, `file:///path`) and lists
    /// the prefix once: a wrong bucket, endpoint or credentials fail here,
    /// within [`OPEN_TIMEOUT`]. S3 settings come from the environment
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
    /// `AWS_ENDPOINT_URL`/`AWS_ENDPOINT`, `AWS_ALLOW_HTTP`, …).
    pub fn open(url: &str) -> Result<Bucket, StoreError> {
        let bad = |why: &str| StoreError::Config(format!("store.url {url:?}: {why}"));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("expected s3://bucket/prefix or file:///path"))?;
        let io = Io::new()?;
        let (store, base, prefix): (Arc<dyn ObjectStore>, String, String) = match scheme {
            "s3" | "s3a" => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(bad("no bucket name"));
                }
                let retry = object_store::RetryConfig {
                    max_retries: 3,
                    retry_timeout: Duration::from_secs(20),
                    ..Default::default()
                };
                let s3 = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(retry)
                    .with_http_connector(object_store::client::SpawnedReqwestConnector::new(
                        io.handle.clone(),
                    ))
                    .build()
                    .map_err(|e| object_err("configuring", url.to_string(), e))?;
                (Arc::new(s3), format!("s3://{bucket}"), prefix.to_string())
            }
            "file" => {
                if !rest.starts_with('/') {
                    return Err(bad("a file url needs an absolute path: file:///path"));
                }
                std::fs::create_dir_all(rest)
                    .map_err(|e| StoreError::io("creating directory", rest, e))?;
                let fs = object_store::local::LocalFileSystem::new();
                (Arc::new(fs), "file://".to_string(), rest.to_string())
            }
            other => return Err(bad(&format!("unsupported scheme {other}:// (s3, file)"))),
        };
        let prefix = prefix.trim_matches('/').to_string();
        let b = Bucket {
            store,
            base,
            prefix,
            io,
        };
        let (store, p) = (b.store.clone(), b.prefix_path());
        let first = b.io.run(async move {
            let mut list = store.list(Some(&p));
            tokio::time::timeout(OPEN_TIMEOUT, list.try_next()).await
        });
        match first {
            Ok(Ok(_)) => Ok(b),
            Ok(Err(e)) => Err(StoreError::Object {
                op: "listing (check [store] url and the AWS_* environment)",
                path: b.display_key(""),
                source: e,
            }),
            Err(_) => Err(StoreError::Config(format!(
                "store.url {url:?}: listing the prefix did not answer within {}s \
                 (check the endpoint, AWS_ENDPOINT_URL)",
                OPEN_TIMEOUT.as_secs()
            ))),
        }
    }

    fn prefix_path(&self) -> ObjectPath {
        ObjectPath::from(self.prefix.as_str())
    }

    /// `s3://bucket/key` (or `file:///key`): how a file is named to users.
    pub fn display_key(&self, key: &str) -> String {
        format!(
            "{}/{}",
            self.base,
            if key.is_empty() { &self.prefix } else { key }
        )
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Every object under the prefix: (key, size).
    pub fn list(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.list_under("")
    }

    /// Every object under `<prefix>/<dir>` (`dir` empty: the prefix).
    pub(crate) fn list_under(&self, dir: &str) -> Result<Vec<(String, u64)>, StoreError> {
        Ok(self
            .list_versions(dir)?
            .into_iter()
            .map(|(k, size, _)| (k, size))
            .collect())
    }

    /// [`Bucket::list_under`] with each object's version as the store
    /// reports it (ETag, else the modification time): it changes when
    /// the object is replaced.
    pub(crate) fn list_versions(
        &self,
        dir: &str,
    ) -> Result<Vec<(String, u64, String)>, StoreError> {
        let p = match (self.prefix.is_empty(), dir.is_empty()) {
            (_, true) => self.prefix_path(),
            (true, false) => ObjectPath::from(dir),
            (false, false) => ObjectPath::from(format!("{}/{dir}", self.prefix)),
        };
        let store = self.store.clone();
        self.io
            .run(async move {
                store
                    .list(Some(&p))
                    .map_ok(|m| {
                        let version = m.e_tag.unwrap_or_else(|| m.last_modified.to_rfc3339());
                        (m.location.to_string(), m.size, version)
                    })
                    .try_collect::<Vec<_>>()
                    .await
            })
            .map_err(|e| object_err("listing", self.display_key(""), e))
    }

    pub(crate) fn put(&self, key: &str, body: Bytes) -> Result<(), StoreError> {
        let (store, p) = (self.store.clone(), ObjectPath::from(key));
        self.io
            .run(async move { store.put(&p, body.into()).await })
            .map(|_| ())
            .map_err(|e| object_err("writing", self.display_key(key), e))
    }

    /// The whole object `key`; `None` when there is none.
    pub(crate) fn get(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        let (store, p) = (self.store.clone(), ObjectPath::from(key));
        let got = self.io.run(async move {
            match store.get(&p).await {
                Ok(r) => r.bytes().await,
                Err(e) => Err(e),
            }
        });
        match got {
            Ok(b) => Ok(Some(b)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(object_err("reading", self.display_key(key), e)),
        }
    }

    /// Deletes `key`; one already gone is not an error (another collector's
    /// retention may have been first).
    pub(crate) fn delete(&self, key: &str) -> Result<(), StoreError> {
        let (store, p) = (self.store.clone(), ObjectPath::from(key));
        match self.io.run(async move { store.delete(&p).await }) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(object_err("deleting", self.display_key(key), e)),
        }
    }

    fn get_range(
        &self,
        key: &ObjectPath,
        start: u64,
        end: u64,
    ) -> Result<Bytes, object_store::Error> {
        let (store, p) = (self.store.clone(), key.clone());
        self.io
            .run(async move { store.get_range(&p, start..end).await })
    }

    /// What DataFusion registers the store under.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }
}

/// One object read through ranged GETs: what the Parquet reader needs
/// (footer, bloom filters, column chunks) and nothing more.
#[derive(Clone, Debug)]
pub struct ObjectReader {
    pub(crate) bucket: Arc<Bucket>,
    pub(crate) key: ObjectPath,
    pub(crate) size: u64,
}

impl ObjectReader {
    /// Reads row groups `rgs` (only the rows `filter` passes) as the async
    /// Parquet reader does: each column chunk it needs in one ranged GET,
    /// neighbours coalesced, the filter's columns first and the others
    /// only for row groups with a match. The [`ChunkReader`] below serves
    /// the footer and bloom filters; for data it would fetch from a page
    /// to the end of the object once per column.
    pub(crate) fn read_row_groups(
        &self,
        meta: ArrowReaderMetadata,
        rgs: Vec<usize>,
        filter: Option<RowFilter>,
        batch_size: usize,
    ) -> Result<Vec<RecordBatch>, parquet::errors::ParquetError> {
        let reader = ObjectFileReader {
            store: self.bucket.store.clone(),
            key: self.key.clone(),
            meta: meta.metadata().clone(),
        };
        self.bucket.io.run(async move {
            let mut b = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, meta)
                .with_row_groups(rgs)
                .with_batch_size(batch_size);
            if let Some(f) = filter {
                b = b.with_row_filter(f);
            }
            b.build()?.try_collect().await
        })
    }
}

/// The async Parquet reader's view of one object: ranged GETs (several
/// at once through `get_ranges`, which coalesces neighbours) and the
/// metadata the store already holds, so the footer is never fetched again.
struct ObjectFileReader {
    store: Arc<dyn ObjectStore>,
    key: ObjectPath,
    meta: Arc<ParquetMetaData>,
}

impl AsyncFileReader for ObjectFileReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            self.store
                .get_range(&self.key, range)
                .await
                .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
        }
        .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            self.store
                .get_ranges(&self.key, &ranges)
                .await
                .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        let meta = self.meta.clone();
        async move { Ok(meta) }.boxed()
    }
}

impl Length for ObjectReader {
    fn len(&self) -> u64 {
        self.size
    }
}

impl ChunkReader for ObjectReader {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf;
        Ok(self
            .get_bytes(start, (self.size - start.min(self.size)) as usize)?
            .reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        if length == 0 {
            return Ok(Bytes::new());
        }
        self.bucket
            .get_range(&self.key, start, start + length as u64)
            .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
    }
}
