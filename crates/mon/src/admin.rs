//! The administrative writes: pools and volumes, validated, each one compare-and-swap
//! transaction on the metadata store.
//!
//! These run on any mon, leader or not: each transaction compares what it read (counters,
//! the absence of a name, the record being changed), so two mons racing on the same name or
//! counter cannot both succeed, and the loser re-reads and retries or reports the conflict.
//! The HTTP layer (`api.rs`) only decodes requests and maps [`AdminError`] to a status.

use std::collections::BTreeSet;

use cluster::records::{decode, encode, FORMAT_VERSION};
use cluster::{
    inode, keys, ClusterMap, ClusterRecord, Counter, FailureDomainName, PoolRecord, Redundancy, SnapshotRecord,
    VolumeRecord,
};
use meta::{Compare, CompareOp, KeyValue, MetaError, MetaStore, Txn, TxnOp, TxnOpResult};
use serde::{Deserialize, Serialize};

pub use types::OBJECT_SIZE_DEFAULT_BYTES;
/// Volume sizes are whole multiples of a page.
pub const VOLUME_SIZE_ALIGNMENT_BYTES: u64 = types::PAGE_SIZE_BYTES as u64;
pub const POOL_NAME_LENGTH_MAX: usize = 64;
pub const VOLUME_NAME_LENGTH_MAX: usize = 128;
pub const TAG_LENGTH_MAX: usize = 64;
pub const REPLICAS_MAX: u64 = 8;
pub const PG_COUNT_MAX: u64 = 32768;
/// At most this many replica slots per pool (`pg_count * replicas`), which keeps the pool's PG
/// table, one value, well under 1 MiB (about 8 bytes of JSON per slot plus 8 per PG).
pub const PG_SLOTS_MAX: u64 = 98304;
/// A new pool gets this many PGs per eligible OSD unless the request says otherwise, rounded
/// up to a power of two, between [`PG_COUNT_DEFAULT_MIN`] and [`PG_COUNT_DEFAULT_MAX`].
pub const PGS_PER_OSD_DEFAULT: u64 = 32;
pub const PG_COUNT_DEFAULT_MIN: u64 = 32;
pub const PG_COUNT_DEFAULT_MAX: u64 = 4096;
/// How often a transaction that lost a race on a counter is retried before giving up.
const CAS_ATTEMPTS_MAX: usize = 16;

/// Why an administrative request failed. [`AdminError::status`] decides what HTTP reports.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The request itself is wrong.
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    /// The request contradicts the current state (duplicate name, pool in use).
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Store(#[from] MetaError),
    /// A stored record does not decode.
    #[error(transparent)]
    Record(#[from] cluster::RecordError),
    /// A counter kept moving under our transaction.
    #[error("{0}")]
    Contended(String),
}

impl AdminError {
    /// The HTTP status of the error: 4xx for the caller's mistakes, 5xx only for the store.
    pub fn status(&self) -> u16 {
        match self {
            AdminError::Invalid(_) => 400,
            AdminError::NotFound(_) => 404,
            AdminError::Conflict(_) => 409,
            AdminError::Store(MetaError::Unavailable { .. }) | AdminError::Contended(_) => 503,
            AdminError::Store(_) | AdminError::Record(_) => 500,
        }
    }
}

fn invalid(message: impl Into<String>) -> AdminError {
    AdminError::Invalid(message.into())
}

/// `POST /pools`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreatePool {
    pub name: String,
    #[serde(default = "default_replicas")]
    pub replicas: u64,
    /// Defaults to `replicas - 1`, at least 1.
    #[serde(default)]
    pub min_size: Option<u64>,
    /// Defaults to 32 per eligible OSD, see [`PGS_PER_OSD_DEFAULT`].
    #[serde(default)]
    pub pg_count: Option<u64>,
    #[serde(default = "default_failure_domain")]
    pub failure_domain: String,
    #[serde(default)]
    pub tags: Vec<String>,
}

fn default_replicas() -> u64 {
    3
}

