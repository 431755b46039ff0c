//! Background deletion of volumes flagged `deleting`, run by the leader.
//!
//! Removing a volume's objects needs the data path (the client library), which the mon does
//! not link; the binary that runs the mon supplies a [`VolumeReaper`]. Without one, the record
//! is deleted at once and the objects stay on the OSDs until a later scrub removes objects of
//! unknown volumes. The record goes only after its objects (if a reaper is given), with a
//! transaction fenced by the leader key, so a deposed leader cannot delete it twice and a
//! crash in the middle leaves the `deleting` flag for the next leader to resume.
//!
//! Progress lives in the leader's memory, not in the store (no statistics in the store): the
//! API of the leader shows it, other mons show only the `deleting` state.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use cluster::records::{decode, encode};
use cluster::{keys, SnapshotRecord, VolumeRecord};
use meta::{Compare, CompareOp, Leadership, MetaError, MetaStore, Txn, TxnOp};
use serde::{Deserialize, Serialize};

/// Removes every object of a volume from the OSDs.
#[async_trait]
pub trait VolumeReaper: Send + Sync {
    /// Deletes the objects of `volume`, calling `progress(objects_done, objects_total)` now and
    /// then. Returning `Ok` means no object of the volume is left; an error is retried later.
    async fn remove_objects(
        &self,
        volume: &VolumeRecord,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<(), String>;

    /// Deletes the objects of one of the volume's snapshots (flagged `deleting` with it).
    async fn remove_snapshot_objects(&self, snapshot: &SnapshotRecord) -> Result<(), String>;
}

/// How far the deletion of one volume has got, as the leader last heard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletionProgress {
    pub objects_done: u64,
    pub objects_total: u64,
}

/// Deletion progress by volume name, shared between the leader's reaper task and the API.
pub type ProgressTable = Arc<Mutex<BTreeMap<String, DeletionProgress>>>;

/// Deletes one volume flagged `deleting`: its head's objects through `reaper`, then those of its
/// snapshots (every one flagged `deleting` with it), then all their records at once.
///
/// `revision` is the record's last-write revision as read; a record changed since is left for
/// the next pass.
pub async fn reap_volume(
    store: &dyn MetaStore,
    leadership: &Leadership,
    reaper: Option<&dyn VolumeReaper>,
    progress: &ProgressTable,
    volume: &VolumeRecord,
    revision: i64,
) -> Result<(), ReapError> {
    assert!(volume.is_deleting());
    // The entry goes when this call ends in any way, including a term ending mid-way.
    let _entry = ProgressEntry { progress, name: &volume.name };
    match reaper {
        Some(reaper) => {
            // A whole-object trim of a layer over a parent deletes only at an OSD that knows the
            // volume is being removed; elsewhere it would write zeros.
            crate::seal::confirm_map(store, revision).await.map_err(|error| ReapError::Confirm(error.to_string()))?;
            progress.lock().expect("progress lock").insert(volume.name.clone(), DeletionProgress::default());
            let report = |objects_done: u64, objects_total: u64| {
                progress
                    .lock()
                    .expect("progress lock")
                    .insert(volume.name.clone(), DeletionProgress { objects_done, objects_total });
            };
            let removed = reaper.remove_objects(volume, &report).await;
            if let Err(reason) = removed {
                return Err(ReapError::Objects { volume: volume.name.clone(), reason });
            }
            for snapshot in snapshots_of(store, &volume.name).await? {
                if let Err(reason) = reaper.remove_snapshot_objects(&snapshot).await {
                    return Err(ReapError::Objects { volume: snapshot.full_name(), reason });
                }
            }
        }
        None => {
            tracing::warn!(
                volume = %volume.name,
                id = volume.id,
                "deleting the volume record without removing its objects: objects are left for a later scrub"
            );
        }
    }
    let key = keys::volume(&volume.name);
    let mut success = vec![TxnOp::delete(&key)];
    for snapshot in snapshots_of(store, &volume.name).await? {
        success.push(TxnOp::delete(keys::snapshot(&snapshot.full_name())));
    }
    let response = store
        .txn(Txn {
            compares: vec![leadership.fence(), Compare::mod_revision(&key, CompareOp::Equal, revision)],
            success,
            failure: vec![],
        })
        .await;
    if response?.succeeded {
        tracing::info!(volume = %volume.name, id = volume.id, "deleted a volume");
    }
    Ok(())
}

/// Deletes a hidden layer nothing reads through any more (a snapshot its user removed once its
/// volume moved past it, a head a rollback replaced): flags it `deleting` (from then on the
/// OSDs take the reaper's trims of it), deletes its objects, then its record.
pub async fn reap_layer(
    store: &dyn MetaStore,
    leadership: &Leadership,
    reaper: Option<&dyn VolumeReaper>,
    snapshot: &SnapshotRecord,
) -> Result<(), ReapError> {
    assert!(snapshot.hidden, "only hidden layers are reaped on their own");
    let key = keys::snapshot(&snapshot.full_name());
    let Some(kv) = store.get(&key).await? else { return Ok(()) };
    let mut record: SnapshotRecord = match decode(&key, &kv.value) {
        Ok(record) => record,
        Err(error) => {
            tracing::warn!(%error, "cannot reap a layer whose record does not decode");
            return Ok(());
        }
    };
    let mut revision = kv.mod_revision;
    if !record.deleting {
        record.deleting = true;
        let response = store
            .txn(Txn {
                compares: vec![leadership.fence(), Compare::mod_revision(&key, CompareOp::Equal, revision)],
                success: vec![TxnOp::put(&key, encode(&record), None)],
                failure: vec![],
            })
            .await?;
        if !response.succeeded {
            return Ok(());
        }
        revision = response.revision;
    }
    if let Some(reaper) = reaper {
        crate::seal::confirm_map(store, revision).await.map_err(|error| ReapError::Confirm(error.to_string()))?;
        if let Err(reason) = reaper.remove_snapshot_objects(&record).await {
            return Err(ReapError::Objects { volume: record.full_name(), reason });
        }
    }
    let response = store
        .txn(Txn {
            compares: vec![leadership.fence(), Compare::mod_revision(&key, CompareOp::Equal, revision)],
            success: vec![TxnOp::delete(&key)],
            failure: vec![],
        })
        .await?;
    if response.succeeded {
        tracing::info!(layer = record.inode, name = %record.full_name(), "deleted a layer nothing reads through");
    }
    Ok(())
}

/// The snapshots of volume `name` flagged `deleting`, read from the store.
async fn snapshots_of(store: &dyn MetaStore, name: &str) -> Result<Vec<SnapshotRecord>, MetaError> {
    let prefix = keys::snapshot(&cluster::snapshot_name(name, ""));
    let mut snapshots = Vec::new();
    for kv in store.list(&prefix).await? {
        match decode::<SnapshotRecord>(&kv.key, &kv.value) {
            Ok(snapshot) if snapshot.volume == name && snapshot.deleting => snapshots.push(snapshot),
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "ignoring a snapshot record that does not decode"),
        }
    }
    Ok(snapshots)
}

/// Removes a volume's progress entry when dropped.
struct ProgressEntry<'a> {
    progress: &'a ProgressTable,
    name: &'a str,
}

impl Drop for ProgressEntry<'_> {
    fn drop(&mut self) {
        self.progress.lock().expect("progress lock").remove(self.name);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReapError {
    #[error("removing the objects of volume {volume:?} failed: {reason}")]
    Objects { volume: String, reason: String },
    #[error("waiting for the OSDs to apply the map: {0}")]
    Confirm(String),
    #[error(transparent)]
    Store(#[from] MetaError),
}
