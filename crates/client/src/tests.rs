//! The client against stand-in OSDs built on `net::serve_connection`, with the cluster map in
//! an embedded metadata store that the tests change while calls are in flight.
//!
//! A stand-in OSD keeps volume bytes in a map of 4 KiB blocks shared by every stand-in, so a
//! PG that moves keeps its data (as replication would), records every request it receives,
//! and answers according to its current `Mode`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use cluster::records::encode;
use cluster::{keys, layout, FailureDomainName, OsdLiveRecord, PgTableRecord, PoolRecord, Redundancy, VolumeRecord};
use meta::MetaStore;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use wire::{Body, Frame, Opcode, PgId, Request, Response, Status};

use crate::{Client, ClientError, ClientOptions, Volume};

const KIB: u64 = 1024;
const OBJECT_SIZE_BYTES: u32 = 16 * 1024;
const PG_COUNT: u32 = 4;
const VOLUME_SIZE_BYTES: u64 = 4 << 20;
const POOL: u32 = 1;

/// How a stand-in OSD answers.
#[derive(Clone)]
enum Mode {
    Serve,
    NotPrimary,
    /// Refuses requests whose epoch is below this one with `WrongEpoch`, then serves.
    EpochAtLeast(u64),
    /// Answers `Busy` this many more times, then serves.
    Busy(u32),
    Fail(Status),
    /// Never answers.
    Silent,
    /// Serves each write once the gate gives it a permit.
    GateWrites(Arc<Semaphore>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    opcode: Opcode,
    pg: PgId,
    offset_bytes: u64,
    length_bytes: u64,
    epoch: u64,
}

type Blocks = Arc<Mutex<HashMap<(u64, u64), Bytes>>>;

struct StandIn {
    address: String,
    mode: Arc<Mutex<Mode>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    arrived: Arc<Notify>,
}

impl StandIn {
    async fn start(blocks: Blocks, mode: Mode) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let osd = StandIn {
            address,
            mode: Arc::new(Mutex::new(mode)),
            seen: Arc::new(Mutex::new(Vec::new())),
            arrived: Arc::new(Notify::new()),
        };
        let (mode, seen, arrived) = (osd.mode.clone(), osd.seen.clone(), osd.arrived.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (mode, seen, arrived, blocks) = (mode.clone(), seen.clone(), arrived.clone(), blocks.clone());
                tokio::spawn(net::serve_connection(stream, move |frame| {
                    answer(frame, mode.clone(), seen.clone(), arrived.clone(), blocks.clone())
                }));
            }
        });
        osd
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn set_mode(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }
}

async fn answer(
    frame: Frame,
    mode: Arc<Mutex<Mode>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    arrived: Arc<Notify>,
    blocks: Blocks,
) -> Frame {
    let Body::Request(request) = &frame.body else { unreachable!("requests only") };
    let (pg, inode, offset_bytes, length_bytes) = match request {
        Request::Read { pg, inode, offset_bytes, length_bytes }
        | Request::WriteZeroes { pg, inode, offset_bytes, length_bytes }
        | Request::Trim { pg, inode, offset_bytes, length_bytes } => {
            (*pg, *inode, *offset_bytes, u64::from(*length_bytes))
        }
        Request::Write { pg, inode, offset_bytes, data } => (*pg, *inode, *offset_bytes, data.len() as u64),
        other => panic!("the client sent {other:?}"),
    };
    seen.lock().unwrap().push(Seen { opcode: request.opcode(), pg, offset_bytes, length_bytes, epoch: frame.epoch });
    arrived.notify_one();
    let failed =
        |status, epoch| Frame::response(frame.request_id, epoch, Response::Failed { opcode: request.opcode(), status });
    let current = mode.lock().unwrap().clone();
    match current {
        Mode::Serve => {}
        Mode::NotPrimary => return failed(Status::NotPrimary, frame.epoch),
        Mode::EpochAtLeast(epoch) if frame.epoch < epoch => return failed(Status::WrongEpoch, epoch),
        Mode::EpochAtLeast(_) => {}
        Mode::Busy(0) => {}
        Mode::Busy(left) => {
            *mode.lock().unwrap() = Mode::Busy(left - 1);
            return failed(Status::Busy, frame.epoch);
        }
        Mode::Fail(status) => return failed(status, frame.epoch),
        Mode::Silent => std::future::pending::<()>().await,
        Mode::GateWrites(gate) => {
            if request.opcode() == Opcode::Write {
                gate.acquire().await.unwrap().forget();
            }
        }
    }
    assert_eq!(offset_bytes % 4096, 0);
    assert_eq!(length_bytes % 4096, 0);
    let first_block = offset_bytes / 4096;
    let block_count = length_bytes / 4096;
    let mut blocks = blocks.lock().unwrap();
    let response = match request {
        Request::Read { .. } => {
            let mut data = Vec::new();
            for block in first_block..first_block + block_count {
                match blocks.get(&(inode, block)) {
                    Some(bytes) => data.extend_from_slice(bytes),
                    None => data.extend_from_slice(&[0u8; 4096]),
                }
            }
            Response::Read { data: data.into() }
        }
        Request::Write { data, .. } => {
            for index in 0..block_count {
                let start = (index * 4096) as usize;
                blocks.insert((inode, first_block + index), data.slice(start..start + 4096));
            }
            Response::Write
        }
        Request::WriteZeroes { .. } | Request::Trim { .. } => {
            for block in first_block..first_block + block_count {
                blocks.remove(&(inode, block));
            }
            if request.opcode() == Opcode::Trim {
                Response::Trim
            } else {
                Response::WriteZeroes
            }
        }
        _ => unreachable!("checked above"),
    };
    Frame::response(frame.request_id, frame.epoch, response)
}

