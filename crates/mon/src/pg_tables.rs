//! The next PG table of a pool: placement's answer turned into a stored record with epochs.
//!
//! Everything here is a pure function of the pool, the OSD map and the stored table, so the
//! leader loop only reads, calls [`next_table`] and writes. The rules (`docs/adr/0006-monitor-and-api.md`):
//!
//! - An OSD is up when its liveness key exists. While the mon is in its liveness grace (one
//!   OSD lease TTL after it started, ADR 0005), an OSD without a liveness key that is a member
//!   of the stored table still counts as up, so a restarted store does not reshuffle every PG.
//! - `placement::compute` first; `compute_degraded` when there are fewer failure domains than
//!   replicas; nothing is published when no OSD is eligible.
//! - A PG's epoch grows by one when its ordered member list changes (a new primary is a change);
//!   new PGs start at epoch 1; `table_epoch` grows with every write; an unchanged table is not
//!   written.
//! - When no OSD joined (every eligible OSD already holds a slot in the stored table), a PG whose
//!   previous primary is still a member keeps it: the change was a loss, and only the PGs that
//!   lost their primary get a new one. Placement's primary balancing may otherwise hand a few
//!   live primaries to other members, and every primary change makes the PG peer again.

use std::collections::BTreeSet;

use cluster::{ClusterMap, OsdRecord, PgTableRecord, PoolRecord};
use placement::{OsdId, OsdInfo, PlacementError};

/// What the leader should do with one pool's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableChange {
    /// The stored table is still right.
    Unchanged,
    /// Write this table.
    Publish(PgTableRecord),
    /// No OSD is eligible: keep the stored table (every PG is inactive), or publish none.
    NoEligibleOsd(String),
}

/// The inputs that decide a pool's table besides the stored table: the OSD map as placement
/// sees it. The leader compares these to skip recomputation on unrelated changes.
pub fn osd_infos(map: &ClusterMap, previous: Option<&PgTableRecord>, in_grace: bool) -> Vec<OsdInfo> {
    let previous_members: BTreeSet<u32> = previous
        .map(|table| table.pgs.iter().flat_map(|(_, members)| members.iter().copied()).collect())
        .unwrap_or_default();
    map.osds
        .values()
        .map(|osd| osd_info(osd, map.live.contains_key(&osd.id), in_grace && previous_members.contains(&osd.id)))
        .collect()
}

fn osd_info(osd: &OsdRecord, live: bool, held_by_grace: bool) -> OsdInfo {
    OsdInfo {
        id: OsdId(osd.id),
        host: osd.host.clone(),
        rack: osd.rack.clone(),
        tags: osd.tags.clone(),
        weight_bytes: osd.weight_bytes(),
        up: live || held_by_grace,
    }
}

/// Computes what to publish for `pool`, given the OSDs (from [`osd_infos`]) and the stored table.
pub fn next_table(pool: &PoolRecord, osds: &[OsdInfo], previous: Option<&PgTableRecord>) -> TableChange {
    let spec = pool.placement_spec();
    // A stored table of another pool (a corrupt record) is ignored rather than trusted.
    let previous = previous.filter(|table| table.pool == pool.id);
    let previous_placement = previous.map(PgTableRecord::to_placement);
    let computed = match placement::compute(&spec, osds, previous_placement.as_ref()) {
        Err(PlacementError::NotEnoughFailureDomains { .. }) => {
            placement::compute_degraded(&spec, osds, previous_placement.as_ref())
        }
        other => other,
    };
    let mut table = match computed {
        Ok(table) => table,
        Err(error @ PlacementError::NoEligibleOsd { .. }) => return TableChange::NoEligibleOsd(error.to_string()),
        Err(error) => return TableChange::NoEligibleOsd(error.to_string()),
    };
    assert_eq!(table.pgs.len(), pool.pg_count as usize);
    if let Some(previous) = previous {
        if !any_osd_joined(osds, previous) {
            keep_live_primaries(&mut table, previous);
        }
    }
    let pgs: Vec<(u64, Vec<u32>)> = table
        .pgs
        .iter()
        .enumerate()
        .map(|(pg, members)| {
            let members: Vec<u32> = members.iter().map(|osd| osd.0).collect();
            let epoch = match previous.and_then(|previous| previous.pgs.get(pg)) {
                Some((epoch, old_members)) if *old_members == members => *epoch,
                Some((epoch, _)) => epoch + 1,
                None => 1,
            };
            (epoch, members)
        })
        .collect();
    if let Some(previous) = previous {
        if previous.pgs == pgs {
            return TableChange::Unchanged;
        }
    }
    TableChange::Publish(PgTableRecord {
        version: cluster::records::FORMAT_VERSION,
        pool: pool.id,
        table_epoch: previous.map_or(1, |previous| previous.table_epoch + 1),
        pgs,
    })
}

