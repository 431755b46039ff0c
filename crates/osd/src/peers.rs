//! Connections from this OSD, as a primary, to the other members of its PGs: one pipelined
//! `net::Connection` per peer OSD, opened on first use and again after it closes or the peer's
//! address changes. Each peer also keeps what the peer watch (`peer_watch.rs`, ADR 0015) judges
//! it by: when its last reply came, and since when the oldest call still waits for one.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use net::{Connection, Reply};
use tokio::time::Instant;
use wire::Request;

/// Called with a peer and the address that refused a connect to it.
pub(crate) type OnRefused = Box<dyn Fn(u32, &str)>;

/// Why a call or a probe to a peer OSD got no reply.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum PeerError {
    /// The connect failed: refused, or the address unreachable (the network's words).
    #[error("{reason}")]
    Connect { osd: u32, address: String, reason: String },
    #[error("cannot connect to {address}: no answer within {timeout:?}")]
    ConnectTimeout { osd: u32, address: String, timeout: Duration },
    /// The connection failed or closed before the reply came (the network's words).
    #[error("{reason}")]
    Lost { osd: u32, reason: String },
    #[error("osd.{osd} at {address} sent no reply within {timeout:?}")]
    NoReply { osd: u32, address: String, timeout: Duration },
    #[error("osd.{osd} at {address} answered no ping within {timeout:?}")]
    NoPing { osd: u32, address: String, timeout: Duration },
}

/// For the callers that report a failure rather than decide on it.
impl From<PeerError> for String {
    fn from(error: PeerError) -> String {
        error.to_string()
    }
}

pub(crate) struct Peers {
    peers: RefCell<BTreeMap<u32, Rc<Peer>>>,
    connect_timeout: Duration,
    call_timeout: Duration,
    refused: OnRefused,
    /// Numbers the calls, for [`Peer::waiting`].
    next_call: Cell<u64>,
}

#[derive(Default)]
struct Peer {
    current: RefCell<Option<(String, Connection)>>,
    /// One connect at a time per peer; the others wait for its result.
    connecting: tokio::sync::Mutex<()>,
    /// When the last reply from the peer arrived.
    last_reply: Cell<Option<Instant>>,
    /// When each call still waiting for its reply started, by call number.
    waiting: RefCell<BTreeMap<u64, Instant>>,
    /// When the last connect failed, and why: callers that waited for that attempt fail with it
    /// rather than each trying again in turn (N callers behind a cut link would otherwise wait N
    /// connect timeouts).
    connect_failed: RefCell<Option<(Instant, PeerError)>>,
}

/// Takes a call off its peer's waiting list however it ends (a reply, an error, or its future
/// dropped when the PG's epoch moves on).
struct Waiting<'a> {
    peer: &'a Peer,
    call: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.peer.waiting.borrow_mut().remove(&self.call);
    }
}

/// What the peer watch judges a peer by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PeerHealth {
    pub(crate) last_reply: Option<Instant>,
    /// When the oldest call still waiting for a reply started.
    pub(crate) oldest_waiting: Option<Instant>,
}

impl Peer {
    fn usable(&self, address: &str) -> Option<Connection> {
        match &*self.current.borrow() {
            Some((current, connection)) if current == address && !connection.is_closed() => Some(connection.clone()),
            _ => None,
        }
    }
}

impl Peers {
    pub(crate) fn new(connect_timeout: Duration, call_timeout: Duration, refused: OnRefused) -> Peers {
        Peers { peers: RefCell::new(BTreeMap::new()), connect_timeout, call_timeout, refused, next_call: Cell::new(0) }
    }

    fn peer(&self, osd: u32) -> Rc<Peer> {
        self.peers.borrow_mut().entry(osd).or_default().clone()
    }

    pub(crate) fn health(&self, osd: u32) -> PeerHealth {
        let Some(peer) = self.peers.borrow().get(&osd).cloned() else { return PeerHealth::default() };
        let oldest_waiting = peer.waiting.borrow().values().min().copied();
        PeerHealth { last_reply: peer.last_reply.get(), oldest_waiting }
    }

