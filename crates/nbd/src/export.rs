//! What the server serves: [`Exports`] (the set of exports by name) and [`Export`] (one opened
//! export, a volume of the cluster in the gateway), and the one error type they return.
//!
//! The server speaks NBD and turns every request into 4 KiB-aligned calls of these traits: it
//! does the read-modify-write of partial pages, the bounds checks and the splitting itself, so
//! an implementation only ever sees offsets and lengths that are multiples of
//! [`crate::limits::EXPORT_BLOCK_SIZE_BYTES`] and lie inside the export.

use std::future::Future;

use bytes::Bytes;

use crate::proto;

/// The exports a server offers, looked up by name in the handshake.
pub trait Exports: Send + Sync + 'static {
    type Export: Export;

    /// Opens the export a client named, or `Ok(None)` if there is none by that name. The empty
    /// name is the protocol's default export; an implementation may map it to one or refuse it.
    fn open(&self, name: &str) -> impl Future<Output = Result<Option<Self::Export>, ExportError>> + Send;

    /// The names `NBD_OPT_LIST` reports.
    fn list(&self) -> impl Future<Output = Result<Vec<String>, ExportError>> + Send;
}

/// One opened export. Every connection to it holds a clone.
///
/// Contract (the server relies on it for `NBD_FLAG_CAN_MULTI_CONN`): a call that returns `Ok`
/// has made its effect durable, and every later call through any clone (any connection) sees
/// it. Offsets and lengths are multiples of [`crate::limits::EXPORT_BLOCK_SIZE_BYTES`] and lie
/// inside `size_bytes()`; an implementation may assert it.
pub trait Export: Clone + Send + Sync + 'static {
    /// The export's name, the same for every clone: concurrent read-modify-writes through
    /// connections to exports of one name are serialized against each other.
    fn name(&self) -> &str;

    /// A line for humans (`NBD_INFO_DESCRIPTION`); empty for none.
    fn description(&self) -> String {
        String::new()
    }

    /// Whether the export takes no writes (a snapshot): advertised to the client, and every
    /// write, write-zeroes and trim is refused with `EPERM` before it reaches the export.
    fn read_only(&self) -> bool {
        false
    }

    /// The size. The server uses it rounded down to the export block size and reads it once per
    /// connection, when the client enters the transmission phase.
    fn size_bytes(&self) -> u64;

    /// Reads `length_bytes` bytes at `offset_bytes`; the result holds exactly that many bytes.
    fn read(&self, offset_bytes: u64, length_bytes: u32) -> impl Future<Output = Result<Bytes, ExportError>> + Send;

    /// Writes `data` at `offset_bytes`, durably.
    fn write(&self, offset_bytes: u64, data: Bytes) -> impl Future<Output = Result<(), ExportError>> + Send;

    /// Makes the range read as zeroes, durably; it may deallocate it.
    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> impl Future<Output = Result<(), ExportError>> + Send;

    /// Discards the range; afterwards it reads as zeroes or as its old contents (NBD clients
    /// assume nothing about trimmed data).
    fn trim(&self, offset_bytes: u64, length_bytes: u64) -> impl Future<Output = Result<(), ExportError>> + Send;

    /// Returns once every write acknowledged before the call is durable (for an export whose
    /// writes are durable when acknowledged, at once).
    fn flush(&self) -> impl Future<Output = Result<(), ExportError>> + Send;

    /// The earlier snapshots whose changes this export reports, each offered as the metadata
    /// context `qemu:dirty-bitmap:NAME`. None by default.
    fn bitmaps(&self) -> Vec<String> {
        Vec::new()
    }

    /// Describes the range from `offset_bytes` as consecutive runs that may differ from the
    /// earlier snapshot `bitmap` (one of [`Export::bitmaps`]), under the contract of
    /// [`Export::block_status`]. A run reported unchanged must be unchanged; an export that
    /// cannot tell reports the range changed, which is always correct.
    fn changes(
        &self,
        bitmap: &str,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> impl Future<Output = Result<Vec<Change>, ExportError>> + Send {
        let _ = bitmap;
        let _ = offset_bytes;
        std::future::ready(Ok(vec![Change { length_bytes, changed: true }]))
    }

    /// Describes the range from `offset_bytes` as consecutive extents. They may stop short of
    /// `length_bytes` (the client asks again from where they end) or run past it (the server
    /// cuts them), but must start at `offset_bytes`. An export that cannot tell returns one data
    /// extent, which is always correct.
    fn block_status(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> impl Future<Output = Result<Vec<Extent>, ExportError>> + Send;
}

/// A run of bytes with one allocation state (`base:allocation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub length_bytes: u64,
    /// Nothing is stored for these bytes and they read as zeroes (never written, or trimmed).
    /// `false` means data is stored, or the export cannot tell.
    pub hole: bool,
}

impl Extent {
    /// The `base:allocation` flags of the extent.
    pub fn state(&self) -> u32 {
        if self.hole {
            proto::STATE_HOLE | proto::STATE_ZERO
        } else {
            0
        }
    }
}

/// A run of bytes that differs, or not, from an earlier snapshot (`qemu:dirty-bitmap:NAME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub length_bytes: u64,
    /// The bytes may differ; `false` only where they are the same.
    pub changed: bool,
}

impl Change {
    /// The `qemu:dirty-bitmap` flags of the run.
    pub fn state(&self) -> u32 {
        if self.changed {
            proto::STATE_DIRTY
        } else {
            0
        }
    }
}

/// Why an export call failed. [`ExportError::errno`] decides what the NBD client sees; the
/// message goes to the client in structured replies and to the log.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ExportError {
    /// The data could not be read or written (replicas unreachable, a checksum mismatch, ...).
    #[error("i/o error: {0}")]
    Io(String),
    /// The pool has no room for the write.
    #[error("no space left: {0}")]
    NoSpace(String),
    /// The export does not accept writes.
    #[error("export is read-only: {0}")]
    ReadOnly(String),
    /// The request is not valid for this export (for instance, it lies past a shrunken end).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The gateway is shutting down; the client should disconnect.
    #[error("shutting down: {0}")]
    Shutdown(String),
}

impl ExportError {
    /// The NBD error value a client sees for this error.
    pub fn errno(&self) -> u32 {
        match self {
            ExportError::Io(_) => proto::EIO,
            ExportError::NoSpace(_) => proto::ENOSPC,
            ExportError::ReadOnly(_) => proto::EPERM,
            ExportError::Invalid(_) => proto::EINVAL,
            ExportError::Shutdown(_) => proto::ESHUTDOWN,
        }
    }
}