/// A metadata store with one pool of `PG_COUNT` PGs and volume `vol`, and stand-in OSDs.
struct Cluster {
    store: Arc<meta_embedded::EmbeddedMetaStore>,
    blocks: Blocks,
    _dir: tempfile::TempDir,
}

impl Cluster {
    async fn new() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(meta_embedded::EmbeddedMetaStore::open(dir.path()).await.unwrap());
        let pool = PoolRecord {
            version: 1,
            id: POOL,
            name: "rbd".into(),
            redundancy: Redundancy::Replicated(1),
            min_size: 1,
            pg_count: PG_COUNT,
            failure_domain: FailureDomainName::Osd,
            osd_tags: Default::default(),
            primary_affinity_tag: None,
        };
        store.put(&keys::pool(POOL), encode(&pool), None).await.unwrap();
        let cluster = Cluster { store, blocks: Blocks::default(), _dir: dir };
        cluster.put_volume(VOLUME_SIZE_BYTES).await;
        cluster
    }

    async fn osd(&self, id: u32, mode: Mode) -> StandIn {
        let osd = StandIn::start(self.blocks.clone(), mode).await;
        self.put_live(id, &osd.address).await;
        osd
    }

    async fn put_live(&self, id: u32, address: &str) {
        let live =
            OsdLiveRecord { version: 1, address: address.to_string(), incarnation: 1, local: None, lease_ttl_s: 3 };
        self.store.put(&keys::osd_live(id), encode(&live), None).await.unwrap();
    }

    /// A liveness key for OSD `id` at an address where nothing listens (a crashed process).
    async fn put_dead_osd(&self, id: u32) {
        let unreachable = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dead_address = unreachable.local_addr().unwrap().to_string();
        drop(unreachable);
        self.put_live(id, &dead_address).await;
    }

    async fn remove_live(&self, id: u32) {
        self.store.delete(&keys::osd_live(id)).await.unwrap();
    }

    /// Every PG at `epoch` with `primary` as its only member.
    async fn set_pgs(&self, epoch: u64, primary: u32) {
        let table = PgTableRecord {
            version: 1,
            pool: POOL,
            table_epoch: epoch,
            pgs: vec![(epoch, vec![primary]); PG_COUNT as usize],
            targets: Vec::new(),
        };
        self.store.put(&keys::pg_table(POOL), encode(&table), None).await.unwrap();
    }

    async fn put_volume(&self, size_bytes: u64) -> i64 {
        let volume = VolumeRecord {
            version: 1,
            id: VolumeRecord::inode(POOL, 1),
            name: "vol".into(),
            pool: POOL,
            size_bytes,
            object_size_bytes: OBJECT_SIZE_BYTES,
            parent: None,
            sealing: false,
            flattening: false,
            flags: vec![],
        };
        self.store.put(&keys::volume("vol"), encode(&volume), None).await.unwrap()
    }

    async fn client(&self, options: ClientOptions) -> Client {
        Client::with_store_and_options(self.store.clone(), options).await.unwrap()
    }

    async fn volume(&self) -> Volume {
        self.client(quick()).await.open_volume("vol").await.unwrap()
    }
}

