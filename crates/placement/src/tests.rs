//! Tests of the placement API: examples through one `check` helper, property tests over random
//! topologies (separation, balance, minimal movement, primary stability, determinism), and
//! `report_figures`, which prints the figures quoted in `docs/design/placement.md`.
//!
//! The tests measure balance against the weight-proportional ideal computed here from scratch,
//! not against the crate's own targets, so a wrong target cannot hide a wrong layout.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

/// One weight unit: a 1 TB drive.
const WEIGHT_UNIT_BYTES: u64 = 1_000_000_000_000;

fn osd(id: u32, host: &str, rack: &str, weight_units: u64) -> OsdInfo {
    OsdInfo {
        id: OsdId(id),
        host: host.to_owned(),
        rack: rack.to_owned(),
        tags: BTreeSet::new(),
        weight_bytes: weight_units * WEIGHT_UNIT_BYTES,
        up: true,
    }
}

/// `host_count` hosts of `osds_per_host` OSDs of weight 1, hosts spread over `rack_count` racks.
fn uniform_cluster(host_count: u32, osds_per_host: u32, rack_count: u32) -> Vec<OsdInfo> {
    let mut osds = Vec::new();
    for host in 0..host_count {
        for index in 0..osds_per_host {
            osds.push(osd(host * osds_per_host + index, &format!("h{host}"), &format!("r{}", host % rack_count), 1));
        }
    }
    osds
}

fn spec(pg_count: u32, replica_count: u8, failure_domain: FailureDomain) -> PoolSpec {
    PoolSpec { pool_id: 1, pg_count, replica_count, failure_domain, tags: BTreeSet::new() }
}

fn is_eligible(spec: &PoolSpec, osd: &OsdInfo) -> bool {
    osd.up && osd.weight_bytes > 0 && spec.tags.is_subset(&osd.tags)
}

fn domain_key(spec: &PoolSpec, osd: &OsdInfo) -> String {
    match spec.failure_domain {
        FailureDomain::Osd => osd.id.to_string(),
        FailureDomain::Host => osd.host.clone(),
        FailureDomain::Rack => osd.rack.clone(),
    }
}

/// Computes a table (with `compute_degraded` if `degraded`) and checks what holds for every
/// output: the row count, full rows, eligible and distinct members in distinct failure domains,
/// and the same result for the OSD slice in reverse order.
fn check(spec: &PoolSpec, osds: &[OsdInfo], previous: Option<&PgTable>, degraded: bool) -> PgTable {
    let run = |osds: &[OsdInfo]| {
        if degraded {
            compute_degraded(spec, osds, previous)
        } else {
            compute(spec, osds, previous)
        }
    };
    let table = run(osds).unwrap_or_else(|error| panic!("placement failed: {error}"));
    let by_id: BTreeMap<OsdId, &OsdInfo> = osds.iter().map(|osd| (osd.id, osd)).collect();
    let domain_count = osds
        .iter()
        .filter(|osd| is_eligible(spec, osd))
        .map(|osd| domain_key(spec, osd))
        .collect::<BTreeSet<_>>()
        .len();
    assert_eq!(table.pgs.len(), spec.pg_count as usize);
    for (pg, members) in table.pgs.iter().enumerate() {
        assert_eq!(members.len(), usize::from(spec.replica_count).min(domain_count), "pg {pg}: {members:?}");
        let mut domains = BTreeSet::new();
        for id in members {
            let osd = by_id[id];
            assert!(is_eligible(spec, osd), "pg {pg}: {id} is not eligible");
            assert!(domains.insert(domain_key(spec, osd)), "pg {pg}: two members in one failure domain: {members:?}");
        }
    }
    let reversed: Vec<OsdInfo> = osds.iter().rev().cloned().collect();
    assert_eq!(run(&reversed).expect("same input"), table, "the output depends on the order of the osd slice");
    table
}

fn check_error(spec: &PoolSpec, osds: &[OsdInfo], expect: &str) {
    let error = compute(spec, osds, None).expect_err("placement should fail");
    assert_eq!(error.to_string(), expect);
}

/// Renders a table as one line per PG, for examples small enough to check by eye.
fn render(table: &PgTable) -> String {
    table
        .pgs
        .iter()
        .enumerate()
        .map(|(pg, members)| {
            let members: Vec<String> = members.iter().map(ToString::to_string).collect();
            format!("{pg}: {}\n", members.join(" "))
        })
        .collect()
}

/// Replica slots that changed OSD: members of the new table that the old row did not have.
fn moved_slot_count(before: &PgTable, after: &PgTable) -> usize {
    after.pgs.iter().zip(&before.pgs).map(|(new, old)| new.iter().filter(|osd| !old.contains(osd)).count()).sum()
}

fn changed_primary_count(before: &PgTable, after: &PgTable) -> usize {
    after.pgs.iter().zip(&before.pgs).filter(|(new, old)| new.first() != old.first()).count()
}

