//! Tests of the server over real sockets: an in-memory export as the fixture, a raw NBD client
//! that can send anything (valid or not), the protocol tests (`protocol.rs`) and the
//! conformance test with real NBD clients (`interop.rs`).

mod interop;
mod protocol;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::limits::EXPORT_BLOCK_SIZE_BYTES;
use crate::proto::*;
use crate::{Export, ExportError, Exports, Extent, Server};

const PAGE: u64 = EXPORT_BLOCK_SIZE_BYTES;

/// Test fixture: a sparse in-memory export. Pages never written (or trimmed, or zeroed) are
/// holes. It checks the alignment contract of [`Export`] on every call, yields inside every call
/// so concurrent requests interleave, and can be told to fail or to be slow.
#[derive(Clone)]
pub(crate) struct MemoryExport {
    inner: Arc<MemoryInner>,
}

struct MemoryInner {
    name: String,
    size_bytes: u64,
    pages: Mutex<HashMap<u64, Bytes>>,
    /// Every call fails with an I/O error.
    failing: bool,
    /// Reads at or past this offset take 200 ms.
    slow_from_bytes: u64,
    write_zeroes_calls: AtomicU64,
    trim_calls: AtomicU64,
}

impl MemoryExport {
    pub(crate) fn new(name: &str, size_bytes: u64) -> MemoryExport {
        MemoryExport::with(name, size_bytes, false, u64::MAX)
    }

    fn with(name: &str, size_bytes: u64, failing: bool, slow_from_bytes: u64) -> MemoryExport {
        MemoryExport {
            inner: Arc::new(MemoryInner {
                name: name.to_string(),
                size_bytes,
                pages: Mutex::new(HashMap::new()),
                failing,
                slow_from_bytes,
                write_zeroes_calls: AtomicU64::new(0),
                trim_calls: AtomicU64::new(0),
            }),
        }
    }

    fn check(&self, offset_bytes: u64, length_bytes: u64) -> Result<(), ExportError> {
        assert_eq!(offset_bytes % PAGE, 0, "unaligned offset_bytes={offset_bytes}");
        assert_eq!(length_bytes % PAGE, 0, "unaligned length_bytes={length_bytes}");
        assert!(offset_bytes + length_bytes <= self.inner.size_bytes, "call past the end");
        if self.inner.failing {
            return Err(ExportError::Io(format!("injected failure on {}", self.inner.name)));
        }
        Ok(())
    }

    fn remove(&self, offset_bytes: u64, length_bytes: u64) {
        let mut pages = self.inner.pages.lock().unwrap();
        for page in offset_bytes / PAGE..(offset_bytes + length_bytes) / PAGE {
            pages.remove(&page);
        }
    }

    pub(crate) fn stored_pages(&self) -> usize {
        self.inner.pages.lock().unwrap().len()
    }
}

