//! The socket side: accept loops for TCP and unix sockets, the handshake driver and the
//! transmission loop of one connection.
//!
//! One task per connection does everything for it, with no hand-off to another task or thread:
//! it reads requests into one buffer, runs up to `REQUESTS_IN_FLIGHT_MAX` of them at once inside
//! itself (a `FuturesUnordered`), and writes each reply as soon as it completes, so replies go
//! out in completion order. Reading and writing are polled together, so a client that writes a
//! large request while the server writes a large reply cannot deadlock the two.
//!
//! A malformed request or handshake closes only its connection; the server and every other
//! connection go on.

use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::export::{Export, Exports};
use crate::handshake::{
    greeting, parse_client_flags, parse_option, parse_option_header, ExportInfo, Found, HandshakeError, Need,
    Negotiation, Next, Transmission,
};
use crate::limits::{
    CONNECTIONS_MAX, HANDSHAKE_TIMEOUT_SECONDS, IN_FLIGHT_BYTES_MAX, READ_CHUNK_BYTES, REQUESTS_IN_FLIGHT_MAX,
    SEND_QUEUE_BYTES_MAX, WRITE_SEGMENTS_MAX,
};
use crate::ops::{execute, Outcome};
use crate::proto::OPTION_HEADER_SIZE_BYTES;
use crate::ranges::RangeLocks;
use crate::request::{
    put_block_status, put_data_header, put_done, put_error_chunk, put_simple_reply, take_request, wanted_bytes,
    Command, Parsed, StreamError,
};

/// Seconds connections get to finish their requests after [`Server::shutdown`] before they are
/// dropped.
const SHUTDOWN_DRAIN_SECONDS: u64 = 10;

/// Pause after a failed `accept` (for instance out of file descriptors) before the next one.
const ACCEPT_RETRY_MILLISECONDS: u64 = 100;

