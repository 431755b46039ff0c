//! The bodies of the cargo-fuzz targets `nbd_handshake` and `nbd_requests` in `fuzz/`, here so unit tests run the same
//! checks on random inputs without cargo-fuzz. Pure functions only: no sockets, no tasks.
//!
//! [`handshake_stream`] input: byte 0 holds options (bit 0: the server starts shutting down
//! after the first option), bytes 1..5 are the client flags, the rest is the option stream.
//! Checked: nothing panics; every reply is a well-formed option reply echoing the option; a
//! final reply is `NBD_REP_ACK` or an error; a successful `NBD_OPT_GO` sent `NBD_INFO_EXPORT`;
//! the transmission phase is entered only for an existing export, with a size that is a multiple
//! of the export block size and flags that match what was negotiated.
//!
//! [`request_stream`] input: byte 0 holds options (bit 0: structured replies, bit 1:
//! `base:allocation`, bits 2-3: the export size), bytes 1..9 seed the chunk sizes, the rest is
//! the request stream. Checked: nothing panics; the stream splits into the same requests
//! whatever the chunking; every accepted request is 512-byte aligned, inside the export and
//! within the payload limit; block status descriptors are non-empty, bounded, and cover no more
//! than the request; every reply encodes to the length its header declares.

use bytes::BytesMut;

use crate::export::Extent;
use crate::handshake::{
    parse_client_flags, parse_option, parse_option_header, ExportInfo, Found, MetaContexts, Need, Negotiation, Next,
    Transmission,
};
use crate::limits::{BLOCK_SIZE_MIN_BYTES, BLOCK_STATUS_EXTENTS_MAX, EXPORT_BLOCK_SIZE_BYTES, PAYLOAD_SIZE_MAX_BYTES};
use crate::proto::*;
use crate::request::{
    block_status_descriptors, put_block_status, put_data_header, put_error_chunk, put_simple_reply, take_request,
    Command, Parsed, StreamError,
};

const OPTION_SHUTDOWN: u8 = 1 << 0;

/// The exports the fuzzed handshake sees: `vol` (whose size is not block-aligned), `broken`
/// (fails to open) and nothing else.
fn lookup(need: &Need) -> Found {
    match need {
        Need::Nothing => Found::Nothing,
        Need::List => Found::List(Ok(vec!["vol".to_string(), "broken".to_string()])),
        Need::Export(name) if name == "vol" => Found::Export(Ok(Some(ExportInfo {
            name: "vol".to_string(),
            description: "a test volume".to_string(),
            size_bytes: (1 << 20) + 100,
            read_only: false,
            bitmaps: vec!["snap".to_string()],
        }))),
        Need::Export(name) if name == "broken" => Found::Export(Err("injected failure".to_string())),
        Need::Export(_) => Found::Export(Ok(None)),
    }
}

/// Runs every handshake check on one input. Panics when a property fails.
pub fn handshake_stream(input: &[u8]) {
    let Some((&options, rest)) = input.split_first() else { return };
    let Some((flags, mut stream)) = rest.split_first_chunk::<4>() else { return };
    let Ok(client) = parse_client_flags(*flags) else { return };
    let mut negotiation = Negotiation::new(client);
    let mut structured = false;
    let mut out = Vec::new();
    loop {
        let Some((header, rest)) = stream.split_first_chunk::<OPTION_HEADER_SIZE_BYTES>() else { return };
        let Ok(header) = parse_option_header(header) else { return };
        let length = usize::try_from(header.length_bytes).expect("bounded by the option limit");
        let Some((data, rest)) = rest.split_at_checked(length) else { return };
        stream = rest;

        let option = parse_option(header.option, data);
        let need = negotiation.needs(&option);
        let found = lookup(&need);
        let known_export = matches!(&found, Found::Export(Ok(Some(_))));
        let shutting_down = negotiation.shutting_down;
        out.clear();
        let Ok(next) = negotiation.respond(option.clone(), found, &mut out) else {
            assert_eq!(header.option, OPT_EXPORT_NAME, "only NBD_OPT_EXPORT_NAME may close without a reply");
            return;
        };
        if header.option == OPT_STRUCTURED_REPLY && !shutting_down && data.is_empty() {
            structured = true;
        }
        if let Next::Transmit(transmission) = &next {
            assert!(known_export, "entered transmission for an export that was not found: {option:?}");
            check_transmission(transmission, structured);
            if header.option == OPT_EXPORT_NAME {
                let expected = if client.no_zeroes { 10 } else { 10 + EXPORT_NAME_PADDING_BYTES };
                assert_eq!(out.len(), expected);
                return;
            }
        }
        check_option_replies(&out, header.option, &next);
        if next != Next::Continue {
            return;
        }
        if options & OPTION_SHUTDOWN != 0 {
            negotiation.shutting_down = true;
        }
    }
}

