//! The bytes SQL read from the bucket's Parquet objects, kept in memory
//! across queries (`[store] read_cache_bytes`), as DuckDB's external file
//! cache keeps them: a dashboard re-runs the same scans every refresh, and
//! over a bucket each scan otherwise fetches every column chunk again.
//!
//! Design rules:
//! - Objects are never rewritten in place (a flush writes a new key, its
//!   sequence never reused), so a block once read is right for as long as
//!   its key exists: no revalidation. Blocks are keyed by the object's
//!   path and size, so even a key written again by a collector whose
//!   `data_dir` was wiped misses unless it is byte for byte as long.
//! - The unit is an aligned block of [`BLOCK`] bytes: a range is served
//!   from the blocks it covers, the missing ones fetched together (the
//!   object store coalesces neighbours into one ranged GET), so a scan
//!   whose ranges shift from one refresh to the next still hits.
//! - Bounded: DataFusion's LRU cache, at most `read_cache_bytes`; `0`
//!   turns the cache off (every read goes to the bucket).
//! - Local files are not cached here: the OS page cache already holds
//!   them.

use bytes::{Bytes, BytesMut};
use datafusion::common::TableReference;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::ParquetFileReaderFactory;
use datafusion::execution::cache::Cache;
use datafusion::execution::cache::default_cache::DefaultCache;
use datafusion::execution::cache::{CacheKey, CacheValue};
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use futures::FutureExt;
use futures::future::BoxFuture;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::file::metadata::ParquetMetaData;
use std::ops::Range;
use std::sync::Arc;

/// Bytes per cached block.
pub const BLOCK: u64 = 256 << 10;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BlockKey {
    path: Arc<str>,
    size: u64,
    block: u64,
}

impl CacheKey for BlockKey {
    fn size(&self) -> usize {
        self.path.len() + 24
    }
    fn table_ref(&self) -> Option<&TableReference> {
        None
    }
}

#[derive(Clone)]
pub(crate) struct Block(Bytes);

impl CacheValue for Block {
    fn size(&self) -> usize {
        self.0.len()
    }
}

/// The blocks of every object read, shared by every session.
pub(crate) type ReadCache = DefaultCache<BlockKey, Block>;

pub(crate) fn read_cache(bytes: u64) -> Arc<ReadCache> {
    Arc::new(DefaultCache::new(bytes as usize).with_name("overtime-store object bytes"))
}

/// Wraps another factory's readers so their data reads go through `cache`.
pub(crate) struct CachingFactory<F> {
    pub inner: F,
    pub cache: Arc<ReadCache>,
}

impl<F: std::fmt::Debug> std::fmt::Debug for CachingFactory<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachingFactory")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Block({} bytes)", self.0.len())
    }
}

impl<F: ParquetFileReaderFactory> ParquetFileReaderFactory for CachingFactory<F> {
    fn create_reader(
        &self,
        partition_index: usize,
        file: PartitionedFile,
        metadata_size_hint: Option<usize>,
        metrics: &ExecutionPlanMetricsSet,
    ) -> datafusion::error::Result<Box<dyn AsyncFileReader + Send>> {
        let path: Arc<str> = file.object_meta.location.as_ref().into();
        let size = file.object_meta.size;
        let inner = self
            .inner
            .create_reader(partition_index, file, metadata_size_hint, metrics)?;
        Ok(Box::new(CachingReader {
            inner,
            path,
            size,
            cache: self.cache.clone(),
        }))
    }
}

struct CachingReader {
    inner: Box<dyn AsyncFileReader + Send>,
    path: Arc<str>,
    size: u64,
    cache: Arc<ReadCache>,
}

impl CachingReader {
    fn key(&self, block: u64) -> BlockKey {
        BlockKey {
            path: self.path.clone(),
            size: self.size,
            block,
        }
    }

