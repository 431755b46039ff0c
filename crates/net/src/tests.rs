//! Both sides over real TCP on 127.0.0.1: pipelining with replies out of order, garbage from
//! the peer, the peer going away mid-call, large frames, and the serving loop.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use wire::{Bytes, Frame, PgId, Request, Response, Status};

use crate::{connect, serve_connection, split, Connection, Listener, NetError, Reply};

const PG: PgId = PgId { pool: 1, pg: 2 };

async fn listen() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    let address = listener.local_addr().expect("local address").to_string();
    (listener, address)
}

fn read(offset_bytes: u64, length_bytes: u32) -> Request {
    Request::Read { pg: PG, inode: 7, offset_bytes, length_bytes }
}

/// The bytes the test servers return for a read: a pattern derived from the offset.
fn pattern(offset_bytes: u64, length_bytes: u32) -> Bytes {
    (0..u64::from(length_bytes)).map(|index| (offset_bytes / 4096 + index * 7) as u8).collect::<Vec<u8>>().into()
}

/// A handler for `serve_connection`: reads return `pattern`, writes echo their size in the
/// epoch, pings answer, anything else is refused.
async fn answer(frame: Frame) -> Frame {
    let wire::Body::Request(request) = frame.body else { unreachable!("serve_connection passes requests only") };
    let response = match request {
        Request::Read { offset_bytes, length_bytes, .. } => {
            Response::Read { data: pattern(offset_bytes, length_bytes) }
        }
        Request::Write { data, .. } => {
            return Frame::response(frame.request_id, data.len() as u64, Response::Write);
        }
        Request::Ping => Response::Ping,
        other => Response::Failed { opcode: other.opcode(), status: Status::Unsupported },
    };
    Frame::response(frame.request_id, frame.epoch, response)
}

/// Serves every connection of `listener` with `answer`.
fn serve_forever(listener: TcpListener) {
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve_connection(stream, answer));
        }
    });
}

fn expect_read(reply: Reply, offset_bytes: u64, length_bytes: u32) {
    assert_eq!(reply.response, Response::Read { data: pattern(offset_bytes, length_bytes) });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_calls_complete_when_replies_come_in_reverse_order() {
    let (listener, address) = listen().await;
    let call_count = 64u64;
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (mut reader, sender) = split(stream);
        let mut requests = Vec::new();
        while (requests.len() as u64) < call_count {
            requests.push(reader.next().await.unwrap().expect("a request"));
        }
        // Every call is in flight now; answer the last first.
        for frame in requests.iter().rev() {
            let wire::Body::Request(Request::Read { offset_bytes, length_bytes, .. }) = frame.body else {
                panic!("expected reads, got {frame:?}");
            };
            let reply = Response::Read { data: pattern(offset_bytes, length_bytes) };
            sender.send(&Frame::response(frame.request_id, frame.epoch + 1, reply)).unwrap();
        }
        assert!(reader.next().await.unwrap().is_none(), "the client closes cleanly");
        requests.len()
    });

    let connection = connect(&address).await.unwrap();
    let calls: Vec<_> = (0..call_count)
        .map(|index| {
            let connection = connection.clone();
            tokio::spawn(async move {
                let reply = connection.call(100 + index, read(index * 4096, 512 + index as u32)).await.unwrap();
                assert_eq!(reply.epoch, 101 + index);
                expect_read(reply, index * 4096, 512 + index as u32);
            })
        })
        .collect();
    for call in calls {
        call.await.unwrap();
    }
    assert!(!connection.is_closed());
    drop(connection);
    assert_eq!(server.await.unwrap(), call_count as usize);
}

#[tokio::test]
async fn serve_connection_answers_concurrent_calls_on_a_current_thread_runtime() {
    let (listener, address) = listen().await;
    serve_forever(listener);
    let connection = connect(&address).await.unwrap();
    let calls = (0..200u64).map(|index| {
        let connection = connection.clone();
        async move {
            let reply = connection.call(index, read(index << 20, 4096)).await.unwrap();
            expect_read(reply, index << 20, 4096);
        }
    });
    futures_util::future::join_all(calls).await;
    let reply = connection.call(0, Request::Ping).await.unwrap();
    assert_eq!(reply.response, Response::Ping);
    let reply = connection.call(0, Request::Flush).await.unwrap();
    assert_eq!(reply.response, Response::Failed { opcode: wire::Opcode::Flush, status: Status::Unsupported });
}

