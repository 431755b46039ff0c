//! The `MetaStore` trait and the watch stream its backends hand out.
//!
//! The trait is object safe (`Arc<dyn MetaStore>`), so the mon, the OSD daemon and the gateway
//! are written once against it and run on etcd, on the embedded store in the same process, or
//! on the embedded store served by another process. It uses `async-trait` because native
//! `async fn` in traits is not object safe. The only runtime type in the interface is tokio's
//! bounded channel inside [`WatchStream`], which works under any executor.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::{KeyValue, LeaseId, Listing, MetaError, Txn, TxnResponse, WatchEvent};

/// The number of events a watch buffers for a consumer that has not read them yet.
///
/// A backend that cannot wait for the consumer ends the watch with [`MetaError::Compacted`]
/// when the buffer is full; the others wait.
pub const WATCH_CHANNEL_CAPACITY: usize = 1024;

/// A cluster metadata store with etcd v3 semantics: a flat, sorted key space with revisions,
/// compare-and-swap transactions, prefix watches and leases.
///
/// Keys are UTF-8 strings; values are bytes. Every write is durable when the call returns.
#[async_trait]
pub trait MetaStore: Send + Sync {
    /// Where the store lives, for log and error messages: an etcd endpoint list, a path, or an
    /// address.
    fn endpoint(&self) -> &str;

    async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError>;

    /// Writes `value` under `key`, attached to `lease` if given (a put without a lease detaches
    /// the key from any lease), and returns the revision of the write.
    async fn put(&self, key: &str, value: Vec<u8>, lease: Option<LeaseId>) -> Result<i64, MetaError>;

    /// Deletes `key`; returns whether it existed. Deleting a missing key does not change the
    /// revision.
    async fn delete(&self, key: &str) -> Result<bool, MetaError>;

    /// Every key starting with `prefix`, sorted by key, with the revision of the listing.
    async fn list_with_revision(&self, prefix: &str) -> Result<Listing, MetaError>;

    /// Every key starting with `prefix`, sorted by key.
    async fn list(&self, prefix: &str) -> Result<Vec<KeyValue>, MetaError> {
        Ok(self.list_with_revision(prefix).await?.kvs)
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, MetaError>;

    /// Watches every key starting with `prefix`.
    ///
    /// With `start_revision: None` the stream carries every change committed after the call
    /// returns (and possibly a few committed while it ran). With `Some(revision)` it first
    /// replays the history from `revision` on; if that history is gone the call fails with
    /// [`MetaError::Compacted`]. See [`WatchStream`] for how a watch ends.
    async fn watch(&self, prefix: &str, start_revision: Option<i64>) -> Result<WatchStream, MetaError>;

    /// Forgets the watch history before `revision`. Watching from an older revision then fails
    /// with [`MetaError::Compacted`]. Compacting an already compacted revision does nothing.
    async fn compact(&self, revision: i64) -> Result<(), MetaError>;

    /// Grants a lease of about `ttl_s` seconds (etcd may round short TTLs up to its minimum).
    async fn lease_grant(&self, ttl_s: u64) -> Result<LeaseId, MetaError>;

    /// Renews the lease and returns its TTL from now, in seconds.
    /// An expired or revoked lease gives [`MetaError::LeaseExpired`]; it cannot be renewed.
    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<u64, MetaError>;

    /// Revokes the lease, deleting its keys. An unknown lease gives [`MetaError::LeaseExpired`].
    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), MetaError>;

    /// Whether every voting member of the store said, during this call, that it knows of no
    /// leader (ADR 0028): no lease is revoked until a leader is elected, and the election gives
    /// every lease its whole TTL again. `false` when that is not shown (a member named a leader
    /// or did not answer) and for a store of one member, which has no leader to lose.
    async fn leaderless(&self) -> Result<bool, MetaError> {
        Ok(false)
    }
}

/// The receiving end of a watch.
///
/// Events arrive in revision order. A watch never ends silently: its last item is always an
/// error (the store became unavailable, the history was compacted, the consumer fell behind,
/// the store closed), after which [`WatchStream::next`] returns `None`. On such an error the
/// caller lists the prefix again and watches from the listing's revision + 1. Dropping the
/// stream cancels the watch.
pub struct WatchStream {
    receiver: mpsc::Receiver<WatchEvent>,
    terminal: Arc<Mutex<Option<MetaError>>>,
    fallback: Option<MetaError>,
    on_drop: Option<Box<dyn FnOnce() + Send>>,
}

