//! The network front under misuse and failure: malformed frames, a server that goes away and
//! comes back, and a watch consumer that stops reading.

use std::sync::Arc;
use std::time::Duration;

use meta::{MetaError, MetaStore};
use meta_embedded::remote::protocol::{encode_frame, ClientMessage, PROTOCOL_VERSION};
use meta_embedded::{serve, EmbeddedMetaStore, RemoteMetaStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn served() -> (EmbeddedMetaStore, String, tokio::task::JoinHandle<()>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedMetaStore::open(dir.path()).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(serve(Arc::new(store.clone()), listener));
    (store, address, server, dir)
}

fn hello() -> Vec<u8> {
    let mut bytes = Vec::new();
    encode_frame(&ClientMessage::Hello { protocol_version: PROTOCOL_VERSION }, &mut bytes);
    bytes
}

/// Sends `bytes` on a fresh connection and asserts that the server closes it.
async fn assert_closed_after(address: &str, bytes: &[u8], what: &str) {
    let mut socket = TcpStream::connect(address).await.unwrap();
    socket.write_all(bytes).await.unwrap();
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut received)).await;
    assert!(matches!(read, Ok(Ok(_))), "{what}: the server kept the connection open ({read:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_close_only_their_connection() {
    let (_store, address, _server, _dir) = served().await;
    let client = RemoteMetaStore::connect(&address).await.unwrap();
    client.put("/before", b"1".to_vec(), None).await.unwrap();
    let mut watch = client.watch("/", None).await.unwrap();

    let mut garbage = hello();
    garbage.extend_from_slice(&7u32.to_le_bytes());
    garbage.extend_from_slice(b"{not js");
    assert_closed_after(&address, &garbage, "malformed JSON").await;
    let mut oversized = hello();
    oversized.extend_from_slice(&u32::MAX.to_le_bytes());
    assert_closed_after(&address, &oversized, "an oversized frame").await;
    let mut request_first = Vec::new();
    encode_frame(&ClientMessage::CancelWatch { watch_id: 1 }, &mut request_first);
    assert_closed_after(&address, &request_first, "a request before the hello").await;
    let mut wrong_version = Vec::new();
    encode_frame(&ClientMessage::Hello { protocol_version: PROTOCOL_VERSION + 1 }, &mut wrong_version);
    assert_closed_after(&address, &wrong_version, "a wrong protocol version").await;
    let mut unknown_message = hello();
    let text = br#"{"Request":{"id":1,"request":{"Explode":{}}}}"#;
    unknown_message.extend_from_slice(&u32::try_from(text.len()).unwrap().to_le_bytes());
    unknown_message.extend_from_slice(text);
    assert_closed_after(&address, &unknown_message, "an unknown request").await;
    let mut truncated = hello();
    truncated.extend_from_slice(&100u32.to_le_bytes());
    truncated.extend_from_slice(b"{\"Req");
    let mut socket = TcpStream::connect(&address).await.unwrap();
    socket.write_all(&truncated).await.unwrap();
    drop(socket);

    // The well-behaved client never noticed.
    let revision = client.put("/after", b"2".to_vec(), None).await.unwrap();
    assert_eq!(client.get("/before").await.unwrap().unwrap().value, b"1");
    let event = tokio::time::timeout(Duration::from_secs(5), watch.next()).await.unwrap().unwrap().unwrap();
    assert_eq!((event.kv.key.as_str(), event.revision), ("/after", revision));
    RemoteMetaStore::connect(&address).await.unwrap().get("/after").await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_survives_a_server_restart() {
    let (store, address, server, _dir) = served().await;
    let client = RemoteMetaStore::connect(&address).await.unwrap();
    let lease = client.lease_grant(60).await.unwrap();
    client.put("/live", b"1".to_vec(), Some(lease)).await.unwrap();
    let mut watch = client.watch("/", None).await.unwrap();

    server.abort();
    let _ = server.await;
    match tokio::time::timeout(Duration::from_secs(5), watch.next()).await {
        Ok(Some(Err(MetaError::Unavailable { endpoint, .. }))) => assert_eq!(endpoint, address),
        other => panic!("a watch on a stopped server gave {other:?}"),
    }
    match client.get("/live").await {
        Err(error @ MetaError::Unavailable { .. }) => assert!(error.to_string().contains(&address), "{error}"),
        other => panic!("a get on a stopped server gave {other:?}"),
    }

    // Same store, same address: the client reconnects and the lease is still there.
    let listener = TcpListener::bind(&address).await.unwrap();
    let _server = tokio::spawn(serve(Arc::new(store), listener));
    assert_eq!(client.get("/live").await.unwrap().unwrap().lease, Some(lease));
    assert!(client.lease_keep_alive(lease).await.unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_watch_ends_with_compacted_and_requests_keep_flowing() {
    let (store, address, _server, _dir) = served().await;
    let client = RemoteMetaStore::connect(&address).await.unwrap();
    let mut stalled = client.watch("/s/", None).await.unwrap();
    // Enough events to fill every buffer between the store and the stalled consumer.
    let txn_puts = 100;
    for batch in 0..40 {
        let success = (0..txn_puts).map(|index| meta::TxnOp::put(format!("/s/{batch}/{index}"), "x", None)).collect();
        store.txn(meta::Txn { compares: vec![], success, failure: vec![] }).await.unwrap();
    }
    // Requests on the same connection are not stuck behind the stalled watch.
    let started = std::time::Instant::now();
    client.put("/other", b"1".to_vec(), None).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(2), "a request waited {:?}", started.elapsed());
    let mut delivered = 0;
    loop {
        match tokio::time::timeout(Duration::from_secs(5), stalled.next()).await.expect("the watch hangs") {
            Some(Ok(_)) => delivered += 1,
            Some(Err(MetaError::Compacted { prefix, .. })) => {
                assert_eq!(prefix, "/s/");
                break;
            }
            other => panic!("unexpected watch item {other:?} after {delivered} events"),
        }
    }
    assert!((meta::WATCH_CHANNEL_CAPACITY..4000).contains(&delivered), "delivered {delivered}");
    assert!(stalled.next().await.is_none());
    // A new watch from the listing's revision works.
    let listing = client.list_with_revision("/s/").await.unwrap();
    assert_eq!(listing.kvs.len(), 4000);
    let _watch = client.watch("/s/", Some(listing.revision + 1)).await.unwrap();
}
