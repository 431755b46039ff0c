//! Snapshots and clones in the store (ADR 0026): a snapshot freezes a volume's head and gives
//! the volume a new head over it; a clone is a new volume whose head reads through a snapshot.
//! Each is one transaction of a few keys, whatever the volume's size.

use std::collections::BTreeMap;

use cluster::records::{encode, FORMAT_VERSION};
use cluster::{inode, keys, split_snapshot_name, ClusterMap, Parent, SnapshotRecord, VolumeRecord};
use meta::{Compare, CompareOp, MetaStore, Txn, TxnOp, TxnOpResult};
use serde::{Deserialize, Serialize};

use crate::admin::{self, check_name, counter_of, counter_value, AdminError, VOLUME_NAME_LENGTH_MAX};

pub const SNAPSHOT_NAME_LENGTH_MAX: usize = 64;
/// How often a transaction that lost a race is retried before giving up.
const CAS_ATTEMPTS_MAX: usize = 16;

/// `POST /snapshots`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSnapshot {
    /// `VOLUME@SNAP`.
    pub name: String,
}

/// `POST /snapshots/VOLUME@SNAP/clones`, with the snapshot from the path.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateClone {
    /// The snapshot, `VOLUME@SNAP`.
    pub snapshot: String,
    /// The new volume's name.
    pub name: String,
    /// Defaults to the snapshot's pool, the only one a clone can be in.
    #[serde(default)]
    pub pool: Option<String>,
}

/// `VOLUME@SNAP` checked: both names valid.
pub fn parse_name(full: &str) -> Result<(&str, &str), AdminError> {
    let Some((volume, snapshot)) = split_snapshot_name(full) else {
        return Err(AdminError::Invalid(format!(
            "snapshot {full:?} must be named VOLUME@SNAPSHOT, with one '@' and a name on each side"
        )));
    };
    check_name("volume", volume, VOLUME_NAME_LENGTH_MAX)?;
    check_name("snapshot", snapshot, SNAPSHOT_NAME_LENGTH_MAX)?;
    Ok((volume, snapshot))
}

/// A snapshot taken and its volume switched to a new head, waiting for the seal.
#[derive(Debug, Clone)]
pub struct Frozen {
    pub snapshot: SnapshotRecord,
    pub volume: VolumeRecord,
    /// The store revision of the transaction.
    pub revision: i64,
}

/// Freezes the head of the volume of `full_name` as that snapshot and gives the volume a new
/// head over it, `sealing` (step 1 of ADR 0026's freeze, switch, drain, seal). One
/// transaction: the snapshot record, the volume record, the family's layer counter.
pub async fn freeze(store: &dyn MetaStore, full_name: &str, now_unix_ms: u64) -> Result<Frozen, AdminError> {
    let (volume_name, snapshot_name) = parse_name(full_name)?;
    let snapshot_key = keys::snapshot(full_name);
    for _ in 0..CAS_ATTEMPTS_MAX {
        let (volume, volume_revision) = admin::get_volume(store, volume_name).await?;
        refuse_unusable(&volume, "snapshot")?;
        if volume.sealing {
            return Err(AdminError::Contended(format!(
                "volume {volume_name:?} is still sealing its last snapshot; try again"
            )));
        }
        if let Some(kv) = store.get(&snapshot_key).await? {
            let hidden =
                cluster::records::decode::<SnapshotRecord>(&snapshot_key, &kv.value).is_ok_and(|old| old.hidden);
            return Err(AdminError::Conflict(if hidden {
                format!("snapshot {full_name:?} was removed but its volume still reads through it; choose another name")
            } else {
                format!("snapshot {full_name:?} already exists")
            }));
        }
        let map = cluster_watch::load(store).await?;
        check_depth(&map, volume.id, volume_name)?;
        let (next_layer, counter_key, counter_revision) = next_layer(store, volume.id).await?;
        let snapshot = frozen_head(&volume, snapshot_name, false, now_unix_ms);
        let family = inode::family(volume.id).expect("refuse_unusable let only layered heads through");
        let mut switched = volume.clone();
        switched.id = inode::layered(volume.pool, family, next_layer);
        switched.parent =
            Some(Parent { snapshot: full_name.to_string(), inode: volume.id, size_bytes: volume.size_bytes });
        switched.sealing = true;
        let counter = LayerCounter { key: counter_key, revision: counter_revision, next: next_layer };
        let response = switch_head(store, &snapshot, &switched, volume_revision, &counter, Vec::new()).await?;
        if response.succeeded {
            tracing::info!(snapshot = full_name, layer = snapshot.inode, head = switched.id, "froze a snapshot");
            return Ok(Frozen { snapshot, volume: switched, revision: response.revision });
        }
    }
    Err(AdminError::Contended(format!("snapshot {full_name:?} was not taken: its volume kept changing; try again")))
}

