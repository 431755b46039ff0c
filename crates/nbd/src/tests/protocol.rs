//! Protocol tests with the raw client over a real TCP (or unix) socket against the in-memory
//! fixture: handshake variants, every command, errors, pipelining, read-modify-write under
//! concurrency, and malformed input.

use std::collections::HashMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::limits::{BLOCK_SIZE_MIN_BYTES, BLOCK_SIZE_PREFERRED_BYTES, PAYLOAD_SIZE_MAX_BYTES};

const FIXED: u32 = FLAG_C_FIXED_NEWSTYLE;
const FIXED_NO_ZEROES: u32 = FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES;
const HOLE: u32 = STATE_HOLE | STATE_ZERO;

#[tokio::test]
async fn export_name_handshake_of_old_clients() {
    let (_server, address) = start(standard_exports()).await;
    // Without NO_ZEROES: size, flags, 124 zero bytes.
    for (flags, padding) in [(FIXED, 124), (FIXED_NO_ZEROES, 0), (0, 124)] {
        let mut client = RawClient::connect(address, flags).await;
        client.send_option(OPT_EXPORT_NAME, b"vol").await;
        let mut reply = vec![0u8; 10 + padding];
        client.stream.read_exact(&mut reply).await.unwrap();
        assert_eq!(u64::from_be_bytes(reply[0..8].try_into().unwrap()), 16 << 20);
        let transmission_flags = u16::from_be_bytes(reply[8..10].try_into().unwrap());
        assert_eq!(transmission_flags & FLAG_SEND_DF, 0, "DF without structured replies");
        assert!(reply[10..].iter().all(|&byte| byte == 0));
        // Simple replies.
        let data = pattern(4096, 8192, 1);
        assert_eq!(client.write(4096, &data).await.errno, 0);
        let reply = client.read(4096, 8192).await;
        assert_eq!(reply.errno, 0);
        assert_eq!(reply.data, data);
    }
}

#[tokio::test]
async fn export_name_of_an_unknown_export_closes_the_connection() {
    let (_server, address) = start(standard_exports()).await;
    let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
    client.send_option(OPT_EXPORT_NAME, b"nope").await;
    assert!(client.is_closed().await);
}

#[tokio::test]
async fn go_reports_export_information() {
    let (_server, address) = start(standard_exports()).await;
    let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
    let replies = client.go("vol", &[INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE]).await;
    assert!(replies.iter().all(|reply| reply.option == OPT_GO));
    let (size, flags) = export_info(&replies);
    assert_eq!(size, 16 << 20);
    for flag in
        [FLAG_HAS_FLAGS, FLAG_SEND_FLUSH, FLAG_SEND_FUA, FLAG_SEND_TRIM, FLAG_SEND_WRITE_ZEROES, FLAG_CAN_MULTI_CONN]
    {
        assert_ne!(flags & flag, 0, "flag {flag:#x} missing");
    }
    assert_eq!(flags & (FLAG_READ_ONLY | FLAG_SEND_DF), 0);
    let info =
        |kind: u16| replies.iter().find(|reply| reply.reply_type == REP_INFO && reply.data[0..2] == kind.to_be_bytes());
    assert_eq!(&info(INFO_NAME).unwrap().data[2..], b"vol");
    assert_eq!(&info(INFO_DESCRIPTION).unwrap().data[2..], b"in-memory test export vol");
    let block_size = &info(INFO_BLOCK_SIZE).unwrap().data;
    let field = |index: usize| u32::from_be_bytes(block_size[2 + 4 * index..6 + 4 * index].try_into().unwrap());
    assert_eq!(
        (field(0), field(1), field(2)),
        (BLOCK_SIZE_MIN_BYTES, BLOCK_SIZE_PREFERRED_BYTES, PAYLOAD_SIZE_MAX_BYTES)
    );
    // Without structured replies: simple replies, no payload on errors.
    assert_eq!(client.read(16 << 20, 4096).await.errno, EINVAL);
    assert_eq!(client.write(0, &[7u8; 4096]).await.errno, 0);
    assert_eq!(client.read(0, 4096).await.data, vec![7u8; 4096]);
}