fn default_failure_domain() -> String {
    "host".into()
}

/// `POST /volumes`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateVolume {
    pub name: String,
    pub size_bytes: u64,
    #[serde(default)]
    pub pool: Option<String>,
}

/// `PATCH /volumes/NAME`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResizeVolume {
    pub size_bytes: u64,
}

/// Checks a pool or volume name: `[A-Za-z0-9._-]`, 1 to `length_max` characters, not `.` or `..`.
pub fn check_name(what: &str, name: &str, length_max: usize) -> Result<(), AdminError> {
    if name.is_empty() || name.len() > length_max {
        return Err(invalid(format!("{what} name {name:?} must be 1 to {length_max} characters long")));
    }
    if let Some(bad) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(invalid(format!(
            "{what} name {name:?} contains {bad:?}; use only letters, digits, '.', '_' and '-'"
        )));
    }
    if name == "." || name == ".." {
        return Err(invalid(format!("{what} name {name:?} is reserved")));
    }
    Ok(())
}

/// Creates `/basalt/config/cluster` unless it exists, and returns the stored record.
pub async fn ensure_cluster_record(store: &dyn MetaStore) -> Result<ClusterRecord, AdminError> {
    let record = ClusterRecord {
        version: FORMAT_VERSION,
        cluster_id: random_hex_id(),
        object_size_bytes: OBJECT_SIZE_DEFAULT_BYTES,
    };
    let response = store
        .txn(Txn {
            compares: vec![Compare::absent(keys::CLUSTER)],
            success: vec![TxnOp::put(keys::CLUSTER, encode(&record), None)],
            failure: vec![TxnOp::get(keys::CLUSTER)],
        })
        .await?;
    if response.succeeded {
        tracing::info!(cluster_id = %record.cluster_id, "created the cluster record");
        return Ok(record);
    }
    match response.results.as_slice() {
        [TxnOpResult::Get(Some(kv))] => Ok(decode(keys::CLUSTER, &kv.value)?),
        other => Err(MetaError::other(keys::CLUSTER, format!("unexpected transaction results {other:?}")).into()),
    }
}

pub async fn cluster_record(store: &dyn MetaStore) -> Result<ClusterRecord, AdminError> {
    let kv = store
        .get(keys::CLUSTER)
        .await?
        .ok_or_else(|| MetaError::other(keys::CLUSTER, "the cluster record is missing"))?;
    Ok(decode(keys::CLUSTER, &kv.value)?)
}

/// 128 random bits as hex, from the kernel.
fn random_hex_id() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut file| file.read_exact(&mut bytes));
    if read.is_err() {
        // No /dev/urandom: the id needs to be unique, not secret.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        bytes = (now ^ (u128::from(std::process::id()) << 64)).to_le_bytes();
    }
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

pub(crate) fn counter_of(key: &str, kv: Option<&KeyValue>) -> Result<(u64, i64), AdminError> {
    match kv {
        None => Ok((1, 0)),
        Some(kv) => {
            let counter: Counter = decode(key, &kv.value)?;
            Ok((counter.next, kv.mod_revision))
        }
    }
}

pub(crate) fn counter_value(next: u64) -> Vec<u8> {
    encode(&Counter { version: FORMAT_VERSION, next })
}

/// The distinct failure domains among registered OSDs the pool could use (nonzero weight,
/// every pool tag), whether they run or not.
pub fn eligible_domains(
    map: &ClusterMap,
    failure_domain: FailureDomainName,
    tags: &BTreeSet<String>,
) -> (usize, usize) {
    let eligible: Vec<_> =
        map.osds.values().filter(|osd| osd.weight_bytes() > 0 && tags.is_subset(&osd.tags)).collect();
    let domains: BTreeSet<String> = eligible
        .iter()
        .map(|osd| match failure_domain {
            FailureDomainName::Osd => osd.id.to_string(),
            FailureDomainName::Host => osd.host.clone(),
            FailureDomainName::Rack => osd.rack.clone(),
        })
        .collect();
    (eligible.len(), domains.len())
}

