//! Basalt's OSD storage engine: a journaled, checksummed, crash-safe object store on one drive.
//!
//! Objects are addressed by `(inode, stripe)` and hold up to `object_size` bytes. Small writes
//! go to a journal together with their data and are acknowledged once the journal write is
//! durable (group commit: one flush per batch of concurrent writes, several batches in
//! flight). Whole-object writes go to a free data block first (redirect-on-write) and journal
//! only a pointer. A background write-back job copies journaled data into place, updates the
//! on-disk metadata area and trims the journal. Every 4 KiB page carries a crc32c checked on
//! every read.
//!
//! The engine is a single-threaded state machine over the [`platform::Disk`] trait: callers
//! [`Engine::submit`] requests, then [`Engine::poll`] for completions and [`Engine::wait`] when
//! there is nothing to do. See `docs/design/engine-format.md` for the byte layout and
//! `docs/adr/0002-engine-journal-and-redirect.md` and `docs/adr/0009-journal-records-in-flight.md`
//! for the reasoning.

mod changes;
mod engine;
mod index;
pub mod layout;
mod meta_cache;

pub use engine::{Engine, EngineOptions, EngineStats, FormatOptions};
pub use layout::{OBJECT_SIZE_MAX_BYTES, OBJECT_SIZE_MIN_BYTES};
pub use platform::{AlignedBuffer, DiskError};
pub use types::{ObjectId, OBJECT_SIZE_DEFAULT_BYTES, PAGE_SIZE_BYTES};

#[derive(Debug)]
pub enum Request {
    /// Writes `data` at `offset_bytes` of the object. Both are multiples of 4 KiB.
    Write {
        object: ObjectId,
        offset_bytes: u32,
        data: AlignedBuffer,
    },
    /// Reads `length_bytes` at `offset_bytes`. Never-written ranges read as zeros.
    Read {
        object: ObjectId,
        offset_bytes: u32,
        length_bytes: u32,
    },
    Delete {
        object: ObjectId,
    },
    /// Which pages the object holds, without reading them: only a written-back object's
    /// metadata page may be read.
    Pages {
        object: ObjectId,
    },
    /// A write whose version the caller chose (a PG primary mints it; its replicas store the
    /// same). It must exceed every version of the object the engine still knows, including a
    /// delete in the journal; otherwise it fails with [`EngineError::StaleVersion`].
    WriteVersioned {
        object: ObjectId,
        offset_bytes: u32,
        data: AlignedBuffer,
        version: u64,
    },
    /// Replaces the whole object at a version the caller chose, under the same rule as
    /// `WriteVersioned`: the pages in `present` (bit `i`: page `i`) hold `data`'s pages, the
    /// others hold nothing (they read as zeros and are reported absent). What a copy of an
    /// object that holds some pages only writes. `data` is the whole object.
    ReplaceVersioned {
        object: ObjectId,
        data: AlignedBuffer,
        present: u64,
        version: u64,
    },
    /// A delete whose version the caller chose, under the same rule as `WriteVersioned`.
    DeleteVersioned {
        object: ObjectId,
        version: u64,
    },
    /// Completes once every write submitted before it has completed (writes are durable when
    /// they complete, so this is a barrier, not extra I/O).
    Flush,
}

#[derive(Debug)]
pub enum Reply {
    Written {
        version: u64,
    },
    /// `present`: the pages read that the object holds (bit `i`: page `i` of the object); the
    /// others read as zeros because no write gave them data.
    Read {
        version: u64,
        data: AlignedBuffer,
        present: u64,
    },
    Deleted {
        version: u64,
    },
    /// `present`: the pages the object holds (bit `i`: page `i`); none for an object that does
    /// not exist.
    Pages {
        version: u64,
        present: u64,
    },
    Flushed,
}

#[derive(Debug)]
pub struct Completion {
    pub user_data: u64,
    pub result: Result<Reply, EngineError>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    #[error("invalid request: {reason}")]
    InvalidArgument { reason: String },
    #[error("range offset_bytes={offset_bytes} length_bytes={length_bytes} exceeds the object size of {object_size_bytes} bytes")]
    OutOfRange { offset_bytes: u64, length_bytes: u64, object_size_bytes: u32 },
    #[error("no space left on the engine for object {object}")]
    NoSpace { object: ObjectId },
    #[error("data corruption: object {object} offset_bytes={offset_bytes} fails its checksum")]
    Corrupt { object: ObjectId, offset_bytes: u64 },
    #[error("corrupt metadata for object {object} (data block {block})")]
    MetaCorrupt { object: ObjectId, block: u32 },
    #[error("object {object}: version {version} is not newer than the stored version {current}")]
    StaleVersion { object: ObjectId, version: u64, current: u64 },
    #[error("disk error: {0}")]
    Disk(#[from] DiskError),
    #[error("engine stopped accepting writes after a failed write ({reason}); restart it to recover")]
    Poisoned { reason: String },
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{0}")]
    Superblock(#[from] layout::SuperblockError),
    #[error("both superblock copies are damaged: {first}; {second}")]
    SuperblocksDamaged { first: layout::SuperblockError, second: layout::SuperblockError },
    #[error("device has {actual_bytes} bytes but the engine was formatted for {expected_bytes} bytes")]
    DeviceShrunk { expected_bytes: u64, actual_bytes: u64 },
    #[error("metadata entry of data block {block} at offset_bytes={offset_bytes} is corrupt")]
    MetaCorrupt { block: u32, offset_bytes: u64 },
    #[error("journal record seq={seq} at offset_bytes={offset_bytes} is corrupt ({reason}) but later records exist: acknowledged writes were damaged on disk")]
    JournalCorrupt { seq: u64, offset_bytes: u64, reason: String },
    #[error("disk error while opening: {0}")]
    Disk(#[from] DiskError),
}

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{0}")]
    Geometry(#[from] layout::GeometryError),
    #[error("disk error while formatting: {0}")]
    Disk(#[from] DiskError),
}

/// Space accounting, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceStats {
    pub total_bytes: u64,
    pub used_bytes: u64,
    /// What new objects can still use (free blocks minus those promised to journaled writes).
    pub free_bytes: u64,
    pub journal_total_bytes: u64,
    pub journal_used_bytes: u64,
    pub object_count: u64,
}
