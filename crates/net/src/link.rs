//! `Link`: one stream (TCP or Unix socket) shared by the tasks that send on it, the reader that reads it, and
//! its close state.
//!
//! Sending: a sender encodes its frame into the link's send buffer under a mutex and, when no
//! writer task is active, writes the buffer to the socket at once (`try_write`), on its own
//! thread. If the socket would block, the rest stays queued and a writer task is spawned that
//! waits for the socket to become writable; frames sent meanwhile are appended to the buffer
//! and leave with it in one write. The buffer is empty exactly when no writer task is active.
//! A sender may also ask to coalesce: the first frame then waits in the buffer for a writer
//! task spawned at once, so frames other tasks on the thread send meanwhile share its write.
//!
//! Closing: the first reason wins. Closing shuts the socket down in both directions, which
//! wakes the reader (end of stream) and the writer task (the socket reports writable), and
//! drops whatever was still queued.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use wire::{Decoder, Frame};

use crate::limits::{READ_CHUNK_BYTES, SEND_BUFFER_RETAINED_BYTES, SEND_QUEUE_BYTES_MAX};
use crate::stream::Stream;
use crate::NetError;

pub(crate) struct Link {
    stream: Stream,
    peer: Arc<str>,
    queue: Mutex<SendQueue>,
    /// Wakes senders waiting for the queue to drop below `SEND_QUEUE_BYTES_MAX`, and wakes
    /// them all when the link closes.
    room: Notify,
    /// Mirrors `SendQueue::close_reason.is_some()` for lock-free checks.
    closed: AtomicBool,
}

struct SendQueue {
    /// Encoded frames; `bytes[..written]` has already gone to the socket.
    bytes: Vec<u8>,
    written: usize,
    /// A writer task owns draining `bytes`. False exactly when `bytes` is empty.
    writer_active: bool,
    close_reason: Option<Arc<str>>,
}

impl SendQueue {
    fn queued_bytes(&self) -> usize {
        self.bytes.len() - self.written
    }
}

impl Link {
    pub(crate) fn new(stream: Stream, peer: Arc<str>) -> Arc<Link> {
        Arc::new(Link {
            stream,
            peer,
            queue: Mutex::new(SendQueue { bytes: Vec::new(), written: 0, writer_active: false, close_reason: None }),
            room: Notify::new(),
            closed: AtomicBool::new(false),
        })
    }

    pub(crate) fn peer(&self) -> &Arc<str> {
        &self.peer
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The error every operation on a closed link returns.
    pub(crate) fn closed_error(&self) -> NetError {
        let queue = self.lock();
        let reason = queue.close_reason.clone().unwrap_or_else(|| Arc::from("closed"));
        NetError::Closed { peer: self.peer.clone(), reason }
    }

    fn lock(&self) -> MutexGuard<'_, SendQueue> {
        self.queue.lock().expect("send queue lock poisoned")
    }

    /// Sends `frame`, first waiting while the queue holds `SEND_QUEUE_BYTES_MAX` or more.
    ///
    /// With `coalesce`, an idle socket is not written at once: a writer task is spawned and
    /// frames other tasks send before it runs leave with this one in a single write. Worth it
    /// only on a `current_thread` runtime (the task runs after the tasks already woken on this
    /// thread, not on another worker) and when more frames are likely to follow soon.
    pub(crate) async fn send(self: &Arc<Self>, frame: &Frame, coalesce: bool) -> Result<(), NetError> {
        while !self.enqueue(std::slice::from_ref(frame), true, coalesce)? {
            self.wait_for_room().await?;
        }
        Ok(())
    }

    /// Sends `frames` without waiting, whatever the queue holds, in one write if the socket
    /// takes them.
    pub(crate) fn send_now(self: &Arc<Self>, frames: &[&Frame]) -> Result<(), NetError> {
        let sent = self.enqueue(frames, false, false)?;
        assert!(sent);
        Ok(())
    }

    /// Waits until the queue holds less than `SEND_QUEUE_BYTES_MAX`.
    pub(crate) async fn ready(&self) -> Result<(), NetError> {
        loop {
            if self.wait_for_room().await? {
                return Ok(());
            }
        }
    }

    /// Encodes `frames` into the queue and, unless `coalesce`, writes them now if no writer
    /// task is active. Returns false, having done nothing, when `bounded` and the queue is full.
    fn enqueue<F: std::borrow::Borrow<Frame>>(
        self: &Arc<Self>,
        frames: &[F],
        bounded: bool,
        coalesce: bool,
    ) -> Result<bool, NetError> {
        let mut queue = self.lock();
        if let Some(reason) = &queue.close_reason {
            return Err(NetError::Closed { peer: self.peer.clone(), reason: reason.clone() });
        }
        if bounded && queue.queued_bytes() >= SEND_QUEUE_BYTES_MAX {
            return Ok(false);
        }
        for frame in frames {
            frame.borrow().encode(&mut queue.bytes);
        }
        if queue.writer_active {
            return Ok(true);
        }
        assert_eq!(queue.written, 0);
        if coalesce {
            queue.writer_active = true;
            drop(queue);
            tokio::spawn(write_soon(self.clone()));
            return Ok(true);
        }
        match self.write_queued(&mut queue) {
            Ok(true) => Ok(true),
            Ok(false) => {
                queue.writer_active = true;
                drop(queue);
                tokio::spawn(write_when_ready(self.clone()));
                Ok(true)
            }
            Err(error) => {
                drop(queue);
                self.close(&format!("write failed: {error}"));
                Err(self.closed_error())
            }
        }
    }

