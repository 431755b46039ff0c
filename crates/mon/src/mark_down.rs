//! Marking OSDs down on their peers' reports (ADR 0015): the detector for a link that drops
//! packets between two OSDs that both keep their leases, and for a member that accepts probes
//! but leaves ops unanswered. Pure functions of the map and of when the leader first saw each
//! report; the leader loop (`leader.rs`) writes what they decide.
//!
//! Each OSD probes the OSDs it shares PGs with and keeps `/basalt/peer-reports/<id>` listing
//! those that gave it no answer within the peer grace (`osd::peer_watch`). A report names one
//! *edge*, reporter to peer. The rule:
//!
//! | step | rule |
//! |---|---|
//! | valid edge | reporter and peer registered at the incarnations the report names, neither marked |
//! | actionable | reported both ways for [`SETTLE`], or one way for [`ONE_SIDED_WAIT`] |
//! | choice | cover every actionable edge by marking OSDs, most distinct accusers first, then the highest id |
//! | bound | never more than a third of the registered OSDs marked at once (at least one) |
//! | mark | the OSD's lease is revoked; it stays out of every PG while marked, even registered again |
//! | clear | after the hold (counted from when the leader first saw the mark), once no valid report names it either way |
//! | hold | [`HOLD_BASE`]; doubled, up to [`HOLD_MAX`], when the last mark was cleared less than [`DAMPING_WINDOW`] ago |
//!
//! Covering the edges with the most-accused OSDs first marks one OSD for one bad link, and the
//! OSD itself when it lost its own network (every peer accuses it, it accuses each of them
//! once), never its healthy peers: one OSD's view cannot take the cluster down. The settling
//! time lets the reports of every peer of such an OSD arrive before the count is taken.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cluster::{ClusterMap, DownMark, OsdLiveRecord};
use tokio::time::Instant;

/// How long an edge reported both ways waits, so the reports of every peer of an OSD that lost
/// its own network are in before the choice.
pub const SETTLE: Duration = Duration::from_millis(500);
/// How long an edge reported one way waits for the other end's report.
pub const ONE_SIDED_WAIT: Duration = Duration::from_secs(1);
pub const HOLD_BASE: Duration = Duration::from_secs(10);
pub const HOLD_MAX: Duration = Duration::from_secs(600);
pub const DAMPING_WINDOW: Duration = Duration::from_secs(600);

/// `reporter` gets no answer from `target`.
pub type Edge = (u32, u32);

/// The edges the map's reports name that are still about the running incarnations of both ends
/// (marked OSDs included).
pub fn edges(map: &ClusterMap) -> BTreeSet<Edge> {
    let mut edges = BTreeSet::new();
    for (&reporter, report) in &map.peer_reports {
        if map.live.get(&reporter).is_none_or(|live| live.incarnation != report.incarnation) {
            continue;
        }
        for peer in &report.unreachable {
            let current = map.live.get(&peer.osd).is_some_and(|live| live.incarnation == peer.incarnation);
            if current && peer.osd != reporter && map.osds.contains_key(&peer.osd) {
                edges.insert((reporter, peer.osd));
            }
        }
    }
    edges
}

/// What [`choose`] decided.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Choice {
    /// The OSDs to mark down now.
    pub mark: Vec<u32>,
    /// Actionable edges left uncovered because of the bound.
    pub capped: Vec<Edge>,
}

/// The OSDs to mark down so that no actionable edge joins two unmarked OSDs. `first_seen` holds
/// when the leader first saw each edge of `edges`.
pub fn choose(map: &ClusterMap, edges: &BTreeSet<Edge>, first_seen: &BTreeMap<Edge, Instant>, now: Instant) -> Choice {
    let marked: BTreeSet<u32> = map.osds.keys().copied().filter(|&osd| map.is_marked_down(osd)).collect();
    let open: BTreeSet<Edge> =
        edges.iter().copied().filter(|(a, b)| !marked.contains(a) && !marked.contains(b)).collect();
    let age = |edge: &Edge| first_seen.get(edge).map_or(Duration::ZERO, |seen| now.saturating_duration_since(*seen));
    let mut uncovered: Vec<Edge> = open
        .iter()
        .copied()
        .filter(|&(a, b)| match open.contains(&(b, a)) {
            true => age(&(a, b)).min(age(&(b, a))) >= SETTLE,
            false => age(&(a, b)) >= ONE_SIDED_WAIT,
        })
        .collect();
    let mut accusers: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    for &(reporter, target) in &open {
        accusers.entry(target).or_default().insert(reporter);
    }
    let registered = map.live.keys().filter(|osd| map.osds.contains_key(osd)).count();
    let bound = (registered / 3).max(1);
    let mut choice = Choice::default();
    while !uncovered.is_empty() {
        if marked.len() + choice.mark.len() >= bound {
            choice.capped = uncovered;
            break;
        }
        let pick = uncovered
            .iter()
            .flat_map(|&(a, b)| [a, b])
            .max_by_key(|osd| (accusers.get(osd).map_or(0, BTreeSet::len), *osd))
            .expect("an uncovered edge has ends");
        choice.mark.push(pick);
        uncovered.retain(|&(a, b)| a != pick && b != pick);
    }
    choice
}

