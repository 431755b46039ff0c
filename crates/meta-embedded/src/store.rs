//! `EmbeddedMetaStore`: the `MetaStore` of one machine, in memory, durable in a log.
//!
//! All state lives in memory behind a read-write lock; reads never wait for the disk. Writes
//! (puts, deletes, transactions, lease revocations and expiries) are serialized by the log's
//! mutex: the writer plans its changes against the current state, appends them to the log as
//! one record and flushes it, and only then applies them to the state and wakes the watchers.
//! So a write is durable before anyone can see it, and the revision order is the log order.
//! Writes run on tokio's blocking pool, because the flush blocks.
//!
//! Watchers do not get pushed events. Each watch is a task with a cursor (the next revision it
//! needs) into a bounded in-memory history of recent revisions; a tokio `watch` channel tells
//! it when the revision moves. A slow consumer therefore never blocks writers: if it falls
//! behind the history, its watch ends with `MetaError::Compacted` and it lists again. The same
//! history serves `start_revision` replays. The history starts empty when the store opens.
//!
//! [`EmbeddedMetaStore::in_memory`] is the same store with no log: nothing survives it, and
//! every write runs inline on the caller's task instead of the blocking pool, so a simulation
//! on one thread sees the same order of events from the same inputs (ADR 0020).
//!
//! Leases live only in memory and expire on tokio's clock. A store that reopens has no leases,
//! so its first commit deletes every key that was attached to a lease, as a restarted etcd
//! would once the old leases expired (etcd keeps leases across restarts and gives them a fresh
//! TTL; here the holders simply find their lease gone at the next keep-alive and grant a new
//! one). Lease ids embed a boot count stored in the log, so an id from before a restart never
//! matches a lease granted after it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use async_trait::async_trait;
use meta::{
    watch_channel, KeyValue, LeaseId, Listing, MetaError, MetaStore, Txn, TxnOp, TxnOpResult, TxnResponse, WatchEvent,
    WatchEventKind, WatchSender, WatchStream,
};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::lock::{LockError, LockFile};
use crate::log::{self, Change, Log, Record, StoredKey, LOCK_FILE_NAME, RECORD_PAYLOAD_SIZE_BYTES_MAX};
use crate::EmbeddedError;

/// Tuning of an [`EmbeddedMetaStore`].
#[derive(Clone, Debug)]
pub struct EmbeddedOptions {
    /// When the log grows past this size, the state is written to a new snapshot and the log
    /// starts over.
    pub log_compaction_threshold_bytes: u64,
    /// How many recent events are kept for watchers that lag and for `start_revision` replays.
    pub watch_history_events: usize,
}

impl Default for EmbeddedOptions {
    fn default() -> EmbeddedOptions {
        EmbeddedOptions { log_compaction_threshold_bytes: 64 << 20, watch_history_events: 10_000 }
    }
}

/// The most events a watcher collects under one read lock.
const WATCH_BATCH_EVENTS_MAX: usize = 256;

/// A single-machine metadata store. Cloning gives another handle to the same store; the store
/// closes (and releases its directory) when the last handle is dropped.
#[derive(Clone)]
pub struct EmbeddedMetaStore {
    inner: Arc<Inner>,
}

struct Inner {
    endpoint: String,
    options: EmbeddedOptions,
    /// The commit lock: held while planning, logging and applying a write.
    log: Mutex<LogState>,
    state: RwLock<State>,
    /// The latest revision, for waking watchers.
    revision_sender: watch::Sender<i64>,
    lease_wakeup: Arc<Notify>,
    /// The directory's lock; `None` in memory.
    lock: Option<LockFile>,
}

struct LogState {
    /// `None` in memory: commits are applied without being logged.
    log: Option<Log>,
    /// Why writes are refused: set after a failed append or snapshot, whose effect on the
    /// files is unknown until the store is reopened and recovered.
    poisoned: Option<String>,
}

struct Lease {
    ttl_s: u64,
    deadline: Instant,
    keys: BTreeSet<String>,
}

