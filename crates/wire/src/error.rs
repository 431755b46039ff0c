//! `DecodeError`: every way a byte stream can fail to be a valid sequence of frames.
//!
//! Every decode error is fatal for the connection. The stream has no resynchronisation point
//! (a frame boundary is only known from a trusted header), so after an error the caller closes
//! the connection; the `Decoder` refuses further input and repeats the error. Errors detected
//! after the header checksum passed carry the frame's `request_id`, so the responder may send one
//! best-effort `Status::ProtocolError` reply for it before closing.

use crate::codes::Opcode;
use crate::header::{MAGIC, PROTOCOL_VERSION};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("bad magic {magic:#010x} (expected {MAGIC:#010x}): the peer does not speak the basalt wire protocol")]
    BadMagic { magic: u32 },
    #[error("unsupported protocol version {version} (this build speaks version {PROTOCOL_VERSION})")]
    UnsupportedVersion { version: u16 },
    #[error("header checksum mismatch: the header says {expected:#010x}, its bytes give {actual:#010x}")]
    HeaderChecksum { expected: u32, actual: u32 },
    #[error("reserved header field is {value:#x} in request_id={request_id}; version 1 requires zero")]
    ReservedNotZero { request_id: u64, value: u32 },
    #[error("unknown flags {flags:#x} in request_id={request_id}")]
    UnknownFlags { request_id: u64, flags: u32 },
    #[error("unknown opcode {opcode} in request_id={request_id}")]
    UnknownOpcode { request_id: u64, opcode: u16 },
    #[error("unknown status {status} in the reply to request_id={request_id}")]
    UnknownStatus { request_id: u64, status: u32 },
    #[error("request_id={request_id} is a request but carries status {status}; only replies carry a status")]
    StatusInRequest { request_id: u64, status: u32 },
    #[error("request_id={request_id} has a payload of {payload_size_bytes} bytes, over the limit of {payload_size_max_bytes} bytes")]
    PayloadTooLarge { request_id: u64, payload_size_bytes: u32, payload_size_max_bytes: u32 },
    #[error("payload checksum mismatch in request_id={request_id}: the header says {expected:#010x}, the payload gives {actual:#010x}")]
    PayloadChecksum { request_id: u64, expected: u32, actual: u32 },
    #[error("{opcode} {kind} body of request_id={request_id} has {size_bytes} bytes, fewer than the {size_min_bytes} its fields need")]
    BodyTooShort { request_id: u64, opcode: Opcode, kind: BodyKind, size_bytes: u64, size_min_bytes: u64 },
    #[error("{opcode} {kind} body of request_id={request_id} has {trailing_bytes} bytes after its last field")]
    TrailingBytes { request_id: u64, opcode: Opcode, kind: BodyKind, trailing_bytes: u64 },
    #[error("the stream ended inside a frame, with {buffered_bytes} bytes of it received")]
    Truncated { buffered_bytes: usize },
}

/// Which of an opcode's bodies failed to decode, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    Request,
    Reply,
    /// A reply with a status other than `Ok`, whose body must be empty.
    ErrorReply,
}

impl std::fmt::Display for BodyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BodyKind::Request => "request",
            BodyKind::Reply => "reply",
            BodyKind::ErrorReply => "error reply",
        })
    }
}

impl DecodeError {
    /// The request id of the offending frame, when its header was trustworthy enough to read one.
    pub fn request_id(&self) -> Option<u64> {
        match *self {
            DecodeError::BadMagic { .. }
            | DecodeError::UnsupportedVersion { .. }
            | DecodeError::HeaderChecksum { .. }
            | DecodeError::Truncated { .. } => None,
            DecodeError::ReservedNotZero { request_id, .. }
            | DecodeError::UnknownFlags { request_id, .. }
            | DecodeError::UnknownOpcode { request_id, .. }
            | DecodeError::UnknownStatus { request_id, .. }
            | DecodeError::StatusInRequest { request_id, .. }
            | DecodeError::PayloadTooLarge { request_id, .. }
            | DecodeError::PayloadChecksum { request_id, .. }
            | DecodeError::BodyTooShort { request_id, .. }
            | DecodeError::TrailingBytes { request_id, .. } => Some(request_id),
        }
    }
}