/// The mark to write for an OSD marked down now.
pub fn new_mark(previous: Option<&DownMark>, live: &OsdLiveRecord, now_unix_ms: u64) -> DownMark {
    let recent = previous
        .and_then(|mark| mark.cleared_unix_ms)
        .is_some_and(|cleared| now_unix_ms.saturating_sub(cleared) < millis(DAMPING_WINDOW));
    let hold_s = match previous {
        Some(previous) if recent => (previous.hold_s * 2).clamp(HOLD_BASE.as_secs(), HOLD_MAX.as_secs()),
        _ => HOLD_BASE.as_secs(),
    };
    DownMark {
        incarnation: live.incarnation,
        since_unix_ms: now_unix_ms,
        lease_ttl_s: live.lease_ttl_s(),
        hold_s,
        cleared_unix_ms: None,
    }
}

/// The marked OSDs whose mark may be cleared: held long enough since this mon first saw the mark
/// (`marked_since`, which the caller keeps with [`observe_marked`]; a new leader holds a mark
/// again in full, a clock's jump shortens none), and no valid report names them either way.
pub fn to_clear(
    map: &ClusterMap,
    edges: &BTreeSet<Edge>,
    marked_since: &BTreeMap<u32, Instant>,
    now: Instant,
) -> Vec<u32> {
    map.osds
        .values()
        .filter_map(|record| Some((record.id, record.down_mark.as_ref().filter(|mark| mark.is_active())?)))
        .filter(|(osd, mark)| {
            marked_since.get(osd).is_some_and(|since| now >= *since + Duration::from_secs(mark.hold_s))
        })
        .filter(|(osd, _)| !edges.iter().any(|&(a, b)| a == *osd || b == *osd))
        .map(|(osd, _)| osd)
        .collect()
}

/// Keeps `marked_since` (for [`to_clear`]): when this mon first saw each active mark.
pub fn observe_marked(map: &ClusterMap, marked_since: &mut BTreeMap<u32, Instant>, now: Instant) {
    observe(map, marked_since, now, |osd| map.is_marked_down(osd));
}

/// The marked OSDs still registered at the incarnation their mark names: the revocation did not
/// take (yet), so the leader revokes again.
pub fn unrevoked(map: &ClusterMap) -> Vec<(u32, i64)> {
    map.osds
        .values()
        .filter_map(|record| {
            let mark = record.down_mark.as_ref().filter(|mark| mark.is_active())?;
            let live = map.live.get(&record.id)?;
            (live.incarnation == mark.incarnation).then_some((record.id, mark.incarnation))
        })
        .collect()
}

/// The marked OSDs as PG tables see them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Marks {
    /// Surely no longer acknowledging ops: out of every acting set.
    pub fenced: BTreeSet<u32>,
    /// Maybe still acknowledging ops: they keep their places until fenced.
    pub fencing: BTreeSet<u32>,
    /// When the next of `fencing` becomes fenced by time alone.
    pub next_change: Option<Instant>,
}