/// Adaptive polling: calls poll for their replies while the connection's round trips average
/// within the limit, stop once slow replies raise the average, and start again when it falls;
/// every reply reaches its call either way.
#[tokio::test]
async fn calls_poll_for_replies_only_while_they_come_back_fast() {
    let (listener, address) = listen().await;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            // Writes answer after 10 ms, everything else at once.
            tokio::spawn(serve_connection(stream, |frame: Frame| async move {
                if matches!(frame.body, wire::Body::Request(Request::Write { .. })) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                answer(frame).await
            }));
        }
    });
    let connection = connect(&address).await.unwrap();
    assert!(!connection.spins(), "polling is off by default");
    connection.set_spin_limit(Duration::from_millis(2));
    assert!(connection.spins(), "a new connection polls");
    for index in 0..50u64 {
        expect_read(connection.call(0, read(index * 4096, 4096)).await.unwrap(), index * 4096, 4096);
    }
    assert!(connection.spins(), "fast replies keep it polling");
    for _ in 0..30 {
        let write = Request::Write { pg: PG, inode: 7, offset_bytes: 0, data: pattern(0, 4096) };
        assert_eq!(connection.call(0, write).await.unwrap().response, Response::Write);
    }
    assert!(!connection.spins(), "10 ms replies switch polling off");
    for index in 0..100u64 {
        expect_read(connection.call(0, read(index * 4096, 4096)).await.unwrap(), index * 4096, 4096);
    }
    assert!(connection.spins(), "fast replies switch it back on");
    // Concurrent calls while polling.
    let calls = (0..64u64).map(|index| {
        let connection = connection.clone();
        async move { expect_read(connection.call(0, read(index << 20, 4096)).await.unwrap(), index << 20, 4096) }
    });
    futures_util::future::join_all(calls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_mebibyte_frames_go_both_ways_concurrently() {
    let (listener, address) = listen().await;
    serve_forever(listener);
    let connection = connect(&address).await.unwrap();
    let mebibyte = 1u32 << 20;
    let calls: Vec<_> = (0..16u64)
        .map(|index| {
            let connection = connection.clone();
            tokio::spawn(async move {
                let data = pattern(index * 4096 + 1, mebibyte);
                let write = Request::Write { pg: PG, inode: 7, offset_bytes: 0, data };
                let reply = connection.call(0, write).await.unwrap();
                assert_eq!((reply.epoch, reply.response), (u64::from(mebibyte), Response::Write));
                let reply = connection.call(0, read(index << 20, mebibyte)).await.unwrap();
                expect_read(reply, index << 20, mebibyte);
            })
        })
        .collect();
    for call in calls {
        call.await.unwrap();
    }
}

/// Accepts one connection, waits for `request_count` requests, then runs `act` on the stream.
async fn misbehaving_peer<A>(request_count: usize, act: A) -> (String, tokio::task::JoinHandle<()>)
where
    A: FnOnce(TcpStream) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + 'static,
{
    let (listener, address) = listen().await;
    let peer = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut decoder = wire::Decoder::default();
        let mut seen = 0;
        let mut buffer = vec![0u8; 65536];
        while seen < request_count {
            let size_bytes = stream.read(&mut buffer).await.unwrap();
            assert!(size_bytes > 0, "the client hung up early");
            decoder.feed(&buffer[..size_bytes]);
            while decoder.next_frame().unwrap().is_some() {
                seen += 1;
            }
        }
        act(stream).await;
    });
    (address, peer)
}

async fn calls_in_flight(connection: &Connection, count: u64) -> Vec<Result<Reply, NetError>> {
    let calls = (0..count).map(|index| connection.call(3, read(index * 4096, 4096)));
    futures_util::future::join_all(calls).await
}

#[tokio::test]
async fn garbage_from_the_peer_fails_calls_in_flight_and_later_calls_at_once() {
    let (address, peer) = misbehaving_peer(5, |mut stream| {
        Box::pin(async move {
            stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await.unwrap();
            // Hold the socket open: the client must close on the garbage itself.
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest).await;
        })
    })
    .await;
    let connection = connect(&address).await.unwrap();
    for result in calls_in_flight(&connection, 5).await {
        let error = result.unwrap_err().to_string();
        assert!(error.contains(&address), "{error}");
        assert!(error.contains("malformed frame from the peer: bad magic"), "{error}");
    }
    assert!(connection.is_closed());
    let error = connection.call(3, Request::Ping).await.unwrap_err();
    assert!(matches!(&error, NetError::Closed { reason, .. } if reason.contains("bad magic")), "{error}");
    peer.await.unwrap();
}