impl Export for MemoryExport {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn description(&self) -> String {
        format!("in-memory test export {}", self.inner.name)
    }

    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes
    }

    async fn read(&self, offset_bytes: u64, length_bytes: u32) -> Result<Bytes, ExportError> {
        self.check(offset_bytes, u64::from(length_bytes))?;
        if offset_bytes >= self.inner.slow_from_bytes {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tokio::task::yield_now().await;
        let mut data = Vec::with_capacity(usize::try_from(length_bytes).unwrap());
        {
            let pages = self.inner.pages.lock().unwrap();
            for page in offset_bytes / PAGE..(offset_bytes + u64::from(length_bytes)) / PAGE {
                match pages.get(&page) {
                    Some(bytes) => data.extend_from_slice(bytes),
                    None => data.resize(data.len() + PAGE as usize, 0),
                }
            }
        }
        tokio::task::yield_now().await;
        Ok(Bytes::from(data))
    }

    async fn write(&self, offset_bytes: u64, data: Bytes) -> Result<(), ExportError> {
        self.check(offset_bytes, data.len() as u64)?;
        tokio::task::yield_now().await;
        let mut pages = self.inner.pages.lock().unwrap();
        for (index, chunk) in data.chunks(PAGE as usize).enumerate() {
            pages.insert(offset_bytes / PAGE + index as u64, Bytes::copy_from_slice(chunk));
        }
        Ok(())
    }

    async fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> Result<(), ExportError> {
        self.check(offset_bytes, length_bytes)?;
        self.inner.write_zeroes_calls.fetch_add(1, Ordering::SeqCst);
        self.remove(offset_bytes, length_bytes);
        Ok(())
    }

    async fn trim(&self, offset_bytes: u64, length_bytes: u64) -> Result<(), ExportError> {
        self.check(offset_bytes, length_bytes)?;
        self.inner.trim_calls.fetch_add(1, Ordering::SeqCst);
        self.remove(offset_bytes, length_bytes);
        Ok(())
    }

    async fn flush(&self) -> Result<(), ExportError> {
        self.check(0, 0)
    }

    async fn block_status(&self, offset_bytes: u64, length_bytes: u64) -> Result<Vec<Extent>, ExportError> {
        self.check(offset_bytes, length_bytes)?;
        let pages = self.inner.pages.lock().unwrap();
        let mut extents: Vec<Extent> = Vec::new();
        for page in offset_bytes / PAGE..(offset_bytes + length_bytes) / PAGE {
            let hole = !pages.contains_key(&page);
            match extents.last_mut() {
                Some(last) if last.hole == hole => last.length_bytes += PAGE,
                _ => extents.push(Extent { length_bytes: PAGE, hole }),
            }
        }
        Ok(extents)
    }
}

/// Test fixture: a fixed set of [`MemoryExport`]s; opening `broken` fails.
pub(crate) struct MemoryExports {
    exports: HashMap<String, MemoryExport>,
}

impl MemoryExports {
    pub(crate) fn new(exports: Vec<MemoryExport>) -> Arc<MemoryExports> {
        Arc::new(MemoryExports {
            exports: exports.into_iter().map(|export| (export.name().to_string(), export)).collect(),
        })
    }

    pub(crate) fn get(&self, name: &str) -> MemoryExport {
        self.exports[name].clone()
    }
}

impl Exports for MemoryExports {
    type Export = MemoryExport;

    async fn open(&self, name: &str) -> Result<Option<MemoryExport>, ExportError> {
        if name == "broken" {
            return Err(ExportError::Io("injected open failure".to_string()));
        }
        Ok(self.exports.get(name).cloned())
    }

    async fn list(&self) -> Result<Vec<String>, ExportError> {
        let mut names: Vec<String> = self.exports.keys().cloned().collect();
        names.sort();
        Ok(names)
    }
}

/// The exports most tests use: `vol` (16 MiB), `small` (64 KiB), `failing` (every call fails)
/// and `slow` (reads from 1 MiB on take 200 ms).
pub(crate) fn standard_exports() -> Arc<MemoryExports> {
    MemoryExports::new(vec![
        MemoryExport::new("vol", 16 << 20),
        MemoryExport::new("small", 64 << 10),
        MemoryExport::with("failing", 1 << 20, true, u64::MAX),
        MemoryExport::with("slow", 2 << 20, false, 1 << 20),
    ])
}

/// Starts a server on an ephemeral loopback port; returns it and its address.
pub(crate) async fn start(exports: Arc<MemoryExports>) -> (Server<MemoryExports>, std::net::SocketAddr) {
    start_with_idle_poll(exports, Duration::ZERO).await
}

/// `start` with `Server::with_idle_poll`.
pub(crate) async fn start_with_idle_poll(
    exports: Arc<MemoryExports>,
    idle_poll: Duration,
) -> (Server<MemoryExports>, std::net::SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = Server::with_idle_poll(exports, idle_poll);
    tokio::spawn({
        let server = server.clone();
        async move { server.serve_tcp(listener).await }
    });
    (server, address)
}

/// A raw NBD client: sends whatever a test asks for, valid or not, and parses replies.
pub(crate) struct RawClient {
    pub(crate) stream: TcpStream,
    /// Structured replies were negotiated.
    pub(crate) structured: bool,
}