/// Sorts the marked OSDs of `map` into fenced and fencing. A marked incarnation is fenced once
/// the OSD registered again, or a lease TTL after this mon first saw its liveness key gone
/// (`absent_since`, which the caller keeps): the key goes when the lease is revoked or runs out,
/// and the OSD stops acknowledging before a TTL has passed since its last renewal, which it sent
/// before the key went. Until then a marked OSD counts as up, so no new primary serves while
/// the old one might.
pub fn marks(map: &ClusterMap, absent_since: &BTreeMap<u32, Instant>, now: Instant) -> Marks {
    let mut marks = Marks::default();
    for record in map.osds.values() {
        let Some(mark) = record.down_mark.as_ref().filter(|mark| mark.is_active()) else { continue };
        let fenced_at = match map.live.get(&record.id) {
            Some(live) if live.incarnation != mark.incarnation => None,
            Some(_) => {
                marks.fencing.insert(record.id);
                continue;
            }
            None => absent_since.get(&record.id).map(|since| *since + Duration::from_secs(mark.lease_ttl_s)),
        };
        match fenced_at {
            Some(at) if at > now => {
                marks.fencing.insert(record.id);
                marks.next_change = Some(marks.next_change.map_or(at, |next| next.min(at)));
            }
            Some(_) => {
                marks.fenced.insert(record.id);
            }
            None if map.live.contains_key(&record.id) => {
                marks.fenced.insert(record.id);
            }
            None => {
                // Gone before this mon saw it: it counts from now.
                marks.fencing.insert(record.id);
            }
        }
    }
    marks
}

/// Keeps `absent_since` (for [`marks`]): when this mon first saw each marked OSD without a
/// liveness key.
pub fn observe_absent(map: &ClusterMap, absent_since: &mut BTreeMap<u32, Instant>, now: Instant) {
    observe(map, absent_since, now, |osd| map.is_marked_down(osd) && !map.live.contains_key(&osd));
}