/// Why a connection ended early. Logged, never returned to the caller of a serve loop.
#[derive(Debug, thiserror::Error)]
enum ConnectionError {
    #[error("socket error: {0}")]
    Io(#[from] io::Error),
    #[error("handshake violation: {0}")]
    Handshake(#[from] HandshakeError),
    #[error("malformed request: {0}")]
    Stream(#[from] StreamError),
    #[error("handshake not finished within {HANDSHAKE_TIMEOUT_SECONDS} s")]
    HandshakeTimeout,
    #[error("the stream ended inside a request ({buffered_bytes} bytes buffered)")]
    Truncated { buffered_bytes: usize },
}

/// An NBD server for a set of exports. Cheap to clone; every clone is the same server.
///
/// Run [`Server::serve_tcp`] and [`Server::serve_unix`] (any number, at once) on one `Server` so
/// that all its connections share the per-export range locks of read-modify-writes.
pub struct Server<X: Exports> {
    shared: Arc<Shared<X>>,
}

struct Shared<X> {
    exports: Arc<X>,
    /// The range locks of every export with a connection in the transmission phase, by name.
    locks: Mutex<HashMap<String, Weak<RangeLocks>>>,
    shutdown: watch::Sender<bool>,
    connections: Arc<Semaphore>,
    /// See `Server::with_idle_poll`.
    idle_poll: Duration,
}

impl<X: Exports> Clone for Server<X> {
    fn clone(&self) -> Self {
        Server { shared: self.shared.clone() }
    }
}

impl<X: Exports> Server<X> {
    pub fn new(exports: Arc<X>) -> Server<X> {
        Server::with_idle_poll(exports, Duration::ZERO)
    }

    /// A server whose connections, once they have answered everything, poll for the client's
    /// next request for up to `limit` before sleeping, while the client's requests have
    /// followed the replies within `limit` on average (a client at queue depth 1 sends the
    /// next request microseconds after it reads a reply, and catching it awake saves a thread
    /// wake-up). Worth it only on a `current_thread` runtime, where a yield polls the sockets.
    pub fn with_idle_poll(exports: Arc<X>, limit: Duration) -> Server<X> {
        Server {
            shared: Arc::new(Shared {
                exports,
                locks: Mutex::new(HashMap::new()),
                shutdown: watch::Sender::new(false),
                connections: Arc::new(Semaphore::new(CONNECTIONS_MAX)),
                idle_poll: limit,
            }),
        }
    }

    /// Stops every serve loop of this server: they stop accepting, refuse further options of
    /// connections still in the handshake, let connections in the transmission phase finish the
    /// requests they have read (reading no more), and return once all connections are closed
    /// (connections still busy after a grace period are dropped).
    pub fn shutdown(&self) {
        self.shared.shutdown.send_replace(true);
    }

    /// Accepts and serves TCP clients until [`Server::shutdown`].
    pub async fn serve_tcp(&self, listener: TcpListener) {
        self.serve(Listener::Tcp(listener)).await;
    }

    /// Accepts and serves clients on a unix socket until [`Server::shutdown`].
    pub async fn serve_unix(&self, listener: UnixListener) {
        self.serve(Listener::Unix(listener)).await;
    }

    async fn serve(&self, listener: Listener) {
        let mut shutdown = self.shared.shutdown.subscribe();
        let mut connections = JoinSet::new();
        loop {
            while connections.try_join_next().is_some() {}
            let permit = tokio::select! {
                permit = self.shared.connections.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
                _ = shutdown.wait_for(|stopping| *stopping) => break,
            };
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = shutdown.wait_for(|stopping| *stopping) => break,
            };
            match accepted {
                Ok((socket, peer)) => {
                    let server = self.clone();
                    connections.spawn(async move {
                        let _permit = permit;
                        server.serve_socket(socket, peer).await;
                    });
                }
                Err(error) => {
                    tracing::warn!(%error, "accept failed; retrying");
                    tokio::time::sleep(Duration::from_millis(ACCEPT_RETRY_MILLISECONDS)).await;
                }
            }
        }
        drop(listener);
        let drained = tokio::time::timeout(Duration::from_secs(SHUTDOWN_DRAIN_SECONDS), async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                connections = connections.len(),
                "dropping connections still busy after the shutdown grace period"
            );
            connections.shutdown().await;
        }
    }

    async fn serve_socket(&self, socket: Socket, peer: String) {
        let result = match socket {
            Socket::Tcp(mut stream) => {
                let (reader, writer) = stream.split();
                self.serve_connection(reader, writer, &peer).await
            }
            Socket::Unix(mut stream) => {
                let (reader, writer) = stream.split();
                self.serve_connection(reader, writer, &peer).await
            }
        };
        log_end(&peer, result);
    }

    /// Serves one connection its caller accepted, on any byte stream, until it ends: what the
    /// whole-cluster simulation does with the streams of its network, accepting them in the
    /// gateway node's own tasks (`crates/sim-cluster`). [`Server::shutdown`] stops it reading
    /// requests as it does a serve loop's connections; dropping a connection still busy after
    /// the grace period is the caller's to do.
    pub async fn serve_stream<S: AsyncRead + AsyncWrite>(&self, stream: S, peer: &str) {
        let (reader, writer) = tokio::io::split(stream);
        log_end(peer, self.serve_connection(reader, writer, peer).await);
    }

    /// Serves one connection: the handshake, then the transmission phase.
    async fn serve_connection<R, W>(&self, mut reader: R, mut writer: W, peer: &str) -> Result<(), ConnectionError>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let handshake = self.handshake(&mut reader, &mut writer);
        let agreed = match tokio::time::timeout(Duration::from_secs(HANDSHAKE_TIMEOUT_SECONDS), handshake).await {
            Ok(agreed) => agreed?,
            Err(_) => return Err(ConnectionError::HandshakeTimeout),
        };
        let Some((transmission, export)) = agreed else {
            return Ok(());
        };
        tracing::debug!(%peer, export = %transmission.export_name, size_bytes = transmission.size_bytes, structured = transmission.structured,
            "entering the transmission phase");
        let locks = self.locks(export.name());
        let mut shutdown = self.shared.shutdown.subscribe();
        let session = Session {
            transmission: &transmission,
            export: &export,
            locks: &locks,
            idle_poll: self.shared.idle_poll,
            peer,
        };
        let result = transmit(&mut reader, &mut writer, session, &mut shutdown).await;
        writer.shutdown().await.ok();
        result
    }

