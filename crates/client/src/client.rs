//! `Client`: the cluster map, the connection table (one connection per OSD), and volume lookup.
//!
//! The map comes from a [`MapWatcher`]. A background task follows it and closes the connection
//! to every OSD that left the map or moved to another address, so calls waiting on a dead OSD
//! fail at once and retry at the PG's new primary instead of waiting for their deadline.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use cluster::{keys, ClusterMap, SnapshotRecord, VolumeRecord};
use cluster_watch::MapWatcher;
use meta::MetaStore;
use net::Connection;
use stdx::HashSet;
use tokio::sync::{watch, OnceCell};
use tokio::time::Instant;

use crate::volume::Volume;
use crate::{ClientError, ClientOptions, BLOCK_SIZE_BYTES};

/// How long `open_volume` waits for the map to catch up with a volume it found in the store.
const MAP_CATCH_UP_TIMEOUT: Duration = Duration::from_secs(5);

/// A handle to the cluster. Clones share the map and the connections.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    store: Arc<dyn MetaStore>,
    watcher: MapWatcher,
    map: watch::Receiver<Arc<ClusterMap>>,
    connections: Mutex<BTreeMap<u32, OsdConnection>>,
    pub(crate) options: ClientOptions,
    /// The OSD incarnations already reported to `options.down_reporter`.
    reported: Mutex<HashSet<(u32, i64)>>,
}

/// The connection to one OSD at one address; the cell is empty until the first call connects.
struct OsdConnection {
    address: String,
    /// The OSD's incarnation when the connection was opened: a new one (the OSD restarted, or
    /// ended its incarnation when the mon marked it down) will not answer what the old one was sent.
    incarnation: Option<i64>,
    cell: Arc<OnceCell<Connection>>,
}

/// Why a connection to an OSD could not be had.
#[derive(Debug)]
pub(crate) struct ConnectError {
    pub reason: String,
}

impl Client {
    /// Connects to the metadata store at `meta_url` (`http://...` for etcd, `basalt://...` for
    /// an embedded store served by a mon) and loads the cluster map.
    pub async fn connect(meta_url: &str) -> Result<Client, ClientError> {
        Client::connect_with(meta_url, ClientOptions::default()).await
    }

    pub async fn connect_with(meta_url: &str, options: ClientOptions) -> Result<Client, ClientError> {
        let store = cluster_watch::connect(meta_url).await?;
        Client::with_store_and_options(store, options).await
    }

    /// A client on an open metadata store.
    pub async fn with_store(store: Arc<dyn MetaStore>) -> Result<Client, ClientError> {
        Client::with_store_and_options(store, ClientOptions::default()).await
    }

    pub async fn with_store_and_options(
        store: Arc<dyn MetaStore>,
        options: ClientOptions,
    ) -> Result<Client, ClientError> {
        let watcher = MapWatcher::start(store.clone()).await?;
        let map = watcher.subscribe();
        let inner = Arc::new(ClientInner {
            store,
            watcher,
            map,
            connections: Mutex::new(BTreeMap::new()),
            options,
            reported: Mutex::new(HashSet::default()),
        });
        tokio::spawn(close_departed_osds(Arc::downgrade(&inner), inner.watcher.subscribe()));
        Ok(Client { inner })
    }

    /// Opens volume `name`. Fails with [`ClientError::NoSuchVolume`] if there is none, and with
    /// [`ClientError::InvalidVolume`] if it is being deleted or its record cannot be served.
    pub async fn open_volume(&self, name: &str) -> Result<Volume, ClientError> {
        let mut map = self.map();
        if !map.volumes.contains_key(name) {
            // Created a moment ago: the store has it before the watch delivers it.
            if let Some(kv) = self.inner.store.get(&keys::volume(name)).await? {
                let catch_up = self.inner.watcher.wait_for_revision(kv.mod_revision);
                if let Ok(caught_up) = tokio::time::timeout(MAP_CATCH_UP_TIMEOUT, catch_up).await {
                    map = caught_up;
                }
            }
        }
        let Some(record) = map.volumes.get(name) else {
            return Err(ClientError::NoSuchVolume { name: name.to_string() });
        };
        check_volume(&map, record)?;
        Ok(Volume::new(self.clone(), record))
    }