/// Keeps in `since` the OSDs for which `holds` is true, each with when it was first seen so.
fn observe(map: &ClusterMap, since: &mut BTreeMap<u32, Instant>, now: Instant, holds: impl Fn(u32) -> bool) {
    since.retain(|osd, _| holds(*osd));
    for &osd in map.osds.keys().filter(|osd| holds(**osd)) {
        since.entry(osd).or_insert(now);
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cluster::{PeerReportRecord, ReportedPeer};

    fn map(osds: u32) -> ClusterMap {
        let mut map = ClusterMap::default();
        for id in 0..osds {
            map.osds.insert(id, crate::test_maps::osd(id, &format!("h{id}"), "r"));
            map.live.insert(id, crate::test_maps::live(id, 100 + i64::from(id)));
        }
        map
    }

    fn report(map: &mut ClusterMap, reporter: u32, peers: &[u32]) {
        let unreachable =
            peers.iter().map(|&osd| ReportedPeer { osd, incarnation: map.live[&osd].incarnation }).collect();
        let incarnation = map.live[&reporter].incarnation;
        map.peer_reports.insert(reporter, PeerReportRecord { version: 1, incarnation, unreachable });
    }

    /// Every edge of `map` first seen `ago` before the returned instant.
    fn check(map: &ClusterMap, ago: Duration, expect: &[u32]) -> Choice {
        let edges = edges(map);
        let start = Instant::now();
        let now = start + ago;
        let first_seen = edges.iter().map(|edge| (*edge, start)).collect();
        let choice = choose(map, &edges, &first_seen, now);
        assert_eq!(choice.mark, expect, "{choice:?}");
        choice
    }

    #[test]
    fn a_cut_between_two_osds_marks_one_of_them_once_settled() {
        let mut map = map(3);
        report(&mut map, 0, &[1]);
        report(&mut map, 1, &[0]);
        check(&map, SETTLE / 2, &[]);
        check(&map, SETTLE, &[1]);
    }

    #[test]
    fn an_osd_that_lost_its_own_network_is_marked_alone() {
        let mut map = map(12);
        report(&mut map, 5, &[0, 1, 2, 3, 4, 6, 7]);
        for peer in [0, 1, 2, 3, 4, 6, 7] {
            report(&mut map, peer, &[5]);
        }
        check(&map, SETTLE, &[5]);
    }

    #[test]
    fn a_member_that_stalls_ops_is_marked_after_the_one_sided_wait() {
        let mut map = map(3);
        report(&mut map, 0, &[2]);
        check(&map, ONE_SIDED_WAIT / 2, &[]);
        check(&map, ONE_SIDED_WAIT, &[2]);
    }

    #[test]
    fn at_most_a_third_of_the_osds_are_marked() {
        let mut map = map(6);
        // A switch between {0, 1, 2} and {3, 4, 5}: 9 edges both ways.
        for a in 0..3 {
            report(&mut map, a, &[3, 4, 5]);
        }
        for b in 3..6 {
            report(&mut map, b, &[0, 1, 2]);
        }
        let choice = check(&map, SETTLE, &[5, 4]);
        assert!(!choice.capped.is_empty());
        // Marked ones count toward the bound.
        let mut marked = map.clone();
        marked.osds.get_mut(&5).unwrap().down_mark = Some(new_mark(None, &map.live[&5], 0));
        check(&marked, SETTLE, &[4]);
    }

    #[test]
    fn reports_about_or_from_other_incarnations_and_marked_osds_are_ignored() {
        let mut map = map(3);
        report(&mut map, 0, &[1]);
        report(&mut map, 1, &[0]);
        map.live.get_mut(&1).unwrap().incarnation = 999;
        assert!(edges(&map).is_empty());
        let mut map = super::tests::map(3);
        report(&mut map, 0, &[1, 2]);
        map.osds.get_mut(&0).unwrap().down_mark = Some(new_mark(None, &map.live[&0], 0));
        assert_eq!(edges(&map).len(), 2);
        check(&map, ONE_SIDED_WAIT, &[]);
    }

    #[test]
    fn a_mark_clears_after_its_hold_once_no_report_names_it_and_a_quick_repeat_holds_longer() {
        let mut map = map(3);
        let mark = new_mark(None, &map.live[&1], 1_000);
        assert_eq!(mark.hold_s, HOLD_BASE.as_secs());
        map.osds.get_mut(&1).unwrap().down_mark = Some(mark.clone());
        let start = Instant::now();
        let mut marked = BTreeMap::new();
        observe_marked(&map, &mut marked, start);
        let held = start + HOLD_BASE;
        assert!(to_clear(&map, &edges(&map), &marked, held - Duration::from_millis(1)).is_empty());
        assert_eq!(to_clear(&map, &edges(&map), &marked, held), [1]);
        report(&mut map, 0, &[1]);
        assert!(to_clear(&map, &edges(&map), &marked, held).is_empty());
        let cleared_ms = 1_000 + HOLD_BASE.as_secs() * 1000;
        let cleared = DownMark { cleared_unix_ms: Some(cleared_ms), ..mark };
        assert_eq!(new_mark(Some(&cleared), &map.live[&1], cleared_ms + 1).hold_s, 2 * HOLD_BASE.as_secs());
        let later = cleared_ms + millis(DAMPING_WINDOW);
        assert_eq!(new_mark(Some(&cleared), &map.live[&1], later).hold_s, HOLD_BASE.as_secs());
        map.osds.get_mut(&1).unwrap().down_mark = Some(cleared);
        observe_marked(&map, &mut marked, held);
        assert!(marked.is_empty());
    }

    #[test]
    fn a_marked_osd_is_fenced_once_registered_again_or_a_ttl_after_its_key_went() {
        let mut map = map(3);
        map.osds.get_mut(&1).unwrap().down_mark = Some(new_mark(None, &map.live[&1], 0));
        let start = Instant::now();
        let mut absent = BTreeMap::new();
        observe_absent(&map, &mut absent, start);
        assert!(absent.is_empty());
        // Still registered at the marked incarnation: the revocation has not taken.
        assert_eq!(marks(&map, &absent, start).fencing, BTreeSet::from([1]));
        assert_eq!(unrevoked(&map), [(1, 101)]);
        let live = map.live.remove(&1).unwrap();
        observe_absent(&map, &mut absent, start);
        let fencing = marks(&map, &absent, start + Duration::from_secs(2));
        assert_eq!(fencing.fencing, BTreeSet::from([1]));
        assert_eq!(fencing.next_change, Some(start + Duration::from_secs(3)));
        assert_eq!(marks(&map, &absent, start + Duration::from_secs(3)).fenced, BTreeSet::from([1]));
        map.live.insert(1, OsdLiveRecord { incarnation: 555, ..live });
        observe_absent(&map, &mut absent, start);
        assert!(absent.is_empty());
        assert_eq!(marks(&map, &absent, start).fenced, BTreeSet::from([1]));
        assert!(unrevoked(&map).is_empty());
    }
}
