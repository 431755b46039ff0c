//! The JSON shapes of the HTTP API (`docs/design/api.md`), and how they are built from a
//! [`ClusterMap`].
//!
//! These types are the API's contract: the CLI deserializes them, so a field is added, never
//! renamed or retyped, without a new API version. They are built from records read from the
//! store at request time, never from a cache, so a read after a write sees the write.

use std::collections::{BTreeMap, BTreeSet};

use cluster::{ClusterMap, OsdRecord, PoolRecord, VolumeRecord};
use serde::{Deserialize, Serialize};

use crate::reaper::DeletionProgress;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaderView {
    pub mon: String,
    pub address: String,
}

/// `GET /cluster`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterView {
    pub cluster_id: String,
    pub object_size_bytes: u32,
    /// The metadata store URL clients and OSDs should use (`--meta`).
    pub meta_url: String,
    /// The mon that answered.
    pub mon: String,
    pub leader: Option<LeaderView>,
}

/// PG counts by state (`docs/design/peering.md`, "States"), as the PGs' primaries report them.
/// `active`: serving reads and writes; `clean`: active, every target member acting and holding
/// every object; `degraded`: active with fewer acting members than its target set;
/// `recovering`: active while members catch up; `peering`: its primary is bringing it up;
/// `inactive`: not serving (fewer than `min_size` members up, a recorded set unreachable, no
/// table yet); `unknown`: its primary did not answer the mon in time. `misplaced` counts the
/// PGs whose acting set still has members outside their target set (backfill under way, or
/// complete and waiting for the mon to drop the old members), whatever their state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgSummary {
    pub total: u64,
    pub active: u64,
    #[serde(default)]
    pub clean: u64,
    pub degraded: u64,
    #[serde(default)]
    pub peering: u64,
    #[serde(default)]
    pub recovering: u64,
    pub inactive: u64,
    #[serde(default)]
    pub unknown: u64,
    #[serde(default)]
    pub misplaced: u64,
    /// PGs whose primary failed at what it is doing (peering, a listing, a copy, the clean
    /// record) `wire::PgReport::STUCK_AFTER_FAILURES` times in a row or more, whatever their
    /// state.
    #[serde(default)]
    pub stuck: u64,
}

impl PgSummary {
    fn count(&mut self, pg: &PgView) {
        self.total += 1;
        if pg.is_active() {
            self.active += 1;
            if pg.is_undersized() {
                self.degraded += 1;
            }
        }
        if pg.is_misplaced() {
            self.misplaced += 1;
        }
        if pg.stuck {
            self.stuck += 1;
        }
        match pg.state.as_str() {
            "clean" => self.clean += 1,
            "recovering" => self.recovering += 1,
            "peering" => self.peering += 1,
            "inactive" => self.inactive += 1,
            "degraded" => {}
            _ => self.unknown += 1,
        }
    }
}

/// One PG, as `GET /pgs` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgView {
    pub pool: u32,
    pub pg: u32,
    pub epoch: u64,
    pub primary: Option<u32>,
    /// The members serving it now, primary first.
    pub acting: Vec<u32>,
    /// The OSDs placement chose for it.
    pub target: Vec<u32>,
    /// `clean`, `degraded`, `recovering`, `peering`, `inactive` or `unknown` (as [`PgSummary`]).
    pub state: String,
    /// Objects its primary still has to copy to members that lack them.
    pub objects_left: u64,
    /// Why an `inactive` PG does not serve, or why a stuck one's work keeps failing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Attempts in a row its primary's peering or recovery failed at.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failures: u32,
    /// `failures` reached `wire::PgReport::STUCK_AFTER_FAILURES`: its primary keeps trying,
    /// with pauses up to 10 s.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stuck: bool,
    /// Its last scrub, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrub: Option<PgScrubView>,
}

/// A PG's last scrub (`docs/design/scrub.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgScrubView {
    pub pool: u32,
    pub pg: u32,
    /// The newest `basalt scrub` request it answered; 0 for a scheduled scrub.
    pub request: u64,
    pub finished_unix_s: u64,
    pub objects: u64,
    /// Objects with a copy that was missing, older, unreadable or different.
    pub found: u64,
    pub repaired: u64,
    pub unrepairable: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

