//! What `GET /volumes/NAME/du` and `GET /du` answer (`basalt volume du`): for each volume and
//! each of its snapshots, its provisioned size, the space its own objects take, and the space
//! deleting it would free. Counted by the OSDs when asked (the wire op `VolumeUsage`, each OSD
//! over the PGs it leads), never kept in the metadata store.
//!
//! The engine gives every object a block of the object size however few pages it holds, so
//! space is counted in objects: what a layer's objects take per copy, as the pool's drives
//! hold it once per copy. Deleting a snapshot frees the objects every layer reading through it
//! holds copies of; its other objects' pages move to those layers.

use std::collections::BTreeMap;

use cluster::{ClusterMap, VolumeRecord};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerUsageView {
    /// `VOLUME` for its head, `VOLUME@SNAP` for a snapshot.
    pub name: String,
    pub provisioned_bytes: u64,
    /// The space the layer's own objects take, per copy.
    pub used_bytes: u64,
    /// The space deleting it would free, per copy: for a volume's head, all it uses.
    pub exclusive_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeUsageView {
    pub volume: String,
    /// Its snapshots, oldest first, then the volume itself.
    pub layers: Vec<LayerUsageView>,
    /// The sum of the layers' `used_bytes`.
    pub used_bytes: u64,
    /// Up OSDs that did not answer: the figures then leave out the PGs they lead.
    pub osds_silent: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageList {
    pub volumes: Vec<VolumeUsageView>,
}

/// The view of `volume` from every OSD's answer (`None`: silent), each a list of
/// `(inode, objects, exclusive objects)`.
pub fn volume_usage_view(
    map: &ClusterMap,
    volume: &VolumeRecord,
    answers: &[Option<Vec<wire::LayerUsage>>],
) -> VolumeUsageView {
    let mut counts: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for layer in answers.iter().flatten().flatten() {
        let (objects, exclusive) = counts.entry(layer.inode).or_default();
        *objects += layer.objects;
        *exclusive += layer.exclusive_objects;
    }
    let object_bytes = u64::from(volume.object_size_bytes);
    let mut snapshots: Vec<_> = map
        .snapshots
        .values()
        .filter(|snapshot| snapshot.volume == volume.name && !snapshot.hidden && !snapshot.deleting)
        .collect();
    snapshots.sort_by_key(|snapshot| (snapshot.created_unix_ms, snapshot.name.clone()));
    let row = |name: String, inode: u64, provisioned_bytes: u64| {
        let (objects, exclusive) = counts.get(&inode).copied().unwrap_or_default();
        LayerUsageView {
            name,
            provisioned_bytes,
            used_bytes: objects * object_bytes,
            exclusive_bytes: exclusive * object_bytes,
        }
    };
    let mut layers: Vec<LayerUsageView> =
        snapshots.iter().map(|snapshot| row(snapshot.full_name(), snapshot.inode, snapshot.size_bytes)).collect();
    layers.push(row(volume.name.clone(), volume.id, volume.size_bytes));
    VolumeUsageView {
        volume: volume.name.clone(),
        used_bytes: layers.iter().map(|layer| layer.used_bytes).sum(),
        layers,
        osds_silent: answers.iter().filter(|answer| answer.is_none()).count() as u64,
    }
}
