//! Scrubs requested while the clients run and the faults hit, as an operator runs `basalt
//! scrub` on a live cluster: every PG compared and repaired while members go down, come back
//! and catch up, so the repairs that must wait or stop midway are taken. The final checks
//! (`replicas.rs`) scrub again once everything is healed.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use meta::MetaStore;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::cluster::Run;

/// Requests a scrub of every PG every few seconds, until dropped.
pub(crate) async fn request(seed: u64, store: Arc<dyn MetaStore>, run: Rc<Run>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    loop {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(2_000..8_000))).await;
        let requested = async {
            let map = cluster_watch::load(store.as_ref()).await.map_err(|error| error.to_string())?;
            mon::scrub::request(store.as_ref(), &map, &mon::views::ScrubRequestBody::default())
                .await
                .map_err(|error| error.to_string())
        };
        match requested.await {
            Ok(request) => run.record(format_args!("scrub {} of every pg requested", request.id)),
            Err(error) => run.record(format_args!("no scrub requested: {error}")),
        }
    }
}
