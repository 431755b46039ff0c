//! The embedded metadata store: a `MetaStore` for one machine, with no external service.
//!
//! [`EmbeddedMetaStore`] keeps the whole key space in memory and makes every write durable in
//! a write-ahead log (crc32c-checked records, `fdatasync` before the write returns), compacted
//! into a snapshot when it grows; it behaves like a single etcd member (same revisions, same
//! transaction and watch semantics), with leases that expire on tokio's clock. `basalt dev`
//! runs it in process. [`remote::serve`] shares it with other processes over TCP, and
//! [`RemoteMetaStore`] is their client; that is what `basalt mon --embedded PATH` hosts for
//! OSD processes when there is no etcd.
//!
//! It is deliberately not replicated: multi-node metadata means etcd (ADR 0005). The file
//! format and its recovery are described in `log.rs` and `docs/design/metadata-keys.md`
//! describes what the cluster stores in it.

mod codec;
mod lock;
pub mod log;
pub mod remote;
mod store;

use std::path::PathBuf;

pub use remote::{serve, RemoteMetaStore, RemoteOptions};
pub use store::{EmbeddedMetaStore, EmbeddedOptions};

/// Why an embedded store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error("metadata store {} is in use by another process", path.display())]
    InUse { path: PathBuf },
    #[error("metadata store file {}: {operation} failed", path.display())]
    Io {
        path: PathBuf,
        operation: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("metadata store file {} is corrupt at offset_bytes={offset_bytes}: {reason}", path.display())]
    Corrupt { path: PathBuf, offset_bytes: u64, reason: String },
}