/// One option reply.
#[derive(Debug)]
pub(crate) struct OptionReply {
    pub(crate) option: u32,
    pub(crate) reply_type: u32,
    pub(crate) data: Vec<u8>,
}

/// A whole reply to one request (all chunks of a structured reply).
#[derive(Debug, Default)]
pub(crate) struct Reply {
    pub(crate) handle: u64,
    /// 0 on success.
    pub(crate) errno: u32,
    /// Read data, assembled at the request's offset.
    pub(crate) data: Vec<u8>,
    /// `base:allocation` descriptors.
    pub(crate) extents: Vec<(u32, u32)>,
    pub(crate) message: String,
    pub(crate) chunks: usize,
}

impl RawClient {
    /// Connects and reads the greeting; sends `client_flags`.
    pub(crate) async fn connect(address: std::net::SocketAddr, client_flags: u32) -> RawClient {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let mut greeting = [0u8; 18];
        stream.read_exact(&mut greeting).await.unwrap();
        assert_eq!(u64::from_be_bytes(greeting[0..8].try_into().unwrap()), INIT_MAGIC);
        assert_eq!(u64::from_be_bytes(greeting[8..16].try_into().unwrap()), OPTION_MAGIC);
        assert_eq!(u16::from_be_bytes(greeting[16..18].try_into().unwrap()), FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
        stream.write_all(&client_flags.to_be_bytes()).await.unwrap();
        RawClient { stream, structured: false }
    }

    pub(crate) async fn send_option(&mut self, option: u32, data: &[u8]) {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&OPTION_MAGIC.to_be_bytes());
        bytes.extend_from_slice(&option.to_be_bytes());
        bytes.extend_from_slice(&u32::try_from(data.len()).unwrap().to_be_bytes());
        bytes.extend_from_slice(data);
        self.stream.write_all(&bytes).await.unwrap();
    }

    pub(crate) async fn read_option_reply(&mut self) -> OptionReply {
        let mut header = [0u8; 20];
        self.stream.read_exact(&mut header).await.unwrap();
        assert_eq!(u64::from_be_bytes(header[0..8].try_into().unwrap()), OPTION_REPLY_MAGIC);
        let option = u32::from_be_bytes(header[8..12].try_into().unwrap());
        let reply_type = u32::from_be_bytes(header[12..16].try_into().unwrap());
        let length = u32::from_be_bytes(header[16..20].try_into().unwrap());
        let mut data = vec![0u8; usize::try_from(length).unwrap()];
        self.stream.read_exact(&mut data).await.unwrap();
        OptionReply { option, reply_type, data }
    }

    /// Reads replies until the final one (an ACK or an error) and returns them all.
    pub(crate) async fn read_option_replies(&mut self) -> Vec<OptionReply> {
        let mut replies = Vec::new();
        loop {
            let reply = self.read_option_reply().await;
            let last = reply.reply_type == REP_ACK || reply.reply_type & REP_FLAG_ERROR != 0;
            replies.push(reply);
            if last {
                return replies;
            }
        }
    }

    pub(crate) async fn structured_reply(&mut self) {
        self.send_option(OPT_STRUCTURED_REPLY, &[]).await;
        let reply = self.read_option_reply().await;
        assert_eq!(reply.reply_type, REP_ACK);
        self.structured = true;
    }

    pub(crate) async fn set_meta_context(&mut self, name: &str, queries: &[&str]) -> Vec<OptionReply> {
        self.send_option(OPT_SET_META_CONTEXT, &meta_context_data(name, queries)).await;
        self.read_option_replies().await
    }

    /// Sends `NBD_OPT_GO` and returns the replies.
    pub(crate) async fn go(&mut self, name: &str, requests: &[u16]) -> Vec<OptionReply> {
        self.send_option(OPT_GO, &info_data(name, requests)).await;
        self.read_option_replies().await
    }