/// The most volumes one group snapshot takes: one transaction writes three keys for each.
pub const GROUP_VOLUMES_MAX: usize = 32;

/// `POST /snapshot-groups`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateGroup {
    /// The group's name, which each volume's snapshot takes: `VOLUME@NAME`.
    pub name: String,
    pub volumes: Vec<String>,
}

/// Freezes the heads of `request.volumes` as snapshots `VOLUME@NAME` of one group, in one
/// transaction: every OSD sees all of them frozen from the same map on, so a write a client
/// issued after another's acknowledgement can be in a snapshot only if that one is too, in
/// whichever volumes and pools the two went (ADR 0033). The seal that follows is each volume's.
pub async fn freeze_group(
    store: &dyn MetaStore,
    request: &CreateGroup,
    now_unix_ms: u64,
) -> Result<Vec<Frozen>, AdminError> {
    check_name("snapshot", &request.name, SNAPSHOT_NAME_LENGTH_MAX)?;
    if request.volumes.is_empty() || request.volumes.len() > GROUP_VOLUMES_MAX {
        return Err(AdminError::Invalid(format!(
            "a group snapshot takes 1 to {GROUP_VOLUMES_MAX} volumes, not {}",
            request.volumes.len()
        )));
    }
    for (index, name) in request.volumes.iter().enumerate() {
        check_name("volume", name, VOLUME_NAME_LENGTH_MAX)?;
        if request.volumes[..index].contains(name) {
            return Err(AdminError::Invalid(format!("volume {name:?} is named twice in the group")));
        }
    }
    let group_key = keys::snapshot_group(&request.name);
    for _ in 0..CAS_ATTEMPTS_MAX {
        let map = cluster_watch::load(store).await?;
        if let Some(taken) = group_members(&map, &request.name).first() {
            return Err(AdminError::Conflict(format!(
                "group snapshot {:?} already exists ({})",
                request.name,
                taken.full_name()
            )));
        }
        // The name is the group's while it has members; one left by members that went with
        // their volumes is free again.
        let mut compares = vec![match store.get(&group_key).await? {
            Some(kv) => Compare::mod_revision(&group_key, CompareOp::Equal, kv.mod_revision),
            None => Compare::absent(&group_key),
        }];
        let members = serde_json::to_vec(&request.volumes).expect("names encode");
        let mut success = vec![TxnOp::put(&group_key, members, None)];
        let mut frozen = Vec::new();
        // A family's counter read once: volumes of one family (a volume and its clones) take
        // consecutive layers from it.
        let mut counters: BTreeMap<String, (i64, u64)> = BTreeMap::new();
        for name in &request.volumes {
            let (volume, volume_revision) = admin::get_volume(store, name).await?;
            refuse_unusable(&volume, "snapshot")?;
            if volume.sealing {
                return Err(AdminError::Contended(format!(
                    "volume {name:?} is still sealing its last snapshot; try again"
                )));
            }
            let full_name = cluster::snapshot_name(name, &request.name);
            let snapshot_key = keys::snapshot(&full_name);
            if store.get(&snapshot_key).await?.is_some() {
                return Err(AdminError::Conflict(format!(
                    "snapshot {full_name:?} already exists (or was removed while its volume still reads through it)"
                )));
            }
            check_depth(&map, volume.id, name)?;
            let family = inode::family(volume.id).expect("refuse_unusable let only layered heads through");
            let counter_key = keys::layer_counter(volume.pool, family);
            let next_layer = match counters.get_mut(&counter_key) {
                Some((_, next)) => {
                    *next += 1;
                    *next
                }
                None => {
                    let (next, _, revision) = next_layer(store, volume.id).await?;
                    counters.insert(counter_key.clone(), (revision, next));
                    next
                }
            };
            if next_layer >= inode::LAYERS_MAX {
                return Err(AdminError::Conflict(format!("the family of volume {name:?} has used all its layers")));
            }
            let mut snapshot = frozen_head(&volume, &request.name, false, now_unix_ms);
            snapshot.grouped = true;
            let mut switched = volume.clone();
            switched.id = inode::layered(volume.pool, family, next_layer);
            switched.parent =
                Some(Parent { snapshot: full_name.clone(), inode: volume.id, size_bytes: volume.size_bytes });
            switched.sealing = true;
            compares.push(Compare::mod_revision(keys::volume(name), CompareOp::Equal, volume_revision));
            compares.push(Compare::absent(&snapshot_key));
            success.push(TxnOp::put(&snapshot_key, encode(&snapshot), None));
            success.push(TxnOp::put(keys::volume(name), encode(&switched), None));
            frozen.push(Frozen { snapshot, volume: switched, revision: 0 });
        }
        for (key, (revision, next)) in &counters {
            compares.push(Compare::mod_revision(key, CompareOp::Equal, *revision));
            success.push(TxnOp::put(key, counter_value(next + 1), None));
        }
        let response = store.txn(Txn { compares, success, failure: vec![] }).await?;
        if response.succeeded {
            for each in &mut frozen {
                each.revision = response.revision;
            }
            tracing::info!(group = %request.name, volumes = ?request.volumes, "froze a group snapshot");
            return Ok(frozen);
        }
    }
    Err(AdminError::Contended(format!(
        "group snapshot {:?} was not taken: its volumes kept changing; try again",
        request.name
    )))
}

