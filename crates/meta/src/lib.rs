//! The cluster metadata store abstraction: the [`MetaStore`] trait, leader election built on
//! it, and the conformance suite every backend must pass.
//!
//! The metadata store holds the cluster's configuration and liveness: pools, the PG table,
//! OSDs and their leased liveness keys, volumes, PG history and the mon's leader key (the key
//! layout is in `docs/design/metadata-keys.md`). It is never on the data path. The model is
//! etcd v3's (revisions, compare-and-swap transactions, prefix watches, leases) because etcd
//! is the production backend; `meta-etcd` implements the trait on etcd and `meta-embedded` on
//! a single-machine store for `basalt dev` and clusters without etcd.
//!
//! This crate holds no I/O and no runtime: only the interface, the value types, and logic
//! written against the interface ([`campaign`]). The `conformance` feature adds
//! [`conformance`], the backend-independent test suite.

#[cfg(feature = "conformance")]
pub mod conformance;
mod election;
mod error;
pub mod members;
pub mod serde_hex;
mod store;
mod types;

pub use election::{campaign, Leadership};
pub use error::MetaError;
pub use store::{watch_channel, MetaStore, WatchClosed, WatchSender, WatchStream, WATCH_CHANNEL_CAPACITY};
pub use types::{
    Compare, CompareOp, CompareTarget, KeyValue, LeaseId, Listing, Txn, TxnOp, TxnOpResult, TxnResponse, WatchEvent,
    WatchEventKind,
};
