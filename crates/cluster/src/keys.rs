//! Every key Basalt writes in the metadata store (`docs/design/metadata-keys.md`).

pub const ROOT: &str = "/basalt/";
pub const CLUSTER: &str = "/basalt/config/cluster";
pub const SETTINGS: &str = "/basalt/config/settings";
pub const SCRUB_REQUESTS: &str = "/basalt/config/scrub-requests";
pub const PG_SCRUB_PREFIX: &str = "/basalt/pg-scrub/";
pub const POOLS_PREFIX: &str = "/basalt/config/pools/";
pub const PGS_PREFIX: &str = "/basalt/config/pgs/";
pub const OSDS_PREFIX: &str = "/basalt/osd/";
pub const OSD_LIVE_PREFIX: &str = "/basalt/osd-live/";
pub const PEER_REPORTS_PREFIX: &str = "/basalt/peer-reports/";
pub const VOLUMES_PREFIX: &str = "/basalt/volumes/";
pub const SNAPSHOTS_PREFIX: &str = "/basalt/snapshots/";
pub const TRASH_PREFIX: &str = "/basalt/trash/";
pub const SNAPSHOT_GROUPS_PREFIX: &str = "/basalt/snapshot-groups/";
pub const PG_HISTORY_PREFIX: &str = "/basalt/pg-history/";
pub const MON_LEADER: &str = "/basalt/mon/leader";
pub const POOL_ID_COUNTER: &str = "/basalt/counters/pool-id";
pub const OSD_ID_COUNTER: &str = "/basalt/counters/osd-id";
pub const VOLUME_ID_COUNTER_PREFIX: &str = "/basalt/counters/volume-id/";
pub const LAYER_COUNTER_PREFIX: &str = "/basalt/counters/layer/";

pub fn pool(pool: u32) -> String {
    format!("{POOLS_PREFIX}{pool}")
}

pub fn pg_table(pool: u32) -> String {
    format!("{PGS_PREFIX}{pool}")
}

pub fn osd(osd: u32) -> String {
    format!("{OSDS_PREFIX}{osd}")
}

pub fn osd_live(osd: u32) -> String {
    format!("{OSD_LIVE_PREFIX}{osd}")
}

pub fn peer_report(osd: u32) -> String {
    format!("{PEER_REPORTS_PREFIX}{osd}")
}

pub fn volume(name: &str) -> String {
    format!("{VOLUMES_PREFIX}{name}")
}

/// `full_name` is `VOLUME@SNAP`.
pub fn snapshot(full_name: &str) -> String {
    format!("{SNAPSHOTS_PREFIX}{full_name}")
}

/// A group snapshot's name, taken while any of its snapshots exists.
pub fn snapshot_group(name: &str) -> String {
    format!("{SNAPSHOT_GROUPS_PREFIX}{name}")
}

/// A volume in the trash, by its head's inode (16 hex digits, so keys sort by it).
pub fn trash(id: u64) -> String {
    format!("{TRASH_PREFIX}{id:016x}")
}

/// The id at the end of a trash key.
pub fn trash_id(key: &str) -> Option<u64> {
    let rest = key.strip_prefix(TRASH_PREFIX)?;
    if rest.len() != 16 {
        return None;
    }
    u64::from_str_radix(rest, 16).ok()
}

/// The next layer number of family `family` of `pool` (layer 0 is the volume's first head).
pub fn layer_counter(pool: u32, family: u64) -> String {
    format!("{LAYER_COUNTER_PREFIX}{pool}/{family}")
}

pub fn pg_history(pool: u32, pg: u32) -> String {
    format!("{PG_HISTORY_PREFIX}{pool}/{pg}")
}

pub fn pg_scrub(pool: u32, pg: u32) -> String {
    format!("{PG_SCRUB_PREFIX}{pool}/{pg}")
}

pub fn volume_id_counter(pool: u32) -> String {
    format!("{VOLUME_ID_COUNTER_PREFIX}{pool}")
}

/// The numeric id at the end of a key under `prefix` (`/basalt/osd/12` -> 12), if it is one.
pub fn id_after(prefix: &str, key: &str) -> Option<u32> {
    let rest = key.strip_prefix(prefix)?;
    if rest.is_empty() || rest.len() > 10 || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    rest.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_only_from_plain_decimal() {
        assert_eq!(id_after(OSDS_PREFIX, "/basalt/osd/12"), Some(12));
        assert_eq!(id_after(OSDS_PREFIX, "/basalt/osd/"), None);
        assert_eq!(id_after(OSDS_PREFIX, "/basalt/osd/1x"), None);
        assert_eq!(id_after(OSDS_PREFIX, "/basalt/osd/99999999999"), None);
        assert_eq!(id_after(OSDS_PREFIX, "/basalt/osd-live/1"), None);
    }

    #[test]
    fn trash_ids_round_trip() {
        assert_eq!(trash_id(&trash(0x1234_0000_0000_0007)), Some(0x1234_0000_0000_0007));
        assert_eq!(trash_id("/basalt/trash/7"), None);
        assert_eq!(trash_id("/basalt/volumes/0000000000000007"), None);
    }
}
