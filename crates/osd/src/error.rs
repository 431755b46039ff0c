//! `OsdError`: why an OSD could not start or had to stop. Per-op failures are statuses on the
//! wire (`ops/`), never errors of the daemon.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum OsdError {
    #[error("cannot open the data device {}", .path.display())]
    OpenDisk {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{} is not a Basalt engine; format it first with `basalt osd init --data {}`", .path.display(), .path.display())]
    NotFormatted { path: PathBuf },
    #[error("cannot open the engine on {}", .path.display())]
    OpenEngine {
        path: PathBuf,
        #[source]
        source: engine::OpenError,
    },
    #[error("cannot record osd id {osd} in the superblock of {}", .path.display())]
    SetOsdId {
        path: PathBuf,
        osd: u32,
        #[source]
        source: engine::OpenError,
    },
    #[error("the superblock of {} names osd id {osd_id}, which is not a valid OSD id", .path.display())]
    InvalidOsdId { path: PathBuf, osd_id: u64 },
    #[error(
        "the engine on {} stores {engine_bytes}-byte objects but the cluster uses {cluster_bytes}-byte objects; \
         format it again with `basalt osd init --force --object-size {cluster_bytes}`",
        .path.display()
    )]
    ObjectSizeMismatch { path: PathBuf, engine_bytes: u32, cluster_bytes: u32 },
    #[error("metadata store: {context}")]
    Meta {
        context: String,
        #[source]
        source: meta::MetaError,
    },
    #[error(transparent)]
    Record(#[from] cluster::RecordError),
    #[error("cannot listen on {address}")]
    Listen {
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the drive {} failed: {reason}", .path.display())]
    DriveFailed { path: PathBuf, reason: String },
    #[error("invalid configuration: {reason}")]
    Config { reason: String },
    #[error("cannot set up the OSD's event loop")]
    Runtime(#[source] std::io::Error),
    #[error("the OSD thread panicked")]
    Panicked,
}

impl OsdError {
    pub(crate) fn meta(context: impl Into<String>) -> impl FnOnce(meta::MetaError) -> OsdError {
        let context = context.into();
        move |source| OsdError::Meta { context, source }
    }
}