struct HistoryEntry {
    revision: i64,
    events: Vec<WatchEvent>,
}

struct State {
    revision: i64,
    kvs: BTreeMap<String, StoredKey>,
    /// Ordered: expiry walks it, and a run must revoke in the same order as the last.
    leases: BTreeMap<LeaseId, Lease>,
    boot_count: u64,
    next_lease_index: u32,
    history: VecDeque<HistoryEntry>,
    history_event_count: usize,
    /// The oldest revision whose events are all in `history`; older ones are gone.
    history_first_revision: i64,
    /// Whether no lease expires now (`EmbeddedMetaStore::hold_leases`).
    leases_held: bool,
}

impl State {
    fn new(revision: i64, kvs: BTreeMap<String, StoredKey>, boot_count: u64) -> State {
        State {
            revision,
            kvs,
            leases: BTreeMap::new(),
            boot_count,
            next_lease_index: 1,
            history: VecDeque::new(),
            history_event_count: 0,
            history_first_revision: revision + 1,
            leases_held: false,
        }
    }

    fn key_value(&self, key: &str) -> Option<KeyValue> {
        self.kvs.get(key).map(|stored| key_value(key, stored))
    }

    fn lease_is_live(&self, lease: LeaseId, now: Instant) -> bool {
        self.leases.get(&lease).is_some_and(|lease| self.leases_held || lease.deadline > now)
    }
}

fn key_value(key: &str, stored: &StoredKey) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: stored.value.clone(),
        create_revision: stored.create_revision,
        mod_revision: stored.mod_revision,
        version: stored.version,
        lease: stored.lease,
    }
}

/// The outcome of planning a transaction: what it returns and what it changes.
struct TxnPlan {
    succeeded: bool,
    results: Vec<TxnOpResult>,
    changes: Vec<Change>,
}

impl EmbeddedMetaStore {
    /// Opens the store in directory `path` (created if missing) with default options.
    ///
    /// Must run inside a tokio runtime: the store spawns its lease-expiry task there.
    pub async fn open(path: impl AsRef<Path>) -> Result<EmbeddedMetaStore, EmbeddedError> {
        EmbeddedMetaStore::open_with(path, EmbeddedOptions::default()).await
    }

    pub async fn open_with(
        path: impl AsRef<Path>,
        options: EmbeddedOptions,
    ) -> Result<EmbeddedMetaStore, EmbeddedError> {
        let path = path.as_ref().to_path_buf();
        let blocking_path = path.clone();
        let (lock, log, recovered) = tokio::task::spawn_blocking(move || open_files(&blocking_path))
            .await
            .map_err(|error| EmbeddedError::Io { path: path.clone(), operation: "open", source: error.into() })??;
        let revision = recovered.revision;
        let state = State::new(revision, recovered.kvs, recovered.boot_count);
        let (revision_sender, _) = watch::channel(revision);
        let inner = Arc::new(Inner {
            endpoint: path.display().to_string(),
            options,
            log: Mutex::new(LogState { log: Some(log), poisoned: None }),
            state: RwLock::new(state),
            revision_sender,
            lease_wakeup: Arc::new(Notify::new()),
            lock: Some(lock),
        });
        // The leases of the previous run are gone, so are their keys (see the module comment).
        let inner_for_cleanup = inner.clone();
        tokio::task::spawn_blocking(move || inner_for_cleanup.delete_orphaned_leased_keys())
            .await
            .map_err(|error| EmbeddedError::Io { path: path.clone(), operation: "open", source: error.into() })?
            .map_err(|error| EmbeddedError::Io {
                path: path.clone(),
                operation: "delete keys of leases from before the restart",
                source: std::io::Error::other(error.to_string()),
            })?;
        tokio::spawn(run_lease_expiry(Arc::downgrade(&inner), inner.lease_wakeup.clone()));
        Ok(EmbeddedMetaStore { inner })
    }

