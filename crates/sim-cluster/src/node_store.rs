//! The metadata store as one node sees it: the shared in-memory store, behind the simulated
//! network's cuts between the node and the store's node ([`STORE_NODE`]). A node cut off from
//! it gets what an etcd client gets: calls that fail once their deadline passes (so an OSD's
//! lease runs out at the store while the OSD cannot renew it), and watches that end with an
//! error (their owners list again, which fails until the cut heals). The store itself may stall
//! or deliver watch events late to some nodes ([`StoreFaults`]), and with
//! `SimOptions::control_plane` it is three members, each node's client asking one at a time
//! (`store_members.rs`).

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use meta::members::Members;
use meta::{watch_channel, KeyValue, LeaseId, Listing, MetaError, MetaStore, Txn, TxnResponse, WatchStream};
use net::sim::SimNet;
use tokio::time::Instant;

use crate::store_members::{self, StoreMembers};

/// The store's name on the simulated network, for cuts.
pub(crate) const STORE_NODE: &str = "store";
/// How long a call from a node cut off from the store takes to fail.
const CALL_DEADLINE: Duration = Duration::from_secs(1);
/// How often a watch checks whether its node was cut off.
const WATCH_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// The store's own faults, shared by every node's view of it: a stall (every call waits until
/// it ends, as behind an etcd leader whose disk stalls; leases keep running out meanwhile) and
/// watches that lag behind the store on some nodes; and its members' faults, when it has
/// several.
#[derive(Clone, Default)]
pub(crate) struct StoreFaults {
    state: Arc<Mutex<StoreFaultState>>,
    members: Option<StoreMembers>,
}

#[derive(Default)]
struct StoreFaultState {
    stalled_until: Option<Instant>,
    watch_lag: BTreeMap<String, Duration>,
}

impl StoreFaults {
    /// The faults of a store of several members.
    pub(crate) fn with_members(members: StoreMembers) -> StoreFaults {
        StoreFaults { state: Arc::default(), members: Some(members) }
    }

    /// The store's members, when it has several.
    pub(crate) fn members(&self) -> Option<&StoreMembers> {
        self.members.as_ref()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StoreFaultState> {
        self.state.lock().expect("the store faults' lock is never held across a panic")
    }

    /// Every call waits until `until`.
    pub(crate) fn stall_until(&self, until: Instant) {
        self.lock().stalled_until = Some(until);
    }

    /// Watch events reach `node` `lag` after the store commits them (zero: at once).
    pub(crate) fn set_watch_lag(&self, node: &str, lag: Duration) {
        if lag.is_zero() {
            self.lock().watch_lag.remove(node);
        } else {
            self.lock().watch_lag.insert(node.to_string(), lag);
        }
    }

    /// Ends every fault of the store.
    pub(crate) fn clear(&self) {
        let mut state = self.lock();
        state.stalled_until = None;
        state.watch_lag.clear();
        drop(state);
        if let Some(members) = &self.members {
            members.heal();
        }
    }

    fn stalled_until(&self) -> Option<Instant> {
        self.lock().stalled_until.filter(|until| *until > Instant::now())
    }

    fn watch_lag(&self, node: &str) -> Duration {
        self.lock().watch_lag.get(node).copied().unwrap_or_default()
    }
}

pub(crate) struct NodeStore {
    inner: Arc<dyn MetaStore>,
    node: String,
    network: SimNet,
    faults: StoreFaults,
    /// The node's etcd client's choice of member, when the store has several.
    client: Option<Members>,
}

impl NodeStore {
    pub(crate) fn new(inner: Arc<dyn MetaStore>, node: &str, network: &SimNet, faults: &StoreFaults) -> NodeStore {
        let client = faults.members().map(|_| Members::new(store_members::urls()));
        NodeStore { inner, node: node.to_string(), network: network.clone(), faults: faults.clone(), client }
    }

    /// Runs `call` on the store as this node reaches it: when the store has several members,
    /// through the member its client picks, one after another until one answers, a cut from
    /// the store going unanswered as dropped packets go.
    async fn ask<T, F, Fut>(&self, what: &str, call: F) -> Result<T, MetaError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, MetaError>>,
    {
        let (Some(client), Some(members)) = (&self.client, self.faults.members()) else {
            self.reach().await?;
            return call().await;
        };
        self.wait_out_stall().await;
        client
            .call(what, |member| {
                let attempt = call();
                async move {
                    self.wait_out_cut().await;
                    members.through(member).await?;
                    attempt.await
                }
            })
            .await
    }

    async fn wait_out_stall(&self) {
        if let Some(until) = self.faults.stalled_until() {
            tokio::time::sleep_until(until).await;
        }
    }

