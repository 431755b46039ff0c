//! Leader election and the leader's work: publishing PG tables and deleting volumes.
//!
//! Every mon is a candidate. A term starts with a fresh lease, kept alive every
//! `keep_alive_interval`; the candidate campaigns on `/basalt/mon/leader` with it
//! (`meta::campaign`). The winner publishes PG tables and deletes volumes until the term ends:
//!
//! | event                                        | what the mon does                                 |
//! |----------------------------------------------|---------------------------------------------------|
//! | no keep-alive sent in the last TTL - interval succeeded | stops leading, revokes the lease, retries |
//! | a keep-alive says the lease expired          | same as above                                     |
//! | the leader key is gone or newer              | stops leading, revokes the lease, campaigns again |
//! | a fenced write fails on the leader key       | same as above                                     |
//! | shutdown                                     | stops leading, revokes the lease (fast handover)  |
//!
//! Safety does not rest on the timing: every leader write compares the leader key's create
//! revision with the term's token, so writes of a deposed leader fail. Stepping down at the
//! lease's end as its holder can see it (failed renewals are retried until then) rides through
//! an etcd election or a dead member, and keeps a cut-off leader from trying for long.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use cluster::records::{decode, encode, FORMAT_VERSION};
use cluster::{keys, ClusterMap, LeaderRecord, OsdRecord, PgHistoryRecord, PgTableRecord, PoolRecord, VolumeRecord};
use cluster_watch::MapWatcher;
use meta::{Compare, CompareOp, Leadership, LeaseId, MetaError, MetaStore, Txn, TxnOp, TxnOpResult};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::mark_down::{self, Marks};
use crate::pg_tables::{backfilling, next_table, osd_infos, up_osds, TableChange};
use crate::reaper::{reap_volume, VolumeReaper};
use crate::{Role, Shared};

/// How a term ended.
#[derive(Debug)]
enum TermEnd {
    Stopped,
    Deposed,
    KeepAliveFailed(MetaError),
}