    /// Stops expiring leases until [`EmbeddedMetaStore::release_leases`]: a lease past its
    /// deadline meanwhile is still live. This is what an etcd cluster does while it has no
    /// leader (only a leader revokes leases), for a simulation of etcd's elections.
    pub fn hold_leases(&self) {
        self.inner.state.write().expect("state lock").leases_held = true;
        self.inner.lease_wakeup.notify_one();
    }

    /// Expires leases again: with `renew`, each given its whole TTL from now, as an etcd member
    /// that becomes the leader does (etcd adds an election timeout); without, on the deadlines
    /// they had, as a leader that resumes before anyone replaced it does.
    pub fn release_leases(&self, renew: bool) {
        let mut state = self.inner.state.write().expect("state lock");
        let now = Instant::now();
        state.leases_held = false;
        if renew {
            for lease in state.leases.values_mut() {
                lease.deadline = now + Duration::from_secs(lease.ttl_s);
            }
        }
        drop(state);
        self.inner.lease_wakeup.notify_one();
    }

    /// A store with no files (its endpoint is `memory`): it starts empty, and what it holds
    /// goes when the last handle is dropped. Must run inside a tokio runtime.
    pub fn in_memory(options: EmbeddedOptions) -> EmbeddedMetaStore {
        let (revision_sender, _) = watch::channel(0);
        let inner = Arc::new(Inner {
            endpoint: "memory".to_string(),
            options,
            log: Mutex::new(LogState { log: None, poisoned: None }),
            state: RwLock::new(State::new(0, BTreeMap::new(), 1)),
            revision_sender,
            lease_wakeup: Arc::new(Notify::new()),
            lock: None,
        });
        tokio::spawn(run_lease_expiry(Arc::downgrade(&inner), inner.lease_wakeup.clone()));
        EmbeddedMetaStore { inner }
    }

    /// The directory of the store (`memory` for one [`in_memory`](Self::in_memory)).
    pub fn path(&self) -> PathBuf {
        PathBuf::from(&self.inner.endpoint)
    }

    /// The current revision.
    pub fn revision(&self) -> i64 {
        self.inner.state.read().expect("state lock").revision
    }
}

impl Inner {
    fn in_memory(&self) -> bool {
        self.lock.is_none()
    }

    /// Runs a write on the blocking pool (inline in memory, where nothing blocks).
    async fn write<T: Send + 'static>(
        self: &Arc<Inner>,
        key: &str,
        write: impl FnOnce(&Inner) -> Result<T, MetaError> + Send + 'static,
    ) -> Result<T, MetaError> {
        if self.in_memory() {
            return write(self);
        }
        let inner = self.clone();
        match tokio::task::spawn_blocking(move || write(&inner)).await {
            Ok(result) => result,
            Err(error) => Err(MetaError::other(key, format!("the write task failed: {error}"))),
        }
    }
}

fn open_files(path: &Path) -> Result<(LockFile, Log, log::Recovered), EmbeddedError> {
    std::fs::create_dir_all(path).map_err(|source| EmbeddedError::Io {
        path: path.to_path_buf(),
        operation: "create directory",
        source,
    })?;
    let lock = match LockFile::acquire(&path.join(LOCK_FILE_NAME)) {
        Ok(lock) => lock,
        Err(LockError::InUse) => return Err(EmbeddedError::InUse { path: path.to_path_buf() }),
        Err(LockError::Io(source)) => {
            return Err(EmbeddedError::Io { path: path.join(LOCK_FILE_NAME), operation: "lock", source })
        }
    };
    let (mut log, mut recovered) = log::open(path)?;
    recovered.boot_count += 1;
    log.append(&Record::Boot { boot_count: recovered.boot_count }).map_err(|source| EmbeddedError::Io {
        path: log.path(),
        operation: "append boot record",
        source,
    })?;
    Ok((lock, log, recovered))
}

impl Inner {
    fn delete_orphaned_leased_keys(&self) -> Result<(), MetaError> {
        let mut log = self.log.lock().expect("log lock");
        let changes: Vec<Change> = {
            let state = self.state.read().expect("state lock");
            state
                .kvs
                .iter()
                .filter(|(_, stored)| stored.lease.is_some())
                .map(|(key, _)| Change::Delete { key: key.clone() })
                .collect()
        };
        if !changes.is_empty() {
            tracing::info!(path = %self.endpoint, keys = changes.len(), "deleting the leased keys of the previous run");
            self.commit(&mut log, changes, None)?;
        }
        Ok(())
    }

