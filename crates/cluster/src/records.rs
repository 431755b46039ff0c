//! Typed values of the metadata store, as `docs/design/metadata-keys.md` defines them.
//!
//! Every value is a JSON object whose first field is `"version"` (the value format's version).
//! Values are untrusted: [`decode`] checks the format version and names the key in every error.

use std::collections::BTreeSet;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::peering::History;

/// The value format version this code writes and reads.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum RecordError {
    #[error("value of {key} is not valid: {reason}")]
    Invalid { key: String, reason: String },
    #[error("value of {key} has format version {version}; this build reads version {FORMAT_VERSION}")]
    UnknownVersion { key: String, version: u64 },
}

#[derive(Deserialize)]
struct VersionOnly {
    version: u64,
}

/// Decodes the value of `key`, checking its format version first.
pub fn decode<T: DeserializeOwned>(key: &str, value: &[u8]) -> Result<T, RecordError> {
    let invalid = |e: serde_json::Error| RecordError::Invalid { key: key.to_string(), reason: e.to_string() };
    let head: VersionOnly = serde_json::from_slice(value).map_err(invalid)?;
    if head.version != u64::from(FORMAT_VERSION) {
        return Err(RecordError::UnknownVersion { key: key.to_string(), version: head.version });
    }
    serde_json::from_slice(value).map_err(invalid)
}

/// Encodes a record (records carry their own `version` field).
pub fn encode<T: Serialize>(record: &T) -> Vec<u8> {
    serde_json::to_vec(record).expect("records always serialize")
}

fn format_version() -> u32 {
    FORMAT_VERSION
}

/// `/basalt/config/cluster`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterRecord {
    #[serde(default = "format_version")]
    pub version: u32,
    pub cluster_id: String,
    pub object_size_bytes: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Redundancy {
    /// N full copies.
    Replicated(u8),
}

impl Redundancy {
    pub fn copies(self) -> u8 {
        match self {
            Redundancy::Replicated(n) => n,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureDomainName {
    Osd,
    Host,
    Rack,
}

impl FailureDomainName {
    pub fn to_placement(self) -> placement::FailureDomain {
        match self {
            FailureDomainName::Osd => placement::FailureDomain::Osd,
            FailureDomainName::Host => placement::FailureDomain::Host,
            FailureDomainName::Rack => placement::FailureDomain::Rack,
        }
    }

    pub fn parse(text: &str) -> Option<FailureDomainName> {
        match text {
            "osd" => Some(FailureDomainName::Osd),
            "host" => Some(FailureDomainName::Host),
            "rack" => Some(FailureDomainName::Rack),
            _ => None,
        }
    }
}

impl std::fmt::Display for FailureDomainName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.to_placement().fmt(f)
    }
}

/// `/basalt/config/pools/<pool>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRecord {
    #[serde(default = "format_version")]
    pub version: u32,
    pub id: u32,
    pub name: String,
    pub redundancy: Redundancy,
    pub min_size: u8,
    pub pg_count: u32,
    pub failure_domain: FailureDomainName,
    #[serde(default)]
    pub osd_tags: BTreeSet<String>,
    #[serde(default)]
    pub primary_affinity_tag: Option<String>,
}

impl PoolRecord {
    pub fn placement_spec(&self) -> placement::PoolSpec {
        placement::PoolSpec {
            pool_id: self.id,
            pg_count: self.pg_count,
            replica_count: self.redundancy.copies(),
            failure_domain: self.failure_domain.to_placement(),
            tags: self.osd_tags.clone(),
        }
    }
}

/// `/basalt/config/pgs/<pool>`: entry `i` of `pgs` is PG `i`, `(epoch, [primary, replicas...])`,
/// its acting set; entry `i` of `targets` is its target set, the OSDs placement chose for it
/// (`docs/design/peering.md`). A record without `targets` has every PG's target set equal to
/// its acting set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgTableRecord {
    #[serde(default = "format_version")]
    pub version: u32,
    pub pool: u32,
    pub table_epoch: u64,
    pub pgs: Vec<(u64, Vec<u32>)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<Vec<u32>>,
}

impl PgTableRecord {
    /// The target set of PG `pg`: placement's choice, whether its OSDs are up or not.
    pub fn target(&self, pg: usize) -> &[u32] {
        match self.targets.get(pg) {
            Some(target) => target,
            None => self.pgs.get(pg).map_or(&[], |(_, acting)| acting),
        }
    }