/// The largest distance of any eligible OSD's replica and primary counts from its
/// weight-proportional ideal, in slots and relative to the ideal.
#[derive(Debug, Default, Clone, Copy)]
struct Balance {
    replica_slots: f64,
    replica_ratio: f64,
    primary_slots: f64,
    primary_ratio: f64,
    /// The smallest ideal primary count of any OSD, which bounds how fine the ratios can be.
    primary_ideal_min: f64,
}

fn balance(spec: &PoolSpec, osds: &[OsdInfo], table: &PgTable) -> Balance {
    let eligible: Vec<&OsdInfo> = osds.iter().filter(|osd| is_eligible(spec, osd)).collect();
    let total_weight: f64 = eligible.iter().map(|osd| osd.weight_bytes as f64).sum();
    let members_per_pg = table.pgs[0].len() as f64;
    let mut replica_counts: BTreeMap<OsdId, f64> = BTreeMap::new();
    let mut primary_counts: BTreeMap<OsdId, f64> = BTreeMap::new();
    for members in &table.pgs {
        *primary_counts.entry(members[0]).or_default() += 1.0;
        for &id in members {
            *replica_counts.entry(id).or_default() += 1.0;
        }
    }
    let mut result = Balance { primary_ideal_min: f64::INFINITY, ..Balance::default() };
    for osd in eligible {
        let share = osd.weight_bytes as f64 / total_weight;
        let replica_ideal = f64::from(spec.pg_count) * members_per_pg * share;
        let primary_ideal = f64::from(spec.pg_count) * share;
        let replica_slots = (replica_counts.get(&osd.id).copied().unwrap_or(0.0) - replica_ideal).abs();
        let primary_slots = (primary_counts.get(&osd.id).copied().unwrap_or(0.0) - primary_ideal).abs();
        result.replica_slots = result.replica_slots.max(replica_slots);
        result.replica_ratio = result.replica_ratio.max(replica_slots / replica_ideal);
        result.primary_slots = result.primary_slots.max(primary_slots);
        result.primary_ratio = result.primary_ratio.max(primary_slots / primary_ideal);
        result.primary_ideal_min = result.primary_ideal_min.min(primary_ideal);
    }
    result
}

/// Whether weight-proportional placement is possible: no failure domain's weight share exceeds
/// one slot per PG.
fn is_feasible(spec: &PoolSpec, osds: &[OsdInfo]) -> bool {
    let mut domain_weights: BTreeMap<String, f64> = BTreeMap::new();
    for osd in osds.iter().filter(|osd| is_eligible(spec, osd)) {
        *domain_weights.entry(domain_key(spec, osd)).or_default() += osd.weight_bytes as f64;
    }
    let total_weight: f64 = domain_weights.values().sum();
    domain_weights.len() >= usize::from(spec.replica_count)
        && domain_weights.values().all(|&weight| weight / total_weight * f64::from(spec.replica_count) <= 1.0 + 1e-9)
}

/// A PG count that gives every OSD an ideal of at least `primary_ideal_min` primaries.
fn pg_count_for(osds: &[OsdInfo], primary_ideal_min: f64) -> u32 {
    let total_weight: f64 = osds.iter().map(|osd| osd.weight_bytes as f64).sum();
    let weight_min = osds.iter().map(|osd| osd.weight_bytes).min().expect("osds") as f64;
    (primary_ideal_min * total_weight / weight_min).ceil() as u32
}

#[test]
fn errors_name_the_problem() {
    let osds = uniform_cluster(2, 2, 1);
    check_error(&spec(0, 3, FailureDomain::Osd), &osds, "pool pg_count is 0, it must be at least 1");
    check_error(&spec(8, 0, FailureDomain::Osd), &osds, "pool replica_count is 0, it must be at least 1");
    check_error(
        &spec(8, 3, FailureDomain::Host),
        &osds,
        "pool needs 3 distinct hosts, only 2 hosts have eligible osds",
    );
    check_error(&spec(8, 2, FailureDomain::Rack), &osds, "pool needs 2 distinct racks, only 1 rack has eligible osds");
    let mut duplicated = osds.clone();
    duplicated.push(osd(1, "h9", "r9", 1));
    check_error(&spec(8, 1, FailureDomain::Osd), &duplicated, "osd.1 appears more than once in the osd map");
    let mut ssd_pool = spec(8, 1, FailureDomain::Osd);
    ssd_pool.tags.insert("ssd".to_owned());
    let mut unusable = osds.clone();
    unusable[0].up = false;
    unusable[1].weight_bytes = 0;
    check_error(
        &ssd_pool,
        &unusable,
        "no eligible osd: of 4 osds, 3 are up, 2 are up with nonzero weight, and none of those has all pool tags [\"ssd\"]",
    );
    check_error(
        &spec(8, 1, FailureDomain::Osd),
        &[],
        "no eligible osd: of 0 osds, 0 are up, 0 are up with nonzero weight, and none of those has all pool tags []",
    );
    assert!(compute_degraded(&spec(8, 3, FailureDomain::Host), &[], None).is_err());
}