    /// Waits while this node is cut off from the store.
    async fn wait_out_cut(&self) {
        while self.network.is_cut(&self.node, STORE_NODE) {
            tokio::time::sleep(WATCH_CHECK_INTERVAL).await;
        }
    }

    /// Waits out a stall of the store; fails, after the call's deadline, if this node is cut
    /// off from the store either way.
    async fn reach(&self) -> Result<(), MetaError> {
        self.wait_out_stall().await;
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
        self.ask("a get", || self.inner.get(key)).await
    }

    async fn put(&self, key: &str, value: Vec<u8>, lease: Option<LeaseId>) -> Result<i64, MetaError> {
        self.ask("a put", || self.inner.put(key, value.clone(), lease)).await
    }

    async fn delete(&self, key: &str) -> Result<bool, MetaError> {
        self.ask("a delete", || self.inner.delete(key)).await
    }

    async fn list_with_revision(&self, prefix: &str) -> Result<Listing, MetaError> {
        self.ask("a listing", || self.inner.list_with_revision(prefix)).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, MetaError> {
        self.ask("a transaction", || self.inner.txn(txn.clone())).await
    }

    async fn watch(&self, prefix: &str, start_revision: Option<i64>) -> Result<WatchStream, MetaError> {
        // The member the watch runs on, when the store has several.
        let member = match (&self.client, self.faults.members()) {
            (Some(client), Some(members)) => {
                self.wait_out_stall().await;
                let member = client
                    .call("a watch", |member| async move {
                        self.wait_out_cut().await;
                        members.through(member).await?;
                        Ok(member)
                    })
                    .await?;
                Some((members.clone(), member))
            }
            _ => {
                self.reach().await?;
                None
            }
        };
        let mut inner = self.inner.watch(prefix, start_revision).await?;
        let (sender, stream) = watch_channel(self.inner.endpoint(), prefix);
        let (network, node, cut_off) = (self.network.clone(), self.node.clone(), self.unreachable());
        let faults = self.faults.clone();
        // Events pass while the node reaches the store, each `watch_lag` after it arrived, and
        // wait while the watch's member is silent; a cut ends the watch, and so does what ends
        // a watch on its member.
        tokio::spawn(async move {
            let mut lagging = VecDeque::new();
            loop {
                let held = member.as_ref().is_some_and(|(members, member)| members.holds_events(*member));
                let due = if held { None } else { lagging.front().map(|(due, _)| *due) };
                tokio::select! {
                    biased;
                    () = sleep_until_due(due) => {
                        let (_, event) = lagging.pop_front().expect("an event is due");
                        if sender.send(event).await.is_err() {
                            return;
                        }
                    }
                    event = inner.next() => match event {
                        Some(Ok(event)) if !network.is_cut(&node, STORE_NODE) => {
                            lagging.push_back((Instant::now() + faults.watch_lag(&node), event));
                        }
                        Some(Ok(_)) => return sender.fail(cut_off),
                        Some(Err(error)) => return sender.fail(error),
                        None => return,
                    },
                    () = tokio::time::sleep(WATCH_CHECK_INTERVAL) => {
                        if network.is_cut(&node, STORE_NODE) {
                            return sender.fail(cut_off);
                        }
                        if let Some(error) = member.as_ref().and_then(|(members, member)| members.ends_watch(*member)) {
                            return sender.fail(error);
                        }
                    }
                }
            }
        });
        Ok(stream)
    }

    async fn compact(&self, revision: i64) -> Result<(), MetaError> {
        self.ask("a compaction", || self.inner.compact(revision)).await
    }

    async fn lease_grant(&self, ttl_s: u64) -> Result<LeaseId, MetaError> {
        self.ask("a lease grant", || self.inner.lease_grant(ttl_s)).await
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<u64, MetaError> {
        self.ask("a lease keep-alive", || self.inner.lease_keep_alive(lease)).await
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), MetaError> {
        self.ask("a lease revocation", || self.inner.lease_revoke(lease)).await
    }

    async fn leaderless(&self) -> Result<bool, MetaError> {
        match self.faults.members() {
            Some(members) => {
                self.wait_out_stall().await;
                if self.network.is_cut(&self.node, STORE_NODE) {
                    // No member answers its ask.
                    tokio::time::sleep(meta::members::ATTEMPT_TIMEOUT).await;
                    return Ok(false);
                }
                Ok(members.leaderless().await)
            }
            None => self.inner.leaderless().await,
        }
    }
}

/// Sleeps until `due`, or forever if nothing is due.
async fn sleep_until_due(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}