    /// The target sets as placement sees a table.
    pub fn to_placement(&self) -> placement::PgTable {
        placement::PgTable {
            pgs: (0..self.pgs.len())
                .map(|pg| self.target(pg).iter().map(|&id| placement::OsdId(id)).collect())
                .collect(),
        }
    }
}

/// `/basalt/osd/<osd>`: the persistent identity of an OSD.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OsdRecord {
    #[serde(default = "format_version")]
    pub version: u32,
    pub id: u32,
    pub host: String,
    pub rack: String,
    #[serde(default)]
    pub tags: BTreeSet<String>,
    /// Relative placement weight; 1.0 is the default, 0 drains the OSD.
    pub weight: f64,
    pub capacity_bytes: u64,
    /// Out: placement gives it no PGs (`basalt osd out`, or down longer than
    /// `down_out_interval`); its PGs move elsewhere while it keeps serving them until they
    /// are clean without it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub out: bool,
    /// The mon marked it out because it stayed down; it comes back in when it is up again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub auto_out: bool,
    /// The mon's last mark of it as down on its peers' reports (ADR 0015), kept once cleared
    /// so that a mark soon after is held longer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down_mark: Option<DownMark>,
}

/// The mon marked an OSD down because its peers could not reach it (ADR 0015): its lease was
/// revoked and it takes no part in any PG while the mark is active, even once registered again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DownMark {
    /// The incarnation whose lease the mon revoked.
    pub incarnation: i64,
    pub since_unix_ms: u64,
    /// That incarnation's lease TTL: it has surely stopped acknowledging ops a TTL after its
    /// liveness key went. Until then (or until it registers again) its PGs keep it.
    pub lease_ttl_s: u64,
    /// The mark stays at least this long, and longer while reports about the OSD last.
    pub hold_s: u64,
    /// When the mon cleared it; `None` while active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleared_unix_ms: Option<u64>,
}

impl DownMark {
    pub fn is_active(&self) -> bool {
        self.cleared_unix_ms.is_none()
    }
}

impl OsdRecord {
    /// The placement weight in bytes: capacity scaled by `weight`.
    pub fn weight_bytes(&self) -> u64 {
        if !(self.weight.is_finite() && self.weight > 0.0) {
            return 0;
        }
        (self.capacity_bytes as f64 * self.weight).min(u64::MAX as f64) as u64
    }
}

/// `/basalt/config/settings`: the cluster's live-changeable settings (`basalt config set`).
/// A missing record or field means its default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SettingsRecord {
    #[serde(default = "format_version")]
    pub version: u32,
    /// How long an OSD may stay down before the mon marks it out and its PGs are rebuilt
    /// elsewhere.
    pub down_out_interval_s: u64,
    /// Each OSD's recovery, backfill and scrub rate while its clients are idle.
    pub recovery_bytes_per_s_max: u64,
    /// The rate they never go below, however busy the clients.
    pub recovery_bytes_per_s_min: u64,
    /// How far clients' mean latency may rise over its recent best before recovery backs off.
    pub recovery_latency_ratio_percent: u32,
    /// Copies one OSD makes at once.
    pub recovery_in_flight_max: u32,
    /// How often every PG is scrubbed.
    pub scrub_interval_s: u64,
    /// An OSD whose drive is this full is reported near full (`basalt status` warns).
    pub nearfull_ratio_percent: u32,
    /// An OSD whose drive is this full takes no new objects: writes that need new space, and
    /// copies of objects it lacks, get `NoSpace`; overwrites and deletes go on.
    pub full_ratio_percent: u32,
    /// The most snapshots a volume's head reads through: a deeper chain is refused (flatten).
    pub snapshot_chain_max: u32,
    /// How long a removed volume stays in the trash, restorable, before the mon purges it.
    pub trash_retention_s: u64,
}

impl Default for SettingsRecord {
    fn default() -> SettingsRecord {
        SettingsRecord {
            version: FORMAT_VERSION,
            down_out_interval_s: 600,
            recovery_bytes_per_s_max: 2 << 30,
            recovery_bytes_per_s_min: 1 << 20,
            recovery_latency_ratio_percent: 150,
            recovery_in_flight_max: 8,
            scrub_interval_s: 7 * 24 * 3600,
            nearfull_ratio_percent: 85,
            full_ratio_percent: 95,
            snapshot_chain_max: 64,
            trash_retention_s: 24 * 3600,
        }
    }
}