#[test]
fn three_osds_three_replicas() {
    let osds = uniform_cluster(3, 1, 1);
    let table = check(&spec(6, 3, FailureDomain::Host), &osds, None, false);
    // Every PG holds all three OSDs, and each OSD is primary of two PGs.
    let mut primaries: Vec<u32> = table.pgs.iter().map(|members| members[0].0).collect();
    primaries.sort_unstable();
    assert_eq!(primaries, [0, 0, 1, 1, 2, 2]);
}

#[test]
fn small_example() {
    let osds = uniform_cluster(4, 1, 1);
    let table = check(&spec(4, 2, FailureDomain::Osd), &osds, None, false);
    // Each OSD holds two slots and one primary.
    let expect = "0: osd.3 osd.1\n1: osd.2 osd.3\n2: osd.0 osd.2\n3: osd.1 osd.0\n";
    assert_eq!(render(&table), expect);
}

#[test]
fn tags_down_and_weightless_osds_are_skipped() {
    let mut osds = uniform_cluster(6, 2, 3);
    for osd in &mut osds[..8] {
        osd.tags.insert("ssd".to_owned());
    }
    osds[0].up = false;
    osds[2].weight_bytes = 0;
    let mut ssd_pool = spec(64, 2, FailureDomain::Host);
    ssd_pool.tags.insert("ssd".to_owned());
    let table = check(&ssd_pool, &osds, None, false);
    let used: BTreeSet<u32> = table.pgs.iter().flatten().map(|id| id.0).collect();
    assert_eq!(used, BTreeSet::from([1, 3, 4, 5, 6, 7]));
}

#[test]
fn degraded_fills_what_it_can() {
    let osds = uniform_cluster(3, 2, 3);
    let pool = spec(32, 3, FailureDomain::Rack);
    let before = check(&pool, &osds, None, false);
    // Rack r2 goes down: strict placement refuses, degraded placement keeps two racks per PG.
    let mut after_osds = osds.clone();
    after_osds[4].up = false;
    after_osds[5].up = false;
    check_error(&pool, &after_osds, "pool needs 3 distinct racks, only 2 racks have eligible osds");
    let after = check(&pool, &after_osds, Some(&before), true);
    // Nothing moves except that the lost members are dropped.
    for (old, new) in before.pgs.iter().zip(&after.pgs) {
        let kept: Vec<OsdId> = old.iter().copied().filter(|id| id.0 < 4).collect();
        assert_eq!(new.iter().collect::<BTreeSet<_>>(), kept.iter().collect::<BTreeSet<_>>());
    }
    // The rack comes back: every PG gets its third member again.
    let healed = check(&pool, &osds, Some(&after), false);
    assert_eq!(moved_slot_count(&after, &healed), 32);
}

#[test]
fn primaries_stay_while_alive() {
    let osds = uniform_cluster(8, 2, 4);
    let pool = spec(256, 3, FailureDomain::Host);
    let before = check(&pool, &osds, None, false);
    assert_eq!(check(&pool, &osds, Some(&before), false), before, "an unchanged map changes nothing");
    let mut after_osds = osds.clone();
    after_osds[5].up = false;
    let after = check(&pool, &after_osds, Some(&before), false);
    let lost_primary_count = before.pgs.iter().filter(|members| members[0] == OsdId(5)).count();
    let changed_count = changed_primary_count(&before, &after);
    // Balance may move a few more primaries than the lost ones.
    assert!(changed_count <= lost_primary_count + 4, "{changed_count} primaries changed, {lost_primary_count} lost");
}

#[test]
fn moving_an_osd_into_a_used_host_drops_one_of_the_pair() {
    let osds = uniform_cluster(5, 1, 1);
    let pool = spec(64, 3, FailureDomain::Host);
    let before = check(&pool, &osds, None, false);
    // osd.4 moves into host h0: PGs holding both osd.0 and osd.4 keep the earlier member.
    let mut moved = osds.clone();
    moved[4].host = "h0".to_owned();
    let after = check(&pool, &moved, Some(&before), false);
    for (old, new) in before.pgs.iter().zip(&after.pgs) {
        let positions = (old.iter().position(|id| id.0 == 0), old.iter().position(|id| id.0 == 4));
        if let (Some(first), Some(second)) = positions {
            let earlier = old[first.min(second)];
            let later = old[first.max(second)];
            assert!(new.contains(&earlier), "{old:?} -> {new:?}");
            assert!(!new.contains(&later), "{old:?} -> {new:?}");
        }
    }
}

