//! Scrub requests and results (`docs/design/scrub.md`): `POST /scrub` appends a request to
//! `/basalt/config/scrub-requests`, which every OSD follows in its map; each PG's primary
//! scrubs the PGs a request covers and stores the result at `/basalt/pg-scrub/<pool>/<pg>`,
//! which `GET /scrub/{id}`, `GET /pgs` and `GET /status` read.

use std::collections::BTreeMap;

use cluster::records::{decode, encode, FORMAT_VERSION};
use cluster::{keys, ClusterMap, PgScrubRecord, ScrubRequest, ScrubRequestsRecord};
use meta::{Compare, CompareOp, MetaStore, Txn, TxnOp};

use crate::admin::AdminError;
use crate::views::{PgScrubView, ScrubProgressView, ScrubRequestBody};

const CAS_ATTEMPTS_MAX: usize = 16;

/// Appends a scrub request for what `body` names; returns it.
pub async fn request(
    store: &dyn MetaStore,
    map: &ClusterMap,
    body: &ScrubRequestBody,
) -> Result<ScrubRequest, AdminError> {
    let named = [body.pool.is_some(), body.pg.is_some(), body.volume.is_some()].iter().filter(|&&named| named).count();
    if named > 1 {
        return Err(AdminError::Invalid("name at most one of pool, pg and volume".into()));
    }
    let (pool, pg, inode) = if let Some(name) = &body.pool {
        let pool = map.pool_by_name(name).ok_or_else(|| AdminError::NotFound(format!("no pool named {name:?}")))?;
        (Some(pool.id), None, None)
    } else if let Some(text) = &body.pg {
        let (pool, pg) = parse_pg(text)?;
        let record = map.pools.get(&pool).ok_or_else(|| AdminError::NotFound(format!("no pool with id {pool}")))?;
        if pg >= record.pg_count {
            return Err(AdminError::NotFound(format!(
                "pool {} has {} PGs; there is no pg {text}",
                record.name, record.pg_count
            )));
        }
        (Some(pool), Some(pg), None)
    } else if let Some(name) = &body.volume {
        let volume = map.volumes.get(name).ok_or_else(|| AdminError::NotFound(format!("no volume named {name:?}")))?;
        (Some(volume.pool), None, Some(volume.id))
    } else {
        (None, None, None)
    };
    let at_unix_s = stdx::wall_clock::unix_seconds();
    for _ in 0..CAS_ATTEMPTS_MAX {
        let kv = store.get(keys::SCRUB_REQUESTS).await?;
        let mut record: ScrubRequestsRecord = match &kv {
            Some(kv) => decode(keys::SCRUB_REQUESTS, &kv.value)?,
            None => ScrubRequestsRecord { version: FORMAT_VERSION, requests: Vec::new() },
        };
        let id = record.requests.last().map_or(1, |last| last.id + 1);
        let request = ScrubRequest { id, at_unix_s, pool, pg, inode };
        record.requests.push(request.clone());
        let excess = record.requests.len().saturating_sub(ScrubRequestsRecord::REQUESTS_MAX);
        record.requests.drain(..excess);
        let revision = kv.as_ref().map_or(0, |kv| kv.mod_revision);
        let txn = Txn {
            compares: vec![Compare::mod_revision(keys::SCRUB_REQUESTS, CompareOp::Equal, revision)],
            success: vec![TxnOp::put(keys::SCRUB_REQUESTS, encode(&record), None)],
            failure: vec![],
        };
        if store.txn(txn).await?.succeeded {
            tracing::info!(id, ?pool, ?pg, ?inode, "scrub requested");
            return Ok(request);
        }
    }
    Err(AdminError::Contended(format!("{} kept changing", keys::SCRUB_REQUESTS)))
}

/// `POOL.PG`, both numbers.
fn parse_pg(text: &str) -> Result<(u32, u32), AdminError> {
    let parsed = text.split_once('.').and_then(|(pool, pg)| Some((pool.parse().ok()?, pg.parse().ok()?)));
    parsed.ok_or_else(|| AdminError::Invalid(format!("{text:?} is not a pg: give POOL_ID.PG, as basalt pg ls shows")))
}

/// The last scrub of every PG that had one.
pub async fn results(store: &dyn MetaStore) -> Result<BTreeMap<(u32, u32), PgScrubRecord>, AdminError> {
    let mut results = BTreeMap::new();
    for kv in store.list(keys::PG_SCRUB_PREFIX).await? {
        let Some((pool, pg)) = kv.key.strip_prefix(keys::PG_SCRUB_PREFIX).and_then(|rest| {
            let (pool, pg) = rest.split_once('/')?;
            Some((pool.parse().ok()?, pg.parse().ok()?))
        }) else {
            continue;
        };
        match decode::<PgScrubRecord>(&kv.key, &kv.value) {
            Ok(record) => {
                results.insert((pool, pg), record);
            }
            Err(error) => tracing::warn!(%error, "a scrub result does not decode"),
        }
    }
    Ok(results)
}

/// How far request `id` got: the PGs it covers whose last scrub answered it or a later one.
pub async fn progress(store: &dyn MetaStore, map: &ClusterMap, id: u64) -> Result<ScrubProgressView, AdminError> {
    let request = map.scrub_requests.requests.iter().find(|request| request.id == id).cloned().ok_or_else(|| {
        AdminError::NotFound(format!("no scrub request {id} (the last {} are kept)", ScrubRequestsRecord::REQUESTS_MAX))
    })?;
    let results = results(store).await?;
    let mut view = ScrubProgressView {
        id,
        pgs_total: 0,
        pgs_done: 0,
        objects: 0,
        found: 0,
        repaired: 0,
        unrepairable: 0,
        pgs: Vec::new(),
    };
    for pool in map.pools.values() {
        for pg in 0..pool.pg_count {
            if !request.covers(pool.id, pg) {
                continue;
            }
            view.pgs_total += 1;
            let Some(result) = results.get(&(pool.id, pg)).filter(|result| result.request >= id) else { continue };
            view.pgs_done += 1;
            view.objects += result.objects;
            view.found += result.found;
            view.repaired += result.repaired;
            view.unrepairable += result.unrepairable;
            view.pgs.push(PgScrubView::of(pool.id, pg, result));
        }
    }
    Ok(view)
}
