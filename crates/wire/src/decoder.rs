//! `Decoder`: turns a byte stream, arriving in chunks of any size, into frames.
//!
//! The decoder owns one receive buffer. The header of the next frame is verified as soon as its
//! 48 bytes are buffered (and its magic and version as soon as their bytes are), so a hostile or
//! confused peer is refused before its payload is buffered. A complete frame is split off the
//! buffer without copying, and its data are slices of that split.
//!
//! Error policy: every `DecodeError` is fatal for the connection. After one, the decoder drops all
//! input and returns the same error forever; the caller closes the connection (optionally after
//! one `Status::ProtocolError` reply when `DecodeError::request_id` names the frame).

use bytes::BytesMut;

use crate::error::DecodeError;
use crate::frame::Frame;
use crate::header::{check_prefix, Header, HEADER_SIZE_BYTES};
use crate::limits::PAYLOAD_SIZE_MAX_BYTES;

#[derive(Debug)]
pub struct Decoder {
    buffer: BytesMut,
    payload_size_max_bytes: u32,
    /// The verified header of the frame at the front of `buffer`, once its bytes have arrived.
    header: Option<Header>,
    /// Set by the first error; the decoder is dead from then on.
    error: Option<DecodeError>,
}

impl Default for Decoder {
    /// A decoder with the protocol's payload limit, `limits::PAYLOAD_SIZE_MAX_BYTES`.
    fn default() -> Decoder {
        Decoder::new(PAYLOAD_SIZE_MAX_BYTES)
    }
}

impl Decoder {
    /// A decoder that refuses any frame whose payload exceeds `payload_size_max_bytes`.
    ///
    /// # Panics
    ///
    /// If `payload_size_max_bytes` exceeds `limits::PAYLOAD_SIZE_MAX_BYTES`: every frame a decoder
    /// accepts must be one the encoder can produce.
    pub fn new(payload_size_max_bytes: u32) -> Decoder {
        assert!(payload_size_max_bytes <= PAYLOAD_SIZE_MAX_BYTES);
        Decoder { buffer: BytesMut::new(), payload_size_max_bytes, header: None, error: None }
    }

    pub fn payload_size_max_bytes(&self) -> u32 {
        self.payload_size_max_bytes
    }

