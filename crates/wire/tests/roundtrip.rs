//! Property tests of the public codec: every request and reply round-trips with arbitrary field
//! values, a stream decodes the same however it is cut into chunks, any single damaged byte is
//! detected, and arbitrary bytes never make the decoder panic.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use wire::limits::{DATA_SIZE_MAX_BYTES, LIST_ENTRIES_MAX_COUNT, PAYLOAD_SIZE_MAX_BYTES};
use wire::{
    Body, Bytes, DecodeError, Decoder, Frame, ListEntry, ObjectId, Opcode, PgId, PgReport, Request, Response, Status,
    HEADER_SIZE_BYTES,
};

fn pg() -> impl Strategy<Value = PgId> {
    (any::<u32>(), any::<u32>()).prop_map(|(pool, pg)| PgId { pool, pg })
}

fn object() -> impl Strategy<Value = ObjectId> {
    (any::<u64>(), any::<u64>()).prop_map(|(inode, stripe)| ObjectId { inode, stripe })
}

/// Data up to 16 KiB: large enough to cross any chunk boundary, small enough to run thousands of cases.
fn data() -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..16 * 1024).prop_map(Bytes::from)
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (pg(), any::<u64>(), any::<u64>(), any::<u32>()).prop_map(|(pg, inode, offset_bytes, length_bytes)| {
            Request::Read { pg, inode, offset_bytes, length_bytes }
        }),
        (pg(), any::<u64>(), any::<u64>(), data()).prop_map(|(pg, inode, offset_bytes, data)| Request::Write {
            pg,
            inode,
            offset_bytes,
            data
        }),
        (pg(), any::<u64>(), any::<u64>(), any::<u32>()).prop_map(|(pg, inode, offset_bytes, length_bytes)| {
            Request::WriteZeroes { pg, inode, offset_bytes, length_bytes }
        }),
        (pg(), any::<u64>(), any::<u64>(), any::<u32>()).prop_map(|(pg, inode, offset_bytes, length_bytes)| {
            Request::Trim { pg, inode, offset_bytes, length_bytes }
        }),
        Just(Request::Flush),
        (pg(), object(), any::<u32>(), any::<u32>()).prop_map(|(pg, object, offset_bytes, length_bytes)| {
            Request::SecRead { pg, object, offset_bytes, length_bytes }
        }),
        (pg(), object(), any::<u64>(), any::<u32>(), data()).prop_map(|(pg, object, version, offset_bytes, data)| {
            Request::SecWrite { pg, object, version, offset_bytes, data }
        }),
        (pg(), object(), any::<u64>()).prop_map(|(pg, object, version)| Request::SecDelete { pg, object, version }),
        (pg(), object(), any::<u64>(), any::<u64>(), any::<u64>(), data()).prop_map(
            |(pg, object, base_version, version, page_mask, data)| Request::SecWritePages {
                pg,
                object,
                base_version,
                version,
                page_mask,
                data
            }
        ),
        (pg(), object(), any::<u64>(), any::<u64>(), data()).prop_map(|(pg, object, version, page_mask, data)| {
            Request::SecReplace { pg, object, version, page_mask, data }
        }),
        (pg(), object(), any::<u32>()).prop_map(|(pg, start, count_max)| Request::SecList { pg, start, count_max }),
        (pg(), object()).prop_map(|(pg, object)| Request::ObjectInfo { pg, object }),
        (pg(), object()).prop_map(|(pg, object)| Request::Stat { pg, object }),
        (pg(), object(), any::<u64>()).prop_map(|(pg, object, since)| Request::Changes { pg, object, since }),
        (pg(), any::<u64>(), object(), any::<u32>()).prop_map(|(pg, inode, start, count_max)| Request::Flatten {
            pg,
            inode,
            start,
            count_max
        }),
        Just(Request::Ping),
        Just(Request::Space),
        Just(Request::PgStates),
        any::<u64>().prop_map(|inode| Request::VolumeRedundancy { inode }),
        any::<u64>().prop_map(|revision| Request::Barrier { revision }),
        any::<u64>().prop_map(|inode| Request::Sealed { inode }),
        any::<u64>().prop_map(|inode| Request::VolumeUsage { inode }),
    ]
}

