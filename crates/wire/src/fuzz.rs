//! The body of the `wire_decode` fuzz target (`fuzz/fuzz_targets/wire_decode.rs`), here so a unit
//! test can run the same checks on random inputs without cargo-fuzz.
//!
//! Input layout: byte 0 holds options, bytes 1..9 seed the chunk sizes, the rest is the stream.
//! Options: bit 0 reseals the stream (walks it as frames by their payload size fields and rewrites
//! both checksums, so mutations reach the body decoders instead of dying at a checksum); bit 1
//! also writes the magic and version while resealing; bit 2 decodes with a 4 KiB payload limit.
//!
//! Checked for every input: decoding never panics; the stream splits into frames the same way
//! whatever the chunking; re-encoding the decoded frames reproduces the consumed bytes exactly (the
//! encoding is canonical, so decode-then-encode is the identity); the re-encoded bytes decode to
//! the same frames in one chunk; an error is sticky; `finish` reports a partial frame.

use crate::header::offset as field_offset;
use crate::header::{reseal, HEADER_SIZE_BYTES, MAGIC, PROTOCOL_VERSION};
use crate::{DecodeError, Decoder, Frame};

const OPTION_RESEAL: u8 = 1 << 0;
const OPTION_MAGIC: u8 = 1 << 1;
const OPTION_SMALL_LIMIT: u8 = 1 << 2;
const SMALL_PAYLOAD_SIZE_MAX_BYTES: u32 = 4096;

/// What one input decoded to, for tests that measure what the inputs reach.
#[derive(Debug)]
pub struct Outcome {
    pub frames: Vec<Frame>,
    /// The decode error, or the `finish` error when the stream ended inside a frame.
    pub error: Option<DecodeError>,
}

/// Runs every check on one input. Panics when a property fails.
pub fn decode_stream(input: &[u8]) -> Outcome {
    let (options, seed, stream) = if input.len() >= 9 {
        let mut seed = [0u8; 8];
        seed.copy_from_slice(&input[1..9]);
        (input[0], u64::from_le_bytes(seed), &input[9..])
    } else {
        (0, 0, input)
    };
    let mut stream = stream.to_vec();
    if options & OPTION_RESEAL != 0 {
        reseal_stream(&mut stream, options & OPTION_MAGIC != 0);
    }
    let payload_size_max_bytes = if options & OPTION_SMALL_LIMIT != 0 {
        SMALL_PAYLOAD_SIZE_MAX_BYTES
    } else {
        crate::limits::PAYLOAD_SIZE_MAX_BYTES
    };

    let mut decoder = Decoder::new(payload_size_max_bytes);
    let mut frames = Vec::new();
    let mut error = None;
    let chunks = Chunks { rng: seed | 1, rest: &stream };
    'feed: for chunk in chunks {
        decoder.feed(chunk);
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => break,
                Err(decode_error) => {
                    error = Some(decode_error);
                    break 'feed;
                }
            }
        }
    }

    let mut encoded = Vec::new();
    for frame in &frames {
        let size_before = encoded.len();
        frame.encode(&mut encoded);
        assert_eq!(encoded.len() - size_before, frame.encoded_size_bytes());
    }
    assert!(stream.starts_with(&encoded), "re-encoding the decoded frames must reproduce the stream");

    match &error {
        Some(error) => {
            decoder.feed(&stream);
            assert_eq!(decoder.buffered_bytes(), 0);
            assert_eq!(decoder.next_frame().as_ref(), Err(error));
            assert_eq!(decoder.finish().as_ref(), Err(error));
        }
        None => {
            let buffered_bytes = stream.len() - encoded.len();
            assert_eq!(decoder.buffered_bytes(), buffered_bytes);
            let expected = if buffered_bytes == 0 { Ok(()) } else { Err(DecodeError::Truncated { buffered_bytes }) };
            assert_eq!(decoder.finish(), expected);
            error = expected.err();
        }
    }

    let mut again = Decoder::new(payload_size_max_bytes);
    again.feed(&encoded);
    for frame in &frames {
        assert_eq!(again.next_frame().as_ref(), Ok(&Some(frame.clone())));
    }
    assert_eq!(again.next_frame(), Ok(None));
    assert_eq!(again.finish(), Ok(()));
    Outcome { frames, error }
}

