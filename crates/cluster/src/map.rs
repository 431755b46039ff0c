//! The cluster map: pools, PG tables, OSDs, liveness and volumes at one revision of the store.
//!
//! [`ClusterMap::apply`] folds one key's value into the map; a process keeps its map current
//! with `cluster_watch::MapWatcher`, which lists and then follows the store. Values that fail
//! to decode are reported and left out: one bad record must not blind a process to the rest
//! of the cluster.

use std::collections::{BTreeMap, HashMap};

use crate::keys;
use crate::records::{
    decode, machine_id, OsdLiveRecord, OsdRecord, Parent, PeerReportRecord, PgTableRecord, PoolRecord, RecordError,
    ScrubRequestsRecord, SettingsRecord, SnapshotRecord, TrashRecord, VolumeRecord,
};

/// One PG as the table publishes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgState {
    pub epoch: u64,
    /// Primary first.
    pub members: Vec<u32>,
}

impl PgState {
    pub fn primary(&self) -> Option<u32> {
        self.members.first().copied()
    }
}

#[derive(Debug, Clone, Default)]
pub struct ClusterMap {
    /// The store revision this map reflects.
    pub revision: i64,
    pub pools: BTreeMap<u32, PoolRecord>,
    pub pg_tables: BTreeMap<u32, PgTableRecord>,
    pub osds: BTreeMap<u32, OsdRecord>,
    pub live: BTreeMap<u32, OsdLiveRecord>,
    /// What each OSD reports of the peers it cannot reach (ADR 0015).
    pub peer_reports: BTreeMap<u32, PeerReportRecord>,
    pub volumes: BTreeMap<String, VolumeRecord>,
    /// By `VOLUME@SNAP`.
    pub snapshots: BTreeMap<String, SnapshotRecord>,
    /// Volumes in the trash, by id (their head's inode).
    pub trash: BTreeMap<u64, TrashRecord>,
    /// The volume whose head each inode is.
    heads: HashMap<u64, String>,
    /// The snapshot (`VOLUME@SNAP`) each frozen inode is.
    frozen: HashMap<u64, String>,
    /// Defaults while the store has no settings record (or one that does not decode).
    pub settings: SettingsRecord,
    pub scrub_requests: ScrubRequestsRecord,
    /// `unix:PATH` of the live OSDs whose local socket this process can reach (ADR 0013).
    local_addresses: BTreeMap<u32, String>,
}

impl ClusterMap {
    /// An empty map at `revision`, to fold a listing of that revision into with [`ClusterMap::apply`].
    pub fn at_revision(revision: i64) -> ClusterMap {
        ClusterMap { revision, ..ClusterMap::default() }
    }

    pub fn pg(&self, pool: u32, pg: u32) -> Option<PgState> {
        let (epoch, members) = self.pg_tables.get(&pool)?.pgs.get(pg as usize)?;
        Some(PgState { epoch: *epoch, members: members.clone() })
    }

    /// A PG's epoch and primary, without copying its members (for checks on every I/O).
    pub fn pg_epoch_and_primary(&self, pool: u32, pg: u32) -> Option<(u64, Option<u32>)> {
        let (epoch, members) = self.pg_tables.get(&pool)?.pgs.get(pg as usize)?;
        Some((*epoch, members.first().copied()))
    }

    /// Where to reach a running OSD: its local socket when it is on this machine and the
    /// socket is visible here, its TCP address otherwise.
    pub fn address(&self, osd: u32) -> Option<&str> {
        if let Some(address) = self.local_addresses.get(&osd) {
            return Some(address);
        }
        self.live.get(&osd).map(|live| live.address.as_str())
    }

    /// The incarnation of `osd` if `address` is where this map reaches it: a report about a
    /// refused address concerns the process the map names there, not a later one.
    pub fn incarnation_at(&self, osd: u32, address: &str) -> Option<i64> {
        if self.address(osd)? != address {
            return None;
        }
        self.live.get(&osd).map(|live| live.incarnation)
    }

    /// Looks again at whether `osd`'s local socket is reachable from this process.
    fn update_local_address(&mut self, osd: u32) {
        self.local_addresses.remove(&osd);
        let Some(local) = self.live.get(&osd).and_then(|live| live.local.as_ref()) else { return };
        if machine_id() == Some(local.machine.as_str()) && is_socket(&local.path) {
            self.local_addresses.insert(osd, format!("{UNIX_ADDRESS_PREFIX}{}", local.path));
        }
    }