/// Options that keep a failing test short.
fn quick() -> ClientOptions {
    ClientOptions { io_timeout: Some(Duration::from_secs(10)), ..ClientOptions::default() }
}

fn pattern(seed: u8, length_bytes: u64) -> Bytes {
    (0..length_bytes).map(|index| seed.wrapping_add((index / 4096) as u8).wrapping_mul(31)).collect::<Vec<u8>>().into()
}

fn pg_of(offset_bytes: u64) -> u32 {
    layout::object_pg(VolumeRecord::inode(POOL, 1), offset_bytes / u64::from(OBJECT_SIZE_BYTES), PG_COUNT)
}

#[tokio::test]
async fn writes_and_reads_are_cut_into_one_request_per_object_at_its_pg() {
    let cluster = Cluster::new().await;
    let osd = cluster.osd(1, Mode::Serve).await;
    cluster.set_pgs(7, 1).await;
    let volume = cluster.volume().await;
    assert_eq!(
        (volume.name(), volume.size_bytes(), volume.object_size_bytes()),
        ("vol", VOLUME_SIZE_BYTES, OBJECT_SIZE_BYTES)
    );

    // 40 KiB from 12 KiB: 4 KiB of object 0, all of objects 1 and 2, 4 KiB of object 3.
    let data = pattern(1, 40 * KIB);
    volume.write(12 * KIB, data.clone()).await.unwrap();
    let write = |offset_bytes: u64, length_bytes: u64| Seen {
        opcode: Opcode::Write,
        pg: PgId { pool: POOL, pg: pg_of(offset_bytes) },
        offset_bytes,
        length_bytes,
        epoch: 7,
    };
    let mut seen = osd.seen();
    seen.sort_by_key(|seen| seen.offset_bytes);
    assert_eq!(
        seen,
        [write(12 * KIB, 4 * KIB), write(16 * KIB, 16 * KIB), write(32 * KIB, 16 * KIB), write(48 * KIB, 4 * KIB)]
    );

    assert_eq!(volume.read(12 * KIB, 40 * 1024).await.unwrap(), data);
    assert_eq!(volume.read(16 * KIB, 4096).await.unwrap(), data.slice(4096..8192));
    // Unwritten bytes around the write read as zeros.
    let around = volume.read(8 * KIB, 48 * 1024).await.unwrap();
    assert_eq!(around[..4096], [0u8; 4096]);
    assert_eq!(around[4096..44 * 1024], data[..]);
    assert_eq!(around[44 * 1024..], [0u8; 4096]);
    assert_eq!(volume.read(0, 0).await.unwrap().len(), 0);
    volume.flush().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_call_spans_many_pgs_and_runs_its_pieces_concurrently() {
    let cluster = Cluster::new().await;
    let osd = cluster.osd(1, Mode::Serve).await;
    cluster.set_pgs(1, 1).await;
    let volume = cluster.volume().await;
    let data = pattern(9, 2 << 20);
    volume.write(1 << 20, data.clone()).await.unwrap();
    assert_eq!(volume.read(1 << 20, 2 << 20).await.unwrap(), data);
    let seen = osd.seen();
    assert_eq!(seen.len(), 2 * 128);
    let pgs: std::collections::BTreeSet<u32> = seen.iter().map(|seen| seen.pg.pg).collect();
    assert_eq!(pgs.len(), PG_COUNT as usize);
}

#[tokio::test]
async fn write_zeroes_and_trim_delete_whole_objects_and_zero_partial_ones() {
    let cluster = Cluster::new().await;
    let osd = cluster.osd(1, Mode::Serve).await;
    cluster.set_pgs(1, 1).await;
    let volume = cluster.volume().await;
    volume.write(0, pattern(3, 64 * KIB)).await.unwrap();
    volume.write_zeroes(8 * KIB, 24 * KIB).await.unwrap();
    volume.trim(32 * KIB, 20 * KIB).await.unwrap();
    let ops: Vec<(Opcode, u64, u64)> = osd
        .seen()
        .into_iter()
        .filter(|seen| seen.opcode != Opcode::Write)
        .map(|seen| (seen.opcode, seen.offset_bytes, seen.length_bytes))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        ops,
        [
            (Opcode::WriteZeroes, 8 * KIB, 8 * KIB),
            (Opcode::WriteZeroes, 48 * KIB, 4 * KIB),
            (Opcode::Trim, 16 * KIB, 16 * KIB),
            (Opcode::Trim, 32 * KIB, 16 * KIB),
        ]
    );
    let after = volume.read(0, 64 * 1024).await.unwrap();
    let expected = pattern(3, 64 * KIB);
    assert_eq!(after[..8 * 1024], expected[..8 * 1024]);
    assert!(after[8 * 1024..52 * 1024].iter().all(|&byte| byte == 0));
    assert_eq!(after[52 * 1024..], expected[52 * 1024..]);
}

