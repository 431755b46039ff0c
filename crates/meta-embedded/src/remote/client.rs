//! `RemoteMetaStore`: a `MetaStore` that talks to a store served by [`serve`](super::serve) in
//! another process.
//!
//! One TCP connection carries every request and watch, pipelined by request id. A reader task
//! routes responses to their callers and events to their watches; it never waits for a slow
//! watch consumer (that watch ends with `MetaError::Compacted` instead), so lease keep-alives
//! are never stuck behind events. When the connection fails, every pending request and watch
//! ends with `MetaError::Unavailable` naming the address, and the next request connects again.
//! Requests are not retried on a new connection, since a write may or may not have been
//! applied; leases live on the server and survive a reconnect.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use meta::{
    watch_channel, KeyValue, LeaseId, Listing, MetaError, MetaStore, Txn, TxnResponse, WatchSender, WatchStream,
    WATCH_CHANNEL_CAPACITY,
};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio::time::timeout;

use super::protocol::{encode_frame, read_frame, ClientMessage, Request, Response, ServerMessage, PROTOCOL_VERSION};

/// Frames queued for the connection's writer.
const OUTGOING_FRAMES_MAX: usize = 1024;

#[derive(Clone, Debug)]
pub struct RemoteOptions {
    /// How long connecting and the protocol greeting may take.
    pub connect_timeout: Duration,
    /// How long a request may wait for its response. A request that times out closes the
    /// connection, since the server (or the path to it) is stuck.
    pub request_timeout: Duration,
}

impl Default for RemoteOptions {
    fn default() -> RemoteOptions {
        RemoteOptions { connect_timeout: Duration::from_secs(5), request_timeout: Duration::from_secs(10) }
    }
}

/// A client of a metadata store served over TCP.
pub struct RemoteMetaStore {
    address: String,
    options: RemoteOptions,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
    next_id: AtomicU64,
}

struct Connection {
    outgoing: mpsc::Sender<ClientMessage>,
    shared: Arc<Shared>,
    tasks: [AbortHandle; 2],
}

type Pending = HashMap<u64, oneshot::Sender<Result<Response, MetaError>>>;

struct Shared {
    address: String,
    /// `None` once the connection has failed.
    pending: Mutex<Option<Pending>>,
    watches: Mutex<HashMap<u64, (String, WatchSender)>>,
}

impl Shared {
    fn is_closed(&self) -> bool {
        self.pending.lock().expect("pending lock").is_none()
    }

    /// Fails every pending request and watch; later requests reconnect.
    fn close(&self, reason: &str) {
        let error = MetaError::unavailable(self.address.clone(), reason);
        let pending = self.pending.lock().expect("pending lock").take();
        for (_, sender) in pending.into_iter().flatten() {
            let _ = sender.send(Err(error.clone()));
        }
        let watches = std::mem::take(&mut *self.watches.lock().expect("watches lock"));
        for (_, (_, watch)) in watches {
            watch.fail(error.clone());
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        self.shared.close("the client was dropped");
    }
}

impl RemoteMetaStore {
    /// Connects to the store served at `address` (`host:port`).
    pub async fn connect(address: &str) -> Result<RemoteMetaStore, MetaError> {
        RemoteMetaStore::connect_with(address, RemoteOptions::default()).await
    }

    pub async fn connect_with(address: &str, options: RemoteOptions) -> Result<RemoteMetaStore, MetaError> {
        let store = RemoteMetaStore {
            address: address.to_string(),
            options,
            connection: tokio::sync::Mutex::new(None),
            next_id: AtomicU64::new(1),
        };
        store.connection().await?;
        Ok(store)
    }

    /// The live connection, connecting again if the last one failed.
    async fn connection(&self) -> Result<Arc<Connection>, MetaError> {
        let mut connection = self.connection.lock().await;
        if let Some(live) = connection.as_ref().filter(|live| !live.shared.is_closed()) {
            return Ok(live.clone());
        }
        *connection = None;
        let new = timeout(self.options.connect_timeout, self.establish())
            .await
            .map_err(|_| self.unavailable(format!("no connection within {:?}", self.options.connect_timeout)))??;
        let new = Arc::new(new);
        *connection = Some(new.clone());
        Ok(new)
    }