#[test]
fn odd_inputs() {
    // One PG on many OSDs, and one OSD with one replica.
    let many = uniform_cluster(50, 4, 10);
    check(&spec(1, 3, FailureDomain::Rack), &many, None, false);
    check(&spec(5, 1, FailureDomain::Osd), &uniform_cluster(1, 1, 1), None, false);
    // Huge weights do not overflow.
    let mut heavy = uniform_cluster(4, 2, 2);
    for osd in &mut heavy {
        osd.weight_bytes = u64::MAX;
    }
    check(&spec(64, 3, FailureDomain::Host), &heavy, None, false);
    // A previous table with unknown OSDs, repeated members and too many members per row.
    let osds = uniform_cluster(4, 1, 1);
    let garbage = PgTable {
        pgs: vec![vec![OsdId(99), OsdId(1), OsdId(1), OsdId(2)], vec![OsdId(0), OsdId(1), OsdId(2), OsdId(3)], vec![]],
    };
    // `check` verifies that the result is a valid table all the same.
    check(&spec(4, 2, FailureDomain::Osd), &osds, Some(&garbage), false);
}

#[test]
fn pool_id_changes_the_layout() {
    let osds = uniform_cluster(8, 2, 4);
    let first = check(&spec(64, 3, FailureDomain::Host), &osds, None, false);
    let second = check(&PoolSpec { pool_id: 2, ..spec(64, 3, FailureDomain::Host) }, &osds, None, false);
    assert_ne!(first, second);
}

#[test]
fn pg_count_change_keeps_existing_rows() {
    let osds = uniform_cluster(8, 2, 4);
    let small = check(&spec(64, 3, FailureDomain::Host), &osds, None, false);
    let large = check(&spec(128, 3, FailureDomain::Host), &osds, Some(&small), false);
    let kept = small.pgs.iter().zip(&large.pgs).filter(|(old, new)| old == new).count();
    assert!(kept >= 48, "only {kept} of 64 rows kept");
    let shrunk = check(&spec(32, 3, FailureDomain::Host), &osds, Some(&large), false);
    assert_eq!(shrunk.pgs.len(), 32);
}

#[test]
fn one_huge_host_is_capped() {
    // Host h0 has 12 of 16 weight units: its proportional share (3/4 of the slots) is more than
    // one slot per PG, so it is in every PG and the other hosts share the rest by weight.
    let mut osds: Vec<OsdInfo> = (0..6).map(|id| osd(id, "h0", "r0", 2)).collect();
    osds.extend((6..10).map(|id| osd(id, &format!("h{id}"), "r0", 1)));
    let pool = spec(400, 3, FailureDomain::Host);
    let table = check(&pool, &osds, None, false);
    assert!(table.pgs.iter().all(|members| members.iter().any(|id| id.0 < 6)));
    let mut counts = [0_u32; 10];
    for id in table.pgs.iter().flatten() {
        counts[id.0 as usize] += 1;
    }
    // Each big OSD: 400 / 6 = 66.7 slots; each small host: 800 / 4 = 200 slots.
    for (id, &count) in counts.iter().enumerate() {
        let target = if id < 6 { 400.0 / 6.0 } else { 200.0 };
        assert!((f64::from(count) - target).abs() <= 1.0, "osd.{id}: {count} slots, target {target}");
    }
}

#[test]
fn rendezvous_example_balances_replicas_and_primaries() {
    // Hosts of 1, 2 and 4 weight units with different OSD counts.
    let mut osds = Vec::new();
    for host in 0..12_u32 {
        for index in 0..(1 + host % 4) {
            osds.push(osd(host * 10 + index, &format!("h{host}"), &format!("r{}", host % 3), 1 << (host % 3)));
        }
    }
    let pool = spec(pg_count_for(&osds, 30.0), 3, FailureDomain::Host);
    assert!(is_feasible(&pool, &osds));
    let table = check(&pool, &osds, None, false);
    let figures = balance(&pool, &osds, &table);
    assert!(figures.replica_slots <= 1.0 + 1e-9, "{figures:?}");
    assert!(figures.primary_slots <= 1.0 + 1e-9, "{figures:?}");
}

/// A random cluster: 1 to 20 racks, hosts of 1 to 8 OSDs, weights of 1, 2 or 4 units, 3 to 200
/// OSDs in all.
fn topology() -> impl Strategy<Value = Vec<OsdInfo>> {
    let host = (any::<u8>(), prop::collection::vec(prop::sample::select(vec![1_u64, 2, 4]), 1..=8));
    (1..=20_u8, prop::collection::vec(host, 1..=60)).prop_filter_map("fewer than 3 osds", |(rack_count, hosts)| {
        let mut osds = Vec::new();
        for (host_index, (rack_choice, weights)) in hosts.into_iter().enumerate() {
            for weight_units in weights {
                let id = u32::try_from(osds.len()).expect("small") * 7 + 3;
                osds.push(osd(id, &format!("h{host_index}"), &format!("r{}", rack_choice % rack_count), weight_units));
            }
        }
        osds.truncate(200);
        (osds.len() >= 3).then_some(osds)
    })
}

fn failure_domain() -> impl Strategy<Value = FailureDomain> {
    prop::sample::select(vec![FailureDomain::Osd, FailureDomain::Host, FailureDomain::Rack])
}

fn config() -> ProptestConfig {
    let cases = std::env::var("BASALT_PLACEMENT_CASES").ok().and_then(|value| value.parse().ok()).unwrap_or(24);
    ProptestConfig { cases, ..ProptestConfig::default() }
}