/// The snapshots of group `name`, by volume.
pub fn group_members(map: &ClusterMap, name: &str) -> Vec<SnapshotRecord> {
    let mut members: Vec<SnapshotRecord> = map
        .snapshots
        .values()
        .filter(|snapshot| snapshot.grouped && snapshot.name == name && !snapshot.hidden)
        .cloned()
        .collect();
    members.sort_by(|a, b| a.volume.cmp(&b.volume));
    members
}

/// Removes every snapshot of group `name` at once (each hidden, as `remove` does one).
pub async fn remove_group(store: &dyn MetaStore, name: &str) -> Result<Vec<SnapshotRecord>, AdminError> {
    check_name("snapshot", name, SNAPSHOT_NAME_LENGTH_MAX)?;
    for _ in 0..CAS_ATTEMPTS_MAX {
        let map = cluster_watch::load(store).await?;
        let members = group_members(&map, name);
        if members.is_empty() {
            return Err(AdminError::NotFound(format!("group snapshot {name:?} does not exist")));
        }
        let group_key = keys::snapshot_group(name);
        let mut compares = Vec::new();
        let mut success = vec![TxnOp::delete(&group_key)];
        let mut removed = Vec::new();
        for member in members {
            let key = keys::snapshot(&member.full_name());
            let Some(kv) = store.get(&key).await? else { continue };
            let mut record: SnapshotRecord = cluster::records::decode(&key, &kv.value)?;
            record.hidden = true;
            compares.push(Compare::mod_revision(&key, CompareOp::Equal, kv.mod_revision));
            success.push(TxnOp::put(&key, encode(&record), None));
            removed.push(record);
        }
        if store.txn(Txn { compares, success, failure: vec![] }).await?.succeeded {
            tracing::info!(group = name, snapshots = removed.len(), "removed a group snapshot");
            return Ok(removed);
        }
    }
    Err(AdminError::Contended(format!("group snapshot {name:?} kept changing; try again")))
}