    async fn establish(&self) -> Result<Connection, MetaError> {
        let mut socket =
            TcpStream::connect(&self.address).await.map_err(|error| self.unavailable(format!("connect: {error}")))?;
        let _ = socket.set_nodelay(true);
        let mut buffer = Vec::new();
        encode_frame(&ClientMessage::Hello { protocol_version: PROTOCOL_VERSION }, &mut buffer);
        socket.write_all(&buffer).await.map_err(|error| self.unavailable(format!("send hello: {error}")))?;
        let (read_half, write_half) = socket.into_split();
        let mut reader = BufReader::new(read_half);
        match read_frame::<ServerMessage, _>(&mut reader, &mut buffer).await {
            Ok(ServerMessage::Hello { protocol_version }) if protocol_version == PROTOCOL_VERSION => {}
            Ok(ServerMessage::Hello { protocol_version }) => {
                return Err(self.unavailable(format!(
                    "server speaks protocol version {protocol_version}, this client {PROTOCOL_VERSION}"
                )))
            }
            Ok(other) => return Err(self.unavailable(format!("expected a hello, got {other:?}"))),
            Err(error) => return Err(self.unavailable(format!("receive hello: {error}"))),
        }
        let shared = Arc::new(Shared {
            address: self.address.clone(),
            pending: Mutex::new(Some(HashMap::new())),
            watches: Mutex::new(HashMap::new()),
        });
        let (outgoing, outgoing_receiver) = mpsc::channel(OUTGOING_FRAMES_MAX);
        let reader_task = tokio::spawn(read_frames(reader, shared.clone(), outgoing.clone()));
        let writer_task = tokio::spawn(write_frames(write_half, outgoing_receiver, shared.clone()));
        Ok(Connection { outgoing, shared, tasks: [reader_task.abort_handle(), writer_task.abort_handle()] })
    }

    fn unavailable(&self, reason: impl Into<String>) -> MetaError {
        MetaError::unavailable(self.address.clone(), reason)
    }

    async fn request(&self, request: Request) -> Result<Response, MetaError> {
        let connection = self.connection().await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.request_on(&connection, id, request).await
    }

    async fn request_on(&self, connection: &Connection, id: u64, request: Request) -> Result<Response, MetaError> {
        let (sender, receiver) = oneshot::channel();
        match connection.shared.pending.lock().expect("pending lock").as_mut() {
            Some(pending) => pending.insert(id, sender),
            None => return Err(self.unavailable("the connection failed")),
        };
        let key = request.key().to_string();
        if connection.outgoing.send(ClientMessage::Request { id, request }).await.is_err() {
            return Err(self.unavailable("the connection failed"));
        }
        match timeout(self.options.request_timeout, receiver).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.unavailable("the connection failed")),
            Err(_) => {
                let reason =
                    format!("no response within {:?} to a request on key {key:?}", self.options.request_timeout);
                connection.shared.close(&reason);
                Err(self.unavailable(reason))
            }
        }
    }
}

fn unexpected(key: &str, response: Response) -> MetaError {
    MetaError::other(key, format!("unexpected response {response:?}"))
}

async fn read_frames(mut reader: BufReader<OwnedReadHalf>, shared: Arc<Shared>, outgoing: mpsc::Sender<ClientMessage>) {
    let mut buffer = Vec::new();
    let reason = loop {
        let message = match read_frame::<ServerMessage, _>(&mut reader, &mut buffer).await {
            Ok(message) => message,
            Err(error) => break error.to_string(),
        };
        match message {
            ServerMessage::Hello { .. } => break "unexpected hello from the server".to_string(),
            ServerMessage::Response { id, result } => {
                let sender =
                    shared.pending.lock().expect("pending lock").as_mut().and_then(|pending| pending.remove(&id));
                // No sender: the request timed out, or the server answered twice (ignored).
                if let Some(sender) = sender {
                    let _ = sender.send(result);
                }
            }
            ServerMessage::WatchEvent { watch_id, event } => {
                let mut watches = shared.watches.lock().expect("watches lock");
                let Some((prefix, watch)) = watches.get(&watch_id) else { continue };
                let revision = event.revision;
                let ended = match watch.try_send(event) {
                    Ok(true) => None,
                    Ok(false) => Some(MetaError::Compacted {
                        prefix: prefix.clone(),
                        revision,
                        reason: format!("the consumer fell more than {WATCH_CHANNEL_CAPACITY} events behind"),
                    }),
                    Err(_) => Some(MetaError::other(prefix.clone(), "the watch was dropped")),
                };
                if let Some(error) = ended {
                    let (_, watch) = watches.remove(&watch_id).expect("found above");
                    watch.fail(error);
                    let _ = outgoing.try_send(ClientMessage::CancelWatch { watch_id });
                }
            }
            ServerMessage::WatchEnd { watch_id, error } => {
                if let Some((_, watch)) = shared.watches.lock().expect("watches lock").remove(&watch_id) {
                    watch.fail(error);
                }
            }
        }
    };
    shared.close(&reason);
}

