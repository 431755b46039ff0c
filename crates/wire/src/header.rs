//! The fixed 48-byte frame header: its byte layout, its checksum, and the checks that make it
//! trustworthy before anything else in a frame is read.
//!
//! The layout is in `docs/design/wire-protocol.md`; keep the two in step. The magic and the
//! version occupy the first 6 bytes in every protocol version, so any build can recognise and
//! name a version it does not speak.

use crate::codes::{Opcode, Status};
use crate::error::DecodeError;
pub use crate::limits::HEADER_SIZE_BYTES;

/// "BSLW" in the first four bytes of every frame.
pub const MAGIC: u32 = u32::from_le_bytes(*b"BSLW");

/// The only protocol version this build speaks and accepts.
pub const PROTOCOL_VERSION: u16 = 4;

/// Set in replies, clear in requests.
pub const FLAG_REPLY: u32 = 1 << 0;

/// Every flag version 1 defines; any other bit set is a protocol error.
pub const FLAGS_KNOWN: u32 = FLAG_REPLY;

/// Byte offsets of the header fields.
pub(crate) mod offset {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 4;
    pub const OPCODE: usize = 6;
    pub const FLAGS: usize = 8;
    pub const PAYLOAD_SIZE: usize = 12;
    pub const REQUEST_ID: usize = 16;
    pub const EPOCH: usize = 24;
    pub const STATUS: usize = 32;
    pub const PAYLOAD_CRC32C: usize = 36;
    pub const RESERVED: usize = 40;
    pub const HEADER_CRC32C: usize = 44;
}

const _: () = assert!(offset::HEADER_CRC32C + 4 == HEADER_SIZE_BYTES);

/// A decoded, verified header.
///
/// `Frame::encode` derives every header field from the frame; this type is public for
/// transports that read the header first and then the payload into a buffer of their choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub opcode: Opcode,
    /// `FLAG_REPLY` or zero.
    pub flags: u32,
    pub payload_size_bytes: u32,
    /// Chosen by the requester, unique among its requests in flight on the connection; a reply carries its request's id.
    pub request_id: u64,
    /// The sender's epoch of the PG the op addresses; zero for ops that address no PG (Flush, Ping).
    pub epoch: u64,
    /// `Status::Ok` in every request.
    pub status: Status,
    pub payload_crc32c: u32,
}

impl Header {
    pub fn is_reply(&self) -> bool {
        self.flags & FLAG_REPLY != 0
    }

    /// The header's bytes, with its checksum.
    ///
    /// # Panics
    ///
    /// If the header breaks a rule the decoder enforces (unknown flags, a request with a status):
    /// such a header is a bug in the caller.
    pub fn encode(&self) -> [u8; HEADER_SIZE_BYTES] {
        assert_eq!(self.flags & !FLAGS_KNOWN, 0);
        assert!(self.is_reply() || self.status.is_ok());
        let mut bytes = [0u8; HEADER_SIZE_BYTES];
        put(&mut bytes, offset::MAGIC, &MAGIC.to_le_bytes());
        put(&mut bytes, offset::VERSION, &PROTOCOL_VERSION.to_le_bytes());
        put(&mut bytes, offset::OPCODE, &self.opcode.as_u16().to_le_bytes());
        put(&mut bytes, offset::FLAGS, &self.flags.to_le_bytes());
        put(&mut bytes, offset::PAYLOAD_SIZE, &self.payload_size_bytes.to_le_bytes());
        put(&mut bytes, offset::REQUEST_ID, &self.request_id.to_le_bytes());
        put(&mut bytes, offset::EPOCH, &self.epoch.to_le_bytes());
        put(&mut bytes, offset::STATUS, &self.status.as_u32().to_le_bytes());
        put(&mut bytes, offset::PAYLOAD_CRC32C, &self.payload_crc32c.to_le_bytes());
        // The reserved field stays zero and the header checksum covers the header with its own field zero.
        let header_crc32c = crc32c::crc32c(&bytes);
        put(&mut bytes, offset::HEADER_CRC32C, &header_crc32c.to_le_bytes());
        bytes
    }

    /// Verifies and decodes a header. Checks run in order: magic, version, header checksum,
    /// reserved field, flags, opcode, status, payload size against `payload_size_max_bytes`.
    /// The payload checksum is checked later, against the payload.
    pub fn decode(bytes: &[u8; HEADER_SIZE_BYTES], payload_size_max_bytes: u32) -> Result<Header, DecodeError> {
        check_prefix(bytes)?;
        let expected = u32_at(bytes, offset::HEADER_CRC32C);
        let actual = header_crc32c(bytes);
        if expected != actual {
            return Err(DecodeError::HeaderChecksum { expected, actual });
        }
        let request_id = u64_at(bytes, offset::REQUEST_ID);
        let reserved = u32_at(bytes, offset::RESERVED);
        if reserved != 0 {
            return Err(DecodeError::ReservedNotZero { request_id, value: reserved });
        }
        let flags = u32_at(bytes, offset::FLAGS);
        if flags & !FLAGS_KNOWN != 0 {
            return Err(DecodeError::UnknownFlags { request_id, flags });
        }
        let opcode_number = u16_at(bytes, offset::OPCODE);
        let opcode =
            Opcode::from_u16(opcode_number).ok_or(DecodeError::UnknownOpcode { request_id, opcode: opcode_number })?;
        let status_number = u32_at(bytes, offset::STATUS);
        if flags & FLAG_REPLY == 0 && status_number != Status::Ok.as_u32() {
            return Err(DecodeError::StatusInRequest { request_id, status: status_number });
        }
        let status =
            Status::from_u32(status_number).ok_or(DecodeError::UnknownStatus { request_id, status: status_number })?;
        let payload_size_bytes = u32_at(bytes, offset::PAYLOAD_SIZE);
        if payload_size_bytes > payload_size_max_bytes {
            return Err(DecodeError::PayloadTooLarge { request_id, payload_size_bytes, payload_size_max_bytes });
        }
        Ok(Header {
            opcode,
            flags,
            payload_size_bytes,
            request_id,
            epoch: u64_at(bytes, offset::EPOCH),
            status,
            payload_crc32c: u32_at(bytes, offset::PAYLOAD_CRC32C),
        })
    }
}

