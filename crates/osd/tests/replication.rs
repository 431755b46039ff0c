//! Three OSDs in one process, each on its own thread, against an embedded metadata store:
//! replicated writes, the refusals (role, epoch, arguments), a malformed frame, writes that
//! must not be acknowledged while a member of the PG is down, and writes to a head waiting
//! for its seal.
//!
//! The pool and its PG table are written into the store directly (no mon), after the OSDs
//! have registered and been given ids 1, 2 and 3.

mod common;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster::records::{encode, FORMAT_VERSION};
use cluster::{inode, keys, object_pg, VolumeRecord};
use common::{
    members, object_info, pattern, status, stripe_with_primary, Cluster, CutStore, INODE, OBJECT_SIZE, PG_COUNT, POOL,
};
use engine::{Engine, EngineOptions};
use osd::{Metadata, Stop};
use platform_linux::{UringDisk, UringOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wire::{ObjectId, Opcode, PgId, Request, Response, Status};

#[test]
fn replicated_writes_are_on_every_member_and_read_back() {
    let cluster = Cluster::start();
    let (stripe, pg) = stripe_with_primary(1);
    let object = ObjectId { inode: INODE, stripe };
    let base = stripe * u64::from(OBJECT_SIZE);
    let primary = cluster.connect(1);

    let data = pattern(1, 8192);
    let write = Request::Write { pg, inode: INODE, offset_bytes: base + 4096, data: data.clone() };
    let reply = cluster.call_settled(&primary, 1, write);
    assert_eq!(reply.response, Response::Write, "{reply:?}");
    assert_eq!(reply.epoch, 1);

    let infos: Vec<Response> = (1..=3).map(|osd| object_info(&cluster, osd, pg, object)).collect();
    let Response::ObjectInfo { version, data_crc32c, present } = infos[0] else {
        panic!("object info: {:?}", infos[0])
    };
    assert_eq!(present, 0b110, "the pages written, and no other");
    assert_eq!(version, 1 << 40, "the first version of epoch 1");
    let mut expected = vec![0u8; OBJECT_SIZE as usize];
    expected[4096..4096 + 8192].copy_from_slice(&data);
    assert_eq!(data_crc32c, crc32c::crc32c(&expected));
    assert!(infos.iter().all(|info| *info == infos[0]), "replicas differ: {infos:?}");

    let read = Request::Read { pg, inode: INODE, offset_bytes: base, length_bytes: 16384 };
    let Response::Read { data: read } = cluster.call(&primary, 1, read).response else { panic!("read failed") };
    assert_eq!(&read[..], &expected[..16384]);

    // Zeroes, then a whole-object trim (a delete everywhere), then a barrier.
    let zeroes = Request::WriteZeroes { pg, inode: INODE, offset_bytes: base + 4096, length_bytes: 4096 };
    assert_eq!(cluster.call(&primary, 1, zeroes).response, Response::WriteZeroes);
    let Response::ObjectInfo { version: after_zeroes, .. } = object_info(&cluster, 3, pg, object) else { panic!() };
    assert_eq!(after_zeroes, version + 1);
    let trim = Request::Trim { pg, inode: INODE, offset_bytes: base, length_bytes: OBJECT_SIZE };
    assert_eq!(cluster.call(&primary, 1, trim).response, Response::Trim);
    assert_eq!(cluster.call(&primary, 0, Request::Flush).response, Response::Flush);
    for osd in 1..=3 {
        let info = object_info(&cluster, osd, pg, object);
        assert_eq!(info, Response::Failed { opcode: Opcode::ObjectInfo, status: Status::NoSuchObject }, "osd.{osd}");
    }

    // Pipelined writes to one object are serialized: versions follow arrival order.
    let writes: Vec<_> = (0..8u8)
        .map(|index| {
            let offset_bytes = base + u64::from(index) * 4096;
            let request = Request::Write { pg, inode: INODE, offset_bytes, data: pattern(index, 4096) };
            let primary = primary.clone();
            cluster.runtime.spawn(async move { primary.call(1, request).await })
        })
        .collect();
    for write in writes {
        assert_eq!(cluster.runtime.block_on(write).unwrap().unwrap().response, Response::Write);
    }
    let infos: Vec<Response> = (1..=3).map(|osd| object_info(&cluster, osd, pg, object)).collect();
    assert!(infos.iter().all(|info| *info == infos[0]), "replicas differ after pipelined writes: {infos:?}");

    // A replica lists the object with the version every member has.
    let replica = cluster.connect(members(pg.pg)[1]);
    let list = Request::SecList { pg, start: ObjectId { inode: 0, stripe: 0 }, count_max: 100 };
    let Response::SecList { entries } = cluster.call(&replica, 1, list).response else { panic!("list failed") };
    let Response::ObjectInfo { version, .. } = infos[0] else { panic!() };
    assert!(entries.iter().any(|entry| entry.object == object && entry.version == version), "{entries:?}");

    // A clean stop leaves the journal empty: the next open has nothing to replay.
    let mut cluster = cluster;
    cluster.stop(1, Stop::Graceful);
    let disk = UringDisk::open(&cluster.dir.path().join("o1"), UringOptions::default()).unwrap();
    let engine = Engine::open(disk, &EngineOptions::default()).unwrap();
    assert!(engine.is_written_back(), "the journal still holds records after a clean stop");
    assert_eq!(engine.object_version(engine::ObjectId { inode: INODE, stripe }), Some(version));
    assert_eq!(engine.superblock().osd_id, 1);
}

#[test]
fn wrong_role_epoch_or_arguments_are_refused() {
    let cluster = Cluster::start();
    let (stripe, pg) = stripe_with_primary(2);
    let object = ObjectId { inode: INODE, stripe };
    let base = stripe * u64::from(OBJECT_SIZE);
    let write = |offset_bytes: u64, size_bytes: usize| Request::Write {
        pg,
        inode: INODE,
        offset_bytes,
        data: pattern(9, size_bytes),
    };
    let primary = cluster.connect(2);
    assert_eq!(cluster.call_settled(&primary, 1, write(base, 4096)).response, Response::Write);

    // Not the primary.
    let other = cluster.connect(members(pg.pg)[1]);
    assert_eq!(status(&cluster.call(&other, 1, write(base, 4096))), Status::NotPrimary);
    // An older epoch is told ours; a newer one that never comes is Busy.
    let reply = cluster.call(&primary, 0, write(base, 4096));
    assert_eq!((status(&reply), reply.epoch), (Status::WrongEpoch, 1));
    assert_eq!(status(&cluster.call(&primary, 5, write(base, 4096))), Status::Busy);
    // Misaligned, empty, across the object's end, in another PG, an unknown pool.
    assert_eq!(status(&cluster.call(&primary, 1, write(base + 512, 4096))), Status::InvalidArgument);
    assert_eq!(status(&cluster.call(&primary, 1, write(base, 0))), Status::InvalidArgument);
    assert_eq!(status(&cluster.call(&primary, 1, write(base + 4096, OBJECT_SIZE as usize))), Status::OutOfRange);
    let (other_stripe, _) = (0..1000)
        .map(|stripe| (stripe, object_pg(INODE, stripe, PG_COUNT)))
        .find(|(_, other)| *other != pg.pg)
        .unwrap();
    let misplaced = write(other_stripe * u64::from(OBJECT_SIZE), 4096);
    assert_eq!(status(&cluster.call(&primary, 1, misplaced)), Status::InvalidArgument);
    let unknown = Request::Read { pg: PgId { pool: 9, pg: 0 }, inode: INODE, offset_bytes: 0, length_bytes: 4096 };
    assert_eq!(status(&cluster.call(&primary, 1, unknown)), Status::InvalidArgument);

    // A replica op of an older epoch is refused before it touches data.
    let replica = members(pg.pg)[1];
    let replica_connection = cluster.connect(replica);
    let stale = Request::SecWrite { pg, object, version: 5, offset_bytes: 0, data: pattern(3, 4096) };
    let reply = cluster.call(&replica_connection, 0, stale.clone());
    assert_eq!((status(&reply), reply.epoch), (Status::WrongEpoch, 1));
    // A version no primary of this epoch could mint is refused.
    let too_new = Request::SecWrite { pg, object, version: 7 << 40, offset_bytes: 0, data: pattern(3, 4096) };
    assert_eq!(status(&cluster.call(&replica_connection, 1, too_new)), Status::InvalidArgument);
    let info = |osd| object_info(&cluster, osd, pg, object);
    assert_eq!(info(replica), info(2), "the refused replica ops changed nothing");

    // The PG moves to epoch 2: ops of epoch 1 are refused with the new epoch, and a replica
    // op of epoch 1 too.
    cluster.set_table(2, &[pg.pg]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let reply = loop {
        let reply = cluster.call(&primary, 1, write(base, 4096));
        if status(&reply) == Status::WrongEpoch || Instant::now() > deadline {
            break reply;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!((status(&reply), reply.epoch), (Status::WrongEpoch, 2));
    let list = Request::SecList { pg, start: object, count_max: 1 };
    let deadline = Instant::now() + Duration::from_secs(10);
    while status(&cluster.call(&replica_connection, 1, list.clone())) != Status::WrongEpoch {
        assert!(Instant::now() < deadline, "the replica never saw epoch 2");
        std::thread::sleep(Duration::from_millis(20));
    }
    let reply = cluster.call(&replica_connection, 1, stale);
    assert_eq!((status(&reply), reply.epoch), (Status::WrongEpoch, 2));
    let reply = cluster.call_settled(&primary, 2, write(base, 4096));
    assert_eq!(reply.response, Response::Write);
    let Response::ObjectInfo { version, .. } = info(replica) else { panic!() };
    assert_eq!(version, 2 << 40, "the first write of epoch 2 jumps to its versions");
}

/// A write to a head that waits for its seal (ADR 0026) runs but is not acknowledged until the
/// mon says the head is sealed (wire op Sealed), though the map still shows it sealing; with no
/// such word it is answered `Busy` after the OSD's wait for its map.
#[test]
fn a_write_to_a_sealing_head_waits_for_the_word_that_it_is_sealed() {
    let cluster = Cluster::start_with(|config| config.epoch_wait = Duration::from_secs(3));
    let head = inode::layered(POOL, 1, 0);
    let volume = VolumeRecord {
        version: FORMAT_VERSION,
        id: head,
        name: "vol".into(),
        pool: POOL,
        size_bytes: 1 << 30,
        object_size_bytes: OBJECT_SIZE,
        parent: None,
        sealing: true,
        flattening: false,
        flags: Vec::new(),
    };
    cluster.put(&keys::volume("vol"), encode(&volume));
    let pg = PgId { pool: POOL, pg: object_pg(head, 0, PG_COUNT) };
    let primary = members(pg.pg)[0];
    let write = Request::Write { pg, inode: head, offset_bytes: 0, data: pattern(4, 4096) };
    let connection = cluster.connect(primary);
    // Busy once the primary held the write for its wait for the map: first for the volume to
    // appear in it, then for the seal.
    let deadline = Instant::now() + Duration::from_secs(10);
    let held = loop {
        let started = Instant::now();
        let reply = cluster.call(&connection, 1, write.clone());
        assert_eq!(status(&reply), Status::Busy, "a sealing head's write with no word is refused");
        if started.elapsed() > Duration::from_secs(2) {
            break started.elapsed();
        }
        assert!(Instant::now() < deadline, "the primary never held a write to the sealing head");
        // Before the map has the volume, the write is held for as long, then refused.
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(held < Duration::from_secs(5), "held for the wait for the map, then refused ({held:?})");

    let waiting = {
        let connection = cluster.connect(primary);
        let write = write.clone();
        let handle = cluster.runtime.handle().clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let reply = handle.block_on(connection.call(1, write)).expect("a reply");
            (reply, started.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiting.is_finished(), "the write is not acknowledged while the head is sealing");
    let mon = cluster.connect(primary);
    assert_eq!(cluster.call(&mon, 0, Request::Sealed { inode: head }).response, Response::Sealed);
    let (reply, waited) = waiting.join().unwrap();
    assert_eq!(reply.response, Response::Write, "the word that the head is sealed lets the write through");
    assert!(waited < Duration::from_secs(2), "went on at the word, not at the end of the wait ({waited:?})");
    assert_eq!(cluster.call(&connection, 1, write).response, Response::Write);
}

#[test]
fn a_malformed_frame_closes_only_its_connection() {
    let cluster = Cluster::start();
    let (stripe, pg) = stripe_with_primary(3);
    let primary = cluster.connect(3);
    let read = Request::Read { pg, inode: INODE, offset_bytes: stripe * u64::from(OBJECT_SIZE), length_bytes: 4096 };
    assert_eq!(cluster.call_settled(&primary, 1, read.clone()).response.status(), Status::Ok);

    let address = cluster.address(3);
    cluster.runtime.block_on(async {
        let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
        socket.write_all(b"BSLW\x01\x00 this is not a frame header, not at all....").await.unwrap();
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut rest)).await;
        assert!(matches!(read, Ok(Ok(_))), "the osd kept a connection with a malformed frame open: {read:?}");
    });

    assert_eq!(cluster.call(&primary, 1, read).response.status(), Status::Ok);
    assert_eq!(cluster.call(&primary, 0, Request::Ping).response, Response::Ping);
}

#[test]
fn writes_are_not_acknowledged_while_a_member_is_down() {
    let mut cluster = Cluster::start();
    let (stripe, pg) = stripe_with_primary(1);
    let object = ObjectId { inode: INODE, stripe };
    let base = stripe * u64::from(OBJECT_SIZE);
    let write = |seed| Request::Write { pg, inode: INODE, offset_bytes: base, data: pattern(seed, 4096) };
    let primary = cluster.connect(1);
    assert_eq!(cluster.call_settled(&primary, 1, write(1)).response, Response::Write);
    let Response::ObjectInfo { version: acknowledged, .. } = object_info(&cluster, 2, pg, object) else { panic!() };

    // A member that crashed: its liveness key stays until the lease expires, but nothing
    // answers at its address.
    let crashed = members(pg.pg)[2];
    cluster.stop(crashed, Stop::Abort);
    assert!(cluster.live(crashed).is_some());
    let reply = cluster.call(&primary, 1, write(2));
    assert_eq!(status(&reply), Status::Busy);
    // Reads do not need the replicas. The failed write made the PG peer again (the member may
    // have lost what it had not made durable), which a read may have to wait out: `Busy` until
    // then, on a loaded machine.
    let read = Request::Read { pg, inode: INODE, offset_bytes: base, length_bytes: 4096 };
    assert_eq!(status(&cluster.call_settled(&primary, 1, read)), Status::Ok);

    // Once its lease has expired, the member is down in the map: Busy at once.
    let deadline = Instant::now() + Duration::from_secs(10);
    while cluster.live(crashed).is_some() {
        assert!(Instant::now() < deadline, "the crashed osd's liveness key never expired");
        std::thread::sleep(Duration::from_millis(50));
    }
    let started = Instant::now();
    let reply = cluster.call(&primary, 1, write(3));
    assert_eq!(status(&reply), Status::Busy);
    assert!(started.elapsed() < Duration::from_secs(5));

    // The surviving replica holds what was acknowledged, and maybe the unacknowledged
    // attempts (they were written locally and sent before the failure was known), never more.
    let survivor = members(pg.pg)[1];
    let Response::ObjectInfo { version, .. } = object_info(&cluster, survivor, pg, object) else { panic!() };
    assert!(version >= acknowledged && version <= acknowledged + 2, "{version} vs {acknowledged}");

    // A member stopped cleanly removes its key at once.
    cluster.stop(survivor, Stop::Graceful);
    assert!(cluster.live(survivor).is_none(), "a clean stop revokes the lease");
    assert_eq!(status(&cluster.call(&primary, 1, write(4))), Status::Busy);
}

/// Collects what an OSD reports.
#[derive(Debug, Default)]
struct Reports(Mutex<Vec<(u32, i64)>>);

impl net::DownReporter for Reports {
    fn report(&self, osd: u32, incarnation: i64) {
        self.0.lock().unwrap().push((osd, incarnation));
    }
}

#[test]
fn a_primary_reports_a_secondary_whose_address_refuses_it_once() {
    let reports = Arc::new(Reports::default());
    let mut cluster = Cluster::start_with(|config| config.down_reporter = Some(reports.clone()));
    let (stripe, pg) = stripe_with_primary(1);
    let base = stripe * u64::from(OBJECT_SIZE);
    let write = |seed| Request::Write { pg, inode: INODE, offset_bytes: base, data: pattern(seed, 4096) };
    let primary = cluster.connect(1);
    assert_eq!(cluster.call_settled(&primary, 1, write(1)).response, Response::Write);
    assert!(reports.0.lock().unwrap().is_empty());

    let crashed = members(pg.pg)[2];
    let incarnation = cluster.live(crashed).expect("registered").incarnation;
    cluster.stop(crashed, Stop::Abort);
    // The first write may find the old connection closed; the next connects and is refused.
    for seed in 2..5 {
        assert_eq!(status(&cluster.call(&primary, 1, write(seed))), Status::Busy);
    }
    assert_eq!(*reports.0.lock().unwrap(), [(crashed, incarnation)]);
}

#[test]
fn an_osd_registers_again_after_losing_its_lease() {
    let cluster = Cluster::start();
    let before = cluster.live(1).expect("registered");
    cluster.runtime.block_on(cluster.store.lease_revoke(meta::LeaseId(before.incarnation))).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let after = loop {
        if let Some(after) = cluster.live(1) {
            break after;
        }
        assert!(Instant::now() < deadline, "the osd did not register again");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_ne!(after.incarnation, before.incarnation);
    assert_eq!(after.address, before.address);
    let (stripe, pg) = stripe_with_primary(1);
    let primary = cluster.connect(1);
    let write =
        Request::Write { pg, inode: INODE, offset_bytes: stripe * u64::from(OBJECT_SIZE), data: pattern(5, 4096) };
    assert_eq!(cluster.call_settled(&primary, 1, write).response, Response::Write);
}

#[test]
fn an_osd_whose_store_goes_away_after_its_first_answer_waits_for_it_at_every_step_of_its_start() {
    let cut = Arc::new(AtomicBool::new(false));
    const CUT_FOR: Duration = Duration::from_millis(1500);
    let started = Instant::now();
    let healer = {
        let cut = cut.clone();
        std::thread::spawn(move || {
            std::thread::sleep(CUT_FOR);
            cut.store(false, Ordering::SeqCst);
        })
    };
    // The second OSD's store answers its first call (the cluster record), then none until healed:
    // its id allocation and everything after it wait, as across an etcd election.
    let cluster = Cluster::start_with(|config| {
        if config.data_path.ends_with("o2") {
            let Metadata::Store(store) = &config.metadata else { unreachable!() };
            let store = CutStore { cut_after: AtomicI64::new(1), ..CutStore::new(store.clone(), cut.clone()) };
            config.metadata = Metadata::Store(Arc::new(store));
        }
    });
    healer.join().unwrap();
    assert!(started.elapsed() >= CUT_FOR, "the second OSD started while its store was cut off");
    assert!(cluster.live(2).is_some(), "registered once the store came back");
    let (stripe, pg) = stripe_with_primary(2);
    let write =
        Request::Write { pg, inode: INODE, offset_bytes: stripe * u64::from(OBJECT_SIZE), data: pattern(9, 4096) };
    assert_eq!(cluster.call_settled(&cluster.connect(2), 1, write).response, Response::Write);
}

#[test]
fn an_osd_cut_off_from_the_store_stops_acknowledging_before_its_lease_can_expire() {
    let cut = Arc::new(AtomicBool::new(false));
    let cluster = Cluster::start_with(|config| {
        if config.data_path.ends_with("o1") {
            let Metadata::Store(store) = &config.metadata else { unreachable!() };
            config.metadata = Metadata::Store(Arc::new(CutStore::new(store.clone(), cut.clone())));
        }
    });
    let (stripe, pg) = stripe_with_primary(1);
    let write = |seed| Request::Write {
        pg,
        inode: INODE,
        offset_bytes: stripe * u64::from(OBJECT_SIZE),
        data: pattern(seed, 4096),
    };
    let primary = cluster.connect(1);
    assert_eq!(cluster.call_settled(&primary, 1, write(0)).response, Response::Write);
    let incarnation = cluster.live(1).expect("registered").incarnation;

    cut.store(true, Ordering::SeqCst);
    let cut_at = Instant::now();
    let fenced_at = loop {
        let reply = cluster.call(&primary, 1, write(1));
        if status(&reply) == Status::Busy {
            break Instant::now();
        }
        assert_eq!(reply.response, Response::Write);
        assert!(cut_at.elapsed() < Duration::from_secs(2), "still acknowledging when the lease may have expired");
        std::thread::sleep(Duration::from_millis(10));
    };
    // The store still holds the key: the OSD stopped first.
    assert!(cluster.live(1).is_some(), "the lease expired before the osd stopped acknowledging");
    assert!(fenced_at - cut_at <= Duration::from_millis(1700), "{:?}", fenced_at - cut_at);

    // Nothing is acknowledged until the OSD is registered again under a new lease.
    let deadline = Instant::now() + Duration::from_secs(10);
    while cluster.live(1).is_some() {
        assert_eq!(status(&cluster.call(&primary, 1, write(2))), Status::Busy);
        assert!(Instant::now() < deadline, "the lease never expired");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(status(&cluster.call(&primary, 1, write(3))), Status::Busy);
    cut.store(false, Ordering::SeqCst);
    let reply = cluster.call_settled(&primary, 1, write(4));
    assert_eq!(reply.response, Response::Write);
    assert_ne!(cluster.live(1).expect("registered again").incarnation, incarnation);
}