impl PgScrubView {
    pub fn of(pool: u32, pg: u32, record: &cluster::PgScrubRecord) -> PgScrubView {
        PgScrubView {
            pool,
            pg,
            request: record.request,
            finished_unix_s: record.finished_unix_s,
            objects: record.objects,
            found: record.found,
            repaired: record.repaired,
            unrepairable: record.unrepairable,
            errors: record.errors.clone(),
        }
    }
}

/// The last scrub of every PG, summed (`GET /status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubSummary {
    /// PGs scrubbed at least once.
    pub pgs_scrubbed: u64,
    pub found: u64,
    pub repaired: u64,
    pub unrepairable: u64,
    /// When the oldest of those last scrubs finished.
    pub oldest_unix_s: Option<u64>,
}

/// `POST /scrub`: what to scrub; at most one of the three, none for every PG.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScrubRequestBody {
    pub pool: Option<String>,
    /// `POOL_ID.PG`, as `basalt pg ls` names PGs.
    pub pg: Option<String>,
    pub volume: Option<String>,
}

/// `GET /scrub/{id}` (and the answer to `POST /scrub`): how far a requested scrub got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubProgressView {
    pub id: u64,
    pub pgs_total: u64,
    pub pgs_done: u64,
    pub objects: u64,
    pub found: u64,
    pub repaired: u64,
    pub unrepairable: u64,
    /// The PGs done, with their results.
    pub pgs: Vec<PgScrubView>,
}

impl PgView {
    /// Serving reads and writes.
    pub fn is_active(&self) -> bool {
        matches!(self.state.as_str(), "clean" | "degraded" | "recovering")
    }

    /// Some target member is not acting.
    pub fn is_undersized(&self) -> bool {
        self.target.iter().any(|osd| !self.acting.contains(osd))
    }

    /// Some acting member is outside the target set: an old member serving until backfill is done.
    pub fn is_misplaced(&self) -> bool {
        self.acting.iter().any(|osd| !self.target.contains(osd))
    }
}

/// `GET /pgs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PgList {
    pub pgs: Vec<PgView>,
}

/// What the up OSDs answered the mon: space usage, and the PGs each is the primary of.
#[derive(Debug, Clone, Default)]
pub struct OsdAnswers {
    pub used_bytes: BTreeMap<u32, u64>,
    pub total_bytes: BTreeMap<u32, u64>,
    /// Reports by PG, from the OSD that answered for it.
    pub pgs: BTreeMap<(u32, u32), (u32, wire::PgReport)>,
    /// Metadata-store writes of PG histories per OSD since it started.
    pub history_writes: BTreeMap<u32, u64>,
    /// Object data each OSD sent to members catching up or backfilling since it started.
    pub copied_bytes: BTreeMap<u32, u64>,
}

