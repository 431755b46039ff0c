//! Fuzz target: arbitrary bytes as a client's request stream in the NBD transmission phase, cut
//! into arbitrary chunks, through the server's request decoder and checks.
//!
//! The body lives in `nbd::fuzz::request_stream` (input layout and properties are documented
//! there) so that `cargo test -p nbd` runs the same checks on random inputs. It fails when the
//! decoder panics, when the chunking changes the result, when an accepted request is out of
//! range, misaligned or over the payload limit, or when a reply encodes wrongly.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    nbd::fuzz::request_stream(input);
});
