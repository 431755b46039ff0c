//! Replicas identical when clean. Once every PG is clean on its target set, each member of the
//! PG of every object the clients could touch is asked for its copy (`ObjectInfo`: version and
//! the bytes' crc32c, as `basalt scrub` compares them):
//! 1. before any scrub, every copy that passes its checksums must match the others: copies
//!    that differ yet read well are a divergence no checksum shows. Only the replica whose
//!    bits the faults flipped may answer `Corrupt`;
//! 2. a scrub of every PG (what `basalt scrub --wait` asks) must repair what rotted and find
//!    nothing unrepairable;
//! 3. after it, every copy must match.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cluster::ClusterMap;
use meta::MetaStore;
use net::sim::SimNet;
use tokio::time::Instant;
use wire::{ObjectId, PgId, Request, Response, Status};

use crate::cluster::Run;
use crate::history::BLOCK_BYTES;
use crate::{workload, SimOptions};

/// How long the scrub of every PG may take.
const SCRUB_DEADLINE: Duration = Duration::from_secs(120);
const POLL_INTERVAL: Duration = Duration::from_millis(250);
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// One member's answer about its copy.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Copy {
    /// The pages present count: a page of zeros written is not a page never written, which a
    /// layer reads through to its parent.
    Held {
        version: u64,
        crc32c: u32,
        present: u64,
    },
    Missing,
    Corrupt,
    Other(String),
}

/// Runs the three checks; `rotting` is the node whose data the faults flipped bits in.
pub(crate) async fn check(store: &Arc<dyn MetaStore>, options: &SimOptions, rotting: Option<&str>, run: &Run) {
    SimNet::on_node("checker", async {
        if let Err(violation) = compare(store, options, rotting).await {
            return run.violation(format!("before the scrub: {violation}"));
        }
        match scrub_all(store).await {
            Ok(repaired) => run.record(format_args!("scrub of every PG repaired {repaired} copies")),
            Err(violation) => return run.violation(violation),
        }
        match compare(store, options, None).await {
            Ok(objects) => run.record(format_args!("replicas of {objects} objects identical")),
            Err(violation) => run.violation(format!("after the scrub: {violation}")),
        }
    })
    .await;
}

/// Compares every member's copy of every object; returns how many objects were compared.
async fn compare(store: &Arc<dyn MetaStore>, options: &SimOptions, rotting: Option<&str>) -> Result<usize, String> {
    let map = cluster_watch::load(store.as_ref()).await.map_err(|error| format!("loading the map: {error}"))?;
    let mut connections = BTreeMap::new();
    let stripes = options.blocks_per_volume * BLOCK_BYTES as u64 / u64::from(options.object_bytes);
    let mut compared = 0;
    for volume in 0..options.volumes {
        let name = workload::volume_name(volume);
        let record = map.volumes.get(&name).ok_or_else(|| format!("no volume {name} in the map"))?;
        let pool = map.pools.get(&record.pool).ok_or_else(|| format!("no pool {} in the map", record.pool))?;
        for stripe in 0..stripes {
            let pg = cluster::object_pg(record.id, stripe, pool.pg_count);
            let state = map.pg(pool.id, pg).ok_or_else(|| format!("no PG {}.{pg} in the map", pool.id))?;
            let request =
                Request::ObjectInfo { pg: PgId { pool: pool.id, pg }, object: ObjectId { inode: record.id, stripe } };
            let mut copies = Vec::new();
            for &osd in &state.members {
                let copy = ask(&map, &mut connections, osd, state.epoch, request.clone()).await;
                copies.push((osd, node_of(&map, osd), copy));
            }
            let sound: Vec<&Copy> =
                copies.iter().map(|(_, _, copy)| copy).filter(|copy| **copy != Copy::Corrupt).collect();
            let rotten_elsewhere = copies
                .iter()
                .any(|(_, node, copy)| *copy == Copy::Corrupt && rotting.is_none_or(|rotting| node != rotting));
            let other = sound.iter().any(|copy| matches!(copy, Copy::Other(_)));
            if rotten_elsewhere || other || sound.windows(2).any(|pair| pair[0] != pair[1]) {
                // The mon may have moved the PG on since the map was loaded (a backfill ended,
                // and the old member removed its copies as strays): only a difference among the
                // members of the PG's current epoch counts.
                let now =
                    cluster_watch::load(store.as_ref()).await.map_err(|error| format!("loading the map: {error}"))?;
                if now.pg(pool.id, pg).is_some_and(|now| now.epoch != state.epoch) {
                    return Box::pin(compare(store, options, rotting)).await;
                }
                return Err(format!("{name} stripe {stripe} (PG {}.{pg}): copies differ: {copies:?}", pool.id));
            }
            compared += 1;
        }
    }
    for connection in connections.into_values() {
        connection.close("compared");
    }
    Ok(compared)
}