#[tokio::test]
async fn list_info_and_option_errors_keep_the_handshake_going() {
    let (_server, address) = start(standard_exports()).await;
    let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;

    client.send_option(OPT_LIST, &[]).await;
    let replies = client.read_option_replies().await;
    let names: Vec<String> = replies
        .iter()
        .filter(|reply| reply.reply_type == REP_SERVER)
        .map(|reply| String::from_utf8(reply.data[4..].to_vec()).unwrap())
        .collect();
    assert_eq!(names, ["failing", "slow", "small", "vol"]);
    assert_eq!(replies.last().unwrap().reply_type, REP_ACK);

    client.send_option(OPT_LIST, b"junk").await;
    assert_eq!(client.read_option_reply().await.reply_type, REP_ERR_INVALID);

    client.send_option(OPT_INFO, &info_data("nope", &[])).await;
    assert_eq!(client.read_option_replies().await.last().unwrap().reply_type, REP_ERR_UNKNOWN);
    client.send_option(OPT_INFO, &info_data("broken", &[])).await;
    let reply = client.read_option_reply().await;
    assert_eq!(reply.reply_type, REP_ERR_UNKNOWN);
    assert!(String::from_utf8(reply.data).unwrap().contains("injected open failure"));

    client.send_option(OPT_INFO, &info_data("small", &[INFO_BLOCK_SIZE])).await;
    assert_eq!(export_info(&client.read_option_replies().await).0, 64 << 10);

    client.send_option(99, b"whatever").await;
    let reply = client.read_option_reply().await;
    assert_eq!((reply.option, reply.reply_type), (99, REP_ERR_UNSUP));
    client.send_option(OPT_STARTTLS, &[]).await;
    assert_eq!(client.read_option_reply().await.reply_type, REP_ERR_POLICY);
    client.send_option(OPT_GO, &[0, 0, 0, 9, b'v']).await;
    assert_eq!(client.read_option_reply().await.reply_type, REP_ERR_INVALID);
    // SET_META_CONTEXT needs structured replies first.
    assert_eq!(client.set_meta_context("vol", &["base:allocation"]).await[0].reply_type, REP_ERR_INVALID);

    client.structured_reply().await;
    client.send_option(OPT_LIST_META_CONTEXT, &meta_context_data("vol", &[])).await;
    let replies = client.read_option_replies().await;
    assert_eq!(replies.len(), 2);
    assert_eq!(&replies[0].data[4..], b"base:allocation");
    client.send_option(OPT_LIST_META_CONTEXT, &meta_context_data("vol", &["qemu:dirty-bitmap:x"])).await;
    assert_eq!(client.read_option_replies().await.len(), 1);
    let replies = client.set_meta_context("vol", &["x-other:thing", "base:allocation"]).await;
    assert_eq!(replies.len(), 2);
    assert_eq!(u32::from_be_bytes(replies[0].data[0..4].try_into().unwrap()), BASE_ALLOCATION_ID);

    // The handshake still works after all that.
    let (size, flags) = export_info(&client.go("vol", &[]).await);
    assert_eq!(size, 16 << 20);
    assert_ne!(flags & FLAG_SEND_DF, 0);
    let reply = client.request(CMD_BLOCK_STATUS, 0, 0, Payload::Length(8192)).await;
    assert_eq!(reply.extents, [(8192, HOLE)]);
}

#[tokio::test]
async fn abort_gets_an_ack_and_closes() {
    let (_server, address) = start(standard_exports()).await;
    let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
    client.send_option(OPT_ABORT, &[]).await;
    let reply = client.read_option_reply().await;
    assert_eq!((reply.option, reply.reply_type), (OPT_ABORT, REP_ACK));
    assert!(client.is_closed().await);
}