    /// Runs the option haggling. Returns what was agreed for the transmission phase and the
    /// opened export, or `None` if the client left or aborted.
    async fn handshake<R, W>(
        &self,
        reader: &mut R,
        writer: &mut W,
    ) -> Result<Option<(Transmission, X::Export)>, ConnectionError>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        writer.write_all(&greeting()).await?;
        let mut flags = [0u8; 4];
        reader.read_exact(&mut flags).await?;
        let mut negotiation = Negotiation::new(parse_client_flags(flags)?);
        let shutdown = self.shared.shutdown.subscribe();
        let mut out = Vec::new();
        loop {
            let mut header = [0u8; OPTION_HEADER_SIZE_BYTES];
            match reader.read_exact(&mut header).await {
                Ok(_) => {}
                Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
                Err(error) => return Err(error.into()),
            }
            let header = parse_option_header(&header)?;
            let mut data =
                vec![0u8; usize::try_from(header.length_bytes).expect("bounded by OPTION_DATA_SIZE_MAX_BYTES")];
            reader.read_exact(&mut data).await?;
            let option = parse_option(header.option, &data);
            negotiation.shutting_down = *shutdown.borrow();
            let mut opened = None;
            let found = match negotiation.needs(&option) {
                Need::Nothing => Found::Nothing,
                Need::List => Found::List(self.shared.exports.list().await.map_err(|error| error.to_string())),
                Need::Export(name) => match self.shared.exports.open(&name).await {
                    Ok(Some(export)) => {
                        let info = ExportInfo {
                            name: export.name().to_string(),
                            description: export.description(),
                            size_bytes: export.size_bytes(),
                            read_only: export.read_only(),
                            bitmaps: export.bitmaps(),
                        };
                        opened = Some(export);
                        Found::Export(Ok(Some(info)))
                    }
                    Ok(None) => Found::Export(Ok(None)),
                    Err(error) => Found::Export(Err(error.to_string())),
                },
            };
            out.clear();
            let next = negotiation.respond(option, found, &mut out)?;
            writer.write_all(&out).await?;
            match next {
                Next::Continue => {}
                Next::Close => return Ok(None),
                Next::Transmit(transmission) => {
                    let export = opened.expect("only an option that opened an export enters transmission");
                    return Ok(Some((transmission, export)));
                }
            }
        }
    }

    fn locks(&self, name: &str) -> Arc<RangeLocks> {
        let mut locks = self.shared.locks.lock().expect("range lock registry poisoned");
        if let Some(existing) = locks.get(name).and_then(Weak::upgrade) {
            return existing;
        }
        locks.retain(|_, weak| weak.strong_count() > 0);
        let created = Arc::new(RangeLocks::default());
        locks.insert(name.to_string(), Arc::downgrade(&created));
        created
    }
}

fn log_end(peer: &str, result: Result<(), ConnectionError>) {
    match result {
        Ok(()) => tracing::debug!(%peer, "connection closed"),
        Err(ConnectionError::Io(error)) => tracing::debug!(%peer, %error, "connection ended by a socket error"),
        Err(error) => tracing::warn!(%peer, %error, "closing connection"),
    }
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    async fn accept(&self) -> io::Result<(Socket, String)> {
        match self {
            Listener::Tcp(listener) => {
                let (stream, address) = listener.accept().await?;
                if let Err(error) = stream.set_nodelay(true) {
                    tracing::debug!(peer = %address, %error, "cannot set TCP_NODELAY");
                }
                Ok((Socket::Tcp(stream), address.to_string()))
            }
            Listener::Unix(listener) => {
                let (stream, address) = listener.accept().await?;
                let peer = match address.as_pathname() {
                    Some(path) => format!("unix:{}", path.display()),
                    None => "a unix socket client".to_string(),
                };
                Ok((Socket::Unix(stream), peer))
            }
        }
    }
}

enum Socket {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

/// Reply bytes waiting for the socket: small encoded headers and read data, sent with vectored
/// writes so read data is never copied.
#[derive(Default)]
struct SendQueue {
    segments: VecDeque<Bytes>,
    size_bytes: u64,
}

impl SendQueue {
    fn push(&mut self, segment: Bytes) {
        if !segment.is_empty() {
            self.size_bytes += segment.len() as u64;
            self.segments.push_back(segment);
        }
    }

    fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    fn advance(&mut self, mut written_bytes: usize) {
        self.size_bytes -= written_bytes as u64;
        while written_bytes > 0 {
            let front = self.segments.front_mut().expect("a write never reports more than was queued");
            if written_bytes < front.len() {
                front.advance(written_bytes);
                return;
            }
            written_bytes -= front.len();
            self.segments.pop_front();
        }
    }
}

async fn write_some<W: AsyncWrite + Unpin>(writer: &mut W, queue: &SendQueue) -> io::Result<usize> {
    let slices: Vec<IoSlice<'_>> =
        queue.segments.iter().take(WRITE_SEGMENTS_MAX).map(|segment| IoSlice::new(segment)).collect();
    let written = writer.write_vectored(&slices).await?;
    if written == 0 {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "the peer no longer accepts data"));
    }
    Ok(written)
}

/// Ends an idle period at the arrival of the client's bytes and folds its length into the
/// moving average (weight 1/8).
fn note_request_gap(idle_since: &mut Option<Instant>, average: &mut Duration) {
    if let Some(since) = idle_since.take() {
        *average = *average - *average / 8 + since.elapsed() / 8;
    }
}

/// Payload bytes a request holds while in flight: a write's data or a read's result.
fn request_cost_bytes(command: &Command) -> u64 {
    match *command {
        Command::Read { length_bytes, .. } | Command::Write { length_bytes, .. } => u64::from(length_bytes),
        _ => 0,
    }
}

/// What the transmission phase of one connection serves, and how.
struct Session<'a, E> {
    transmission: &'a Transmission,
    export: &'a E,
    locks: &'a Arc<RangeLocks>,
    /// See `Server::with_idle_poll`.
    idle_poll: Duration,
    peer: &'a str,
}