fn plural(count: usize, one: &str, many: &str) -> String {
    if count == 1 {
        format!("{count} {one}")
    } else {
        format!("{count} {many}")
    }
}

fn domain_words(failure_domain: FailureDomainName) -> (&'static str, &'static str) {
    match failure_domain {
        FailureDomainName::Osd => ("osd", "osds"),
        FailureDomainName::Host => ("host", "hosts"),
        FailureDomainName::Rack => ("rack", "racks"),
    }
}

/// Validates a pool request against the registered OSDs and returns the record to store (id 0
/// until the transaction assigns one).
pub fn validate_pool(request: &CreatePool, map: &ClusterMap) -> Result<PoolRecord, AdminError> {
    check_name("pool", &request.name, POOL_NAME_LENGTH_MAX)?;
    if !(1..=REPLICAS_MAX).contains(&request.replicas) {
        return Err(invalid(format!("replicas is {}; it must be 1 to {REPLICAS_MAX}", request.replicas)));
    }
    let min_size = request.min_size.unwrap_or((request.replicas - 1).max(1));
    if !(1..=request.replicas).contains(&min_size) {
        return Err(invalid(format!("min_size is {min_size}; it must be 1 to replicas ({})", request.replicas)));
    }
    let failure_domain = FailureDomainName::parse(&request.failure_domain)
        .ok_or_else(|| invalid(format!("failure_domain {:?} is not one of osd, host, rack", request.failure_domain)))?;
    let mut tags = BTreeSet::new();
    for tag in &request.tags {
        if tag.is_empty()
            || tag.len() > TAG_LENGTH_MAX
            || !tag.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(invalid(format!("tag {tag:?} must be 1 to {TAG_LENGTH_MAX} letters, digits, '.', '_' or '-'")));
        }
        tags.insert(tag.clone());
    }
    let (eligible_count, domain_count) = eligible_domains(map, failure_domain, &tags);
    if (domain_count as u64) < request.replicas {
        let (one, many) = domain_words(failure_domain);
        let tag_note = if tags.is_empty() {
            String::new()
        } else {
            format!(" with tags {}", tags.iter().cloned().collect::<Vec<_>>().join(","))
        };
        return Err(invalid(format!(
            "pool {:?} needs {} for {} replicas, but the registered osds{tag_note} span only {}",
            request.name,
            plural(request.replicas as usize, one, many),
            request.replicas,
            plural(domain_count, one, many),
        )));
    }
    let pg_count = match request.pg_count {
        Some(pg_count) if (1..=PG_COUNT_MAX).contains(&pg_count) => pg_count,
        Some(pg_count) => return Err(invalid(format!("pg_count is {pg_count}; it must be 1 to {PG_COUNT_MAX}"))),
        None => default_pg_count(eligible_count),
    };
    if pg_count * request.replicas > PG_SLOTS_MAX {
        return Err(invalid(format!(
            "pg_count {pg_count} with {} replicas makes {} PG slots; at most {PG_SLOTS_MAX} fit in one PG table",
            request.replicas,
            pg_count * request.replicas
        )));
    }
    Ok(PoolRecord {
        version: FORMAT_VERSION,
        id: 0,
        name: request.name.clone(),
        redundancy: Redundancy::Replicated(request.replicas as u8),
        min_size: min_size as u8,
        pg_count: pg_count as u32,
        failure_domain,
        osd_tags: tags,
        primary_affinity_tag: None,
    })
}

/// [`PGS_PER_OSD_DEFAULT`] PGs per eligible OSD, rounded up to a power of two and clamped.
pub fn default_pg_count(eligible_osd_count: usize) -> u64 {
    (PGS_PER_OSD_DEFAULT * eligible_osd_count as u64)
        .next_power_of_two()
        .clamp(PG_COUNT_DEFAULT_MIN, PG_COUNT_DEFAULT_MAX)
}