/// The name of the record that keeps a head a rollback replaced until its objects are gone:
/// `~` is not allowed in names users give, so it never meets one.
pub fn retired_head_name(head: u64) -> String {
    format!("~rolled-back-{head:x}")
}

/// Rolls volume `volume_name` back to its snapshot `full_name`: a new head over the snapshot, with
/// the snapshot's size, `sealing`; the old head is kept frozen under a hidden record until the
/// leader deletes its objects. One transaction, whatever the volume's size.
pub async fn rollback(
    store: &dyn MetaStore,
    volume_name: &str,
    full_name: &str,
    now_unix_ms: u64,
) -> Result<Frozen, AdminError> {
    parse_name(full_name)?;
    for _ in 0..CAS_ATTEMPTS_MAX {
        let (snapshot, snapshot_revision) = get_visible_snapshot(store, full_name).await?;
        let (volume, volume_revision) = admin::get_volume(store, volume_name).await?;
        refuse_unusable(&volume, "rollback")?;
        if snapshot.volume != volume.name || inode::family(snapshot.inode) != inode::family(volume.id) {
            return Err(AdminError::Invalid(format!(
                "{full_name:?} is not a snapshot of volume {volume_name:?}: a volume rolls back only to its own snapshots"
            )));
        }
        if volume.sealing {
            return Err(AdminError::Contended(format!(
                "volume {volume_name:?} is still sealing its last snapshot; try again"
            )));
        }
        let (next_layer, counter_key, counter_revision) = next_layer(store, volume.id).await?;
        let family = inode::family(volume.id).expect("refuse_unusable let only layered heads through");
        let retired = frozen_head(&volume, &retired_head_name(volume.id), true, now_unix_ms);
        let mut switched = volume.clone();
        switched.id = inode::layered(volume.pool, family, next_layer);
        switched.size_bytes = snapshot.size_bytes;
        switched.parent =
            Some(Parent { snapshot: full_name.to_string(), inode: snapshot.inode, size_bytes: snapshot.size_bytes });
        switched.sealing = true;
        let counter = LayerCounter { key: counter_key, revision: counter_revision, next: next_layer };
        // The snapshot rolled back to must still be the one read.
        let unchanged = Compare::mod_revision(keys::snapshot(full_name), CompareOp::Equal, snapshot_revision);
        let response = switch_head(store, &retired, &switched, volume_revision, &counter, vec![unchanged]).await?;
        if response.succeeded {
            tracing::info!(
                volume = volume_name,
                snapshot = full_name,
                old_head = volume.id,
                head = switched.id,
                "rolled back"
            );
            return Ok(Frozen { snapshot: retired, volume: switched, revision: response.revision });
        }
    }
    Err(AdminError::Contended(format!("volume {volume_name:?} was not rolled back: it kept changing; try again")))
}

/// The record that keeps `volume`'s current head frozen under `name` (`hidden`: a head a
/// rollback replaced, which no one opens).
fn frozen_head(volume: &VolumeRecord, name: &str, hidden: bool, now_unix_ms: u64) -> SnapshotRecord {
    SnapshotRecord {
        version: FORMAT_VERSION,
        volume: volume.name.clone(),
        name: name.to_string(),
        inode: volume.id,
        pool: volume.pool,
        size_bytes: volume.size_bytes,
        object_size_bytes: volume.object_size_bytes,
        parent: volume.parent.clone(),
        created_unix_ms: now_unix_ms,
        hidden,
        deleting: false,
        grouped: false,
    }
}

