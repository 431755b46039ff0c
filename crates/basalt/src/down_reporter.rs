//! Passes reports of OSDs whose address refuses connections (from the client library and from
//! OSDs about their peers) to the mon's API (`POST /api/v1/osds/{id}/down-report`, ADR 0015),
//! off the data path's threads.

use std::sync::Arc;

use cluster::records::decode;
use cluster::{keys, LeaderRecord};

use crate::api_client::ApiClient;

/// Where the reports go; each runs on a short-lived thread of its own, so a slow or absent mon
/// never holds up I/O.
#[derive(Debug, Clone)]
pub enum MonReporter {
    /// The mon API at this address, or at the first of several (comma-separated) that takes it.
    Api(String),
    /// The leading mon, found in the metadata store at this URL when a report is due (a daemon
    /// that knows the store but not the API).
    Leader(String),
}

impl MonReporter {
    pub fn api(address: String) -> Arc<MonReporter> {
        Arc::new(MonReporter::Api(address))
    }

    pub fn leader(meta_url: String) -> Arc<MonReporter> {
        Arc::new(MonReporter::Leader(meta_url))
    }

    /// The API address to report to.
    fn address(&self) -> anyhow::Result<String> {
        match self {
            MonReporter::Api(address) => Ok(address.clone()),
            MonReporter::Leader(meta_url) => {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                runtime.block_on(async {
                    let store = cluster_watch::connect(meta_url).await?;
                    let kv = store
                        .get(keys::MON_LEADER)
                        .await?
                        .ok_or_else(|| anyhow::anyhow!("no mon leads the cluster at {meta_url}"))?;
                    let leader: LeaderRecord = decode(keys::MON_LEADER, &kv.value)?;
                    Ok(leader.address)
                })
            }
        }
    }
}

impl net::DownReporter for MonReporter {
    fn report(&self, osd: u32, incarnation: i64) {
        let target = self.clone();
        let spawned = std::thread::Builder::new().name("down-report".into()).spawn(move || {
            let body = serde_json::json!({ "incarnation": incarnation });
            let answer =
                target.address().and_then(|api| ApiClient::new(&api).post(&format!("/osds/{osd}/down-report"), &body));
            match answer {
                Ok(answer) => tracing::info!(osd, incarnation, answer = %answer, "reported the osd to the mon"),
                Err(error) => tracing::warn!(osd, incarnation, %error, "could not report the osd to the mon"),
            }
        });
        if let Err(error) = spawned {
            tracing::warn!(osd, %error, "could not start a thread to report the osd");
        }
    }
}