/// Creates a pool: one transaction that compares the pool-id counter (every pool creation moves
/// it, so an unchanged counter also proves no pool of the same name appeared since the listing),
/// puts the counter + 1 and puts the pool under the new id.
pub async fn create_pool(store: &dyn MetaStore, request: &CreatePool) -> Result<PoolRecord, AdminError> {
    for _ in 0..CAS_ATTEMPTS_MAX {
        // The counter first, then the listing: a pool created in between moves the counter.
        let counter_kv = store.get(keys::POOL_ID_COUNTER).await?;
        let (next, counter_revision) = counter_of(keys::POOL_ID_COUNTER, counter_kv.as_ref())?;
        let map = cluster_watch::load(store).await?;
        if map.pool_by_name(&request.name).is_some() {
            return Err(AdminError::Conflict(format!("pool {:?} already exists", request.name)));
        }
        let mut pool = validate_pool(request, &map)?;
        // Pool ids live in the top 8 bits of volume ids.
        if next > 255 {
            return Err(AdminError::Conflict("every pool id (1 to 255) has been used".into()));
        }
        pool.id = next as u32;
        let response = store
            .txn(Txn {
                compares: vec![
                    Compare::mod_revision(keys::POOL_ID_COUNTER, CompareOp::Equal, counter_revision),
                    Compare::absent(keys::pool(pool.id)),
                ],
                success: vec![
                    TxnOp::put(keys::POOL_ID_COUNTER, counter_value(next + 1), None),
                    TxnOp::put(keys::pool(pool.id), encode(&pool), None),
                ],
                failure: vec![],
            })
            .await?;
        if response.succeeded {
            tracing::info!(pool = %pool.name, id = pool.id, pg_count = pool.pg_count, "created a pool");
            return Ok(pool);
        }
    }
    Err(AdminError::Contended(format!(
        "pool {:?} was not created: the pool id counter kept changing; try again",
        request.name
    )))
}

/// A pool found by name, with the revision its record was last written at.
async fn find_pool(store: &dyn MetaStore, name: &str) -> Result<Option<(PoolRecord, i64)>, AdminError> {
    for kv in store.list(keys::POOLS_PREFIX).await? {
        if keys::id_after(keys::POOLS_PREFIX, &kv.key).is_none() {
            continue;
        }
        let pool: PoolRecord = decode(&kv.key, &kv.value)?;
        if pool.name == name {
            return Ok(Some((pool, kv.mod_revision)));
        }
    }
    Ok(None)
}

/// Deletes a pool, its PG table and its volume counter, then its PG history, refusing while
/// any volume (even one being deleted, or in the trash) is in it. The transaction compares the pool's volume
/// counter, read before the volume listing: every volume creation moves it, so no volume can
/// appear in the pool between the check and the delete.
pub async fn delete_pool(store: &dyn MetaStore, name: &str) -> Result<PoolRecord, AdminError> {
    for _ in 0..CAS_ATTEMPTS_MAX {
        let (pool, pool_revision) = find_pool(store, name)
            .await?
            .ok_or_else(|| AdminError::NotFound(format!("pool {name:?} does not exist")))?;
        let counter_key = keys::volume_id_counter(pool.id);
        let counter_revision = store.get(&counter_key).await?.map_or(0, |kv| kv.mod_revision);
        let mut users = Vec::new();
        for kv in store.list(keys::VOLUMES_PREFIX).await? {
            let volume: VolumeRecord = decode(&kv.key, &kv.value)?;
            if volume.pool == pool.id {
                users.push(volume.name);
            }
        }
        // A volume in the trash may come back (its restore moves the counter too).
        for kv in store.list(keys::TRASH_PREFIX).await? {
            let entry: cluster::TrashRecord = decode(&kv.key, &kv.value)?;
            if entry.volume.pool == pool.id {
                users.push(format!("{} (in the trash)", entry.volume.name));
            }
        }
        if !users.is_empty() {
            let shown = users.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
            let more = if users.len() > 5 { ", ..." } else { "" };
            return Err(AdminError::Conflict(format!(
                "pool {name:?} still holds {} ({shown}{more}); delete them first",
                plural(users.len(), "volume", "volumes"),
            )));
        }
        let pool_key = keys::pool(pool.id);
        let response = store
            .txn(Txn {
                compares: vec![
                    Compare::mod_revision(&counter_key, CompareOp::Equal, counter_revision),
                    Compare::mod_revision(&pool_key, CompareOp::Equal, pool_revision),
                ],
                success: vec![
                    TxnOp::delete(&pool_key),
                    TxnOp::delete(keys::pg_table(pool.id)),
                    TxnOp::delete(&counter_key),
                ],
                failure: vec![],
            })
            .await?;
        if response.succeeded {
            delete_pg_history(store, pool.id).await;
            tracing::info!(pool = %pool.name, id = pool.id, "deleted a pool");
            return Ok(pool);
        }
    }
    Err(AdminError::Contended(format!("pool {name:?} was not deleted: it kept changing; try again")))
}

