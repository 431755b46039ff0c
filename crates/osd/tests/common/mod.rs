//! What the OSD tests share: three OSDs in one process, each on its own thread, against an
//! embedded metadata store; the pool and its PG table are written into the store directly (no
//! mon), after the OSDs have registered and been given ids 1, 2 and 3.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::records::{encode, FORMAT_VERSION};
use cluster::{
    keys, object_pg, ClusterRecord, FailureDomainName, OsdLiveRecord, PgTableRecord, PoolRecord, Redundancy,
};
use engine::{Engine, FormatOptions};
use meta::{KeyValue, LeaseId, Listing, MetaError, MetaStore, Txn, TxnResponse, WatchStream};
use meta_embedded::EmbeddedMetaStore;
use net::{Connection, Reply};
use osd::{Metadata, OsdConfig, OsdHandle, Stop};
use platform_linux::{UringDisk, UringOptions, UringReady};
use tokio::runtime::Runtime;
use wire::{ObjectId, PgId, Request, Response, Status};

pub const OBJECT_SIZE: u32 = 128 * 1024;
pub const PG_COUNT: u32 = 8;
pub const POOL: u32 = 1;
pub const INODE: u64 = 1 << 56 | 1;

pub struct Cluster {
    // Dropped first: the OSDs stop while the store's runtime still runs.
    pub osds: Vec<Option<OsdHandle>>,
    pub store: Arc<dyn MetaStore>,
    pub runtime: Runtime,
    pub dir: tempfile::TempDir,
}

pub fn format_engine(path: &Path) {
    UringDisk::create_file(path, 64 << 20).expect("create the engine file");
    let disk = UringDisk::open(path, UringOptions::default()).expect("open the engine file");
    let options = FormatOptions { object_size_bytes: u64::from(OBJECT_SIZE), journal_size_bytes: None, nonce: 7 };
    Engine::format(disk, &options).expect("format");
}

/// Opens a test OSD's drive on io_uring, as the binary does.
pub fn open_drive(config: &OsdConfig) -> Result<osd::Drive, osd::OsdError> {
    let options = UringOptions { queue_depth: config.queue_depth, spin_before_wait_us: 0 };
    let open_error = |error| osd::OsdError::OpenDisk { path: config.data_path.clone(), source: Box::new(error) };
    let mut disk = UringDisk::open(&config.data_path, options).map_err(open_error)?;
    let ready = disk.completion_notifier().and_then(UringReady::new).map_err(osd::OsdError::Runtime)?;
    Ok(osd::Drive { disk: Box::new(disk), ready: Box::new(ready) })
}

/// Starts an OSD on its own thread, on its drive.
pub fn spawn(config: OsdConfig) -> Result<OsdHandle, osd::OsdError> {
    osd::spawn(config, open_drive)
}

/// The members of PG `pg`: primaries rotate over the three OSDs.
pub fn members(pg: u32) -> Vec<u32> {
    (0..3).map(|index| (pg + index) % 3 + 1).collect()
}

impl Cluster {
    pub fn start() -> Cluster {
        Cluster::start_with(|_| {})
    }

    /// Starts the three OSDs with `adjust` applied to each configuration.
    pub fn start_with(adjust: impl Fn(&mut OsdConfig)) -> Cluster {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        // `BASALT_OSD_TEST_DIR` puts the engines elsewhere (tmpfs takes O_DIRECT on Linux 6.6 and
        // later, which takes the drive out of a measurement).
        let base = std::env::var("BASALT_OSD_TEST_DIR").unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").to_string());
        let dir = tempfile::tempdir_in(base).unwrap();
        let store: Arc<dyn MetaStore> =
            Arc::new(runtime.block_on(EmbeddedMetaStore::open(dir.path().join("meta"))).expect("open the store"));
        let cluster_record =
            ClusterRecord { version: FORMAT_VERSION, cluster_id: "test".into(), object_size_bytes: OBJECT_SIZE };
        runtime.block_on(store.put(keys::CLUSTER, encode(&cluster_record), None)).unwrap();
        let mut cluster = Cluster { osds: Vec::new(), store, runtime, dir };
        for index in 1..=3u32 {
            let path = cluster.dir.path().join(format!("o{index}"));
            format_engine(&path);
            let mut config = cluster.config(index);
            adjust(&mut config);
            let handle = spawn(config).expect("start an osd");
            assert_eq!(handle.id(), index, "ids are allocated in start order");
            cluster.osds.push(Some(handle));
        }
        let pool = PoolRecord {
            version: FORMAT_VERSION,
            id: POOL,
            name: "rbd".into(),
            redundancy: Redundancy::Replicated(3),
            min_size: 2,
            pg_count: PG_COUNT,
            failure_domain: FailureDomainName::Osd,
            osd_tags: BTreeSet::new(),
            primary_affinity_tag: None,
        };
        cluster.put(&keys::pool(POOL), encode(&pool));
        cluster.set_table(1, &[]);
        cluster
    }

    pub fn config(&self, index: u32) -> OsdConfig {
        let path = self.dir.path().join(format!("o{index}"));
        let mut config = OsdConfig::new(Metadata::Store(self.store.clone()), path, "127.0.0.1:0");
        config.host = Some(format!("host{index}"));
        config.lease_ttl = Duration::from_secs(2);
        config.epoch_wait = Duration::from_millis(300);
        config.secondary_timeout = Duration::from_secs(2);
        config.connect_timeout = Duration::from_millis(500);
        // `BASALT_OSD_SPIN_US=N` runs the tests (and the qd1 measurement) with a spin.
        let spin_us = std::env::var("BASALT_OSD_SPIN_US").ok().and_then(|text| text.parse().ok()).unwrap_or(0);
        config.spin = Duration::from_micros(spin_us);
        config
    }

