//! Fuzz target: arbitrary bytes as a client's side of the NBD handshake (client flags, then
//! options), answered by the server's pure option parser and negotiation state machine.
//!
//! The body lives in `nbd::fuzz::handshake_stream` (input layout and properties are documented
//! there) so that `cargo test -p nbd` runs the same checks on random inputs. It fails when the
//! handshake code panics, frames a reply wrongly, or enters the transmission phase for an
//! export that does not exist or with flags that do not match what was negotiated.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    nbd::fuzz::handshake_stream(input);
});