/// Deletes the PG history of a deleted pool, in transactions of at most 64 keys (etcd allows
/// 128 operations per transaction). Pool ids are never reused, so leftovers after a failure
/// here are harmless; they are logged.
async fn delete_pg_history(store: &dyn MetaStore, pool: u32) {
    let prefix = format!("{}{pool}/", keys::PG_HISTORY_PREFIX);
    let result: Result<(), MetaError> = async {
        let kvs = store.list(&prefix).await?;
        for chunk in kvs.chunks(64) {
            let success = chunk.iter().map(|kv| TxnOp::delete(&kv.key)).collect();
            store.txn(Txn { compares: vec![], success, failure: vec![] }).await?;
        }
        Ok(())
    }
    .await;
    if let Err(error) = result {
        tracing::warn!(%error, pool, "the PG history of a deleted pool was not deleted");
    }
}

/// The pool a new volume goes to: the named one, else `default` if it exists, else the only pool.
fn choose_pool<'a>(map: &'a ClusterMap, requested: Option<&str>) -> Result<&'a PoolRecord, AdminError> {
    if let Some(name) = requested {
        return map.pool_by_name(name).ok_or_else(|| AdminError::NotFound(format!("pool {name:?} does not exist")));
    }
    if let Some(pool) = map.pool_by_name("default") {
        return Ok(pool);
    }
    let mut pools = map.pools.values();
    match (pools.next(), pools.next()) {
        (Some(pool), None) => Ok(pool),
        (None, _) => Err(invalid("there is no pool yet; create one first")),
        (Some(_), Some(_)) => {
            Err(invalid("there are several pools and none is named \"default\"; name one with \"pool\""))
        }
    }
}

pub fn check_volume_size(size_bytes: u64) -> Result<(), AdminError> {
    if size_bytes == 0 || size_bytes % VOLUME_SIZE_ALIGNMENT_BYTES != 0 {
        return Err(invalid(format!(
            "volume size {size_bytes} bytes must be greater than 0 and a multiple of {VOLUME_SIZE_ALIGNMENT_BYTES} bytes"
        )));
    }
    Ok(())
}

