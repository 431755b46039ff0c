//! `ClientError`: every way a client call fails, each naming the volume and what went wrong.

use meta::MetaError;
use wire::{PgId, Status};

/// The I/O operations of a volume, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Read,
    Write,
    WriteZeroes,
    Trim,
    Allocation,
    Changes,
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Operation::Read => "read",
            Operation::Write => "write",
            Operation::WriteZeroes => "write_zeroes",
            Operation::Trim => "trim",
            Operation::Allocation => "allocation",
            Operation::Changes => "changes",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error("no volume named {name:?}")]
    NoSuchVolume { name: String },
    #[error("no snapshot named {name:?}")]
    NoSuchSnapshot { name: String },
    /// Refused before anything was sent: a snapshot takes no writes.
    #[error("{volume:?} is a snapshot, read only: {operation} refused")]
    ReadOnly { volume: String, operation: Operation },
    /// Refused before anything was sent: changes are counted against a snapshot below the
    /// layer in its chain (an earlier snapshot of the same volume, not rolled back past).
    #[error("{since:?} is not an earlier snapshot of {layer:?} in its chain")]
    NotEarlier { layer: String, since: String },
    #[error("volume {name:?} cannot be opened: {reason}")]
    InvalidVolume { name: String, reason: String },
    /// Refused before anything was sent: misaligned offset or length, or a length over the
    /// largest a call may carry.
    #[error("volume {volume:?}: {operation} of length_bytes={length_bytes} at offset_bytes={offset_bytes}: {reason}")]
    InvalidArgument { volume: String, operation: Operation, offset_bytes: u64, length_bytes: u64, reason: &'static str },
    /// Refused before anything was sent: the range ends past the volume's size.
    #[error("volume {volume:?}: {operation} of length_bytes={length_bytes} at offset_bytes={offset_bytes} ends past the volume's size_bytes={size_bytes}")]
    OutOfRange { volume: String, operation: Operation, offset_bytes: u64, length_bytes: u64, size_bytes: u64 },
    /// The PG had no primary that served the request before the retry deadline.
    #[error("volume {volume:?}: {operation} at offset_bytes={offset_bytes}: PG {}.{} unavailable for {waited_ms} ms; last problem: {problem}", .pg.pool, .pg.pg)]
    Unavailable { volume: String, operation: Operation, offset_bytes: u64, pg: PgId, waited_ms: u64, problem: String },
    #[error("volume {volume:?}: {operation} at offset_bytes={offset_bytes}: osd.{osd} found corrupt data (PG {}.{})", .pg.pool, .pg.pg)]
    Corrupt { volume: String, operation: Operation, offset_bytes: u64, pg: PgId, osd: u32 },
    #[error("volume {volume:?}: {operation} at offset_bytes={offset_bytes}: osd.{osd} is out of space (PG {}.{})", .pg.pool, .pg.pg)]
    NoSpace { volume: String, operation: Operation, offset_bytes: u64, pg: PgId, osd: u32 },
    #[error("volume {volume:?}: {operation} at offset_bytes={offset_bytes}: osd.{osd} failed the i/o on its drive (PG {}.{})", .pg.pool, .pg.pg)]
    Io { volume: String, operation: Operation, offset_bytes: u64, pg: PgId, osd: u32 },
    /// The OSD refused the request with a status that retrying cannot fix (`InvalidArgument`,
    /// `OutOfRange`, `Unsupported`, `NoSuchObject`, `ProtocolError`).
    #[error("volume {volume:?}: {operation} at offset_bytes={offset_bytes}: osd.{osd} refused it with status {status} (PG {}.{})", .pg.pool, .pg.pg)]
    Refused { volume: String, operation: Operation, offset_bytes: u64, pg: PgId, osd: u32, status: Status },
    /// The OSD answered with a reply that does not fit the request (a bug in the OSD).
    #[error("volume {volume:?}: {operation} at offset_bytes={offset_bytes}: osd.{osd} sent a bad reply: {reason}")]
    BadReply { volume: String, operation: Operation, offset_bytes: u64, osd: u32, reason: String },
}