/// What happens to one pool when one OSD is added and, separately, when one goes down.
#[derive(Debug, Default)]
struct Scenario {
    feasible: bool,
    fresh: Balance,
    /// Adding: slots moved and the new OSD's ideal share of them; primaries changed and ideal.
    added_feasible: bool,
    added_moved_slots: f64,
    added_ideal_slots: f64,
    added_changed_primaries: f64,
    added_ideal_primaries: f64,
    added: Balance,
    /// Removing: slots moved and slots lost; primaries changed and primaries lost.
    removed_feasible: bool,
    removed_moved_slots: f64,
    removed_lost_slots: f64,
    removed_changed_primaries: f64,
    removed_lost_primaries: f64,
    removed: Balance,
}

/// Places `pool` on `osds`, then adds `new_osd` (from the first table), then marks the OSD at
/// `removed_index` down (from the first table). Checks every table with `check`; measures the
/// rest, which the callers judge.
fn scenario(pool: &PoolSpec, osds: &[OsdInfo], new_osd: OsdInfo, removed_index: usize) -> Scenario {
    let mut result = Scenario { feasible: is_feasible(pool, osds), ..Scenario::default() };
    let before = check(pool, osds, None, false);
    result.fresh = balance(pool, osds, &before);
    let slot_count = f64::from(pool.pg_count) * f64::from(pool.replica_count);

    let mut grown = osds.to_vec();
    let new_id = new_osd.id;
    grown.push(new_osd);
    let added = check(pool, &grown, Some(&before), false);
    result.added_feasible = result.feasible && is_feasible(pool, &grown);
    let total_weight: f64 = grown.iter().map(|osd| osd.weight_bytes as f64).sum();
    let share = grown.last().expect("grown").weight_bytes as f64 / total_weight;
    result.added_moved_slots = moved_slot_count(&before, &added) as f64;
    result.added_ideal_slots = share * slot_count;
    result.added_changed_primaries = changed_primary_count(&before, &added) as f64;
    result.added_ideal_primaries = share * f64::from(pool.pg_count);
    result.added = balance(pool, &grown, &added);
    assert!(added.pgs.iter().flatten().any(|&id| id == new_id));

    let mut shrunk = osds.to_vec();
    shrunk[removed_index].up = false;
    let removed_id = shrunk[removed_index].id;
    let domain_count =
        shrunk.iter().filter(|osd| osd.up).map(|osd| domain_key(pool, osd)).collect::<BTreeSet<_>>().len();
    let degraded = domain_count < usize::from(pool.replica_count);
    let after = check(pool, &shrunk, Some(&before), degraded);
    result.removed_feasible = result.feasible && is_feasible(pool, &shrunk);
    result.removed_moved_slots = moved_slot_count(&before, &after) as f64;
    result.removed_lost_slots = before.pgs.iter().flatten().filter(|&&id| id == removed_id).count() as f64;
    result.removed_changed_primaries = changed_primary_count(&before, &after) as f64;
    result.removed_lost_primaries = before.pgs.iter().filter(|members| members[0] == removed_id).count() as f64;
    result.removed = balance(pool, &shrunk, &after);
    result
}

/// The acceptance criteria, for setups where weight-proportional placement is possible.
fn judge(scenario: &Scenario) -> Result<(), String> {
    let balanced = |balance: &Balance| balance.replica_ratio <= 0.1 && balance.primary_ratio <= 0.1;
    if scenario.feasible && !balanced(&scenario.fresh) {
        return Err(format!("fresh table unbalanced: {scenario:?}"));
    }
    if scenario.added_feasible {
        if !balanced(&scenario.added) {
            return Err(format!("unbalanced after adding an osd: {scenario:?}"));
        }
        if scenario.added_moved_slots > scenario.added_ideal_slots * 1.25 + 4.0 {
            return Err(format!("adding an osd moved too much: {scenario:?}"));
        }
        // Failure domains can force a second change for a primary the new OSD takes (see the
        // design note), hence the factor 2.
        if scenario.added_changed_primaries > scenario.added_ideal_primaries * 2.0 + 4.0 {
            return Err(format!("adding an osd changed too many primaries: {scenario:?}"));
        }
    }
    if scenario.removed_feasible {
        if !balanced(&scenario.removed) {
            return Err(format!("unbalanced after removing an osd: {scenario:?}"));
        }
        // Slots the lost OSD held must move; with few failure domains (racks) rebalancing can
        // need a chain of moves on top of them (seen: 230 moved for 180 lost, three racks).
        if scenario.removed_moved_slots > scenario.removed_lost_slots * 1.5 + 4.0 {
            return Err(format!("removing an osd moved too much: {scenario:?}"));
        }
        // A lost primary passes to a surviving member, which failure domains may force onto the
        // wrong OSDs; restoring the balance then costs a second change.
        if scenario.removed_changed_primaries > scenario.removed_lost_primaries * 2.0 + 4.0 {
            return Err(format!("removing an osd changed too many primaries: {scenario:?}"));
        }
    }
    Ok(())
}