/// Creates a volume: one transaction that compares the pool's volume counter, the name's
/// absence and the pool record's creation, then puts the counter + 1 and the volume.
pub async fn create_volume(store: &dyn MetaStore, request: &CreateVolume) -> Result<VolumeRecord, AdminError> {
    check_name("volume", &request.name, VOLUME_NAME_LENGTH_MAX)?;
    check_volume_size(request.size_bytes)?;
    let cluster = cluster_record(store).await?;
    let volume_key = keys::volume(&request.name);
    for _ in 0..CAS_ATTEMPTS_MAX {
        let map = cluster_watch::load(store).await?;
        if map.volumes.contains_key(&request.name) {
            return Err(AdminError::Conflict(format!("volume {:?} already exists", request.name)));
        }
        let pool = choose_pool(&map, request.pool.as_deref())?;
        let pool_key = keys::pool(pool.id);
        let counter_key = keys::volume_id_counter(pool.id);
        let response = store
            .txn(Txn {
                compares: vec![],
                success: vec![TxnOp::get(&pool_key), TxnOp::get(&counter_key)],
                failure: vec![],
            })
            .await?;
        let (pool_kv, counter_kv) = match response.results.as_slice() {
            [TxnOpResult::Get(pool_kv), TxnOpResult::Get(counter_kv)] => (pool_kv.clone(), counter_kv.clone()),
            other => {
                return Err(MetaError::other(&pool_key, format!("unexpected transaction results {other:?}")).into())
            }
        };
        let Some(pool_kv) = pool_kv else {
            continue; // Deleted since the listing: choose again.
        };
        // A new volume opens a family: its head is the family's layer 0 (ADR 0026).
        let (family, counter_revision) = counter_of(&counter_key, counter_kv.as_ref())?;
        if family >= inode::FAMILIES_MAX {
            return Err(AdminError::Conflict(format!("pool {:?} has used every volume id", pool.name)));
        }
        let volume = VolumeRecord {
            version: FORMAT_VERSION,
            id: inode::layered(pool.id, family, 0),
            name: request.name.clone(),
            pool: pool.id,
            size_bytes: request.size_bytes,
            object_size_bytes: cluster.object_size_bytes,
            parent: None,
            sealing: false,
            flattening: false,
            flags: Vec::new(),
        };
        let response = store
            .txn(Txn {
                compares: vec![
                    Compare::mod_revision(&counter_key, CompareOp::Equal, counter_revision),
                    Compare::absent(&volume_key),
                    Compare::create_revision(&pool_key, CompareOp::Equal, pool_kv.create_revision),
                ],
                success: vec![
                    TxnOp::put(&counter_key, counter_value(family + 1), None),
                    TxnOp::put(&volume_key, encode(&volume), None),
                ],
                failure: vec![],
            })
            .await?;
        if response.succeeded {
            tracing::info!(volume = %volume.name, id = volume.id, pool = %pool.name, "created a volume");
            return Ok(volume);
        }
    }
    Err(AdminError::Contended(format!("volume {:?} was not created: its pool kept changing; try again", request.name)))
}

/// A volume with the revision its record was last written at.
pub async fn get_volume(store: &dyn MetaStore, name: &str) -> Result<(VolumeRecord, i64), AdminError> {
    check_name("volume", name, VOLUME_NAME_LENGTH_MAX)?;
    let key = keys::volume(name);
    let kv = store.get(&key).await?.ok_or_else(|| AdminError::NotFound(format!("volume {name:?} does not exist")))?;
    Ok((decode(&key, &kv.value)?, kv.mod_revision))
}

/// Rewrites a volume record with `change`, compared on its last write.
pub(crate) async fn update_volume(
    store: &dyn MetaStore,
    name: &str,
    change: impl Fn(&mut VolumeRecord) -> Result<bool, AdminError>,
) -> Result<VolumeRecord, AdminError> {
    for _ in 0..CAS_ATTEMPTS_MAX {
        let (mut volume, revision) = get_volume(store, name).await?;
        if !change(&mut volume)? {
            return Ok(volume);
        }
        let key = keys::volume(name);
        let response = store
            .txn(Txn {
                compares: vec![Compare::mod_revision(&key, CompareOp::Equal, revision)],
                success: vec![TxnOp::put(&key, encode(&volume), None)],
                failure: vec![],
            })
            .await?;
        if response.succeeded {
            return Ok(volume);
        }
    }
    Err(AdminError::Contended(format!("volume {name:?} kept changing; try again")))
}

