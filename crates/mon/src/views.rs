//! The JSON shapes of the HTTP API (`docs/design/api.md`), and how they are built from a
//! [`ClusterMap`].
//!
//! These types are the API's contract: the CLI deserializes them, so a field is added, never
//! renamed or retyped, without a new API version. They are built from records read from the
//! store at request time, never from a cache, so a read after a write sees the write.

use std::collections::{BTreeMap, BTreeSet};

use cluster::{ClusterMap, OsdRecord, PgTableRecord, PoolRecord, VolumeRecord};
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

/// PG counts by state. `active`: every member up and the PG at full size; `degraded`: fewer up
/// than the pool's size but at least `min_size`; `inactive`: fewer than `min_size` up, or no
/// table published yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgSummary {
    pub total: u64,
    pub active: u64,
    pub degraded: u64,
    pub inactive: u64,
}

impl PgSummary {
    fn add(&mut self, other: PgSummary) {
        self.total += other.total;
        self.active += other.active;
        self.degraded += other.degraded;
        self.inactive += other.inactive;
    }
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
    pub parent: Option<String>,
    /// `ready` or `deleting`.
    pub state: String,
    /// Object removal progress while `deleting`, when the answering mon is the one deleting.
    pub deletion: Option<DeletionProgress>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VolumeList {
    pub volumes: Vec<VolumeView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OsdView {
    pub id: u32,
    pub up: bool,
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

/// `GET /status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusView {
    pub cluster_id: String,
    pub leader: Option<LeaderView>,
    pub osds: OsdCounts,
    pub pools: u64,
    pub volumes: u64,
    pub pgs: PgSummary,
    pub capacity: Capacity,
}

/// The body of every error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorView {
    pub error: String,
}

/// Counts a pool's PGs by state.
pub fn pg_summary(pool: &PoolRecord, table: Option<&PgTableRecord>, map: &ClusterMap) -> PgSummary {
    let size = usize::from(pool.redundancy.copies());
    let min_size = usize::from(pool.min_size);
    let mut summary = PgSummary { total: u64::from(pool.pg_count), ..PgSummary::default() };
    let Some(table) = table else {
        summary.inactive = summary.total;
        return summary;
    };
    for (_, members) in table.pgs.iter().take(pool.pg_count as usize) {
        let up_count = members.iter().filter(|osd| map.live.contains_key(osd)).count();
        if up_count == size && members.len() == size {
            summary.active += 1;
        } else if up_count >= min_size && up_count > 0 {
            summary.degraded += 1;
        } else {
            summary.inactive += 1;
        }
    }
    // A table shorter than the pool (never written so by the mon) leaves PGs without members.
    summary.inactive += summary.total - summary.active - summary.degraded - summary.inactive;
    summary
}

pub fn pool_view(pool: &PoolRecord, map: &ClusterMap) -> PoolView {
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
        pgs: pg_summary(pool, table, map),
    }
}

pub fn volume_view(volume: &VolumeRecord, map: &ClusterMap, deletion: Option<DeletionProgress>) -> VolumeView {
    VolumeView {
        id: volume.id,
        name: volume.name.clone(),
        pool: map.pools.get(&volume.pool).map(|pool| pool.name.clone()),
        pool_id: volume.pool,
        size_bytes: volume.size_bytes,
        object_size_bytes: volume.object_size_bytes,
        parent: volume.parent.clone(),
        state: if volume.is_deleting() { "deleting" } else { "ready" }.to_string(),
        deletion: if volume.is_deleting() { deletion } else { None },
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
        up: live.is_some(),
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

/// `used_bytes`: what each OSD that answered the mon holds; only up OSDs count.
pub fn status_view(
    cluster_id: String,
    leader: Option<LeaderView>,
    map: &ClusterMap,
    used_bytes: &BTreeMap<u32, u64>,
) -> StatusView {
    let mut pgs = PgSummary::default();
    for pool in map.pools.values() {
        pgs.add(pg_summary(pool, map.pg_tables.get(&pool.id), map));
    }
    let up: BTreeSet<u32> = map.osds.keys().filter(|id| map.live.contains_key(id)).copied().collect();
    let reports: Vec<u64> = up.iter().filter_map(|id| used_bytes.get(id).copied()).collect();
    let reporting = reports.len() as u64;
    StatusView {
        cluster_id,
        leader,
        osds: OsdCounts { up: up.len() as u64, total: map.osds.len() as u64 },
        pools: map.pools.len() as u64,
        volumes: map.volumes.len() as u64,
        pgs,
        capacity: Capacity {
            total_bytes: map.osds.values().map(|osd| osd.capacity_bytes).sum(),
            used_bytes: (reporting > 0).then(|| reports.iter().sum()),
            reporting_osds: reporting,
        },
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use cluster::{ClusterMap, OsdLiveRecord, OsdRecord};

    use super::status_view;

    fn map(osds: &[u32], live: &[u32]) -> ClusterMap {
        let mut map = ClusterMap::default();
        for &id in osds {
            let record = OsdRecord {
                version: 1,
                id,
                host: format!("h{id}"),
                rack: "r".into(),
                tags: BTreeSet::new(),
                weight: 1.0,
                capacity_bytes: 1 << 30,
            };
            map.osds.insert(id, record);
        }
        for &id in live {
            map.live.insert(
                id,
                OsdLiveRecord { version: 1, address: format!("127.0.0.1:{id}"), incarnation: 1, local: None },
            );
        }
        map
    }

    #[test]
    fn status_sums_the_usage_reported_by_up_osds_only() {
        let map = map(&[1, 2, 3], &[1, 2]);
        let none = status_view("c".into(), None, &map, &BTreeMap::new()).capacity;
        assert_eq!((none.total_bytes, none.used_bytes, none.reporting_osds), (3 << 30, None, 0));
        // OSD 3 is down (say it answered just before its lease ran out): it is not counted.
        let stats = BTreeMap::from([(1, 10 << 20), (3, 500 << 20)]);
        let partial = status_view("c".into(), None, &map, &stats).capacity;
        assert_eq!((partial.used_bytes, partial.reporting_osds), (Some(10 << 20), 1));
        let stats = BTreeMap::from([(1, 10 << 20), (2, 20 << 20), (3, 500 << 20)]);
        let all = status_view("c".into(), None, &map, &stats).capacity;
        assert_eq!((all.used_bytes, all.reporting_osds), (Some(30 << 20), 2));
    }
}
