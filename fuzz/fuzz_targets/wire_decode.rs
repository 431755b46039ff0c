//! Fuzz target: arbitrary bytes, cut into arbitrary chunks, through the wire `Decoder`.
//!
//! The body lives in `wire::fuzz::decode_stream` (input layout and properties are documented
//! there) so that `cargo test -p wire` runs the same checks on random inputs. It fails when the
//! decoder panics, when the chunking changes the result, or when re-encoding a decoded frame does
//! not reproduce its bytes exactly.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    wire::fuzz::decode_stream(input);
});