/// A family's layer counter as read: its key, the revision it was read at, the next layer.
struct LayerCounter {
    key: String,
    revision: i64,
    next: u64,
}

/// One transaction of a snapshot or a rollback: `frozen` (absent before) keeps the head the
/// volume leaves, the volume takes its new head `switched`, and the family's layer counter
/// moves past it; compared on the volume's last write, the counter's and `more`.
async fn switch_head(
    store: &dyn MetaStore,
    frozen: &SnapshotRecord,
    switched: &VolumeRecord,
    volume_revision: i64,
    counter: &LayerCounter,
    more: Vec<Compare>,
) -> Result<meta::TxnResponse, AdminError> {
    let (volume_key, frozen_key) = (keys::volume(&switched.name), keys::snapshot(&frozen.full_name()));
    let mut compares = vec![
        Compare::mod_revision(&volume_key, CompareOp::Equal, volume_revision),
        Compare::absent(&frozen_key),
        Compare::mod_revision(&counter.key, CompareOp::Equal, counter.revision),
    ];
    compares.extend(more);
    let success = vec![
        TxnOp::put(&frozen_key, encode(frozen), None),
        TxnOp::put(&volume_key, encode(switched), None),
        TxnOp::put(&counter.key, counter_value(counter.next + 1), None),
    ];
    Ok(store.txn(Txn { compares, success, failure: vec![] }).await?)
}

/// Creates volume `request.name` whose head reads through snapshot `request.snapshot`: one
/// transaction, nothing copied. The clone joins the snapshot's family, so it must be in the
/// snapshot's pool.
pub async fn clone_volume(store: &dyn MetaStore, request: &CreateClone) -> Result<VolumeRecord, AdminError> {
    parse_name(&request.snapshot)?;
    check_name("volume", &request.name, VOLUME_NAME_LENGTH_MAX)?;
    let snapshot_key = keys::snapshot(&request.snapshot);
    let volume_key = keys::volume(&request.name);
    for _ in 0..CAS_ATTEMPTS_MAX {
        let (snapshot, snapshot_revision) = get_visible_snapshot(store, &request.snapshot).await?;
        let map = cluster_watch::load(store).await?;
        if map.volumes.contains_key(&request.name) {
            return Err(AdminError::Conflict(format!("volume {:?} already exists", request.name)));
        }
        if let Some(pool) = &request.pool {
            let named =
                map.pool_by_name(pool).ok_or_else(|| AdminError::NotFound(format!("pool {pool:?} does not exist")))?;
            if named.id != snapshot.pool {
                let home =
                    map.pools.get(&snapshot.pool).map_or_else(|| format!("#{}", snapshot.pool), |p| p.name.clone());
                return Err(AdminError::Invalid(format!(
                    "a clone of {:?} must be in its pool {home:?}, not {pool:?}: a family of layers lives in one pool",
                    request.snapshot
                )));
            }
        }
        if !map.pools.contains_key(&snapshot.pool) {
            return Err(AdminError::Conflict(format!("the pool of snapshot {:?} no longer exists", request.snapshot)));
        }
        // The clone's head is one layer above the snapshot's chain.
        check_depth(&map, snapshot.inode, &request.name).map_err(|_| {
            let max = map.settings.snapshot_chain_max;
            AdminError::Invalid(format!(
                "a clone of {:?} would read through more than {max} snapshots (snapshot_chain_max)",
                request.snapshot
            ))
        })?;
        let (next_layer, counter_key, counter_revision) = next_layer(store, snapshot.inode).await?;
        let family = inode::family(snapshot.inode).expect("a snapshot's layer is layered");
        let volume = VolumeRecord {
            version: FORMAT_VERSION,
            id: inode::layered(snapshot.pool, family, next_layer),
            name: request.name.clone(),
            pool: snapshot.pool,
            size_bytes: snapshot.size_bytes,
            object_size_bytes: snapshot.object_size_bytes,
            parent: Some(Parent {
                snapshot: request.snapshot.clone(),
                inode: snapshot.inode,
                size_bytes: snapshot.size_bytes,
            }),
            sealing: false,
            flattening: false,
            flags: Vec::new(),
        };
        let response = store
            .txn(Txn {
                compares: vec![
                    Compare::mod_revision(&snapshot_key, CompareOp::Equal, snapshot_revision),
                    Compare::absent(&volume_key),
                    Compare::mod_revision(&counter_key, CompareOp::Equal, counter_revision),
                ],
                success: vec![
                    TxnOp::put(&volume_key, encode(&volume), None),
                    TxnOp::put(&counter_key, counter_value(next_layer + 1), None),
                ],
                failure: vec![],
            })
            .await?;
        if response.succeeded {
            tracing::info!(volume = %volume.name, snapshot = %request.snapshot, head = volume.id, "cloned a snapshot");
            return Ok(volume);
        }
    }
    Err(AdminError::Contended(format!(
        "volume {:?} was not cloned: the snapshot kept changing; try again",
        request.name
    )))
}

