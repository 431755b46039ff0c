//! The transmission phase as pure functions over bytes: request headers, their checks against
//! what was negotiated ([`classify`]), reply encoding, and the `base:allocation` descriptors of
//! a block status reply. The fuzz target drives the same functions.
//!
//! Two outcomes for a bad request. A header that breaks the stream (a bad magic, a write payload
//! over [`PAYLOAD_SIZE_MAX_BYTES`]) is a [`StreamError`]: the connection closes, since the next
//! request cannot be found. Anything else (an unknown command or flag, a misaligned or
//! out-of-range request) is a [`Rejection`]: the request gets an error reply and the connection
//! goes on.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::handshake::{truncate, Transmission};
use crate::limits::{BLOCK_SIZE_MIN_BYTES, BLOCK_STATUS_EXTENTS_MAX, PAYLOAD_SIZE_MAX_BYTES};
use crate::proto::*;

/// A request header, not yet checked against the transmission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub flags: u16,
    pub command: u16,
    pub handle: u64,
    pub offset_bytes: u64,
    pub length_bytes: u32,
}

/// A request that makes the rest of the stream impossible to follow; the connection closes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    #[error("request header has magic {magic:#010x} instead of {REQUEST_MAGIC:#010x}")]
    Magic { magic: u32 },
    #[error(
        "write of {length_bytes} bytes (handle {handle:#x}) is over the {PAYLOAD_SIZE_MAX_BYTES}-byte payload limit"
    )]
    PayloadTooLarge { handle: u64, length_bytes: u32 },
}

/// Decodes a request header and bounds its payload. Returns the header and the size of the
/// payload that follows it (non-zero only for `NBD_CMD_WRITE`).
pub fn decode_request_header(bytes: &[u8; REQUEST_HEADER_SIZE_BYTES]) -> Result<(RequestHeader, u32), StreamError> {
    let magic = u32::from_be_bytes(bytes[0..4].try_into().expect("4 bytes"));
    if magic != REQUEST_MAGIC {
        return Err(StreamError::Magic { magic });
    }
    let header = RequestHeader {
        flags: u16::from_be_bytes(bytes[4..6].try_into().expect("2 bytes")),
        command: u16::from_be_bytes(bytes[6..8].try_into().expect("2 bytes")),
        handle: u64::from_be_bytes(bytes[8..16].try_into().expect("8 bytes")),
        offset_bytes: u64::from_be_bytes(bytes[16..24].try_into().expect("8 bytes")),
        length_bytes: u32::from_be_bytes(bytes[24..28].try_into().expect("4 bytes")),
    };
    if header.command != CMD_WRITE {
        return Ok((header, 0));
    }
    if header.length_bytes > PAYLOAD_SIZE_MAX_BYTES {
        return Err(StreamError::PayloadTooLarge { handle: header.handle, length_bytes: header.length_bytes });
    }
    Ok((header, header.length_bytes))
}

/// A request checked against the transmission: in range, aligned, with only the flags it may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Read { offset_bytes: u64, length_bytes: u32 },
    Write { offset_bytes: u64, length_bytes: u32 },
    Disconnect,
    Flush,
    Trim { offset_bytes: u64, length_bytes: u32 },
    Cache,
    WriteZeroes { offset_bytes: u64, length_bytes: u32, no_hole: bool },
    BlockStatus { offset_bytes: u64, length_bytes: u32, one_extent: bool },
}

/// Why a request is refused; it gets an error reply and the connection goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub errno: u32,
    pub message: String,
}

fn reject(errno: u32, message: String) -> Rejection {
    Rejection { errno, message }
}