fn check_transmission(transmission: &Transmission, structured: bool) {
    assert_eq!(transmission.size_bytes % EXPORT_BLOCK_SIZE_BYTES, 0);
    assert_ne!(transmission.flags & FLAG_HAS_FLAGS, 0);
    assert_eq!(transmission.structured, structured);
    assert_eq!(transmission.flags & FLAG_SEND_DF != 0, structured);
    assert!(!transmission.contexts.any() || structured);
}

/// Walks the replies to one option and checks their framing.
fn check_option_replies(mut out: &[u8], option: u32, next: &Next) {
    let mut saw_export_info = false;
    let mut final_type = None;
    while !out.is_empty() {
        assert!(final_type.is_none(), "a reply follows the final reply");
        assert!(out.len() >= OPTION_REPLY_HEADER_SIZE_BYTES, "truncated option reply");
        let magic = u64::from_be_bytes(out[0..8].try_into().unwrap());
        let echoed = u32::from_be_bytes(out[8..12].try_into().unwrap());
        let reply_type = u32::from_be_bytes(out[12..16].try_into().unwrap());
        let length = usize::try_from(u32::from_be_bytes(out[16..20].try_into().unwrap())).unwrap();
        assert_eq!(magic, OPTION_REPLY_MAGIC);
        assert_eq!(echoed, option);
        let data = &out[OPTION_REPLY_HEADER_SIZE_BYTES..OPTION_REPLY_HEADER_SIZE_BYTES + length];
        match reply_type {
            REP_ACK => {
                assert!(data.is_empty());
                final_type = Some(reply_type);
            }
            REP_SERVER => {
                assert_eq!(usize::try_from(u32::from_be_bytes(data[0..4].try_into().unwrap())).unwrap(), length - 4)
            }
            REP_META_CONTEXT => assert_eq!(&data[4..], BASE_ALLOCATION.as_bytes()),
            REP_INFO => {
                let info = u16::from_be_bytes(data[0..2].try_into().unwrap());
                if info == INFO_EXPORT {
                    assert_eq!(length, 12);
                    let size = u64::from_be_bytes(data[2..10].try_into().unwrap());
                    assert_eq!(size % EXPORT_BLOCK_SIZE_BYTES, 0);
                    saw_export_info = true;
                }
                if info == INFO_BLOCK_SIZE {
                    assert_eq!(length, 14);
                }
            }
            error if error & REP_FLAG_ERROR != 0 => {
                assert!(std::str::from_utf8(data).is_ok());
                final_type = Some(reply_type);
            }
            other => panic!("unexpected option reply type {other:#x}"),
        }
        out = &out[OPTION_REPLY_HEADER_SIZE_BYTES + length..];
    }
    if *next == Next::Close {
        assert_eq!(option, OPT_ABORT);
    }
    let final_type = final_type.expect("an option got no final reply");
    if matches!(next, Next::Transmit(_)) {
        assert_eq!(final_type, REP_ACK);
        assert!(saw_export_info, "NBD_OPT_GO succeeded without NBD_INFO_EXPORT");
    }
}

