//! Wire-protocol connections over TCP, or Unix sockets on one machine
//! (`docs/design/wire-protocol.md`, ADR 0007, ADR 0013).
//!
//! - [`Connection`]: the requesting side. A cloneable handle to one TCP connection that many
//!   tasks use at once; requests are pipelined under request ids and replies may come back in
//!   any order. The client library keeps one per OSD.
//! - [`split`], [`FrameReader`], [`FrameSender`] and [`serve_connection`]: the responding side,
//!   for an accepted stream (the OSD daemon).
//!
//! Both sides share one sending path: the task that has a frame to send encodes it into the
//! connection's send buffer and writes it to the socket itself when the socket is idle, with no
//! hand-off to another thread or task. Only when the socket would block does a writer task take
//! over, and frames queued meanwhile go out together in one write. Replies are completed by one
//! reader task per connection. Any decode error, end of stream or socket error closes the
//! connection: every call in flight fails with an error naming the peer and the reason, and
//! later calls fail at once.
//!
//! `sim` (with the `sim` feature, which only simulations enable) is a simulated network for
//! whole-cluster simulation: `sim:NAME` addresses reach it.
//!
//! Everything works in a tokio `current_thread` runtime (the OSD) and in a multi-thread one
//! (the client); the futures returned here are `Send` when the caller's are.

mod connection;
pub mod limits;
mod link;
mod local;
mod server;
#[cfg(feature = "sim")]
pub mod sim;
mod stream;

use std::sync::Arc;

pub use connection::{connect, Connection, Reply};
pub use server::{serve_connection, split, FrameReader, FrameSender};
pub use stream::{bind_unix, Listener, Stream, UNIX_PREFIX};

/// `future`, run as the simulated node the current task runs as, in a simulation: a task
/// spawned onto the runtime (`tokio::spawn`) does not inherit its node. Otherwise `future`.
#[cfg(feature = "sim")]
pub fn on_this_node<F: std::future::Future>(future: F) -> sim::OnNode<F> {
    sim::SimNet::inherit(future)
}

/// `future` (a simulation runs it as the spawning task's node).
#[cfg(not(feature = "sim"))]
pub fn on_this_node<F: std::future::Future>(future: F) -> F {
    future
}

/// Why a connection could not be opened, or why an operation on it failed.
///
/// Every variant names the peer. Once a connection has failed, every later operation on it
/// returns [`NetError::Closed`] with the same reason.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NetError {
    #[error("cannot connect to {address}: {source}")]
    Connect {
        address: String,
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The peer sent bytes that are not a valid frame stream; the connection is closed.
    #[error("connection with {peer} closed: malformed frame from the peer: {source}")]
    Malformed {
        peer: Arc<str>,
        #[source]
        source: wire::DecodeError,
    },
    /// The connection is closed (by the peer, by a socket error, by a protocol violation, or by
    /// this side); `reason` says which.
    #[error("connection with {peer} closed: {reason}")]
    Closed { peer: Arc<str>, reason: Arc<str> },
}

impl NetError {
    /// The address of the peer the error concerns.
    pub fn peer(&self) -> &str {
        match self {
            NetError::Connect { address, .. } => address,
            NetError::Malformed { peer, .. } | NetError::Closed { peer, .. } => peer,
        }
    }

    /// Whether a failed connect proves nothing listens at the address: refused over TCP, or a
    /// Unix socket that is refused or gone (ADR 0015). A timeout or any other error does not.
    pub fn is_refusal(&self) -> bool {
        match self {
            NetError::Connect { address, source } => match source.kind() {
                std::io::ErrorKind::ConnectionRefused => true,
                std::io::ErrorKind::NotFound => address.starts_with(UNIX_PREFIX),
                _ => false,
            },
            _ => false,
        }
    }
}

/// Told of an OSD whose address refused a connection: no process listens there, so it is
/// probably gone (ADR 0015). Passed on to the mon, which checks for itself. Called once per OSD
/// incarnation, from a runtime thread: an implementation must not block.
pub trait DownReporter: Send + Sync + std::fmt::Debug {
    fn report(&self, osd: u32, incarnation: i64);
}

#[cfg(test)]
#[cfg(feature = "sim")]
mod sim_tests;
#[cfg(test)]
mod tests;