    /// Opens snapshot `full_name` (`VOLUME@SNAP`), read only.
    pub async fn open_snapshot(&self, full_name: &str) -> Result<Volume, ClientError> {
        let mut map = self.map();
        if !map.snapshots.contains_key(full_name) {
            if let Some(kv) = self.inner.store.get(&keys::snapshot(full_name)).await? {
                let catch_up = self.inner.watcher.wait_for_revision(kv.mod_revision);
                if let Ok(caught_up) = tokio::time::timeout(MAP_CATCH_UP_TIMEOUT, catch_up).await {
                    map = caught_up;
                }
            }
        }
        let Some(record) = map.snapshots.get(full_name) else {
            return Err(ClientError::NoSuchSnapshot { name: full_name.to_string() });
        };
        if !map.pools.contains_key(&record.pool) {
            return Err(ClientError::InvalidVolume {
                name: full_name.to_string(),
                reason: format!("its pool {} is not in the cluster map", record.pool),
            });
        }
        Ok(Volume::snapshot(self.clone(), record))
    }

    /// A handle whose trims delete the objects of `snapshot`, a layer of a volume being
    /// removed (the OSDs refuse them otherwise).
    pub fn open_snapshot_for_removal(&self, snapshot: &SnapshotRecord) -> Result<Volume, ClientError> {
        if !snapshot.deleting {
            return Err(ClientError::InvalidVolume {
                name: snapshot.full_name(),
                reason: "its volume is not being removed".into(),
            });
        }
        Ok(Volume::snapshot_removal(self.clone(), snapshot))
    }

    /// Opens volume `name` even while it is being deleted: for removing its objects.
    pub async fn open_volume_for_removal(&self, name: &str) -> Result<Volume, ClientError> {
        let map = self.map();
        let Some(record) = map.volumes.get(name) else {
            return Err(ClientError::NoSuchVolume { name: name.to_string() });
        };
        Ok(Volume::new(self.clone(), record))
    }

    /// The cluster map as the client sees it now.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.inner.map.borrow().clone()
    }

    /// Waits until the map's revision is above `revision`, for at most `timeout`.
    pub(crate) async fn wait_for_newer_map(&self, revision: i64, timeout: Duration) {
        let mut receiver = self.inner.map.clone();
        let _ = tokio::time::timeout(timeout, receiver.wait_for(|map| map.revision > revision)).await;
    }

    /// Resolves once the map routes `pg` to another epoch or primary than `epoch` at `osd`.
    pub(crate) async fn route_moved(&self, pg: wire::PgId, epoch: u64, osd: u32) {
        let mut receiver = self.inner.map.clone();
        let moved =
            receiver.wait_for(|map| map.pg_epoch_and_primary(pg.pool, pg.pg) != Some((epoch, Some(osd)))).await.is_ok();
        if !moved {
            std::future::pending::<()>().await;
        }
    }

    /// The connection to `osd` at `address`, opening it if there is none or the last one closed
    /// (giving up at `deadline` or after `ClientOptions::connect_timeout`, whichever is first).
    pub(crate) async fn connection(
        &self,
        osd: u32,
        address: &str,
        deadline: Instant,
    ) -> Result<Connection, ConnectError> {
        let cell = {
            let mut connections = self.inner.connections.lock().expect("connection table lock poisoned");
            let reusable = connections.get(&osd).filter(|entry| entry.address == address);
            match reusable.map(|entry| (entry.cell.get(), &entry.cell)) {
                Some((Some(connection), _)) if !connection.is_closed() => return Ok(connection.clone()),
                // Another call is connecting (or its attempt failed and this one tries again).
                Some((None, cell)) => cell.clone(),
                // None yet, closed, or to an address the OSD has left.
                _ => {
                    let cell = Arc::new(OnceCell::new());
                    let incarnation = self.inner.map.borrow().live.get(&osd).map(|live| live.incarnation);
                    let entry = OsdConnection { address: address.to_string(), incarnation, cell: cell.clone() };
                    if let Some(connection) =
                        connections.insert(osd, entry).and_then(|previous| previous.cell.get().cloned())
                    {
                        connection.close(&format!("osd.{osd} is now at {address}"));
                    }
                    cell
                }
            }
        };
        let connect_timeout = self.inner.options.connect_timeout;
        let spin_limit = self.inner.options.spin_limit;
        let connection = cell
            .get_or_try_init(|| async {
                let timeout = connect_timeout.min(deadline.saturating_duration_since(Instant::now()));
                match tokio::time::timeout(timeout, net::connect(address)).await {
                    Ok(Ok(connection)) => {
                        connection.set_spin_limit(spin_limit);
                        Ok(connection)
                    }
                    Ok(Err(error)) => {
                        if error.is_refusal() {
                            self.report_down(osd, address);
                        }
                        Err(ConnectError { reason: error.to_string() })
                    }
                    Err(_) => Err(ConnectError {
                        reason: format!("cannot connect to {address}: no answer within {} ms", timeout.as_millis()),
                    }),
                }
            })
            .await?;
        Ok(connection.clone())
    }

    /// Tells the down reporter, once per incarnation, that `osd` refused a connection at
    /// `address` (if the map still names that address for it).
    fn report_down(&self, osd: u32, address: &str) {
        let Some(reporter) = &self.inner.options.down_reporter else { return };
        let Some(incarnation) = self.inner.map.borrow().incarnation_at(osd, address) else { return };
        if self.inner.reported.lock().expect("reported set lock poisoned").insert((osd, incarnation)) {
            tracing::warn!(osd, incarnation, address, "connection refused: reporting the osd as down");
            reporter.report(osd, incarnation);
        }
    }

    /// Closes the connection to `osd` if it is `connection` (a call on it got no reply in time).
    pub(crate) fn drop_connection(&self, osd: u32, connection: &Connection, reason: &str) {
        connection.close(reason);
        let mut connections = self.inner.connections.lock().expect("connection table lock poisoned");
        if connections.get(&osd).and_then(|entry| entry.cell.get()).is_some_and(|current| current.is_closed()) {
            connections.remove(&osd);
        }
    }
}

