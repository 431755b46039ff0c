//! The peer watch (ADR 0015): this OSD watches the OSDs it shares PGs with and tells the mon, in
//! `/basalt/peer-reports/<id>`, which of them it cannot get answers from. The mon marks OSDs down
//! on those reports (`mon::mark_down`), which is what ends a stall across a link that drops
//! packets between two OSDs that both keep their leases.
//!
//! | peer state | judged |
//! |---|---|
//! | a reply (to any call or probe) within the last probe interval | fine, no probe sent |
//! | no reply for a probe interval | probed with a Ping, given the grace to answer |
//! | no reply for the grace since it was last heard from (or first watched) | unreachable |
//! | a call waiting for twice the grace (it answers pings but not ops) | unreachable |
//!
//! Replication traffic counts as a reply, so a busy link costs no probes. The report is written
//! only when the set of unreachable peers changes, attached to this OSD's lease, so it goes
//! with this incarnation; an empty set deletes it. The same loop sees the mon's mark of this
//! OSD and ends the incarnation ([`crate::liveness::Liveness::end_incarnation`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use cluster::records::encode;
use cluster::{keys, ClusterMap, PeerReportRecord, ReportedPeer};
use meta::{LeaseId, Txn, TxnOp};
use tokio::time::Instant;

use crate::ops::Osd;

/// How often the grace is divided into probes.
const PROBES_PER_GRACE: u32 = 4;

/// One peer under watch.
struct Watched {
    incarnation: i64,
    address: String,
    /// When it was first watched at this incarnation: the grace counts from here until it replies.
    since: Instant,
}

/// The peers this OSD shares a PG with (acting or target sets), each with its incarnation and
/// address, if registered.
fn peers_of(map: &ClusterMap, osd: u32) -> BTreeMap<u32, (i64, String)> {
    let mut peers = BTreeSet::new();
    for table in map.pg_tables.values() {
        for (pg, (_, acting)) in table.pgs.iter().enumerate() {
            let target = table.target(pg);
            if acting.contains(&osd) || target.contains(&osd) {
                peers.extend(acting.iter().chain(target).copied());
            }
        }
    }
    peers.remove(&osd);
    peers
        .into_iter()
        .filter_map(|peer| {
            let live = map.live.get(&peer)?;
            Some((peer, (live.incarnation, map.address(peer)?.to_string())))
        })
        .collect()
}

/// Whether a peer is unreachable now, by the table above.
fn unreachable(watched: &Watched, health: crate::peers::PeerHealth, grace: Duration, now: Instant) -> bool {
    let heard = health.last_reply.map_or(watched.since, |reply| reply.max(watched.since));
    let silent = now.saturating_duration_since(heard) > grace;
    let stalled = health.oldest_waiting.is_some_and(|started| now.saturating_duration_since(started) > grace * 2);
    silent || stalled
}

impl Osd {
    /// Watches the peers and keeps the report current, for as long as the OSD runs.
    pub(crate) async fn watch_peers(self: Rc<Self>, grace: Duration) {
        let interval = grace / PROBES_PER_GRACE;
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut watched: BTreeMap<u32, Watched> = BTreeMap::new();
        let probing: Rc<RefCell<BTreeSet<u32>>> = Rc::default();
        // What the store holds: the lease it is attached to and the peers it names.
        let mut written: Option<(LeaseId, Vec<ReportedPeer>)> = None;
        let mut map_revision = None;
        loop {
            tick.tick().await;
            let map = self.map.borrow().clone();
            let lease = self.liveness.lease();
            if let Some(mark) = map.osds.get(&self.id).and_then(|record| record.down_mark.as_ref()) {
                if mark.is_active() && lease == Some(LeaseId(mark.incarnation)) {
                    self.liveness.end_incarnation(mark.incarnation);
                }
            }
            let now = Instant::now();
            if map_revision != Some(map.revision) {
                map_revision = Some(map.revision);
                let peers = peers_of(&map, self.id);
                watched.retain(|osd, peer| {
                    peers.get(osd).is_some_and(|(incarnation, address)| {
                        *incarnation == peer.incarnation && *address == peer.address
                    })
                });
                for (osd, (incarnation, address)) in peers {
                    watched.entry(osd).or_insert(Watched { incarnation, address, since: now });
                }
            }
            let mut report = Vec::new();
            for (&osd, peer) in &watched {
                let health = self.peers.health(osd);
                if unreachable(peer, health, grace, now) {
                    report.push(ReportedPeer { osd, incarnation: peer.incarnation });
                }
                let heard = health.last_reply.unwrap_or(peer.since).max(peer.since);
                if now.saturating_duration_since(heard) >= interval && probing.borrow_mut().insert(osd) {
                    let (osd_self, probing, address) = (self.clone(), probing.clone(), peer.address.clone());
                    tokio::task::spawn_local(async move {
                        if let Err(error) = osd_self.peers.probe(osd, &address, grace).await {
                            tracing::debug!(osd = osd_self.id, peer = osd, %error, "probe failed");
                        }
                        probing.borrow_mut().remove(&osd);
                    });
                }
            }
            let Some(lease) = lease else { continue };
            if written.as_ref().is_some_and(|(held, peers)| *held == lease && *peers == report) {
                continue;
            }
            if written.is_none() && report.is_empty() {
                // Nothing in the store and nothing to say: a new incarnation starts clean.
                written = Some((lease, report));
                continue;
            }
            match self.write_report(lease, &report).await {
                Ok(()) => {
                    if report.is_empty() {
                        tracing::info!(osd = self.id, "every peer answers again");
                    } else {
                        let peers: Vec<u32> = report.iter().map(|peer| peer.osd).collect();
                        tracing::warn!(
                            osd = self.id,
                            ?peers,
                            grace_ms = grace.as_millis() as u64,
                            "peers give no answer: reported to the mon"
                        );
                    }
                    written = Some((lease, report));
                }
                Err(error) => tracing::warn!(osd = self.id, %error, "cannot write the peer report; retrying"),
            }
        }
    }

    async fn write_report(&self, lease: LeaseId, report: &[ReportedPeer]) -> Result<(), meta::MetaError> {
        let key = keys::peer_report(self.id);
        let op = if report.is_empty() {
            TxnOp::delete(&key)
        } else {
            let record = PeerReportRecord {
                version: cluster::records::FORMAT_VERSION,
                incarnation: lease.0,
                unreachable: report.to_vec(),
            };
            TxnOp::put(&key, encode(&record), Some(lease))
        };
        self.store.txn(Txn { compares: vec![], success: vec![op], failure: vec![] }).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::PeerHealth;

    fn check(since_s: u64, last_reply_s: Option<u64>, waiting_since_s: Option<u64>, now_s: u64, expect: bool) {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let watched = Watched { incarnation: 1, address: String::new(), since: at(since_s) };
        let health = PeerHealth { last_reply: last_reply_s.map(at), oldest_waiting: waiting_since_s.map(at) };
        assert_eq!(unreachable(&watched, health, Duration::from_secs(2), at(now_s)), expect);
    }

    #[test]
    fn a_peer_is_unreachable_after_the_grace_without_a_reply_or_twice_it_with_an_op_waiting() {
        // Newly watched: the grace counts from then, not from a reply before.
        check(10, Some(1), None, 12, false);
        check(10, Some(1), None, 13, true);
        check(0, Some(5), None, 7, false);
        check(0, Some(5), None, 8, true);
        // Answers pings, but an op waits.
        check(0, Some(10), Some(6), 10, false);
        check(0, Some(10), Some(5), 10, true);
    }
}