/// Every PG of `pool` with its state.
pub fn pg_views(pool: &PoolRecord, map: &ClusterMap, answers: &OsdAnswers) -> Vec<PgView> {
    let Some(table) = map.pg_tables.get(&pool.id) else {
        return (0..pool.pg_count)
            .map(|pg| PgView {
                pool: pool.id,
                pg,
                epoch: 0,
                primary: None,
                acting: Vec::new(),
                target: Vec::new(),
                state: "inactive".into(),
                objects_left: 0,
                reason: Some("the pool has no PG table yet".into()),
                failures: 0,
                stuck: false,
                scrub: None,
            })
            .collect();
    };
    (0..pool.pg_count)
        .map(|pg| {
            let (epoch, acting) = table.pgs.get(pg as usize).cloned().unwrap_or_default();
            let primary = acting.first().copied();
            let report = answers.pgs.get(&(pool.id, pg)).filter(|(osd, _)| Some(*osd) == primary).map(|(_, r)| r);
            let min_size = usize::from(pool.min_size.max(1));
            let target = table.target(pg as usize);
            let state = match report {
                _ if acting.len() < min_size => "inactive".to_string(),
                Some(report) if report.epoch == epoch => match wire::PgStateCode::from_u32(report.state) {
                    Some(code) => code.name().to_string(),
                    None => "unknown".to_string(),
                },
                // Its primary answered but has not caught up with this epoch yet.
                _ if primary.is_some_and(|osd| answers.history_writes.contains_key(&osd)) => "peering".to_string(),
                _ => "unknown".to_string(),
            };
            let current = report.filter(|report| report.epoch == epoch);
            let failures = current.map_or(0, |report| report.failures);
            let trouble = current.and_then(|report| wire::PgTrouble::from_u32(report.trouble));
            let stuck = current.is_some_and(wire::PgReport::is_stuck);
            let reason = match (state.as_str(), primary) {
                ("inactive", _) if acting.len() < min_size => Some(format!(
                    "{} of its {} OSDs up, fewer than min_size {}",
                    acting.len(),
                    target.len(),
                    pool.min_size
                )),
                ("inactive", Some(osd)) if trouble.is_some_and(|trouble| trouble != wire::PgTrouble::None) => {
                    let trouble = trouble.map_or("", wire::PgTrouble::describe);
                    Some(format!(
                        "its primary osd.{osd} cannot activate it: {trouble}, {failures} times in a row (osd.{osd}'s \
                         log has the details)"
                    ))
                }
                (_, Some(osd)) if stuck => {
                    let trouble = trouble.map_or("its work fails", wire::PgTrouble::describe);
                    Some(format!("stuck: {trouble}, {failures} times in a row (osd.{osd}'s log has the details)"))
                }
                ("inactive", Some(osd)) => Some(format!(
                    "its primary osd.{osd} cannot activate it: no member of a set that may hold acknowledged writes \
                     answered, or too few members did (osd.{osd}'s log names them)"
                )),
                _ => None,
            };
            PgView {
                pool: pool.id,
                pg,
                epoch,
                primary,
                target: target.to_vec(),
                acting,
                state,
                objects_left: current.map_or(0, |report| report.objects_left),
                reason,
                failures,
                stuck,
                scrub: None,
            }
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolView {
    pub id: u32,
    pub name: String,
    pub replicas: u8,
    pub min_size: u8,
    pub pg_count: u32,
    pub failure_domain: String,
    pub tags: Vec<String>,
    /// The published table's epoch; `null` until the leader has published one.
    pub table_epoch: Option<u64>,
    pub pgs: PgSummary,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolList {
    pub pools: Vec<PoolView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VolumeView {
    pub id: u64,
    pub name: String,
    /// The pool's name (`null` if the pool record is gone).
    pub pool: Option<String>,
    pub pool_id: u32,
    pub size_bytes: u64,
    pub object_size_bytes: u32,
    /// The snapshot its head reads through (`VOLUME@SNAP`).
    pub parent: Option<String>,
    /// Every layer its head reads through, top first (`GET /volumes/{name}` only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<crate::snapshot_views::ChainEntry>,
    /// `ready`, `sealing` (a snapshot was just taken; writes wait a moment), `flattening` or
    /// `deleting`.
    pub state: String,
    /// Object removal progress while `deleting`, when the answering mon is the one deleting.
    pub deletion: Option<DeletionProgress>,
    /// Flatten progress while `flattening`, when the answering mon is the one flattening.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flatten: Option<crate::flatten::FlattenProgress>,
    /// Whether its data has every copy (`GET /volumes/{name}` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redundancy: Option<RedundancyView>,
}

/// Whether a volume's data has every copy (`docs/design/backfill.md`, "Redundancy").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedundancyView {
    /// `intact`: every PG of its pool clean (every object has all its copies); `at_risk`: some
    /// object has fewer copies than the pool's size, or some PG's primary did not answer;
    /// `unavailable`: some PG of its pool does not serve.
    pub state: String,
    pub pgs_total: u64,
    pub pgs_clean: u64,
    pub pgs_inactive: u64,
    /// The volume's objects, as the primaries that answered hold them.
    pub objects: u64,
    /// Those with fewer copies than the pool's size.
    pub degraded_objects: u64,
    /// Up OSDs that did not answer (their PGs' objects are not counted).
    pub osds_not_answering: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VolumeList {
    pub volumes: Vec<VolumeView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OsdView {
    pub id: u32,
    pub up: bool,
    /// Running, but marked down because its peers cannot reach it (ADR 0015): in no PG.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub marked_down: bool,
    /// Out: placement gives it no PGs (`basalt osd out`, or down past `down_out_interval`).
    #[serde(default)]
    pub out: bool,
    /// The address of the running OSD; `null` while it is down.
    pub address: Option<String>,
    pub host: String,
    pub rack: String,
    pub tags: Vec<String>,
    pub weight: f64,
    pub capacity_bytes: u64,
    /// PGs the OSD is a member of, over every pool.
    pub pgs: u64,
    /// PGs the OSD is the primary of.
    pub primary_pgs: u64,
}

/// `PATCH /config`: the settings to change, each optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettingsChange {
    pub down_out_interval_s: Option<u64>,
    pub recovery_bytes_per_s_max: Option<u64>,
    pub recovery_bytes_per_s_min: Option<u64>,
    pub recovery_latency_ratio_percent: Option<u32>,
    pub recovery_in_flight_max: Option<u32>,
    pub scrub_interval_s: Option<u64>,
    pub nearfull_ratio_percent: Option<u32>,
    pub full_ratio_percent: Option<u32>,
    pub snapshot_chain_max: Option<u32>,
    pub trash_retention_s: Option<u64>,
}

/// `POST /osds/{id}/reweight`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReweightRequest {
    pub weight: f64,
}

/// The answer to `POST /osds/{id}/stop` and `/start` (`basalt dev`'s OSDs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalOsdView {
    pub osd: u32,
    pub running: bool,
}

/// The answer to `POST /osds/{id}/down-report`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DownReportView {
    pub osd: u32,
    /// The OSD has no liveness key any more.
    pub down: bool,
    /// This report made the mon revoke its lease.
    pub revoked: bool,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OsdList {
    pub osds: Vec<OsdView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostView {
    pub name: String,
    pub osds: Vec<OsdView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RackView {
    pub name: String,
    pub hosts: Vec<HostView>,
}

/// `GET /osds/tree`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OsdTree {
    pub racks: Vec<RackView>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdCounts {
    pub up: u64,
    pub total: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    /// The sum of every registered OSD's capacity.
    pub total_bytes: u64,
    /// What the up OSDs that reported their usage hold; `null`: none has reported yet.
    pub used_bytes: Option<u64>,
    /// Up OSDs whose usage `used_bytes` includes (an OSD reports a few seconds after it starts).
    #[serde(default)]
    pub reporting_osds: u64,
}

/// An OSD that is down, since when (as the answering mon saw it go: Unix seconds), and whether
/// it is out or when it will be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdDownView {
    pub id: u32,
    pub since_unix_s: u64,
    #[serde(default)]
    pub out: bool,
    /// Seconds until the mon marks it out (`down_out_interval`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_in_s: Option<u64>,
    /// Why the mon keeps it in although its interval is over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_in: Option<String>,
    /// Running, but marked down because its peers cannot reach it (ADR 0015).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub marked_down: bool,
}

/// Objects still to copy to members that lack them, over every PG, and how fast that goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RecoveryView {
    pub objects_left: u64,
    /// At most: objects counted whole, though a member back from a short outage receives only
    /// the pages that changed.
    pub bytes_left: u64,
    /// The primaries' copy rates over the last 30 s, summed, as the answering mon saw them at
    /// its statuses; `null` before one made progress.
    pub bytes_per_s: Option<f64>,
    /// The longest of the primaries' own times left.
    pub seconds_left: Option<f64>,
}

/// What the trash holds, in `GET /status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrashSummary {
    pub volumes: u64,
    pub provisioned_bytes: u64,
}

/// `GET /status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusView {
    pub cluster_id: String,
    pub leader: Option<LeaderView>,
    pub osds: OsdCounts,
    #[serde(default)]
    pub osds_down: Vec<OsdDownView>,
    pub pools: u64,
    pub volumes: u64,
    /// Volumes in the trash (ADR 0030), and the provisioned bytes they hold until purged.
    #[serde(default)]
    pub trash: TrashSummary,
    /// The volumes being flattened, with their progress when the answering mon runs them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flattening: Vec<FlatteningView>,
    pub pgs: PgSummary,
    #[serde(default)]
    pub recovery: RecoveryView,
    #[serde(default)]
    pub scrub: ScrubSummary,
    /// Metadata-store writes of PG histories, summed over the up OSDs that answered, since each
    /// started.
    #[serde(default)]
    pub pg_history_writes: u64,
    /// Object data the up OSDs that answered sent to members catching up or backfilling, since
    /// each started: whole objects, or only the pages that changed while a member was away.
    #[serde(default)]
    pub copied_bytes: u64,
    pub capacity: Capacity,
    /// The OSDs at or past the near-full ratio, fullest first.
    #[serde(default)]
    pub osds_full: Vec<OsdFullView>,
    /// Set when the mon could not read the metadata store (it lost its quorum, or this mon is
    /// cut off from it): why, and that the rest is the mon's last view of the cluster map.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_error: Option<String>,
}

/// A volume being flattened (ADR 0035).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlatteningView {
    pub volume: String,
    pub progress: Option<crate::flatten::FlattenProgress>,
}