#[tokio::test]
async fn peer_hanging_up_mid_call_fails_the_calls() {
    let (address, peer) = misbehaving_peer(3, |stream| Box::pin(async move { drop(stream) })).await;
    let connection = connect(&address).await.unwrap();
    for result in calls_in_flight(&connection, 3).await {
        let error = result.unwrap_err().to_string();
        assert!(error.contains(&address), "{error}");
        assert!(error.contains("the peer closed the connection") || error.contains("reset"), "{error}");
    }
    assert!(connection.is_closed());
    assert!(connection.call(0, Request::Ping).await.is_err());
    peer.await.unwrap();
}

#[tokio::test]
async fn peer_hanging_up_inside_a_reply_names_the_truncation() {
    let (address, peer) = misbehaving_peer(1, |mut stream| {
        Box::pin(async move {
            let mut reply = Vec::new();
            Frame::response(0, 0, Response::Read { data: pattern(0, 4096) }).encode(&mut reply);
            stream.write_all(&reply[..100]).await.unwrap();
            stream.shutdown().await.unwrap();
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest).await;
        })
    })
    .await;
    let connection = connect(&address).await.unwrap();
    let error = connection.call(0, read(0, 4096)).await.unwrap_err().to_string();
    assert!(error.contains("inside a frame") && error.contains("100 bytes"), "{error}");
    peer.await.unwrap();
}

#[tokio::test]
async fn a_request_from_the_server_side_is_a_protocol_violation() {
    let (address, peer) = misbehaving_peer(1, |mut stream| {
        Box::pin(async move {
            let mut request = Vec::new();
            Frame::request(9, 0, Request::Ping).encode(&mut request);
            stream.write_all(&request).await.unwrap();
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest).await;
        })
    })
    .await;
    let connection = connect(&address).await.unwrap();
    let error = connection.call(0, Request::Ping).await.unwrap_err().to_string();
    assert!(error.contains("protocol violation") && error.contains("Ping request"), "{error}");
    peer.await.unwrap();
}

#[tokio::test]
async fn connect_failure_names_the_address() {
    let (listener, address) = listen().await;
    drop(listener);
    let error = connect(&address).await.unwrap_err();
    assert!(matches!(error, NetError::Connect { .. }));
    assert!(error.to_string().contains(&address), "{error}");
}

#[tokio::test]
async fn abandoned_calls_free_their_slots_and_their_late_replies_are_dropped() {
    let (listener, address) = listen().await;
    let release = Arc::new(Notify::new());
    let release_in_server = release.clone();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let release = release_in_server;
        let _ = serve_connection(stream, move |frame| {
            let release = release.clone();
            async move {
                if matches!(frame.body, wire::Body::Request(Request::Read { offset_bytes: 0, .. })) {
                    release.notified().await;
                }
                answer(frame).await
            }
        })
        .await;
    });
    let connection = connect(&address).await.unwrap();
    let abandoned = tokio::time::timeout(Duration::from_millis(20), connection.call(0, read(0, 4096))).await;
    assert!(abandoned.is_err(), "the server holds the first read");
    // The abandoned call's reply arrives now, into a slot that the next call reuses.
    release.notify_one();
    for index in 1..50u64 {
        let reply = connection.call(0, read(index * 4096, 4096)).await.unwrap();
        expect_read(reply, index * 4096, 4096);
    }
}