    /// `ranges` served from the cache, fetching the blocks it lacks in one
    /// call of the inner reader.
    async fn read(&mut self, ranges: Vec<Range<u64>>) -> parquet::errors::Result<Vec<Bytes>> {
        let mut wanted: Vec<u64> = ranges
            .iter()
            .filter(|r| r.end > r.start)
            .flat_map(|r| r.start / BLOCK..r.end.div_ceil(BLOCK))
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        let mut have: std::collections::HashMap<u64, Bytes> = Default::default();
        let mut missing = Vec::new();
        for b in wanted {
            match self.cache.get(&self.key(b)) {
                Some(Block(bytes)) => {
                    have.insert(b, bytes);
                }
                None => missing.push(b),
            }
        }
        if !missing.is_empty() {
            let spans: Vec<Range<u64>> = missing
                .iter()
                .map(|b| b * BLOCK..((b + 1) * BLOCK).min(self.size))
                .collect();
            let got = self.inner.get_byte_ranges(spans).await?;
            for (b, bytes) in missing.into_iter().zip(got) {
                self.cache.put(&self.key(b), Block(bytes.clone()));
                have.insert(b, bytes);
            }
        }
        ranges
            .into_iter()
            .map(|r| {
                let part = |b: u64| -> parquet::errors::Result<Bytes> {
                    let block = have.get(&b).ok_or_else(|| {
                        parquet::errors::ParquetError::General(format!(
                            "{}: block {b} missing from the read cache",
                            self.path
                        ))
                    })?;
                    let lo = r.start.max(b * BLOCK) - b * BLOCK;
                    let hi = (r.end.min((b + 1) * BLOCK) - b * BLOCK).min(block.len() as u64);
                    if lo > hi {
                        return Err(parquet::errors::ParquetError::EOF(format!(
                            "{}: range {r:?} past the object's end",
                            self.path
                        )));
                    }
                    Ok(block.slice(lo as usize..hi as usize))
                };
                let (first, last) = (r.start / BLOCK, r.end.div_ceil(BLOCK));
                if r.end <= r.start {
                    return Ok(Bytes::new());
                }
                if last - first == 1 {
                    return part(first);
                }
                let mut out = BytesMut::with_capacity((r.end - r.start) as usize);
                for b in first..last {
                    out.extend_from_slice(&part(b)?);
                }
                Ok(out.freeze())
            })
            .collect()
    }
}

impl AsyncFileReader for CachingReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            let mut v = self.read(vec![range]).await?;
            Ok(v.pop().unwrap_or_default())
        }
        .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        self.read(ranges).boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        self.inner.get_metadata(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An object in memory that counts the bytes read from it.
    struct Object {
        body: Bytes,
        read: Arc<std::sync::atomic::AtomicU64>,
    }

    impl AsyncFileReader for Object {
        fn get_bytes(&mut self, r: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
            self.read
                .fetch_add(r.end - r.start, std::sync::atomic::Ordering::Relaxed);
            let b = self.body.slice(r.start as usize..r.end as usize);
            async move { Ok(b) }.boxed()
        }

        fn get_metadata<'a>(
            &'a mut self,
            _: Option<&'a ArrowReaderOptions>,
        ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
            unreachable!("data reads only")
        }
    }

    fn reader(
        body: &Bytes,
        cache: &Arc<ReadCache>,
    ) -> (CachingReader, Arc<std::sync::atomic::AtomicU64>) {
        let read = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let r = CachingReader {
            inner: Box::new(Object {
                body: body.clone(),
                read: read.clone(),
            }),
            path: "prod/spans/a.parquet".into(),
            size: body.len() as u64,
            cache: cache.clone(),
        };
        (r, read)
    }

    #[tokio::test]
    async fn ranges_across_blocks_read_the_objects_bytes_and_a_second_reader_reads_none_again() {
        let len = 3 * BLOCK + 1234;
        let body = Bytes::from((0..len).map(|i| (i * 7 % 251) as u8).collect::<Vec<_>>());
        let cache = read_cache(64 << 20);
        let ranges = vec![
            0..10,
            BLOCK - 5..BLOCK + 5,
            BLOCK..2 * BLOCK,
            100..3 * BLOCK + 1000,
            len - 1..len,
            7..7,
        ];
        let want: Vec<Bytes> = ranges
            .iter()
            .map(|r| body.slice(r.start as usize..r.end as usize))
            .collect();
        let (mut first, read) = reader(&body, &cache);
        assert_eq!(first.get_byte_ranges(ranges.clone()).await.unwrap(), want);
        assert_eq!(
            read.load(std::sync::atomic::Ordering::Relaxed),
            len,
            "each block once"
        );
        let (mut second, read) = reader(&body, &cache);
        assert_eq!(second.get_byte_ranges(ranges).await.unwrap(), want);
        assert_eq!(
            second.get_bytes(BLOCK + 1..BLOCK + 3).await.unwrap(),
            body.slice(BLOCK as usize + 1..BLOCK as usize + 3)
        );
        assert_eq!(
            read.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "all from the cache"
        );
    }

    #[tokio::test]
    async fn a_cache_smaller_than_the_object_still_answers_every_range() {
        let len = 4 * BLOCK;
        let body = Bytes::from((0..len).map(|i| (i % 253) as u8).collect::<Vec<_>>());
        let cache = read_cache(BLOCK + BLOCK / 2);
        let (mut r, _) = reader(&body, &cache);
        let got = r.get_bytes(10..len - 10).await.unwrap();
        assert_eq!(got, body.slice(10..len as usize - 10));
    }
}