impl ClientInner {
    /// Closes the connections to OSDs that are no longer running at the address they had.
    fn close_departed_osds(&self, map: &ClusterMap) {
        let mut connections = self.connections.lock().expect("connection table lock poisoned");
        connections.retain(|osd, entry| {
            let incarnation = map.live.get(osd).map(|live| live.incarnation);
            let reason = match map.address(*osd) {
                Some(address) if address == entry.address && incarnation == entry.incarnation => return true,
                Some(address) if address == entry.address => format!("osd.{osd} runs a new incarnation"),
                Some(address) => format!("osd.{osd} moved to {address}"),
                None => format!("osd.{osd} is no longer running (its liveness key is gone)"),
            };
            if let Some(connection) = entry.cell.get() {
                connection.close(&reason);
            }
            false
        });
    }
}

async fn close_departed_osds(inner: Weak<ClientInner>, mut map: watch::Receiver<Arc<ClusterMap>>) {
    while map.changed().await.is_ok() {
        let current = map.borrow_and_update().clone();
        let Some(inner) = inner.upgrade() else { return };
        inner.close_departed_osds(&current);
    }
}

/// Refuses volumes this client cannot serve.
fn check_volume(map: &ClusterMap, record: &VolumeRecord) -> Result<(), ClientError> {
    let invalid = |reason: String| Err(ClientError::InvalidVolume { name: record.name.clone(), reason });
    if record.is_deleting() {
        return invalid("it is being deleted".to_string());
    }
    let object_size_bytes = record.object_size_bytes;
    if !object_size_bytes.is_power_of_two()
        || u64::from(object_size_bytes) < BLOCK_SIZE_BYTES
        || object_size_bytes > wire::limits::DATA_SIZE_MAX_BYTES
    {
        return invalid(format!(
            "its object_size_bytes={object_size_bytes} is not a power of two from {BLOCK_SIZE_BYTES} to {}",
            wire::limits::DATA_SIZE_MAX_BYTES
        ));
    }
    match map.pools.get(&record.pool) {
        None => invalid(format!("its pool {} is not in the cluster map", record.pool)),
        Some(pool) if pool.pg_count == 0 => invalid(format!("its pool {} has no PGs", record.pool)),
        Some(_) => Ok(()),
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("store", &self.inner.store.endpoint()).finish_non_exhaustive()
    }
}