async fn write_frames(mut writer: OwnedWriteHalf, mut outgoing: mpsc::Receiver<ClientMessage>, shared: Arc<Shared>) {
    let mut buffer = Vec::new();
    while let Some(message) = outgoing.recv().await {
        encode_frame(&message, &mut buffer);
        while buffer.len() < (1 << 20) {
            match outgoing.try_recv() {
                Ok(message) => encode_frame(&message, &mut buffer),
                Err(_) => break,
            }
        }
        if let Err(error) = writer.write_all(&buffer).await {
            shared.close(&format!("send: {error}"));
            return;
        }
        buffer.clear();
    }
}

#[async_trait]
impl MetaStore for RemoteMetaStore {
    fn endpoint(&self) -> &str {
        &self.address
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError> {
        match self.request(Request::Get { key: key.to_string() }).await? {
            Response::Get { kv } => Ok(kv),
            other => Err(unexpected(key, other)),
        }
    }

    async fn put(&self, key: &str, value: Vec<u8>, lease: Option<LeaseId>) -> Result<i64, MetaError> {
        match self.request(Request::Put { key: key.to_string(), value, lease }).await? {
            Response::Put { revision } => Ok(revision),
            other => Err(unexpected(key, other)),
        }
    }

    async fn delete(&self, key: &str) -> Result<bool, MetaError> {
        match self.request(Request::Delete { key: key.to_string() }).await? {
            Response::Delete { deleted } => Ok(deleted),
            other => Err(unexpected(key, other)),
        }
    }

    async fn list_with_revision(&self, prefix: &str) -> Result<Listing, MetaError> {
        match self.request(Request::List { prefix: prefix.to_string() }).await? {
            Response::List { listing } => Ok(listing),
            other => Err(unexpected(prefix, other)),
        }
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, MetaError> {
        match self.request(Request::Txn { txn }).await? {
            Response::Txn { response } => Ok(response),
            other => Err(unexpected("", other)),
        }
    }

    async fn watch(&self, prefix: &str, start_revision: Option<i64>) -> Result<WatchStream, MetaError> {
        let connection = self.connection().await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, stream) = watch_channel(&self.address, prefix);
        // Registered before the request, because events may follow the response at once.
        connection.shared.watches.lock().expect("watches lock").insert(id, (prefix.to_string(), sender));
        let request = Request::Watch { prefix: prefix.to_string(), start_revision };
        match self.request_on(&connection, id, request).await {
            Ok(Response::Watch) => {}
            result => {
                connection.shared.watches.lock().expect("watches lock").remove(&id);
                return Err(match result {
                    Err(error) => error,
                    Ok(other) => unexpected(prefix, other),
                });
            }
        }
        let shared: Weak<Shared> = Arc::downgrade(&connection.shared);
        let outgoing = connection.outgoing.downgrade();
        Ok(stream.with_on_drop(move || {
            let Some(shared) = shared.upgrade() else { return };
            if shared.watches.lock().expect("watches lock").remove(&id).is_some() {
                if let Some(outgoing) = outgoing.upgrade() {
                    // If the queue is full the server keeps the watch until the connection
                    // closes; its events are then dropped here.
                    let _ = outgoing.try_send(ClientMessage::CancelWatch { watch_id: id });
                }
            }
        }))
    }

    async fn compact(&self, revision: i64) -> Result<(), MetaError> {
        match self.request(Request::Compact { revision }).await? {
            Response::Compact => Ok(()),
            other => Err(unexpected("", other)),
        }
    }

    async fn lease_grant(&self, ttl_s: u64) -> Result<LeaseId, MetaError> {
        match self.request(Request::LeaseGrant { ttl_s }).await? {
            Response::LeaseGrant { lease } => Ok(lease),
            other => Err(unexpected("", other)),
        }
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<u64, MetaError> {
        match self.request(Request::LeaseKeepAlive { lease }).await? {
            Response::LeaseKeepAlive { ttl_s } => Ok(ttl_s),
            other => Err(unexpected("", other)),
        }
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), MetaError> {
        match self.request(Request::LeaseRevoke { lease }).await? {
            Response::LeaseRevoke => Ok(()),
            other => Err(unexpected("", other)),
        }
    }
}
