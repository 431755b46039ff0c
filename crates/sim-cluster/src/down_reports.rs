//! Reports of an OSD gone (ADR 0015) as clients and OSDs send them, delivered to the mon's own
//! handler (`mon::down_report::handle`) on the mon's node: the handler, its probe of the OSD's
//! address and the lease it revokes are the real ones; the HTTP request that carries a report
//! in a real cluster is replaced by a task started on the mon's node, which a cut between the
//! reporter and the mon drops, as does the mon's death. With two mons the report goes to the
//! one the store names as leader when it is sent, as `MonReporter::Leader` finds it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cluster::records::decode;
use cluster::{keys, LeaderRecord};
use meta::MetaStore;
use net::sim::SimNet;

use crate::cluster::MONS;

#[derive(Clone)]
pub(crate) struct SimDownReporter {
    /// Each mon's node and the store as that mon reaches it.
    mons: Vec<(&'static str, Arc<dyn MetaStore>)>,
    /// Whether each mon's process runs: a report to a dead one is lost.
    running: Arc<Vec<AtomicBool>>,
    /// Where the leading mon is found, with several mons.
    leader_key: Option<Arc<dyn MetaStore>>,
    network: SimNet,
}

impl std::fmt::Debug for SimDownReporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SimDownReporter")
    }
}

impl SimDownReporter {
    pub(crate) fn new(
        mons: Vec<(&'static str, Arc<dyn MetaStore>)>,
        leader_key: Option<Arc<dyn MetaStore>>,
        network: &SimNet,
    ) -> SimDownReporter {
        let running = Arc::new(mons.iter().map(|_| AtomicBool::new(true)).collect());
        SimDownReporter { mons, running, leader_key, network: network.clone() }
    }

    /// Mon `index`'s process died or started again.
    pub(crate) fn set_running(&self, index: usize, running: bool) {
        self.running[index].store(running, Ordering::Relaxed);
    }

    /// Delivers the report to mon `index`, unless the reporter is cut off from it.
    fn deliver(&self, index: usize, from: String, osd: u32, incarnation: i64) {
        let (node, store) = (self.mons[index].0, self.mons[index].1.clone());
        if self.network.is_cut(&from, node) || !self.running[index].load(Ordering::Relaxed) {
            tracing::info!(osd, incarnation, %from, mon = node, "the report did not reach the mon");
            return;
        }
        tokio::task::spawn_local(SimNet::on_node(node, async move {
            let report = mon::down_report::DownReport { incarnation };
            match mon::down_report::handle(store.as_ref(), true, osd, report).await {
                Ok(answer) => {
                    tracing::info!(osd, incarnation, %from, reason = %answer.reason, "the mon answered a down report")
                }
                Err(error) => tracing::warn!(osd, incarnation, %from, %error, "the mon failed a down report"),
            }
        }));
    }
}

impl net::DownReporter for SimDownReporter {
    fn report(&self, osd: u32, incarnation: i64) {
        let from = SimNet::current_node().map(|node| node.to_string()).unwrap_or_default();
        let Some(leader_key) = self.leader_key.clone() else { return self.deliver(0, from, osd, incarnation) };
        let reporter = self.clone();
        tokio::task::spawn_local(async move {
            let leader = match leader_key.get(keys::MON_LEADER).await {
                Ok(Some(kv)) => decode::<LeaderRecord>(keys::MON_LEADER, &kv.value).ok(),
                _ => None,
            };
            let Some(index) = leader.and_then(|leader| MONS.iter().position(|(_, id)| *id == leader.mon)) else {
                return tracing::info!(osd, incarnation, %from, "no mon leads: the report was not sent");
            };
            reporter.deliver(index, from, osd, incarnation);
        });
    }
}