#[tokio::test]
async fn misaligned_and_out_of_range_calls_are_refused_before_sending() {
    let cluster = Cluster::new().await;
    let osd = cluster.osd(1, Mode::Serve).await;
    cluster.set_pgs(1, 1).await;
    let volume = cluster.volume().await;
    let error = volume.read(512, 4096).await.unwrap_err();
    assert!(matches!(error, ClientError::InvalidArgument { offset_bytes: 512, .. }), "{error}");
    assert!(error.to_string().contains("multiples of 4096"), "{error}");
    let error = volume.write(0, Bytes::from(vec![1u8; 1000])).await.unwrap_err();
    assert!(matches!(error, ClientError::InvalidArgument { length_bytes: 1000, .. }), "{error}");
    let error = volume.write_zeroes(VOLUME_SIZE_BYTES - 4096, 8192).await.unwrap_err();
    assert!(matches!(error, ClientError::OutOfRange { size_bytes: VOLUME_SIZE_BYTES, .. }), "{error}");
    let error = volume.trim(u64::MAX - 4095, 8192).await.unwrap_err();
    assert!(matches!(error, ClientError::OutOfRange { .. }), "{error}");
    let error = volume.read(VOLUME_SIZE_BYTES, 4096).await.unwrap_err();
    assert!(error.to_string().contains("ends past the volume's size_bytes=4194304"), "{error}");
    assert!(osd.seen().is_empty());
}

#[tokio::test]
async fn an_unknown_volume_is_named() {
    let cluster = Cluster::new().await;
    let client = cluster.client(quick()).await;
    let error = client.open_volume("nope").await.unwrap_err();
    assert!(matches!(&error, ClientError::NoSuchVolume { name } if name == "nope"), "{error}");
    assert_eq!(error.to_string(), "no volume named \"nope\"");
}

#[tokio::test]
async fn not_primary_is_retried_at_the_new_primary_once_the_map_moves_the_pg() {
    let cluster = Cluster::new().await;
    let old = cluster.osd(1, Mode::NotPrimary).await;
    let new = cluster.osd(2, Mode::Serve).await;
    cluster.set_pgs(1, 1).await;
    let volume = cluster.volume().await;
    let write = tokio::spawn({
        let volume = volume.clone();
        async move { volume.write(0, pattern(5, 4 * KIB)).await }
    });
    old.arrived.notified().await;
    cluster.set_pgs(2, 2).await;
    write.await.unwrap().unwrap();
    assert!(old.seen().iter().all(|seen| seen.epoch == 1));
    assert_eq!(new.seen().iter().map(|seen| (seen.opcode, seen.epoch)).collect::<Vec<_>>(), [(Opcode::Write, 2)]);
    assert_eq!(volume.read(0, 4096).await.unwrap(), pattern(5, 4 * KIB));
}

