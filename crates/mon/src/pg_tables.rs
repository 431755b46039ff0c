//! The next PG table of a pool: placement's answer turned into a stored record with epochs.
//!
//! Everything here is a pure function of the pool, the OSD map and the stored table, so the
//! leader loop only reads, calls [`next_table`] and writes. The rules
//! (`docs/adr/0006-monitor-and-api.md`, `docs/design/peering.md`):
//!
//! - An OSD is up when its liveness key exists. While the mon is in its liveness grace (one
//!   OSD lease TTL after it started, ADR 0005), an OSD without a liveness key that is a member
//!   of the stored table still counts as up, so a restarted store does not reshuffle every PG.
//! - A PG's *target set* is placement's: `placement::compute` first, `compute_degraded` when
//!   there are fewer failure domains than replicas, over the OSDs up now. Stored target sets
//!   stay as they are unless `remap` is on or the pool's PG count changed: moving a PG to other
//!   OSDs needs backfill. Nothing is published when no OSD is eligible for a new table.
//! - A PG's *acting set* is its target set's up OSDs, in target order, except that a primary
//!   that is still up stays first: a primary changes only once its OSD is down (its liveness
//!   key gone), so a deposed primary has stopped acknowledging before its successor starts.
//! - A PG's epoch grows by one when its acting set changes (a new primary is a change); new PGs
//!   start at epoch 1; `table_epoch` grows with every write; an unchanged table is not written.

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
    /// No OSD is eligible for a new table: publish none.
    NoEligibleOsd(String),
}