/// Whether some OSD placement may use is in no PG of the stored table.
fn any_osd_joined(osds: &[OsdInfo], previous: &PgTableRecord) -> bool {
    let members: BTreeSet<u32> = previous.pgs.iter().flat_map(|(_, members)| members.iter().copied()).collect();
    osds.iter().any(|osd| osd.up && osd.weight_bytes > 0 && !members.contains(&osd.id.0))
}

/// Moves each PG's previous primary back to the front when it is still a member.
fn keep_live_primaries(table: &mut placement::PgTable, previous: &PgTableRecord) {
    for (members, (_, old_members)) in table.pgs.iter_mut().zip(&previous.pgs) {
        let Some(&old_primary) = old_members.first() else { continue };
        if let Some(position) = members.iter().position(|osd| osd.0 == old_primary) {
            members.swap(0, position);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cluster::{FailureDomainName, OsdLiveRecord, Redundancy};

    use super::*;

    fn pool(replicas: u8, pg_count: u32) -> PoolRecord {
        PoolRecord {
            version: 1,
            id: 1,
            name: "p".into(),
            redundancy: Redundancy::Replicated(replicas),
            min_size: 1,
            pg_count,
            failure_domain: FailureDomainName::Host,
            osd_tags: BTreeSet::new(),
            primary_affinity_tag: None,
        }
    }

    /// A map of OSDs `(id, host)`, the ones in `live` running.
    fn map(osds: &[(u32, &str)], live: &[u32]) -> ClusterMap {
        let mut map = ClusterMap::default();
        for &(id, host) in osds {
            let record = OsdRecord {
                version: 1,
                id,
                host: host.into(),
                rack: "r".into(),
                tags: BTreeSet::new(),
                weight: 1.0,
                capacity_bytes: 1 << 40,
            };
            map.osds.insert(id, record);
        }
        map.live = live
            .iter()
            .map(|&id| {
                (id, OsdLiveRecord { version: 1, address: format!("127.0.0.1:{id}"), incarnation: 1, local: None })
            })
            .collect::<BTreeMap<_, _>>();
        map
    }

    fn publish(change: TableChange) -> PgTableRecord {
        match change {
            TableChange::Publish(table) => table,
            other => panic!("expected a table, got {other:?}"),
        }
    }

    #[test]
    fn a_new_pool_gets_epoch_one_everywhere() {
        let map = map(&[(1, "a"), (2, "b"), (3, "c")], &[1, 2, 3]);
        let table = publish(next_table(&pool(3, 16), &osd_infos(&map, None, false), None));
        assert_eq!(table.table_epoch, 1);
        assert_eq!(table.pgs.len(), 16);
        assert!(table.pgs.iter().all(|(epoch, members)| *epoch == 1 && members.len() == 3));
        assert_eq!(
            next_table(&pool(3, 16), &osd_infos(&map, Some(&table), false), Some(&table)),
            TableChange::Unchanged
        );
    }

    #[test]
    fn a_lost_osd_bumps_only_its_pgs_and_keeps_live_primaries() {
        let osds = [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e"), (6, "f")];
        let all = map(&osds, &[1, 2, 3, 4, 5, 6]);
        let pool = pool(3, 64);
        let first = publish(next_table(&pool, &osd_infos(&all, None, false), None));
        let without_6 = map(&osds, &[1, 2, 3, 4, 5]);
        let second = publish(next_table(&pool, &osd_infos(&without_6, Some(&first), false), Some(&first)));
        assert_eq!(second.table_epoch, 2);
        for ((old_epoch, old), (new_epoch, new)) in first.pgs.iter().zip(&second.pgs) {
            assert!(!new.contains(&6));
            if old.contains(&6) {
                assert_eq!(*new_epoch, old_epoch + 1);
            } else {
                assert_eq!((new_epoch, new), (old_epoch, old));
            }
            if old[0] != 6 {
                assert_eq!(new[0], old[0], "a live primary moved: {old:?} -> {new:?}");
            }
        }
    }

    #[test]
    fn the_liveness_grace_holds_members_but_admits_no_new_osd() {
        let osds = [(1, "a"), (2, "b"), (3, "c"), (4, "d")];
        let pool = pool(3, 16);
        let first = publish(next_table(&pool, &osd_infos(&map(&osds[..3], &[1, 2, 3]), None, false), None));
        // After a restart of the store nothing is live yet: members hold, osd 4 is not used.
        let restarted = map(&osds, &[]);
        assert_eq!(next_table(&pool, &osd_infos(&restarted, Some(&first), true), Some(&first)), TableChange::Unchanged);
        // After the grace, nothing live means no eligible OSD: the stored table stays.
        assert!(matches!(
            next_table(&pool, &osd_infos(&restarted, Some(&first), false), Some(&first)),
            TableChange::NoEligibleOsd(_)
        ));
    }

    #[test]
    fn too_few_hosts_give_a_degraded_table() {
        let map = map(&[(1, "a"), (2, "a"), (3, "b")], &[1, 2, 3]);
        let table = publish(next_table(&pool(3, 8), &osd_infos(&map, None, false), None));
        assert!(table.pgs.iter().all(|(_, members)| members.len() == 2));
    }
}
