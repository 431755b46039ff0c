//! The PGs' history records in the metadata store (`/basalt/pg-history/<pool>/<pg>`,
//! `docs/design/peering.md`): read when a primary peers; written before a PG that is not clean
//! acknowledges its first write of an epoch, and when it becomes clean. Every write compares
//! the record's revision with the one its writer last saw, so a primary that was replaced can
//! never overwrite what its successor recorded; and the PG table's, with the map its writer
//! acted on, so a record of an epoch the table has moved past never lands late: a successor
//! that found the PG clean writes nothing, and would otherwise find the older primary's set
//! recorded as the latest after writes it acknowledged without a record.

use cluster::peering::History;
use cluster::records::{decode, encode};
use cluster::{keys, PgHistoryRecord};
use meta::{Compare, CompareOp, MetaStore, Txn, TxnOp};
use wire::PgId;

/// The PG's history and the revision of its record (0: no record, a PG never recorded).
pub(crate) async fn read(store: &dyn MetaStore, pg: PgId) -> Result<(History, i64), String> {
    let key = keys::pg_history(pg.pool, pg.pg);
    let value = store.get(&key).await.map_err(|error| format!("reading {key}: {error}"))?;
    match value {
        None => Ok((History::default(), 0)),
        Some(kv) => {
            let record: PgHistoryRecord = decode(&key, &kv.value).map_err(|error| error.to_string())?;
            Ok((record.history, kv.mod_revision))
        }
    }
}

/// What a history write found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Written {
    /// Written; the record's new revision.
    At(i64),
    /// The record is not at the revision the writer saw: someone else wrote it.
    Changed,
    /// The PG table changed after the writer's map: its epoch may be over; nothing written.
    TableMoved,
}

/// Replaces the PG's history with `history` if its record is still at `revision` and its pool's
/// PG table has not changed since store revision `map_revision` (the writer's map).
pub(crate) async fn write(
    store: &dyn MetaStore,
    pg: PgId,
    history: &History,
    revision: i64,
    map_revision: i64,
) -> Result<Written, String> {
    let key = keys::pg_history(pg.pool, pg.pg);
    let table_key = keys::pg_table(pg.pool);
    let record = PgHistoryRecord { version: cluster::records::FORMAT_VERSION, history: history.clone() };
    let response = store
        .txn(Txn {
            compares: vec![
                Compare::mod_revision(&key, CompareOp::Equal, revision),
                Compare::mod_revision(&table_key, CompareOp::Less, map_revision + 1),
            ],
            success: vec![TxnOp::put(&key, encode(&record), None)],
            failure: vec![TxnOp::get(&key)],
        })
        .await
        .map_err(|error| format!("writing {key}: {error}"))?;
    if response.succeeded {
        return Ok(Written::At(response.revision));
    }
    // Which compare failed: the record's revision, or else the table's.
    let current = response.results.first().and_then(|result| match result {
        meta::TxnOpResult::Get(kv) => Some(kv.as_ref().map_or(0, |kv| kv.mod_revision)),
        _ => None,
    });
    Ok(if current == Some(revision) { Written::TableMoved } else { Written::Changed })
}
