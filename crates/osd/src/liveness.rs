//! Liveness and fencing: the leased key `/basalt/osd-live/<id>` and the rule that an OSD whose
//! lease may have expired acknowledges nothing.
//!
//! The OSD grants a lease, creates its liveness key with a create-if-absent transaction attached
//! to the lease, and renews the lease every sixth of its TTL (so a quorum loss of the store is
//! proven before the lease could run out, ADR 0028). It may serve ops until the TTL,
//! minus a margin, has passed since the *send time* of the last successful renewal (or of the
//! grant): the store counts the TTL from a later moment (when it received the request), so the
//! OSD stops before the store can expire the key, and the mon reassigns PGs only after that.
//!
//! | event | serving | action |
//! |---|---|---|
//! | grant + create succeeded | until send time + TTL - margin | renew every TTL/6 |
//! | renewal succeeded | until its send time + TTL - margin | renew again in TTL/6 |
//! | renewal failed or timed out | unchanged (runs out by itself) | retry every TTL/10 |
//! | renewals fail, and every store member says it has no leader (ADR 0028) | until the question's send time + TTL - margin | ask again every TTL/12 |
//! | renewal says `LeaseExpired` | no | register again with a new lease |
//! | the mon marked this incarnation down (ADR 0015) | no | revoke the lease, register again |
//! | key of an older incarnation exists | no | wait until it expires (another process may still hold it) |
//! | clean shutdown | no | revoke the lease, which deletes the key |

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use cluster::records::{decode, encode, FORMAT_VERSION};
use cluster::{keys, LocalSocket, OsdLiveRecord};
use meta::{Compare, LeaseId, MetaError, MetaStore, Txn, TxnOp};
use tokio::time::Instant;

pub(crate) struct Liveness {
    store: Arc<dyn MetaStore>,
    key: String,
    address: String,
    local: Option<LocalSocket>,
    ttl: Duration,
    margin: Duration,
    lease: Cell<Option<LeaseId>>,
    /// Ops may be acknowledged before this instant; `None`: not registered.
    serve_until: Cell<Option<Instant>>,
    /// The send time of the last grant or renewal that succeeded.
    renewed: Cell<Option<Instant>>,
    /// Whether the last check found the OSD fenced (to log transitions once).
    fenced_logged: Cell<bool>,
    /// Set by [`Liveness::end_incarnation`]: the keep-alive loop revokes the lease and registers
    /// again at once.
    ending: Cell<bool>,
    wake: tokio::sync::Notify,
}

impl Liveness {
    pub(crate) fn new(
        store: Arc<dyn MetaStore>,
        osd: u32,
        address: String,
        local: Option<LocalSocket>,
        ttl_s: u64,
        margin: Duration,
    ) -> Liveness {
        let ttl = Duration::from_secs(ttl_s);
        assert!(margin < ttl);
        Liveness {
            store,
            key: keys::osd_live(osd),
            address,
            local,
            ttl,
            margin,
            lease: Cell::new(None),
            serve_until: Cell::new(None),
            renewed: Cell::new(None),
            fenced_logged: Cell::new(false),
            ending: Cell::new(false),
            wake: tokio::sync::Notify::new(),
        }
    }

    /// Stops serving now and has the keep-alive loop revoke the lease of `incarnation` and
    /// register again, if it is still the current one: the mon marked it down (ADR 0015), and
    /// registering again is how the mon learns that it stopped acknowledging.
    pub(crate) fn end_incarnation(&self, incarnation: i64) {
        if self.lease.get() != Some(LeaseId(incarnation)) || self.ending.get() {
            return;
        }
        tracing::warn!(key = %self.key, incarnation, "the mon marked this osd down: not serving until registered again");
        self.serve_until.set(None);
        self.ending.set(true);
        self.wake.notify_one();
    }

    /// Whether the OSD may acknowledge ops now.
    pub(crate) fn may_serve(&self) -> bool {
        self.serve_until.get().is_some_and(|until| Instant::now() < until)
    }

