//! Reports of an OSD gone (ADR 0015) as clients and OSDs send them, delivered to the mon's own
//! handler (`mon::down_report::handle`) on the mon's node: the handler, its probe of the OSD's
//! address and the lease it revokes are the real ones; the HTTP request that carries a report
//! in a real cluster is replaced by a task started on the mon's node, which a cut between the
//! reporter and the mon drops.

use std::sync::Arc;

use meta::MetaStore;
use net::sim::SimNet;

use crate::cluster::MON_NODE;

#[derive(Clone)]
pub(crate) struct SimDownReporter {
    /// The store as the mon reaches it.
    store: Arc<dyn MetaStore>,
    network: SimNet,
}

impl std::fmt::Debug for SimDownReporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SimDownReporter")
    }
}

impl SimDownReporter {
    pub(crate) fn new(store: Arc<dyn MetaStore>, network: &SimNet) -> SimDownReporter {
        SimDownReporter { store, network: network.clone() }
    }
}

impl net::DownReporter for SimDownReporter {
    fn report(&self, osd: u32, incarnation: i64) {
        let from = SimNet::current_node().map(|node| node.to_string()).unwrap_or_default();
        if self.network.is_cut(&from, MON_NODE) {
            tracing::info!(osd, incarnation, %from, "the report did not reach the mon");
            return;
        }
        let store = self.store.clone();
        tokio::task::spawn_local(SimNet::on_node(MON_NODE, async move {
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