/// A random pool on a random cluster, with an OSD to add and an OSD to remove.
fn random_scenario() -> impl Strategy<Value = (PoolSpec, Vec<OsdInfo>, OsdInfo, usize)> {
    let choices = (failure_domain(), 1..=3_u8, prop::sample::select(vec![1_u64, 2, 4]), any::<u16>(), any::<u16>());
    (topology(), choices).prop_map(
        |(osds, (failure_domain, replica_count, new_weight_units, new_host_choice, removed_choice))| {
            let mut pool = spec(pg_count_for(&osds, 30.0), replica_count, failure_domain);
            pool.pool_id = u32::from(removed_choice);
            // The new OSD joins an existing host, or a new host in an existing rack.
            let host_count = osds.iter().map(|osd| &osd.host).collect::<BTreeSet<_>>().len();
            let host = format!("h{}", usize::from(new_host_choice) % (host_count + 1));
            let rack = osds
                .iter()
                .find(|osd| osd.host == host)
                .map_or_else(|| osds[usize::from(new_host_choice) % osds.len()].rack.clone(), |osd| osd.rack.clone());
            let new_osd = osd(1_000_000, &host, &rack, new_weight_units);
            let removed_index = usize::from(removed_choice) % osds.len();
            (pool, osds, new_osd, removed_index)
        },
    )
}

/// A small cluster with few, uneven failure domains: 1 to 5 hosts of 1 to 8 OSDs over 1 to 4
/// racks, so that the failure-domain cap often applies.
fn constrained_topology() -> impl Strategy<Value = Vec<OsdInfo>> {
    let host = (any::<u8>(), prop::collection::vec(prop::sample::select(vec![1_u64, 2, 4]), 1..=8));
    (1..=4_u8, prop::collection::vec(host, 1..=5)).prop_map(|(rack_count, hosts)| {
        let mut osds = Vec::new();
        for (host_index, (rack_choice, weights)) in hosts.into_iter().enumerate() {
            for weight_units in weights {
                let id = u32::try_from(osds.len()).expect("small") * 5 + 1;
                osds.push(osd(id, &format!("h{host_index}"), &format!("r{}", rack_choice % rack_count), weight_units));
            }
        }
        osds
    })
}

/// Slots that must move because OSD counts changed: the sum of the increases. A layout that
/// never gives an OSD a slot while taking another from it moves exactly this many.
fn count_increase(before: &PgTable, after: &PgTable) -> usize {
    let mut deltas: BTreeMap<OsdId, i64> = BTreeMap::new();
    for id in after.pgs.iter().flatten() {
        *deltas.entry(*id).or_default() += 1;
    }
    for id in before.pgs.iter().flatten() {
        *deltas.entry(*id).or_default() -= 1;
    }
    deltas.values().map(|&delta| usize::try_from(delta.max(0)).expect("not negative")).sum()
}

/// The largest distance of any OSD's replica and primary counts from the crate's own targets,
/// which cap failure domains at one slot per PG; in slots.
fn capped_deviation(pool: &PoolSpec, osds: &[OsdInfo], table: &PgTable) -> (f64, f64) {
    let cluster = cluster::Cluster::new(pool, osds).expect("valid");
    let replica_targets = cluster.replica_targets(pool.pg_count, table.pgs[0].len());
    let primary_targets = cluster.primary_targets(pool.pg_count);
    let mut replica_counts = vec![0.0; cluster.osd_count()];
    let mut primary_counts = vec![0.0; cluster.osd_count()];
    for members in &table.pgs {
        primary_counts[cluster.index_by_id[&members[0]]] += 1.0;
        for id in members {
            replica_counts[cluster.index_by_id[id]] += 1.0;
        }
    }
    let deviation_max = |counts: &[f64], targets: &[f64]| {
        counts.iter().zip(targets).map(|(count, target)| (count - target).abs()).fold(0.0, f64::max)
    };
    (deviation_max(&replica_counts, &replica_targets), deviation_max(&primary_counts, &primary_targets))
}

/// A pool on a cluster with few failure domains, with an OSD to add and an OSD to remove.
fn constrained_scenario() -> impl Strategy<Value = (PoolSpec, Vec<OsdInfo>, OsdInfo, usize)> {
    let choices = (failure_domain(), 1..=3_u8, prop::sample::select(vec![1_u64, 2, 4]), 0..6_u8, any::<u16>());
    (constrained_topology(), choices).prop_map(
        |(osds, (failure_domain, replica_count, new_weight_units, new_host_index, removed_choice))| {
            let pool = spec(pg_count_for(&osds, 30.0), replica_count, failure_domain);
            let host = format!("h{new_host_index}");
            let rack = osds.iter().find(|osd| osd.host == host).map_or_else(|| "r0".to_owned(), |osd| osd.rack.clone());
            let new_osd = osd(1_000_000, &host, &rack, new_weight_units);
            let removed_index = usize::from(removed_choice) % osds.len();
            (pool, osds, new_osd, removed_index)
        },
    )
}

