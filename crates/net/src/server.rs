//! The responding side of a connection: what an OSD runs for each accepted stream.
//!
//! [`serve_connection`] is the whole loop: it reads requests, runs the handler's future for
//! each (up to `limits::REQUESTS_IN_FLIGHT_MAX` at once, inside the connection's own task, so
//! the handler needs neither `Send` nor `'static`), and sends each reply as soon as its future
//! completes, in completion order. [`split`] gives the parts for a daemon that wants its own
//! loop: a [`FrameReader`] and a cloneable [`FrameSender`].

use std::future::Future;
use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use wire::{Body, Frame};

use crate::limits::REQUESTS_IN_FLIGHT_MAX;
pub use crate::link::FrameReader;
use crate::link::Link;
use crate::stream::Stream;
use crate::NetError;

/// Sends frames on a connection from any task. Clones share the connection.
#[derive(Clone)]
pub struct FrameSender {
    link: Arc<Link>,
}

impl FrameSender {
    /// Sends `frame` without waiting: written to the socket at once if it is idle, otherwise
    /// queued for the writer task. Fails only if the connection is closed.
    ///
    /// Never blocks and never waits for room, so a caller that sends without bound must call
    /// [`ready`](FrameSender::ready) between frames (`serve_connection` does so before it reads
    /// each request). Must be called inside a tokio runtime (a writer task may be spawned).
    pub fn send(&self, frame: &Frame) -> Result<(), NetError> {
        self.link.send_now(&[frame])
    }

    /// Sends `frames` like [`send`](FrameSender::send), in one write if the socket takes them.
    pub fn send_all(&self, frames: &[&Frame]) -> Result<(), NetError> {
        self.link.send_now(frames)
    }

    /// Waits until the send queue holds less than `limits::SEND_QUEUE_BYTES_MAX`.
    pub async fn ready(&self) -> Result<(), NetError> {
        self.link.ready().await
    }

    /// Closes the connection in both directions; queued frames are dropped.
    pub fn close(&self, reason: &str) {
        self.link.close(&format!("closed by this side: {reason}"));
    }

    pub fn is_closed(&self) -> bool {
        self.link.is_closed()
    }

    /// The peer's address.
    pub fn peer(&self) -> &str {
        self.link.peer()
    }
}

/// Splits an accepted stream (TCP or Unix socket) into its reading and sending halves. Sets
/// `TCP_NODELAY` on TCP. Must be called inside a tokio runtime.
pub fn split(stream: impl Into<Stream>) -> (FrameReader, FrameSender) {
    let stream = stream.into();
    let peer = stream.peer_name();
    if let Err(error) = stream.set_nodelay() {
        tracing::debug!(%peer, %error, "cannot set TCP_NODELAY");
    }
    let link = Link::new(stream, Arc::from(peer));
    (FrameReader::new(link.clone()), FrameSender { link })
}

/// Serves one accepted connection until it ends: calls `handler` with each request frame and
/// sends the reply frame its future returns, as soon as it completes (replies go out in
/// completion order, not request order).
///
/// The handler's reply must be a reply frame with the request's `request_id` (a bug otherwise:
/// the assertion stops the process). At most `limits::REQUESTS_IN_FLIGHT_MAX` handler futures
/// run at once; they run inside this future, so they need neither `Send` nor `'static`.
///
/// Returns `Ok(())` when the peer ends the stream between frames, after every handler future
/// has finished and its reply has been sent. A malformed frame or a reply frame from the peer
/// closes only this connection: the reason is logged (naming the peer and the error), handler
/// futures already running finish (their replies are dropped), and the error is returned. No
/// `ProtocolError` reply is sent: a decode error does not always name the opcode such a reply
/// must carry, and the peer learns of the close from the end of the stream.
pub async fn serve_connection<H, F>(stream: impl Into<Stream>, mut handler: H) -> Result<(), NetError>
where
    H: FnMut(Frame) -> F,
    F: Future<Output = Frame>,
{
    let (mut reader, sender) = split(stream);
    let mut in_flight = FuturesUnordered::new();
    let outcome = loop {
        let reading_allowed = in_flight.len() < REQUESTS_IN_FLIGHT_MAX;
        tokio::select! {
            biased;
            Some(first) = in_flight.next(), if !in_flight.is_empty() => {
                // Every reply ready now leaves in one write: one send per wake-up at depth,
                // not one per reply. (Polling without a waker here is fine: the next round of
                // the loop polls `in_flight` again with this task's.)
                let mut ready = vec![first];
                while let Some(Some(next)) = in_flight.next().now_or_never() {
                    ready.push(next);
                }
                send_replies(&sender, &ready);
            }
            frame = read_request(&mut reader, &sender), if reading_allowed => match frame {
                Ok(Some(frame)) => match frame.body {
                    Body::Request(_) => {
                        let request_id = frame.request_id;
                        let reply = handler(frame);
                        in_flight.push(async move { (request_id, reply.await) });
                    }
                    Body::Response(_) => {
                        let reason = format!(
                            "protocol violation: the peer sent a reply (request_id={}) on a connection that carries only requests from it",
                            frame.request_id
                        );
                        tracing::warn!(peer = %sender.peer(), %reason, "closing connection");
                        let error = NetError::Closed { peer: Arc::from(sender.peer()), reason: Arc::from(reason.as_str()) };
                        sender.link.close(&reason);
                        break Err(error);
                    }
                },
                Ok(None) => break Ok(()),
                Err(error) => {
                    if let NetError::Malformed { source, .. } = &error {
                        tracing::warn!(peer = %sender.peer(), error = %source, "closing connection: malformed frame");
                    } else {
                        tracing::debug!(peer = %sender.peer(), %error, "connection ended");
                    }
                    break Err(error);
                }
            },
        }
    };
    while let Some(finished) = in_flight.next().await {
        send_replies(&sender, &[finished]);
    }
    outcome
}

/// Reads the next frame once the send queue has room (so a peer that does not read its replies
/// stops being served instead of growing the queue).
async fn read_request(reader: &mut FrameReader, sender: &FrameSender) -> Result<Option<Frame>, NetError> {
    sender.ready().await?;
    reader.next().await
}

fn send_replies(sender: &FrameSender, replies: &[(u64, Frame)]) {
    for (request_id, reply) in replies {
        assert!(reply.is_reply(), "a handler returned a request frame");
        assert_eq!(reply.request_id, *request_id, "a handler replied under another request id");
    }
    let frames: Vec<&Frame> = replies.iter().map(|(_, reply)| reply).collect();
    if let Err(error) = sender.send_all(&frames) {
        tracing::debug!(%error, replies = frames.len(), "dropping replies: the connection is closed");
    }
}
