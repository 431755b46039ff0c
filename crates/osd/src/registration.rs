//! Who this OSD is: its id (allocated once, kept in the engine's superblock), its record
//! `/basalt/osd/<id>`, and the check that the engine fits the cluster.
//!
//! Decision table at start (`docs/design/osd.md`):
//!
//! | superblock id | `/basalt/osd/<id>` | action |
//! |---|---|---|
//! | 0 | - | allocate an id and create the record in one transaction, then write the id to the superblock |
//! | n | missing | create the record (and move the id counter above n) |
//! | n | differs in host, rack, tags or capacity | update those, keep the weight |
//! | n | same | nothing |
//!
//! A crash between the allocation and the superblock write wastes one id: the record stays
//! without a drive, and the next start allocates another. An admin removes the orphan.
//!
//! Every step waits for a metadata store it cannot reach ([`patiently`]): an OSD started while
//! the store elects a leader, or across a network cut, waits for it as it would for its lease
//! later, rather than exit for its supervisor to start it again and again.

use std::collections::BTreeSet;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

use cluster::records::{decode, encode, FORMAT_VERSION};
use cluster::{keys, ClusterRecord, Counter, OsdRecord};
use meta::{Compare, CompareOp, KeyValue, MetaError, MetaStore, Txn, TxnOp};

use crate::error::OsdError;

/// What the OSD says about itself in its record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Identity {
    pub host: String,
    pub rack: String,
    pub tags: BTreeSet<String>,
    pub capacity_bytes: u64,
}

/// Transactions retried before giving up on a store that keeps changing under us.
const TXN_ATTEMPTS_MAX: usize = 100;

/// How long a start waits between tries of a metadata store it cannot reach, at most.
const STORE_WAIT_MAX: Duration = Duration::from_secs(5);

/// Runs `step` until the metadata store answers it: while the store cannot be reached, waits
/// (longer each time, up to [`STORE_WAIT_MAX`]) and runs it again. Every step of a start is
/// safe to run again: it reads before it writes, and writes with compares.
pub(crate) async fn patiently<T, F, Fut>(mut step: F) -> Result<T, OsdError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, OsdError>>,
{
    let mut pause = Duration::from_millis(100);
    loop {
        match step().await {
            Err(OsdError::Meta { context, source: source @ MetaError::Unavailable { .. } }) => {
                tracing::warn!(%context, error = %source, retry_in_ms = pause.as_millis() as u64, "the metadata store cannot be reached; waiting for it");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(STORE_WAIT_MAX);
            }
            other => return other,
        }
    }
}

/// Refuses an engine whose object size differs from the cluster's. A cluster without its
/// record yet (no mon has run) is accepted with a warning.
pub(crate) async fn check_cluster(store: &dyn MetaStore, path: &Path, engine_bytes: u32) -> Result<(), OsdError> {
    let read =
        || async { store.get(keys::CLUSTER).await.map_err(OsdError::meta(format!("reading {}", keys::CLUSTER))) };
    let kv = patiently(read).await?;
    let Some(kv) = kv else {
        tracing::warn!(key = keys::CLUSTER, "the cluster record does not exist yet; the object size is not checked");
        return Ok(());
    };
    let cluster: ClusterRecord = decode(keys::CLUSTER, &kv.value)?;
    if cluster.object_size_bytes != engine_bytes {
        return Err(OsdError::ObjectSizeMismatch {
            path: path.to_owned(),
            engine_bytes,
            cluster_bytes: cluster.object_size_bytes,
        });
    }
    Ok(())
}

fn record(id: u32, identity: &Identity, weight: f64) -> OsdRecord {
    OsdRecord {
        version: FORMAT_VERSION,
        id,
        host: identity.host.clone(),
        rack: identity.rack.clone(),
        tags: identity.tags.clone(),
        weight,
        capacity_bytes: identity.capacity_bytes,
        out: false,
        auto_out: false,
        down_mark: None,
    }
}

/// The counter's next id and its `mod_revision` (0 when missing: the next id is 1).
fn counter(kv: Option<&KeyValue>) -> Result<(u64, i64), OsdError> {
    match kv {
        None => Ok((1, 0)),
        Some(kv) => {
            let counter: Counter = decode(keys::OSD_ID_COUNTER, &kv.value)?;
            Ok((counter.next.max(1), kv.mod_revision))
        }
    }
}

fn counter_value(next: u64) -> Vec<u8> {
    encode(&Counter { version: FORMAT_VERSION, next })
}

