//! What every Basalt process shares about the cluster.
//!
//! - [`keys`] and [`records`]: the metadata store's key layout and typed values
//!   (`docs/design/metadata-keys.md`), decoded as untrusted input.
//! - [`inode`]: which pool, family and layer an inode names (ADR 0026).
//! - [`layout`]: volume bytes to objects to PGs, and how a primary mints object versions.
//! - [`map`]: pools, PG tables, OSDs and volumes at one revision of the store.
//! - [`peering`]: what a new primary decides from its members' object lists (ADR 0016).
//!
//! Nothing here does I/O on the store or needs a runtime: reaching the store and following the
//! map live in `cluster-watch`, so the data-path math and the schema stay deterministic.

pub mod inode;
pub mod keys;
pub mod layout;
pub mod map;
pub mod peering;
pub mod records;

pub use layout::{mint_version, object_pg, ObjectRef};
pub use map::{ClusterMap, Layer, PgState, Route};
pub use records::{
    machine_id, snapshot_name, split_snapshot_name, ClusterRecord, Counter, DownMark, FailureDomainName, LeaderRecord,
    LocalSocket, OsdLiveRecord, OsdRecord, Parent, PeerReportRecord, PgHistoryRecord, PgScrubRecord, PgTableRecord,
    PoolRecord, RecordError, Redundancy, ReportedPeer, ScrubRequest, ScrubRequestsRecord, SettingsRecord,
    SnapshotRecord, TrashRecord, VolumeRecord, SNAPSHOT_SEPARATOR,
};