/// Grows a volume. Shrinking is refused: it would cut data off under a running client.
pub async fn resize_volume(store: &dyn MetaStore, name: &str, size_bytes: u64) -> Result<VolumeRecord, AdminError> {
    check_volume_size(size_bytes)?;
    update_volume(store, name, |volume| {
        if volume.is_deleting() {
            return Err(AdminError::Conflict(format!("volume {name:?} is being deleted")));
        }
        if size_bytes < volume.size_bytes {
            return Err(invalid(format!(
                "volume {name:?} is {} bytes; shrinking to {size_bytes} bytes is not supported, only growing",
                volume.size_bytes
            )));
        }
        let changed = size_bytes != volume.size_bytes;
        volume.size_bytes = size_bytes;
        Ok(changed)
    })
    .await
}

/// Flags a volume `deleting`, and its snapshots with it; the leader removes their objects and
/// then the records. Refused while the volume has snapshots its user has not removed, or a
/// snapshot another volume reads through (clones must go first).
pub async fn mark_volume_deleting(store: &dyn MetaStore, name: &str) -> Result<VolumeRecord, AdminError> {
    for _ in 0..CAS_ATTEMPTS_MAX {
        let (mut volume, revision) = get_volume(store, name).await?;
        if volume.is_deleting() {
            return Ok(volume);
        }
        let map = cluster_watch::load(store).await?;
        let snapshots: Vec<&SnapshotRecord> = map.snapshots.values().filter(|s| s.volume == name).collect();
        let visible: Vec<String> = snapshots.iter().filter(|s| !s.hidden).map(|s| s.full_name()).collect();
        if !visible.is_empty() {
            return Err(AdminError::Conflict(format!(
                "volume {name:?} has {} ({}); remove them first with `basalt snapshot rm`",
                plural(visible.len(), "snapshot", "snapshots"),
                visible.join(", ")
            )));
        }
        let mut compares = vec![Compare::mod_revision(keys::volume(name), CompareOp::Equal, revision)];
        let mut success = Vec::new();
        for snapshot in snapshots {
            let key = keys::snapshot(&snapshot.full_name());
            let clones = crate::snapshots::readers_of(&map, snapshot.inode)
                .into_iter()
                .filter(|reader| reader != name && !reader.starts_with(&format!("{name}@")))
                .collect::<Vec<_>>();
            if !clones.is_empty() {
                return Err(AdminError::Conflict(format!(
                    "volume {name:?} has clones ({}) that read through its snapshots; remove them first",
                    clones.join(", ")
                )));
            }
            let Some(kv) = store.get(&key).await? else { continue };
            let mut record: SnapshotRecord = decode(&key, &kv.value)?;
            record.deleting = true;
            compares.push(Compare::mod_revision(&key, CompareOp::Equal, kv.mod_revision));
            success.push(TxnOp::put(&key, encode(&record), None));
        }
        volume.flags.push(VolumeRecord::FLAG_DELETING.to_string());
        success.push(TxnOp::put(keys::volume(name), encode(&volume), None));
        let response = store.txn(Txn { compares, success, failure: vec![] }).await?;
        if response.succeeded {
            return Ok(volume);
        }
    }
    Err(AdminError::Contended(format!("volume {name:?} kept changing; try again")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_name_error(name: &str, expect: Option<&str>) {
        let result = check_name("pool", name, POOL_NAME_LENGTH_MAX);
        match (result, expect) {
            (Ok(()), None) => {}
            (Err(error), Some(fragment)) => assert!(error.to_string().contains(fragment), "{name:?}: {error}"),
            (result, expect) => panic!("{name:?}: got {result:?}, expected {expect:?}"),
        }
    }

    #[test]
    fn names_are_checked() {
        check_name_error("ssd-1.a_b", None);
        check_name_error("", Some("1 to 64 characters"));
        check_name_error(&"x".repeat(65), Some("1 to 64 characters"));
        check_name_error("a/b", Some("contains '/'"));
        check_name_error("..", Some("reserved"));
    }

    #[test]
    fn default_pg_count_is_a_power_of_two_per_osd() {
        assert_eq!(default_pg_count(0), 32);
        assert_eq!(default_pg_count(1), 32);
        assert_eq!(default_pg_count(3), 128);
        assert_eq!(default_pg_count(1000), 4096);
    }
}