    /// Whether `osd` is up: registered, and not marked down on its peers' reports.
    pub fn is_up(&self, osd: u32) -> bool {
        self.live.contains_key(&osd) && !self.is_marked_down(osd)
    }

    /// Whether the mon marked `osd` down on its peers' reports and the mark is still active.
    pub fn is_marked_down(&self, osd: u32) -> bool {
        self.osds.get(&osd).and_then(|record| record.down_mark.as_ref()).is_some_and(|mark| mark.is_active())
    }

    /// The epoch and running primary of PG `pg` of pool `pool`, where its requests go now, or
    /// why there is none.
    pub fn route(&self, pool: u32, pg: u32) -> Result<Route<'_>, String> {
        let Some(table) = self.pg_tables.get(&pool) else {
            return Err(format!("pool {pool} has no PG table in the cluster map"));
        };
        let Some((epoch, members)) = table.pgs.get(pg as usize) else {
            return Err(format!("the PG table of pool {pool} has no entry for PG {pg}"));
        };
        let Some(&osd) = members.first() else {
            return Err(format!("PG {pool}.{pg} has no OSDs (epoch {epoch})"));
        };
        let Some(address) = self.address(osd) else {
            return Err(format!("its primary osd.{osd} is not running (no liveness key; epoch {epoch})"));
        };
        Ok(Route { epoch: *epoch, osd, address })
    }

    /// The snapshot whose frozen layer `inode` is, hidden or not.
    pub fn snapshot_of(&self, inode: u64) -> Option<&SnapshotRecord> {
        self.frozen.get(&inode).and_then(|name| self.snapshots.get(name))
    }

    /// What the map says of layer `inode`: a volume's head or a snapshot, and its parent.
    pub fn layer(&self, inode: u64) -> Option<Layer<'_>> {
        if let Some(snapshot) = self.snapshot_of(inode) {
            return Some(Layer {
                inode,
                parent: snapshot.parent.as_ref(),
                frozen: true,
                sealing: false,
                flattening: false,
                deleting: snapshot.deleting,
            });
        }
        let volume = self.heads.get(&inode).and_then(|name| self.volumes.get(name))?;
        Some(Layer {
            inode,
            parent: volume.parent.as_ref(),
            frozen: false,
            sealing: volume.sealing,
            flattening: volume.flattening,
            deleting: volume.is_deleting(),
        })
    }

    /// The layers a read of `inode` goes through, top first, each with how many bytes of it
    /// show through (past them, zeros): `inode` itself whole, then its parent up to the size it
    /// had when the child was made, and so on. Ends at a layer without a parent, or one the
    /// map does not know.
    pub fn chain(&self, inode: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut next = Some((inode, u64::MAX));
        let mut steps = 0;
        std::iter::from_fn(move || {
            let (inode, visible) = next.take()?;
            // Records are untrusted: a cycle among them must not hang a reader.
            steps += 1;
            if steps <= Self::CHAIN_WALK_MAX {
                next = self
                    .layer(inode)
                    .and_then(|layer| layer.parent)
                    .map(|parent| (parent.inode, visible.min(parent.size_bytes)));
            }
            Some((inode, visible))
        })
    }

    /// The most layers [`ClusterMap::chain`] walks: far above `snapshot_chain_max`'s range.
    pub const CHAIN_WALK_MAX: usize = 4096;

    pub fn pool_by_name(&self, name: &str) -> Option<&PoolRecord> {
        self.pools.values().find(|pool| pool.name == name)
    }

    /// Applies one key's new value (`None`: deleted). Returns a decoding error for the caller
    /// to log; the key is then treated as absent.
    pub fn apply(&mut self, key: &str, value: Option<&[u8]>) -> Result<(), RecordError> {
        fn set<K: Ord, T: serde::de::DeserializeOwned>(
            map: &mut BTreeMap<K, T>,
            id: K,
            key: &str,
            value: Option<&[u8]>,
        ) -> Result<(), RecordError> {
            map.remove(&id);
            if let Some(value) = value {
                map.insert(id, decode(key, value)?);
            }
            Ok(())
        }
        if let Some(id) = keys::id_after(keys::POOLS_PREFIX, key) {
            set(&mut self.pools, id, key, value)
        } else if let Some(id) = keys::id_after(keys::PGS_PREFIX, key) {
            set(&mut self.pg_tables, id, key, value)
        } else if let Some(id) = keys::id_after(keys::OSDS_PREFIX, key) {
            set(&mut self.osds, id, key, value)
        } else if let Some(id) = keys::id_after(keys::OSD_LIVE_PREFIX, key) {
            let result = set(&mut self.live, id, key, value);
            self.update_local_address(id);
            result
        } else if let Some(id) = keys::id_after(keys::PEER_REPORTS_PREFIX, key) {
            set(&mut self.peer_reports, id, key, value)
        } else if key == keys::SETTINGS {
            self.settings = SettingsRecord::default();
            if let Some(value) = value {
                self.settings = decode(key, value)?;
            }
            Ok(())
        } else if key == keys::SCRUB_REQUESTS {
            self.scrub_requests = ScrubRequestsRecord::default();
            if let Some(value) = value {
                self.scrub_requests = decode(key, value)?;
            }
            Ok(())
        } else if let Some(name) = key.strip_prefix(keys::VOLUMES_PREFIX) {
            if let Some(old) = self.volumes.get(name) {
                self.heads.remove(&old.id);
            }
            let result = set(&mut self.volumes, name.to_string(), key, value);
            if let Some(new) = self.volumes.get(name) {
                self.heads.insert(new.id, name.to_string());
            }
            result
        } else if let Some(id) = keys::trash_id(key) {
            set(&mut self.trash, id, key, value)
        } else if let Some(name) = key.strip_prefix(keys::SNAPSHOTS_PREFIX) {
            if let Some(old) = self.snapshots.get(name) {
                self.frozen.remove(&old.inode);
            }
            let result = set(&mut self.snapshots, name.to_string(), key, value);
            if let Some(new) = self.snapshots.get(name) {
                self.frozen.insert(new.inode, name.to_string());
            }
            result
        } else {
            Ok(())
        }
    }
}