/// The export sizes [`request_stream`] picks from.
const SIZES_BYTES: [u64; 4] = [0, 4096, 1 << 20, 1 << 50];

/// Runs every request-stream check on one input. Panics when a property fails.
pub fn request_stream(input: &[u8]) {
    let Some((&options, rest)) = input.split_first() else { return };
    let (seed, stream) = match rest.split_first_chunk::<8>() {
        Some((seed, stream)) => (u64::from_le_bytes(*seed), stream),
        None => (0, rest),
    };
    let structured = options & 1 != 0;
    let transmission = Transmission {
        export_name: "vol".to_string(),
        size_bytes: SIZES_BYTES[usize::from((options >> 2) & 3)],
        flags: FLAG_HAS_FLAGS,
        structured,
        contexts: MetaContexts {
            base_allocation: structured && options & 2 != 0,
            dirty_bitmap: (structured && options & 16 != 0).then(|| "snap".to_string()),
        },
    };

    let whole = split_requests(stream, &transmission, &mut |_| usize::MAX);
    let mut state = seed | 1;
    let chunked = split_requests(stream, &transmission, &mut |remaining| {
        // xorshift64: chunk sizes from 1 byte to a little over a request header.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        usize::try_from(state % 40).unwrap().clamp(1, remaining)
    });
    assert_eq!(whole, chunked, "the chunking changed how the stream splits into requests");

    for parsed in &whole.0 {
        check_request(parsed, &transmission);
    }
}

/// Feeds `stream` to [`take_request`] in chunks of `chunk(remaining)` bytes, as the server's
/// socket reads do. Returns the requests taken and the error that ended the stream, if any.
fn split_requests(
    stream: &[u8],
    transmission: &Transmission,
    chunk: &mut dyn FnMut(usize) -> usize,
) -> (Vec<Parsed>, Option<StreamError>) {
    let mut input = BytesMut::new();
    let mut fed = 0;
    let mut taken = Vec::new();
    while fed < stream.len() {
        let count = chunk(stream.len() - fed).min(stream.len() - fed);
        input.extend_from_slice(&stream[fed..fed + count]);
        fed += count;
        loop {
            match take_request(&mut input, transmission) {
                Ok(Some(Parsed::Disconnect)) => {
                    taken.push(Parsed::Disconnect);
                    return (taken, None);
                }
                Ok(Some(parsed)) => taken.push(parsed),
                Ok(None) => break,
                Err(error) => return (taken, Some(error)),
            }
        }
    }
    (taken, None)
}

fn check_request(parsed: &Parsed, transmission: &Transmission) {
    let mut out = BytesMut::new();
    match parsed {
        Parsed::Disconnect => {}
        Parsed::Refused { header, rejection } => {
            assert_ne!(rejection.errno, 0);
            assert_ne!(header.command, CMD_DISC, "a disconnect gets no reply");
            if transmission.structured {
                put_error_chunk(&mut out, header.handle, rejection.errno, &rejection.message);
                check_chunk_lengths(&out);
            } else {
                put_simple_reply(&mut out, header.handle, rejection.errno);
                assert_eq!(out.len(), SIMPLE_REPLY_HEADER_SIZE_BYTES);
            }
        }
        Parsed::Run { header, command, payload } => {
            if header.command != CMD_WRITE {
                assert!(payload.is_empty());
            }
            match *command {
                Command::Read { offset_bytes, length_bytes } => {
                    check_range(offset_bytes, length_bytes, transmission);
                    assert!(length_bytes <= PAYLOAD_SIZE_MAX_BYTES);
                    if transmission.structured && length_bytes > 0 {
                        // The data follows the header as its own segment; the header declares it.
                        put_data_header(&mut out, header.handle, offset_bytes, length_bytes);
                        assert_eq!(out.len(), STRUCTURED_REPLY_HEADER_SIZE_BYTES + 8);
                        let declared = u32::from_be_bytes(out[16..20].try_into().unwrap());
                        assert_eq!(declared, length_bytes + 8);
                    }
                }
                Command::Write { offset_bytes, length_bytes } => {
                    check_range(offset_bytes, length_bytes, transmission);
                    assert_eq!(payload.len(), usize::try_from(length_bytes).unwrap());
                }
                Command::Trim { offset_bytes, length_bytes }
                | Command::WriteZeroes { offset_bytes, length_bytes, .. } => {
                    check_range(offset_bytes, length_bytes, transmission)
                }
                Command::BlockStatus { offset_bytes, length_bytes, one_extent } => {
                    assert!(transmission.contexts.any());
                    assert_ne!(length_bytes, 0);
                    check_range(offset_bytes, length_bytes, transmission);
                    check_block_status(header.handle, offset_bytes, length_bytes, one_extent);
                }
                Command::Flush => assert_eq!((header.offset_bytes, header.length_bytes), (0, 0)),
                Command::Cache => {}
                Command::Disconnect => panic!("a disconnect is taken as Parsed::Disconnect"),
            }
        }
    }
}