    /// Logs `changes` as the next revision, then applies them and wakes the watchers. The
    /// caller holds the log lock and planned `changes` against the current state. Returns the
    /// revision after the commit.
    fn commit(&self, log: &mut LogState, changes: Vec<Change>, revoked: Option<LeaseId>) -> Result<i64, MetaError> {
        let first_key = changes.first().map_or("", |change| change.key()).to_string();
        if let Some(reason) = &log.poisoned {
            return Err(MetaError::other(
                first_key,
                format!("metadata store {} refuses writes: {reason}", self.endpoint),
            ));
        }
        if changes.is_empty() {
            let mut state = self.state.write().expect("state lock");
            if let Some(lease) = revoked {
                state.leases.remove(&lease);
            }
            return Ok(state.revision);
        }
        let revision = self.state.read().expect("state lock").revision + 1;
        let record = Record::Commit { revision, changes };
        if let Some(file) = &mut log.log {
            if let Err(error) = file.append(&record) {
                let reason = format!("appending to {} failed: {error}", file.path().display());
                tracing::error!(path = %self.endpoint, "{reason}; refusing writes until reopened");
                log.poisoned = Some(reason.clone());
                return Err(MetaError::other(first_key, reason));
            }
        }
        let Record::Commit { changes, .. } = record else { unreachable!("built above") };
        {
            let mut state = self.state.write().expect("state lock");
            assert_eq!(state.revision + 1, revision);
            apply(&mut state, revision, changes, self.options.watch_history_events);
            if let Some(lease) = revoked {
                state.leases.remove(&lease);
            }
        }
        self.revision_sender.send_replace(revision);
        let Some(file) = &mut log.log else { return Ok(revision) };
        if file.size_bytes() > self.options.log_compaction_threshold_bytes {
            let snapshot = {
                let state = self.state.read().expect("state lock");
                log::encode_snapshot(state.revision, state.boot_count, &state.kvs)
            };
            if let Err(error) = file.install_snapshot(&snapshot) {
                // The commit itself is durable; only later writes are refused.
                let reason = format!("writing a snapshot in {} failed: {error}", self.endpoint);
                tracing::error!(path = %self.endpoint, "{reason}; refusing writes until reopened");
                log.poisoned = Some(reason);
            }
        }
        Ok(revision)
    }

    fn txn(&self, txn: &Txn) -> Result<TxnResponse, MetaError> {
        let mut log = self.log.lock().expect("log lock");
        let plan = plan_txn(&self.state.read().expect("state lock"), txn, Instant::now())?;
        let revision = self.commit(&mut log, plan.changes, None)?;
        Ok(TxnResponse { succeeded: plan.succeeded, revision, results: plan.results })
    }

    /// Revokes `lease` and deletes its keys. With `only_if_expired`, a lease that was renewed
    /// in the meantime is left alone (the expiry task's check and this commit are not atomic).
    fn revoke(&self, lease: LeaseId, only_if_expired: bool) -> Result<(), MetaError> {
        let mut log = self.log.lock().expect("log lock");
        let changes = {
            let state = self.state.read().expect("state lock");
            let Some(entry) = state.leases.get(&lease) else {
                return Err(MetaError::LeaseExpired { lease });
            };
            if only_if_expired && (state.leases_held || entry.deadline > Instant::now()) {
                return Ok(());
            }
            entry.keys.iter().map(|key| Change::Delete { key: key.clone() }).collect()
        };
        self.commit(&mut log, changes, Some(lease))?;
        Ok(())
    }

    fn compacted(&self, state: &State, prefix: &str, revision: i64) -> MetaError {
        MetaError::Compacted {
            prefix: prefix.to_string(),
            revision,
            reason: format!(
                "the history of {} starts at revision {} (compacted, trimmed, or from before it was opened)",
                self.endpoint, state.history_first_revision
            ),
        }
    }