/// Campaigns, leads and campaigns again until `stop` turns true.
pub(crate) async fn run_candidate(
    shared: Arc<Shared>,
    watcher: Arc<MapWatcher>,
    reaper: Option<Arc<dyn VolumeReaper>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(100);
    // The last election error logged, so an unreachable store is reported once, not every retry.
    let mut last_error = String::new();
    loop {
        let end = term(&shared, &watcher, reaper.as_deref(), &mut stop).await;
        if end.is_ok() {
            // The term got a lease, so the store answered: start over quickly.
            last_error.clear();
            backoff = Duration::from_millis(100);
        }
        match end {
            Ok(TermEnd::Stopped) => return,
            Ok(TermEnd::Deposed) => tracing::warn!(mon = %shared.config.mon_id, "no longer the leader"),
            Ok(TermEnd::KeepAliveFailed(error)) => {
                tracing::warn!(mon = %shared.config.mon_id, %error, "lease keep-alive failed; stepping down")
            }
            Err(error) => {
                let text = error.to_string();
                if text != last_error {
                    tracing::warn!(mon = %shared.config.mon_id, %error, "election failed; retrying");
                    last_error = text;
                }
            }
        }
        if *stop.borrow() {
            return;
        }
        tokio::select! {
            biased;
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
        // Capped at a renewal interval, so a store back from an outage has a leader soon.
        backoff = (backoff * 2).min(shared.config.keep_alive_interval);
    }
}

async fn term(
    shared: &Shared,
    watcher: &MapWatcher,
    reaper: Option<&dyn VolumeReaper>,
    stop: &mut watch::Receiver<bool>,
) -> Result<TermEnd, MetaError> {
    let store = shared.store.as_ref();
    let asked = Instant::now();
    let lease = store.lease_grant(shared.config.lease_ttl.as_secs().max(1)).await?;
    let renewal = Renewal { ttl: shared.config.lease_ttl, interval: shared.config.keep_alive_interval };
    let end = tokio::select! {
        biased;
        error = keep_alive(store, lease, asked, renewal) => Ok(TermEnd::KeepAliveFailed(error)),
        end = campaign_and_lead(shared, watcher, reaper, lease) => end,
        _ = stop.wait_for(|stopped| *stopped) => Ok(TermEnd::Stopped),
    };
    shared.role.send_replace(Role::Candidate);
    // Revoking deletes the leader key at once, so another mon need not wait for the TTL.
    let revoked = tokio::time::timeout(shared.config.keep_alive_interval, store.lease_revoke(lease)).await;
    if let Ok(Err(error)) = revoked {
        tracing::debug!(%error, "revoking the mon lease failed");
    }
    end
}

/// How a term's lease is kept alive.
#[derive(Debug, Clone, Copy)]
struct Renewal {
    ttl: Duration,
    interval: Duration,
}

/// Renews `lease` (granted by a request sent at `asked`) every `interval`, and returns once the
/// lease may have run out: when the store says so, or when no renewal sent in the last TTL less
/// one interval succeeded (the store counts the TTL from when it received a renewal, which is
/// later than its sending). A failed or slow renewal is retried every tenth of the TTL, each
/// attempt bounded by the interval, so an etcd election or a dead member costs no term.
async fn keep_alive(store: &dyn MetaStore, lease: LeaseId, asked: Instant, renewal: Renewal) -> MetaError {
    let Renewal { ttl, interval } = renewal;
    assert!(interval < ttl, "the mon renews its lease ({interval:?}) within its TTL ({ttl:?})");
    let mut valid_until = asked + (ttl - interval);
    let mut next = asked + interval;
    let mut last_error = None;
    loop {
        tokio::time::sleep_until(next).await;
        let sent = Instant::now();
        if sent >= valid_until {
            return last_error.unwrap_or_else(|| {
                MetaError::unavailable(store.endpoint(), "the mon's lease was not renewed within its TTL")
            });
        }
        match tokio::time::timeout(interval.min(valid_until - sent), store.lease_keep_alive(lease)).await {
            Ok(Ok(_)) => {
                valid_until = sent + (ttl - interval);
                next = sent + interval;
                last_error = None;
                continue;
            }
            Ok(Err(error @ MetaError::LeaseExpired { .. })) => return error,
            Ok(Err(error)) => last_error = Some(error),
            Err(_) => {
                last_error = Some(MetaError::unavailable(
                    store.endpoint(),
                    format!("lease keep-alives took longer than {} ms", interval.as_millis()),
                ))
            }
        }
        next = Instant::now() + ttl / 10;
    }
}

async fn campaign_and_lead(
    shared: &Shared,
    watcher: &MapWatcher,
    reaper: Option<&dyn VolumeReaper>,
    lease: LeaseId,
) -> Result<TermEnd, MetaError> {
    let store = shared.store.as_ref();
    let candidate = LeaderRecord {
        version: FORMAT_VERSION,
        mon: shared.config.mon_id.clone(),
        address: shared.config.api_address.clone(),
    };
    let candidate = String::from_utf8(encode(&candidate)).expect("JSON is UTF-8");
    let leadership = meta::campaign(store, keys::MON_LEADER, &candidate, lease).await?;
    tracing::info!(mon = %shared.config.mon_id, token = leadership.revision, "became the leader");
    shared.role.send_replace(Role::Leader);
    tokio::select! {
        biased;
        lost = leadership.lost(store) => lost.map(|()| TermEnd::Deposed),
        end = publish_loop(shared, watcher, &leadership) => end,
        end = reap_loop(shared, watcher, reaper, &leadership) => end,
        end = down_out_loop(shared, watcher, &leadership) => end,
        end = mark_down_loop(shared, watcher, &leadership) => end,
        end = seal_loop(shared, watcher) => end,
        end = flatten_loop(shared, watcher) => end,
    }
}

/// Runs the flattens the map shows, one volume at a time (ADR 0035); one that fails is tried
/// again 5 s later, from the start (its copy-ups already done cost a lookup each).
async fn flatten_loop(shared: &Shared, watcher: &MapWatcher) -> Result<TermEnd, MetaError> {
    let store = shared.store.as_ref();
    let mut receiver = watcher.subscribe();
    loop {
        let map = receiver.borrow_and_update().clone();
        let mut failed = false;
        for volume in map.volumes.values().filter(|volume| volume.flattening && !volume.is_deleting()) {
            // The map may lag behind the flatten this loop just finished: the record decides.
            let record = match crate::admin::get_volume(store, &volume.name).await {
                Ok((record, _)) => record,
                Err(crate::admin::AdminError::NotFound(_)) => continue,
                Err(error) => {
                    tracing::warn!(volume = %volume.name, %error, "cannot read a volume to flatten; trying again in 5 s");
                    failed = true;
                    continue;
                }
            };
            if !record.flattening || record.is_deleting() {
                continue;
            }
            match crate::flatten::run(store, &watcher.subscribe(), &shared.flattens, &record).await {
                Ok(()) => {}
                Err(error @ crate::flatten::FlattenError::Abandoned(_)) => {
                    tracing::info!(volume = %volume.name, %error, "flatten stopped");
                }
                Err(error) => {
                    tracing::warn!(volume = %volume.name, %error, "flatten stopped; trying again in 5 s");
                    failed = true;
                }
            }
        }
        tokio::select! {
            biased;
            changed = receiver.changed() => {
                if changed.is_err() {
                    return Err(MetaError::unavailable(store.endpoint(), "the cluster map watcher stopped"));
                }
            }
            _ = tokio::time::sleep(Duration::from_secs(5)), if failed => {}
        }
    }
}

/// How long a head may stay sealing before the leader seals it (the API call that took the
/// snapshot seals it at once, unless its mon stopped).
const SEAL_LEFTOVER_AFTER: Duration = Duration::from_secs(2);

/// Seals the heads a snapshot left sealing (ADR 0026): a mon that stopped between the freeze
/// and the seal leaves writes to the volume refused until someone seals it.
async fn seal_loop(shared: &Shared, watcher: &MapWatcher) -> Result<TermEnd, MetaError> {
    let store = shared.store.as_ref();
    let mut receiver = watcher.subscribe();
    // A head sealing when a term starts was left by the mon before (or by an API call still
    // running, which sealing again does not harm): sealed at once.
    let mut next_wait = Duration::ZERO;
    loop {
        let map = receiver.borrow_and_update().clone();
        let sealing = map.volumes.values().any(|volume| volume.sealing);
        let wait = std::mem::replace(&mut next_wait, SEAL_LEFTOVER_AFTER);
        if sealing {
            tokio::time::sleep(wait).await;
            let map = cluster_watch::load(store).await?;
            crate::seal::seal_leftovers(store, &map).await;
            continue;
        }
        if receiver.changed().await.is_err() {
            return Err(MetaError::unavailable(store.endpoint(), "the cluster map watcher stopped"));
        }
    }
}

/// How often the leader looks at its peers' reports when the map does not change.
const MARK_DOWN_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// Marks OSDs down on their peers' reports and clears the marks (`mark_down.rs`). A new leader
/// counts each report's age from when it first saw it: a term change only delays a mark.
async fn mark_down_loop(shared: &Shared, watcher: &MapWatcher, leadership: &Leadership) -> Result<TermEnd, MetaError> {
    let store = shared.store.as_ref();
    let mut receiver = watcher.subscribe();
    let mut first_seen = BTreeMap::new();
    let mut marked_since = BTreeMap::new();
    let mut capped_logged = Vec::new();
    loop {
        let map = receiver.borrow_and_update().clone();
        let now = Instant::now();
        let now_unix_ms = stdx::wall_clock::unix_ms();
        mark_down::observe_marked(&map, &mut marked_since, now);
        let edges = mark_down::edges(&map);
        first_seen.retain(|edge, _| edges.contains(edge));
        for edge in &edges {
            first_seen.entry(*edge).or_insert(now);
        }
        let choice = mark_down::choose(&map, &edges, &first_seen, now);
        if choice.capped != capped_logged {
            if !choice.capped.is_empty() {
                tracing::error!(edges = ?choice.capped, "peers report links down between OSDs, but marking more OSDs down would pass the bound of a third of them");
            }
            capped_logged = choice.capped;
        }
        for osd in choice.mark {
            let Some(live) = map.live.get(&osd) else { continue };
            let accusers: Vec<u32> =
                edges.iter().filter(|(_, target)| *target == osd).map(|(reporter, _)| *reporter).collect();
            let accused: Vec<u32> =
                edges.iter().filter(|(reporter, _)| *reporter == osd).map(|(_, target)| *target).collect();
            let written = crate::osd_admin::update_osd(store, osd, Some(leadership.fence()), |record| {
                if !record.down_mark.as_ref().is_some_and(|mark| mark.is_active()) {
                    record.down_mark = Some(mark_down::new_mark(record.down_mark.as_ref(), live, now_unix_ms));
                }
                Ok(())
            })
            .await;
            match written {
                Ok(Some(record)) => {
                    let hold_s = record.down_mark.map_or(0, |mark| mark.hold_s);
                    tracing::warn!(
                        osd,
                        incarnation = live.incarnation,
                        ?accusers,
                        ?accused,
                        hold_s,
                        "marked down: its peers cannot reach it"
                    );
                    revoke(store, osd, live.incarnation).await;
                }
                Ok(None) => return Ok(TermEnd::Deposed),
                Err(error) => tracing::warn!(osd, %error, "cannot mark the osd down"),
            }
        }
        for (osd, incarnation) in mark_down::unrevoked(&map) {
            revoke(store, osd, incarnation).await;
        }
        for osd in mark_down::to_clear(&map, &edges, &marked_since, now) {
            let written = crate::osd_admin::update_osd(store, osd, Some(leadership.fence()), |record| {
                if let Some(mark) = record.down_mark.as_mut().filter(|mark| mark.is_active()) {
                    mark.cleared_unix_ms = Some(now_unix_ms);
                }
                Ok(())
            })
            .await;
            match written {
                Ok(Some(_)) => tracing::warn!(osd, "mark down cleared: no peer reports it, and it reports no peer"),
                Ok(None) => return Ok(TermEnd::Deposed),
                Err(error) => tracing::warn!(osd, %error, "cannot clear the osd's mark down"),
            }
        }
        tokio::select! {
            biased;
            changed = receiver.changed() => {
                if changed.is_err() {
                    return Err(MetaError::unavailable(store.endpoint(), "the cluster map watcher stopped"));
                }
            }
            _ = tokio::time::sleep(MARK_DOWN_CHECK_INTERVAL) => {}
        }
    }
}

/// Revokes the lease of a marked OSD's incarnation; one that ran out already is as good.
async fn revoke(store: &dyn MetaStore, osd: u32, incarnation: i64) {
    match store.lease_revoke(LeaseId(incarnation)).await {
        Ok(()) | Err(MetaError::LeaseExpired { .. }) => {}
        Err(error) => tracing::warn!(osd, incarnation, %error, "cannot revoke a marked osd's lease; retrying"),
    }
}

/// How often the leader looks at the OSDs that are down.
const DOWN_OUT_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Marks out the OSDs down past `down_out_interval` and in again the ones the mon marked out
/// that are back (`down_out.rs`). A new leader counts from when it first saw an OSD down, never
/// from before: a term change only delays marking out.
async fn down_out_loop(shared: &Shared, watcher: &MapWatcher, leadership: &Leadership) -> Result<TermEnd, MetaError> {
    let store = shared.store.as_ref();
    let mut receiver = watcher.subscribe();
    loop {
        let map = receiver.borrow_and_update().clone();
        let down = shared.observe_down(&map);
        for (osd, verdict) in crate::down_out::decide(&map, &down, stdx::wall_clock::now()) {
            let (out, what) = match verdict {
                crate::down_out::Verdict::MarkOut => (true, "marked out an osd down longer than down_out_interval"),
                crate::down_out::Verdict::MarkIn => (false, "marked in an osd the mon had marked out, up again"),
                _ => continue,
            };
            let written = crate::osd_admin::update_osd(store, osd, Some(leadership.fence()), |record| {
                record.out = out;
                record.auto_out = out;
                Ok(())
            })
            .await;
            match written {
                Ok(Some(_)) => tracing::warn!(osd, down_out_interval_s = map.settings.down_out_interval_s, "{what}"),
                Ok(None) => return Ok(TermEnd::Deposed),
                Err(error) => tracing::warn!(osd, %error, "cannot change the osd's out flag"),
            }
        }
        tokio::select! {
            biased;
            changed = receiver.changed() => {
                if changed.is_err() {
                    return Err(MetaError::unavailable(store.endpoint(), "the cluster map watcher stopped"));
                }
            }
            _ = tokio::time::sleep(DOWN_OUT_CHECK_INTERVAL) => {}
        }
    }
}

/// What a pool's table depends on besides the table itself: recomputing is skipped while these
/// stay the same.
#[derive(PartialEq)]
struct Inputs {
    pools: BTreeMap<u32, PoolRecord>,
    pg_tables: BTreeMap<u32, PgTableRecord>,
    osds: BTreeMap<u32, OsdRecord>,
    live: BTreeSet<u32>,
    in_grace: bool,
    marks: Marks,
}

impl Inputs {
    fn of(map: &ClusterMap, in_grace: bool, marks: &Marks) -> Inputs {
        Inputs {
            pools: map.pools.clone(),
            pg_tables: map.pg_tables.clone(),
            osds: map.osds.clone(),
            live: map.live.keys().copied().collect(),
            in_grace,
            marks: Marks { next_change: None, ..marks.clone() },
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum PublishError {
    #[error("the leader key belongs to another term")]
    Deposed,
    #[error("the table of pool {pool} changed while it was computed")]
    Raced { pool: u32 },
    #[error(transparent)]
    Store(#[from] MetaError),
    #[error(transparent)]
    Record(#[from] cluster::RecordError),
}

/// How often the leader looks for PGs that completed a backfill.
const BACKFILL_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Publishes every pool's table whenever the OSD map or the pools change, and while PGs
/// backfill, whenever one of them has completed.
async fn publish_loop(shared: &Shared, watcher: &MapWatcher, leadership: &Leadership) -> Result<TermEnd, MetaError> {
    let mut receiver = watcher.subscribe();
    let mut last_inputs: Option<Inputs> = None;
    let mut retry_at: Option<Instant> = None;
    let mut reported: BTreeMap<u32, String> = BTreeMap::new();
    let mut absent_since = BTreeMap::new();
    let grace_end = shared.started + shared.config.liveness_grace;
    loop {
        let map = receiver.borrow_and_update().clone();
        let now = Instant::now();
        let in_grace = now < grace_end;
        mark_down::observe_absent(&map, &mut absent_since, now);
        let marks = mark_down::marks(&map, &absent_since, now);
        let inputs = Inputs::of(&map, in_grace, &marks);
        let due = retry_at.is_some_and(|at| now >= at);
        if due || last_inputs.as_ref() != Some(&inputs) {
            retry_at = None;
            if map.pg_tables.values().any(|table| backfilling(table).next().is_some()) {
                retry_at = Some(now + BACKFILL_CHECK_INTERVAL);
            }
            match publish_all(shared, leadership, &map, in_grace, &marks, &mut reported).await {
                Ok(()) => last_inputs = Some(inputs),
                Err(PublishError::Deposed) => return Ok(TermEnd::Deposed),
                Err(error @ PublishError::Raced { .. }) => {
                    tracing::debug!(%error, "publishing again");
                    retry_at = Some(now + Duration::from_millis(50));
                }
                Err(error) => {
                    tracing::warn!(%error, "publishing PG tables failed; retrying in 1 s");
                    retry_at = Some(now + Duration::from_secs(1));
                }
            }
        }
        let wake_at = [in_grace.then_some(grace_end), retry_at, marks.next_change].into_iter().flatten().min();
        tokio::select! {
            biased;
            changed = receiver.changed() => {
                if changed.is_err() {
                    return Err(MetaError::unavailable(shared.store.endpoint(), "the cluster map watcher stopped"));
                }
            }
            _ = sleep_until(wake_at) => {}
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn publish_all(
    shared: &Shared,
    leadership: &Leadership,
    map: &ClusterMap,
    in_grace: bool,
    marks: &Marks,
    reported: &mut BTreeMap<u32, String>,
) -> Result<(), PublishError> {
    let mut first_error = None;
    for &pool in map.pools.keys() {
        match publish_pool(shared.store.as_ref(), leadership, map, pool, in_grace, marks, reported).await {
            Ok(()) => {}
            Err(PublishError::Deposed) => return Err(PublishError::Deposed),
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    reported.retain(|pool, _| map.pools.contains_key(pool));
    first_error.map_or(Ok(()), Err)
}

/// Reads the pool and its stored table together, computes the next table and writes it with a
/// transaction fenced by the leader key and by both records' last-write revisions.
async fn publish_pool(
    store: &dyn MetaStore,
    leadership: &Leadership,
    map: &ClusterMap,
    pool_id: u32,
    in_grace: bool,
    marks: &Marks,
    reported: &mut BTreeMap<u32, String>,
) -> Result<(), PublishError> {
    let pool_key = keys::pool(pool_id);
    let table_key = keys::pg_table(pool_id);
    let response = store
        .txn(Txn { compares: vec![], success: vec![TxnOp::get(&pool_key), TxnOp::get(&table_key)], failure: vec![] })
        .await?;
    let (pool_kv, table_kv) = match response.results.as_slice() {
        [TxnOpResult::Get(pool_kv), TxnOpResult::Get(table_kv)] => (pool_kv.clone(), table_kv.clone()),
        other => return Err(MetaError::other(&pool_key, format!("unexpected transaction results {other:?}")).into()),
    };
    let Some(pool_kv) = pool_kv else {
        return Ok(()); // Deleted since the map was read.
    };
    let pool: PoolRecord = decode(&pool_key, &pool_kv.value)?;
    // A table that does not decode is not replaced: starting over at epoch 1 would let
    // operations of older epochs through.
    let previous: Option<PgTableRecord> = table_kv.as_ref().map(|kv| decode(&table_key, &kv.value)).transpose()?;
    let up = up_osds(map, previous.as_ref(), in_grace, marks);
    let complete = match &previous {
        Some(previous) => complete_pgs(store, previous).await?,
        None => BTreeSet::new(),
    };
    let table = match next_table(&pool, &osd_infos(map), &up, previous.as_ref(), &complete) {
        TableChange::Unchanged => {
            reported.remove(&pool_id);
            return Ok(());
        }
        TableChange::NoEligibleOsd(reason) => {
            if reported.get(&pool_id) != Some(&reason) {
                tracing::warn!(pool = %pool.name, %reason, "no PG table published");
                reported.insert(pool_id, reason);
            }
            return Ok(());
        }
        TableChange::Publish(table) => table,
    };
    reported.remove(&pool_id);
    let response = store
        .txn(Txn {
            compares: vec![
                leadership.fence(),
                Compare::mod_revision(&pool_key, CompareOp::Equal, pool_kv.mod_revision),
                Compare::mod_revision(&table_key, CompareOp::Equal, table_kv.as_ref().map_or(0, |kv| kv.mod_revision)),
            ],
            success: vec![TxnOp::put(&table_key, encode(&table), None)],
            failure: vec![TxnOp::get(keys::MON_LEADER)],
        })
        .await?;
    if response.succeeded {
        let changed = match &previous {
            Some(previous) => {
                table.pgs.iter().zip(&previous.pgs).filter(|(new, old)| new != old).count()
                    + table.pgs.len().saturating_sub(previous.pgs.len())
            }
            None => table.pgs.len(),
        };
        tracing::info!(pool = %pool.name, table_epoch = table.table_epoch, changed_pgs = changed, "published a PG table");
        return Ok(());
    }
    match response.results.as_slice() {
        [TxnOpResult::Get(Some(leader))] if leadership.holds(leader) => Err(PublishError::Raced { pool: pool_id }),
        _ => Err(PublishError::Deposed),
    }
}

/// The backfilling PGs of `table` that were complete at their stored epoch: their history says
/// clean at that epoch with exactly its acting set.
async fn complete_pgs(store: &dyn MetaStore, table: &PgTableRecord) -> Result<BTreeSet<usize>, PublishError> {
    let pgs: BTreeSet<usize> = backfilling(table).collect();
    if pgs.is_empty() {
        return Ok(pgs);
    }
    let prefix = format!("{}{}/", keys::PG_HISTORY_PREFIX, table.pool);
    let mut complete = BTreeSet::new();
    for kv in store.list(&prefix).await? {
        let Some(pg) = keys::id_after(&prefix, &kv.key).map(|pg| pg as usize).filter(|pg| pgs.contains(pg)) else {
            continue;
        };
        // A record that does not decode leaves its PG backfilling, which is always safe.
        let Ok(record) = decode::<PgHistoryRecord>(&kv.key, &kv.value) else { continue };
        let (epoch, acting) = &table.pgs[pg];
        let complete_here = record.history.clean.as_ref().is_some_and(|clean| {
            clean.epoch == *epoch
                && clean.members.len() == acting.len()
                && clean.members.iter().all(|osd| acting.contains(osd))
        });
        if complete_here && record.history.intervals.is_empty() {
            complete.insert(pg);
        }
    }
    Ok(complete)
}

/// A hidden layer nothing reads through whose volume is neither sealing (writes admitted to
/// a head a rollback replaced may still land) nor being removed (which deletes it with the
/// volume).
fn unread_hidden_layer(map: &ClusterMap, snapshot: &cluster::SnapshotRecord) -> bool {
    let volume = map.volumes.get(&snapshot.volume);
    snapshot.hidden
        && volume.is_none_or(|volume| !volume.sealing && !volume.is_deleting())
        && crate::snapshots::readers_of(map, snapshot.inode).is_empty()
}

/// Deletes the volumes flagged `deleting`, one at a time, whenever the map shows some, and the
/// hidden layers nothing reads through; purges the trash entries that expired.
async fn reap_loop(
    shared: &Shared,
    watcher: &MapWatcher,
    reaper: Option<&dyn VolumeReaper>,
    leadership: &Leadership,
) -> Result<TermEnd, MetaError> {
    let store = shared.store.as_ref();
    let mut receiver = watcher.subscribe();
    loop {
        let map = receiver.borrow_and_update().clone();
        let mut failed = false;
        // Trash entries past their retention go, flagged `deleting`, to the loop below (ADR 0030).
        let now_unix_ms = stdx::wall_clock::unix_ms();
        if map.trash.values().any(|entry| entry.expires_unix_ms <= now_unix_ms) {
            if let Err(error) = crate::trash::purge_expired(store, now_unix_ms, Some(leadership.fence())).await {
                tracing::warn!(%error, "cannot purge the trash entries that expired; retrying in 5 s");
                failed = true;
            }
        }
        let next_expiry = map
            .trash
            .values()
            .filter(|entry| entry.expires_unix_ms > now_unix_ms)
            .map(|entry| Instant::now() + Duration::from_millis(entry.expires_unix_ms - now_unix_ms))
            .min();
        for volume in map.volumes.values().filter(|volume| volume.is_deleting()) {
            let key = keys::volume(&volume.name);
            // The map has no revisions: read the record again for the comparison.
            let current = match store.get(&key).await {
                Ok(Some(kv)) => decode::<VolumeRecord>(&key, &kv.value).map(|record| (record, kv.mod_revision)),
                Ok(None) => continue,
                Err(error) => {
                    tracing::warn!(%error, volume = %volume.name, "reading a volume to delete failed");
                    failed = true;
                    continue;
                }
            };
            let (record, revision) = match current {
                Ok(current) => current,
                Err(error) => {
                    tracing::warn!(%error, "cannot delete a volume whose record does not decode");
                    continue;
                }
            };
            if !record.is_deleting() {
                continue;
            }
            if let Err(error) = reap_volume(store, leadership, reaper, &shared.progress, &record, revision).await {
                tracing::warn!(%error, "volume deletion failed; retrying in 5 s");
                failed = true;
            }
        }
        for snapshot in map.snapshots.values().filter(|snapshot| unread_hidden_layer(&map, snapshot)) {
            if let Err(error) = crate::reaper::reap_layer(store, leadership, reaper, snapshot).await {
                tracing::warn!(%error, "deleting a layer failed; retrying in 5 s");
                failed = true;
            }
        }
        tokio::select! {
            biased;
            changed = receiver.changed() => {
                if changed.is_err() {
                    return Err(MetaError::unavailable(store.endpoint(), "the cluster map watcher stopped"));
                }
            }
            _ = tokio::time::sleep(Duration::from_secs(5)), if failed => {}
            () = sleep_until(next_expiry) => {}
        }
    }
}