    /// Appends received bytes. Ignored after an error.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.error.is_none() {
            self.buffer.extend_from_slice(bytes);
        }
    }

    /// The next complete frame: `Ok(None)` when more bytes are needed, `Err` when the stream is
    /// invalid (and from then on). Call it until it returns `Ok(None)` after each `feed`.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, DecodeError> {
        if let Some(error) = &self.error {
            return Err(error.clone());
        }
        let result = self.decode_next();
        if let Err(error) = &result {
            self.error = Some(error.clone());
            self.buffer = BytesMut::new();
            self.header = None;
        }
        result
    }

    /// Bytes received but not yet returned as frames.
    pub fn buffered_bytes(&self) -> usize {
        self.buffer.len()
    }

    /// Call when the peer closed the stream: fails if the stream ended inside a frame (or had
    /// failed before).
    pub fn finish(&self) -> Result<(), DecodeError> {
        if let Some(error) = &self.error {
            return Err(error.clone());
        }
        if !self.buffer.is_empty() {
            return Err(DecodeError::Truncated { buffered_bytes: self.buffer.len() });
        }
        Ok(())
    }

    fn decode_next(&mut self) -> Result<Option<Frame>, DecodeError> {
        let header = match self.header {
            Some(header) => header,
            None => {
                if self.buffer.len() < HEADER_SIZE_BYTES {
                    check_prefix(&self.buffer)?;
                    return Ok(None);
                }
                let mut header_bytes = [0u8; HEADER_SIZE_BYTES];
                header_bytes.copy_from_slice(&self.buffer[..HEADER_SIZE_BYTES]);
                let header = Header::decode(&header_bytes, self.payload_size_max_bytes)?;
                self.header = Some(header);
                header
            }
        };
        // Cannot overflow: the payload size was checked against a `u32` limit.
        let frame_size_bytes = HEADER_SIZE_BYTES + header.payload_size_bytes as usize;
        if self.buffer.len() < frame_size_bytes {
            // No reservation for the rest of the frame: the buffer grows only as bytes arrive, so a
            // header alone cannot make the decoder allocate the payload limit.
            return Ok(None);
        }
        self.header = None;
        let frame_bytes = self.buffer.split_to(frame_size_bytes).freeze();
        Frame::decode_payload(&header, frame_bytes.slice(HEADER_SIZE_BYTES..)).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::request_fields_size_bytes;
    use crate::header::offset as field_offset;
    use crate::header::{header_crc32c, reseal, FLAG_REPLY};
    use crate::testing::{encode, sample_frames};
    use crate::{BodyKind, Opcode, Response, Status};

    /// Decodes `input` fed whole and fed one byte at a time. Both must yield the same frames and
    /// end the same way: `Ok(())` when every byte formed whole frames, otherwise the error.
    fn check(input: &[u8], payload_size_max_bytes: u32, expect: Result<(), DecodeError>) -> Vec<Frame> {
        let whole = decode_all(std::iter::once(input), payload_size_max_bytes);
        let bytewise = decode_all(input.chunks(1), payload_size_max_bytes);
        assert_eq!(whole, bytewise);
        assert_eq!(whole.1, expect);
        whole.0
    }

    fn decode_all<'a>(
        chunks: impl Iterator<Item = &'a [u8]>,
        payload_size_max_bytes: u32,
    ) -> (Vec<Frame>, Result<(), DecodeError>) {
        let mut decoder = Decoder::new(payload_size_max_bytes);
        let mut frames = Vec::new();
        for chunk in chunks {
            decoder.feed(chunk);
            loop {
                match decoder.next_frame() {
                    Ok(Some(frame)) => frames.push(frame),
                    Ok(None) => break,
                    Err(error) => {
                        // Sticky: more input changes nothing.
                        decoder.feed(&encode(&sample_frames()[0]));
                        assert_eq!(decoder.buffered_bytes(), 0);
                        assert_eq!(decoder.next_frame().as_ref(), Err(&error));
                        assert_eq!(decoder.finish().as_ref(), Err(&error));
                        return (frames, Err(error));
                    }
                }
            }
        }
        (frames, decoder.finish())
    }

    fn sample(opcode: Opcode, reply: bool) -> Vec<u8> {
        let frame = sample_frames()
            .into_iter()
            .find(|frame| {
                frame.opcode() == opcode
                    && frame.is_reply() == reply
                    && !matches!(frame.body, crate::Body::Response(Response::Failed { .. }))
            })
            .expect("a sample of every opcode");
        encode(&frame)
    }

    fn set(bytes: &mut [u8], at: usize, value: &[u8]) {
        bytes[at..at + value.len()].copy_from_slice(value);
    }

    fn request_id(bytes: &[u8]) -> u64 {
        u64::from_le_bytes(bytes[field_offset::REQUEST_ID..field_offset::REQUEST_ID + 8].try_into().unwrap())
    }

    const LIMIT: u32 = PAYLOAD_SIZE_MAX_BYTES;

    #[test]
    fn samples_decode_alone_and_concatenated() {
        let frames = sample_frames();
        let mut stream = Vec::new();
        for frame in &frames {
            assert_eq!(check(&encode(frame), LIMIT, Ok(())), vec![frame.clone()]);
            frame.encode(&mut stream);
        }
        assert_eq!(check(&stream, LIMIT, Ok(())), frames);
        assert_eq!(check(&[], LIMIT, Ok(())), vec![]);
    }

    #[test]
    fn bad_magic() {
        let mut bytes = sample(Opcode::Ping, false);
        bytes[0] = b'X';
        check(&bytes, LIMIT, Err(DecodeError::BadMagic { magic: u32::from_le_bytes(*b"XSLW") }));
        // Refused from its first four bytes, before a whole header arrives.
        check(b"GET / HTTP/1.1", LIMIT, Err(DecodeError::BadMagic { magic: u32::from_le_bytes(*b"GET ") }));
    }

    #[test]
    fn unsupported_version() {
        for version in [0u16, 1, 2, 3, 5, u16::MAX] {
            let mut bytes = sample(Opcode::Read, false);
            set(&mut bytes, field_offset::VERSION, &version.to_le_bytes());
            check(&bytes, LIMIT, Err(DecodeError::UnsupportedVersion { version }));
            check(&bytes[..6], LIMIT, Err(DecodeError::UnsupportedVersion { version }));
        }
    }

    #[test]
    fn header_checksum() {
        let original = sample(Opcode::Write, false);
        for at in
            [field_offset::OPCODE, field_offset::PAYLOAD_SIZE, field_offset::EPOCH + 7, field_offset::HEADER_CRC32C]
        {
            let mut bytes = original.clone();
            bytes[at] ^= 0x10;
            let header: [u8; HEADER_SIZE_BYTES] = bytes[..HEADER_SIZE_BYTES].try_into().unwrap();
            let expected = u32::from_le_bytes(header[44..].try_into().unwrap());
            check(&bytes, LIMIT, Err(DecodeError::HeaderChecksum { expected, actual: header_crc32c(&header) }));
        }
    }

    #[test]
    fn reserved_not_zero() {
        let mut bytes = sample(Opcode::Flush, false);
        set(&mut bytes, field_offset::RESERVED, &7u32.to_le_bytes());
        reseal(&mut bytes);
        check(&bytes, LIMIT, Err(DecodeError::ReservedNotZero { request_id: request_id(&bytes), value: 7 }));
    }

    #[test]
    fn unknown_flags() {
        for flags in [2u32, FLAG_REPLY | 1 << 31] {
            let mut bytes = sample(Opcode::Flush, true);
            set(&mut bytes, field_offset::FLAGS, &flags.to_le_bytes());
            reseal(&mut bytes);
            check(&bytes, LIMIT, Err(DecodeError::UnknownFlags { request_id: request_id(&bytes), flags }));
        }
    }

    #[test]
    fn unknown_opcode() {
        for opcode in [0u16, 9, 15, 40, u16::MAX] {
            let mut bytes = sample(Opcode::Ping, false);
            set(&mut bytes, field_offset::OPCODE, &opcode.to_le_bytes());
            reseal(&mut bytes);
            check(&bytes, LIMIT, Err(DecodeError::UnknownOpcode { request_id: request_id(&bytes), opcode }));
        }
    }

    #[test]
    fn unknown_status() {
        for status in [15u32, 0x100, u32::MAX] {
            let mut bytes = sample(Opcode::Ping, true);
            set(&mut bytes, field_offset::STATUS, &status.to_le_bytes());
            reseal(&mut bytes);
            check(&bytes, LIMIT, Err(DecodeError::UnknownStatus { request_id: request_id(&bytes), status }));
        }
    }

    #[test]
    fn status_in_request() {
        for status in [Status::WrongEpoch.as_u32(), 14] {
            let mut bytes = sample(Opcode::Read, false);
            set(&mut bytes, field_offset::STATUS, &status.to_le_bytes());
            reseal(&mut bytes);
            check(&bytes, LIMIT, Err(DecodeError::StatusInRequest { request_id: request_id(&bytes), status }));
        }
    }

    #[test]
    fn payload_too_large() {
        let bytes = sample(Opcode::Write, false);
        let payload_size_bytes = (bytes.len() - HEADER_SIZE_BYTES) as u32;
        let expect = DecodeError::PayloadTooLarge {
            request_id: request_id(&bytes),
            payload_size_bytes,
            payload_size_max_bytes: payload_size_bytes - 1,
        };
        check(&bytes, payload_size_bytes - 1, Err(expect.clone()));
        // Refused from the header alone, before the payload is buffered.
        check(&bytes[..HEADER_SIZE_BYTES], payload_size_bytes - 1, Err(expect));
        check(&bytes, payload_size_bytes, Ok(()));
    }

    #[test]
    fn payload_checksum() {
        let mut bytes = sample(Opcode::SecWrite, false);
        let header: [u8; HEADER_SIZE_BYTES] = bytes[..HEADER_SIZE_BYTES].try_into().unwrap();
        let expected = u32::from_le_bytes(header[field_offset::PAYLOAD_CRC32C..][..4].try_into().unwrap());
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let actual = crc32c::crc32c(&bytes[HEADER_SIZE_BYTES..]);
        check(&bytes, LIMIT, Err(DecodeError::PayloadChecksum { request_id: request_id(&bytes), expected, actual }));
    }

    #[test]
    fn request_body_too_short() {
        for opcode in Opcode::ALL {
            let size_min_bytes = request_fields_size_bytes(opcode);
            if size_min_bytes == 0 {
                continue;
            }
            let mut bytes = sample(opcode, false);
            bytes.truncate(HEADER_SIZE_BYTES + size_min_bytes - 1);
            reseal(&mut bytes);
            let expect = DecodeError::BodyTooShort {
                request_id: request_id(&bytes),
                opcode,
                kind: BodyKind::Request,
                size_bytes: size_min_bytes as u64 - 1,
                size_min_bytes: size_min_bytes as u64,
            };
            check(&bytes, LIMIT, Err(expect));
        }
    }

    #[test]
    fn reply_body_too_short() {
        for (opcode, size_min_bytes) in [
            (Opcode::SecRead, 16u64),
            (Opcode::ObjectInfo, 20),
            (Opcode::SecList, 4),
            (Opcode::Stat, 8),
            (Opcode::Changes, 8),
            (Opcode::Flatten, 24),
        ] {
            let mut bytes = sample(opcode, true);
            bytes.truncate(HEADER_SIZE_BYTES + size_min_bytes as usize - 1);
            reseal(&mut bytes);
            let expect = DecodeError::BodyTooShort {
                request_id: request_id(&bytes),
                opcode,
                kind: BodyKind::Reply,
                size_bytes: size_min_bytes - 1,
                size_min_bytes,
            };
            check(&bytes, LIMIT, Err(expect));
        }
    }

    #[test]
    fn sec_list_count_must_match_the_entries() {
        // The sample has 5 entries.
        for (count, expect_short) in [(6u32, true), (u32::MAX, true), (4, false), (0, false)] {
            let mut bytes = sample(Opcode::SecList, true);
            set(&mut bytes, HEADER_SIZE_BYTES, &count.to_le_bytes());
            reseal(&mut bytes);
            let expect = if expect_short {
                DecodeError::BodyTooShort {
                    request_id: request_id(&bytes),
                    opcode: Opcode::SecList,
                    kind: BodyKind::Reply,
                    size_bytes: 4 + 5 * 24,
                    size_min_bytes: 4 + u64::from(count) * 24,
                }
            } else {
                DecodeError::TrailingBytes {
                    request_id: request_id(&bytes),
                    opcode: Opcode::SecList,
                    kind: BodyKind::Reply,
                    trailing_bytes: u64::from(5 - count) * 24,
                }
            };
            check(&bytes, LIMIT, Err(expect));
        }
    }

    #[test]
    fn trailing_bytes() {
        let with_data = [
            (Opcode::Write, false),
            (Opcode::SecWrite, false),
            (Opcode::SecWritePages, false),
            (Opcode::SecReplace, false),
            (Opcode::Read, true),
            (Opcode::SecRead, true),
        ];
        for opcode in Opcode::ALL {
            for reply in [false, true] {
                if with_data.contains(&(opcode, reply)) {
                    continue;
                }
                let mut bytes = sample(opcode, reply);
                bytes.extend_from_slice(&[0, 0, 0]);
                reseal(&mut bytes);
                let kind = if reply { BodyKind::Reply } else { BodyKind::Request };
                let expect =
                    DecodeError::TrailingBytes { request_id: request_id(&bytes), opcode, kind, trailing_bytes: 3 };
                check(&bytes, LIMIT, Err(expect));
            }
        }
    }

    #[test]
    fn error_reply_body_must_be_empty() {
        let failed = Frame::response(5, 6, Response::Failed { opcode: Opcode::Write, status: Status::NoSpace });
        let mut bytes = encode(&failed);
        assert_eq!(bytes.len(), HEADER_SIZE_BYTES);
        assert_eq!(check(&bytes, LIMIT, Ok(())), vec![failed]);
        bytes.push(0);
        reseal(&mut bytes);
        let expect = DecodeError::TrailingBytes {
            request_id: 5,
            opcode: Opcode::Write,
            kind: BodyKind::ErrorReply,
            trailing_bytes: 1,
        };
        check(&bytes, LIMIT, Err(expect));
    }

    #[test]
    fn a_newer_version_reply_carries_exactly_the_version() {
        let refused = Frame::response(5, 6, Response::NewerVersionHeld { opcode: Opcode::SecWrite, current: 77 });
        let mut bytes = encode(&refused);
        assert_eq!(bytes.len(), HEADER_SIZE_BYTES + 8);
        assert_eq!(check(&bytes, LIMIT, Ok(())), vec![refused]);
        // Without its version the body is too short; an empty one is refused, not read as zero.
        bytes.truncate(HEADER_SIZE_BYTES);
        set(&mut bytes, field_offset::PAYLOAD_SIZE, &0u32.to_le_bytes());
        reseal(&mut bytes);
        let expect = DecodeError::BodyTooShort {
            request_id: 5,
            opcode: Opcode::SecWrite,
            kind: BodyKind::ErrorReply,
            size_bytes: 0,
            size_min_bytes: 8,
        };
        check(&bytes, LIMIT, Err(expect));
    }

    #[test]
    fn truncated_stream() {
        let bytes = sample(Opcode::SecWrite, false);
        for size_bytes in [1, 4, HEADER_SIZE_BYTES - 1, HEADER_SIZE_BYTES, bytes.len() - 1] {
            check(&bytes[..size_bytes], LIMIT, Err(DecodeError::Truncated { buffered_bytes: size_bytes }));
        }
    }

    #[test]
    fn frames_before_an_error_are_delivered() {
        let first = sample_frames()[0].clone();
        let mut bytes = encode(&first);
        let mut bad = sample(Opcode::Ping, false);
        bad[HEADER_SIZE_BYTES - 1] ^= 1;
        bytes.extend_from_slice(&bad);
        let header: [u8; HEADER_SIZE_BYTES] = bad[..HEADER_SIZE_BYTES].try_into().unwrap();
        let expected = u32::from_le_bytes(header[44..].try_into().unwrap());
        let expect = DecodeError::HeaderChecksum { expected, actual: header_crc32c(&header) };
        assert_eq!(check(&bytes, LIMIT, Err(expect)), vec![first]);
    }

    #[test]
    #[should_panic]
    fn limit_above_the_protocol_limit_is_a_bug() {
        Decoder::new(PAYLOAD_SIZE_MAX_BYTES + 1);
    }
}