#[tokio::test]
async fn wrong_epoch_is_retried_with_the_newer_epoch() {
    let cluster = Cluster::new().await;
    let osd = cluster.osd(1, Mode::EpochAtLeast(4)).await;
    cluster.set_pgs(3, 1).await;
    let volume = cluster.volume().await;
    let read = tokio::spawn({
        let volume = volume.clone();
        async move { volume.read(64 * KIB, 4096).await }
    });
    osd.arrived.notified().await;
    cluster.set_pgs(4, 1).await;
    assert_eq!(read.await.unwrap().unwrap(), Bytes::from(vec![0u8; 4096]));
    let epochs: Vec<u64> = osd.seen().iter().map(|seen| seen.epoch).collect();
    assert_eq!(epochs.first(), Some(&3));
    assert_eq!(epochs.last(), Some(&4));
}

#[tokio::test]
async fn busy_is_retried_after_a_pause() {
    let cluster = Cluster::new().await;
    let osd = cluster.osd(1, Mode::Busy(3)).await;
    cluster.set_pgs(1, 1).await;
    let volume = cluster.volume().await;
    volume.write(0, pattern(2, 4 * KIB)).await.unwrap();
    assert_eq!(osd.seen().len(), 4);
}

#[tokio::test]
async fn a_pg_that_never_gets_a_serving_primary_fails_at_the_deadline_naming_it() {
    let cluster = Cluster::new().await;
    let _osd = cluster.osd(1, Mode::NotPrimary).await;
    cluster.set_pgs(6, 1).await;
    let options = ClientOptions { io_timeout: Some(Duration::from_millis(200)), ..ClientOptions::default() };
    let volume = cluster.client(options).await.open_volume("vol").await.unwrap();
    let error = volume.write(0, pattern(1, 4 * KIB)).await.unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, ClientError::Unavailable { pg: PgId { pool: POOL, .. }, waited_ms: 200.., .. }), "{text}");
    assert!(text.contains(&format!("PG 1.{}", pg_of(0))) && text.contains("answered NotPrimary"), "{text}");
}

