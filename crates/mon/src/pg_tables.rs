//! The next PG table of a pool: placement's answer turned into a stored record with epochs.
//!
//! Everything here is a pure function of the pool, the OSD map and the stored table, so the
//! leader loop only reads, calls [`next_table`] and writes. The rules
//! (`docs/adr/0006-monitor-and-api.md`, `docs/design/peering.md`, `docs/design/backfill.md`):
//!
//! - An OSD is *in* unless its record says out (`basalt osd out`, or down longer than
//!   `down_out_interval`). A PG's *target set* is placement's over the OSDs that are in, up or
//!   not: `placement::compute` first, `compute_degraded` when there are fewer failure domains
//!   than replicas, from the stored targets, so only what a membership change requires moves.
//!   When no OSD is eligible, stored targets stay (a new pool gets no table).
//! - An OSD is up when its liveness key exists and no active mark of the mon says it is down on
//!   its peers' reports (`mark_down.rs`); a marked OSD keeps its places until it is fenced. While the mon is in its liveness grace (one
//!   OSD lease TTL after it started), an OSD without a liveness key that is a member of the
//!   stored table still counts as up, so a restarted store does not reshuffle every PG.
//! - A PG's *acting set* is the up members of its previous acting set, in their order, then
//!   the other up members of its target set: members that left the target (*old members*)
//!   keep serving, and the new members receive every object in the background (backfill). Old
//!   members leave once the PG was complete at its stored epoch (every acting member held
//!   every object, as its history records) and the target is part of that set.
//! - The primary is the previous primary while it is acting (a primary changes only once its
//!   OSD is down or has left the PG after backfill, so a deposed primary has stopped
//!   acknowledging or is refused by every member's epoch check); otherwise the first acting
//!   member in the target set that was acting before.
//! - A PG's epoch grows by one when its acting set changes (a new primary is a change); new PGs
//!   start at epoch 1; `table_epoch` grows with every write; an unchanged table is not written.

use std::collections::BTreeSet;

use cluster::{ClusterMap, OsdRecord, PgTableRecord, PoolRecord};
use placement::{OsdId, OsdInfo, PlacementError};

use crate::mark_down::Marks;

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

/// The OSDs as placement sees them: every registered OSD, eligible unless it is out.
pub fn osd_infos(map: &ClusterMap) -> Vec<OsdInfo> {
    map.osds.values().map(osd_info).collect()
}

fn osd_info(osd: &OsdRecord) -> OsdInfo {
    OsdInfo {
        id: OsdId(osd.id),
        host: osd.host.clone(),
        rack: osd.rack.clone(),
        tags: osd.tags.clone(),
        weight_bytes: osd.weight_bytes(),
        up: !osd.out,
    }
}

/// The OSDs that count as up for `previous`'s acting sets: those with a liveness key, less those
/// marked down on their peers' reports once fenced, plus the marked ones not fenced yet
/// (`mark_down::marks`); in the grace the members of the stored table too.
pub fn up_osds(map: &ClusterMap, previous: Option<&PgTableRecord>, in_grace: bool, marks: &Marks) -> BTreeSet<u32> {
    let mut up: BTreeSet<u32> = map.live.keys().copied().filter(|osd| !marks.fenced.contains(osd)).collect();
    up.extend(marks.fencing.iter().copied());
    up.retain(|osd| map.osds.contains_key(osd));
    if let Some(previous) = previous.filter(|_| in_grace) {
        let acting = previous.pgs.iter().flat_map(|(_, members)| members.iter().copied());
        let members = acting.chain(previous.targets.iter().flatten().copied());
        up.extend(members.filter(|osd| map.osds.contains_key(osd) && !marks.fenced.contains(osd)));
    }
    up
}

/// The PGs of `table` with old members (acting members outside the target set).
pub fn backfilling(table: &PgTableRecord) -> impl Iterator<Item = usize> + '_ {
    table
        .pgs
        .iter()
        .enumerate()
        .filter(|(pg, (_, acting))| acting.iter().any(|osd| !table.target(*pg).contains(osd)))
        .map(|(pg, _)| pg)
}