    /// The lease of the current incarnation, once registered.
    pub(crate) fn lease(&self) -> Option<LeaseId> {
        self.lease.get()
    }

    /// Registers, retrying until it succeeds: waits for a key of an older incarnation to go,
    /// and rides out an unavailable store.
    pub(crate) async fn register(&self) {
        let mut waiting_logged = false;
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.try_register().await {
                Ok(None) => return,
                Ok(Some(incarnation)) => {
                    if !waiting_logged {
                        tracing::info!(key = %self.key, incarnation, "waiting for the liveness key of an earlier incarnation to expire");
                        waiting_logged = true;
                    }
                    tokio::time::sleep(self.ttl / 10).await;
                }
                Err(error) => {
                    tracing::warn!(key = %self.key, %error, "cannot register liveness; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.ttl / 2);
                }
            }
        }
    }

    /// One attempt. `Ok(Some(incarnation))`: a key of another incarnation is in the way.
    async fn try_register(&self) -> Result<Option<i64>, MetaError> {
        if let Some(kv) = self.store.get(&self.key).await? {
            let incarnation = decode::<OsdLiveRecord>(&self.key, &kv.value).map(|record| record.incarnation).ok();
            let ours = self.lease.get().is_some_and(|lease| kv.lease == Some(lease));
            if ours {
                // An earlier attempt created it but its reply was lost; the grant's time stands.
                return Ok(None);
            }
            return Ok(Some(incarnation.unwrap_or(0)));
        }
        let sent = Instant::now();
        let lease = self.store.lease_grant(self.ttl.as_secs()).await?;
        self.lease.set(Some(lease));
        let record = OsdLiveRecord {
            version: FORMAT_VERSION,
            address: self.address.clone(),
            incarnation: lease.0,
            local: self.local.clone(),
            lease_ttl_s: self.ttl.as_secs(),
        };
        let txn = Txn {
            compares: vec![Compare::absent(&self.key)],
            success: vec![TxnOp::put(&self.key, encode(&record), Some(lease))],
            failure: vec![],
        };
        if self.store.txn(txn).await?.succeeded {
            self.serve_until.set(Some(sent + self.ttl - self.margin));
            self.renewed.set(Some(sent));
            self.fenced_logged.set(false);
            tracing::info!(key = %self.key, address = %self.address, incarnation = lease.0, "registered");
            return Ok(None);
        }
        // Someone else's key appeared meanwhile; our lease has nothing attached.
        self.lease.set(None);
        if let Err(error) = self.store.lease_revoke(lease).await {
            tracing::debug!(%error, "revoking an unused lease failed; it expires by itself");
        }
        self.try_register_blocked().await
    }

    async fn try_register_blocked(&self) -> Result<Option<i64>, MetaError> {
        let kv = self.store.get(&self.key).await?;
        Ok(Some(kv.and_then(|kv| decode::<OsdLiveRecord>(&self.key, &kv.value).ok()).map_or(0, |r| r.incarnation)))
    }

    /// Renews the lease for as long as the OSD runs, registers again when it is lost, and rides
    /// through a quorum loss of the store's own (ADR 0028).
    pub(crate) async fn keep_alive(&self) {
        tokio::join!(self.renew(), self.ride_through_quorum_loss());
    }

