//! The administrative writes on OSD records (out, in, reweight and removal) and on the
//! cluster's settings (`docs/design/backfill.md`). Each is one compare-and-swap transaction on
//! the record; the leader's next table moves the PGs.

use std::collections::BTreeSet;

use cluster::records::{decode, encode};
use cluster::{keys, ClusterMap, OsdRecord, PgHistoryRecord, SettingsRecord};
use meta::{Compare, CompareOp, MetaStore, Txn, TxnOp};

use crate::admin::AdminError;
use crate::views::SettingsChange;

/// The largest weight `reweight` accepts: the weight scales the drive's capacity.
pub const WEIGHT_MAX: f64 = 100.0;
const CAS_ATTEMPTS_MAX: usize = 16;

/// Reads `/basalt/osd/<id>`, lets `change` edit it and writes it back if it changed, with
/// `fence` and the record's revision compared. Returns the record as stored, or `None` when
/// `fence` failed.
pub(crate) async fn update_osd(
    store: &dyn MetaStore,
    id: u32,
    fence: Option<Compare>,
    change: impl Fn(&mut OsdRecord) -> Result<(), AdminError>,
) -> Result<Option<OsdRecord>, AdminError> {
    let key = keys::osd(id);
    for _ in 0..CAS_ATTEMPTS_MAX {
        let Some(kv) = store.get(&key).await? else {
            return Err(AdminError::NotFound(format!("osd.{id} does not exist")));
        };
        let current: OsdRecord = decode(&key, &kv.value)?;
        let mut record = current.clone();
        change(&mut record)?;
        if record == current {
            return Ok(Some(record));
        }
        let mut compares = vec![Compare::mod_revision(&key, CompareOp::Equal, kv.mod_revision)];
        compares.extend(fence.clone());
        let txn = Txn { compares, success: vec![TxnOp::put(&key, encode(&record), None)], failure: vec![] };
        if store.txn(txn).await?.succeeded {
            return Ok(Some(record));
        }
        // Either the record moved (retry) or the fence failed (the caller stops).
        if let Some(fence) = &fence {
            let fenced = Txn { compares: vec![fence.clone()], success: vec![], failure: vec![] };
            if !store.txn(fenced).await?.succeeded {
                return Ok(None);
            }
        }
    }
    Err(AdminError::Contended(format!("{key} kept changing")))
}

/// `basalt osd out`: placement gives the OSD no PGs; it serves its PGs until they are clean
/// without it.
pub async fn mark_out(store: &dyn MetaStore, id: u32) -> Result<OsdRecord, AdminError> {
    let record = update_osd(store, id, None, |osd| {
        osd.out = true;
        osd.auto_out = false;
        Ok(())
    });
    Ok(record.await?.expect("no fence"))
}

/// `basalt osd in`: the OSD takes its share of PGs again.
pub async fn mark_in(store: &dyn MetaStore, id: u32) -> Result<OsdRecord, AdminError> {
    let record = update_osd(store, id, None, |osd| {
        osd.out = false;
        osd.auto_out = false;
        Ok(())
    });
    Ok(record.await?.expect("no fence"))
}

/// `basalt osd reweight`: the OSD's share of PGs, relative to its capacity (1.0 by default).
pub async fn reweight(store: &dyn MetaStore, id: u32, weight: f64) -> Result<OsdRecord, AdminError> {
    if !(weight.is_finite() && (0.0..=WEIGHT_MAX).contains(&weight)) {
        return Err(AdminError::Invalid(format!("weight {weight} is not between 0 and {WEIGHT_MAX}")));
    }
    let record = update_osd(store, id, None, |osd| {
        osd.weight = weight;
        Ok(())
    });
    Ok(record.await?.expect("no fence"))
}

