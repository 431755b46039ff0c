//! Flatten (ADR 0035): a volume's head filled with every page it shows from the layers below
//! it, then cut from its parent, online.
//!
//! `POST /volumes/NAME/flatten` flags the volume `flattening` (no snapshot or rollback of it
//! meanwhile). The leader then walks every PG of its pool with `Flatten` ops to the PG's
//! primary, each listing at most [`BATCH_OBJECTS`] of the family's objects from a cursor and
//! copying up the stripes the layers below hold, paced at the OSD like recovery. A failed op
//! (a failover, a lost connection, a full drive) is retried at the PG's primary then, from the
//! same cursor: a copy-up repeated fills nothing twice. Once every PG is walked, one
//! transaction clears the parent and the flag, compared on the record and its head: from then
//! on reads stop at the head. Progress lives in the leader's memory, as a deletion's does.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cluster::records::{decode, encode};
use cluster::{inode, keys, ClusterMap, VolumeRecord};
use futures_util::stream::{self, StreamExt};
use meta::{Compare, CompareOp, MetaStore, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;
use wire::{ObjectId, Request, Response};

use crate::admin::{self, AdminError};

/// Objects one `Flatten` op lists: short enough that an op ends within [`OP_TIMEOUT`] at the
/// pacer's slowest rate, long enough that the round trips cost little.
pub const BATCH_OBJECTS: u32 = 64;
/// PGs walked at once: each OSD's pacer bounds the copies it runs, whatever the mon sends.
const PGS_AT_ONCE: usize = 8;
/// How long one op may take before the mon gives up on it and asks again.
const OP_TIMEOUT: Duration = Duration::from_secs(120);
const RETRY_MIN: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// A flatten's progress, as the leader walking it knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlattenProgress {
    pub pgs_done: u32,
    pub pg_count: u32,
    /// The family's objects listed so far (every layer's, the head's too).
    pub objects_listed: u64,
    /// Head objects that took pages from below.
    pub objects_copied: u64,
    pub elapsed_ms: u64,
    /// At the rate of PGs done so far; `None` before the first.
    pub time_left_ms: Option<u64>,
    /// Why the last op of some PG failed, while it is retried.
    pub problem: Option<String>,
}

/// Flatten progress by volume name, shared between the leader's task and the API.
pub type FlattenTable = Arc<Mutex<BTreeMap<String, FlattenProgress>>>;

/// Flags volume `name` for flattening; the leader does the rest. Asking again while it runs
/// changes nothing.
pub async fn start(store: &dyn MetaStore, name: &str) -> Result<VolumeRecord, AdminError> {
    admin::update_volume(store, name, |volume| {
        if volume.is_deleting() {
            return Err(AdminError::Conflict(format!("volume {name:?} is being deleted")));
        }
        if volume.flattening {
            return Ok(false);
        }
        if volume.parent.is_none() {
            return Err(AdminError::Invalid(format!(
                "volume {name:?} has no parent: it reads through no snapshot, so there is nothing to flatten"
            )));
        }
        if volume.sealing {
            return Err(AdminError::Contended(format!(
                "volume {name:?} is still sealing its last snapshot; try again"
            )));
        }
        volume.flattening = true;
        Ok(true)
    })
    .await
}

/// Why a flatten stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum FlattenError {
    #[error("volume {0:?} is no longer being flattened (removed, or its record changed)")]
    Abandoned(String),
    #[error(transparent)]
    Admin(#[from] AdminError),
}

/// Walks every PG of `volume`'s pool, then cuts the head from its parent. `map` follows the
/// cluster map; `table` shows the progress.
pub async fn run(
    store: &dyn MetaStore,
    map: &watch::Receiver<Arc<ClusterMap>>,
    table: &FlattenTable,
    volume: &VolumeRecord,
) -> Result<(), FlattenError> {
    assert!(volume.flattening);
    let _entry = TableEntry { table, name: &volume.name };
    let pg_count = map.borrow().pools.get(&volume.pool).map_or(0, |pool| pool.pg_count);
    let started = Instant::now();
    table
        .lock()
        .expect("flatten table")
        .insert(volume.name.clone(), FlattenProgress { pg_count, ..Default::default() });
    tracing::info!(volume = %volume.name, head = volume.id, pg_count, "flatten started");
    let walks = stream::iter(0..pg_count)
        .map(|pg| walk_pg(map, table, volume, pg, started))
        .buffer_unordered(PGS_AT_ONCE)
        .collect::<Vec<Result<(), FlattenError>>>()
        .await;
    walks.into_iter().collect::<Result<Vec<()>, FlattenError>>()?;
    finish(store, volume).await?;
    tracing::info!(volume = %volume.name, elapsed_ms = started.elapsed().as_millis() as u64, "flatten done: the head has no parent");
    Ok(())
}

