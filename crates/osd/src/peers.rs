//! Connections from this OSD, as a primary, to the other members of its PGs: one pipelined
//! `net::Connection` per peer OSD, opened on first use and again after it closes or the peer's
//! address changes.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use net::{Connection, Reply};
use wire::Request;

/// Called with a peer and the address that refused a connect to it.
pub(crate) type OnRefused = Box<dyn Fn(u32, &str)>;

pub(crate) struct Peers {
    peers: RefCell<BTreeMap<u32, Rc<Peer>>>,
    connect_timeout: Duration,
    call_timeout: Duration,
    refused: OnRefused,
}

#[derive(Default)]
struct Peer {
    current: RefCell<Option<(String, Connection)>>,
    /// One connect at a time per peer; the others wait for its result.
    connecting: tokio::sync::Mutex<()>,
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
        Peers { peers: RefCell::new(BTreeMap::new()), connect_timeout, call_timeout, refused }
    }

    async fn connection(&self, osd: u32, address: &str) -> Result<Connection, String> {
        let peer = self.peers.borrow_mut().entry(osd).or_default().clone();
        if let Some(connection) = peer.usable(address) {
            return Ok(connection);
        }
        let _connecting = peer.connecting.lock().await;
        if let Some(connection) = peer.usable(address) {
            return Ok(connection);
        }
        let connection = match tokio::time::timeout(self.connect_timeout, net::connect(address)).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => {
                if error.is_refusal() {
                    (self.refused)(osd, address);
                }
                return Err(error.to_string());
            }
            Err(_) => return Err(format!("cannot connect to {address}: no answer within {:?}", self.connect_timeout)),
        };
        tracing::debug!(osd, address, "connected to peer");
        *peer.current.borrow_mut() = Some((address.to_string(), connection.clone()));
        Ok(connection)
    }

    /// Sends `request` to OSD `osd` at `address` and waits for the reply. Any failure to get a
    /// reply (cannot connect, connection lost, no reply in time) is an error naming the peer; a
    /// reply that took too long also closes the connection, so the next op starts afresh.
    pub(crate) async fn call(&self, osd: u32, address: &str, epoch: u64, request: Request) -> Result<Reply, String> {
        let connection = self.connection(osd, address).await?;
        match tokio::time::timeout(self.call_timeout, connection.call(epoch, request)).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => {
                let reason = format!("osd.{osd} at {address} sent no reply within {:?}", self.call_timeout);
                connection.close(&reason);
                Err(reason)
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
