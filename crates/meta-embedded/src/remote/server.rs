//! `serve`: exposes a `MetaStore` to other processes over TCP.
//!
//! One task per connection reads frames and starts one task per request (at most
//! `REQUESTS_IN_FLIGHT_MAX` at a time per connection), one task per watch forwards its events,
//! and one writer task sends every outgoing frame, batching those that queue up. A connection
//! that sends a malformed or out-of-order frame is closed with a logged reason; nothing it
//! does affects other connections. Closing a connection cancels its requests and watches; its
//! leases stay, like etcd's, until they expire or are revoked.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use meta::{MetaError, MetaStore};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify, Semaphore};
use tokio::task::{AbortHandle, JoinSet};

use super::protocol::{
    encode_frame, read_frame, ClientMessage, FrameError, Request, Response, ServerMessage, FRAME_SIZE_BYTES_MAX,
    PROTOCOL_VERSION,
};

/// Connections served at once; further ones are closed at accept.
pub const CONNECTIONS_MAX: usize = 1024;
/// Requests of one connection running at once; further ones wait to be read.
pub const REQUESTS_IN_FLIGHT_MAX: usize = 64;
/// Watches one connection may hold.
pub const WATCHES_PER_CONNECTION_MAX: usize = 1024;
/// Frames queued for one connection's writer.
const OUTGOING_FRAMES_MAX: usize = 1024;