    fn collect_events(&self, prefix: &str, next_revision: &mut i64) -> Result<Vec<WatchEvent>, MetaError> {
        let state = self.state.read().expect("state lock");
        if *next_revision < state.history_first_revision {
            return Err(self.compacted(&state, prefix, *next_revision));
        }
        let start = state.history.partition_point(|entry| entry.revision < *next_revision);
        let mut events = Vec::new();
        for entry in state.history.range(start..) {
            events.extend(entry.events.iter().filter(|event| event.kv.key.starts_with(prefix)).cloned());
            *next_revision = entry.revision + 1;
            if events.len() >= WATCH_BATCH_EVENTS_MAX {
                break;
            }
        }
        Ok(events)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Lets the lease-expiry task notice that the store is gone.
        self.lease_wakeup.notify_one();
    }
}

/// Evaluates `txn` against `state`. `now` decides which leases are live.
fn plan_txn(state: &State, txn: &Txn, now: Instant) -> Result<TxnPlan, MetaError> {
    let succeeded = txn.compares.iter().all(|compare| compare.evaluate(state.key_value(&compare.key).as_ref()));
    let ops = if succeeded { &txn.success } else { &txn.failure };
    let revision = state.revision + 1;
    // The keys this branch has written so far, with their new state (`None`: deleted).
    let mut written: HashMap<&str, Option<StoredKey>> = HashMap::new();
    let mut put_keys: HashSet<&str> = HashSet::new();
    let mut results = Vec::with_capacity(ops.len());
    let mut changes = Vec::new();
    let mut record_size_bytes = 0usize;
    for op in ops {
        let key = op.key();
        let current = match written.get(key) {
            Some(stored) => stored.clone(),
            None => state.kvs.get(key).cloned(),
        };
        match op {
            TxnOp::Get { .. } => results.push(TxnOpResult::Get(current.as_ref().map(|stored| key_value(key, stored)))),
            TxnOp::Put { value, lease, .. } => {
                if !put_keys.insert(key) || written.contains_key(key) {
                    return Err(MetaError::other(key, "duplicate key given in txn request"));
                }
                if let Some(lease) = lease {
                    if !state.lease_is_live(*lease, now) {
                        return Err(MetaError::LeaseExpired { lease: *lease });
                    }
                }
                let (create_revision, version) = match &current {
                    Some(stored) => (stored.create_revision, stored.version + 1),
                    None => (revision, 1),
                };
                record_size_bytes += key.len() + value.len() + 64;
                let stored =
                    StoredKey { value: value.clone(), create_revision, mod_revision: revision, version, lease: *lease };
                written.insert(key, Some(stored));
                changes.push(Change::Put {
                    key: key.to_string(),
                    value: value.clone(),
                    create_revision,
                    version,
                    lease: *lease,
                });
                results.push(TxnOpResult::Put);
            }
            TxnOp::Delete { .. } => {
                if put_keys.contains(key) {
                    return Err(MetaError::other(key, "duplicate key given in txn request"));
                }
                let deleted = current.is_some();
                if deleted {
                    record_size_bytes += key.len() + 16;
                    written.insert(key, None);
                    changes.push(Change::Delete { key: key.to_string() });
                }
                results.push(TxnOpResult::Delete { deleted });
            }
        }
    }
    if record_size_bytes > RECORD_PAYLOAD_SIZE_BYTES_MAX / 2 {
        let key = ops.first().map_or("", |op| op.key());
        return Err(MetaError::other(key, format!("transaction of about {record_size_bytes} bytes is too large")));
    }
    Ok(TxnPlan { succeeded, results, changes })
}