/// An OSD whose drive is near full or full (`nearfull_ratio_percent`, `full_ratio_percent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdFullView {
    pub id: u32,
    pub used_percent: u32,
    /// `full`: it takes no new objects; `nearfull`: a warning.
    pub state: String,
}

/// The body of every error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorView {
    pub error: String,
}

/// The OSDs that answered with a usage at or past the near-full ratio, fullest first.
fn osds_full(map: &ClusterMap, answers: &OsdAnswers) -> Vec<OsdFullView> {
    let (nearfull, full) = (map.settings.nearfull_ratio_percent, map.settings.full_ratio_percent);
    let mut views: Vec<OsdFullView> = answers
        .used_bytes
        .iter()
        .filter_map(|(&id, &used)| {
            let total = *answers.total_bytes.get(&id).filter(|total| **total > 0)?;
            let used_percent = u32::try_from(used.min(total) * 100 / total).expect("at most 100");
            let state = match used_percent {
                percent if percent >= full => "full",
                percent if percent >= nearfull => "nearfull",
                _ => return None,
            };
            Some(OsdFullView { id, used_percent, state: state.to_string() })
        })
        .collect();
    views.sort_by_key(|view| (std::cmp::Reverse(view.used_percent), view.id));
    views
}

/// Sums the PGs' last scrubs.
fn scrub_summary(pgs: &[PgView]) -> ScrubSummary {
    let mut summary = ScrubSummary::default();
    for scrub in pgs.iter().filter_map(|pg| pg.scrub.as_ref()) {
        summary.pgs_scrubbed += 1;
        summary.found += scrub.found;
        summary.repaired += scrub.repaired;
        summary.unrepairable += scrub.unrepairable;
        summary.oldest_unix_s =
            Some(summary.oldest_unix_s.map_or(scrub.finished_unix_s, |t| t.min(scrub.finished_unix_s)));
    }
    summary
}