#[tokio::test]
async fn a_primary_that_cannot_be_reached_is_replaced_when_the_map_moves_the_pg() {
    let cluster = Cluster::new().await;
    cluster.put_dead_osd(3).await;
    cluster.set_pgs(1, 3).await;
    let volume = cluster.volume().await;
    let write = tokio::spawn({
        let volume = volume.clone();
        async move { volume.write(0, pattern(4, 8 * KIB)).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!write.is_finished());
    let osd = cluster.osd(2, Mode::Serve).await;
    cluster.set_pgs(2, 2).await;
    write.await.unwrap().unwrap();
    assert_eq!(osd.seen().len(), 1);
}

/// Collects what a client reports.
#[derive(Debug, Default)]
struct Reports(Mutex<Vec<(u32, i64)>>);

impl crate::DownReporter for Reports {
    fn report(&self, osd: u32, incarnation: i64) {
        self.0.lock().unwrap().push((osd, incarnation));
    }
}

#[tokio::test]
async fn a_refused_connection_is_reported_once_per_incarnation() {
    let cluster = Cluster::new().await;
    cluster.put_dead_osd(3).await;
    cluster.set_pgs(1, 3).await;
    let reports = Arc::new(Reports::default());
    let options = ClientOptions {
        io_timeout: Some(Duration::from_millis(300)),
        down_reporter: Some(reports.clone()),
        ..ClientOptions::default()
    };
    let volume = cluster.client(options).await.open_volume("vol").await.unwrap();
    // Every retry is refused; the OSD is reported once.
    assert!(volume.write(0, pattern(1, 4 * KIB)).await.is_err());
    assert!(volume.write(0, pattern(1, 4 * KIB)).await.is_err());
    assert_eq!(*reports.0.lock().unwrap(), [(3, 1)]);

    // An OSD that does not answer is not reported: silence proves nothing.
    let silent = cluster.osd(4, Mode::Silent).await;
    cluster.set_pgs(2, 4).await;
    assert!(volume.write(0, pattern(1, 4 * KIB)).await.is_err());
    assert_eq!(reports.0.lock().unwrap().len(), 1);
    drop(silent);
}

#[tokio::test]
async fn calls_waiting_on_an_osd_that_leaves_the_map_move_to_the_new_primary() {
    let cluster = Cluster::new().await;
    let silent = cluster.osd(1, Mode::Silent).await;
    let healthy = cluster.osd(2, Mode::Serve).await;
    cluster.set_pgs(1, 1).await;
    let volume = cluster.volume().await;
    let write = tokio::spawn({
        let volume = volume.clone();
        async move { volume.write(0, pattern(6, 4 * KIB)).await }
    });
    silent.arrived.notified().await;
    // The OSD's lease expires (its liveness key goes), then the mon moves its PGs.
    cluster.remove_live(1).await;
    cluster.set_pgs(2, 2).await;
    write.await.unwrap().unwrap();
    assert_eq!(healthy.seen().len(), 1);
    assert_eq!(silent.seen().len(), 1);
}

#[tokio::test]
async fn failure_statuses_become_typed_errors() {
    let cluster = Cluster::new().await;
    let osd = cluster.osd(1, Mode::Fail(Status::Corrupt)).await;
    cluster.set_pgs(1, 1).await;
    let volume = cluster.volume().await;
    let error = volume.read(0, 4096).await.unwrap_err();
    assert!(matches!(error, ClientError::Corrupt { osd: 1, offset_bytes: 0, .. }), "{error}");
    osd.set_mode(Mode::Fail(Status::IoError));
    assert!(matches!(volume.write(0, pattern(1, 4 * KIB)).await, Err(ClientError::Io { osd: 1, .. })));
    osd.set_mode(Mode::Fail(Status::NoSpace));
    assert!(matches!(volume.write(0, pattern(1, 4 * KIB)).await, Err(ClientError::NoSpace { .. })));
    osd.set_mode(Mode::Fail(Status::OutOfRange));
    let error = volume.trim(0, 4096).await.unwrap_err();
    assert!(matches!(error, ClientError::Refused { status: Status::OutOfRange, .. }), "{error}");
    assert_eq!(osd.seen().len(), 4, "none of these is retried");
}

#[tokio::test]
async fn flush_waits_for_the_writes_issued_before_it() {
    let cluster = Cluster::new().await;
    let gate = Arc::new(Semaphore::new(0));
    let osd = cluster.osd(1, Mode::GateWrites(gate.clone())).await;
    cluster.set_pgs(1, 1).await;
    let volume = cluster.volume().await;
    let write = tokio::spawn({
        let volume = volume.clone();
        async move { volume.write(0, pattern(8, 4 * KIB)).await }
    });
    osd.arrived.notified().await;
    let flush = tokio::spawn({
        let volume = volume.clone();
        async move { volume.flush().await }
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(!flush.is_finished(), "the write is still in flight");
    // Reads are not writes: they neither wait for nor hold a flush.
    assert_eq!(volume.read(64 * KIB, 4096).await.unwrap().len(), 4096);
    gate.add_permits(1);
    write.await.unwrap().unwrap();
    flush.await.unwrap().unwrap();
}

#[tokio::test]
async fn the_size_follows_a_resize_in_the_map() {
    let cluster = Cluster::new().await;
    let _osd = cluster.osd(1, Mode::Serve).await;
    cluster.set_pgs(1, 1).await;
    let volume = cluster.volume().await;
    assert!(volume.write(VOLUME_SIZE_BYTES, pattern(1, 4 * KIB)).await.is_err());
    cluster.put_volume(2 * VOLUME_SIZE_BYTES).await;
    for _ in 0..400 {
        if volume.size_bytes() == 2 * VOLUME_SIZE_BYTES {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(volume.size_bytes(), 2 * VOLUME_SIZE_BYTES);
    volume.write(VOLUME_SIZE_BYTES, pattern(1, 4 * KIB)).await.unwrap();
}

#[test]
fn calls_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    fn calls(volume: &Volume) {
        assert_send(&volume.read(0, 4096));
        assert_send(&volume.write(0, Bytes::new()));
        assert_send(&volume.write_zeroes(0, 4096));
        assert_send(&volume.trim(0, 4096));
        assert_send(&volume.flush());
    }
    let _ = calls;
    fn assert_sync<T: Send + Sync + Clone>() {}
    assert_sync::<Client>();
    assert_sync::<Volume>();
}