/// Applies a logged commit to the state: keys, lease membership and watch history.
fn apply(state: &mut State, revision: i64, changes: Vec<Change>, history_events_max: usize) {
    let mut events = Vec::with_capacity(changes.len());
    for change in changes {
        let key = change.key().to_string();
        let previous_lease = state.kvs.get(&key).and_then(|stored| stored.lease);
        if let Some(lease) = previous_lease.and_then(|lease| state.leases.get_mut(&lease)) {
            lease.keys.remove(&key);
        }
        match change {
            Change::Put { key, value, create_revision, version, lease } => {
                if let Some(entry) = lease.and_then(|lease| state.leases.get_mut(&lease)) {
                    entry.keys.insert(key.clone());
                }
                let stored = StoredKey { value, create_revision, mod_revision: revision, version, lease };
                events.push(WatchEvent { kind: WatchEventKind::Put, kv: key_value(&key, &stored), revision });
                state.kvs.insert(key, stored);
            }
            Change::Delete { key } => {
                state.kvs.remove(&key);
                events.push(WatchEvent::delete(key, revision));
            }
        }
    }
    state.revision = revision;
    state.history_event_count += events.len();
    state.history.push_back(HistoryEntry { revision, events });
    while state.history_event_count > history_events_max && state.history.len() > 1 {
        let dropped = state.history.pop_front().expect("len > 1");
        state.history_event_count -= dropped.events.len();
    }
    let oldest = state.history.front().expect("just pushed").revision;
    state.history_first_revision = state.history_first_revision.max(oldest);
}

/// Revokes leases when they expire. Holds only a weak reference, so the store can close.
async fn run_lease_expiry(inner: Weak<Inner>, wakeup: Arc<Notify>) {
    loop {
        let next_deadline = {
            let Some(inner) = inner.upgrade() else { return };
            let now = Instant::now();
            let expired: Vec<LeaseId> = {
                let state = inner.state.read().expect("state lock");
                if state.leases_held {
                    Vec::new()
                } else {
                    state.leases.iter().filter(|(_, lease)| lease.deadline <= now).map(|(id, _)| *id).collect()
                }
            };
            for lease in expired {
                match inner.write("", move |inner| inner.revoke(lease, true)).await {
                    Ok(()) | Err(MetaError::LeaseExpired { .. }) => {}
                    Err(error) => tracing::error!(lease = %lease, "revoking an expired lease failed: {error}"),
                }
            }
            let state = inner.state.read().expect("state lock");
            // Held leases wait for `release_leases`, which wakes this task.
            if state.leases_held {
                None
            } else {
                state.leases.values().map(|lease| lease.deadline).min()
            }
        };
        match next_deadline {
            Some(deadline) => {
                tokio::select! {
                    biased;
                    _ = tokio::time::sleep_until(deadline) => {}
                    _ = wakeup.notified() => {}
                }
            }
            None => wakeup.notified().await,
        }
    }
}