    /// While renewals fail, asks the store every twelfth of the TTL whether every one of its
    /// members knows of no leader (ADR 0028). If they all say so during a call that starts while
    /// this OSD serves and ends within the fence margin (so before any leader could see the
    /// lease expire), no leader then or since can revoke it before the call's start + TTL: that
    /// start counts as a renewal. Nothing in the data path needs the store, so I/O goes on
    /// until a leader is elected, when renewals succeed again.
    async fn ride_through_quorum_loss(&self) {
        let poll = (self.ttl / 12).max(Duration::from_millis(50));
        // A renewal is overdue once its interval and a poll have passed since the last success.
        let overdue = renewal_interval(self.ttl) + poll;
        let mut riding_since = None;
        loop {
            tokio::time::sleep(poll).await;
            let asked = Instant::now();
            let (Some(until), Some(lease), Some(renewed)) =
                (self.serve_until.get(), self.lease.get(), self.renewed.get())
            else {
                continue;
            };
            if riding_since.is_some_and(|since| renewed > since) {
                tracing::info!(key = %self.key, "the store has a leader again; the lease is renewed");
                riding_since = None;
            }
            if asked >= until || asked - renewed < overdue {
                continue;
            }
            if !matches!(tokio::time::timeout(self.margin, self.store.leaderless()).await, Ok(Ok(true))) {
                continue;
            }
            // The same incarnation, still serving: a mark or an expiry meanwhile wins.
            let current = self.serve_until.get();
            if self.lease.get() != Some(lease) || current.is_none_or(|current| asked >= current) {
                continue;
            }
            let promised = asked + self.ttl - self.margin;
            if current.is_some_and(|current| promised > current) {
                self.serve_until.set(Some(promised));
            }
            if riding_since.is_none() {
                tracing::warn!(key = %self.key, "the store has no leader anywhere: serving on while it elects one");
                riding_since = Some(asked);
            }
        }
    }

    async fn renew(&self) {
        let interval = renewal_interval(self.ttl);
        let retry = (self.ttl / 10).max(Duration::from_millis(50));
        let mut delay = interval;
        loop {
            tokio::select! {
                biased;
                () = self.wake.notified() => {}
                () = tokio::time::sleep(delay) => {}
            }
            delay = interval;
            if self.ending.replace(false) {
                self.revoke(interval).await;
                self.register().await;
                continue;
            }
            let Some(lease) = self.lease.get() else {
                self.register().await;
                continue;
            };
            let sent = Instant::now();
            match tokio::time::timeout(interval, self.store.lease_keep_alive(lease)).await {
                // A mark that arrived during the renewal wins: the loop ends the incarnation next.
                Ok(Ok(_)) if self.ending.get() => delay = Duration::ZERO,
                Ok(Ok(ttl_s)) => {
                    let ttl = Duration::from_secs(ttl_s).min(self.ttl);
                    self.serve_until.set(Some(sent + ttl.saturating_sub(self.margin)));
                    self.renewed.set(Some(sent));
                    if self.fenced_logged.replace(false) {
                        tracing::info!(key = %self.key, "lease renewed; serving again");
                    }
                }
                Ok(Err(MetaError::LeaseExpired { .. })) => {
                    tracing::warn!(key = %self.key, lease = %lease, "the lease expired; not serving until registered again");
                    self.serve_until.set(None);
                    self.lease.set(None);
                    self.register().await;
                }
                Ok(Err(error)) => {
                    self.note_failure(&error.to_string());
                    delay = retry;
                }
                Err(_) => {
                    self.note_failure("no reply within a sixth of the lease TTL");
                    delay = retry;
                }
            }
        }
    }

    fn note_failure(&self, reason: &str) {
        if !self.may_serve() && !self.fenced_logged.replace(true) {
            tracing::warn!(key = %self.key, reason, "cannot renew the lease; not acknowledging ops until it is renewed");
        } else {
            tracing::debug!(key = %self.key, reason, "lease renewal failed");
        }
    }

    /// Stops serving and revokes the lease, which deletes the liveness key.
    pub(crate) async fn revoke(&self, timeout: Duration) {
        self.serve_until.set(None);
        let Some(lease) = self.lease.take() else { return };
        match tokio::time::timeout(timeout, self.store.lease_revoke(lease)).await {
            Ok(Ok(())) => tracing::info!(key = %self.key, "lease revoked"),
            Ok(Err(error)) => {
                tracing::warn!(key = %self.key, %error, "revoking the lease failed; the key expires with it")
            }
            Err(_) => tracing::warn!(key = %self.key, "revoking the lease timed out; the key expires with it"),
        }
    }
}

/// How often the lease is renewed: a sixth of the TTL, so a renewal that fails at a quorum loss
/// of the store leaves the TTL less two intervals to prove it (ADR 0028).
fn renewal_interval(ttl: Duration) -> Duration {
    ttl / 6
}