/// Computes what to publish for `pool`, given placement's view of the OSDs (from
/// [`osd_infos`]), the OSDs up now (from [`up_osds`]), the stored table and the PGs of it
/// whose every acting member held every object at its stored epoch (`complete`).
pub fn next_table(
    pool: &PoolRecord,
    osds: &[OsdInfo],
    up: &BTreeSet<u32>,
    previous: Option<&PgTableRecord>,
    complete: &BTreeSet<usize>,
) -> TableChange {
    // A stored table of another pool (a corrupt record) is ignored rather than trusted.
    let previous = previous.filter(|table| table.pool == pool.id);
    let same_count = previous.is_some_and(|table| table.pgs.len() == pool.pg_count as usize);
    let targets: Vec<Vec<u32>> = match (place(pool, osds, previous), previous) {
        (Ok(targets), _) => targets,
        (Err(_), Some(previous)) if same_count => {
            (0..previous.pgs.len()).map(|pg| previous.target(pg).to_vec()).collect()
        }
        (Err(reason), _) => return TableChange::NoEligibleOsd(reason),
    };
    assert_eq!(targets.len(), pool.pg_count as usize);
    let pgs: Vec<(u64, Vec<u32>)> = targets
        .iter()
        .enumerate()
        .map(|(pg, target)| {
            let old = previous.and_then(|previous| previous.pgs.get(pg));
            let old_acting = old.map(|(_, members)| members.as_slice());
            let done = old_acting
                .is_some_and(|acting| complete.contains(&pg) && target.iter().all(|osd| acting.contains(osd)));
            let acting = acting_set(target, up, old_acting, done);
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

/// Placement's target sets for `pool` over the OSDs that are in.
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

/// The acting set of a PG: the up members of `previous` in its order (only those in `target`
/// when `done`), then the other up members of `target` in its order; the previous primary
/// first while it is acting, else the first of them that is in `target`. Keeping the previous
/// order keeps the epoch when only the target changed.
fn acting_set(target: &[u32], up: &BTreeSet<u32>, previous: Option<&[u32]>, done: bool) -> Vec<u32> {
    let previous = previous.unwrap_or(&[]);
    let mut acting: Vec<u32> =
        previous.iter().copied().filter(|osd| up.contains(osd) && (!done || target.contains(osd))).collect();
    acting.extend(target.iter().copied().filter(|osd| up.contains(osd) && !previous.contains(osd)));
    let primary = previous
        .first()
        .filter(|primary| acting.contains(primary))
        .or_else(|| acting.iter().find(|osd| target.contains(osd) && previous.contains(osd)))
        .copied();
    if let Some(position) = primary.and_then(|primary| acting.iter().position(|&osd| osd == primary)) {
        let primary = acting.remove(position);
        acting.insert(0, primary);
    }
    acting
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cluster::{FailureDomainName, Redundancy};

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
            let record = OsdRecord { capacity_bytes: 1 << 40, ..crate::test_maps::osd(id, host, "r") };
            map.osds.insert(id, record);
        }
        map.live = live.iter().map(|&id| (id, crate::test_maps::live(id, 1))).collect::<BTreeMap<_, _>>();
        map
    }

    fn publish(change: TableChange) -> PgTableRecord {
        match change {
            TableChange::Publish(table) => table,
            other => panic!("expected a table, got {other:?}"),
        }
    }

    /// The next table of `pool` over `map`, from `previous`, no PG complete, out of the grace.
    fn next(pool: &PoolRecord, map: &ClusterMap, previous: Option<&PgTableRecord>) -> TableChange {
        next_table(pool, &osd_infos(map), &up_osds(map, previous, false, &Marks::default()), previous, &BTreeSet::new())
    }

    fn out(mut map: ClusterMap, osd: u32) -> ClusterMap {
        map.osds.get_mut(&osd).expect("a registered osd").out = true;
        map
    }

    #[test]
    fn a_new_pool_gets_epoch_one_everywhere() {
        let map = map(&[(1, "a"), (2, "b"), (3, "c")], &[1, 2, 3]);
        let table = publish(next(&pool(3, 16), &map, None));
        assert_eq!(table.table_epoch, 1);
        assert_eq!(table.pgs.len(), 16);
        assert!(table.pgs.iter().all(|(epoch, members)| *epoch == 1 && members.len() == 3));
        assert_eq!(next(&pool(3, 16), &map, Some(&table)), TableChange::Unchanged);
    }

    /// An OSD marked out leaves the target sets of its PGs but keeps serving them, as primary
    /// where it was, until they are complete; then it leaves their acting sets.
    #[test]
    fn an_out_osd_serves_its_pgs_until_they_are_complete_without_it() {
        let osds = [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e"), (6, "f")];
        let all = map(&osds, &[1, 2, 3, 4, 5, 6]);
        let pool = pool(3, 64);
        let first = publish(next(&pool, &all, None));
        let drained = out(all.clone(), 6);
        let second = publish(next(&pool, &drained, Some(&first)));
        assert_eq!(second.table_epoch, 2);
        let mut moved = BTreeSet::new();
        for (pg, ((old_epoch, old), (new_epoch, new))) in first.pgs.iter().zip(&second.pgs).enumerate() {
            assert!(!second.target(pg).contains(&6), "pg {pg}");
            if old.contains(&6) {
                moved.insert(pg);
                assert_eq!(*new_epoch, old_epoch + 1, "pg {pg}");
                assert!(new.contains(&6) && new.len() == 4, "pg {pg}: {new:?}");
            } else {
                assert_eq!((new_epoch, new), (old_epoch, old), "pg {pg}");
            }
            assert_eq!(new[0], old[0], "pg {pg}: the primary moved: {old:?} -> {new:?}");
            assert!(second.target(pg).iter().all(|osd| new.contains(osd)), "pg {pg}: a target member is not acting");
        }
        assert!(!moved.is_empty());
        assert_eq!(backfilling(&second).collect::<BTreeSet<_>>(), moved);
        // Nothing changes until the PGs are complete.
        assert_eq!(next(&pool, &drained, Some(&second)), TableChange::Unchanged);
        let third = publish(next_table(
            &pool,
            &osd_infos(&drained),
            &up_osds(&drained, None, false, &Marks::default()),
            Some(&second),
            &moved,
        ));
        for (pg, ((epoch, old), (new_epoch, new))) in second.pgs.iter().zip(&third.pgs).enumerate() {
            assert!(!new.contains(&6), "pg {pg}");
            assert_eq!(new.len(), 3, "pg {pg}");
            assert_eq!(*new_epoch, epoch + u64::from(moved.contains(&pg)), "pg {pg}");
            if old[0] != 6 {
                assert_eq!(new[0], old[0], "pg {pg}: a primary that stays in the pg keeps its role");
            }
        }
        assert_eq!(backfilling(&third).count(), 0);
    }

    /// A joining OSD takes about its share of PG memberships, and every member of a PG's old
    /// set keeps serving until the PG is complete.
    #[test]
    fn a_joining_osd_takes_its_share_and_old_members_stay_until_complete() {
        let osds = [(1, "a"), (2, "b"), (3, "c"), (4, "d")];
        let three = map(&osds[..3], &[1, 2, 3]);
        let pool = pool(3, 64);
        let first = publish(next(&pool, &three, None));
        let four = map(&osds, &[1, 2, 3, 4]);
        let second = publish(next(&pool, &four, Some(&first)));
        let moved: Vec<usize> = backfilling(&second).collect();
        // 4 OSDs, 3 copies: osd 4's share is 3/4 of the PGs, one membership each.
        assert!((40..=56).contains(&moved.len()), "{} PG memberships moved", moved.len());
        for &pg in &moved {
            let (_, acting) = &second.pgs[pg];
            assert_eq!(acting.len(), 4, "pg {pg}: {acting:?}");
            assert!(first.pgs[pg].1.iter().all(|osd| acting.contains(osd)), "pg {pg}: an old member left early");
            assert_eq!(acting[0], first.pgs[pg].1[0], "pg {pg}: the primary moved");
        }
        // A second change mid-backfill (osd 4 out again before any PG completed): the old
        // members stay, osd 4 too, until the PG is complete.
        let flapped = out(four.clone(), 4);
        let third = publish(next(&pool, &flapped, Some(&second)));
        for &pg in &moved {
            let (_, acting) = &third.pgs[pg];
            assert!(acting.contains(&4), "pg {pg}: osd 4 left before the pg was complete");
            assert!(first.pgs[pg].1.iter().all(|osd| acting.contains(osd)), "pg {pg}");
        }
        assert!((0..64).all(|pg| !third.target(pg).contains(&4)));
    }

    /// A PG whose target changed again after it completed keeps its old members until the new
    /// target is part of the complete set.
    #[test]
    fn completion_drops_old_members_only_when_the_target_is_among_them() {
        let osds = [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")];
        let four = map(&osds[..4], &[1, 2, 3, 4]);
        let pool = pool(3, 32);
        let first = publish(next(&pool, &four, None));
        let drained = out(four.clone(), 4);
        let second = publish(next(&pool, &drained, Some(&first)));
        let moving: BTreeSet<usize> = backfilling(&second).collect();
        assert!(!moving.is_empty());
        // Osd 5 joins before the mon saw the PGs complete: the new targets may name it, which is
        // not part of the complete sets, so those PGs keep their old members.
        let five = out(map(&osds, &[1, 2, 3, 4, 5]), 4);
        let third = publish(next_table(
            &pool,
            &osd_infos(&five),
            &up_osds(&five, None, false, &Marks::default()),
            Some(&second),
            &moving,
        ));
        for pg in 0..32 {
            let (_, acting) = &third.pgs[pg];
            let target = third.target(pg);
            assert!(target.iter().all(|osd| acting.contains(osd)), "pg {pg}");
            let complete_set = &second.pgs[pg].1;
            if moving.contains(&pg) && target.iter().all(|osd| complete_set.contains(osd)) {
                assert!(!acting.contains(&4), "pg {pg}: {acting:?}");
            } else if complete_set.contains(&4) {
                assert!(acting.contains(&4), "pg {pg}: osd 4 left before the pg was complete: {acting:?}");
            }
        }
    }

    #[test]
    fn the_liveness_grace_holds_members() {
        let osds = [(1, "a"), (2, "b"), (3, "c")];
        let pool = pool(3, 16);
        let first = publish(next(&pool, &map(&osds[..3], &[1, 2, 3]), None));
        // After a restart of the store nothing is live yet: members hold.
        let restarted = map(&osds[..3], &[]);
        let held = up_osds(&restarted, Some(&first), true, &Marks::default());
        let none = BTreeSet::new();
        assert_eq!(next_table(&pool, &osd_infos(&restarted), &held, Some(&first), &none), TableChange::Unchanged);
        // After the grace, nothing is live: every PG is left with no acting member, its target
        // kept for when they return.
        let empty = publish(next(&pool, &restarted, Some(&first)));
        assert!(empty.pgs.iter().all(|(epoch, acting)| *epoch == 2 && acting.is_empty()));
        assert_eq!(empty.to_placement(), first.to_placement());
        // Every OSD out: no table for a new pool, the stored targets for an existing one.
        let all_out = out(out(out(restarted, 1), 2), 3);
        assert!(matches!(next(&pool, &all_out, None), TableChange::NoEligibleOsd(_)));
        assert_eq!(publish(next(&pool, &all_out, Some(&first))).to_placement(), first.to_placement());
    }

    /// Without remapping, an OSD's loss shrinks its PGs' acting sets (a new primary only where it
    /// was primary), and its return puts it back in them behind the primary they have now.
    #[test]
    fn acting_sets_follow_liveness_inside_fixed_targets() {
        let osds = [(1, "a"), (2, "b"), (3, "c"), (4, "d")];
        let pool = pool(3, 32);
        let first = publish(next(&pool, &map(&osds, &[1, 2, 3, 4]), None));
        let down = map(&osds, &[1, 2, 4]);
        let second = publish(next(&pool, &down, Some(&first)));
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
        assert_eq!(next(&pool, &down, Some(&second)), TableChange::Unchanged);
        let back = map(&osds, &[1, 2, 3, 4]);
        let third = publish(next(&pool, &back, Some(&second)));
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
        let table = publish(next(&pool(3, 8), &map, None));
        assert!(table.pgs.iter().all(|(_, members)| members.len() == 2));
    }
}