    /// Writes queued bytes until the queue is empty (`Ok(true)`) or the socket would block
    /// (`Ok(false)`).
    fn write_queued(&self, queue: &mut SendQueue) -> io::Result<bool> {
        while queue.written < queue.bytes.len() {
            match self.stream.try_write(&queue.bytes[queue.written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(size_bytes) => queue.written += size_bytes,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    // Keep appends cheap: move the unwritten tail to the front once the written
                    // head is at least half the buffer.
                    if queue.written >= queue.bytes.len() / 2 {
                        let written = queue.written;
                        queue.bytes.drain(..written);
                        queue.written = 0;
                    }
                    return Ok(false);
                }
                Err(error) => return Err(error),
            }
        }
        queue.bytes.clear();
        queue.written = 0;
        queue.bytes.shrink_to(SEND_BUFFER_RETAINED_BYTES);
        Ok(true)
    }

    /// Returns `Ok(true)` if the queue has room now, `Ok(false)` after waiting for a change.
    async fn wait_for_room(&self) -> Result<bool, NetError> {
        if self.has_room()? {
            return Ok(true);
        }
        let notified = self.room.notified();
        tokio::pin!(notified);
        // Registered before the second check, so a wake-up between it and the wait is not lost.
        notified.as_mut().enable();
        if self.has_room()? {
            return Ok(true);
        }
        notified.await;
        Ok(false)
    }

    fn has_room(&self) -> Result<bool, NetError> {
        let queue = self.lock();
        if let Some(reason) = &queue.close_reason {
            return Err(NetError::Closed { peer: self.peer.clone(), reason: reason.clone() });
        }
        Ok(queue.queued_bytes() < SEND_QUEUE_BYTES_MAX)
    }

    /// Closes the link for `reason`. Returns false if it was already closed (the first reason
    /// stays).
    pub(crate) fn close(&self, reason: &str) -> bool {
        let mut queue = self.lock();
        if queue.close_reason.is_some() {
            return false;
        }
        queue.close_reason = Some(Arc::from(reason));
        queue.bytes = Vec::new();
        queue.written = 0;
        self.closed.store(true, Ordering::Release);
        drop(queue);
        tracing::debug!(peer = %self.peer, reason, "connection closed");
        if let Err(error) = self.stream.shutdown() {
            // The peer may have gone first (ENOTCONN); the socket is closed either way.
            tracing::debug!(peer = %self.peer, %error, "shutdown of a closing connection failed");
        }
        self.room.notify_waiters();
        true
    }
}

/// The writer task of a coalesced send: writes what the other tasks queued meanwhile, then
/// stays on as the writer task if the socket is full.
async fn write_soon(link: Arc<Link>) {
    if link.drain_once() {
        write_when_ready(link).await;
    }
}

/// The writer task: drains the queue whenever the socket can take more, then exits.
async fn write_when_ready(link: Arc<Link>) {
    loop {
        if let Err(error) = link.stream.writable().await {
            link.close(&format!("write failed: {error}"));
            return;
        }
        if !link.drain_once() {
            return;
        }
    }
}

impl Link {
    /// One attempt of the writer task to drain the queue. Returns whether it must wait for
    /// the socket and try again.
    fn drain_once(&self) -> bool {
        let mut queue = self.lock();
        if queue.close_reason.is_some() {
            return false;
        }
        let was_full = queue.queued_bytes() >= SEND_QUEUE_BYTES_MAX;
        match self.write_queued(&mut queue) {
            Ok(drained) => {
                if drained {
                    queue.writer_active = false;
                }
                let has_room = queue.queued_bytes() < SEND_QUEUE_BYTES_MAX;
                drop(queue);
                if was_full && has_room {
                    self.room.notify_waiters();
                }
                !drained
            }
            Err(error) => {
                drop(queue);
                self.close(&format!("write failed: {error}"));
                false
            }
        }
    }
}

/// Reads frames from a link: the receiving half of either side.
pub struct FrameReader {
    link: Arc<Link>,
    decoder: Decoder,
    chunk: Box<[u8]>,
}

impl FrameReader {
    pub(crate) fn new(link: Arc<Link>) -> FrameReader {
        FrameReader { link, decoder: Decoder::default(), chunk: vec![0u8; READ_CHUNK_BYTES].into_boxed_slice() }
    }

    /// The next frame from the peer; `Ok(None)` when the peer ended the stream cleanly between
    /// frames.
    ///
    /// A malformed frame closes the connection and returns [`NetError::Malformed`]; a stream
    /// that ends inside a frame, a socket error, or a close by this side returns
    /// [`NetError::Closed`]. Cancel safe: dropping the future loses no received bytes.
    pub async fn next(&mut self) -> Result<Option<Frame>, NetError> {
        loop {
            match self.decoder.next_frame() {
                Ok(Some(frame)) => return Ok(Some(frame)),
                Ok(None) => {}
                Err(source) => {
                    self.link.close(&format!("malformed frame from the peer: {source}"));
                    return Err(NetError::Malformed { peer: self.link.peer.clone(), source });
                }
            }
            if self.link.is_closed() {
                return Err(self.link.closed_error());
            }
            match self.link.stream.read(&mut self.chunk).await {
                Ok(0) => {
                    if self.link.is_closed() {
                        return Err(self.link.closed_error());
                    }
                    return match self.decoder.finish() {
                        Ok(()) => Ok(None),
                        Err(source) => {
                            self.link.close(&format!("the peer closed the connection inside a frame: {source}"));
                            Err(self.link.closed_error())
                        }
                    };
                }
                Ok(size_bytes) => self.decoder.feed(&self.chunk[..size_bytes]),
                Err(error) if matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                Err(error) => {
                    self.link.close(&format!("read failed: {error}"));
                    return Err(self.link.closed_error());
                }
            }
        }
    }

    /// The peer's address.
    pub fn peer(&self) -> &str {
        &self.link.peer
    }
}
