//! The values that cross the `MetaStore` boundary: keys with their revisions, leases,
//! transactions and watch events.
//!
//! The model is etcd v3's, because etcd is the production backend and the embedded store must
//! behave the same way. The store has one global revision that increases by one with every
//! committed write (a put, a delete that deleted something, or a transaction containing such
//! writes). Each key records the revision that created it, the revision that last modified it
//! and its version (the number of puts since it was created). A key created again after a
//! delete starts over with a new create revision and version 1. Revisions start at 1, so a
//! `create_revision` of 0 in a comparison means "the key does not exist".

use std::fmt;

use serde::{Deserialize, Serialize};

/// A lease: keys attached to it are deleted when it expires or is revoked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LeaseId(pub i64);

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// A key and its value with the store's bookkeeping, as read at some revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyValue {
    pub key: String,
    #[serde(with = "crate::serde_hex")]
    pub value: Vec<u8>,
    /// The revision of the put that created the key; 0 in a delete event.
    pub create_revision: i64,
    /// The revision of the last put, or of the delete in a delete event.
    pub mod_revision: i64,
    /// The number of puts since the key was created; 0 in a delete event.
    pub version: i64,
    pub lease: Option<LeaseId>,
}

/// A prefix listing and the store revision it was read at.
///
/// Watching from `revision + 1` after a listing misses no change and repeats none.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    pub kvs: Vec<KeyValue>,
    pub revision: i64,
}

/// How a [`Compare`] relates the key's field (left) to the given operand (right).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareOp {
    Equal,
    NotEqual,
    Greater,
    Less,
}

/// The field a [`Compare`] reads, with the operand to compare it to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareTarget {
    /// The value. Any comparison of the value of a missing key is false, as in etcd.
    Value(#[serde(with = "crate::serde_hex")] Vec<u8>),
    /// The version; 0 for a missing key.
    Version(i64),
    /// The create revision; 0 for a missing key.
    CreateRevision(i64),
    /// The last modification revision; 0 for a missing key.
    ModRevision(i64),
}

/// One condition of a transaction, evaluated against the state before the transaction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compare {
    pub key: String,
    pub op: CompareOp,
    pub target: CompareTarget,
}

impl Compare {
    pub fn value(key: impl Into<String>, op: CompareOp, value: impl Into<Vec<u8>>) -> Compare {
        Compare { key: key.into(), op, target: CompareTarget::Value(value.into()) }
    }

    pub fn version(key: impl Into<String>, op: CompareOp, version: i64) -> Compare {
        Compare { key: key.into(), op, target: CompareTarget::Version(version) }
    }

    pub fn create_revision(key: impl Into<String>, op: CompareOp, revision: i64) -> Compare {
        Compare { key: key.into(), op, target: CompareTarget::CreateRevision(revision) }
    }

    pub fn mod_revision(key: impl Into<String>, op: CompareOp, revision: i64) -> Compare {
        Compare { key: key.into(), op, target: CompareTarget::ModRevision(revision) }
    }

    /// True when the key does not exist (its create revision is 0).
    pub fn absent(key: impl Into<String>) -> Compare {
        Compare::create_revision(key, CompareOp::Equal, 0)
    }

    /// True when the key exists.
    pub fn present(key: impl Into<String>) -> Compare {
        Compare::create_revision(key, CompareOp::Greater, 0)
    }

    /// Evaluates the comparison against the key's current state, `None` when it is missing.
    ///
    /// Backends that evaluate comparisons themselves (the embedded store) use this, so every
    /// backend agrees with etcd on the corner cases.
    pub fn evaluate(&self, current: Option<&KeyValue>) -> bool {
        let ordering = match (&self.target, current) {
            (CompareTarget::Value(_), None) => return false,
            (CompareTarget::Value(operand), Some(kv)) => kv.value.as_slice().cmp(operand.as_slice()),
            (CompareTarget::Version(operand), kv) => kv.map_or(0, |kv| kv.version).cmp(operand),
            (CompareTarget::CreateRevision(operand), kv) => kv.map_or(0, |kv| kv.create_revision).cmp(operand),
            (CompareTarget::ModRevision(operand), kv) => kv.map_or(0, |kv| kv.mod_revision).cmp(operand),
        };
        match self.op {
            CompareOp::Equal => ordering.is_eq(),
            CompareOp::NotEqual => ordering.is_ne(),
            CompareOp::Greater => ordering.is_gt(),
            CompareOp::Less => ordering.is_lt(),
        }
    }
}