#[tokio::test]
async fn a_malformed_frame_closes_only_its_own_connection() {
    let (listener, address) = listen().await;
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let outcomes_in_server = outcomes.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let outcomes = outcomes_in_server.clone();
            tokio::spawn(async move {
                let outcome = serve_connection(stream, answer).await;
                outcomes.lock().unwrap().push(outcome.map_err(|error| error.to_string()));
            });
        }
    });
    let healthy = connect(&address).await.unwrap();
    let mut bad = TcpStream::connect(&address).await.unwrap();
    let mut bytes = Vec::new();
    Frame::request(77, 0, Request::Ping).encode(&mut bytes);
    bytes[20] ^= 1; // Inside the request id: the header checksum no longer matches.
    bad.write_all(&bytes).await.unwrap();
    let mut rest = Vec::new();
    bad.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "the server closes without replying");

    let reply = healthy.call(0, Request::Ping).await.unwrap();
    assert_eq!(reply.response, Response::Ping);
    // The serving task records its outcome right after closing; give it the moment it needs.
    for _ in 0..100 {
        if !outcomes.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let outcomes = outcomes.lock().unwrap().clone();
    assert_eq!(outcomes.len(), 1);
    let error = outcomes[0].as_ref().unwrap_err();
    assert!(error.contains("header checksum mismatch") && error.contains("127.0.0.1:"), "{error}");
}

#[tokio::test]
async fn serve_connection_finishes_pending_replies_after_the_peer_stops_sending() {
    let (listener, address) = listen().await;
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        serve_connection(stream, |frame| async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            answer(frame).await
        })
        .await
    });
    let mut stream = TcpStream::connect(&address).await.unwrap();
    let mut bytes = Vec::new();
    for index in 0..3u64 {
        Frame::request(index, 0, Request::Ping).encode(&mut bytes);
    }
    stream.write_all(&bytes).await.unwrap();
    stream.shutdown().await.unwrap();
    let mut replies = Vec::new();
    stream.read_to_end(&mut replies).await.unwrap();
    let mut decoder = wire::Decoder::default();
    decoder.feed(&replies);
    let mut ids = Vec::new();
    while let Some(frame) = decoder.next_frame().unwrap() {
        assert_eq!(frame.body, wire::Body::Response(Response::Ping));
        ids.push(frame.request_id);
    }
    ids.sort_unstable();
    assert_eq!(ids, [0, 1, 2]);
    assert!(server.await.unwrap().is_ok());
}

#[tokio::test]
async fn closing_a_connection_fails_its_calls_with_the_reason() {
    let (listener, address) = listen().await;
    // A server that never answers.
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (mut reader, _sender) = split(stream);
        while let Ok(Some(_)) = reader.next().await {}
    });
    let connection = connect(&address).await.unwrap();
    let waiting = {
        let connection = connection.clone();
        tokio::spawn(async move { connection.call(0, Request::Ping).await })
    };
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    connection.close("osd.3 is no longer in the map");
    let error = waiting.await.unwrap().unwrap_err().to_string();
    assert!(error.contains("osd.3 is no longer in the map") && error.contains(&address), "{error}");
    assert!(connection.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_abandoned_at_random_never_receive_another_calls_reply() {
    let (listener, address) = listen().await;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve_connection(stream, |frame| async move {
                // Replies come back after 0 to 3 scheduler turns, so they overtake each other.
                for _ in 0..frame.request_id % 4 {
                    tokio::task::yield_now().await;
                }
                answer(frame).await
            }));
        }
    });
    let connection = connect(&address).await.unwrap();
    let tasks: Vec<_> = (0..8u64)
        .map(|task| {
            let connection = connection.clone();
            tokio::spawn(async move {
                let mut completed = 0;
                for index in 0..400u64 {
                    let offset_bytes = (task * 1000 + index) * 4096;
                    let call = connection.call(0, read(offset_bytes, 4096));
                    if index % 7 == 3 {
                        // Abandon it after one poll: its slot is reused while its reply is on the way.
                        let _ = tokio::time::timeout(Duration::ZERO, call).await;
                        continue;
                    }
                    expect_read(call.await.unwrap(), offset_bytes, 4096);
                    completed += 1;
                }
                completed
            })
        })
        .collect();
    for task in tasks {
        assert!(task.await.unwrap() > 300);
    }
    assert!(!connection.is_closed());
}

