//! `MetaError`: what a metadata store operation can fail with, the same for every backend.
//!
//! Callers branch on the variant, not on the message: `Unavailable` means retry later (possibly
//! against another endpoint), `LeaseExpired` means the caller lost what the lease protected
//! (an OSD must stop serving writes, a mon must stop acting as leader), and `Compacted` ends a
//! watch that cannot continue without a gap, so the caller lists again and watches from the
//! listing's revision. The messages name the key, prefix, lease or endpoint involved.

use serde::{Deserialize, Serialize};

use crate::LeaseId;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum MetaError {
    /// The store could not be reached or answered with a transport failure.
    #[error("metadata store {endpoint} is unavailable: {reason}")]
    Unavailable { endpoint: String, reason: String },
    /// The lease has expired, was revoked, or never existed.
    #[error("lease {lease} has expired or does not exist")]
    LeaseExpired { lease: LeaseId },
    /// A watch cannot deliver every event from `revision` on: the history was compacted, or the
    /// watcher fell too far behind. The caller must list again.
    #[error("watch on prefix {prefix:?} cannot continue from revision {revision}: {reason}")]
    Compacted { prefix: String, revision: i64, reason: String },
    /// Anything else: an invalid request, a value the store refused, a failed local write.
    #[error("metadata operation on key {key:?} failed: {reason}")]
    Other { key: String, reason: String },
}

impl MetaError {
    /// True for the errors after which a watcher must list again and watch from the listing.
    pub fn requires_relist(&self) -> bool {
        matches!(self, MetaError::Compacted { .. } | MetaError::Unavailable { .. })
    }

    pub fn other(key: impl Into<String>, reason: impl Into<String>) -> MetaError {
        MetaError::Other { key: key.into(), reason: reason.into() }
    }

    pub fn unavailable(endpoint: impl Into<String>, reason: impl Into<String>) -> MetaError {
        MetaError::Unavailable { endpoint: endpoint.into(), reason: reason.into() }
    }
}
