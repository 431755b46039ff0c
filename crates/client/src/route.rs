//! Volume bytes to pieces to PGs to primaries: the pure part of the data path.
//!
//! [`pieces`] cuts a call into per-object pieces and gives each its PG; it depends only on the
//! volume (`inode`, object size) and the pool's PG count, so a piece keeps its PG across
//! retries. [`route`] finds the PG's epoch and primary in one cluster map; it is what changes
//! between attempts.

use cluster::{layout, ClusterMap};
use wire::PgId;

/// One object's share of a volume call: one wire request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    pub pg: PgId,
    pub stripe: u64,
    /// Where the piece starts in the volume.
    pub offset_bytes: u64,
    pub length_bytes: u32,
    /// Where the piece starts in the call's buffer.
    pub offset_in_request: u64,
    /// The piece covers its whole object.
    pub whole_object: bool,
}

/// Cuts `[offset_bytes, offset_bytes + length_bytes)` of volume `inode` into per-object pieces,
/// in order.
pub(crate) fn pieces(
    inode: u64,
    pool: u32,
    pg_count: u32,
    object_size_bytes: u32,
    offset_bytes: u64,
    length_bytes: u64,
) -> impl Iterator<Item = Piece> {
    layout::split(offset_bytes, length_bytes, object_size_bytes).map(move |object| Piece {
        pg: PgId { pool, pg: layout::object_pg(inode, object.stripe, pg_count) },
        stripe: object.stripe,
        offset_bytes: object.stripe * u64::from(object_size_bytes) + u64::from(object.offset_in_object),
        length_bytes: object.length,
        offset_in_request: object.offset_in_request,
        whole_object: object.length == object_size_bytes,
    })
}

pub(crate) use cluster::Route;

/// The epoch and running primary of `pg` in `map`, or why there is none.
pub(crate) fn route(map: &ClusterMap, pg: PgId) -> Result<Route<'_>, String> {
    map.route(pg.pool, pg.pg)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use cluster::{OsdLiveRecord, PgTableRecord};

    use super::*;

    const KIB: u64 = 1024;

    /// Pieces as `(pg, stripe, offset_bytes, length_bytes, offset_in_request, whole_object)`.
    fn check(offset_bytes: u64, length_bytes: u64, object_size_bytes: u32, expect: &[(u32, u64, u64, u32, u64, bool)]) {
        let inode = cluster::VolumeRecord::inode(1, 5);
        let actual: Vec<_> = pieces(inode, 1, 64, object_size_bytes, offset_bytes, length_bytes)
            .map(|piece| {
                assert_eq!(piece.pg.pool, 1);
                assert_eq!(piece.pg.pg, layout::object_pg(inode, piece.stripe, 64));
                (
                    piece.pg.pg,
                    piece.stripe,
                    piece.offset_bytes,
                    piece.length_bytes,
                    piece.offset_in_request,
                    piece.whole_object,
                )
            })
            .collect();
        assert_eq!(actual, expect);
    }

    #[test]
    fn calls_are_cut_at_object_boundaries_and_keep_their_buffer_offsets() {
        let inode = cluster::VolumeRecord::inode(1, 5);
        let pg = |stripe| layout::object_pg(inode, stripe, 64);
        // Inside one object.
        check(8 * KIB, 4 * KIB, 128 * KIB as u32, &[(pg(0), 0, 8 * KIB, 4096, 0, false)]);
        // A whole object.
        check(128 * KIB, 128 * KIB, 128 * KIB as u32, &[(pg(1), 1, 128 * KIB, 128 * 1024, 0, true)]);
        // Across three objects: the middle one is whole.
        check(
            124 * KIB,
            232 * KIB,
            128 * KIB as u32,
            &[
                (pg(0), 0, 124 * KIB, 4096, 0, false),
                (pg(1), 1, 128 * KIB, 128 * 1024, 4 * KIB, true),
                (pg(2), 2, 256 * KIB, 100 * 1024, 132 * KIB, false),
            ],
        );
        check(0, 0, 4096, &[]);
    }

    #[test]
    fn runs_of_objects_share_a_pg_and_later_runs_spread() {
        let inode = cluster::VolumeRecord::inode(1, 5);
        let object_size_bytes = 4096u32;
        let run_bytes = layout::OBJECTS_PER_RUN * u64::from(object_size_bytes);
        let all: Vec<Piece> = pieces(inode, 1, 64, object_size_bytes, 0, run_bytes * 64).collect();
        assert_eq!(all.len() as u64, layout::OBJECTS_PER_RUN * 64);
        for run in all.chunks(layout::OBJECTS_PER_RUN as usize) {
            assert!(run.iter().all(|piece| piece.pg == run[0].pg));
        }
        let distinct: BTreeSet<u32> = all.iter().map(|piece| piece.pg.pg).collect();
        assert!(distinct.len() > 20, "64 runs over 64 PGs use many PGs, got {}", distinct.len());
    }

    fn map(pgs: Vec<(u64, Vec<u32>)>, live: &[(u32, &str)]) -> ClusterMap {
        let mut map = ClusterMap::default();
        map.pg_tables.insert(1, PgTableRecord { version: 1, pool: 1, table_epoch: 1, pgs, targets: Vec::new() });
        for (osd, address) in live {
            map.live.insert(
                *osd,
                OsdLiveRecord { version: 1, address: address.to_string(), incarnation: 1, local: None, lease_ttl_s: 3 },
            );
        }
        map
    }

    #[test]
    fn the_route_is_the_first_member_at_its_live_address() {
        let map = map(vec![(3, vec![2, 1]), (9, vec![]), (4, vec![5])], &[(2, "10.0.0.2:6800")]);
        let pg = |pg| PgId { pool: 1, pg };
        assert_eq!(route(&map, pg(0)), Ok(Route { epoch: 3, osd: 2, address: "10.0.0.2:6800" }));
        assert!(route(&map, pg(1)).unwrap_err().contains("PG 1.1 has no OSDs"));
        assert!(route(&map, pg(2)).unwrap_err().contains("primary osd.5 is not running"));
        assert!(route(&map, pg(3)).unwrap_err().contains("no entry for PG 3"));
        assert!(route(&map, PgId { pool: 2, pg: 0 }).unwrap_err().contains("pool 2 has no PG table"));
    }
}
