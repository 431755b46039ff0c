//! Fixed sample frames for the unit tests: one of every request and every reply, with field
//! values whose bytes are all distinct, so a misplaced field shows up in a round trip.

use crate::{Bytes, Frame, LayerUsage, ListEntry, ObjectId, Opcode, PgId, PgReport, Request, Response, Status};

pub(crate) fn sample_requests() -> Vec<Request> {
    let pg = PgId { pool: 0x0102_0304, pg: 0x0506_0708 };
    let object = ObjectId { inode: 0x1112_1314_1516_1718, stripe: 0x2122_2324_2526_2728 };
    let data = Bytes::from((0..=255u8).cycle().take(4096 + 7).collect::<Vec<u8>>());
    let requests = vec![
        Request::Read {
            pg,
            inode: 0x3132_3334_3536_3738,
            offset_bytes: 0x4142_4344_4546_4748,
            length_bytes: 0x5152_5354,
        },
        Request::Write { pg, inode: 9, offset_bytes: 1 << 40, data: data.clone() },
        Request::WriteZeroes { pg, inode: 10, offset_bytes: 8192, length_bytes: 1 << 20 },
        Request::Trim { pg, inode: 11, offset_bytes: 0, length_bytes: u32::MAX },
        Request::Flush,
        Request::SecRead { pg, object, offset_bytes: 4096, length_bytes: 8192 },
        Request::SecWrite { pg, object, version: 0x6162_6364_6566_6768, offset_bytes: 12288, data: data.clone() },
        Request::SecWritePages {
            pg,
            object,
            base_version: 0x7172_7374_7576_7778,
            version: 0x8182_8384_8586_8788,
            page_mask: 0x9192_9394_9596_9798,
            data: data.clone(),
        },
        Request::SecReplace { pg, object, version: 0xa1a2_a3a4_a5a6_a7a8, page_mask: 0xb1b2_b3b4_b5b6_b7b8, data },
        Request::SecDelete { pg, object, version: u64::MAX },
        Request::SecList { pg, start: object, count_max: 1000 },
        Request::ObjectInfo { pg, object },
        Request::Ping,
        Request::Space,
        Request::PgStates,
        Request::VolumeRedundancy { inode: 1 << 56 | 9 },
        Request::Barrier { revision: 4321 },
        Request::Sealed { inode: 0x0000_0300_0000_0007 },
        Request::VolumeUsage { inode: 0x0000_0300_0000_0009 },
        Request::Stat { pg, object },
        Request::Changes { pg, object, since: 0x0000_0300_0000_0004 },
        Request::Flatten { pg, inode: 0x0000_0300_0000_0005, start: object, count_max: 64 },
    ];
    assert!(Opcode::ALL.iter().all(|opcode| requests.iter().any(|request| request.opcode() == *opcode)));
    requests
}

pub(crate) fn sample_responses() -> Vec<Response> {
    let entries = (0..5u64)
        .map(|index| ListEntry { object: ObjectId { inode: 100 + index, stripe: index << 33 }, version: index * 7 })
        .collect();
    let mut responses = vec![
        Response::Read { data: Bytes::from(vec![0x5a; 512]) },
        Response::Write,
        Response::WriteZeroes,
        Response::Trim,
        Response::Flush,
        Response::SecRead { version: 77, present: 0xc1c2_c3c4_c5c6_c7c8, data: Bytes::from_static(b"object bytes") },
        Response::SecWrite,
        Response::SecDelete,
        Response::SecList { entries },
        Response::SecWritePages,
        Response::SecReplace,
        Response::ObjectInfo { version: 78, data_crc32c: 0xdead_beef, present: 0xd1d2_d3d4_d5d6_d7d8 },
        Response::Ping,
        Response::Stat { version: 79 },
        Response::Changes { pages: 0xe1e2_e3e4_e5e6_e7e8 },
        Response::Flatten { listed: 64, copied: 17, next: ObjectId { inode: 0x0000_0300_0000_0005, stripe: 99 } },
        Response::Space { used_bytes: 1 << 30, total_bytes: 1 << 40, object_count: 8192 },
        Response::VolumeRedundancy { objects: 512, degraded_objects: 17 },
        Response::Barrier,
        Response::Sealed,
        Response::VolumeUsage {
            layers: vec![
                LayerUsage { inode: 0x0000_0300_0000_0009, objects: 40, exclusive_objects: 40 },
                LayerUsage { inode: 0x0000_0300_0000_0008, objects: 12, exclusive_objects: 3 },
            ],
        },
        Response::PgStates {
            history_writes: 0x7172_7374_7576_7778,
            copied_bytes: 0xa1a2_a3a4_a5a6_a7a8,
            pgs: vec![
                PgReport {
                    pg: PgId { pool: 1, pg: 2 },
                    epoch: 3,
                    state: 5,
                    members_unlisted: 0,
                    objects_left: 0,
                    trouble: 0,
                    failures: 0,
                },
                PgReport {
                    pg: PgId { pool: 4, pg: 5 },
                    epoch: 6,
                    state: 99,
                    members_unlisted: 7,
                    objects_left: 1 << 40,
                    trouble: 5,
                    failures: 0x0102_0304,
                },
            ],
        },
    ];
    assert!(Opcode::ALL.iter().all(|opcode| responses.iter().any(|response| response.opcode() == *opcode)));
    responses.push(Response::NewerVersionHeld { opcode: Opcode::SecWrite, current: 0x0102_0304_0506_0708 });
    let failing = Status::ALL.into_iter().filter(|status| !matches!(status, Status::Ok | Status::NewerVersion));
    for (index, status) in failing.enumerate() {
        responses.push(Response::Failed { opcode: Opcode::ALL[index % Opcode::ALL.len()], status });
    }
    responses
}

/// Every sample, as frames with distinct request ids and epochs.
pub(crate) fn sample_frames() -> Vec<Frame> {
    let mut frames: Vec<Frame> = sample_requests().into_iter().map(|request| Frame::request(0, 0, request)).collect();
    frames.extend(sample_responses().into_iter().map(|response| Frame::response(0, 0, response)));
    for (index, frame) in frames.iter_mut().enumerate() {
        frame.request_id = 0x0a0b_0c0d_0000_0000 + index as u64;
        frame.epoch = 1000 + index as u64;
    }
    frames
}

pub(crate) fn encode(frame: &Frame) -> Vec<u8> {
    let mut bytes = Vec::new();
    frame.encode(&mut bytes);
    bytes
}
