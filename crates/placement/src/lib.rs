//! Placement: computes a pool's placement-group table from the OSD map, moving as little as possible.
//!
//! The mon calls [`compute`] when a pool is created and [`compute_degraded`] whenever the OSD map
//! changes, passing the table it stored last time. The result maps every PG of the pool to an
//! ordered OSD set, primary first. Three properties hold, in this order of priority:
//!
//! 1. Separation: no two members of a PG share a failure domain (OSD, host or rack).
//! 2. Balance: each OSD holds replica slots, and separately primary roles, in proportion to its
//!    weight, within one slot of its target whenever the failure domains allow it.
//! 3. Stability: members and primaries that are still valid stay where they are; only the slots
//!    needed to restore balance move.
//!
//! The algorithm (see `docs/design/placement.md` and `docs/adr/0004-placement.md`) keeps every
//! still-valid member of the previous table, fills empty slots from the OSDs furthest below
//! their target (a PG with no surviving member is filled by weighted rendezvous hashing), then
//! moves single slots from over-target to under-target OSDs until no move improves the balance.
//! Primaries are chosen afterwards and balanced by reordering members only, which moves no data.
//!
//! The code is deterministic: no clocks, threads, I/O or randomness, only arithmetic on its
//! inputs, and the output does not depend on the order of the OSD slice.

mod cluster;
mod hash;
mod layout;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::fmt;

/// The identifier of one OSD (one drive), unique in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OsdId(pub u32);

impl fmt::Display for OsdId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "osd.{}", self.0)
    }
}

/// What placement needs to know about one OSD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsdInfo {
    pub id: OsdId,
    /// The machine the drive is in. Host names are cluster-wide: two OSDs with the same host name
    /// share a host even if their racks differ.
    pub host: String,
    /// The rack the host is in.
    pub rack: String,
    /// Device classes and other labels (`ssd`, `hdd`, ...). A pool uses an OSD only if the OSD has
    /// every tag of the pool.
    pub tags: BTreeSet<String>,
    /// The placement weight, normally the drive's capacity. Only ratios matter. An OSD with weight
    /// 0 is never chosen (the way to drain it).
    pub weight_bytes: u64,
    /// Whether the OSD may hold PGs. The mon should clear it only once the OSD is declared out
    /// (after its grace period), since every change of this flag moves data.
    pub up: bool,
}

/// The unit of which a PG may have at most one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailureDomain {
    Osd,
    Host,
    Rack,
}

impl FailureDomain {
    fn plural(self) -> &'static str {
        match self {
            FailureDomain::Osd => "osds",
            FailureDomain::Host => "hosts",
            FailureDomain::Rack => "racks",
        }
    }
}

impl fmt::Display for FailureDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailureDomain::Osd => "osd",
            FailureDomain::Host => "host",
            FailureDomain::Rack => "rack",
        })
    }
}

/// The part of a pool's definition that placement depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSpec {
    /// Mixed into every hash, so that pools with the same spec get different layouts.
    pub pool_id: u32,
    /// The number of PGs; the table has exactly this many rows.
    pub pg_count: u32,
    /// The number of copies of each object (the pool's `size` in Ceph terms).
    pub replica_count: u8,
    pub failure_domain: FailureDomain,
    /// An OSD is eligible only if it has all of these tags.
    pub tags: BTreeSet<String>,
}

/// A pool's placement: row `pg` lists the OSDs of PG `pg`, primary first.
///
/// Members are distinct and belong to distinct failure domains. Rows have `replica_count` members,
/// or fewer when [`compute_degraded`] could not find enough failure domains.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PgTable {
    pub pgs: Vec<Vec<OsdId>>,
}

/// Why a pool cannot be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("pool pg_count is 0, it must be at least 1")]
    ZeroPgCount,
    #[error("pool replica_count is 0, it must be at least 1")]
    ZeroReplicaCount,
    #[error("{osd} appears more than once in the osd map")]
    DuplicateOsd { osd: OsdId },
    #[error(
        "no eligible osd: of {osd_count} osds, {up_count} are up, {usable_count} are up with nonzero weight, \
         and none of those has all pool tags {tags:?}"
    )]
    NoEligibleOsd { osd_count: usize, up_count: usize, usable_count: usize, tags: Vec<String> },
    #[error(
        "pool needs {needed_count} distinct {}, only {available_count} {} eligible osds",
        .failure_domain.plural(),
        if *.available_count == 1 { format!("{} has", .failure_domain) } else { format!("{} have", .failure_domain.plural()) }
    )]
    NotEnoughFailureDomains { needed_count: u8, available_count: usize, failure_domain: FailureDomain },
}

/// Computes the PG table of a new or existing pool, requiring `replica_count` failure domains.
///
/// `previous` is the pool's current table, if any: members that are still eligible stay, and only
/// what the OSD map change requires moves. Pass `None` when creating the pool. A previous table
/// with a different number of rows is accepted: extra rows are dropped and new rows are placed
/// from scratch.
///
/// Fails when fewer than `replica_count` failure domains have eligible OSDs: the mon refuses to
/// create such a pool. Use [`compute_degraded`] for a pool that already exists.
pub fn compute(spec: &PoolSpec, osds: &[OsdInfo], previous: Option<&PgTable>) -> Result<PgTable, PlacementError> {
    compute_with(spec, osds, previous, false)
}

/// Like [`compute`], but when fewer than `replica_count` failure domains have eligible OSDs, gives
/// every PG one member per available failure domain instead of failing.
///
/// This is the variant for an existing pool after OSDs went down: a PG with fewer members stays
/// readable and writable if `min_size` allows, while a PG with none is unavailable. It still fails
/// when no OSD at all is eligible; the mon then keeps the previous table (every PG is inactive).
pub fn compute_degraded(
    spec: &PoolSpec,
    osds: &[OsdInfo],
    previous: Option<&PgTable>,
) -> Result<PgTable, PlacementError> {
    compute_with(spec, osds, previous, true)
}

fn compute_with(
    spec: &PoolSpec,
    osds: &[OsdInfo],
    previous: Option<&PgTable>,
    allow_degraded: bool,
) -> Result<PgTable, PlacementError> {
    let cluster = cluster::Cluster::new(spec, osds)?;
    let members_per_pg = usize::from(spec.replica_count).min(cluster.domain_count);
    if members_per_pg < usize::from(spec.replica_count) && !allow_degraded {
        return Err(PlacementError::NotEnoughFailureDomains {
            needed_count: spec.replica_count,
            available_count: cluster.domain_count,
            failure_domain: spec.failure_domain,
        });
    }
    let mut layout = layout::Layout::new(&cluster, spec, members_per_pg, previous);
    layout.fill();
    layout.balance_replicas();
    layout.choose_primaries();
    layout.balance_primaries();
    Ok(layout.into_table())
}