/// Feeds one watch from the history. Holds only a weak reference, so the store can close.
async fn run_watcher(
    inner: Weak<Inner>,
    endpoint: String,
    prefix: String,
    mut next_revision: i64,
    sender: WatchSender,
    mut revisions: watch::Receiver<i64>,
) {
    let closed = |sender: WatchSender| {
        sender.fail(MetaError::unavailable(endpoint.clone(), "the metadata store was closed"));
    };
    loop {
        revisions.borrow_and_update();
        let events = {
            let Some(inner) = inner.upgrade() else { return closed(sender) };
            inner.collect_events(&prefix, &mut next_revision)
        };
        match events {
            Err(error) => return sender.fail(error),
            Ok(events) if events.is_empty() => {
                tokio::select! {
                    biased;
                    changed = revisions.changed() => {
                        if changed.is_err() {
                            return closed(sender);
                        }
                    }
                    _ = sender.closed() => return,
                }
            }
            Ok(events) => {
                for event in events {
                    if sender.send(event).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

#[async_trait]
impl MetaStore for EmbeddedMetaStore {
    fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError> {
        Ok(self.inner.state.read().expect("state lock").key_value(key))
    }

    async fn put(&self, key: &str, value: Vec<u8>, lease: Option<LeaseId>) -> Result<i64, MetaError> {
        let txn =
            Txn { compares: vec![], success: vec![TxnOp::Put { key: key.to_string(), value, lease }], failure: vec![] };
        Ok(self.inner.write(key, move |inner| inner.txn(&txn)).await?.revision)
    }

    async fn delete(&self, key: &str) -> Result<bool, MetaError> {
        let txn = Txn { compares: vec![], success: vec![TxnOp::delete(key)], failure: vec![] };
        let response = self.inner.write(key, move |inner| inner.txn(&txn)).await?;
        Ok(matches!(response.results.as_slice(), [TxnOpResult::Delete { deleted: true }]))
    }

    async fn list_with_revision(&self, prefix: &str) -> Result<Listing, MetaError> {
        let state = self.inner.state.read().expect("state lock");
        let kvs = state
            .kvs
            .range::<str, _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(prefix))
            .map(|(key, stored)| key_value(key, stored))
            .collect();
        Ok(Listing { kvs, revision: state.revision })
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, MetaError> {
        let key = txn.compares.first().map(|compare| compare.key.clone()).unwrap_or_default();
        self.inner.write(&key, move |inner| inner.txn(&txn)).await
    }

    async fn watch(&self, prefix: &str, start_revision: Option<i64>) -> Result<WatchStream, MetaError> {
        let next_revision = {
            let state = self.inner.state.read().expect("state lock");
            match start_revision {
                // Refuse a compacted start now rather than as the stream's first item.
                Some(revision) if revision > 0 && revision < state.history_first_revision => {
                    return Err(self.inner.compacted(&state, prefix, revision));
                }
                Some(revision) if revision > 0 => revision,
                _ => state.revision + 1,
            }
        };
        let (sender, stream) = watch_channel(&self.inner.endpoint, prefix);
        let revisions = self.inner.revision_sender.subscribe();
        let endpoint = self.inner.endpoint.clone();
        tokio::spawn(run_watcher(
            Arc::downgrade(&self.inner),
            endpoint,
            prefix.to_string(),
            next_revision,
            sender,
            revisions,
        ));
        Ok(stream)
    }

    async fn compact(&self, revision: i64) -> Result<(), MetaError> {
        let mut state = self.inner.state.write().expect("state lock");
        if revision > state.revision {
            return Err(MetaError::other(
                "",
                format!("cannot compact to revision {revision}, a future revision (current {})", state.revision),
            ));
        }
        while state.history.front().is_some_and(|entry| entry.revision < revision) {
            let dropped = state.history.pop_front().expect("checked");
            state.history_event_count -= dropped.events.len();
        }
        state.history_first_revision = state.history_first_revision.max(revision);
        Ok(())
    }

    async fn lease_grant(&self, ttl_s: u64) -> Result<LeaseId, MetaError> {
        let ttl_s = ttl_s.clamp(1, 365 * 24 * 3600);
        let lease = {
            let mut state = self.inner.state.write().expect("state lock");
            let index = state.next_lease_index;
            state.next_lease_index = index
                .checked_add(1)
                .ok_or_else(|| MetaError::other("", "lease ids of this run are exhausted; reopen the store"))?;
            let boot_count = i64::try_from(state.boot_count & 0x7fff_ffff).expect("31 bits");
            let lease = LeaseId(boot_count << 32 | i64::from(index));
            let deadline = Instant::now() + Duration::from_secs(ttl_s);
            state.leases.insert(lease, Lease { ttl_s, deadline, keys: BTreeSet::new() });
            lease
        };
        self.inner.lease_wakeup.notify_one();
        Ok(lease)
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<u64, MetaError> {
        let mut state = self.inner.state.write().expect("state lock");
        let now = Instant::now();
        let held = state.leases_held;
        match state.leases.get_mut(&lease) {
            Some(entry) if held || entry.deadline > now => {
                entry.deadline = now + Duration::from_secs(entry.ttl_s);
                Ok(entry.ttl_s)
            }
            _ => Err(MetaError::LeaseExpired { lease }),
        }
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), MetaError> {
        self.inner.write("", move |inner| inner.revoke(lease, false)).await
    }
}