/// A snapshot with the revision its record was last written at.
pub async fn get_snapshot(store: &dyn MetaStore, full_name: &str) -> Result<(SnapshotRecord, i64), AdminError> {
    parse_name(full_name)?;
    let key = keys::snapshot(full_name);
    let kv =
        store.get(&key).await?.ok_or_else(|| AdminError::NotFound(format!("snapshot {full_name:?} does not exist")))?;
    Ok((cluster::records::decode(&key, &kv.value)?, kv.mod_revision))
}

/// A snapshot its user has not removed.
pub async fn get_visible_snapshot(store: &dyn MetaStore, full_name: &str) -> Result<(SnapshotRecord, i64), AdminError> {
    let (snapshot, revision) = get_snapshot(store, full_name).await?;
    if snapshot.hidden {
        return Err(AdminError::NotFound(format!("snapshot {full_name:?} does not exist")));
    }
    Ok((snapshot, revision))
}

/// Every snapshot not removed, or those of one volume, oldest first per volume.
pub fn list(map: &ClusterMap, volume: Option<&str>) -> Vec<SnapshotRecord> {
    let mut snapshots: Vec<SnapshotRecord> = map
        .snapshots
        .values()
        .filter(|snapshot| !snapshot.hidden && volume.is_none_or(|volume| snapshot.volume == volume))
        .cloned()
        .collect();
    snapshots.sort_by(|a, b| (&a.volume, a.created_unix_ms, &a.name).cmp(&(&b.volume, b.created_unix_ms, &b.name)));
    snapshots
}

/// Removes snapshot `full_name` as its user sees it. Its volume's next layer reads through it,
/// and so may clones, so the record stays, hidden: listed nowhere, opened and cloned by no one,
/// its name taken. Its objects go once nothing reads through it (the leader reaps it) or with
/// its volume, which cannot be removed while a clone reads through one of its snapshots.
pub async fn remove(store: &dyn MetaStore, full_name: &str) -> Result<SnapshotRecord, AdminError> {
    for _ in 0..CAS_ATTEMPTS_MAX {
        let (mut snapshot, revision) = get_snapshot(store, full_name).await?;
        if snapshot.hidden {
            return Err(AdminError::NotFound(format!("snapshot {full_name:?} does not exist")));
        }
        if snapshot.grouped {
            return Err(AdminError::Conflict(format!(
                "snapshot {full_name:?} belongs to group snapshot {:?}; remove the group with `basalt snapshot rm --group {}`",
                snapshot.name, snapshot.name
            )));
        }
        snapshot.hidden = true;
        let key = keys::snapshot(full_name);
        let response = store
            .txn(Txn {
                compares: vec![Compare::mod_revision(&key, CompareOp::Equal, revision)],
                success: vec![TxnOp::put(&key, encode(&snapshot), None)],
                failure: vec![],
            })
            .await?;
        if response.succeeded {
            tracing::info!(
                snapshot = full_name,
                layer = snapshot.inode,
                "removed a snapshot (hidden while its volume or a clone reads through it)"
            );
            return Ok(snapshot);
        }
    }
    Err(AdminError::Contended(format!("snapshot {full_name:?} kept changing; try again")))
}

