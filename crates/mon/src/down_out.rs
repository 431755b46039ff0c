//! Marking OSDs out that stayed down (`docs/design/backfill.md`): an OSD down for longer than
//! the cluster's `down_out_interval` is marked out, so placement moves its PGs elsewhere and
//! backfill rebuilds their copies. A short blip moves nothing: moving data on every restart
//! would cause storms.
//!
//! Two guards keep a wide outage from turning into a mass rebuild (which would fill the
//! surviving OSDs and slow every client for nothing when the outage ends): never more than a
//! quarter of the OSDs out automatically or by hand, and never a whole host or rack of more
//! than one OSD (a machine or rack that is off will most likely come back). An OSD the mon
//! marked out comes back in as soon as it is up again.
//!
//! [`decide`] is a pure function of the map and the times each OSD was first seen down; the
//! leader applies its answer and `basalt status` shows it.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use cluster::ClusterMap;

/// What the mon does about one OSD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Down, in, and its interval is not over: marked out in this much time unless a guard holds.
    Waiting { left: Duration },
    /// Down past its interval: mark it out now.
    MarkOut,
    /// Down past its interval but kept in, for this reason.
    Held { reason: String },
    /// Up again after the mon marked it out: mark it in.
    MarkIn,
}

/// The verdict for every OSD that needs one. `down_since` holds when each OSD without a
/// liveness key was first seen so.
pub fn decide(map: &ClusterMap, down_since: &BTreeMap<u32, SystemTime>, now: SystemTime) -> BTreeMap<u32, Verdict> {
    let interval = Duration::from_secs(map.settings.down_out_interval_s);
    let total = map.osds.len();
    let mut out_count = map.osds.values().filter(|osd| osd.out).count();
    let mut verdicts = BTreeMap::new();
    for osd in map.osds.values() {
        let up = map.is_up(osd.id);
        if up {
            if osd.out && osd.auto_out {
                verdicts.insert(osd.id, Verdict::MarkIn);
            }
            continue;
        }
        if osd.out {
            continue;
        }
        let since = down_since.get(&osd.id).copied().unwrap_or(now);
        let down_for = now.duration_since(since).unwrap_or_default();
        if down_for < interval {
            verdicts.insert(osd.id, Verdict::Waiting { left: interval - down_for });
            continue;
        }
        let verdict = if (out_count + 1) * 4 > total {
            Verdict::Held {
                reason: format!(
                    "{out_count} of {total} osds are out already; at most a quarter are marked out automatically"
                ),
            }
        } else if let Some(domain) = whole_domain_down(map, osd.id) {
            Verdict::Held {
                reason: format!("every osd of {domain} is down; a whole {domain} is never marked out automatically"),
            }
        } else {
            out_count += 1;
            Verdict::MarkOut
        };
        verdicts.insert(osd.id, verdict);
    }
    verdicts
}

/// The host or rack of `osd`, if it has more than one OSD and all of them are down.
fn whole_domain_down(map: &ClusterMap, osd: u32) -> Option<String> {
    let record = &map.osds[&osd];
    let all_down = |same: &dyn Fn(&cluster::OsdRecord) -> bool| {
        let members: Vec<u32> = map.osds.values().filter(|other| same(other)).map(|other| other.id).collect();
        members.len() > 1 && members.iter().all(|id| !map.is_up(*id))
    };
    if all_down(&|other| other.host == record.host) {
        return Some(format!("host {}", record.host));
    }
    let hosts_in_rack = map.osds.values().filter(|other| other.rack == record.rack).map(|other| &other.host);
    if hosts_in_rack.collect::<std::collections::BTreeSet<_>>().len() > 1
        && all_down(&|other| other.rack == record.rack)
    {
        return Some(format!("rack {}", record.rack));
    }
    None
}

#[cfg(test)]
mod tests {

    use cluster::SettingsRecord;

    use super::*;