/// Checks a request against what was negotiated and the export's size.
///
/// Past the end: `ENOSPC` for writes, `EINVAL` for the rest, as the protocol recommends.
/// Offsets and lengths must be multiples of [`BLOCK_SIZE_MIN_BYTES`]. `NBD_CMD_FLAG_FUA` is
/// accepted on every command (writes are durable when acknowledged anyway).
pub fn classify(header: &RequestHeader, transmission: &Transmission) -> Result<Command, Rejection> {
    if header.command == CMD_DISC {
        // No reply is possible, whatever the flags, offset and length.
        return Ok(Command::Disconnect);
    }
    let allowed = CMD_FLAG_FUA
        | match header.command {
            CMD_READ if transmission.structured => CMD_FLAG_DF,
            CMD_WRITE_ZEROES => CMD_FLAG_NO_HOLE,
            CMD_BLOCK_STATUS => CMD_FLAG_REQ_ONE,
            _ => 0,
        };
    let name = command_name(header.command);
    if header.flags & !allowed != 0 {
        return Err(reject(EINVAL, format!("{name} does not take command flags {:#x}", header.flags & !allowed)));
    }
    let range = || check_range(header, transmission.size_bytes, name);
    match header.command {
        CMD_READ => {
            if header.length_bytes > PAYLOAD_SIZE_MAX_BYTES {
                let message =
                    format!("read of {} bytes is over the {PAYLOAD_SIZE_MAX_BYTES}-byte limit", header.length_bytes);
                return Err(reject(EINVAL, message));
            }
            range()?;
            Ok(Command::Read { offset_bytes: header.offset_bytes, length_bytes: header.length_bytes })
        }
        CMD_WRITE => {
            range()?;
            Ok(Command::Write { offset_bytes: header.offset_bytes, length_bytes: header.length_bytes })
        }
        CMD_FLUSH => {
            if header.offset_bytes != 0 || header.length_bytes != 0 {
                return Err(reject(EINVAL, "NBD_CMD_FLUSH must have offset and length zero".to_string()));
            }
            Ok(Command::Flush)
        }
        CMD_TRIM => {
            range()?;
            Ok(Command::Trim { offset_bytes: header.offset_bytes, length_bytes: header.length_bytes })
        }
        CMD_CACHE => {
            range()?;
            Ok(Command::Cache)
        }
        CMD_WRITE_ZEROES => {
            range()?;
            Ok(Command::WriteZeroes {
                offset_bytes: header.offset_bytes,
                length_bytes: header.length_bytes,
                no_hole: header.flags & CMD_FLAG_NO_HOLE != 0,
            })
        }
        CMD_BLOCK_STATUS => {
            if !transmission.contexts.any() {
                return Err(reject(EINVAL, "NBD_CMD_BLOCK_STATUS needs a metadata context selected".to_string()));
            }
            if header.length_bytes == 0 {
                return Err(reject(EINVAL, "NBD_CMD_BLOCK_STATUS of length zero".to_string()));
            }
            range()?;
            Ok(Command::BlockStatus {
                offset_bytes: header.offset_bytes,
                length_bytes: header.length_bytes,
                one_extent: header.flags & CMD_FLAG_REQ_ONE != 0,
            })
        }
        command => Err(reject(EINVAL, format!("unknown command {command}"))),
    }
}

fn check_range(header: &RequestHeader, size_bytes: u64, name: &str) -> Result<(), Rejection> {
    let offset = header.offset_bytes;
    let length = header.length_bytes;
    let minimum = u64::from(BLOCK_SIZE_MIN_BYTES);
    if offset % minimum != 0 || u64::from(length) % minimum != 0 {
        let message =
            format!("{name} at offset_bytes={offset} length_bytes={length} is not aligned to {minimum} bytes");
        return Err(reject(EINVAL, message));
    }
    match offset.checked_add(u64::from(length)) {
        Some(end) if end <= size_bytes => Ok(()),
        _ => {
            let errno = if matches!(header.command, CMD_WRITE | CMD_WRITE_ZEROES) { ENOSPC } else { EINVAL };
            let message = format!(
                "{name} at offset_bytes={offset} length_bytes={length} ends past the export size of {size_bytes} bytes"
            );
            Err(reject(errno, message))
        }
    }
}

fn command_name(command: u16) -> &'static str {
    match command {
        CMD_READ => "NBD_CMD_READ",
        CMD_WRITE => "NBD_CMD_WRITE",
        CMD_DISC => "NBD_CMD_DISC",
        CMD_FLUSH => "NBD_CMD_FLUSH",
        CMD_TRIM => "NBD_CMD_TRIM",
        CMD_CACHE => "NBD_CMD_CACHE",
        CMD_WRITE_ZEROES => "NBD_CMD_WRITE_ZEROES",
        CMD_BLOCK_STATUS => "NBD_CMD_BLOCK_STATUS",
        _ => "an unknown command",
    }
}

/// A request taken from the input stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// A request to run; `payload` is a write's data, empty otherwise.
    Run { header: RequestHeader, command: Command, payload: Bytes },
    /// A request refused before it runs; it gets an error reply.
    Refused { header: RequestHeader, rejection: Rejection },
    /// `NBD_CMD_DISC`: no reply, read nothing more.
    Disconnect,
}