fn check_range(offset_bytes: u64, length_bytes: u32, transmission: &Transmission) {
    assert_eq!(offset_bytes % u64::from(BLOCK_SIZE_MIN_BYTES), 0);
    assert_eq!(length_bytes % BLOCK_SIZE_MIN_BYTES, 0);
    assert!(offset_bytes.checked_add(u64::from(length_bytes)).is_some_and(|end| end <= transmission.size_bytes));
}

/// Reports a block status for a made-up layout (alternating 4 KiB data and holes from the
/// aligned start, the pattern set by the offset) and checks the descriptors and their encoding.
fn check_block_status(handle: u64, offset_bytes: u64, length_bytes: u32, one_extent: bool) {
    let start = offset_bytes - offset_bytes % EXPORT_BLOCK_SIZE_BYTES;
    let end = (offset_bytes + u64::from(length_bytes)).div_ceil(EXPORT_BLOCK_SIZE_BYTES) * EXPORT_BLOCK_SIZE_BYTES;
    let pages =
        usize::try_from(((end - start) / EXPORT_BLOCK_SIZE_BYTES).min(4 * BLOCK_STATUS_EXTENTS_MAX as u64)).unwrap();
    let extents: Vec<(u64, u32)> = (0..pages)
        .map(|index| {
            let extent =
                Extent { length_bytes: EXPORT_BLOCK_SIZE_BYTES, hole: (index as u64 + offset_bytes / 4096) % 3 == 0 };
            (extent.length_bytes, extent.state())
        })
        .collect();
    let descriptors = block_status_descriptors(&extents, 0, start, offset_bytes, length_bytes, one_extent);
    assert!(!descriptors.is_empty());
    assert!(descriptors.len() <= if one_extent { 1 } else { BLOCK_STATUS_EXTENTS_MAX });
    let covered: u64 = descriptors.iter().map(|&(length, _)| u64::from(length)).sum();
    assert!(covered <= u64::from(length_bytes));
    assert!(descriptors.iter().all(|&(length, state)| length > 0 && state & !(STATE_HOLE | STATE_ZERO) == 0));
    assert!(descriptors.windows(2).all(|pair| pair[0].1 != pair[1].1), "equal neighbours were not merged");
    let mut out = BytesMut::new();
    put_block_status(&mut out, handle, BASE_ALLOCATION_ID, &descriptors, true);
    check_chunk_lengths(&out);
}