    /// Negotiates structured replies and `base:allocation` for `name` and enters transmission;
    /// returns the size and transmission flags.
    pub(crate) async fn go_structured(&mut self, name: &str) -> (u64, u16) {
        self.structured_reply().await;
        let replies = self.set_meta_context(name, &["base:allocation"]).await;
        assert_eq!(replies[0].reply_type, REP_META_CONTEXT);
        let replies = self.go(name, &[INFO_BLOCK_SIZE]).await;
        export_info(&replies)
    }

    pub(crate) async fn send_request(
        &mut self,
        command: u16,
        flags: u16,
        handle: u64,
        offset_bytes: u64,
        payload_or_length: Payload<'_>,
    ) {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        bytes.extend_from_slice(&flags.to_be_bytes());
        bytes.extend_from_slice(&command.to_be_bytes());
        bytes.extend_from_slice(&handle.to_be_bytes());
        bytes.extend_from_slice(&offset_bytes.to_be_bytes());
        match payload_or_length {
            Payload::Length(length) => bytes.extend_from_slice(&length.to_be_bytes()),
            Payload::Data(data) => {
                bytes.extend_from_slice(&u32::try_from(data.len()).unwrap().to_be_bytes());
                bytes.extend_from_slice(data);
            }
        }
        self.stream.write_all(&bytes).await.unwrap();
    }

    /// Reads one whole reply. `read_length` is the data length to expect in a simple reply
    /// (the caller knows which handle it waits for); structured replies carry their lengths.
    pub(crate) async fn read_reply(&mut self, read_length: impl Fn(u64) -> usize) -> Reply {
        let mut magic = [0u8; 4];
        self.stream.read_exact(&mut magic).await.unwrap();
        match u32::from_be_bytes(magic) {
            SIMPLE_REPLY_MAGIC => {
                let mut rest = [0u8; 12];
                self.stream.read_exact(&mut rest).await.unwrap();
                let errno = u32::from_be_bytes(rest[0..4].try_into().unwrap());
                let handle = u64::from_be_bytes(rest[4..12].try_into().unwrap());
                let mut data = Vec::new();
                if errno == 0 {
                    data = vec![0u8; read_length(handle)];
                    self.stream.read_exact(&mut data).await.unwrap();
                }
                Reply { handle, errno, data, chunks: 1, ..Reply::default() }
            }
            STRUCTURED_REPLY_MAGIC => {
                assert!(self.structured, "structured reply without negotiation");
                let mut reply = Reply::default();
                let mut first = true;
                loop {
                    if !first {
                        self.stream.read_exact(&mut magic).await.unwrap();
                        assert_eq!(u32::from_be_bytes(magic), STRUCTURED_REPLY_MAGIC);
                    }
                    first = false;
                    let mut rest = [0u8; 16];
                    self.stream.read_exact(&mut rest).await.unwrap();
                    let flags = u16::from_be_bytes(rest[0..2].try_into().unwrap());
                    let reply_type = u16::from_be_bytes(rest[2..4].try_into().unwrap());
                    reply.handle = u64::from_be_bytes(rest[4..12].try_into().unwrap());
                    let length = u32::from_be_bytes(rest[12..16].try_into().unwrap());
                    let mut payload = vec![0u8; usize::try_from(length).unwrap()];
                    self.stream.read_exact(&mut payload).await.unwrap();
                    reply.chunks += 1;
                    match reply_type {
                        REPLY_TYPE_NONE => assert!(payload.is_empty()),
                        REPLY_TYPE_OFFSET_DATA => reply.data.extend_from_slice(&payload[8..]),
                        REPLY_TYPE_BLOCK_STATUS => {
                            assert_eq!(u32::from_be_bytes(payload[0..4].try_into().unwrap()), BASE_ALLOCATION_ID);
                            for descriptor in payload[4..].chunks(8) {
                                reply.extents.push((
                                    u32::from_be_bytes(descriptor[0..4].try_into().unwrap()),
                                    u32::from_be_bytes(descriptor[4..8].try_into().unwrap()),
                                ));
                            }
                        }
                        REPLY_TYPE_ERROR => {
                            reply.errno = u32::from_be_bytes(payload[0..4].try_into().unwrap());
                            let message_length = usize::from(u16::from_be_bytes(payload[4..6].try_into().unwrap()));
                            reply.message = String::from_utf8(payload[6..6 + message_length].to_vec()).unwrap();
                        }
                        other => panic!("unexpected chunk type {other}"),
                    }
                    if flags & REPLY_FLAG_DONE != 0 {
                        return reply;
                    }
                }
            }
            other => panic!("bad reply magic {other:#x}"),
        }
    }