/// Takes the next complete request (header and payload) from the front of `input`, or returns
/// `None` and leaves `input` alone if it does not hold one yet. The payload shares `input`'s
/// buffer (no copy).
pub fn take_request(input: &mut BytesMut, transmission: &Transmission) -> Result<Option<Parsed>, StreamError> {
    let Some(header_bytes) = input.get(..REQUEST_HEADER_SIZE_BYTES) else {
        return Ok(None);
    };
    let header_bytes: &[u8; REQUEST_HEADER_SIZE_BYTES] = header_bytes.try_into().expect("sliced to the header size");
    let (header, payload_bytes) = decode_request_header(header_bytes)?;
    let payload_bytes = usize::try_from(payload_bytes).expect("u32 fits usize");
    if input.len() < REQUEST_HEADER_SIZE_BYTES + payload_bytes {
        return Ok(None);
    }
    input.advance(REQUEST_HEADER_SIZE_BYTES);
    let payload = input.split_to(payload_bytes).freeze();
    Ok(Some(match classify(&header, transmission) {
        Ok(Command::Disconnect) => Parsed::Disconnect,
        Ok(command) => Parsed::Run { header, command, payload },
        Err(rejection) => Parsed::Refused { header, rejection },
    }))
}

/// Bytes the front of `input` must hold before [`take_request`] can take a request (for a write
/// whose header is buffered, header and payload, bounded by the payload limit).
pub fn wanted_bytes(input: &[u8]) -> usize {
    match input.get(..REQUEST_HEADER_SIZE_BYTES) {
        Some(header) if u16::from_be_bytes([header[6], header[7]]) == CMD_WRITE => {
            let length =
                u32::from_be_bytes([header[24], header[25], header[26], header[27]]).min(PAYLOAD_SIZE_MAX_BYTES);
            REQUEST_HEADER_SIZE_BYTES + usize::try_from(length).expect("u32 fits usize")
        }
        _ => REQUEST_HEADER_SIZE_BYTES,
    }
}

/// Turns the runs of `(length_bytes, state)` an export reported for the range starting at
/// `extents_offset_bytes` into the descriptors of one context's block status reply for the
/// request `[offset, offset + length)`: cut to the request, merged where the state repeats, at
/// most [`BLOCK_STATUS_EXTENTS_MAX`] (exactly one with `one_extent`). An empty run ends the
/// walk. Always returns at least one descriptor: with nothing usable, the whole request in
/// `fallback_state`, which must be the state that is always correct (data, changed).
pub fn block_status_descriptors(
    extents: &[(u64, u32)],
    fallback_state: u32,
    extents_offset_bytes: u64,
    offset_bytes: u64,
    length_bytes: u32,
    one_extent: bool,
) -> Vec<(u32, u32)> {
    let request_end = offset_bytes.saturating_add(u64::from(length_bytes));
    let limit = if one_extent { 1 } else { BLOCK_STATUS_EXTENTS_MAX };
    let mut descriptors: Vec<(u32, u32)> = Vec::new();
    let mut position = extents_offset_bytes;
    for &(extent_length_bytes, state) in extents {
        if extent_length_bytes == 0 || position >= request_end {
            break;
        }
        let extent_end = position.saturating_add(extent_length_bytes);
        let start = position.max(offset_bytes);
        let end = extent_end.min(request_end);
        position = extent_end;
        if start >= end {
            continue;
        }
        let length = u32::try_from(end - start).expect("a cut extent is no longer than the request");
        if let Some(last) = descriptors.last_mut().filter(|last| last.1 == state) {
            last.0 += length;
        } else if descriptors.len() == limit {
            break;
        } else {
            descriptors.push((length, state));
        }
    }
    if descriptors.is_empty() {
        descriptors.push((length_bytes, fallback_state));
    }
    descriptors
}

/// Appends a simple reply header (a read's data follows it separately).
pub fn put_simple_reply(out: &mut BytesMut, handle: u64, errno: u32) {
    out.put_u32(SIMPLE_REPLY_MAGIC);
    out.put_u32(errno);
    out.put_u64(handle);
}

/// Appends a structured reply chunk header.
pub fn put_chunk_header(out: &mut BytesMut, handle: u64, flags: u16, reply_type: u16, length_bytes: u32) {
    out.put_u32(STRUCTURED_REPLY_MAGIC);
    out.put_u16(flags);
    out.put_u16(reply_type);
    out.put_u64(handle);
    out.put_u32(length_bytes);
}

/// Appends the final `NBD_REPLY_TYPE_NONE` chunk.
pub fn put_done(out: &mut BytesMut, handle: u64) {
    put_chunk_header(out, handle, REPLY_FLAG_DONE, REPLY_TYPE_NONE, 0);
}

