//! Loading the cluster map and following it.
//!
//! [`MapWatcher`] lists `/basalt/` once and then follows one prefix watch from the listing's
//! revision, so every published [`ClusterMap`] is the state at one revision of the store
//! (never a mix of two). On a watch error it lists again. Values that fail to decode are
//! logged and left out: one bad record must not blind a process to the rest of the cluster.

use std::sync::Arc;
use std::time::Duration;

use cluster::{keys, ClusterMap};
use meta::{MetaError, MetaStore, WatchEventKind};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Reads the whole map at one revision.
pub async fn load(store: &dyn MetaStore) -> Result<ClusterMap, MetaError> {
    let listing = store.list_with_revision(keys::ROOT).await?;
    let mut map = ClusterMap::at_revision(listing.revision);
    for kv in &listing.kvs {
        if let Err(error) = map.apply(&kv.key, Some(&kv.value)) {
            tracing::warn!(%error, "ignoring a metadata record");
        }
    }
    Ok(map)
}

/// Keeps a [`ClusterMap`] current in a background task; dropping it stops the task.
pub struct MapWatcher {
    receiver: watch::Receiver<Arc<ClusterMap>>,
    task: JoinHandle<()>,
}

impl MapWatcher {
    /// Loads the map (so [`MapWatcher::current`] is useful at once) and starts following it.
    pub async fn start(store: Arc<dyn MetaStore>) -> Result<MapWatcher, MetaError> {
        let map = load(store.as_ref()).await?;
        let (sender, receiver) = watch::channel(Arc::new(map));
        let task = tokio::spawn(follow(store, sender));
        Ok(MapWatcher { receiver, task })
    }

    pub fn current(&self) -> Arc<ClusterMap> {
        self.receiver.borrow().clone()
    }

    /// A receiver to await changes with (`changed`, `wait_for`).
    pub fn subscribe(&self) -> watch::Receiver<Arc<ClusterMap>> {
        self.receiver.clone()
    }

    /// Waits until the map reaches at least `revision` (after a write of one's own).
    pub async fn wait_for_revision(&self, revision: i64) -> Arc<ClusterMap> {
        let mut receiver = self.receiver.clone();
        let result = receiver.wait_for(|map| map.revision >= revision).await;
        match result {
            Ok(map) => map.clone(),
            Err(_) => self.current(),
        }
    }
}

impl Drop for MapWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn follow(store: Arc<dyn MetaStore>, sender: watch::Sender<Arc<ClusterMap>>) {
    let mut map = (**sender.borrow()).clone();
    let mut backoff = Duration::from_millis(50);
    loop {
        let mut stream = match store.watch(keys::ROOT, Some(map.revision + 1)).await {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%error, "cluster map watch failed; listing again");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                relist(store.as_ref(), &mut map, &sender).await;
                continue;
            }
        };
        backoff = Duration::from_millis(50);
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => {
                    let value = match event.kind {
                        WatchEventKind::Put => Some(event.kv.value.as_slice()),
                        WatchEventKind::Delete => None,
                    };
                    if let Err(error) = map.apply(&event.kv.key, value) {
                        tracing::warn!(%error, "ignoring a metadata record");
                    }
                    map.revision = map.revision.max(event.revision);
                    // Events of one revision (a transaction) arrive together; publish once
                    // the stream has nothing more ready, so readers never see half of one.
                    if stream_is_drained(&stream) {
                        sender.send_replace(Arc::new(map.clone()));
                    }
                }
                Err(error) => {
                    tracing::debug!(%error, "cluster map watch ended; listing again");
                    break;
                }
            }
        }
        if sender.is_closed() {
            return;
        }
        tokio::time::sleep(backoff).await;
        relist(store.as_ref(), &mut map, &sender).await;
    }
}

fn stream_is_drained(stream: &meta::WatchStream) -> bool {
    stream.is_empty()
}

async fn relist(store: &dyn MetaStore, map: &mut ClusterMap, sender: &watch::Sender<Arc<ClusterMap>>) {
    match load(store).await {
        Ok(fresh) => {
            *map = fresh;
            sender.send_replace(Arc::new(map.clone()));
        }
        Err(error) => tracing::debug!(%error, "cluster map listing failed"),
    }
}