fn opcode() -> impl Strategy<Value = Opcode> {
    proptest::sample::select(Opcode::ALL.to_vec())
}

fn error_status() -> impl Strategy<Value = Status> {
    // `NewerVersion` has a reply of its own, with a body.
    let failing = Status::ALL.into_iter().filter(|status| !matches!(status, Status::Ok | Status::NewerVersion));
    proptest::sample::select(failing.collect::<Vec<_>>())
}

fn response() -> impl Strategy<Value = Response> {
    prop_oneof![
        data().prop_map(|data| Response::Read { data }),
        Just(Response::Write),
        Just(Response::WriteZeroes),
        Just(Response::Trim),
        Just(Response::Flush),
        (any::<u64>(), any::<u64>(), data()).prop_map(|(version, present, data)| Response::SecRead {
            version,
            present,
            data
        }),
        Just(Response::SecWrite),
        Just(Response::SecDelete),
        Just(Response::SecWritePages),
        Just(Response::SecReplace),
        vec((object(), any::<u64>()), 0..300).prop_map(|entries| Response::SecList {
            entries: entries.into_iter().map(|(object, version)| ListEntry { object, version }).collect()
        }),
        (any::<u64>(), any::<u32>(), any::<u64>())
            .prop_map(|(version, data_crc32c, present)| { Response::ObjectInfo { version, data_crc32c, present } }),
        any::<u64>().prop_map(|version| Response::Stat { version }),
        any::<u64>().prop_map(|pages| Response::Changes { pages }),
        (any::<u32>(), any::<u32>(), object()).prop_map(|(listed, copied, next)| Response::Flatten {
            listed,
            copied,
            next
        }),
        Just(Response::Ping),
        Just(Response::Barrier),
        Just(Response::Sealed),
        proptest::collection::vec(any::<(u64, u64, u64)>(), 0..8).prop_map(|layers| Response::VolumeUsage {
            layers: layers
                .into_iter()
                .map(|(inode, objects, exclusive_objects)| wire::LayerUsage { inode, objects, exclusive_objects })
                .collect()
        }),
        (any::<u64>(), any::<u64>())
            .prop_map(|(objects, degraded_objects)| Response::VolumeRedundancy { objects, degraded_objects }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(used_bytes, total_bytes, object_count)| {
            Response::Space { used_bytes, total_bytes, object_count }
        }),
        (
            any::<u64>(),
            any::<u64>(),
            vec((pg(), any::<u64>(), any::<u32>(), any::<u32>(), any::<u64>(), any::<(u32, u32)>()), 0..100)
        )
            .prop_map(|(history_writes, copied_bytes, pgs)| Response::PgStates {
                history_writes,
                copied_bytes,
                pgs: pgs
                    .into_iter()
                    .map(|(pg, epoch, state, members_unlisted, objects_left, (trouble, failures))| PgReport {
                        pg,
                        epoch,
                        state,
                        members_unlisted,
                        objects_left,
                        trouble,
                        failures,
                    })
                    .collect(),
            }),
        (opcode(), any::<u64>()).prop_map(|(opcode, current)| Response::NewerVersionHeld { opcode, current }),
        (opcode(), error_status()).prop_map(|(opcode, status)| Response::Failed { opcode, status }),
    ]
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        (any::<u64>(), any::<u64>(), request())
            .prop_map(|(request_id, epoch, request)| Frame::request(request_id, epoch, request)),
        (any::<u64>(), any::<u64>(), response())
            .prop_map(|(request_id, epoch, response)| Frame::response(request_id, epoch, response)),
    ]
}

fn encode(frame: &Frame) -> Vec<u8> {
    let mut bytes = Vec::new();
    frame.encode(&mut bytes);
    bytes
}

/// Feeds `chunks` in order, collecting frames after each, until the first error.
fn decode_chunks<'a>(
    decoder: &mut Decoder,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<Frame>, DecodeError> {
    let mut frames = Vec::new();
    for chunk in chunks {
        decoder.feed(chunk);
        while let Some(frame) = decoder.next_frame()? {
            frames.push(frame);
        }
    }
    Ok(frames)
}

