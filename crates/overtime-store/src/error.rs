//! [`StoreError`]: every failure of the store, with the file or table it
//! concerns.

use std::path::PathBuf;

/// Errors of the store. I/O errors name the path they happened on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file or directory under `data_dir` could not be read, written,
    /// synced or removed (a full disk shows up here).
    #[error("{op} {path}: {source}")]
    Io {
        /// What the store was doing: "writing", "fsyncing", "renaming"...
        op: &'static str,
        /// The file or directory it was doing it to.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    #[error("arrow error in {context}: {source}")]
    /// A batch could not be encoded, decoded or sorted.
    Arrow {
        /// What the store was doing, and to which table.
        context: String,
        /// Arrow's error.
        #[source]
        source: arrow::error::ArrowError,
    },
    #[error("parquet error in {path}: {source}")]
    /// A Parquet file could not be written or read (a torn or foreign
    /// file in `parquet/`, or an object that changed under us).
    Parquet {
        /// The file, or the object as `s3://bucket/key`.
        path: PathBuf,
        /// The Parquet reader's or writer's error.
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("datafusion error registering `{table}`: {source}")]
    /// A table could not be registered for SQL.
    DataFusion {
        /// The table's name (`gateway_requests`, `spans`, `rejected`).
        table: String,
        /// DataFusion's error.
        #[source]
        source: datafusion::error::DataFusionError,
    },
    /// Object storage (`[store] url`) refused or failed a request.
    #[error("{op} {path}: {source}")]
    Object {
        /// What the store was doing: "writing", "listing", "deleting"...
        op: &'static str,
        /// The object or prefix, as `s3://bucket/key`.
        path: String,
        /// The object store client's error.
        #[source]
        source: object_store::Error,
    },
    #[error("manifest {path} is unreadable: {detail}")]
    /// `MANIFEST.json` exists but is not a manifest: the store refuses to
    /// guess how much of the WAL is already in Parquet.
    Manifest {
        /// The manifest's path.
        path: PathBuf,
        /// Why it could not be read.
        detail: String,
    },
    #[error("batch for `{table}` does not match its schema: {detail}")]
    /// A written batch does not have its table's columns and types; the
    /// write is refused and nothing is stored.
    Schema {
        /// The table written to.
        table: String,
        /// The first column that does not match, and how.
        detail: String,
    },
    /// `[store]` settings that cannot work together (see
    /// [`StoreConfig::validate`](crate::StoreConfig::validate)).
    #[error("invalid store config: {0}")]
    Config(String),
    /// Another process (an `overtime serve`) has the data dir open.
    #[error(
        "the data dir {path} is in use by another overtime process (pid {pid}); query it through that server (`overtime query --server`), or stop it first"
    )]
    InUse {
        /// The data dir.
        path: PathBuf,
        /// The pid written in its `LOCK` file, as read (may be empty).
        pid: String,
    },
}

impl StoreError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StoreError::Io {
            op,
            path: path.into(),
            source,
        }
    }
    pub(crate) fn arrow(context: impl Into<String>, source: arrow::error::ArrowError) -> Self {
        StoreError::Arrow {
            context: context.into(),
            source,
        }
    }
    pub(crate) fn parquet(path: impl Into<PathBuf>, source: parquet::errors::ParquetError) -> Self {
        StoreError::Parquet {
            path: path.into(),
            source,
        }
    }
}