/// Makes the stream's frame boundaries (as its payload size fields place them) carry valid
/// checksums. The last frame's payload size is cut to the bytes that remain.
fn reseal_stream(stream: &mut [u8], write_magic: bool) {
    let mut start = 0;
    while stream.len() - start >= HEADER_SIZE_BYTES {
        let header = &mut stream[start..start + HEADER_SIZE_BYTES];
        if write_magic {
            header[field_offset::MAGIC..field_offset::MAGIC + 4].copy_from_slice(&MAGIC.to_le_bytes());
            header[field_offset::VERSION..field_offset::VERSION + 2].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        }
        let mut size = [0u8; 4];
        size.copy_from_slice(&header[field_offset::PAYLOAD_SIZE..field_offset::PAYLOAD_SIZE + 4]);
        let remaining_bytes = stream.len() - start - HEADER_SIZE_BYTES;
        let payload_size_bytes = (u32::from_le_bytes(size) as usize).min(remaining_bytes);
        let end = start + HEADER_SIZE_BYTES + payload_size_bytes;
        reseal(&mut stream[start..end]);
        start = end;
    }
}

/// Cuts a stream into chunks of pseudo-random sizes: single bytes, small pieces, large pieces,
/// and sometimes everything that is left.
struct Chunks<'a> {
    rng: u64,
    rest: &'a [u8],
}

impl<'a> Iterator for Chunks<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.rest.is_empty() {
            return None;
        }
        // xorshift64: deterministic and dependency-free.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let random = (self.rng >> 8) as usize;
        let size = match self.rng % 8 {
            0 => self.rest.len(),
            1 => 1,
            2..=4 => 1 + random % 16,
            _ => 1 + random % 1024,
        };
        let (chunk, rest) = self.rest.split_at(size.min(self.rest.len()));
        self.rest = rest;
        Some(chunk)
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeMap;

    use super::*;
    use crate::testing::{encode, sample_frames};

    /// Runs the fuzz target's body on random inputs: random bytes, and streams of valid frames
    /// with random damage (byte flips, cuts, insertions), resealed or not.
    #[test]
    fn fuzz_body_on_random_inputs() {
        let samples: Vec<Vec<u8>> = sample_frames().iter().map(encode).collect();
        let mut rng = SmallRng::seed_from_u64(0x5eed_f00d);
        let mut frames_count = 0;
        let mut errors = BTreeMap::new();
        for _ in 0..100_000 {
            let mut input = vec![rng.gen::<u8>()];
            input.extend_from_slice(&rng.gen::<u64>().to_le_bytes());
            if rng.gen_ratio(1, 4) {
                let size_bytes = rng.gen_range(0..400);
                input.extend((0..size_bytes).map(|_| rng.gen::<u8>()));
            } else {
                for _ in 0..rng.gen_range(1..5) {
                    input.extend_from_slice(&samples[rng.gen_range(0..samples.len())]);
                }
                for _ in 0..rng.gen_range(0..4) {
                    if input.len() <= 9 {
                        break;
                    }
                    let at = rng.gen_range(9..input.len());
                    match rng.gen_range(0..4) {
                        0 => input[at] ^= 1 << rng.gen_range(0..8),
                        1 => input[at] = rng.gen(),
                        2 => input.truncate(at),
                        _ => input.insert(at, rng.gen()),
                    }
                }
            }
            let outcome = decode_stream(&input);
            frames_count += outcome.frames.len();
            if let Some(error) = outcome.error {
                let name = format!("{error:?}");
                let name = name.split([' ', '{']).next().unwrap_or_default().to_string();
                *errors.entry(name).or_insert(0u32) += 1;
            }
        }
        // The inputs reach deep: many whole frames decode, and every kind of error occurs.
        assert!(frames_count > 50_000, "only {frames_count} frames decoded");
        let names: Vec<&str> = errors.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "BadMagic",
                "BodyTooShort",
                "HeaderChecksum",
                "PayloadChecksum",
                "PayloadTooLarge",
                "ReservedNotZero",
                "StatusInRequest",
                "TrailingBytes",
                "Truncated",
                "UnknownFlags",
                "UnknownOpcode",
                "UnknownStatus",
                "UnsupportedVersion",
            ],
            "error counts: {errors:?}"
        );
    }

    #[test]
    fn fuzz_body_handles_short_inputs() {
        for size_bytes in 0..=HEADER_SIZE_BYTES + 10 {
            decode_stream(&vec![0xff; size_bytes]);
            decode_stream(&vec![0x03; size_bytes]);
        }
    }
}