/// Every PG of every pool with its state, in pool and PG order.
pub fn all_pg_views(map: &ClusterMap, answers: &OsdAnswers) -> Vec<PgView> {
    map.pools.values().flat_map(|pool| pg_views(pool, map, answers)).collect()
}

/// Counts PGs by state.
pub fn pg_summary(pgs: &[PgView]) -> PgSummary {
    let mut summary = PgSummary::default();
    for pg in pgs {
        summary.count(pg);
    }
    summary
}

pub fn pool_view(pool: &PoolRecord, map: &ClusterMap, answers: &OsdAnswers) -> PoolView {
    let table = map.pg_tables.get(&pool.id);
    PoolView {
        id: pool.id,
        name: pool.name.clone(),
        replicas: pool.redundancy.copies(),
        min_size: pool.min_size,
        pg_count: pool.pg_count,
        failure_domain: pool.failure_domain.to_string(),
        tags: pool.osd_tags.iter().cloned().collect(),
        table_epoch: table.map(|table| table.table_epoch),
        pgs: pg_summary(&pg_views(pool, map, answers)),
    }
}

pub fn volume_view(
    volume: &VolumeRecord,
    map: &ClusterMap,
    deletion: Option<DeletionProgress>,
    flatten: Option<crate::flatten::FlattenProgress>,
) -> VolumeView {
    VolumeView {
        id: volume.id,
        name: volume.name.clone(),
        pool: map.pools.get(&volume.pool).map(|pool| pool.name.clone()),
        pool_id: volume.pool,
        size_bytes: volume.size_bytes,
        object_size_bytes: volume.object_size_bytes,
        parent: volume.parent.as_ref().map(|parent| parent.snapshot.clone()),
        chain: Vec::new(),
        state: if volume.is_deleting() {
            "deleting"
        } else if volume.sealing {
            "sealing"
        } else if volume.flattening {
            "flattening"
        } else {
            "ready"
        }
        .to_string(),
        deletion: if volume.is_deleting() { deletion } else { None },
        flatten: if volume.flattening { flatten } else { None },
        redundancy: None,
    }
}

