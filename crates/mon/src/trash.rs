//! The trash (ADR 0030): `basalt volume rm` moves a volume and its snapshots out of their names
//! into one record, `/basalt/trash/<id>`, in one transaction; a restore moves them back, under
//! the old name or a new one, in one transaction that compares the trash record; a purge moves
//! them, in one transaction too, to a name no user can give (`trash+<id>`), flagged `deleting`,
//! where the leader's reaper removes them as it removes any deleted volume. The leader purges
//! what expired. Every step is one compare-and-swap on the trash record, so a restore racing a
//! purge or the expiry either restores everything or nothing.

use cluster::records::{encode, FORMAT_VERSION};
use cluster::{keys, snapshot_name, ClusterMap, Parent, SnapshotRecord, TrashRecord, VolumeRecord};
use meta::{Compare, CompareOp, MetaStore, Txn, TxnOp};

use crate::admin::{check_name, get_volume, AdminError, VOLUME_NAME_LENGTH_MAX};

const CAS_ATTEMPTS_MAX: usize = 16;

/// Moves volume `name` and its snapshots to the trash, to expire `retention_s` from `now_unix_ms`.
/// Refused while it is being deleted or sealed, and while another volume reads through one of
/// its snapshots (the clone would lose its parent's name; remove or flatten it first).
pub async fn move_to_trash(store: &dyn MetaStore, name: &str, now_unix_ms: u64) -> Result<TrashRecord, AdminError> {
    for _ in 0..CAS_ATTEMPTS_MAX {
        let (volume, revision) = get_volume(store, name).await?;
        if volume.is_deleting() {
            return Err(AdminError::Conflict(format!("volume {name:?} is being deleted")));
        }
        if volume.sealing {
            return Err(AdminError::Conflict(format!("volume {name:?} is taking a snapshot; try again")));
        }
        let map = cluster_watch::load(store).await?;
        let snapshots: Vec<SnapshotRecord> = map.snapshots.values().filter(|s| s.volume == name).cloned().collect();
        let own = |reader: &String| reader == name || reader.starts_with(&format!("{name}@"));
        for snapshot in &snapshots {
            let clones: Vec<String> =
                crate::snapshots::readers_of(&map, snapshot.inode).into_iter().filter(|reader| !own(reader)).collect();
            if !clones.is_empty() {
                return Err(AdminError::Conflict(format!(
                    "volume {name:?} has clones ({}) that read through {}; remove or flatten them first",
                    clones.join(", "),
                    snapshot.full_name()
                )));
            }
        }
        let retention_ms = map.settings.trash_retention_s.saturating_mul(1000);
        let entry = TrashRecord {
            version: FORMAT_VERSION,
            volume: volume.clone(),
            snapshots: snapshots.clone(),
            trashed_unix_ms: now_unix_ms,
            expires_unix_ms: now_unix_ms.saturating_add(retention_ms),
        };
        let trash_key = keys::trash(entry.id());
        let mut compares =
            vec![Compare::mod_revision(keys::volume(name), CompareOp::Equal, revision), Compare::absent(&trash_key)];
        let mut success = vec![TxnOp::delete(keys::volume(name)), TxnOp::put(&trash_key, encode(&entry), None)];
        for snapshot in &snapshots {
            let key = keys::snapshot(&snapshot.full_name());
            let Some(kv) = store.get(&key).await? else { continue };
            compares.push(Compare::mod_revision(&key, CompareOp::Equal, kv.mod_revision));
            success.push(TxnOp::delete(key));
        }
        if store.txn(Txn { compares, success, failure: vec![] }).await?.succeeded {
            tracing::info!(volume = name, id = %format_args!("{:016x}", entry.id()), snapshots = snapshots.len(), "volume moved to the trash");
            return Ok(entry);
        }
    }
    Err(AdminError::Contended(format!("volume {name:?} kept changing; try again")))
}

