//! The seal of a snapshot (ADR 0026): after the transaction that froze a volume's head and gave
//! it a new one, every OSD confirms it applied that map and finished the writes it admitted to
//! the frozen head before; then the new head takes writes.
//!
//! An OSD that does not confirm is waited for until its liveness key goes (its lease ran out,
//! or the mon revoked it), or it registers again: either way it acknowledges nothing it
//! admitted before. Sealing is idempotent, so the API call that took the snapshot and a new
//! leader finishing a head left unsealed may both do it.
//!
//! Once every OSD confirmed, the mon tells them the head is sealed (wire op Sealed) while it
//! commits the seal: the OSDs acknowledge the writes to the head they ran meanwhile without
//! waiting for that commit and the map that carries it. An OSD the word does not reach learns
//! it from the map.

use std::collections::BTreeMap;
use std::time::Duration;

use cluster::{keys, ClusterMap};
use meta::MetaStore;

use crate::admin::{self, AdminError};

/// How long one OSD's Barrier may take before it is asked again (it answers within its own
/// wait, 10 s, or refuses).
const BARRIER_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause between rounds while some OSD has not confirmed.
const ROUND_PAUSE: Duration = Duration::from_millis(50);
/// How long the word that a head is sealed may take to one OSD; one that misses it learns it
/// from the map.
const SEALED_TIMEOUT: Duration = Duration::from_millis(500);

/// Waits until every OSD live in a map of `revision` or later confirmed the Barrier of
/// `revision` or lost its lease, then tells them `head` is sealed and clears the `sealing` flag
/// of volume `name` if its head is still `head`. Returns whether the flag is clear with `head`
/// the head.
pub async fn seal(store: &dyn MetaStore, name: &str, head: u64, revision: i64) -> Result<bool, AdminError> {
    let map = confirm_map(store, revision).await?;
    let commit = admin::update_volume(store, name, |volume| {
        let ours = volume.id == head && volume.sealing;
        if ours {
            volume.sealing = false;
        }
        Ok(ours)
    });
    let (committed, ()) = tokio::join!(commit, tell_sealed(&map, head));
    committed.map(|volume| volume.id == head && !volume.sealing)
}

/// Tells every OSD live in `map` that `head` is sealed; one that does not answer in time
/// learns it from the map.
async fn tell_sealed(map: &ClusterMap, head: u64) {
    let addresses = map.live.keys().filter_map(|&osd| map.address(osd).map(|address| (osd, address.to_string())));
    futures_util::future::join_all(addresses.map(|(osd, address)| async move {
        let told = tokio::time::timeout(SEALED_TIMEOUT, call(&address, wire::Request::Sealed { inode: head })).await;
        if !matches!(told, Ok(Ok(wire::Response::Sealed))) {
            tracing::debug!(osd, head, ?told, "an osd missed the word that a head is sealed");
        }
    }))
    .await;
}

/// Waits until every OSD live in a map of `revision` or later has applied that map and
/// finished the client writes it admitted under older ones (wire op Barrier), or lost its
/// lease, or registered again (a new incarnation starts from a newer map). The seal of a
/// snapshot waits for it, and so does the removal of a layer, whose trims delete only at an
/// OSD that knows the layer is being removed. Returns the map it last loaded.
pub async fn confirm_map(store: &dyn MetaStore, revision: i64) -> Result<ClusterMap, AdminError> {
    let mut map = loaded_at(store, revision).await?;
    let mut pending: BTreeMap<u32, i64> = map.live.iter().map(|(&osd, live)| (osd, live.incarnation)).collect();
    loop {
        // Gone from the map, or registered again since: it acknowledges nothing admitted before.
        pending.retain(|osd, incarnation| map.live.get(osd).is_some_and(|live| live.incarnation == *incarnation));
        if pending.is_empty() {
            return Ok(map);
        }
        let asks = pending.keys().filter_map(|&osd| map.address(osd).map(|address| (osd, address.to_string())));
        let answers = futures_util::future::join_all(asks.map(|(osd, address)| async move {
            let answered = tokio::time::timeout(BARRIER_TIMEOUT, barrier(&address, revision)).await;
            (osd, matches!(answered, Ok(Ok(()))))
        }))
        .await;
        for (osd, answered) in answers {
            if answered {
                pending.remove(&osd);
            }
        }
        if pending.is_empty() {
            return Ok(map);
        }
        tracing::debug!(revision, ?pending, "waiting for osds to confirm a map");
        tokio::time::sleep(ROUND_PAUSE).await;
        map = cluster_watch::load(store).await?;
    }
}

/// Seals every head left sealing (a mon stopped between a snapshot and its seal).
pub async fn seal_leftovers(store: &dyn MetaStore, map: &ClusterMap) {
    for volume in map.volumes.values().filter(|volume| volume.sealing) {
        let key = keys::volume(&volume.name);
        let revision = match store.get(&key).await {
            Ok(Some(kv)) => kv.mod_revision,
            Ok(None) => continue,
            Err(error) => {
                tracing::warn!(%error, volume = %volume.name, "reading a sealing volume failed");
                continue;
            }
        };
        match seal(store, &volume.name, volume.id, revision).await {
            Ok(true) => tracing::info!(volume = %volume.name, head = volume.id, "sealed a snapshot left unsealed"),
            Ok(false) => {}
            Err(error) => tracing::warn!(%error, volume = %volume.name, "sealing a snapshot failed"),
        }
    }
}

/// The map at `revision` or later.
async fn loaded_at(store: &dyn MetaStore, revision: i64) -> Result<ClusterMap, AdminError> {
    loop {
        let map = cluster_watch::load(store).await?;
        if map.revision >= revision {
            return Ok(map);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn barrier(address: &str, revision: i64) -> Result<(), String> {
    match call(address, wire::Request::Barrier { revision: u64::try_from(revision).unwrap_or(0) }).await? {
        wire::Response::Barrier => Ok(()),
        other => Err(format!("answered {other:?}")),
    }
}

async fn call(address: &str, request: wire::Request) -> Result<wire::Response, String> {
    let connection = net::connect(address).await.map_err(|error| error.to_string())?;
    Ok(connection.call(0, request).await.map_err(|error| error.to_string())?.response)
}
