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
use cluster::{keys, VolumeRecord};
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
}

/// How far the deletion of one volume has got, as the leader last heard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletionProgress {
    pub objects_done: u64,
    pub objects_total: u64,
}

/// Deletion progress by volume name, shared between the leader's reaper task and the API.
pub type ProgressTable = Arc<Mutex<BTreeMap<String, DeletionProgress>>>;

/// Deletes one volume flagged `deleting`: its objects through `reaper`, then its record.
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
    let response = store
        .txn(Txn {
            compares: vec![leadership.fence(), Compare::mod_revision(&key, CompareOp::Equal, revision)],
            success: vec![TxnOp::delete(&key)],
            failure: vec![],
        })
        .await;
    if response?.succeeded {
        tracing::info!(volume = %volume.name, id = volume.id, "deleted a volume");
    }
    Ok(())
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
    #[error(transparent)]
    Store(#[from] MetaError),
}