/// `/basalt/config/scrub-requests`: the scrubs asked for (`basalt scrub`), newest last; the
/// primaries scrub every PG a request covers whose last scrub came before it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubRequestsRecord {
    #[serde(default = "format_version")]
    pub version: u32,
    pub requests: Vec<ScrubRequest>,
}

/// One scrub asked for: of every PG, of one pool's, of one PG, or of one volume's objects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubRequest {
    /// Grows by one per request.
    pub id: u64,
    pub at_unix_s: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pg: Option<u32>,
    /// Only this volume's objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inode: Option<u64>,
}

impl ScrubRequest {
    pub fn covers(&self, pool: u32, pg: u32) -> bool {
        self.pool.is_none_or(|wanted| wanted == pool) && self.pg.is_none_or(|wanted| wanted == pg)
    }
}

impl ScrubRequestsRecord {
    /// The most requests kept: older ones are done or superseded by newer ones.
    pub const REQUESTS_MAX: usize = 64;

    /// The newest request covering the PG, if any.
    pub fn newest_for(&self, pool: u32, pg: u32) -> Option<&ScrubRequest> {
        self.requests.iter().rev().find(|request| request.covers(pool, pg))
    }
}

/// `/basalt/pg-scrub/<pool>/<pg>`: the PG's last scrub, written by its primary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgScrubRecord {
    #[serde(default = "format_version")]
    pub version: u32,
    /// The newest request it answered (0: a scheduled scrub).
    pub request: u64,
    pub epoch: u64,
    pub osd: u32,
    pub finished_unix_s: u64,
    pub objects: u64,
    /// Objects with a copy that was missing, older, unreadable or different.
    pub found: u64,
    pub repaired: u64,
    pub unrepairable: u64,
    /// What the first unrepairable objects failed with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// `/basalt/osd-live/<osd>` (leased): the running OSD.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdLiveRecord {
    #[serde(default = "format_version")]
    pub version: u32,
    pub address: String,
    pub incarnation: i64,
    /// A Unix socket the OSD also serves on, for processes on its machine (ADR 0013).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalSocket>,
    /// The TTL of the lease the key is attached to; zero when not told (then the mon assumes
    /// [`OsdLiveRecord::LEASE_TTL_UNKNOWN_S`]).
    #[serde(default)]
    pub lease_ttl_s: u64,
}

impl OsdLiveRecord {
    /// The lease TTL assumed for a record that does not say: longer than any OSD is given.
    pub const LEASE_TTL_UNKNOWN_S: u64 = 60;

    pub fn lease_ttl_s(&self) -> u64 {
        if self.lease_ttl_s == 0 {
            Self::LEASE_TTL_UNKNOWN_S
        } else {
            self.lease_ttl_s
        }
    }
}

/// `/basalt/peer-reports/<osd>` (leased with the reporter's liveness lease, so it goes with the
/// reporter): the peers this OSD shares PGs with that gave it no answer within the peer grace,
/// or left one of its ops unanswered for twice that (ADR 0015). Rewritten when the set changes;
/// an empty set deletes the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerReportRecord {
    #[serde(default = "format_version")]
    pub version: u32,
    /// The reporter's incarnation.
    pub incarnation: i64,
    pub unreachable: Vec<ReportedPeer>,
}

/// One peer a report names, with the incarnation that was probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ReportedPeer {
    pub osd: u32,
    pub incarnation: i64,
}

/// Where processes on an OSD's machine reach it without going through TCP.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalSocket {
    /// The machine, as its kernel's boot id ([`machine_id`]): no other machine tries the path.
    pub machine: String,
    /// The socket's absolute path.
    pub path: String,
}

/// This machine's identity for [`LocalSocket`]: the running kernel's boot id. Processes in
/// other network namespaces or containers on the same kernel share it, which is why a local
/// socket is used only when its path is also visible here.
pub fn machine_id() -> Option<&'static str> {
    static MACHINE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    MACHINE
        .get_or_init(|| {
            let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
            let id = id.trim();
            (!id.is_empty()).then(|| id.to_string())
        })
        .as_deref()
}

