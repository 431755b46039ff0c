//! Size limits of the wire protocol, in one place.
//!
//! A decoder refuses any frame whose payload is larger than the limit it was built with, before
//! buffering that payload, so one connection can never make its peer buffer more than
//! `HEADER_SIZE_BYTES + PAYLOAD_SIZE_MAX_BYTES`. The encoder never produces a frame that a decoder
//! with the default limit refuses. These constants move to `types::limits` when that crate exists.

/// The fixed size of every frame header.
pub const HEADER_SIZE_BYTES: usize = 48;

/// The most data one Read reply, Write, SecRead reply or SecWrite carries.
/// Clients split larger I/O; an object (at most 256 KiB) always fits.
pub const DATA_SIZE_MAX_BYTES: u32 = 4 << 20;

/// Room for the fixed fields that precede the data in a body.
pub const BODY_FIELDS_SIZE_MAX_BYTES: u32 = 4096;

/// The default and largest payload a decoder accepts, and the largest the encoder produces.
pub const PAYLOAD_SIZE_MAX_BYTES: u32 = DATA_SIZE_MAX_BYTES + BODY_FIELDS_SIZE_MAX_BYTES;

/// The largest whole frame: header plus payload.
pub const FRAME_SIZE_MAX_BYTES: usize = HEADER_SIZE_BYTES + PAYLOAD_SIZE_MAX_BYTES as usize;

/// Bytes of one `(object, version)` entry in a SecList reply.
pub const LIST_ENTRY_SIZE_BYTES: u32 = 24;

/// The most entries one SecList reply carries: a responder caps the request's `count_max` to this.
pub const LIST_ENTRIES_MAX_COUNT: u32 = (PAYLOAD_SIZE_MAX_BYTES - 4) / LIST_ENTRY_SIZE_BYTES;

const _: () = assert!(HEADER_SIZE_BYTES.is_multiple_of(8));
const _: () = assert!(DATA_SIZE_MAX_BYTES >= 256 * 1024);
const _: () =
    assert!(4 + LIST_ENTRIES_MAX_COUNT as u64 * LIST_ENTRY_SIZE_BYTES as u64 <= PAYLOAD_SIZE_MAX_BYTES as u64);
// Frame sizes are computed in `usize`; a 32-bit `usize` holds any of them.
const _: () = assert!(usize::BITS >= 32);
const _: () = assert!((PAYLOAD_SIZE_MAX_BYTES as u64) + (HEADER_SIZE_BYTES as u64) < u32::MAX as u64);

/// The most objects one Flatten lists: a responder refuses more (each may cost an object's copy).
pub const FLATTEN_OBJECTS_MAX_COUNT: u32 = 1024;

/// Bytes of one VolumeUsage reply entry: inode (8), objects (8), objects no other layer needs (8).
pub const LAYER_USAGE_SIZE_BYTES: u32 = 24;

/// The most entries a VolumeUsage reply carries: an OSD asked about a volume with more layers
/// reports the first ones.
pub const LAYER_USAGES_MAX_COUNT: u32 = (PAYLOAD_SIZE_MAX_BYTES - 4) / LAYER_USAGE_SIZE_BYTES;

/// Bytes of one PgStates reply entry: PG (8), epoch (8), state (4), members unlisted (4),
/// objects left (8), trouble (4), failures (4).
pub const PG_REPORT_SIZE_BYTES: u32 = 40;

/// The most entries a PgStates reply carries: an OSD leading more PGs reports the first ones.
pub const PG_REPORTS_MAX_COUNT: u32 = (PAYLOAD_SIZE_MAX_BYTES - 20) / PG_REPORT_SIZE_BYTES;