/// Checks that a structured chunk's header length matches the bytes that follow it.
fn check_chunk_lengths(out: &[u8]) {
    assert_eq!(u32::from_be_bytes(out[0..4].try_into().unwrap()), STRUCTURED_REPLY_MAGIC);
    let length = usize::try_from(u32::from_be_bytes(out[16..20].try_into().unwrap())).unwrap();
    assert_eq!(out.len(), STRUCTURED_REPLY_HEADER_SIZE_BYTES + length);
    let flags = u16::from_be_bytes(out[4..6].try_into().unwrap());
    assert_ne!(flags & REPLY_FLAG_DONE, 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator, so the test needs no extra dependency.
    fn random_bytes(seed: u64, length: usize) -> Vec<u8> {
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..length)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect()
    }

    fn option(code: u32, data: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&OPTION_MAGIC.to_be_bytes());
        bytes.extend_from_slice(&code.to_be_bytes());
        bytes.extend_from_slice(&u32::try_from(data.len()).unwrap().to_be_bytes());
        bytes.extend_from_slice(data);
        bytes
    }

    fn request(command: u16, flags: u16, offset_bytes: u64, length_bytes: u32) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        bytes.extend_from_slice(&flags.to_be_bytes());
        bytes.extend_from_slice(&command.to_be_bytes());
        bytes.extend_from_slice(&7u64.to_be_bytes());
        bytes.extend_from_slice(&offset_bytes.to_be_bytes());
        bytes.extend_from_slice(&length_bytes.to_be_bytes());
        if command == CMD_WRITE {
            bytes.extend(std::iter::repeat_n(0xab, usize::try_from(length_bytes).unwrap()));
        }
        bytes
    }

    #[test]
    fn handshake_checks_hold_on_valid_and_random_streams() {
        let mut go = Vec::new();
        go.extend_from_slice(&3u32.to_be_bytes());
        go.extend_from_slice(b"vol");
        go.extend_from_slice(&1u16.to_be_bytes());
        go.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        let mut set = Vec::new();
        set.extend_from_slice(&3u32.to_be_bytes());
        set.extend_from_slice(b"vol");
        set.extend_from_slice(&1u32.to_be_bytes());
        set.extend_from_slice(&15u32.to_be_bytes());
        set.extend_from_slice(b"base:allocation");
        for options in [0u8, 1] {
            let mut input = vec![options, 0, 0, 0, 3];
            input.extend(option(OPT_LIST, &[]));
            input.extend(option(OPT_STRUCTURED_REPLY, &[]));
            input.extend(option(OPT_SET_META_CONTEXT, &set));
            input.extend(option(OPT_LIST_META_CONTEXT, &set));
            input.extend(option(OPT_INFO, &go));
            input.extend(option(99, b"unknown"));
            input.extend(option(OPT_GO, &go));
            handshake_stream(&input);
        }
        for seed in 0..2000 {
            let mut input = vec![0, 0, 0, 0, 1];
            input.extend(option(
                u32::from(random_bytes(seed, 1)[0] % 12),
                &random_bytes(seed + 1, (seed % 40) as usize),
            ));
            input.extend(random_bytes(seed, 64));
            handshake_stream(&input);
            handshake_stream(&random_bytes(seed, (seed % 200) as usize));
        }
    }

    #[test]
    fn request_checks_hold_on_valid_and_random_streams() {
        for options in 0u8..16 {
            let mut input = vec![options, 1, 2, 3, 4, 5, 6, 7, 8];
            input.extend(request(CMD_WRITE, CMD_FLAG_FUA, 512, 1024));
            input.extend(request(CMD_READ, CMD_FLAG_DF, 0, 4096));
            input.extend(request(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, 512, 1 << 16));
            input.extend(request(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, 0, 8192));
            input.extend(request(CMD_TRIM, 0, 4096, 4096));
            input.extend(request(CMD_FLUSH, 0, 0, 0));
            input.extend(request(CMD_READ, 0, 100, 4096));
            input.extend(request(CMD_DISC, 0, 0, 0));
            request_stream(&input);
        }
        for seed in 0..2000 {
            let mut input = random_bytes(seed, 9);
            input.extend(request(
                (seed % 9) as u16,
                (seed % 7) as u16,
                seed * 512 % (1 << 21),
                (seed * 4096 % (1 << 20)) as u32,
            ));
            input.extend(random_bytes(seed + 7, (seed % 100) as usize));
            request_stream(&input);
            request_stream(&random_bytes(seed, (seed % 300) as usize));
        }
    }
}