/// For a constrained cluster: the worst distance from the capped targets over the three tables,
/// and the slots moved by adding and by removing an OSD beyond what the count changes require.
struct Constrained {
    deviation_slots: (f64, f64),
    added_excess_slots: usize,
    removed_excess_slots: usize,
    slot_count: usize,
}

fn constrained(pool: &PoolSpec, osds: &[OsdInfo], new_osd: OsdInfo, removed_index: usize) -> Option<Constrained> {
    let domain_count = |osds: &[OsdInfo]| {
        osds.iter().filter(|osd| is_eligible(pool, osd)).map(|osd| domain_key(pool, osd)).collect::<BTreeSet<_>>().len()
    };
    if domain_count(osds) < usize::from(pool.replica_count) {
        assert!(compute(pool, osds, None).is_err());
        check(pool, osds, None, true);
        return None;
    }
    let before = check(pool, osds, None, false);
    let mut grown = osds.to_vec();
    grown.push(new_osd);
    let added = check(pool, &grown, Some(&before), false);
    let mut shrunk = osds.to_vec();
    shrunk[removed_index].up = false;
    let removed = if domain_count(&shrunk) == 0 {
        before.clone()
    } else {
        check(pool, &shrunk, Some(&before), domain_count(&shrunk) < usize::from(pool.replica_count))
    };
    let mut deviation_slots = capped_deviation(pool, osds, &before);
    for (osds, table) in [(&grown, &added), (&shrunk, &removed)] {
        if domain_count(osds) > 0 {
            let (replica_slots, primary_slots) = capped_deviation(pool, osds, table);
            deviation_slots = (deviation_slots.0.max(replica_slots), deviation_slots.1.max(primary_slots));
        }
    }
    Some(Constrained {
        deviation_slots,
        added_excess_slots: moved_slot_count(&before, &added) - count_increase(&before, &added),
        removed_excess_slots: moved_slot_count(&before, &removed) - count_increase(&before, &removed),
        slot_count: before.pgs.iter().map(Vec::len).sum(),
    })
}

proptest! {
    #![proptest_config(config())]

    /// Separation, balance, movement, primary stability and determinism on random clusters.
    #[test]
    fn random_topologies((pool, osds, new_osd, removed_index) in random_scenario()) {
        let domain_count = osds.iter().map(|osd| domain_key(&pool, osd)).collect::<BTreeSet<_>>().len();
        if domain_count < usize::from(pool.replica_count) {
            prop_assert!(compute(&pool, &osds, None).is_err());
            check(&pool, &osds, None, true);
        } else {
            let scenario = scenario(&pool, &osds, new_osd, removed_index);
            if let Err(message) = judge(&scenario) {
                prop_assert!(false, "{}", message);
            }
        }
    }

    /// Few, uneven failure domains, where the cap applies: every OSD within one and a half slots
    /// of its capped target. Movement beyond the count changes is allowed here, because the
    /// pairs of domains that PGs use may have to change (see the design note); it is reported.
    #[test]
    fn constrained_topologies((pool, osds, new_osd, removed_index) in constrained_scenario()) {
        if let Some(result) = constrained(&pool, &osds, new_osd, removed_index) {
            prop_assert!(result.deviation_slots.0 <= 1.5, "replica deviation {:?}", result.deviation_slots);
            prop_assert!(result.deviation_slots.1 <= 1.5, "primary deviation {:?}", result.deviation_slots);
        }
    }
}

