//! The VolumeUsage reply (`basalt volume du`): what each layer of a volume holds in the PGs
//! this OSD leads, counted in RAM from the engine's index when asked; nothing is kept or
//! written on the I/O path.

use std::collections::{BTreeMap, BTreeSet};

use wire::{LayerUsage, ObjectId, PgId, Response};

use crate::ops::Osd;

impl Osd {
    /// Volume `head`'s layers, its head first and then its snapshots (hidden ones too: they
    /// hold data), each with its objects here and those no layer reading through it needs. A
    /// layer read through by others (a snapshot, by the next snapshot or the head, and by
    /// clones) needs an object only if every one of them holds its own copy of it, since all
    /// layers of a family keep a stripe in one PG, on this OSD's drive when it leads the PG.
    pub(crate) fn volume_usage(&self, head: u64) -> Response {
        let map = self.map.borrow().clone();
        let Some(volume) = map.volumes.values().find(|volume| volume.id == head) else {
            return Response::VolumeUsage { layers: Vec::new() };
        };
        let Some(pg_count) = map.pools.get(&volume.pool).map(|pool| pool.pg_count) else {
            return Response::VolumeUsage { layers: Vec::new() };
        };
        let mut layers = vec![head];
        layers.extend(map.snapshots.values().filter(|snapshot| snapshot.volume == volume.name).map(|s| s.inode));
        layers.truncate(wire::limits::LAYER_USAGES_MAX_COUNT as usize);
        let mut readers: BTreeMap<u64, Vec<u64>> = layers.iter().map(|&inode| (inode, Vec::new())).collect();
        let parents = map.volumes.values().filter_map(|volume| Some((volume.parent.as_ref()?.inode, volume.id))).chain(
            map.snapshots.values().filter_map(|snapshot| Some((snapshot.parent.as_ref()?.inode, snapshot.inode))),
        );
        for (parent, child) in parents {
            if let Some(children) = readers.get_mut(&parent) {
                children.push(child);
            }
        }
        let wanted: BTreeSet<u64> = layers.iter().copied().collect();
        let mut counts: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for state in self.pgs.all().into_iter().filter(|state| state.id.pool == volume.pool) {
            let listed = self.list_local(PgId { pool: volume.pool, pg: state.id.pg }, pg_count);
            self.engine.with(|engine| {
                for (object, _) in listed.into_iter().filter(|(object, _)| wanted.contains(&object.inode)) {
                    let shadowed = readers[&object.inode]
                        .iter()
                        .all(|&reader| engine.object_exists(ObjectId { inode: reader, stripe: object.stripe }));
                    let (objects, exclusive) = counts.entry(object.inode).or_default();
                    *objects += 1;
                    *exclusive += u64::from(shadowed);
                }
            });
        }
        let layers = layers
            .into_iter()
            .map(|inode| {
                let (objects, exclusive_objects) = counts.get(&inode).copied().unwrap_or_default();
                LayerUsage { inode, objects, exclusive_objects }
            })
            .collect();
        Response::VolumeUsage { layers }
    }
}