    /// OSDs `(id, host, rack)`, the ones in `live` up, with a 60 s interval.
    fn map(osds: &[(u32, &str, &str)], live: &[u32]) -> ClusterMap {
        let mut map = ClusterMap::default();
        for &(id, host, rack) in osds {
            map.osds.insert(id, crate::test_maps::osd(id, host, rack));
        }
        for &id in live {
            map.live.insert(id, crate::test_maps::live(id, 1));
        }
        map.settings = SettingsRecord { down_out_interval_s: 60, ..SettingsRecord::default() };
        map
    }

    fn down_for(osds: &[u32], seconds: u64, now: SystemTime) -> BTreeMap<u32, SystemTime> {
        osds.iter().map(|&osd| (osd, now - Duration::from_secs(seconds))).collect()
    }

    #[test]
    fn an_osd_down_past_its_interval_is_marked_out_and_comes_back_in_when_up() {
        let now = SystemTime::now();
        let osds = [(1, "a", "r"), (2, "b", "r"), (3, "c", "r"), (4, "d", "r")];
        let mut cluster = map(&osds, &[1, 2, 3]);
        assert_eq!(
            decide(&cluster, &down_for(&[4], 10, now), now)[&4],
            Verdict::Waiting { left: Duration::from_secs(50) }
        );
        assert_eq!(decide(&cluster, &down_for(&[4], 61, now), now)[&4], Verdict::MarkOut);
        let record = cluster.osds.get_mut(&4).unwrap();
        record.out = true;
        record.auto_out = true;
        assert!(decide(&cluster, &down_for(&[4], 61, now), now).is_empty());
        cluster.live.insert(4, cluster.live[&1].clone());
        assert_eq!(decide(&cluster, &BTreeMap::new(), now)[&4], Verdict::MarkIn);
        // An OSD marked out by hand stays out when it is up.
        cluster.osds.get_mut(&4).unwrap().auto_out = false;
        assert!(decide(&cluster, &BTreeMap::new(), now).is_empty());
    }

    #[test]
    fn at_most_a_quarter_of_the_osds_are_out() {
        let now = SystemTime::now();
        let osds: Vec<(u32, &str, &str)> =
            [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e"), (6, "f"), (7, "g"), (8, "h")]
                .iter()
                .map(|&(id, host)| (id, host, "r"))
                .collect();
        let cluster = map(&osds, &[1, 2, 3, 4, 5]);
        let verdicts = decide(&cluster, &down_for(&[6, 7, 8], 100, now), now);
        assert_eq!(verdicts[&6], Verdict::MarkOut);
        assert_eq!(verdicts[&7], Verdict::MarkOut);
        assert!(matches!(&verdicts[&8], Verdict::Held { reason } if reason.contains("a quarter")), "{verdicts:?}");
        // Three OSDs: marking one out would be more than a quarter.
        let small = map(&osds[..3], &[1, 2]);
        assert!(matches!(decide(&small, &down_for(&[3], 100, now), now)[&3], Verdict::Held { .. }));
    }

    #[test]
    fn a_whole_host_or_rack_is_never_marked_out() {
        let now = SystemTime::now();
        let osds = [
            (1, "a", "r1"),
            (2, "a", "r1"),
            (3, "b", "r1"),
            (4, "c", "r2"),
            (5, "d", "r2"),
            (6, "e", "r3"),
            (7, "f", "r3"),
            (8, "g", "r3"),
        ];
        let host_down = map(&osds, &[3, 4, 5, 6, 7, 8]);
        let verdicts = decide(&host_down, &down_for(&[1, 2], 100, now), now);
        assert!(matches!(&verdicts[&1], Verdict::Held { reason } if reason.contains("host a")), "{verdicts:?}");
        let rack_down = map(&osds, &[1, 2, 3, 6, 7, 8]);
        let verdicts = decide(&rack_down, &down_for(&[4, 5], 100, now), now);
        assert!(matches!(&verdicts[&4], Verdict::Held { reason } if reason.contains("rack r2")), "{verdicts:?}");
        // One OSD of a host with two: a drive, not the machine.
        let one_down = map(&osds, &[2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(decide(&one_down, &down_for(&[1], 100, now), now)[&1], Verdict::MarkOut);
    }
}