#[tokio::test]
async fn every_command_with_structured_replies() {
    let exports = standard_exports();
    let export = exports.get("vol");
    let (_server, address) = start(exports).await;
    let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
    let (size, _) = client.go_structured("vol").await;
    let mib = 1u64 << 20;

    // Never written: a hole that reads as zeroes.
    let reply = client.request(CMD_BLOCK_STATUS, 0, 0, Payload::Length(1 << 20)).await;
    assert_eq!(reply.extents, [(1 << 20, HOLE)]);
    assert_eq!(client.read(0, 4096).await.data, vec![0u8; 4096]);

    // Write with FUA and read back (the read is one data chunk with DONE).
    let data = pattern(mib, 65536, 3);
    let reply = client.request(CMD_WRITE, CMD_FLAG_FUA, mib, Payload::Data(&data)).await;
    assert_eq!(reply.errno, 0);
    let reply = client.request(CMD_READ, CMD_FLAG_DF, mib, Payload::Length(65536)).await;
    assert_eq!((reply.errno, reply.chunks), (0, 1));
    assert_eq!(reply.data, data);
    assert_eq!(client.request(CMD_FLUSH, 0, 0, Payload::Length(0)).await.errno, 0);
    assert_eq!(client.request(CMD_CACHE, 0, 0, Payload::Length(4096)).await.errno, 0);

    // Block status: hole, data, hole; REQ_ONE gives one extent; an unaligned start is cut.
    let reply = client.request(CMD_BLOCK_STATUS, 0, mib - 8192, Payload::Length(8192 + 65536 + 4096)).await;
    assert_eq!(reply.extents, [(8192, HOLE), (65536, 0), (4096, HOLE)]);
    let reply = client.request(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, mib + 512, Payload::Length(1 << 20)).await;
    assert_eq!(reply.extents, [(65536 - 512, 0)]);

    // Write zeroes without NO_HOLE may deallocate; with NO_HOLE real zeroes are stored.
    let reply = client.request(CMD_WRITE_ZEROES, 0, mib, Payload::Length(16384)).await;
    assert_eq!(reply.errno, 0);
    assert_eq!(client.read(mib, 16384).await.data, vec![0u8; 16384]);
    let reply = client.request(CMD_BLOCK_STATUS, 0, mib, Payload::Length(16384)).await;
    assert_eq!(reply.extents, [(16384, HOLE)]);
    let reply = client.request(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE | CMD_FLAG_FUA, mib, Payload::Length(8192)).await;
    assert_eq!(reply.errno, 0);
    let reply = client.request(CMD_BLOCK_STATUS, 0, mib, Payload::Length(16384)).await;
    assert_eq!(reply.extents, [(8192, 0), (8192, HOLE)]);
    assert_eq!(client.read(mib, 8192).await.data, vec![0u8; 8192]);

    // Unaligned write zeroes: the partial edges are zeroed by read-modify-write.
    let data = pattern(2 * mib, 16384, 5);
    client.write(2 * mib, &data).await;
    let reply = client.request(CMD_WRITE_ZEROES, 0, 2 * mib + 512, Payload::Length(12288)).await;
    assert_eq!(reply.errno, 0);
    let mut expected = data.clone();
    expected[512..512 + 12288].fill(0);
    assert_eq!(client.read(2 * mib, 16384).await.data, expected);

    // Trim discards whole pages only: the unaligned edges keep their data.
    let data = pattern(3 * mib, 16384, 9);
    client.write(3 * mib, &data).await;
    let reply = client.request(CMD_TRIM, CMD_FLAG_FUA, 3 * mib + 512, Payload::Length(8192)).await;
    assert_eq!(reply.errno, 0);
    let after = client.read(3 * mib, 16384).await.data;
    assert_eq!(after[..4096], data[..4096]);
    assert_eq!(after[4096..8192], vec![0u8; 4096]);
    assert_eq!(after[8192..], data[8192..]);

    // The last page of the export.
    let data = pattern(size - 4096, 4096, 11);
    assert_eq!(client.write(size - 4096, &data).await.errno, 0);
    assert_eq!(client.read(size - 4096, 4096).await.data, data);

    // Zero-length requests succeed and do nothing.
    assert_eq!(client.read(0, 0).await.errno, 0);
    assert_eq!(client.write(0, &[]).await.errno, 0);

    // Disconnect: no reply, the server closes.
    let stored = export.stored_pages();
    client.send_request(CMD_DISC, 0, 99, 0, Payload::Length(0)).await;
    assert!(client.is_closed().await);
    assert_eq!(export.stored_pages(), stored);
}