async fn ask(
    map: &ClusterMap,
    connections: &mut BTreeMap<u32, net::Connection>,
    osd: u32,
    epoch: u64,
    request: Request,
) -> Copy {
    if let std::collections::btree_map::Entry::Vacant(entry) = connections.entry(osd) {
        let Some(address) = map.address(osd) else { return Copy::Other(format!("osd.{osd} has no address")) };
        match net::connect(address).await {
            Ok(connection) => entry.insert(connection),
            Err(error) => return Copy::Other(format!("connecting: {error}")),
        };
    }
    match tokio::time::timeout(CALL_TIMEOUT, connections[&osd].call(epoch, request)).await {
        Ok(Ok(reply)) => match reply.response {
            Response::ObjectInfo { version, data_crc32c, present } => {
                Copy::Held { version, crc32c: data_crc32c, present }
            }
            Response::Failed { status: Status::NoSuchObject, .. } => Copy::Missing,
            Response::Failed { status: Status::Corrupt, .. } => Copy::Corrupt,
            other => Copy::Other(format!("{other:?}")),
        },
        Ok(Err(error)) => Copy::Other(format!("calling: {error}")),
        Err(_) => Copy::Other(format!("no answer in {CALL_TIMEOUT:?}")),
    }
}

/// The simulated node an OSD runs on, from its address.
fn node_of(map: &ClusterMap, osd: u32) -> String {
    map.address(osd).map(|address| address.trim_start_matches(net::sim::SIM_PREFIX).to_string()).unwrap_or_default()
}

/// Scrubs every PG and waits for all of them; returns how many copies were repaired.
async fn scrub_all(store: &Arc<dyn MetaStore>) -> Result<u64, String> {
    let progress = scrub_every_pg(store).await?;
    if progress.unrepairable > 0 {
        return Err(format!("the scrub found {} unrepairable copies: {progress:?}", progress.unrepairable));
    }
    Ok(progress.repaired)
}

/// Requests a scrub of every PG, as `basalt scrub --wait` does, and waits until every PG is
/// done: its progress then.
pub(crate) async fn scrub_every_pg(store: &Arc<dyn MetaStore>) -> Result<mon::views::ScrubProgressView, String> {
    let map = cluster_watch::load(store.as_ref()).await.map_err(|error| format!("loading the map: {error}"))?;
    let request = mon::scrub::request(store.as_ref(), &map, &mon::views::ScrubRequestBody::default())
        .await
        .map_err(|error| format!("the scrub could not be requested: {error}"))?;
    let started = Instant::now();
    loop {
        let map = cluster_watch::load(store.as_ref()).await.map_err(|error| format!("loading the map: {error}"))?;
        let progress = mon::scrub::progress(store.as_ref(), &map, request.id)
            .await
            .map_err(|error| format!("the scrub's progress: {error}"))?;
        if progress.pgs_done == progress.pgs_total {
            return Ok(progress);
        }
        if started.elapsed() > SCRUB_DEADLINE {
            return Err(format!("the scrub of every PG did not finish within {SCRUB_DEADLINE:?}: {progress:?}"));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