/// `basalt osd rm`: forgets an OSD. Refused while it is up, while any PG still names it in its
/// acting or target set, or while it may hold the only up-to-date copy of a PG (it is in a set
/// the PG's history requires and no other member of that set is up), unless `force`.
pub async fn remove(store: &dyn MetaStore, map: &ClusterMap, id: u32, force: bool) -> Result<OsdRecord, AdminError> {
    let key = keys::osd(id);
    let Some(kv) = store.get(&key).await? else {
        return Err(AdminError::NotFound(format!("osd.{id} does not exist")));
    };
    let record: OsdRecord = decode(&key, &kv.value)?;
    if !force {
        if map.live.contains_key(&id) {
            return Err(AdminError::Conflict(format!("osd.{id} is up; stop it first (or pass --force)")));
        }
        let members = member_pgs(map, id);
        let only_copy = only_copy_pgs(store, map, id).await?;
        if !members.is_empty() || !only_copy.is_empty() {
            return Err(AdminError::Conflict(format!(
                "osd.{id} is still a member of {} PGs and may hold the only up-to-date copy of {} PGs; \
                 mark it out (basalt osd out {id}), wait until its PGs are clean without it, then remove it \
                 (or pass --force to lose what only it holds)",
                members.len(),
                only_copy.len()
            )));
        }
    }
    let txn = Txn {
        compares: vec![Compare::mod_revision(&key, CompareOp::Equal, kv.mod_revision)],
        success: vec![TxnOp::delete(&key), TxnOp::delete(keys::osd_live(id))],
        failure: vec![],
    };
    if !store.txn(txn).await?.succeeded {
        return Err(AdminError::Contended(format!("{key} changed while it was removed; try again")));
    }
    tracing::warn!(osd = id, force, "removed an osd");
    Ok(record)
}

/// The PGs (`(pool, pg)`) whose acting or target set names `id`.
fn member_pgs(map: &ClusterMap, id: u32) -> BTreeSet<(u32, usize)> {
    let mut pgs = BTreeSet::new();
    for (&pool, table) in &map.pg_tables {
        for (pg, (_, acting)) in table.pgs.iter().enumerate() {
            if acting.contains(&id) || table.target(pg).contains(&id) {
                pgs.insert((pool, pg));
            }
        }
    }
    pgs
}

/// The PGs whose history requires a set with `id` in it and no other member up.
async fn only_copy_pgs(store: &dyn MetaStore, map: &ClusterMap, id: u32) -> Result<BTreeSet<String>, AdminError> {
    let mut pgs = BTreeSet::new();
    for kv in store.list(keys::PG_HISTORY_PREFIX).await? {
        let Ok(record) = decode::<PgHistoryRecord>(&kv.key, &kv.value) else { continue };
        let only_here = record.history.required().any(|set| {
            set.members.contains(&id) && set.members.iter().all(|&osd| osd == id || !map.live.contains_key(&osd))
        });
        if only_here {
            pgs.insert(kv.key);
        }
    }
    Ok(pgs)
}

/// The longest `down_out_interval_s` accepted: a week.
pub const DOWN_OUT_INTERVAL_MAX_S: u64 = 7 * 24 * 3600;

/// The deepest `snapshot_chain_max` accepted: a read walks the chain in the primary's RAM, so
/// the bound keeps that walk short.
pub const SNAPSHOT_CHAIN_MAX_LIMIT: u64 = 1024;

/// The cluster's settings (defaults where the store has none).
pub async fn settings(store: &dyn MetaStore) -> Result<SettingsRecord, AdminError> {
    match store.get(keys::SETTINGS).await? {
        Some(kv) => Ok(decode(keys::SETTINGS, &kv.value)?),
        None => Ok(SettingsRecord::default()),
    }
}

/// The range each setting accepts.
fn check(name: &str, value: Option<u64>, min: u64, max: u64) -> Result<(), AdminError> {
    match value {
        Some(value) if !(min..=max).contains(&value) => {
            Err(AdminError::Invalid(format!("{name} {value} is not between {min} and {max}")))
        }
        _ => Ok(()),
    }
}

