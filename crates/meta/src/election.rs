//! Leader election built only on the `MetaStore` trait, so it works the same on every backend.
//!
//! A candidate becomes leader by creating the election key, attached to its own lease, in a
//! transaction that succeeds only if the key does not exist. The key's create revision is the
//! leadership's fencing token: it differs for every term and grows from term to term. A
//! candidate that loses waits for the key to be deleted (resignation, lease revocation or
//! expiry) and tries again. Keeping the lease alive is the caller's job; when the lease
//! expires, the key disappears and another candidate takes over, so a leader must stop acting
//! as leader before its lease can expire (renew well within the TTL and give up on failure).

use crate::{Compare, CompareOp, KeyValue, LeaseId, MetaError, MetaStore, Txn, TxnOp, TxnOpResult, WatchEventKind};

/// A won election: proof that `candidate_id` held `election_key` from `revision` on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leadership {
    pub election_key: String,
    pub candidate_id: String,
    pub lease: LeaseId,
    /// The create revision of the election key: the term's fencing token.
    pub revision: i64,
}

/// Waits until `candidate_id` holds `election_key` under `lease`.
///
/// Returns at once if the candidate already holds it under the same lease. Fails with
/// [`MetaError::LeaseExpired`] if the lease expires while waiting, and with any error of the
/// store other than the end of a watch (after which it simply looks again). Dropping the
/// future abandons the campaign.
pub async fn campaign(
    store: &dyn MetaStore,
    election_key: &str,
    candidate_id: &str,
    lease: LeaseId,
) -> Result<Leadership, MetaError> {
    loop {
        let response = store
            .txn(Txn {
                compares: vec![Compare::absent(election_key)],
                success: vec![TxnOp::put(election_key, candidate_id, Some(lease))],
                failure: vec![TxnOp::get(election_key)],
            })
            .await?;
        let leadership = |revision| Leadership {
            election_key: election_key.to_string(),
            candidate_id: candidate_id.to_string(),
            lease,
            revision,
        };
        if response.succeeded {
            return Ok(leadership(response.revision));
        }
        let holder = match response.results.as_slice() {
            [TxnOpResult::Get(holder)] => holder.clone(),
            other => return Err(MetaError::other(election_key, format!("unexpected transaction results {other:?}"))),
        };
        let Some(holder) = holder else {
            continue; // Deleted between the comparison and the read: try again.
        };
        if holder.lease == Some(lease) && holder.value == candidate_id.as_bytes() {
            return Ok(leadership(holder.create_revision));
        }
        wait_for_delete(store, election_key, response.revision + 1).await?;
    }
}

impl Leadership {
    /// Whether the election key still holds this term (same create revision and lease).
    pub async fn is_current(&self, store: &dyn MetaStore) -> Result<bool, MetaError> {
        let holder = store.get(&self.election_key).await?;
        Ok(holder.is_some_and(|holder| holder.create_revision == self.revision && holder.lease == Some(self.lease)))
    }

    /// Resolves when this term has ended: the election key was deleted or belongs to a newer
    /// term. Store errors other than the end of a watch are returned.
    pub async fn lost(&self, store: &dyn MetaStore) -> Result<(), MetaError> {
        loop {
            let listing = store.list_with_revision(&self.election_key).await?;
            let current = listing.kvs.iter().find(|kv| kv.key == self.election_key);
            if current.is_none_or(|kv| kv.create_revision != self.revision) {
                return Ok(());
            }
            wait_for_delete(store, &self.election_key, listing.revision + 1).await?;
        }
    }

    /// The comparison that makes a transaction the term's: it succeeds only while the election
    /// key is the one this term created, so a deposed leader's writes fail.
    pub fn fence(&self) -> Compare {
        Compare::create_revision(&self.election_key, CompareOp::Equal, self.revision)
    }

    /// Whether `leader`, the election key as a failed fenced transaction read it back, is still
    /// this term's: the transaction failed on another of its comparisons, not on the fence.
    pub fn holds(&self, leader: &KeyValue) -> bool {
        leader.key == self.election_key && leader.create_revision == self.revision
    }

    /// Deletes the election key if it still holds this term, so another candidate can take over
    /// at once. The lease stays the caller's.
    pub async fn resign(&self, store: &dyn MetaStore) -> Result<(), MetaError> {
        store
            .txn(Txn {
                compares: vec![self.fence()],
                success: vec![TxnOp::delete(&self.election_key)],
                failure: vec![],
            })
            .await?;
        Ok(())
    }
}

/// Returns when `key` is deleted at or after `start_revision`, or when the watch ends in a way
/// that calls for looking again.
async fn wait_for_delete(store: &dyn MetaStore, key: &str, start_revision: i64) -> Result<(), MetaError> {
    let mut watch = match store.watch(key, Some(start_revision)).await {
        Ok(watch) => watch,
        Err(MetaError::Compacted { .. }) => return Ok(()),
        Err(error) => return Err(error),
    };
    loop {
        match watch.next().await {
            // The watch covers every key with this prefix; only the key itself matters.
            Some(Ok(event)) if event.kv.key == key && event.kind == WatchEventKind::Delete => return Ok(()),
            Some(Ok(_)) => {}
            Some(Err(error)) if error.requires_relist() => return Ok(()),
            Some(Err(error)) => return Err(error),
            None => return Ok(()),
        }
    }
}