/// Appends the header of a final `NBD_REPLY_TYPE_OFFSET_DATA` chunk; `data_length_bytes` bytes
/// of data must follow it.
pub fn put_data_header(out: &mut BytesMut, handle: u64, offset_bytes: u64, data_length_bytes: u32) {
    assert!(data_length_bytes <= PAYLOAD_SIZE_MAX_BYTES);
    put_chunk_header(out, handle, REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, data_length_bytes + 8);
    out.put_u64(offset_bytes);
}

/// Appends a final `NBD_REPLY_TYPE_ERROR` chunk with a message.
pub fn put_error_chunk(out: &mut BytesMut, handle: u64, errno: u32, message: &str) {
    assert_ne!(errno, 0);
    let message = truncate(message);
    let message_length = u16::try_from(message.len()).expect("messages are at most 4096 bytes");
    put_chunk_header(out, handle, REPLY_FLAG_DONE, REPLY_TYPE_ERROR, 6 + u32::from(message_length));
    out.put_u32(errno);
    out.put_u16(message_length);
    out.put_slice(message.as_bytes());
}

/// Appends an `NBD_REPLY_TYPE_BLOCK_STATUS` chunk for the context `context_id`, the final
/// chunk of the reply if `last`.
pub fn put_block_status(out: &mut BytesMut, handle: u64, context_id: u32, descriptors: &[(u32, u32)], last: bool) {
    assert!(!descriptors.is_empty());
    assert!(descriptors.len() <= BLOCK_STATUS_EXTENTS_MAX);
    let length = u32::try_from(4 + 8 * descriptors.len()).expect("bounded by BLOCK_STATUS_EXTENTS_MAX");
    let flags = if last { REPLY_FLAG_DONE } else { 0 };
    put_chunk_header(out, handle, flags, REPLY_TYPE_BLOCK_STATUS, length);
    out.put_u32(context_id);
    for &(length_bytes, state) in descriptors {
        assert_ne!(length_bytes, 0);
        out.put_u32(length_bytes);
        out.put_u32(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::MetaContexts;

    fn transmission() -> Transmission {
        Transmission {
            export_name: "vol".to_string(),
            size_bytes: 1 << 20,
            flags: 0,
            structured: true,
            contexts: MetaContexts { base_allocation: true, dirty_bitmap: None },
        }
    }

    fn header(command: u16, flags: u16, offset_bytes: u64, length_bytes: u32) -> RequestHeader {
        RequestHeader { flags, command, handle: 7, offset_bytes, length_bytes }
    }

    /// Classifies a request against `transmission()` and checks the result (`Err` holds the errno).
    fn check(request: RequestHeader, expect: Result<Command, u32>) {
        assert_eq!(classify(&request, &transmission()).map_err(|rejection| rejection.errno), expect);
    }

    #[test]
    fn requests_classify() {
        let size = 1u64 << 20;
        check(header(CMD_READ, 0, 512, 1024), Ok(Command::Read { offset_bytes: 512, length_bytes: 1024 }));
        check(
            header(CMD_READ, CMD_FLAG_DF | CMD_FLAG_FUA, 0, 4096),
            Ok(Command::Read { offset_bytes: 0, length_bytes: 4096 }),
        );
        check(header(CMD_READ, 0, size - 4096, 8192), Err(EINVAL));
        check(header(CMD_READ, 0, u64::MAX - 511, 4096), Err(EINVAL));
        check(header(CMD_READ, 0, 100, 512), Err(EINVAL));
        check(header(CMD_READ, 0, 0, PAYLOAD_SIZE_MAX_BYTES + 512), Err(EINVAL));
        check(
            header(CMD_WRITE, CMD_FLAG_FUA, size - 512, 512),
            Ok(Command::Write { offset_bytes: size - 512, length_bytes: 512 }),
        );
        check(header(CMD_WRITE, 0, size, 512), Err(ENOSPC));
        check(header(CMD_WRITE, CMD_FLAG_NO_HOLE, 0, 512), Err(EINVAL));
        check(header(CMD_WRITE_ZEROES, 0, size, 4096), Err(ENOSPC));
        check(
            header(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, 0, 4096),
            Ok(Command::WriteZeroes { offset_bytes: 0, length_bytes: 4096, no_hole: true }),
        );
        check(header(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 0, 4096), Err(EINVAL));
        check(header(CMD_FLUSH, 0, 0, 0), Ok(Command::Flush));
        check(header(CMD_FLUSH, 0, 4096, 0), Err(EINVAL));
        check(header(CMD_TRIM, CMD_FLAG_FUA, 0, 4096), Ok(Command::Trim { offset_bytes: 0, length_bytes: 4096 }));
        check(header(CMD_CACHE, 0, 0, 4096), Ok(Command::Cache));
        check(header(CMD_DISC, 0, 0, 0), Ok(Command::Disconnect));
        check(
            header(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, 0, 4096),
            Ok(Command::BlockStatus { offset_bytes: 0, length_bytes: 4096, one_extent: true }),
        );
        check(header(CMD_BLOCK_STATUS, 0, 0, 0), Err(EINVAL));
        check(header(99, 0, 0, 0), Err(EINVAL));
    }

    #[test]
    fn negotiation_limits_commands() {
        let plain = Transmission { structured: false, contexts: MetaContexts::default(), ..transmission() };
        let refused = |request: RequestHeader| classify(&request, &plain).unwrap_err().errno;
        assert_eq!(refused(header(CMD_READ, CMD_FLAG_DF, 0, 4096)), EINVAL);
        assert_eq!(refused(header(CMD_BLOCK_STATUS, 0, 0, 4096)), EINVAL);
    }

    #[test]
    fn headers_decode() {
        let mut bytes = [0u8; REQUEST_HEADER_SIZE_BYTES];
        bytes[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        bytes[6..8].copy_from_slice(&CMD_WRITE.to_be_bytes());
        bytes[24..28].copy_from_slice(&4096u32.to_be_bytes());
        let (decoded, payload) = decode_request_header(&bytes).unwrap();
        assert_eq!(decoded.command, CMD_WRITE);
        assert_eq!(payload, 4096);
        bytes[24..28].copy_from_slice(&(PAYLOAD_SIZE_MAX_BYTES + 1).to_be_bytes());
        assert!(matches!(decode_request_header(&bytes), Err(StreamError::PayloadTooLarge { .. })));
        bytes[6..8].copy_from_slice(&CMD_READ.to_be_bytes());
        assert_eq!(decode_request_header(&bytes).unwrap().1, 0);
        bytes[0] = 0;
        assert!(matches!(decode_request_header(&bytes), Err(StreamError::Magic { .. })));
    }

    fn extent(length_bytes: u64, hole: bool) -> (u64, u32) {
        let extent = crate::export::Extent { length_bytes, hole };
        (extent.length_bytes, extent.state())
    }

    const HOLE: u32 = STATE_HOLE | STATE_ZERO;

    #[test]
    fn descriptors_are_cut_and_merged() {
        let extents = [extent(4096, false), extent(4096, false), extent(8192, true), extent(4096, false)];
        // The request starts and ends inside extents, 512-aligned.
        assert_eq!(block_status_descriptors(&extents, 0, 0, 512, 12 * 1024, false), vec![(7680, 0), (4608, HOLE)]);
        assert_eq!(block_status_descriptors(&extents, 0, 0, 512, 12 * 1024, true), vec![(7680, 0)]);
        assert_eq!(
            block_status_descriptors(&extents, 0, 0, 0, 20 * 1024, false),
            vec![(8192, 0), (8192, HOLE), (4096, 0)]
        );
        // Extents that stop short are reported as far as they go.
        assert_eq!(block_status_descriptors(&extents[..1], 0, 0, 0, 20 * 1024, false), vec![(4096, 0)]);
        // Nothing usable: the whole request as data.
        assert_eq!(block_status_descriptors(&[], 0, 0, 0, 4096, false), vec![(4096, 0)]);
        assert_eq!(block_status_descriptors(&[extent(0, true)], 0, 0, 0, 4096, false), vec![(4096, 0)]);
        assert_eq!(block_status_descriptors(&extents, 0, 0, 1 << 20, 4096, false), vec![(4096, 0)]);
        // A dirty bitmap's fallback is changed.
        assert_eq!(block_status_descriptors(&[], STATE_DIRTY, 0, 0, 4096, false), vec![(4096, STATE_DIRTY)]);
    }

    #[test]
    fn descriptors_are_bounded() {
        let extents: Vec<(u64, u32)> = (0..3000).map(|index| extent(4096, index % 2 == 0)).collect();
        let descriptors = block_status_descriptors(&extents, 0, 0, 0, 3000 * 4096, false);
        assert_eq!(descriptors.len(), BLOCK_STATUS_EXTENTS_MAX);
    }

    #[test]
    fn error_chunk_layout() {
        let mut out = BytesMut::new();
        put_error_chunk(&mut out, 9, EIO, "bad");
        assert_eq!(out.len(), STRUCTURED_REPLY_HEADER_SIZE_BYTES + 6 + 3);
        assert_eq!(&out[16..20], &9u32.to_be_bytes());
        assert_eq!(&out[20..24], &EIO.to_be_bytes());
        assert_eq!(&out[24..26], &3u16.to_be_bytes());
    }
}