/// A server that polls idle connections for the next request serves exactly as one that
/// sleeps: requests at queue depth 1, pauses long enough to switch polling off (and quick
/// requests that switch it back on), a request that arrives in two parts while it polls, and a
/// disconnect while it polls.
#[tokio::test]
async fn idle_polling_serves_like_sleeping() {
    let exports = standard_exports();
    let (_server, address) = start_with_idle_poll(exports.clone(), Duration::from_millis(2)).await;
    let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
    client.go_structured("vol").await;
    for round in 0..300u64 {
        let offset_bytes = (round % 64) * 4096;
        let data = pattern(offset_bytes, 4096, round as u8);
        assert_eq!(client.write(offset_bytes, &data).await.errno, 0);
        assert_eq!(client.read(offset_bytes, 4096).await.data, data);
        if round % 100 == 50 {
            // Longer than the limit: the next gaps average above it for a while.
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }
    // A read request whose header arrives in two writes.
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
    bytes.extend_from_slice(&0u16.to_be_bytes());
    bytes.extend_from_slice(&CMD_READ.to_be_bytes());
    bytes.extend_from_slice(&7u64.to_be_bytes());
    bytes.extend_from_slice(&0u64.to_be_bytes());
    bytes.extend_from_slice(&4096u32.to_be_bytes());
    client.stream.write_all(&bytes[..10]).await.unwrap();
    tokio::time::sleep(Duration::from_micros(500)).await;
    client.stream.write_all(&bytes[10..]).await.unwrap();
    let reply = client.read_reply(|_| 4096).await;
    assert_eq!((reply.handle, reply.errno), (7, 0));
    // Offset 0 was last written in round 256, with seed 256 as u8.
    assert_eq!(reply.data, pattern(0, 4096, 256u64 as u8));
    let stored = exports.get("vol").stored_pages();
    client.send_request(CMD_DISC, 0, 99, 0, Payload::Length(0)).await;
    assert!(client.is_closed().await);
    assert_eq!(exports.get("vol").stored_pages(), stored);
}

#[tokio::test]
async fn bad_requests_get_errors_and_the_connection_goes_on() {
    let (_server, address) = start(standard_exports()).await;
    let mut structured = RawClient::connect(address, FIXED_NO_ZEROES).await;
    let (size, _) = structured.go_structured("vol").await;
    let mut simple = RawClient::connect(address, FIXED_NO_ZEROES).await;
    export_info(&simple.go("vol", &[]).await);

    for client in [&mut structured, &mut simple] {
        let cases: [(u16, u16, u64, u32, u32); 12] = [
            (CMD_READ, 0, size, 4096, EINVAL),
            (CMD_READ, 0, size - 4096, 8192, EINVAL),
            (CMD_READ, 0, u64::MAX - 4095, 8192, EINVAL),
            (CMD_READ, 0, 100, 4096, EINVAL),
            (CMD_READ, 0, 0, PAYLOAD_SIZE_MAX_BYTES + 4096, EINVAL),
            (CMD_TRIM, 0, size, 4096, EINVAL),
            (CMD_WRITE_ZEROES, 0, size - 4096, 8192, ENOSPC),
            (CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 0, 4096, EINVAL),
            (CMD_BLOCK_STATUS, 0, size, 4096, EINVAL),
            (CMD_FLUSH, 0, 4096, 0, EINVAL),
            (CMD_READ, 1 << 9, 0, 4096, EINVAL),
            (42, 0, 0, 0, EINVAL),
        ];
        for (command, flags, offset, length, errno) in cases {
            let reply = client.request(command, flags, offset, Payload::Length(length)).await;
            let expected = if command == CMD_BLOCK_STATUS && !client.structured { EINVAL } else { errno };
            assert_eq!(reply.errno, expected, "command {command} flags {flags:#x} offset {offset} length {length}");
            assert!(reply.data.is_empty());
            if client.structured {
                assert!(!reply.message.is_empty());
            }
        }
        // A write past the end: its payload is consumed, the error is ENOSPC.
        let reply = client.write(size, &[1u8; 4096]).await;
        assert_eq!(reply.errno, ENOSPC);
        let reply = client.write(size - 512, &[1u8; 1024]).await;
        assert_eq!(reply.errno, ENOSPC);
        let reply = client.write(7, &[1u8; 512]).await;
        assert_eq!(reply.errno, EINVAL);
        // Still in step.
        assert_eq!(client.write(size - 512, &[2u8; 512]).await.errno, 0);
        assert_eq!(client.read(size - 512, 512).await.data, vec![2u8; 512]);
    }
}

#[tokio::test]
async fn export_failures_reach_the_client() {
    let (_server, address) = start(standard_exports()).await;
    let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
    client.structured_reply().await;
    export_info(&client.go("failing", &[]).await);
    let reply = client.read(0, 4096).await;
    assert_eq!(reply.errno, EIO);
    assert!(reply.message.contains("injected failure on failing"), "{}", reply.message);
    assert_eq!(client.write(0, &[0u8; 4096]).await.errno, EIO);
    assert_eq!(client.write(512, &[0u8; 512]).await.errno, EIO);
    assert_eq!(client.request(CMD_FLUSH, 0, 0, Payload::Length(0)).await.errno, EIO);
}

#[tokio::test]
async fn pipelined_requests_are_answered_out_of_order() {
    let (_server, address) = start(standard_exports()).await;
    let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
    client.structured_reply().await;
    export_info(&client.go("slow", &[]).await);
    // Handle 1 reads the slow part, handle 2 the fast part: 2 is answered first.
    client.send_request(CMD_READ, 0, 1, 1 << 20, Payload::Length(4096)).await;
    client.send_request(CMD_READ, 0, 2, 0, Payload::Length(4096)).await;
    let first = client.read_reply(|_| 4096).await;
    let second = client.read_reply(|_| 4096).await;
    assert_eq!((first.handle, second.handle), (2, 1));

    // Many requests in flight at once, written before any reply is read.
    let mut expected = HashMap::new();
    let mut bytes = Vec::new();
    for handle in 0..300u64 {
        let offset = (handle % 200) * 4096;
        if handle < 200 {
            let data = pattern(offset, 4096, 21);
            bytes.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
            bytes.extend_from_slice(&0u16.to_be_bytes());
            bytes.extend_from_slice(&CMD_WRITE.to_be_bytes());
            bytes.extend_from_slice(&handle.to_be_bytes());
            bytes.extend_from_slice(&offset.to_be_bytes());
            bytes.extend_from_slice(&4096u32.to_be_bytes());
            bytes.extend_from_slice(&data);
            expected.insert(handle, None);
        } else {
            bytes.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
            bytes.extend_from_slice(&0u16.to_be_bytes());
            bytes.extend_from_slice(&CMD_FLUSH.to_be_bytes());
            bytes.extend_from_slice(&handle.to_be_bytes());
            bytes.extend_from_slice(&0u64.to_be_bytes());
            bytes.extend_from_slice(&0u32.to_be_bytes());
            expected.insert(handle, None::<()>);
        }
    }
    client.stream.write_all(&bytes).await.unwrap();
    for _ in 0..300 {
        let reply = client.read_reply(|_| 0).await;
        assert_eq!(reply.errno, 0);
        assert!(expected.remove(&reply.handle).is_some(), "duplicate or unknown handle {}", reply.handle);
    }
    for handle in 0..200u64 {
        let offset = handle * 4096;
        assert_eq!(client.read(offset, 4096).await.data, pattern(offset, 4096, 21));
    }
}

/// Many connections write interleaved 512-byte sectors of the same pages at once, pipelined:
/// every sector must survive (no read-modify-write loses another's update).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unaligned_writes_from_many_connections_lose_nothing() {
    let (_server, address) = start(standard_exports()).await;
    const CONNECTIONS: u64 = 4;
    const PAGES: u64 = 8;
    const SECTORS: u64 = PAGES * 8;
    let mut tasks = Vec::new();
    for connection in 0..CONNECTIONS {
        tasks.push(tokio::spawn(async move {
            let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
            if connection % 2 == 0 {
                client.structured_reply().await;
            }
            export_info(&client.go("vol", &[]).await);
            // This connection's sectors, all sent before any reply is read; some are aligned
            // page-sized writes covering other connections' sectors, which must not undo theirs.
            let mut bytes = Vec::new();
            let mut count = 0;
            for sector in (connection..SECTORS).step_by(CONNECTIONS as usize) {
                let offset = sector * 512;
                bytes.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
                bytes.extend_from_slice(&0u16.to_be_bytes());
                bytes.extend_from_slice(&CMD_WRITE.to_be_bytes());
                bytes.extend_from_slice(&sector.to_be_bytes());
                bytes.extend_from_slice(&offset.to_be_bytes());
                bytes.extend_from_slice(&512u32.to_be_bytes());
                bytes.extend_from_slice(&pattern(offset, 512, 0x40));
                count += 1;
            }
            client.stream.write_all(&bytes).await.unwrap();
            for _ in 0..count {
                assert_eq!(client.read_reply(|_| 0).await.errno, 0);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
    export_info(&client.go("vol", &[]).await);
    let length = usize::try_from(SECTORS * 512).unwrap();
    assert_eq!(client.read(0, u32::try_from(length).unwrap()).await.data, pattern(0, length, 0x40));
}

/// Unaligned writes racing aligned writes and write-zeroes on the same pages, repeated: each
/// sector ends up with one of the values written to it, never with a stale one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unaligned_and_aligned_writes_race_without_stale_data() {
    let (_server, address) = start(standard_exports()).await;
    for round in 0..20u8 {
        let mut tasks = Vec::new();
        // One connection rewrites the whole page with `round`; another writes sector 3 with
        // `round | 0x80`. Afterwards sector 3 holds one of the two and the rest holds `round`.
        for writer in 0..2u8 {
            tasks.push(tokio::spawn(async move {
                let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
                export_info(&client.go("vol", &[]).await);
                let reply = if writer == 0 {
                    client.write(8192, &[round; 4096]).await
                } else {
                    client.write(8192 + 3 * 512, &[round | 0x80; 512]).await
                };
                assert_eq!(reply.errno, 0);
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
        export_info(&client.go("vol", &[]).await);
        let page = client.read(8192, 4096).await.data;
        for (index, sector) in page.chunks(512).enumerate() {
            let first = sector[0];
            assert!(sector.iter().all(|&byte| byte == first), "torn sector {index} in round {round}");
            if index == 3 {
                assert!(first == round || first == round | 0x80, "sector 3 is stale in round {round}: {first}");
            } else {
                assert_eq!(first, round, "sector {index} is stale in round {round}");
            }
        }
    }
}

#[tokio::test]
async fn malformed_input_closes_only_its_connection() {
    let (_server, address) = start(standard_exports()).await;
    let mut healthy = RawClient::connect(address, FIXED_NO_ZEROES).await;
    healthy.go_structured("vol").await;
    assert_eq!(healthy.write(0, &[5u8; 4096]).await.errno, 0);

    // Unknown client flags.
    let mut client = RawClient::connect(address, 1 << 7).await;
    assert!(client.is_closed().await);
    // A bad option magic.
    let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
    client.stream.write_all(&[0xde; 16]).await.unwrap();
    assert!(client.is_closed().await);
    // An option longer than accepted.
    let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
    let mut header = Vec::new();
    header.extend_from_slice(&OPTION_MAGIC.to_be_bytes());
    header.extend_from_slice(&OPT_GO.to_be_bytes());
    header.extend_from_slice(&u32::MAX.to_be_bytes());
    client.stream.write_all(&header).await.unwrap();
    assert!(client.is_closed().await);
    // An EXPORT_NAME that is not UTF-8.
    let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
    client.send_option(OPT_EXPORT_NAME, &[0xff, 0xfe]).await;
    assert!(client.is_closed().await);
    // A bad request magic in the transmission phase.
    let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
    client.go_structured("vol").await;
    client.stream.write_all(&[0x55; 28]).await.unwrap();
    assert!(client.is_closed().await);
    // A write over the payload limit: closed before its payload is read.
    let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
    export_info(&client.go("vol", &[]).await);
    client.send_request(CMD_WRITE, 0, 1, 0, Payload::Length(PAYLOAD_SIZE_MAX_BYTES + 512)).await;
    assert!(client.is_closed().await);
    // A stream that ends inside a request.
    let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
    export_info(&client.go("vol", &[]).await);
    client.stream.write_all(&REQUEST_MAGIC.to_be_bytes()).await.unwrap();
    client.stream.shutdown().await.unwrap();
    assert!(client.is_closed().await);

    // The healthy connection never noticed.
    assert_eq!(healthy.read(0, 4096).await.data, vec![5u8; 4096]);
    let mut fresh = RawClient::connect(address, FIXED_NO_ZEROES).await;
    fresh.go_structured("vol").await;
    assert_eq!(fresh.read(0, 4096).await.data, vec![5u8; 4096]);
}

#[tokio::test]
async fn serves_a_unix_socket() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("nbd.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let server = Server::new(standard_exports());
    let serving = tokio::spawn({
        let server = server.clone();
        async move { server.serve_unix(listener).await }
    });
    let mut stream = tokio::net::UnixStream::connect(&path).await.unwrap();
    let mut greeting = [0u8; 18];
    stream.read_exact(&mut greeting).await.unwrap();
    stream.write_all(&FIXED_NO_ZEROES.to_be_bytes()).await.unwrap();
    let mut option = Vec::new();
    option.extend_from_slice(&OPTION_MAGIC.to_be_bytes());
    option.extend_from_slice(&OPT_EXPORT_NAME.to_be_bytes());
    option.extend_from_slice(&5u32.to_be_bytes());
    option.extend_from_slice(b"small");
    stream.write_all(&option).await.unwrap();
    let mut reply = [0u8; 10];
    stream.read_exact(&mut reply).await.unwrap();
    assert_eq!(u64::from_be_bytes(reply[0..8].try_into().unwrap()), 64 << 10);
    server.shutdown();
    tokio::time::timeout(Duration::from_secs(5), serving).await.unwrap().unwrap();
}

#[tokio::test]
async fn shutdown_finishes_requests_in_flight_then_closes() {
    let (server, address) = start(standard_exports()).await;
    let mut handshaking = RawClient::connect(address, FIXED_NO_ZEROES).await;
    let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
    export_info(&client.go("slow", &[]).await);
    // A slow read, then a fast one: once the fast one is answered, the slow one is in flight.
    client.send_request(CMD_READ, 0, 1, 1 << 20, Payload::Length(4096)).await;
    client.send_request(CMD_READ, 0, 2, 0, Payload::Length(4096)).await;
    assert_eq!(client.read_reply(|_| 4096).await.handle, 2);
    server.shutdown();
    let reply = client.read_reply(|_| 4096).await;
    assert_eq!((reply.handle, reply.errno), (1, 0));
    assert!(client.is_closed().await);
    // A connection still in the handshake gets NBD_REP_ERR_SHUTDOWN.
    handshaking.send_option(OPT_LIST, &[]).await;
    assert_eq!(handshaking.read_option_reply().await.reply_type, REP_ERR_SHUTDOWN);
    // The listener closes: no new connections.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(address).await.is_ok() {
        assert!(tokio::time::Instant::now() < deadline, "still accepting connections after shutdown");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A client that sends its requests and closes its sending side still gets every reply, even
/// with more requests buffered than the server runs at once.
#[tokio::test]
async fn requests_sent_before_the_end_of_the_stream_are_all_answered() {
    let (_server, address) = start(standard_exports()).await;
    let mut client = RawClient::connect(address, FIXED_NO_ZEROES).await;
    export_info(&client.go("vol", &[]).await);
    let mut bytes = Vec::new();
    for handle in 0..400u64 {
        bytes.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        bytes.extend_from_slice(&0u16.to_be_bytes());
        bytes.extend_from_slice(&CMD_WRITE.to_be_bytes());
        bytes.extend_from_slice(&handle.to_be_bytes());
        bytes.extend_from_slice(&(handle * 4096).to_be_bytes());
        bytes.extend_from_slice(&4096u32.to_be_bytes());
        bytes.extend_from_slice(&[handle as u8; 4096]);
    }
    client.stream.write_all(&bytes).await.unwrap();
    client.stream.shutdown().await.unwrap();
    let mut handles: Vec<u64> = Vec::new();
    for _ in 0..400 {
        let reply = client.read_reply(|_| 0).await;
        assert_eq!(reply.errno, 0);
        handles.push(reply.handle);
    }
    handles.sort_unstable();
    assert_eq!(handles, (0..400).collect::<Vec<u64>>());
    assert!(client.is_closed().await);
}