/// `/basalt/volumes/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeRecord {
    #[serde(default = "format_version")]
    pub version: u32,
    /// The inode of the volume's head, the layer that takes its writes (`crate::inode`): it
    /// changes when a snapshot freezes the head and when a rollback replaces it.
    pub id: u64,
    pub name: String,
    pub pool: u32,
    pub size_bytes: u64,
    pub object_size_bytes: u32,
    /// The snapshot the head reads through to where it holds no data.
    #[serde(default)]
    pub parent: Option<Parent>,
    /// The head took over from a snapshot and waits for every OSD to drain the writes it
    /// admitted to the old one (ADR 0026): primaries acknowledge no write to it meanwhile, until
    /// the mon tells them it is sealed or this flag goes, and answer `Busy` if that takes too long.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sealing: bool,
    /// The head is being filled with every page it shows from the layers below it, after which
    /// it loses its parent (ADR 0035): no snapshot or rollback of the volume meanwhile.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flattening: bool,
    /// `deleting`: the volume is being removed; its objects are deleted in the background.
    #[serde(default)]
    pub flags: Vec<String>,
}

impl VolumeRecord {
    pub const FLAG_DELETING: &'static str = "deleting";

    pub fn is_deleting(&self) -> bool {
        self.flags.iter().any(|flag| flag == Self::FLAG_DELETING)
    }

    /// The inode number of volume `number` in `pool`, numbered before layers existed.
    pub fn inode(pool: u32, number: u64) -> u64 {
        crate::inode::unlayered(pool, number)
    }

    /// The pool an inode belongs to.
    pub fn pool_of(inode: u64) -> u32 {
        crate::inode::pool(inode)
    }
}

/// The layer a head or a snapshot reads through to, and how much of it shows through: the
/// parent's size when the child was made (zeros past it, whatever the parent held there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parent {
    /// `VOLUME@SNAP`.
    pub snapshot: String,
    pub inode: u64,
    pub size_bytes: u64,
}

/// `/basalt/snapshots/<volume>@<snapshot>`: a frozen layer of a volume's family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    #[serde(default = "format_version")]
    pub version: u32,
    pub volume: String,
    pub name: String,
    /// The layer the snapshot froze: the volume's head until then. No OSD takes a client's
    /// write to it.
    pub inode: u64,
    pub pool: u32,
    /// The volume's size when the snapshot was taken.
    pub size_bytes: u64,
    pub object_size_bytes: u32,
    #[serde(default)]
    pub parent: Option<Parent>,
    pub created_unix_ms: u64,
    /// Removed by its user but kept while a layer above reads through it: listed nowhere and
    /// opened by no one; its objects go with its volume.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden: bool,
    /// Its volume is being removed: the reaper deletes its objects, then the record.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleting: bool,
    /// The group snapshot it was taken in (its name is the group's), with the other volumes'
    /// snapshots of the same cut: they are removed together.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub grouped: bool,
}

impl SnapshotRecord {
    /// `VOLUME@SNAP`, as the CLI, the API and the NBD exports name it.
    pub fn full_name(&self) -> String {
        snapshot_name(&self.volume, &self.name)
    }
}

/// `/basalt/trash/<id>`: a volume removed to the trash with its snapshots, their records as they
/// were, its name free for another; restorable until `expires_unix_ms`, when the mon purges it
/// (ADR 0030). Its objects stay on the OSDs meanwhile, read by no one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrashRecord {
    #[serde(default = "format_version")]
    pub version: u32,
    pub volume: VolumeRecord,
    pub snapshots: Vec<SnapshotRecord>,
    pub trashed_unix_ms: u64,
    pub expires_unix_ms: u64,
}

impl TrashRecord {
    /// The entry's id: its volume's head inode, unique while it is in the trash.
    pub fn id(&self) -> u64 {
        self.volume.id
    }
}

/// What separates a volume's name from its snapshot's: `VOLUME@SNAP`.
pub const SNAPSHOT_SEPARATOR: char = '@';

pub fn snapshot_name(volume: &str, snapshot: &str) -> String {
    format!("{volume}{SNAPSHOT_SEPARATOR}{snapshot}")
}

/// `VOLUME@SNAP` split in two, if it has exactly one separator with a name on each side.
pub fn split_snapshot_name(full: &str) -> Option<(&str, &str)> {
    let (volume, snapshot) = full.split_once(SNAPSHOT_SEPARATOR)?;
    let named = !volume.is_empty() && !snapshot.is_empty() && !snapshot.contains(SNAPSHOT_SEPARATOR);
    named.then_some((volume, snapshot))
}