/// Prints the figures quoted in `docs/design/placement.md`.
#[test]
#[allow(clippy::disallowed_methods)] // Timing is reported, never asserted.
fn report_figures() {
    // Uniform clusters: hosts of 5 OSDs (2 for N = 10), host failure domain, 3 replicas.
    for osd_count in [10_u32, 50, 200] {
        let osds_per_host = if osd_count == 10 { 2 } else { 5 };
        let host_count = osd_count / osds_per_host;
        let osds = uniform_cluster(host_count, osds_per_host, host_count.min(10));
        let pool = spec((32 * osd_count).next_power_of_two(), 3, FailureDomain::Host);
        let result = scenario(&pool, &osds, osd(1_000_000, "h0", "r0", 1), 1);
        judge(&result).expect("acceptance criteria");
        let slot_count = f64::from(pool.pg_count) * 3.0;
        eprintln!(
            "uniform N={osd_count} pg_count={}: fresh max deviation replicas {:.2} slots ({:.1}%), primaries {:.2} \
             ({:.1}%); add 1: moved {:.4} of slots (1/(N+1) = {:.4}), primaries changed {:.4} of pgs; \
             remove 1: moved {} slots for {} lost, primaries changed {} for {} lost",
            pool.pg_count,
            result.fresh.replica_slots,
            result.fresh.replica_ratio * 100.0,
            result.fresh.primary_slots,
            result.fresh.primary_ratio * 100.0,
            result.added_moved_slots / slot_count,
            1.0 / f64::from(osd_count + 1),
            result.added_changed_primaries / f64::from(pool.pg_count),
            result.removed_moved_slots,
            result.removed_lost_slots,
            result.removed_changed_primaries,
            result.removed_lost_primaries,
        );
    }

    // Random clusters from the property test's generator, with a fixed seed.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut worst = Scenario::default();
    let (mut moved_ratio_max, mut primary_ratio_max, mut removal_excess_max, mut counted) =
        (0.0_f64, 0.0_f64, 0.0_f64, 0);
    let mut removal_primary_ratio_max = 0.0_f64;
    for _ in 0..24 {
        let (pool, osds, new_osd, removed_index) =
            proptest::strategy::ValueTree::current(&random_scenario().new_tree(&mut runner).expect("generate"));
        let domain_count = osds.iter().map(|osd| domain_key(&pool, osd)).collect::<BTreeSet<_>>().len();
        if domain_count < usize::from(pool.replica_count) {
            continue;
        }
        let result = scenario(&pool, &osds, new_osd, removed_index);
        judge(&result).expect("acceptance criteria");
        if !(result.feasible && result.added_feasible && result.removed_feasible) {
            continue;
        }
        counted += 1;
        for balance in [result.fresh, result.added, result.removed] {
            worst.fresh.replica_ratio = worst.fresh.replica_ratio.max(balance.replica_ratio);
            worst.fresh.primary_ratio = worst.fresh.primary_ratio.max(balance.primary_ratio);
            worst.fresh.replica_slots = worst.fresh.replica_slots.max(balance.replica_slots);
            worst.fresh.primary_slots = worst.fresh.primary_slots.max(balance.primary_slots);
        }
        moved_ratio_max = moved_ratio_max.max(result.added_moved_slots / result.added_ideal_slots);
        primary_ratio_max = primary_ratio_max.max(result.added_changed_primaries / result.added_ideal_primaries);
        removal_excess_max = removal_excess_max.max(result.removed_moved_slots / result.removed_lost_slots);
        removal_primary_ratio_max =
            removal_primary_ratio_max.max(result.removed_changed_primaries / result.removed_lost_primaries.max(1.0));
    }
    eprintln!(
        "random clusters ({counted} feasible of 24, 3 tables each): max deviation replicas {:.2} slots ({:.1}%), \
         primaries {:.2} slots ({:.1}%); add 1: moved up to {moved_ratio_max:.3} x its ideal share, primaries changed \
         up to {primary_ratio_max:.3} x ideal; remove 1: moved up to {removal_excess_max:.3} x the lost slots, \
         primaries changed up to {removal_primary_ratio_max:.3} x the lost primaries",
        worst.fresh.replica_slots,
        worst.fresh.replica_ratio * 100.0,
        worst.fresh.primary_slots,
        worst.fresh.primary_ratio * 100.0,
    );

    // Clusters with few, uneven failure domains, from the constrained property test's generator.
    let (mut deviation_slots, mut added_excess, mut removed_excess, mut counted) =
        ((0.0_f64, 0.0_f64), 0.0_f64, 0.0_f64, 0);
    for _ in 0..48 {
        let (pool, osds, new_osd, removed_index) =
            proptest::strategy::ValueTree::current(&constrained_scenario().new_tree(&mut runner).expect("generate"));
        let Some(result) = constrained(&pool, &osds, new_osd, removed_index) else {
            continue;
        };
        counted += 1;
        deviation_slots =
            (deviation_slots.0.max(result.deviation_slots.0), deviation_slots.1.max(result.deviation_slots.1));
        added_excess = added_excess.max(result.added_excess_slots as f64 / result.slot_count as f64);
        removed_excess = removed_excess.max(result.removed_excess_slots as f64 / result.slot_count as f64);
    }
    eprintln!(
        "constrained clusters ({counted} placeable of 48): max deviation from capped targets replicas {:.2} slots, \
         primaries {:.2} slots; movement beyond count changes up to {:.1}% of slots (add 1), {:.1}% (remove 1)",
        deviation_slots.0,
        deviation_slots.1,
        added_excess * 100.0,
        removed_excess * 100.0,
    );

    // Speed: 200 OSDs, 8192 PGs, 3 replicas, from scratch and after adding an OSD.
    let osds = uniform_cluster(40, 5, 10);
    let pool = spec(8192, 3, FailureDomain::Host);
    let start = std::time::Instant::now();
    let table = compute(&pool, &osds, None).expect("placement");
    let fresh_duration = start.elapsed();
    let mut grown = osds.clone();
    grown.push(osd(1_000_000, "h0", "r0", 1));
    let start = std::time::Instant::now();
    compute(&pool, &grown, Some(&table)).expect("placement");
    let update_duration = start.elapsed();
    eprintln!("200 osds x 8192 pgs x 3: fresh {fresh_duration:?}, after adding an osd {update_duration:?}");
}
