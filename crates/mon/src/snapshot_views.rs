//! What the API answers about snapshots and the chains heads read through
//! (`docs/design/api.md`, "Snapshots").

use cluster::{ClusterMap, SnapshotRecord};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotView {
    /// `VOLUME@SNAP`.
    pub name: String,
    pub volume: String,
    pub snapshot: String,
    /// The frozen layer's inode.
    pub id: u64,
    pub pool: Option<String>,
    pub pool_id: u32,
    /// The volume's size when the snapshot was taken.
    pub size_bytes: u64,
    pub object_size_bytes: u32,
    /// The snapshot below it, if any.
    pub parent: Option<String>,
    pub created_unix_ms: u64,
    /// The volumes cloned from it.
    pub clones: Vec<String>,
    /// Taken in a group snapshot of several volumes at one cut (whose name is the snapshot's):
    /// removed only with the group.
    #[serde(default)]
    pub grouped: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotList {
    pub snapshots: Vec<SnapshotView>,
}

/// A group snapshot: its name and each volume's snapshot of its cut, by volume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupView {
    pub name: String,
    pub snapshots: Vec<SnapshotView>,
}

/// One layer a head reads through, top first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainEntry {
    /// `VOLUME@SNAP`, or the snapshot's inode in hex if the map does not name it.
    pub name: String,
    pub id: u64,
    /// How much of it shows through to the head.
    pub visible_bytes: u64,
}

pub fn snapshot_view(snapshot: &SnapshotRecord, map: &ClusterMap) -> SnapshotView {
    let clones = map
        .volumes
        .values()
        .filter(|volume| volume.name != snapshot.volume)
        .filter(|volume| volume.parent.as_ref().is_some_and(|parent| parent.inode == snapshot.inode))
        .map(|volume| volume.name.clone())
        .collect();
    SnapshotView {
        name: snapshot.full_name(),
        volume: snapshot.volume.clone(),
        snapshot: snapshot.name.clone(),
        id: snapshot.inode,
        pool: map.pools.get(&snapshot.pool).map(|pool| pool.name.clone()),
        pool_id: snapshot.pool,
        size_bytes: snapshot.size_bytes,
        object_size_bytes: snapshot.object_size_bytes,
        parent: snapshot.parent.as_ref().map(|parent| parent.snapshot.clone()),
        created_unix_ms: snapshot.created_unix_ms,
        clones,
        grouped: snapshot.grouped,
    }
}

/// The layers below `head`, top first, as `GET /volumes/{name}` shows them.
pub fn chain_view(head: u64, map: &ClusterMap) -> Vec<ChainEntry> {
    map.chain(head)
        .skip(1)
        .map(|(id, visible_bytes)| {
            let name = map
                .snapshots
                .values()
                .find(|snapshot| snapshot.inode == id)
                .map_or_else(|| format!("{id:#x}"), SnapshotRecord::full_name);
            ChainEntry { name, id, visible_bytes }
        })
        .collect()
}
