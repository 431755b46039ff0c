//! The PGs' history records in the metadata store (`/basalt/pg-history/<pool>/<pg>`,
//! `docs/design/peering.md`): read when a primary peers; written before a PG that is not clean
//! acknowledges its first write of an epoch, and when it becomes clean. Every write compares
//! the record's revision with the one its writer last saw, so a primary that was replaced can
//! never overwrite what its successor recorded.

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
}

/// Replaces the PG's history with `history` if its record is still at `revision`.
pub(crate) async fn write(
    store: &dyn MetaStore,
    pg: PgId,
    history: &History,
    revision: i64,
) -> Result<Written, String> {
    let key = keys::pg_history(pg.pool, pg.pg);
    let record = PgHistoryRecord { version: cluster::records::FORMAT_VERSION, history: history.clone() };
    let response = store
        .txn(Txn {
            compares: vec![Compare::mod_revision(&key, CompareOp::Equal, revision)],
            success: vec![TxnOp::put(&key, encode(&record), None)],
            failure: vec![],
        })
        .await
        .map_err(|error| format!("writing {key}: {error}"))?;
    Ok(if response.succeeded { Written::At(response.revision) } else { Written::Changed })
}
