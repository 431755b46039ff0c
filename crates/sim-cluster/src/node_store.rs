//! The metadata store as one node sees it: the shared in-memory store, behind the simulated
//! network's cuts between the node and the store's node ([`STORE_NODE`]). A node cut off from
//! it gets what an etcd client gets: calls that fail once their deadline passes (so an OSD's
//! lease runs out at the store while the OSD cannot renew it), and watches that end with an
//! error (their owners list again, which fails until the cut heals).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use meta::{watch_channel, KeyValue, LeaseId, Listing, MetaError, MetaStore, Txn, TxnResponse, WatchStream};
use net::sim::SimNet;

/// The store's name on the simulated network, for cuts.
pub(crate) const STORE_NODE: &str = "store";
/// How long a call from a node cut off from the store takes to fail.
const CALL_DEADLINE: Duration = Duration::from_secs(1);
/// How often a watch checks whether its node was cut off.
const WATCH_CHECK_INTERVAL: Duration = Duration::from_millis(100);

pub(crate) struct NodeStore {
    inner: Arc<dyn MetaStore>,
    node: String,
    network: SimNet,
}

impl NodeStore {
    pub(crate) fn new(inner: Arc<dyn MetaStore>, node: &str, network: &SimNet) -> NodeStore {
        NodeStore { inner, node: node.to_string(), network: network.clone() }
    }

    /// Fails, after the call's deadline, if this node is cut off from the store.
    async fn reach(&self) -> Result<(), MetaError> {
        if !self.network.is_cut(&self.node, STORE_NODE) {
            return Ok(());
        }
        tokio::time::sleep(CALL_DEADLINE).await;
        Err(self.unreachable())
    }

    fn unreachable(&self) -> MetaError {
        MetaError::unavailable(self.inner.endpoint(), format!("{} is cut off from the store", self.node))
    }
}

#[async_trait]
impl MetaStore for NodeStore {
    fn endpoint(&self) -> &str {
        self.inner.endpoint()
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError> {
        self.reach().await?;
        self.inner.get(key).await
    }

    async fn put(&self, key: &str, value: Vec<u8>, lease: Option<LeaseId>) -> Result<i64, MetaError> {
        self.reach().await?;
        self.inner.put(key, value, lease).await
    }

    async fn delete(&self, key: &str) -> Result<bool, MetaError> {
        self.reach().await?;
        self.inner.delete(key).await
    }

    async fn list_with_revision(&self, prefix: &str) -> Result<Listing, MetaError> {
        self.reach().await?;
        self.inner.list_with_revision(prefix).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, MetaError> {
        self.reach().await?;
        self.inner.txn(txn).await
    }

    async fn watch(&self, prefix: &str, start_revision: Option<i64>) -> Result<WatchStream, MetaError> {
        self.reach().await?;
        let mut inner = self.inner.watch(prefix, start_revision).await?;
        let (sender, stream) = watch_channel(self.inner.endpoint(), prefix);
        let (network, node, cut_off) = (self.network.clone(), self.node.clone(), self.unreachable());
        // Events pass while the node reaches the store; a cut ends the watch.
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    event = inner.next() => match event {
                        Some(Ok(event)) if !network.is_cut(&node, STORE_NODE) => {
                            if sender.send(event).await.is_err() {
                                return;
                            }
                        }
                        Some(Ok(_)) => return sender.fail(cut_off),
                        Some(Err(error)) => return sender.fail(error),
                        None => return,
                    },
                    () = tokio::time::sleep(WATCH_CHECK_INTERVAL) => {
                        if network.is_cut(&node, STORE_NODE) {
                            return sender.fail(cut_off);
                        }
                    }
                }
            }
        });
        Ok(stream)
    }

    async fn compact(&self, revision: i64) -> Result<(), MetaError> {
        self.reach().await?;
        self.inner.compact(revision).await
    }

    async fn lease_grant(&self, ttl_s: u64) -> Result<LeaseId, MetaError> {
        self.reach().await?;
        self.inner.lease_grant(ttl_s).await
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<u64, MetaError> {
        self.reach().await?;
        self.inner.lease_keep_alive(lease).await
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), MetaError> {
        self.reach().await?;
        self.inner.lease_revoke(lease).await
    }
}