/// Checks the magic and version in the first bytes of a frame, as far as they have arrived, so a
/// peer speaking something else is refused before a whole header arrives.
pub(crate) fn check_prefix(bytes: &[u8]) -> Result<(), DecodeError> {
    if let Some(magic_bytes) = bytes.get(offset::MAGIC..offset::MAGIC + 4) {
        let magic = u32::from_le_bytes([magic_bytes[0], magic_bytes[1], magic_bytes[2], magic_bytes[3]]);
        if magic != MAGIC {
            return Err(DecodeError::BadMagic { magic });
        }
    }
    if let Some(version_bytes) = bytes.get(offset::VERSION..offset::VERSION + 2) {
        let version = u16::from_le_bytes([version_bytes[0], version_bytes[1]]);
        if version != PROTOCOL_VERSION {
            return Err(DecodeError::UnsupportedVersion { version });
        }
    }
    Ok(())
}

/// The crc32c of a header with its checksum field taken as zero.
pub(crate) fn header_crc32c(bytes: &[u8; HEADER_SIZE_BYTES]) -> u32 {
    let crc32c = crc32c::crc32c(&bytes[..offset::HEADER_CRC32C]);
    crc32c::crc32c_append(crc32c, &[0u8; 4])
}

/// Rewrites the checksums and the payload size of one whole frame in place. For tests and
/// fuzzing, which craft frames field by field.
#[cfg(any(test, feature = "fuzz"))]
pub(crate) fn reseal(frame: &mut [u8]) {
    assert!(frame.len() >= HEADER_SIZE_BYTES);
    let payload_size_bytes = u32::try_from(frame.len() - HEADER_SIZE_BYTES).expect("frame fits the u32 size field");
    let payload_crc32c = crc32c::crc32c(&frame[HEADER_SIZE_BYTES..]);
    let header: &mut [u8; HEADER_SIZE_BYTES] =
        (&mut frame[..HEADER_SIZE_BYTES]).try_into().expect("slice has the header's length");
    put(header, offset::PAYLOAD_SIZE, &payload_size_bytes.to_le_bytes());
    put(header, offset::PAYLOAD_CRC32C, &payload_crc32c.to_le_bytes());
    let header_crc32c = header_crc32c(header);
    put(header, offset::HEADER_CRC32C, &header_crc32c.to_le_bytes());
}

fn put(bytes: &mut [u8; HEADER_SIZE_BYTES], at: usize, value: &[u8]) {
    bytes[at..at + value.len()].copy_from_slice(value);
}

fn u16_at(bytes: &[u8; HEADER_SIZE_BYTES], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn u32_at(bytes: &[u8; HEADER_SIZE_BYTES], at: usize) -> u32 {
    let mut value = [0u8; 4];
    value.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(value)
}

fn u64_at(bytes: &[u8; HEADER_SIZE_BYTES], at: usize) -> u64 {
    let mut value = [0u8; 8];
    value.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_the_design_doc() {
        let header = Header {
            opcode: Opcode::SecWrite,
            flags: FLAG_REPLY,
            payload_size_bytes: 0x0102_0304,
            request_id: 0x1112_1314_1516_1718,
            epoch: 0x2122_2324_2526_2728,
            status: Status::WrongEpoch,
            payload_crc32c: 0x3132_3334,
        };
        let bytes = header.encode();
        let expected_prefix: [u8; 44] = [
            b'B', b'S', b'L', b'W', // magic
            4, 0, // version
            17, 0, // opcode
            1, 0, 0, 0, // flags
            0x04, 0x03, 0x02, 0x01, // payload size
            0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, // request id
            0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21, // epoch
            2, 0, 0, 0, // status
            0x34, 0x33, 0x32, 0x31, // payload crc32c
            0, 0, 0, 0, // reserved
        ];
        assert_eq!(bytes[..44], expected_prefix);
        let mut zeroed = bytes;
        zeroed[44..].fill(0);
        assert_eq!(u32_at(&bytes, 44), crc32c::crc32c(&zeroed));
        assert_eq!(Header::decode(&bytes, u32::MAX), Ok(header));
    }

    #[test]
    fn prefix_is_checked_before_a_whole_header_arrives() {
        assert_eq!(check_prefix(b"BSL"), Ok(()));
        assert_eq!(check_prefix(b"HTTP"), Err(DecodeError::BadMagic { magic: u32::from_le_bytes(*b"HTTP") }));
        assert_eq!(check_prefix(b"BSLW\x02"), Ok(()));
        assert_eq!(check_prefix(b"BSLW\x01\x00"), Err(DecodeError::UnsupportedVersion { version: 1 }));
    }
}