/// The transmission phase of one connection.
async fn transmit<R, W, E>(
    reader: &mut R,
    writer: &mut W,
    session: Session<'_, E>,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), ConnectionError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
    E: Export,
{
    let Session { transmission, export, locks, idle_poll, peer } = session;
    let contexts = &transmission.contexts;
    let mut input = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut queue = SendQueue::default();
    let mut headers = BytesMut::new();
    let mut in_flight = FuturesUnordered::new();
    let mut in_flight_bytes = 0u64;
    let mut reading = true;
    let mut end_of_stream = false;
    // When this connection last fell idle (every reply written), and the moving average of
    // how long the client then took to send its next request (see `Server::with_idle_poll`).
    let mut idle_since: Option<Instant> = None;
    let mut request_gap_average = Duration::ZERO;
    loop {
        // Start every complete request already buffered, within the bounds.
        while reading
            && in_flight.len() < REQUESTS_IN_FLIGHT_MAX
            && in_flight_bytes < IN_FLIGHT_BYTES_MAX
            && queue.size_bytes < SEND_QUEUE_BYTES_MAX
        {
            match take_request(&mut input, transmission)? {
                None if end_of_stream && input.is_empty() => {
                    reading = false;
                }
                None if end_of_stream => {
                    return Err(ConnectionError::Truncated { buffered_bytes: input.len() });
                }
                None => break,
                Some(Parsed::Disconnect) => {
                    reading = false;
                }
                Some(Parsed::Refused { header, rejection }) => {
                    let message = &rejection.message;
                    tracing::debug!(%peer, handle = header.handle, command = header.command, %message, "refusing request");
                    put_error(&mut headers, &mut queue, transmission, header.handle, rejection.errno, message);
                }
                Some(Parsed::Run { header, command, payload }) => {
                    let cost = request_cost_bytes(&command);
                    in_flight_bytes += cost;
                    let handle = header.handle;
                    in_flight
                        .push(async move { (handle, cost, execute(export, locks, contexts, command, payload).await) });
                }
            }
        }
        if !reading && in_flight.is_empty() && queue.is_empty() {
            writer.flush().await?;
            return Ok(());
        }
        // After the end of the stream, requests still buffered are started as the bounds allow.
        let want_input = reading
            && !end_of_stream
            && in_flight.len() < REQUESTS_IN_FLIGHT_MAX
            && in_flight_bytes < IN_FLIGHT_BYTES_MAX
            && queue.size_bytes < SEND_QUEUE_BYTES_MAX;
        if want_input {
            let missing = wanted_bytes(&input).saturating_sub(input.len()).max(1);
            if input.capacity() - input.len() < missing {
                input.reserve(missing.max(READ_CHUNK_BYTES));
            }
        }
        let idle = in_flight.is_empty() && queue.is_empty();
        if idle && idle_since.is_none() {
            idle_since = Some(Instant::now());
        }
        if want_input && idle && !idle_poll.is_zero() && request_gap_average <= idle_poll {
            // Poll for the next request instead of sleeping (yielding lets the runtime poll
            // the sockets without blocking); the read is retried in `select!` below.
            let started = Instant::now();
            let mut read = None;
            while started.elapsed() < idle_poll {
                if let Some(result) = reader.read_buf(&mut input).now_or_never() {
                    read = Some(result);
                    break;
                }
                tokio::task::yield_now().await;
            }
            if let Some(result) = read {
                if result? == 0 {
                    end_of_stream = true;
                }
                note_request_gap(&mut idle_since, &mut request_gap_average);
                continue;
            }
        }
        tokio::select! {
            biased;
            Some((handle, cost, outcome)) = in_flight.next(), if !in_flight.is_empty() => {
                in_flight_bytes -= cost;
                put_outcome(&mut headers, &mut queue, transmission, handle, outcome, export.name(), peer);
            }
            written = write_some(writer, &queue), if !queue.is_empty() => {
                queue.advance(written?);
            }
            read = reader.read_buf(&mut input), if want_input => {
                if read? == 0 {
                    end_of_stream = true;
                }
                note_request_gap(&mut idle_since, &mut request_gap_average);
            }
            _ = shutdown.wait_for(|stopping| *stopping), if reading => {
                tracing::debug!(%peer, "server shutting down: reading no further requests");
                reading = false;
            }
        }
    }
}

/// Reply headers are encoded into one buffer and split off as they are queued; it is refilled in
/// large steps so a reply header costs no allocation of its own.
const HEADER_BUFFER_BYTES: usize = 64 << 10;

/// Makes room in the header buffer for one reply header (an error message included).
fn reserve_header(headers: &mut BytesMut) {
    if headers.capacity() < 2 * crate::limits::STRING_SIZE_MAX_BYTES {
        headers.reserve(HEADER_BUFFER_BYTES);
    }
}

fn put_error(
    headers: &mut BytesMut,
    queue: &mut SendQueue,
    transmission: &Transmission,
    handle: u64,
    errno: u32,
    message: &str,
) {
    reserve_header(headers);
    if transmission.structured {
        put_error_chunk(headers, handle, errno, message);
    } else {
        put_simple_reply(headers, handle, errno);
    }
    queue.push(headers.split().freeze());
}

fn put_outcome(
    headers: &mut BytesMut,
    queue: &mut SendQueue,
    transmission: &Transmission,
    handle: u64,
    outcome: Outcome,
    export_name: &str,
    peer: &str,
) {
    reserve_header(headers);
    match outcome {
        Outcome::Done => put_simple_reply(headers, handle, 0),
        Outcome::Data { offset_bytes, data } => {
            let length = u32::try_from(data.len()).expect("reads are bounded by the payload limit");
            if !transmission.structured {
                put_simple_reply(headers, handle, 0);
            } else if length == 0 {
                put_done(headers, handle);
            } else {
                put_data_header(headers, handle, offset_bytes, length);
            }
            queue.push(headers.split().freeze());
            queue.push(data);
            return;
        }
        Outcome::Extents(replies) => {
            for (index, (context_id, descriptors)) in replies.iter().enumerate() {
                put_block_status(headers, handle, *context_id, descriptors, index + 1 == replies.len());
            }
        }
        Outcome::Failed(error) => {
            tracing::warn!(%peer, export = %export_name, handle, %error, "request failed");
            put_error(headers, queue, transmission, handle, error.errno(), &error.to_string());
            return;
        }
    }
    queue.push(headers.split().freeze());
}
