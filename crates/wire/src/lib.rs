//! The Basalt wire protocol: the frames that clients, gateways and OSDs exchange, and their codec.
//!
//! A connection carries a stream of frames in both directions. Each frame is a 48-byte header
//! (magic, version, opcode, flags, payload size, request id, PG epoch, status, two crc32c
//! checksums) followed by a payload whose layout depends on the opcode and on whether the frame is
//! a request or a reply. Everything is little-endian. Requests are pipelined: a reply carries its
//! request's id, and replies may come in any order. The byte layout, the versioning policy and the
//! error policy are in `docs/design/wire-protocol.md`.
//!
//! This crate does no I/O. A transport (tokio, io_uring, the simulator's network) feeds received
//! bytes to a [`Decoder`] and writes the bytes [`Frame::encode`] appends to its send buffer.
//! Decoding treats its input as hostile: it returns a [`DecodeError`] and never panics, and any
//! error means the connection must be closed.
//!
//! ```
//! use wire::{Decoder, Frame, PgId, Request};
//!
//! let write = Request::Write { pg: PgId { pool: 1, pg: 7 }, inode: 42, offset_bytes: 4096, data: vec![0xab; 4096].into() };
//! let mut send_buffer = Vec::new();
//! Frame::request(1, 3, write.clone()).encode(&mut send_buffer);
//!
//! let mut decoder = Decoder::default();
//! for chunk in send_buffer.chunks(1000) {
//!     decoder.feed(chunk);
//! }
//! assert_eq!(decoder.next_frame(), Ok(Some(Frame::request(1, 3, write))));
//! assert_eq!(decoder.next_frame(), Ok(None));
//! ```

mod codes;
mod decoder;
mod error;
mod frame;
mod header;
pub mod limits;

#[cfg(any(test, feature = "fuzz"))]
pub mod fuzz;
#[cfg(test)]
mod testing;

pub use bytes::Bytes;
pub use codes::{Opcode, Status};
pub use decoder::Decoder;
pub use error::{BodyKind, DecodeError};
pub use frame::{
    Body, Frame, LayerUsage, ListEntry, ObjectId, PgId, PgReport, PgStateCode, PgTrouble, Request, Response,
    ABSENT_VERSION,
};
pub use header::{Header, FLAGS_KNOWN, FLAG_REPLY, HEADER_SIZE_BYTES, MAGIC, PROTOCOL_VERSION};
