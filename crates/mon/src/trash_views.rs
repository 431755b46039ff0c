//! What `GET /trash` and the trash calls answer: one view per entry (ADR 0030).

use cluster::{ClusterMap, TrashRecord};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrashView {
    /// The entry's id (16 hex digits), which names it when several had the same name.
    pub id: String,
    /// The name the volume had.
    pub name: String,
    /// The pool's name (`null` if the pool record is gone).
    pub pool: Option<String>,
    pub size_bytes: u64,
    /// Its snapshots' names (without the volume's), hidden ones left out.
    pub snapshots: Vec<String>,
    pub trashed_unix_ms: u64,
    pub expires_unix_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrashList {
    pub entries: Vec<TrashView>,
}

pub fn trash_view(map: &ClusterMap, entry: &TrashRecord) -> TrashView {
    TrashView {
        id: format!("{:016x}", entry.id()),
        name: entry.volume.name.clone(),
        pool: map.pools.get(&entry.volume.pool).map(|pool| pool.name.clone()),
        size_bytes: entry.volume.size_bytes,
        snapshots: entry.snapshots.iter().filter(|snapshot| !snapshot.hidden).map(|s| s.name.clone()).collect(),
        trashed_unix_ms: entry.trashed_unix_ms,
        expires_unix_ms: entry.expires_unix_ms,
    }
}

/// Every entry, oldest first.
pub fn trash_list(map: &ClusterMap) -> TrashList {
    let mut entries: Vec<&TrashRecord> = map.trash.values().collect();
    entries.sort_by_key(|entry| (entry.trashed_unix_ms, entry.id()));
    TrashList { entries: entries.into_iter().map(|entry| trash_view(map, entry)).collect() }
}