/// `basalt config set`: changes the given settings; OSDs and the mon follow at once.
pub async fn change_settings(store: &dyn MetaStore, change: &SettingsChange) -> Result<SettingsRecord, AdminError> {
    check("down_out_interval_s", change.down_out_interval_s, 0, DOWN_OUT_INTERVAL_MAX_S)?;
    check("recovery_bytes_per_s_max", change.recovery_bytes_per_s_max, 1 << 20, 1 << 40)?;
    check("recovery_bytes_per_s_min", change.recovery_bytes_per_s_min, 1 << 16, 1 << 40)?;
    check("recovery_latency_ratio_percent", change.recovery_latency_ratio_percent.map(u64::from), 100, 10_000)?;
    check("recovery_in_flight_max", change.recovery_in_flight_max.map(u64::from), 1, 256)?;
    check("scrub_interval_s", change.scrub_interval_s, 60, 365 * 24 * 3600)?;
    check("nearfull_ratio_percent", change.nearfull_ratio_percent.map(u64::from), 1, 99)?;
    check("full_ratio_percent", change.full_ratio_percent.map(u64::from), 1, 99)?;
    check("snapshot_chain_max", change.snapshot_chain_max.map(u64::from), 1, SNAPSHOT_CHAIN_MAX_LIMIT)?;
    check("trash_retention_s", change.trash_retention_s, 0, 365 * 24 * 3600)?;
    for _ in 0..CAS_ATTEMPTS_MAX {
        let kv = store.get(keys::SETTINGS).await?;
        let mut record = match &kv {
            Some(kv) => decode(keys::SETTINGS, &kv.value)?,
            None => SettingsRecord::default(),
        };
        let SettingsChange {
            down_out_interval_s,
            recovery_bytes_per_s_max,
            recovery_bytes_per_s_min,
            recovery_latency_ratio_percent,
            recovery_in_flight_max,
            scrub_interval_s,
            nearfull_ratio_percent,
            full_ratio_percent,
            snapshot_chain_max,
            trash_retention_s,
        } = change.clone();
        record.down_out_interval_s = down_out_interval_s.unwrap_or(record.down_out_interval_s);
        record.recovery_bytes_per_s_max = recovery_bytes_per_s_max.unwrap_or(record.recovery_bytes_per_s_max);
        record.recovery_bytes_per_s_min = recovery_bytes_per_s_min.unwrap_or(record.recovery_bytes_per_s_min);
        record.recovery_latency_ratio_percent =
            recovery_latency_ratio_percent.unwrap_or(record.recovery_latency_ratio_percent);
        record.recovery_in_flight_max = recovery_in_flight_max.unwrap_or(record.recovery_in_flight_max);
        record.scrub_interval_s = scrub_interval_s.unwrap_or(record.scrub_interval_s);
        record.nearfull_ratio_percent = nearfull_ratio_percent.unwrap_or(record.nearfull_ratio_percent);
        record.full_ratio_percent = full_ratio_percent.unwrap_or(record.full_ratio_percent);
        record.snapshot_chain_max = snapshot_chain_max.unwrap_or(record.snapshot_chain_max);
        record.trash_retention_s = trash_retention_s.unwrap_or(record.trash_retention_s);
        if record.nearfull_ratio_percent > record.full_ratio_percent {
            return Err(AdminError::Invalid(format!(
                "nearfull_ratio_percent {} is above full_ratio_percent {}",
                record.nearfull_ratio_percent, record.full_ratio_percent
            )));
        }
        let revision = kv.as_ref().map_or(0, |kv| kv.mod_revision);
        let txn = Txn {
            compares: vec![Compare::mod_revision(keys::SETTINGS, CompareOp::Equal, revision)],
            success: vec![TxnOp::put(keys::SETTINGS, encode(&record), None)],
            failure: vec![],
        };
        if store.txn(txn).await?.succeeded {
            tracing::info!(?change, "changed the cluster settings");
            return Ok(record);
        }
    }
    Err(AdminError::Contended(format!("{} kept changing", keys::SETTINGS)))
}
