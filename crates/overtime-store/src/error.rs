//! [`StoreError`]: every failure of the store, with the file or table it
//! concerns.

use std::path::PathBuf;

/// Errors of the store. I/O errors name the path they happened on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("arrow error in {context}: {source}")]
    Arrow {
        context: String,
        #[source]
        source: arrow::error::ArrowError,
    },
    #[error("parquet error in {path}: {source}")]
    Parquet {
        path: PathBuf,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("datafusion error registering `{table}`: {source}")]
    DataFusion {
        table: String,
        #[source]
        source: datafusion::error::DataFusionError,
    },
    /// Object storage (`[store] url`) refused or failed a request.
    #[error("{op} {path}: {source}")]
    Object {
        op: &'static str,
        path: String,
        #[source]
        source: object_store::Error,
    },
    #[error("manifest {path} is unreadable: {detail}")]
    Manifest { path: PathBuf, detail: String },
    #[error("batch for `{table}` does not match its schema: {detail}")]
    Schema { table: String, detail: String },
    #[error("invalid store config: {0}")]
    Config(String),
    /// Another process (an `overtime serve`) has the data dir open.
    #[error(
        "the data dir {path} is in use by another overtime process (pid {pid}); query it through that server (`overtime query --server`), or stop it first"
    )]
    InUse { path: PathBuf, pid: String },
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