    /// Sends one request and waits for its reply (nothing else in flight).
    pub(crate) async fn request(&mut self, command: u16, flags: u16, offset_bytes: u64, payload: Payload<'_>) -> Reply {
        let read_length = match (command, &payload) {
            (CMD_READ, Payload::Length(length)) => usize::try_from(*length).unwrap(),
            _ => 0,
        };
        self.send_request(command, flags, 1, offset_bytes, payload).await;
        let reply = self.read_reply(|_| read_length).await;
        assert_eq!(reply.handle, 1);
        reply
    }

    pub(crate) async fn read(&mut self, offset_bytes: u64, length_bytes: u32) -> Reply {
        self.request(CMD_READ, 0, offset_bytes, Payload::Length(length_bytes)).await
    }

    pub(crate) async fn write(&mut self, offset_bytes: u64, data: &[u8]) -> Reply {
        self.request(CMD_WRITE, 0, offset_bytes, Payload::Data(data)).await
    }

    /// True if the server closed the connection (reads end of stream or a reset).
    pub(crate) async fn is_closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        match tokio::time::timeout(Duration::from_secs(5), self.stream.read(&mut byte)).await {
            Ok(Ok(0)) | Ok(Err(_)) => true,
            Ok(Ok(_)) => false,
            Err(_) => false,
        }
    }
}

pub(crate) enum Payload<'a> {
    Length(u32),
    Data(&'a [u8]),
}

pub(crate) fn info_data(name: &str, requests: &[u16]) -> Vec<u8> {
    let mut data = Vec::new();
    data.extend_from_slice(&u32::try_from(name.len()).unwrap().to_be_bytes());
    data.extend_from_slice(name.as_bytes());
    data.extend_from_slice(&u16::try_from(requests.len()).unwrap().to_be_bytes());
    for request in requests {
        data.extend_from_slice(&request.to_be_bytes());
    }
    data
}

pub(crate) fn meta_context_data(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut data = Vec::new();
    data.extend_from_slice(&u32::try_from(name.len()).unwrap().to_be_bytes());
    data.extend_from_slice(name.as_bytes());
    data.extend_from_slice(&u32::try_from(queries.len()).unwrap().to_be_bytes());
    for query in queries {
        data.extend_from_slice(&u32::try_from(query.len()).unwrap().to_be_bytes());
        data.extend_from_slice(query.as_bytes());
    }
    data
}

/// The size and transmission flags from the `NBD_INFO_EXPORT` among successful GO/INFO replies.
pub(crate) fn export_info(replies: &[OptionReply]) -> (u64, u16) {
    assert_eq!(replies.last().unwrap().reply_type, REP_ACK, "option failed: {replies:?}");
    let info = replies
        .iter()
        .find(|reply| reply.reply_type == REP_INFO && reply.data[0..2] == INFO_EXPORT.to_be_bytes())
        .expect("no NBD_INFO_EXPORT");
    (
        u64::from_be_bytes(info.data[2..10].try_into().unwrap()),
        u16::from_be_bytes(info.data[10..12].try_into().unwrap()),
    )
}

/// A recognisable pattern for `length` bytes written at `offset_bytes` with tag `tag`.
pub(crate) fn pattern(offset_bytes: u64, length: usize, tag: u8) -> Vec<u8> {
    (0..length as u64).map(|index| ((offset_bytes + index) % 251) as u8 ^ tag).collect()
}