/// One layer of a family as the map knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layer<'map> {
    pub inode: u64,
    pub parent: Option<&'map Parent>,
    /// A snapshot: no client write may change it.
    pub frozen: bool,
    /// A head waiting for the seal of the snapshot below it.
    pub sealing: bool,
    /// A head being flattened (`VolumeRecord::flattening`).
    pub flattening: bool,
    /// A layer of a volume being removed: the reaper's trims delete its objects, and may
    /// delete a frozen layer's.
    pub deleting: bool,
}

/// Where a PG's requests go now: its epoch and its primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route<'map> {
    pub epoch: u64,
    pub osd: u32,
    pub address: &'map str,
}

/// The prefix of an address that names a Unix socket: `net::UNIX_PREFIX`, which reads it.
pub const UNIX_ADDRESS_PREFIX: &str = "unix:";

fn is_socket(path: &str) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|metadata| metadata.file_type().is_socket())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::LocalSocket;

    fn live(local: Option<LocalSocket>) -> Vec<u8> {
        let record =
            OsdLiveRecord { version: 1, address: "127.0.0.2:6800".into(), incarnation: 3, local, lease_ttl_s: 3 };
        serde_json::to_vec(&record).unwrap()
    }

    fn volume(name: &str, inode: u64, parent: Option<(&str, u64, u64)>) -> Vec<u8> {
        let parent =
            parent.map(|(snapshot, inode, size_bytes)| Parent { snapshot: snapshot.into(), inode, size_bytes });
        let record = VolumeRecord {
            version: 1,
            id: inode,
            name: name.into(),
            pool: 1,
            size_bytes: 1 << 30,
            object_size_bytes: 1 << 17,
            parent,
            sealing: false,
            flattening: false,
            flags: vec![],
        };
        serde_json::to_vec(&record).unwrap()
    }

    fn snapshot(volume: &str, name: &str, inode: u64, size_bytes: u64, parent: Option<(&str, u64, u64)>) -> Vec<u8> {
        let parent =
            parent.map(|(snapshot, inode, size_bytes)| Parent { snapshot: snapshot.into(), inode, size_bytes });
        let record = SnapshotRecord {
            version: 1,
            volume: volume.into(),
            name: name.into(),
            inode,
            pool: 1,
            size_bytes,
            object_size_bytes: 1 << 17,
            parent,
            created_unix_ms: 0,
            hidden: false,
            deleting: false,
            grouped: false,
        };
        serde_json::to_vec(&record).unwrap()
    }

    #[test]
    fn a_chain_goes_through_every_parent_and_narrows_to_the_smallest_size() {
        let mut map = ClusterMap::default();
        map.apply(&keys::snapshot("v@a"), Some(&snapshot("v", "a", 10, 4 << 20, None))).unwrap();
        map.apply(&keys::snapshot("v@b"), Some(&snapshot("v", "b", 11, 8 << 20, Some(("v@a", 10, 4 << 20))))).unwrap();
        map.apply(&keys::volume("v"), Some(&volume("v", 12, Some(("v@b", 11, 8 << 20))))).unwrap();
        assert_eq!(map.chain(12).collect::<Vec<_>>(), vec![(12, u64::MAX), (11, 8 << 20), (10, 4 << 20)]);
        assert_eq!(map.chain(11).collect::<Vec<_>>(), vec![(11, u64::MAX), (10, 4 << 20)]);
        let head = map.layer(12).unwrap();
        assert!(!head.frozen && head.parent.is_some_and(|parent| parent.inode == 11));
        assert!(map.layer(10).unwrap().frozen);
        // A snapshot taken: the old head's inode is now frozen, whichever key arrives first.
        map.apply(&keys::snapshot("v@c"), Some(&snapshot("v", "c", 12, 8 << 20, Some(("v@b", 11, 8 << 20))))).unwrap();
        assert!(map.layer(12).unwrap().frozen);
        map.apply(&keys::volume("v"), Some(&volume("v", 13, Some(("v@c", 12, 8 << 20))))).unwrap();
        assert!(map.layer(12).unwrap().frozen);
        assert!(!map.layer(13).unwrap().frozen);
        assert_eq!(map.chain(13).count(), 4);
        // Unknown inodes have no layer and a chain of themselves.
        assert_eq!(map.layer(99), None);
        assert_eq!(map.chain(99).collect::<Vec<_>>(), vec![(99, u64::MAX)]);
        map.apply(&keys::volume("v"), None).unwrap();
        assert_eq!(map.layer(13), None);
    }

    #[test]
    fn a_cycle_among_records_ends_the_chain() {
        let mut map = ClusterMap::default();
        map.apply(&keys::snapshot("v@a"), Some(&snapshot("v", "a", 10, 1 << 20, Some(("v@b", 11, 1 << 20))))).unwrap();
        map.apply(&keys::snapshot("v@b"), Some(&snapshot("v", "b", 11, 1 << 20, Some(("v@a", 10, 1 << 20))))).unwrap();
        assert_eq!(map.chain(10).count(), ClusterMap::CHAIN_WALK_MAX + 1);
    }

    #[test]
    fn a_local_socket_is_used_only_on_its_machine_and_while_it_exists() {
        let dir = std::env::temp_dir().join(format!("basalt-map-local-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("osd.sock");
        let _ = std::fs::remove_file(&path);
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let path = path.to_str().unwrap().to_string();
        let here = machine_id().expect("this machine has a boot id").to_string();
        let key = keys::osd_live(7);
        let mut map = ClusterMap::default();

        // Published without a local socket (the JSON has no `local` field): TCP.
        map.apply(&key, Some(&live(None))).unwrap();
        assert!(!String::from_utf8(live(None)).unwrap().contains("local"));
        assert_eq!(map.address(7), Some("127.0.0.2:6800"));
        // On this machine, with the socket there: the socket.
        map.apply(&key, Some(&live(Some(LocalSocket { machine: here.clone(), path: path.clone() })))).unwrap();
        assert_eq!(map.address(7), Some(format!("unix:{path}").as_str()));
        // Another machine's socket, or a path that is not a socket here: TCP.
        map.apply(&key, Some(&live(Some(LocalSocket { machine: "elsewhere".into(), path: path.clone() })))).unwrap();
        assert_eq!(map.address(7), Some("127.0.0.2:6800"));
        let missing = format!("{path}.missing");
        map.apply(&key, Some(&live(Some(LocalSocket { machine: here.clone(), path: missing })))).unwrap();
        assert_eq!(map.address(7), Some("127.0.0.2:6800"));
        let not_socket = dir.to_str().unwrap().to_string();
        map.apply(&key, Some(&live(Some(LocalSocket { machine: here.clone(), path: not_socket })))).unwrap();
        assert_eq!(map.address(7), Some("127.0.0.2:6800"));
        // Gone from the map: no address at all, not a stale socket.
        map.apply(&key, Some(&live(Some(LocalSocket { machine: here, path })))).unwrap();
        assert!(map.address(7).unwrap().starts_with(UNIX_ADDRESS_PREFIX));
        map.apply(&key, None).unwrap();
        assert_eq!(map.address(7), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