/// Serves `store` to every client that connects to `listener`, until the returned future is
/// dropped (which closes every connection).
pub async fn serve(store: Arc<dyn MetaStore>, listener: TcpListener) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    if connections.len() >= CONNECTIONS_MAX {
                        tracing::warn!(%peer, "refusing metadata connection: {CONNECTIONS_MAX} connections already open");
                        continue;
                    }
                    connections.spawn(serve_connection(store.clone(), socket, peer));
                }
                Err(error) => {
                    // Usually out of file descriptors: wait instead of spinning.
                    tracing::warn!("accepting a metadata connection failed: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection(store: Arc<dyn MetaStore>, socket: TcpStream, peer: SocketAddr) {
    // Metadata requests are small and latency-bound.
    let _ = socket.set_nodelay(true);
    let (read_half, write_half) = socket.into_split();
    let mut reader = BufReader::new(read_half);
    let (outgoing, outgoing_receiver) = mpsc::channel(OUTGOING_FRAMES_MAX);
    let writer_failed = Arc::new(Notify::new());
    // Dropping the set when the connection ends aborts the writer, requests and watches.
    let mut tasks = JoinSet::new();
    tasks.spawn(write_frames(write_half, outgoing_receiver, writer_failed.clone(), peer));
    let in_flight = Arc::new(Semaphore::new(REQUESTS_IN_FLIGHT_MAX));
    let mut watches: HashMap<u64, AbortHandle> = HashMap::new();
    let mut buffer = Vec::new();
    let mut greeted = false;
    let reason = loop {
        let message = tokio::select! {
            message = read_frame::<ClientMessage, _>(&mut reader, &mut buffer) => message,
            _ = writer_failed.notified() => break "writing to the client failed".to_string(),
        };
        while tasks.try_join_next().is_some() {}
        let message = match message {
            Ok(message) => message,
            Err(FrameError::Closed) => {
                tracing::debug!(%peer, "metadata client disconnected");
                return;
            }
            Err(error) => break error.to_string(),
        };
        match message {
            ClientMessage::Hello { protocol_version } if !greeted => {
                if protocol_version != PROTOCOL_VERSION {
                    break format!("client speaks protocol version {protocol_version}, this server {PROTOCOL_VERSION}");
                }
                greeted = true;
                let hello = ServerMessage::Hello { protocol_version: PROTOCOL_VERSION };
                if outgoing.send(hello).await.is_err() {
                    break "the writer stopped".to_string();
                }
            }
            ClientMessage::Hello { .. } => break "a second hello".to_string(),
            _ if !greeted => break "a request before the hello".to_string(),
            ClientMessage::CancelWatch { watch_id } => {
                if let Some(watch) = watches.remove(&watch_id) {
                    watch.abort();
                }
            }
            ClientMessage::Request { id, request: Request::Watch { prefix, start_revision } } => {
                watches.retain(|_, watch| !watch.is_finished());
                if watches.contains_key(&id) {
                    break format!("watch id {id} is already in use");
                }
                if watches.len() >= WATCHES_PER_CONNECTION_MAX {
                    let error = MetaError::other(prefix, format!("more than {WATCHES_PER_CONNECTION_MAX} watches"));
                    let _ = outgoing.send(ServerMessage::Response { id, result: Err(error) }).await;
                    continue;
                }
                let watch = tasks.spawn(forward_watch(store.clone(), outgoing.clone(), id, prefix, start_revision));
                watches.insert(id, watch);
            }
            ClientMessage::Request { id, request } => {
                let permit = in_flight.clone().acquire_owned().await.expect("the semaphore is never closed");
                let store = store.clone();
                let outgoing = outgoing.clone();
                tasks.spawn(async move {
                    let result = handle(store.as_ref(), request).await;
                    let _ = outgoing.send(ServerMessage::Response { id, result }).await;
                    drop(permit);
                });
            }
        }
    };
    tracing::warn!(%peer, "closing metadata connection: {reason}");
}

async fn handle(store: &dyn MetaStore, request: Request) -> Result<Response, MetaError> {
    Ok(match request {
        Request::Get { key } => Response::Get { kv: store.get(&key).await? },
        Request::Put { key, value, lease } => Response::Put { revision: store.put(&key, value, lease).await? },
        Request::Delete { key } => Response::Delete { deleted: store.delete(&key).await? },
        Request::List { prefix } => Response::List { listing: store.list_with_revision(&prefix).await? },
        Request::Txn { txn } => Response::Txn { response: store.txn(txn).await? },
        Request::Watch { .. } => unreachable!("watches are forwarded by forward_watch"),
        Request::Compact { revision } => {
            store.compact(revision).await?;
            Response::Compact
        }
        Request::LeaseGrant { ttl_s } => Response::LeaseGrant { lease: store.lease_grant(ttl_s).await? },
        Request::LeaseKeepAlive { lease } => Response::LeaseKeepAlive { ttl_s: store.lease_keep_alive(lease).await? },
        Request::LeaseRevoke { lease } => {
            store.lease_revoke(lease).await?;
            Response::LeaseRevoke
        }
    })
}

async fn forward_watch(
    store: Arc<dyn MetaStore>,
    outgoing: mpsc::Sender<ServerMessage>,
    watch_id: u64,
    prefix: String,
    start_revision: Option<i64>,
) {
    let mut watch = match store.watch(&prefix, start_revision).await {
        Ok(watch) => watch,
        Err(error) => {
            let _ = outgoing.send(ServerMessage::Response { id: watch_id, result: Err(error) }).await;
            return;
        }
    };
    if outgoing.send(ServerMessage::Response { id: watch_id, result: Ok(Response::Watch) }).await.is_err() {
        return;
    }
    while let Some(item) = watch.next().await {
        let message = match item {
            Ok(event) => ServerMessage::WatchEvent { watch_id, event },
            Err(error) => ServerMessage::WatchEnd { watch_id, error },
        };
        if outgoing.send(message).await.is_err() {
            return;
        }
    }
}

async fn write_frames(
    mut writer: OwnedWriteHalf,
    mut outgoing: mpsc::Receiver<ServerMessage>,
    failed: Arc<Notify>,
    peer: SocketAddr,
) {
    let mut buffer = Vec::new();
    while let Some(message) = outgoing.recv().await {
        encode_server_frame(message, &mut buffer);
        // Batch whatever else is already queued into the same write.
        while buffer.len() < (1 << 20) {
            match outgoing.try_recv() {
                Ok(message) => encode_server_frame(message, &mut buffer),
                Err(_) => break,
            }
        }
        if let Err(error) = writer.write_all(&buffer).await {
            tracing::debug!(%peer, "writing to a metadata client failed: {error}");
            failed.notify_one();
            return;
        }
        buffer.clear();
    }
}

/// Encodes `message`, replacing a response or watch event too large for a frame by an error.
fn encode_server_frame(message: ServerMessage, buffer: &mut Vec<u8>) {
    let start = buffer.len();
    let too_large =
        || MetaError::other("", format!("the message exceeds the frame limit of {FRAME_SIZE_BYTES_MAX} bytes"));
    let replacement = match &message {
        ServerMessage::Response { id, .. } => ServerMessage::Response { id: *id, result: Err(too_large()) },
        ServerMessage::WatchEvent { watch_id, .. } => {
            ServerMessage::WatchEnd { watch_id: *watch_id, error: too_large() }
        }
        ServerMessage::Hello { .. } | ServerMessage::WatchEnd { .. } => {
            encode_frame(&message, buffer);
            return;
        }
    };
    encode_frame(&message, buffer);
    if buffer.len() - start - 4 > FRAME_SIZE_BYTES_MAX {
        buffer.truncate(start);
        encode_frame(&replacement, buffer);
    }
}