/// Every registered OSD, in id order, with its PG counts over every pool.
pub fn osd_views(map: &ClusterMap) -> Vec<OsdView> {
    let mut pgs: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for table in map.pg_tables.values() {
        for (_, members) in &table.pgs {
            for (position, osd) in members.iter().enumerate() {
                let counts = pgs.entry(*osd).or_default();
                counts.0 += 1;
                if position == 0 {
                    counts.1 += 1;
                }
            }
        }
    }
    map.osds.values().map(|osd| osd_view(osd, map, pgs.get(&osd.id).copied().unwrap_or_default())).collect()
}

fn osd_view(osd: &OsdRecord, map: &ClusterMap, (pgs, primary_pgs): (u64, u64)) -> OsdView {
    let live = map.live.get(&osd.id);
    OsdView {
        id: osd.id,
        up: map.is_up(osd.id),
        marked_down: map.is_marked_down(osd.id),
        out: osd.out,
        address: live.map(|live| live.address.clone()),
        host: osd.host.clone(),
        rack: osd.rack.clone(),
        tags: osd.tags.iter().cloned().collect(),
        weight: osd.weight,
        capacity_bytes: osd.capacity_bytes,
        pgs,
        primary_pgs,
    }
}

/// OSDs grouped by rack, then host, names sorted.
pub fn osd_tree(map: &ClusterMap) -> OsdTree {
    let mut racks: BTreeMap<String, BTreeMap<String, Vec<OsdView>>> = BTreeMap::new();
    for osd in osd_views(map) {
        racks.entry(osd.rack.clone()).or_default().entry(osd.host.clone()).or_default().push(osd);
    }
    OsdTree {
        racks: racks
            .into_iter()
            .map(|(name, hosts)| RackView {
                name,
                hosts: hosts.into_iter().map(|(name, osds)| HostView { name, osds }).collect(),
            })
            .collect(),
    }
}