impl WatchStream {
    /// The next event, or the error that ended the watch, or `None` after that error.
    pub async fn next(&mut self) -> Option<Result<WatchEvent, MetaError>> {
        if let Some(event) = self.receiver.recv().await {
            return Some(Ok(event));
        }
        let error = self.terminal.lock().expect("watch terminal slot poisoned").take();
        // The slot is emptied by the first read, so the error after it is the fallback's `None`.
        match error {
            Some(error) => {
                self.fallback = None;
                Some(Err(error))
            }
            None => self.fallback.take().map(Err),
        }
    }

    /// Whether no event is ready now (events of one transaction arrive together, so a consumer
    /// can wait for this before acting on a batch).
    pub fn is_empty(&self) -> bool {
        self.receiver.is_empty()
    }

    /// Runs `on_drop` when the stream is dropped, so a backend can cancel the watch at its
    /// source (the remote client tells the server).
    pub fn with_on_drop(mut self, on_drop: impl FnOnce() + Send + 'static) -> WatchStream {
        self.on_drop = Some(Box::new(on_drop));
        self
    }
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        if let Some(on_drop) = self.on_drop.take() {
            on_drop();
        }
    }
}

impl std::fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchStream").finish_non_exhaustive()
    }
}

/// The sending end of a watch, held by a backend.
#[derive(Clone)]
pub struct WatchSender {
    sender: mpsc::Sender<WatchEvent>,
    terminal: Arc<Mutex<Option<MetaError>>>,
}

/// The consumer dropped its [`WatchStream`]: the backend should stop the watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchClosed;

/// Creates a watch channel of [`WATCH_CHANNEL_CAPACITY`] events.
///
/// If every sender is dropped without [`WatchSender::fail`], the stream ends with
/// `MetaError::Unavailable` naming `endpoint` and `prefix`, so a backend bug or a crashed task
/// cannot end a watch silently.
pub fn watch_channel(endpoint: &str, prefix: &str) -> (WatchSender, WatchStream) {
    let (sender, receiver) = mpsc::channel(WATCH_CHANNEL_CAPACITY);
    let terminal = Arc::new(Mutex::new(None));
    let fallback = MetaError::Unavailable {
        endpoint: endpoint.to_string(),
        reason: format!("the watch on prefix {prefix:?} ended"),
    };
    let stream = WatchStream { receiver, terminal: terminal.clone(), fallback: Some(fallback), on_drop: None };
    (WatchSender { sender, terminal }, stream)
}

impl WatchSender {
    /// Sends one event, waiting while the consumer's buffer is full.
    pub async fn send(&self, event: WatchEvent) -> Result<(), WatchClosed> {
        self.sender.send(event).await.map_err(|_| WatchClosed)
    }

    /// Sends one event if the consumer's buffer has room. `Ok(false)` means it is full.
    pub fn try_send(&self, event: WatchEvent) -> Result<bool, WatchClosed> {
        match self.sender.try_send(event) {
            Ok(()) => Ok(true),
            Err(mpsc::error::TrySendError::Full(_)) => Ok(false),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(WatchClosed),
        }
    }

    /// Ends the watch with `error`, after the events already sent. The first error wins.
    pub fn fail(self, error: MetaError) {
        let mut terminal = self.terminal.lock().expect("watch terminal slot poisoned");
        if terminal.is_none() {
            *terminal = Some(error);
        }
    }

    /// Resolves when the consumer has dropped its stream.
    pub async fn closed(&self) {
        self.sender.closed().await;
    }

    pub fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WatchEvent;

    #[tokio::test]
    async fn a_watch_ends_with_exactly_one_error() {
        let (sender, mut stream) = watch_channel("test", "/p/");
        sender.send(WatchEvent::delete("/p/a", 4)).await.unwrap();
        sender.fail(MetaError::Compacted { prefix: "/p/".into(), revision: 5, reason: "test".into() });
        assert_eq!(stream.next().await.unwrap().unwrap().revision, 4);
        assert!(matches!(stream.next().await, Some(Err(MetaError::Compacted { revision: 5, .. }))));
        assert!(stream.next().await.is_none());
        assert!(stream.next().await.is_none());

        let (sender, mut stream) = watch_channel("test", "/p/");
        drop(sender);
        assert!(matches!(stream.next().await, Some(Err(MetaError::Unavailable { .. }))));
        assert!(stream.next().await.is_none());
    }

    #[tokio::test]
    async fn dropping_the_stream_runs_on_drop_and_closes_the_sender() {
        let (sender, stream) = watch_channel("test", "/p/");
        let (done_sender, done_receiver) = std::sync::mpsc::channel();
        let stream = stream.with_on_drop(move || done_sender.send(()).unwrap());
        assert!(!sender.is_closed());
        drop(stream);
        done_receiver.try_recv().unwrap();
        assert!(sender.is_closed());
        assert_eq!(sender.send(WatchEvent::delete("/p/a", 1)).await, Err(WatchClosed));
    }
}