/// Allocates a new OSD id and creates its record, in one transaction that compares the
/// counter's `mod_revision` and the record's absence.
pub(crate) async fn allocate_id(store: &dyn MetaStore, identity: &Identity) -> Result<u32, OsdError> {
    let failed =
        |source| OsdError::Meta { context: format!("allocating an osd id with {}", keys::OSD_ID_COUNTER), source };
    for _ in 0..TXN_ATTEMPTS_MAX {
        let kv = store.get(keys::OSD_ID_COUNTER).await.map_err(failed)?;
        let (next, mod_revision) = counter(kv.as_ref())?;
        let Ok(id) = u32::try_from(next) else {
            return Err(OsdError::Config { reason: format!("{} is exhausted (next={next})", keys::OSD_ID_COUNTER) });
        };
        let osd_key = keys::osd(id);
        let txn = Txn {
            compares: vec![Compare::mod_revision(keys::OSD_ID_COUNTER, CompareOp::Equal, mod_revision)],
            success: vec![
                TxnOp::put(keys::OSD_ID_COUNTER, counter_value(next + 1), None),
                TxnOp::put(&osd_key, encode(&record(id, identity, 1.0)), None),
            ],
            failure: vec![],
        };
        // A record already at that id (created by hand, or by a start whose counter update was
        // lost with a restored store) is skipped: the counter moves past it and the loop retries.
        let existing = store.get(&osd_key).await.map_err(failed)?;
        let txn = if existing.is_some() {
            Txn { success: vec![TxnOp::put(keys::OSD_ID_COUNTER, counter_value(next + 1), None)], ..txn }
        } else {
            Txn { compares: [txn.compares, vec![Compare::absent(&osd_key)]].concat(), ..txn }
        };
        let response = store.txn(txn).await.map_err(failed)?;
        if response.succeeded && existing.is_none() {
            tracing::info!(osd = id, host = %identity.host, rack = %identity.rack, "allocated a new osd id");
            return Ok(id);
        }
    }
    Err(OsdError::Config { reason: format!("{} kept changing; no id allocated", keys::OSD_ID_COUNTER) })
}

/// Creates the record of a known id if it is missing, or updates what the OSD reports about
/// itself (host, rack, tags, capacity) if it changed; the weight and the out flags are the
/// admin's and the mon's and stay.
pub(crate) async fn ensure_record(store: &dyn MetaStore, id: u32, identity: &Identity) -> Result<(), OsdError> {
    let osd_key = keys::osd(id);
    let error = |context: &str| OsdError::meta(format!("{context} {osd_key}"));
    for _ in 0..TXN_ATTEMPTS_MAX {
        let kv = store.get(&osd_key).await.map_err(error("reading"))?;
        let txn = match kv {
            None => {
                // Keep the counter above every id in use, so it is never handed out again.
                let counter_kv = store.get(keys::OSD_ID_COUNTER).await.map_err(error("reading the counter for"))?;
                let (next, counter_revision) = counter(counter_kv.as_ref())?;
                let mut success = vec![TxnOp::put(&osd_key, encode(&record(id, identity, 1.0)), None)];
                if next <= u64::from(id) {
                    success.push(TxnOp::put(keys::OSD_ID_COUNTER, counter_value(u64::from(id) + 1), None));
                }
                Txn {
                    compares: vec![
                        Compare::absent(&osd_key),
                        Compare::mod_revision(keys::OSD_ID_COUNTER, CompareOp::Equal, counter_revision),
                    ],
                    success,
                    failure: vec![],
                }
            }
            Some(kv) => {
                let current: OsdRecord = decode(&osd_key, &kv.value)?;
                let wanted = OsdRecord {
                    out: current.out,
                    auto_out: current.auto_out,
                    down_mark: current.down_mark.clone(),
                    ..record(id, identity, current.weight)
                };
                if current == wanted {
                    return Ok(());
                }
                tracing::info!(osd = id, host = %wanted.host, rack = %wanted.rack, capacity_bytes = wanted.capacity_bytes, "updating the osd record");
                Txn {
                    compares: vec![Compare::mod_revision(&osd_key, CompareOp::Equal, kv.mod_revision)],
                    success: vec![TxnOp::put(&osd_key, encode(&wanted), None)],
                    failure: vec![],
                }
            }
        };
        if store.txn(txn).await.map_err(error("writing"))?.succeeded {
            return Ok(());
        }
    }
    Err(OsdError::Config { reason: format!("{osd_key} kept changing; not registered") })
}

/// The machine's hostname, for the default `host`.
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}