/// One operation of a transaction branch.
///
/// A branch may not put or delete the same key twice (etcd refuses such a transaction). A `Get`
/// sees the writes made earlier in the same branch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnOp {
    Put {
        key: String,
        #[serde(with = "crate::serde_hex")]
        value: Vec<u8>,
        lease: Option<LeaseId>,
    },
    Delete {
        key: String,
    },
    Get {
        key: String,
    },
}

impl TxnOp {
    pub fn put(key: impl Into<String>, value: impl Into<Vec<u8>>, lease: Option<LeaseId>) -> TxnOp {
        TxnOp::Put { key: key.into(), value: value.into(), lease }
    }

    pub fn delete(key: impl Into<String>) -> TxnOp {
        TxnOp::Delete { key: key.into() }
    }

    pub fn get(key: impl Into<String>) -> TxnOp {
        TxnOp::Get { key: key.into() }
    }

    pub fn key(&self) -> &str {
        match self {
            TxnOp::Put { key, .. } | TxnOp::Delete { key } | TxnOp::Get { key } => key,
        }
    }
}

/// A transaction: if every comparison holds, run `success`, otherwise run `failure`.
///
/// The whole transaction is atomic and its writes share one revision.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    pub compares: Vec<Compare>,
    pub success: Vec<TxnOp>,
    pub failure: Vec<TxnOp>,
}

/// The result of one [`TxnOp`] of the branch that ran, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnOpResult {
    Put,
    Delete { deleted: bool },
    Get(Option<KeyValue>),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnResponse {
    /// Whether the comparisons held (and `success` ran).
    pub succeeded: bool,
    /// The store revision after the transaction: its own revision if it wrote anything.
    pub revision: i64,
    pub results: Vec<TxnOpResult>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WatchEventKind {
    Put,
    Delete,
}

/// One change seen by a watch.
///
/// Events arrive in revision order; the events of one transaction share a revision and arrive
/// in the order of its operations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchEvent {
    pub kind: WatchEventKind,
    /// The key after a put; for a delete, only `key` and `mod_revision` (the delete's revision)
    /// are set.
    pub kv: KeyValue,
    pub revision: i64,
}

impl WatchEvent {
    /// The event of a delete at `revision`, as both backends report it.
    pub fn delete(key: impl Into<String>, revision: i64) -> WatchEvent {
        WatchEvent {
            kind: WatchEventKind::Delete,
            kv: KeyValue {
                key: key.into(),
                value: Vec::new(),
                create_revision: 0,
                mod_revision: revision,
                version: 0,
                lease: None,
            },
            revision,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(value: &[u8], version: i64) -> KeyValue {
        KeyValue { key: "k".into(), value: value.to_vec(), create_revision: 3, mod_revision: 5, version, lease: None }
    }

    #[test]
    fn compare_on_missing_key_behaves_like_etcd() {
        assert!(Compare::absent("k").evaluate(None));
        assert!(!Compare::present("k").evaluate(None));
        assert!(!Compare::value("k", CompareOp::Equal, "").evaluate(None));
        assert!(!Compare::value("k", CompareOp::NotEqual, "x").evaluate(None));
        assert!(Compare::version("k", CompareOp::Less, 1).evaluate(None));
        assert!(Compare::mod_revision("k", CompareOp::Equal, 0).evaluate(None));
    }

    #[test]
    fn compare_on_present_key() {
        let current = kv(b"b", 2);
        assert!(!Compare::absent("k").evaluate(Some(&current)));
        assert!(Compare::present("k").evaluate(Some(&current)));
        assert!(Compare::value("k", CompareOp::Equal, "b").evaluate(Some(&current)));
        assert!(Compare::value("k", CompareOp::Greater, "a").evaluate(Some(&current)));
        assert!(Compare::value("k", CompareOp::Less, "ba").evaluate(Some(&current)));
        assert!(Compare::version("k", CompareOp::Greater, 1).evaluate(Some(&current)));
        assert!(!Compare::version("k", CompareOp::NotEqual, 2).evaluate(Some(&current)));
        assert!(Compare::create_revision("k", CompareOp::Equal, 3).evaluate(Some(&current)));
        assert!(Compare::mod_revision("k", CompareOp::Less, 6).evaluate(Some(&current)));
    }
}