    /// `config(index)` serving on `o<index>.sock` next to the engine file as well.
    pub fn config_with_local_socket(&self, index: u32) -> OsdConfig {
        let mut config = self.config(index);
        config.local_socket = Some(config.data_path.with_extension("sock"));
        config
    }

    pub fn put(&self, key: &str, value: Vec<u8>) {
        self.runtime.block_on(self.store.put(key, value, None)).unwrap();
    }

    /// Publishes the PG table at `table_epoch`, with every PG at epoch 1 except those in
    /// `bumped` (at `table_epoch`).
    pub fn set_table(&self, table_epoch: u64, bumped: &[u32]) {
        let pgs = (0..PG_COUNT).map(|pg| (if bumped.contains(&pg) { table_epoch } else { 1 }, members(pg))).collect();
        let table = PgTableRecord { version: FORMAT_VERSION, pool: POOL, table_epoch, pgs, targets: Vec::new() };
        self.put(&keys::pg_table(POOL), encode(&table));
    }

    pub fn address(&self, osd: u32) -> String {
        self.osds[osd as usize - 1].as_ref().expect("running").address().to_string()
    }

    pub fn connect(&self, osd: u32) -> Connection {
        self.runtime.block_on(net::connect(&self.address(osd))).expect("connect")
    }

    pub fn call(&self, connection: &Connection, epoch: u64, request: Request) -> Reply {
        self.runtime.block_on(connection.call(epoch, request)).expect("a reply")
    }

    /// Calls until the reply is not `Busy` (the OSDs' maps catch up after a change).
    pub fn call_settled(&self, connection: &Connection, epoch: u64, request: Request) -> Reply {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let reply = self.call(connection, epoch, request.clone());
            if reply.response.status() != Status::Busy || Instant::now() > deadline {
                return reply;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stop(&mut self, osd: u32, how: Stop) {
        let handle = self.osds[osd as usize - 1].take().expect("running");
        handle.stop(how).expect("clean stop");
    }

    pub fn live(&self, osd: u32) -> Option<OsdLiveRecord> {
        let kv = self.runtime.block_on(self.store.get(&keys::osd_live(osd))).unwrap()?;
        Some(cluster::records::decode(&kv.key, &kv.value).unwrap())
    }
}

/// The first stripe of `INODE` whose PG has `primary` as its primary.
pub fn stripe_with_primary(primary: u32) -> (u64, PgId) {
    (0..1000)
        .map(|stripe| (stripe, object_pg(INODE, stripe, PG_COUNT)))
        .find(|(_, pg)| members(*pg)[0] == primary)
        .map(|(stripe, pg)| (stripe, PgId { pool: POOL, pg }))
        .expect("some stripe maps to every primary")
}

pub fn pattern(seed: u8, size_bytes: usize) -> wire::Bytes {
    (0..size_bytes).map(|index| (index as u8).wrapping_mul(31).wrapping_add(seed)).collect::<Vec<u8>>().into()
}

pub fn status(reply: &Reply) -> Status {
    reply.response.status()
}

pub fn object_info(cluster: &Cluster, osd: u32, pg: PgId, object: ObjectId) -> Response {
    let connection = cluster.connect(osd);
    cluster.call(&connection, 1, Request::ObjectInfo { pg, object }).response
}

/// A store that can be cut off: while `cut` is set, every call fails as if the store were
/// unreachable (watches already open keep running). `cut_after` calls are answered before the
/// store cuts itself off (`i64::MAX`: never).
pub struct CutStore {
    pub inner: Arc<dyn MetaStore>,
    pub cut: Arc<AtomicBool>,
    pub cut_after: AtomicI64,
}

impl CutStore {
    pub fn new(inner: Arc<dyn MetaStore>, cut: Arc<AtomicBool>) -> CutStore {
        CutStore { inner, cut, cut_after: AtomicI64::new(i64::MAX) }
    }

    fn check(&self) -> Result<(), MetaError> {
        if self.cut_after.fetch_sub(1, Ordering::SeqCst) == 0 {
            self.cut.store(true, Ordering::SeqCst);
        }
        if self.cut.load(Ordering::SeqCst) {
            return Err(MetaError::unavailable(self.inner.endpoint(), "cut off by the test"));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl MetaStore for CutStore {
    fn endpoint(&self) -> &str {
        self.inner.endpoint()
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError> {
        self.check()?;
        self.inner.get(key).await
    }

    async fn put(&self, key: &str, value: Vec<u8>, lease: Option<LeaseId>) -> Result<i64, MetaError> {
        self.check()?;
        self.inner.put(key, value, lease).await
    }

    async fn delete(&self, key: &str) -> Result<bool, MetaError> {
        self.check()?;
        self.inner.delete(key).await
    }

    async fn list_with_revision(&self, prefix: &str) -> Result<Listing, MetaError> {
        self.check()?;
        self.inner.list_with_revision(prefix).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, MetaError> {
        self.check()?;
        self.inner.txn(txn).await
    }

    async fn watch(&self, prefix: &str, start_revision: Option<i64>) -> Result<WatchStream, MetaError> {
        self.check()?;
        self.inner.watch(prefix, start_revision).await
    }

    async fn compact(&self, revision: i64) -> Result<(), MetaError> {
        self.check()?;
        self.inner.compact(revision).await
    }

    async fn lease_grant(&self, ttl_s: u64) -> Result<LeaseId, MetaError> {
        self.check()?;
        self.inner.lease_grant(ttl_s).await
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<u64, MetaError> {
        self.check()?;
        self.inner.lease_keep_alive(lease).await
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), MetaError> {
        self.check()?;
        self.inner.lease_revoke(lease).await
    }
}