/// `/basalt/pg-history/<pool>/<pg>`: the sets a new primary must reach one member of
/// (`docs/design/peering.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgHistoryRecord {
    #[serde(default = "format_version")]
    pub version: u32,
    #[serde(flatten)]
    pub history: History,
}

/// `/basalt/mon/leader` (leased).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderRecord {
    #[serde(default = "format_version")]
    pub version: u32,
    pub mon: String,
    pub address: String,
}

/// `/basalt/counters/...`: the next id to hand out (a missing counter means 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    #[serde(default = "format_version")]
    pub version: u32,
    pub next: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_history_decodes_the_documented_shape() {
        let text = br#"{"version": 1, "clean": {"epoch": 5, "members": [3, 1, 4]}, "intervals": [{"epoch": 6, "members": [3, 1]}]}"#;
        let record: PgHistoryRecord = decode("/basalt/pg-history/1/7", text).expect("the documented shape");
        let clean = record.history.clean.as_ref().expect("a clean set");
        assert_eq!((clean.epoch, clean.members.as_slice()), (5, &[3, 1, 4][..]));
        assert_eq!(record.history.intervals.len(), 1);
        assert_eq!(decode::<PgHistoryRecord>("k", &encode(&record)).unwrap(), record);
        let never_clean: PgHistoryRecord = decode("k", br#"{"version": 1, "clean": null, "intervals": []}"#).unwrap();
        assert!(never_clean.history.required().next().is_none());
        assert!(decode::<PgHistoryRecord>("k", br#"{"version": 1, "clean": {"epoch": 5}, "intervals": []}"#).is_err());
    }

    #[test]
    fn pool_round_trips_in_the_documented_shape() {
        let text = r#"{"version": 1, "id": 1, "name": "ssd", "redundancy": {"replicated": 3}, "min_size": 2, "pg_count": 256,
 "failure_domain": "host", "osd_tags": ["ssd"], "primary_affinity_tag": null}"#;
        let pool: PoolRecord = decode("/basalt/config/pools/1", text.as_bytes()).expect("documented example decodes");
        assert_eq!(pool.redundancy, Redundancy::Replicated(3));
        assert_eq!(pool.failure_domain, FailureDomainName::Host);
        let again: PoolRecord = decode("k", &encode(&pool)).expect("round trip");
        assert_eq!(again, pool);
    }

    #[test]
    fn pg_table_decodes_the_documented_shape() {
        let text = r#"{"version": 1, "pool": 1, "table_epoch": 17, "pgs": [[5, [3, 1, 4]], [17, [2, 0, 5]]]}"#;
        let table: PgTableRecord = decode("k", text.as_bytes()).expect("decodes");
        assert_eq!(table.pgs[1], (17, vec![2, 0, 5]));
    }

    #[test]
    fn unknown_versions_and_garbage_are_named_errors() {
        let error = decode::<Counter>("/basalt/counters/osd-id", br#"{"version": 2, "next": 3}"#).unwrap_err();
        assert!(error.to_string().contains("/basalt/counters/osd-id") && error.to_string().contains("version 2"));
        let error = decode::<Counter>("/basalt/counters/osd-id", b"\xff").unwrap_err();
        assert!(matches!(error, RecordError::Invalid { .. }));
    }

    #[test]
    fn snapshot_names_split_only_with_one_separator_and_both_names() {
        assert_eq!(split_snapshot_name("vol@snap"), Some(("vol", "snap")));
        assert_eq!(snapshot_name("vol", "snap"), "vol@snap");
        for bad in ["vol", "@snap", "vol@", "a@b@c", ""] {
            assert_eq!(split_snapshot_name(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_volume_record_written_before_layers_decodes() {
        let text = br#"{"version": 1, "id": 72057594037927937, "name": "v", "pool": 1, "size_bytes": 4096,
 "object_size_bytes": 131072, "parent": null, "flags": []}"#;
        let volume: VolumeRecord = decode("/basalt/volumes/v", text).expect("an older record decodes");
        assert_eq!((&volume.parent, volume.sealing), (&None, false));
        assert!(!String::from_utf8(encode(&volume)).unwrap().contains("sealing"));
    }

    #[test]
    fn volume_inode_keeps_pool_in_top_bits() {
        assert_eq!(VolumeRecord::inode(1, 1), 72057594037927937);
        assert_eq!(VolumeRecord::inode(1, 1) >> 56, 1);
    }
}