/// Checks that `frame` survives encoding and decoding, alone and after a prefix already in the
/// output buffer, and that its encoding is canonical (re-encoding the decoded frame gives the same bytes).
fn check_round_trip(frame: &Frame) {
    let bytes = encode(frame);
    assert_eq!(bytes.len(), frame.encoded_size_bytes());
    assert_eq!(&bytes[..4], b"BSLW");
    let mut decoder = Decoder::default();
    decoder.feed(&bytes);
    let decoded = decoder.next_frame().expect("valid frame").expect("complete frame");
    assert_eq!(&decoded, frame);
    assert_eq!(decoder.next_frame(), Ok(None));
    assert_eq!(decoder.finish(), Ok(()));
    assert_eq!(encode(&decoded), bytes);

    let mut appended = b"earlier frames".to_vec();
    frame.encode(&mut appended);
    assert_eq!(&appended[14..], &bytes[..]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn request_round_trip(request_id in any::<u64>(), epoch in any::<u64>(), request in request()) {
        check_round_trip(&Frame::request(request_id, epoch, request));
    }

    #[test]
    fn response_round_trip(request_id in any::<u64>(), epoch in any::<u64>(), response in response()) {
        check_round_trip(&Frame::response(request_id, epoch, response));
    }

    /// Several frames, concatenated and cut at arbitrary points (including single bytes and empty
    /// chunks), decode to the same frames in the same order.
    #[test]
    fn stream_decodes_the_same_in_any_chunking(
        frames in vec(frame(), 1..8),
        cuts in vec(any::<prop::sample::Index>(), 0..40),
    ) {
        let mut stream = Vec::new();
        for frame in &frames {
            frame.encode(&mut stream);
        }
        let mut cut_offsets: Vec<usize> = cuts.iter().map(|cut| cut.index(stream.len() + 1)).collect();
        cut_offsets.push(0);
        cut_offsets.push(stream.len());
        cut_offsets.sort_unstable();
        let chunks = cut_offsets.windows(2).map(|window| &stream[window[0]..window[1]]);
        let mut decoder = Decoder::default();
        prop_assert_eq!(decode_chunks(&mut decoder, chunks), Ok(frames.clone()));
        prop_assert_eq!(decoder.finish(), Ok(()));

        let mut bytewise = Decoder::default();
        prop_assert_eq!(decode_chunks(&mut bytewise, stream.chunks(1)), Ok(frames));
    }

    /// Any change to a single byte of a stream of valid frames is reported as an error at that byte's
    /// frame: every earlier frame decodes intact, and nothing after it is delivered.
    #[test]
    fn a_damaged_byte_is_always_detected(
        frames in vec(frame(), 1..5),
        position in any::<prop::sample::Index>(),
        xor in 1u8..=255,
    ) {
        let mut stream = Vec::new();
        let mut frame_ends = Vec::new();
        for frame in &frames {
            frame.encode(&mut stream);
            frame_ends.push(stream.len());
        }
        let at = position.index(stream.len());
        stream[at] ^= xor;
        let damaged_frame_index = frame_ends.iter().position(|end| at < *end).unwrap();
        let mut decoder = Decoder::default();
        decoder.feed(&stream);
        for frame in &frames[..damaged_frame_index] {
            prop_assert_eq!(decoder.next_frame(), Ok(Some(frame.clone())));
        }
        prop_assert!(decoder.next_frame().is_err());
    }

    /// Arbitrary bytes, in arbitrary chunks, give frames, a need for more bytes, or an error; never a panic.
    #[test]
    fn random_bytes_never_panic(
        prefix_valid_magic in any::<bool>(),
        bytes in vec(any::<u8>(), 0..2048),
        chunk_size_bytes in 1usize..300,
    ) {
        let mut stream = Vec::new();
        if prefix_valid_magic {
            stream.extend_from_slice(b"BSLW\x01\x00");
        }
        stream.extend_from_slice(&bytes);
        let mut decoder = Decoder::default();
        if let Ok(frames) = decode_chunks(&mut decoder, stream.chunks(chunk_size_bytes)) {
            let consumed_bytes: usize = frames.iter().map(Frame::encoded_size_bytes).sum();
            prop_assert_eq!(decoder.buffered_bytes(), stream.len() - consumed_bytes);
        }
    }
}

/// The strategies above produce every request opcode, every reply opcode and every error status,
/// so a new variant without a strategy fails here rather than going untested.
#[test]
fn strategies_cover_every_variant() {
    let mut runner = TestRunner::deterministic();
    let mut request_opcodes = std::collections::BTreeSet::new();
    let mut reply_opcodes = std::collections::BTreeSet::new();
    let mut statuses = std::collections::BTreeSet::new();
    for _ in 0..5000 {
        request_opcodes.insert(request().new_tree(&mut runner).unwrap().current().opcode());
        let response = response().new_tree(&mut runner).unwrap().current();
        statuses.insert(response.status());
        if response.status().is_ok() {
            reply_opcodes.insert(response.opcode());
        }
    }
    assert_eq!(request_opcodes.into_iter().collect::<Vec<_>>(), Opcode::ALL);
    assert_eq!(reply_opcodes.into_iter().collect::<Vec<_>>(), Opcode::ALL);
    assert_eq!(statuses.into_iter().collect::<Vec<_>>(), Status::ALL);
}

/// The largest frames the limits allow round-trip with the default decoder.
#[test]
fn largest_frames_round_trip() {
    let pg = PgId { pool: 1, pg: 2 };
    let object = ObjectId { inode: 3, stripe: 4 };
    let data = Bytes::from(vec![0xc3; DATA_SIZE_MAX_BYTES as usize]);
    let entries = (0..u64::from(LIST_ENTRIES_MAX_COUNT))
        .map(|index| ListEntry { object: ObjectId { inode: index, stripe: !index }, version: index })
        .collect();
    let frames = [
        Frame::request(1, 1, Request::Write { pg, inode: 5, offset_bytes: 0, data: data.clone() }),
        Frame::request(2, 1, Request::SecWrite { pg, object, version: 6, offset_bytes: 0, data: data.clone() }),
        Frame::response(3, 1, Response::Read { data: data.clone() }),
        Frame::response(4, 1, Response::SecRead { version: 7, present: 1, data }),
        Frame::response(5, 1, Response::SecList { entries }),
    ];
    for frame in &frames {
        assert!(frame.encoded_size_bytes() <= HEADER_SIZE_BYTES + PAYLOAD_SIZE_MAX_BYTES as usize);
        check_round_trip(frame);
    }
}

/// Decoded data are slices of the received frame, not copies, and outlive the decoder.
#[test]
fn decoded_data_outlive_the_decoder() {
    let frame = Frame::request(
        9,
        9,
        Request::Write { pg: PgId { pool: 0, pg: 0 }, inode: 1, offset_bytes: 0, data: Bytes::from(vec![7u8; 4096]) },
    );
    let mut decoder = Decoder::default();
    decoder.feed(&encode(&frame));
    let decoded = decoder.next_frame().unwrap().unwrap();
    drop(decoder);
    match decoded.body {
        Body::Request(Request::Write { data, .. }) => assert_eq!(data, vec![7u8; 4096]),
        other => panic!("decoded {other:?}"),
    }
}

#[test]
#[should_panic]
fn encoding_over_the_payload_limit_is_a_bug() {
    let data = Bytes::from(vec![0u8; PAYLOAD_SIZE_MAX_BYTES as usize + 1]);
    encode(&Frame::response(1, 1, Response::Read { data }));
}

#[test]
#[should_panic]
fn a_failed_reply_with_status_ok_is_a_bug() {
    encode(&Frame::response(1, 1, Response::Failed { opcode: Opcode::Read, status: Status::Ok }));
}

#[test]
#[should_panic]
fn a_failed_reply_with_status_newer_version_is_a_bug() {
    encode(&Frame::response(1, 1, Response::Failed { opcode: Opcode::SecWrite, status: Status::NewerVersion }));
}