/// The trash entry `which` names: its id (16 hex digits, as `basalt trash ls` shows it) or the
/// name its volume had, if only one entry had it.
pub fn find<'map>(map: &'map ClusterMap, which: &str) -> Result<&'map TrashRecord, AdminError> {
    if let Some(entry) =
        u64::from_str_radix(which, 16).ok().filter(|_| which.len() == 16).and_then(|id| map.trash.get(&id))
    {
        return Ok(entry);
    }
    let named: Vec<&TrashRecord> = map.trash.values().filter(|entry| entry.volume.name == which).collect();
    match named[..] {
        [] => Err(AdminError::NotFound(format!("nothing in the trash is named {which:?}"))),
        [entry] => Ok(entry),
        _ => Err(AdminError::Invalid(format!(
            "{} entries in the trash were named {which:?} (ids {}); name one by its id",
            named.len(),
            named.iter().map(|entry| format!("{:016x}", entry.id())).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Restores trash entry `which` under its old name, or under `as_name`, with its snapshots.
/// Refused if the name or one of its snapshots' names is taken.
pub async fn restore(store: &dyn MetaStore, which: &str, as_name: Option<&str>) -> Result<VolumeRecord, AdminError> {
    for _ in 0..CAS_ATTEMPTS_MAX {
        let map = cluster_watch::load(store).await?;
        let entry = find(&map, which)?.clone();
        let name = as_name.unwrap_or(&entry.volume.name).to_string();
        check_name("volume", &name, VOLUME_NAME_LENGTH_MAX)?;
        if !map.pools.contains_key(&entry.volume.pool) {
            return Err(AdminError::Conflict(format!(
                "the pool of trash entry {:016x} ({:?}) no longer exists",
                entry.id(),
                entry.volume.name
            )));
        }
        if map.volumes.contains_key(&name) {
            return Err(AdminError::Conflict(format!(
                "a volume named {name:?} exists; restore under another name with --as NEW"
            )));
        }
        if let Some(volume) = take_out(store, &entry, &name, false, None).await? {
            tracing::info!(volume = %name, id = %format_args!("{:016x}", entry.id()), "volume restored from the trash");
            return Ok(volume);
        }
    }
    Err(AdminError::Contended(format!("trash entry {which:?} kept changing; try again")))
}

/// Takes `entry` out of the trash in one transaction, if its record is still as read: its
/// volume and snapshots under volume name `name`, flagged `deleting` if `deleting`; with
/// `fence` (the leader's), only while that holds. The volume as put back, if it did.
async fn take_out(
    store: &dyn MetaStore,
    entry: &TrashRecord,
    name: &str,
    deleting: bool,
    fence: Option<Compare>,
) -> Result<Option<VolumeRecord>, AdminError> {
    let trash_key = keys::trash(entry.id());
    let Some(kv) = store.get(&trash_key).await? else { return Ok(None) };
    if cluster::records::decode::<TrashRecord>(&trash_key, &kv.value)? != *entry {
        return Ok(None);
    }
    let (mut volume, mut snapshots) = renamed(entry, name);
    if deleting {
        volume.flags.push(VolumeRecord::FLAG_DELETING.to_string());
        snapshots.iter_mut().for_each(|snapshot| snapshot.deleting = true);
    }
    let mut compares =
        vec![Compare::mod_revision(&trash_key, CompareOp::Equal, kv.mod_revision), Compare::absent(keys::volume(name))];
    compares.extend(fence);
    let mut success = vec![TxnOp::delete(&trash_key), TxnOp::put(keys::volume(name), encode(&volume), None)];
    // The pool must still be there, and a pool deletion checking its volumes meanwhile must
    // see this one: it compares the pool's volume counter, which this rewrites as it is.
    compares.push(Compare::present(keys::pool(volume.pool)));
    let counter_key = keys::volume_id_counter(volume.pool);
    if let Some(counter) = store.get(&counter_key).await? {
        compares.push(Compare::mod_revision(&counter_key, CompareOp::Equal, counter.mod_revision));
        success.push(TxnOp::put(&counter_key, counter.value, None));
    }
    for snapshot in &snapshots {
        let key = keys::snapshot(&snapshot.full_name());
        compares.push(Compare::absent(&key));
        success.push(TxnOp::put(key, encode(snapshot), None));
    }
    Ok(store.txn(Txn { compares, success, failure: vec![] }).await?.succeeded.then_some(volume))
}

/// The name a purged entry's volume is deleted under: no user can give it (`+`).
pub fn purged_name(entry: &TrashRecord) -> String {
    format!("trash+{:016x}", entry.id())
}

/// The entry's volume and snapshots under volume name `name`: the snapshots' volume, and every
/// parent that names one of them.
fn renamed(entry: &TrashRecord, name: &str) -> (VolumeRecord, Vec<SnapshotRecord>) {
    let old = &entry.volume.name;
    let rename_parent = |parent: &Option<Parent>| {
        parent.as_ref().map(|parent| match cluster::split_snapshot_name(&parent.snapshot) {
            Some((volume, snapshot)) if volume == old => {
                Parent { snapshot: snapshot_name(name, snapshot), ..parent.clone() }
            }
            _ => parent.clone(),
        })
    };
    let volume =
        VolumeRecord { name: name.to_string(), parent: rename_parent(&entry.volume.parent), ..entry.volume.clone() };
    let snapshots = entry
        .snapshots
        .iter()
        .map(|snapshot| SnapshotRecord {
            volume: name.to_string(),
            parent: rename_parent(&snapshot.parent),
            ..snapshot.clone()
        })
        .collect();
    (volume, snapshots)
}

/// Purges trash entry `which`: its volume and snapshots go, flagged `deleting`, under
/// [`purged_name`], for the leader's reaper. Returns the entry.
pub async fn purge(store: &dyn MetaStore, which: &str) -> Result<TrashRecord, AdminError> {
    for _ in 0..CAS_ATTEMPTS_MAX {
        let map = cluster_watch::load(store).await?;
        let entry = find(&map, which)?.clone();
        if take_out(store, &entry, &purged_name(&entry), true, None).await?.is_some() {
            tracing::info!(volume = %entry.volume.name, id = %format_args!("{:016x}", entry.id()), "trash entry purged");
            return Ok(entry);
        }
    }
    Err(AdminError::Contended(format!("trash entry {which:?} kept changing; try again")))
}

/// Purges every entry that expired by `now_unix_ms`, with `fence` (the leader's); returns the
/// entries purged.
pub async fn purge_expired(
    store: &dyn MetaStore,
    now_unix_ms: u64,
    fence: Option<Compare>,
) -> Result<Vec<TrashRecord>, AdminError> {
    let map = cluster_watch::load(store).await?;
    let mut purged = Vec::new();
    for entry in map.trash.values().filter(|entry| entry.expires_unix_ms <= now_unix_ms) {
        if take_out(store, entry, &purged_name(entry), true, fence.clone()).await?.is_some() {
            tracing::info!(volume = %entry.volume.name, id = %format_args!("{:016x}", entry.id()), "trash entry expired and purged");
            purged.push(entry.clone());
        }
    }
    Ok(purged)
}
