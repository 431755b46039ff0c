//! Passes the client library's reports of refused OSDs to the mon's API
//! (`POST /api/v1/osds/{id}/down-report`, ADR 0015), off the data path's threads.

use std::sync::Arc;

use crate::api_client::ApiClient;

/// Reports to the mon at one API address; each report runs on a short-lived thread of its own,
/// so a slow or absent mon never holds up I/O.
pub struct MonReporter {
    api: String,
}

impl MonReporter {
    pub fn new(api: String) -> Arc<MonReporter> {
        Arc::new(MonReporter { api })
    }
}

impl client::DownReporter for MonReporter {
    fn report(&self, osd: u32, incarnation: i64) {
        let api = self.api.clone();
        let spawned = std::thread::Builder::new().name("down-report".into()).spawn(move || {
            let body = serde_json::json!({ "incarnation": incarnation });
            match ApiClient::new(&api).post(&format!("/osds/{osd}/down-report"), &body) {
                Ok(answer) => tracing::info!(osd, incarnation, answer = %answer, "reported the osd to the mon"),
                Err(error) => tracing::warn!(osd, incarnation, %error, "could not report the osd to the mon"),
            }
        });
        if let Err(error) = spawned {
            tracing::warn!(osd, %error, "could not start a thread to report the osd");
        }
    }
}