/// The volumes and snapshots whose parent is layer `layer`.
pub fn readers_of(map: &ClusterMap, layer: u64) -> Vec<String> {
    let volumes = map
        .volumes
        .values()
        .filter(|volume| volume.parent.as_ref().is_some_and(|parent| parent.inode == layer))
        .map(|volume| volume.name.clone());
    let snapshots = map
        .snapshots
        .values()
        .filter(|snapshot| snapshot.parent.as_ref().is_some_and(|parent| parent.inode == layer))
        .map(SnapshotRecord::full_name);
    // A volume in the trash reads through its parent again once restored.
    let trashed = map.trash.values().filter_map(|entry| {
        let reads = |parent: &Option<cluster::Parent>| parent.as_ref().is_some_and(|parent| parent.inode == layer);
        (reads(&entry.volume.parent) || entry.snapshots.iter().any(|snapshot| reads(&snapshot.parent)))
            .then(|| format!("{} (in the trash, id {:016x})", entry.volume.name, entry.id()))
    });
    volumes.chain(snapshots).chain(trashed).collect()
}

/// Refuses a volume a snapshot or clone cannot build on.
fn refuse_unusable(volume: &VolumeRecord, what: &str) -> Result<(), AdminError> {
    if volume.is_deleting() {
        return Err(AdminError::Conflict(format!("volume {:?} is being deleted", volume.name)));
    }
    if !inode::is_layered(volume.id) {
        return Err(AdminError::Invalid(format!(
            "volume {:?} was created before snapshots existed and cannot take a {what}: copy its data into a new volume",
            volume.name
        )));
    }
    // Its head is filled and then cut from its parent (ADR 0035): a new head would be left
    // reading through a layer the flatten is still filling.
    if volume.flattening {
        return Err(AdminError::Contended(format!(
            "volume {:?} is being flattened; a {what} waits until it is done (basalt volume info shows its progress)",
            volume.name
        )));
    }
    Ok(())
}

/// Refuses a new layer over `top` once the chain under it holds `snapshot_chain_max` snapshots.
fn check_depth(map: &ClusterMap, top: u64, name: &str) -> Result<(), AdminError> {
    let max = map.settings.snapshot_chain_max;
    // The layers a new head over `top` reads through: `top` and everything below it.
    let depth = map.chain(top).count();
    if depth > max as usize {
        return Err(AdminError::Invalid(format!(
            "{name:?} would read through {depth} snapshots, more than snapshot_chain_max ({max}); raise it with `basalt config set snapshot_chain_max N`"
        )));
    }
    Ok(())
}

/// The next layer of the family of `layer`, its counter's key and that key's revision.
async fn next_layer(store: &dyn MetaStore, layer: u64) -> Result<(u64, String, i64), AdminError> {
    let family = inode::family(layer).expect("only layered inodes have a family");
    let counter_key = keys::layer_counter(inode::pool(layer), family);
    let response =
        store.txn(Txn { compares: vec![], success: vec![TxnOp::get(&counter_key)], failure: vec![] }).await?;
    let kv = match response.results.as_slice() {
        [TxnOpResult::Get(kv)] => kv.clone(),
        other => {
            return Err(meta::MetaError::other(&counter_key, format!("unexpected transaction results {other:?}")).into())
        }
    };
    let (next, revision) = counter_of(&counter_key, kv.as_ref())?;
    if next >= inode::LAYERS_MAX {
        return Err(AdminError::Conflict(format!(
            "the family of layer {layer:#x} has used all its {} layers",
            inode::LAYERS_MAX
        )));
    }
    Ok((next, counter_key, revision))
}