/// `answers`: what the up OSDs answered the mon (only up OSDs' usage counts); `pgs`: every
/// PG ([`all_pg_views`]).
pub fn status_view(
    cluster_id: String,
    leader: Option<LeaderView>,
    map: &ClusterMap,
    answers: &OsdAnswers,
    pgs: &[PgView],
    osds_down: Vec<OsdDownView>,
    recovery: RecoveryView,
) -> StatusView {
    let summary = pg_summary(pgs);
    let up: BTreeSet<u32> = map.osds.keys().filter(|id| map.is_up(**id)).copied().collect();
    let reports: Vec<u64> = up.iter().filter_map(|id| answers.used_bytes.get(id).copied()).collect();
    let reporting = reports.len() as u64;
    StatusView {
        cluster_id,
        leader,
        osds: OsdCounts { up: up.len() as u64, total: map.osds.len() as u64 },
        osds_down,
        pools: map.pools.len() as u64,
        volumes: map.volumes.len() as u64,
        trash: TrashSummary {
            volumes: map.trash.len() as u64,
            provisioned_bytes: map.trash.values().map(|entry| entry.volume.size_bytes).sum(),
        },
        flattening: map
            .volumes
            .values()
            .filter(|volume| volume.flattening)
            .map(|volume| FlatteningView { volume: volume.name.clone(), progress: None })
            .collect(),
        scrub: scrub_summary(pgs),
        pgs: summary,
        recovery,
        pg_history_writes: up.iter().filter_map(|id| answers.history_writes.get(id)).sum(),
        copied_bytes: up.iter().filter_map(|id| answers.copied_bytes.get(id)).sum(),
        capacity: Capacity {
            total_bytes: map.osds.values().map(|osd| osd.capacity_bytes).sum(),
            used_bytes: (reporting > 0).then(|| reports.iter().sum()),
            reporting_osds: reporting,
        },
        osds_full: osds_full(map, answers),
        store_error: None,
    }
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cluster::ClusterMap;

    use super::{pg_views, status_view, OsdAnswers, PgSummary, RecoveryView};

    fn map(osds: &[u32], live: &[u32]) -> ClusterMap {
        let mut map = ClusterMap::default();
        for &id in osds {
            map.osds.insert(id, crate::test_maps::osd(id, &format!("h{id}"), "r"));
        }
        for &id in live {
            map.live.insert(id, crate::test_maps::live(id, 1));
        }
        map
    }

    #[test]
    fn status_sums_the_usage_reported_by_up_osds_only() {
        let map = map(&[1, 2, 3], &[1, 2]);
        let view = |used_bytes: BTreeMap<u32, u64>| {
            let answers = OsdAnswers { used_bytes, ..OsdAnswers::default() };
            status_view("c".into(), None, &map, &answers, &[], Vec::new(), RecoveryView::default()).capacity
        };
        let none = view(BTreeMap::new());
        assert_eq!((none.total_bytes, none.used_bytes, none.reporting_osds), (3 << 30, None, 0));
        // OSD 3 is down (say it answered just before its lease ran out): it is not counted.
        let stats = BTreeMap::from([(1, 10 << 20), (3, 500 << 20)]);
        let partial = view(stats);
        assert_eq!((partial.used_bytes, partial.reporting_osds), (Some(10 << 20), 1));
        let stats = BTreeMap::from([(1, 10 << 20), (2, 20 << 20), (3, 500 << 20)]);
        let all = view(stats);
        assert_eq!((all.used_bytes, all.reporting_osds), (Some(30 << 20), 2));
    }

    #[test]
    fn a_pg_whose_primary_keeps_failing_is_stuck_with_why() {
        let pool = cluster::PoolRecord {
            version: 1,
            id: 1,
            name: "p".into(),
            redundancy: cluster::Redundancy::Replicated(2),
            min_size: 1,
            pg_count: 2,
            failure_domain: cluster::FailureDomainName::Host,
            osd_tags: Default::default(),
            primary_affinity_tag: None,
        };
        let mut map = map(&[1, 2], &[1, 2]);
        let table = cluster::PgTableRecord {
            version: 1,
            pool: 1,
            table_epoch: 3,
            pgs: vec![(3, vec![1, 2]), (3, vec![2, 1])],
            targets: Vec::new(),
        };
        map.pg_tables.insert(1, table);
        let report = |pg, failures| wire::PgReport {
            pg: wire::PgId { pool: 1, pg },
            epoch: 3,
            state: wire::PgStateCode::Recovering as u32,
            members_unlisted: 0,
            objects_left: 9,
            trouble: wire::PgTrouble::Copy as u32,
            failures,
        };
        let answers = OsdAnswers {
            pgs: BTreeMap::from([((1, 0), (1, report(0, 5))), ((1, 1), (2, report(1, 4)))]),
            ..OsdAnswers::default()
        };
        let views = pg_views(&pool, &map, &answers);
        assert!(views[0].stuck && views[0].failures == 5, "{:?}", views[0]);
        let reason = views[0].reason.as_deref().unwrap_or_default();
        assert!(reason.starts_with("stuck: copying an object") && reason.contains("osd.1's log"), "{reason}");
        // Four failures in a row are not stuck yet.
        assert!(!views[1].stuck && views[1].reason.is_none(), "{:?}", views[1]);
        let mut summary = PgSummary::default();
        views.iter().for_each(|view| summary.count(view));
        assert_eq!(summary.stuck, 1);
    }
}