/// The inputs that decide a pool's table besides the stored table: the OSD map as placement
/// sees it. The leader compares these to skip recomputation on unrelated changes.
pub fn osd_infos(map: &ClusterMap, previous: Option<&PgTableRecord>, in_grace: bool) -> Vec<OsdInfo> {
    let previous_members: BTreeSet<u32> = previous
        .map(|table| {
            let acting = table.pgs.iter().flat_map(|(_, members)| members.iter().copied());
            acting.chain(table.targets.iter().flatten().copied()).collect()
        })
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

/// Computes what to publish for `pool`, given the OSDs (from [`osd_infos`]) and the stored
/// table; `remap` lets stored target sets follow placement.
pub fn next_table(pool: &PoolRecord, osds: &[OsdInfo], previous: Option<&PgTableRecord>, remap: bool) -> TableChange {
    // A stored table of another pool (a corrupt record) is ignored rather than trusted.
    let previous = previous.filter(|table| table.pool == pool.id);
    let keep_targets = !remap && previous.is_some_and(|table| table.pgs.len() == pool.pg_count as usize);
    let targets: Vec<Vec<u32>> = match previous {
        Some(previous) if keep_targets => (0..previous.pgs.len()).map(|pg| previous.target(pg).to_vec()).collect(),
        _ => match place(pool, osds, previous) {
            Ok(targets) => targets,
            Err(reason) => return TableChange::NoEligibleOsd(reason),
        },
    };
    assert_eq!(targets.len(), pool.pg_count as usize);
    let up: BTreeSet<u32> = osds.iter().filter(|osd| osd.up).map(|osd| osd.id.0).collect();
    let pgs: Vec<(u64, Vec<u32>)> = targets
        .iter()
        .enumerate()
        .map(|(pg, target)| {
            let old = previous.and_then(|previous| previous.pgs.get(pg));
            let acting = acting_set(target, &up, old.and_then(|(_, members)| members.first().copied()));
            let epoch = match old {
                Some((epoch, old_acting)) if *old_acting == acting => *epoch,
                Some((epoch, _)) => epoch + 1,
                None => 1,
            };
            (epoch, acting)
        })
        .collect();
    if let Some(previous) = previous {
        if previous.pgs == pgs && (0..pgs.len()).all(|pg| previous.target(pg) == targets[pg].as_slice()) {
            return TableChange::Unchanged;
        }
    }
    TableChange::Publish(PgTableRecord {
        version: cluster::records::FORMAT_VERSION,
        pool: pool.id,
        table_epoch: previous.map_or(1, |previous| previous.table_epoch + 1),
        pgs,
        targets,
    })
}

/// Placement's target sets for `pool` over the OSDs up now.
fn place(pool: &PoolRecord, osds: &[OsdInfo], previous: Option<&PgTableRecord>) -> Result<Vec<Vec<u32>>, String> {
    let spec = pool.placement_spec();
    let previous_placement = previous.map(PgTableRecord::to_placement);
    let computed = match placement::compute(&spec, osds, previous_placement.as_ref()) {
        Err(PlacementError::NotEnoughFailureDomains { .. }) => {
            placement::compute_degraded(&spec, osds, previous_placement.as_ref())
        }
        other => other,
    };
    let table = computed.map_err(|error| error.to_string())?;
    Ok(table.pgs.iter().map(|members| members.iter().map(|osd| osd.0).collect()).collect())
}

/// The up members of `target`, in its order, with `primary` first while it is one of them.
fn acting_set(target: &[u32], up: &BTreeSet<u32>, primary: Option<u32>) -> Vec<u32> {
    let mut acting: Vec<u32> = target.iter().copied().filter(|osd| up.contains(osd)).collect();
    if let Some(position) = primary.and_then(|primary| acting.iter().position(|&osd| osd == primary)) {
        let primary = acting.remove(position);
        acting.insert(0, primary);
    }
    acting
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
        let table = publish(next_table(&pool(3, 16), &osd_infos(&map, None, false), None, false));
        assert_eq!(table.table_epoch, 1);
        assert_eq!(table.pgs.len(), 16);
        assert!(table.pgs.iter().all(|(epoch, members)| *epoch == 1 && members.len() == 3));
        assert_eq!(
            next_table(&pool(3, 16), &osd_infos(&map, Some(&table), false), Some(&table), false),
            TableChange::Unchanged
        );
    }

    #[test]
    fn a_lost_osd_bumps_only_its_pgs_and_keeps_live_primaries() {
        let osds = [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e"), (6, "f")];
        let all = map(&osds, &[1, 2, 3, 4, 5, 6]);
        let pool = pool(3, 64);
        let first = publish(next_table(&pool, &osd_infos(&all, None, false), None, true));
        let without_6 = map(&osds, &[1, 2, 3, 4, 5]);
        let second = publish(next_table(&pool, &osd_infos(&without_6, Some(&first), false), Some(&first), true));
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
        let first = publish(next_table(&pool, &osd_infos(&map(&osds[..3], &[1, 2, 3]), None, false), None, false));
        // After a restart of the store nothing is live yet: members hold, osd 4 is not used.
        let restarted = map(&osds, &[]);
        let held = osd_infos(&restarted, Some(&first), true);
        assert_eq!(next_table(&pool, &held, Some(&first), false), TableChange::Unchanged);
        assert_eq!(next_table(&pool, &held, Some(&first), true), TableChange::Unchanged);
        // After the grace, nothing is live: every PG is left with no acting member, its target
        // kept for when they return; a table to compute from scratch has no eligible OSD.
        let empty = publish(next_table(&pool, &osd_infos(&restarted, Some(&first), false), Some(&first), false));
        assert!(empty.pgs.iter().all(|(epoch, acting)| *epoch == 2 && acting.is_empty()));
        assert_eq!(empty.to_placement(), first.to_placement());
        assert!(matches!(
            next_table(&pool, &osd_infos(&restarted, Some(&first), false), Some(&first), true),
            TableChange::NoEligibleOsd(_)
        ));
    }

    /// Without remapping, an OSD's loss shrinks its PGs' acting sets (a new primary only where it
    /// was primary), and its return puts it back in them behind the primary they have now.
    #[test]
    fn acting_sets_follow_liveness_inside_fixed_targets() {
        let osds = [(1, "a"), (2, "b"), (3, "c"), (4, "d")];
        let pool = pool(3, 32);
        let first = publish(next_table(&pool, &osd_infos(&map(&osds, &[1, 2, 3, 4]), None, false), None, false));
        let down = map(&osds, &[1, 2, 4]);
        let second = publish(next_table(&pool, &osd_infos(&down, Some(&first), false), Some(&first), false));
        assert_eq!(second.to_placement(), first.to_placement(), "targets moved");
        assert_eq!(second.table_epoch, 2);
        for (pg, ((old_epoch, old), (new_epoch, new))) in first.pgs.iter().zip(&second.pgs).enumerate() {
            let expected: Vec<u32> = old.iter().copied().filter(|&osd| osd != 3).collect();
            if old.contains(&3) {
                assert_eq!(*new_epoch, old_epoch + 1, "pg {pg}");
            } else {
                assert_eq!(new_epoch, old_epoch, "pg {pg}");
            }
            assert_eq!(new, &expected, "pg {pg}: the remaining members keep their order");
        }
        assert_eq!(
            next_table(&pool, &osd_infos(&down, Some(&second), false), Some(&second), false),
            TableChange::Unchanged
        );
        let back = map(&osds, &[1, 2, 3, 4]);
        let third = publish(next_table(&pool, &osd_infos(&back, Some(&second), false), Some(&second), false));
        for (pg, ((epoch, acting), (third_epoch, third_acting))) in second.pgs.iter().zip(&third.pgs).enumerate() {
            let target = first.target(pg);
            let mut members = third_acting.clone();
            members.sort_unstable();
            let mut expected = target.to_vec();
            expected.sort_unstable();
            assert_eq!(members, expected, "pg {pg}: every target member is back");
            assert_eq!(third_acting[0], acting[0], "pg {pg}: the primary changed back");
            assert_eq!(*third_epoch, epoch + u64::from(target.contains(&3)), "pg {pg}");
        }
    }

    #[test]
    fn too_few_hosts_give_a_degraded_table() {
        let map = map(&[(1, "a"), (2, "a"), (3, "b")], &[1, 2, 3]);
        let table = publish(next_table(&pool(3, 8), &osd_infos(&map, None, false), None, false));
        assert!(table.pgs.iter().all(|(_, members)| members.len() == 2));
    }
}