/// Sends `Flatten` ops for one PG until its listing ends.
async fn walk_pg(
    map: &watch::Receiver<Arc<ClusterMap>>,
    table: &FlattenTable,
    volume: &VolumeRecord,
    pg: u32,
    started: Instant,
) -> Result<(), FlattenError> {
    let family = inode::family(volume.id).expect("a head with a parent is layered");
    let mut cursor = ObjectId { inode: inode::layered(volume.pool, family, 0), stripe: 0 };
    let mut wait = RETRY_MIN;
    loop {
        let current = map.borrow().clone();
        if !current.volumes.get(&volume.name).is_some_and(|now| now.id == volume.id && now.flattening) {
            return Err(FlattenError::Abandoned(volume.name.clone()));
        }
        let request = Request::Flatten {
            pg: wire::PgId { pool: volume.pool, pg },
            inode: volume.id,
            start: cursor,
            count_max: BATCH_OBJECTS,
        };
        let outcome = match current.route(volume.pool, pg) {
            Ok(route) => call(route.address, route.epoch, request).await,
            Err(problem) => Err(problem),
        };
        match outcome {
            Ok((listed, copied, next)) => {
                wait = RETRY_MIN;
                let done = listed < BATCH_OBJECTS;
                let mut progress = table.lock().expect("flatten table");
                let entry = progress.entry(volume.name.clone()).or_default();
                entry.objects_listed += u64::from(listed);
                entry.objects_copied += u64::from(copied);
                entry.problem = None;
                if done {
                    entry.pgs_done += 1;
                }
                let elapsed = started.elapsed();
                entry.elapsed_ms = elapsed.as_millis() as u64;
                entry.time_left_ms = (entry.pgs_done > 0).then(|| {
                    let left = u64::from(entry.pg_count - entry.pgs_done);
                    entry.elapsed_ms * left / u64::from(entry.pgs_done)
                });
                if done {
                    return Ok(());
                }
                cursor = next;
            }
            Err(problem) => {
                tracing::debug!(volume = %volume.name, pg, %problem, "a flatten op failed; retrying");
                if let Some(entry) = table.lock().expect("flatten table").get_mut(&volume.name) {
                    entry.problem = Some(format!("pg {}.{pg}: {problem}", volume.pool));
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RETRY_MAX);
            }
        }
    }
}

/// One `Flatten` op: `(listed, copied, next)`, or what went wrong.
async fn call(address: &str, epoch: u64, request: Request) -> Result<(u32, u32, ObjectId), String> {
    let ask = async {
        let connection = net::connect(address).await.map_err(|error| error.to_string())?;
        let reply = connection.call(epoch, request).await.map_err(|error| error.to_string())?;
        match reply.response {
            Response::Flatten { listed, copied, next } => Ok((listed, copied, next)),
            Response::Failed { status, .. } => Err(format!("the primary answered {status}")),
            other => Err(format!("the primary answered a {} to a Flatten", other.opcode())),
        }
    };
    tokio::time::timeout(OP_TIMEOUT, ask).await.unwrap_or_else(|_| Err(format!("no answer in {OP_TIMEOUT:?}")))
}

/// Clears the parent and the flag in one transaction, compared on the record: a volume whose
/// head changed, or that was removed, keeps its parent.
async fn finish(store: &dyn MetaStore, flattened: &VolumeRecord) -> Result<(), FlattenError> {
    let key = keys::volume(&flattened.name);
    for _ in 0..16 {
        let Some(kv) = store.get(&key).await.map_err(AdminError::from)? else {
            return Err(FlattenError::Abandoned(flattened.name.clone()));
        };
        let mut volume: VolumeRecord = decode(&key, &kv.value).map_err(AdminError::from)?;
        if volume.id != flattened.id || !volume.flattening || volume.is_deleting() {
            return Err(FlattenError::Abandoned(flattened.name.clone()));
        }
        volume.parent = None;
        volume.flattening = false;
        let response = store
            .txn(Txn {
                compares: vec![Compare::mod_revision(&key, CompareOp::Equal, kv.mod_revision)],
                success: vec![TxnOp::put(&key, encode(&volume), None)],
                failure: vec![],
            })
            .await
            .map_err(AdminError::from)?;
        if response.succeeded {
            return Ok(());
        }
    }
    Err(AdminError::Contended(format!("volume {:?} kept changing; its flatten ends on the next pass", flattened.name))
        .into())
}

/// Removes a volume's progress when its walk ends in any way.
struct TableEntry<'a> {
    table: &'a FlattenTable,
    name: &'a str,
}

impl Drop for TableEntry<'_> {
    fn drop(&mut self) {
        self.table.lock().expect("flatten table").remove(self.name);
    }
}