/// Round-trip latency of QD1 pings between two runtimes on two threads (client and server),
/// each with its own event loop, as between two processes. Run with
/// `cargo test -p net --release -- --ignored --nocapture qd1`.
#[test]
#[ignore = "a measurement, not a check"]
fn qd1_round_trip_latency() {
    let server_runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let listener = server_runtime.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let address = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        server_runtime.block_on(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve_connection(stream, answer));
            }
        })
    });
    for flavor in ["current_thread", "multi_thread(2)"] {
        let runtime = match flavor {
            "current_thread" => tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap(),
            _ => tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap(),
        };
        let address = address.clone();
        let mut samples_ns = runtime.block_on(async move {
            let connection = connect(&address).await.unwrap();
            let mut samples_ns = Vec::new();
            let switches_before = context_switches();
            for index in 0..20_000u64 {
                let started = std::time::Instant::now();
                let reply = connection.call(0, read(index * 4096, 4096)).await.unwrap();
                samples_ns.push(started.elapsed().as_nanos() as u64);
                assert!(matches!(reply.response, Response::Read { .. }));
            }
            let switches = context_switches() - switches_before;
            println!("{flavor}: {:.2} voluntary context switches per call (both sides)", switches as f64 / 20_000.0);
            samples_ns
        });
        samples_ns.sort_unstable();
        let mean_ns = samples_ns.iter().sum::<u64>() / samples_ns.len() as u64;
        let p50_ns = samples_ns[samples_ns.len() / 2];
        let p99_ns = samples_ns[samples_ns.len() * 99 / 100];
        println!("{flavor}: 4 KiB read QD1 mean {mean_ns} ns, p50 {p50_ns} ns, p99 {p99_ns} ns");
    }
}

/// Voluntary context switches of every thread of this process so far (each is a thread going
/// to sleep, so each costs a wake-up later).
fn context_switches() -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let status = std::fs::read_to_string(task.unwrap().path().join("status")).unwrap_or_default();
        for line in status.lines() {
            if let Some(count) = line.strip_prefix("voluntary_ctxt_switches:") {
                total += count.trim().parse::<u64>().unwrap();
            }
        }
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_addresses_carry_calls_like_tcp() {
    let dir = std::env::temp_dir().join(format!("basalt-net-unix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("osd.sock");
    let _ = std::fs::remove_file(&path);
    let listener = Listener::Unix(tokio::net::UnixListener::bind(&path).expect("bind a unix socket"));
    let peers = Arc::new(Mutex::new(Vec::new()));
    let server_peers = peers.clone();
    tokio::spawn(async move {
        while let Ok(stream) = listener.accept().await {
            let (mut reader, sender) = split(stream);
            server_peers.lock().unwrap().push(reader.peer().to_string());
            tokio::spawn(async move {
                while let Ok(Some(frame)) = reader.next().await {
                    sender.send(&answer(frame).await).unwrap();
                }
            });
        }
    });

    let address = format!("unix:{}", path.display());
    let connection = connect(&address).await.expect("connect over the unix socket");
    let calls = (0..32u64).map(|index| {
        let connection = connection.clone();
        async move { (index, connection.call(5, read(index * 4096, 4096)).await) }
    });
    for (index, reply) in futures_util::future::join_all(calls).await {
        expect_read(reply.expect("a reply"), index * 4096, 4096);
    }
    let big = Bytes::from(vec![0x5a; 1 << 20]);
    let reply = connection.call(1, Request::Write { pg: PG, inode: 7, offset_bytes: 0, data: big }).await.unwrap();
    assert_eq!(reply.epoch, 1 << 20, "a 1 MiB write crosses the socket whole");
    assert_eq!(connection.peer(), address);
    let served = peers.lock().unwrap().clone();
    assert_eq!(served, vec![format!("a local peer on {address}")]);

    // A path with nothing listening fails to connect and names the address.
    std::fs::remove_file(&path).unwrap();
    let error = connect(&address).await.unwrap_err();
    assert!(matches!(error, NetError::Connect { .. }), "{error:?}");
    assert_eq!(error.peer(), address);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn binding_a_unix_socket_replaces_only_a_dead_one() {
    let dir = std::env::temp_dir().join(format!("basalt-net-bind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.sock");
    let _ = std::fs::remove_file(&path);
    // A socket file nothing accepts on is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let live = crate::bind_unix(&path).expect("a dead socket is replaced");
    // One something accepts on is refused.
    let error = crate::bind_unix(&path).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::AddrInUse, "{error}");
    assert!(error.to_string().contains("is in use"), "{error}");
    drop(live);
    // Anything else is refused and left as it was.
    let file = dir.join("data");
    std::fs::write(&file, b"keep me").unwrap();
    let error = crate::bind_unix(&file).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::AlreadyExists, "{error}");
    assert!(error.to_string().contains("exists and is not a socket"), "{error}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
    std::fs::remove_dir_all(&dir).unwrap();
}