    /// Pings `osd`: `Ok` once it answers within `timeout`. A probe that gets no answer closes
    /// the connection, so the next call or probe connects afresh rather than waiting on a
    /// stream the network may be holding back.
    pub(crate) async fn probe(&self, osd: u32, address: &str, timeout: Duration) -> Result<(), PeerError> {
        let probe = async {
            let connection = self.connection(osd, address).await?;
            let reply = connection
                .call(0, Request::Ping)
                .await
                .map_err(|error| PeerError::Lost { osd, reason: error.to_string() });
            Ok::<_, PeerError>((connection, reply))
        };
        match tokio::time::timeout(timeout, probe).await {
            Ok(Ok((_, Ok(_)))) => {
                self.peer(osd).last_reply.set(Some(Instant::now()));
                Ok(())
            }
            Ok(Ok((_, Err(error)))) | Ok(Err(error)) => Err(error),
            Err(_) => {
                let error = PeerError::NoPing { osd, address: address.to_string(), timeout };
                if let Some((_, connection)) = self.peer(osd).current.borrow().as_ref() {
                    connection.close(&error.to_string());
                }
                Err(error)
            }
        }
    }

    async fn connection(&self, osd: u32, address: &str) -> Result<Connection, PeerError> {
        let peer = self.peer(osd);
        if let Some(connection) = peer.usable(address) {
            return Ok(connection);
        }
        let waited_from = Instant::now();
        let _connecting = peer.connecting.lock().await;
        if let Some(connection) = peer.usable(address) {
            return Ok(connection);
        }
        if let Some((_, error)) = peer.connect_failed.borrow().as_ref().filter(|(at, _)| *at >= waited_from) {
            return Err(error.clone());
        }
        let connection = match tokio::time::timeout(self.connect_timeout, net::connect(address)).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => {
                if error.is_refusal() {
                    (self.refused)(osd, address);
                }
                let error = PeerError::Connect { osd, address: address.to_string(), reason: error.to_string() };
                *peer.connect_failed.borrow_mut() = Some((Instant::now(), error.clone()));
                return Err(error);
            }
            Err(_) => {
                let error =
                    PeerError::ConnectTimeout { osd, address: address.to_string(), timeout: self.connect_timeout };
                *peer.connect_failed.borrow_mut() = Some((Instant::now(), error.clone()));
                return Err(error);
            }
        };
        tracing::debug!(osd, address, "connected to peer");
        *peer.current.borrow_mut() = Some((address.to_string(), connection.clone()));
        Ok(connection)
    }

    /// Sends `request` to OSD `osd` at `address` and waits for the reply. Any failure to get a
    /// reply (cannot connect, connection lost, no reply in time) is an error naming the peer; a
    /// reply that took too long also closes the connection, so the next op starts afresh.
    pub(crate) async fn call(&self, osd: u32, address: &str, epoch: u64, request: Request) -> Result<Reply, PeerError> {
        let peer = self.peer(osd);
        let call = self.next_call.get();
        self.next_call.set(call + 1);
        peer.waiting.borrow_mut().insert(call, Instant::now());
        let _waiting = Waiting { peer: &peer, call };
        let connection = self.connection(osd, address).await?;
        match tokio::time::timeout(self.call_timeout, connection.call(epoch, request)).await {
            Ok(Ok(reply)) => {
                peer.last_reply.set(Some(Instant::now()));
                Ok(reply)
            }
            Ok(Err(error)) => Err(PeerError::Lost { osd, reason: error.to_string() }),
            Err(_) => {
                let error = PeerError::NoReply { osd, address: address.to_string(), timeout: self.call_timeout };
                connection.close(&error.to_string());
                Err(error)
            }
        }
    }

    /// Closes every connection.
    pub(crate) fn close_all(&self) {
        for peer in std::mem::take(&mut *self.peers.borrow_mut()).into_values() {
            if let Some((_, connection)) = peer.current.borrow_mut().take() {
                connection.close("the osd is shutting down");
            }
        }
    }
}
