//! What every Basalt process shares about the cluster.
//!
//! - [`keys`] and [`records`]: the metadata store's key layout and typed values
//!   (`docs/design/metadata-keys.md`), decoded as untrusted input.
//! - [`connect`]: reaching the metadata store from a URL (etcd or an embedded store served by a mon).
//! - [`layout`]: volume bytes to objects to PGs, and how a primary mints object versions.
//! - [`map`]: a live, consistent view of pools, PG tables and OSDs, kept by list-then-watch.

pub mod connect;
pub mod keys;
pub mod layout;
pub mod map;
pub mod records;

pub use connect::{connect, MetaUrl};
pub use layout::{mint_version, object_pg, ObjectRef};
pub use map::{ClusterMap, MapWatcher, PgState};
pub use records::{
    machine_id, ClusterRecord, Counter, FailureDomainName, LeaderRecord, LocalSocket, OsdLiveRecord, OsdRecord,
    PgHistoryRecord, PgTableRecord, PoolRecord, RecordError, Redundancy, VolumeRecord,
};
