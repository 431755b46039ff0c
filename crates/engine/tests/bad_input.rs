//! Requests the engine must refuse, a full engine, and disk errors.
//!
//! Malformed requests get an error naming the problem and change nothing. A full engine
//! refuses new objects with `NoSpace` but still takes overwrites (through the journal) and
//! deletes, and gets its space back. A failed data-block write fails that write only; a failed
//! journal (or write-back) write poisons the engine: writes fail with `Poisoned`, reads go on, and
//! a reopen recovers everything acknowledged. Every test ends with a reopen and a full check.

mod common;

use std::collections::BTreeMap;

use common::{
    execute, format_disk, page_pattern, pattern_buffer, read, run_batch, stop, write, CrashDisk, DiskControl,
    PAGE_BYTES,
};
use engine::{AlignedBuffer, DiskError, Engine, EngineError, ObjectId, Reply, Request};
use sim::{SimDisk, SimDiskOptions};

const OBJECT_SIZE_BYTES: u32 = 16 * 1024;
const PAGES_PER_OBJECT: u32 = OBJECT_SIZE_BYTES / PAGE_BYTES as u32;

fn object(stripe: u64) -> ObjectId {
    ObjectId { inode: 0xbad, stripe }
}

/// An engine on `size_bytes` of simulated disk, and a handle to inject disk faults.
fn new_engine(size_bytes: u64) -> (Engine<CrashDisk>, DiskControl) {
    let disk = SimDisk::new(SimDiskOptions { size_bytes, ..SimDiskOptions::default() });
    let disk = CrashDisk::new(disk, false, 0);
    let control = disk.control();
    (common::open(format_disk(disk, u64::from(OBJECT_SIZE_BYTES), 320 << 10)), control)
}

/// What every object should read as.
#[derive(Default)]
struct Expected(BTreeMap<ObjectId, Vec<u8>>);

impl Expected {
    fn write(&mut self, id: ObjectId, first_page: u32, data: &[u8]) {
        let bytes = self.0.entry(id).or_insert_with(|| vec![0; OBJECT_SIZE_BYTES as usize]);
        let at = first_page as usize * PAGE_BYTES;
        bytes[at..at + data.len()].copy_from_slice(data);
    }

    fn delete(&mut self, id: ObjectId) {
        self.0.remove(&id);
    }

    fn check(&self, engine: &mut Engine<CrashDisk>) {
        for (id, bytes) in &self.0 {
            assert!(read(engine, *id, 0, OBJECT_SIZE_BYTES).1 == *bytes, "{id} differs");
        }
        let listed: Vec<ObjectId> = engine.list_objects().into_iter().map(|(id, _)| id).collect();
        assert_eq!(listed, self.0.keys().copied().collect::<Vec<_>>());
    }
}

/// Writes `page_count` pages of pattern `tag` and records them.
fn write_pages(
    engine: &mut Engine<CrashDisk>,
    expected: &mut Expected,
    id: ObjectId,
    tag: u64,
    first_page: u32,
    page_count: u32,
) {
    let data = pattern_buffer(tag, id, first_page, page_count);
    expected.write(id, first_page, &data);
    write(engine, id, first_page * PAGE_BYTES as u32, data);
}

fn invalid(result: Result<Reply, EngineError>) -> String {
    match result {
        Err(EngineError::InvalidArgument { reason }) => reason,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

fn out_of_range(result: Result<Reply, EngineError>) -> (u64, u64) {
    match result {
        Err(EngineError::OutOfRange { offset_bytes, length_bytes, object_size_bytes }) => {
            assert_eq!(object_size_bytes, OBJECT_SIZE_BYTES);
            (offset_bytes, length_bytes)
        }
        other => panic!("expected OutOfRange, got {other:?}"),
    }
}

#[test]
fn malformed_requests_are_refused_and_change_nothing() {
    let (mut engine, _) = new_engine(8 << 20);
    let mut expected = Expected::default();
    let id = object(1);
    write_pages(&mut engine, &mut expected, id, 1, 0, PAGES_PER_OBJECT);
    let page = || AlignedBuffer::from_slice(&page_pattern(99, id, 0));

    // Writes.
    let reason = invalid(execute(&mut engine, Request::Write { object: id, offset_bytes: 100, data: page() }));
    assert!(reason.contains("offset_bytes=100"), "{reason}");
    let reason = invalid(execute(
        &mut engine,
        Request::Write { object: id, offset_bytes: 0, data: AlignedBuffer::zeroed(5000) },
    ));
    assert!(reason.contains("length_bytes=5000"), "{reason}");
    invalid(execute(&mut engine, Request::Write { object: id, offset_bytes: 0, data: AlignedBuffer::empty() }));
    let past = OBJECT_SIZE_BYTES - 4096;
    assert_eq!(
        out_of_range(execute(
            &mut engine,
            Request::Write { object: id, offset_bytes: past, data: AlignedBuffer::zeroed(8192) }
        )),
        (u64::from(past), 8192)
    );
    out_of_range(execute(&mut engine, Request::Write { object: id, offset_bytes: OBJECT_SIZE_BYTES, data: page() }));
    out_of_range(execute(
        &mut engine,
        Request::Write { object: id, offset_bytes: 0, data: AlignedBuffer::zeroed(2 * OBJECT_SIZE_BYTES as usize) },
    ));
    // An offset near u32::MAX must not overflow.
    out_of_range(execute(
        &mut engine,
        Request::Write { object: id, offset_bytes: u32::MAX - 4095, data: AlignedBuffer::zeroed(8192) },
    ));

    // Reads.
    invalid(execute(&mut engine, Request::Read { object: id, offset_bytes: 512, length_bytes: 4096 }));
    invalid(execute(&mut engine, Request::Read { object: id, offset_bytes: 0, length_bytes: 4095 }));
    invalid(execute(&mut engine, Request::Read { object: id, offset_bytes: 0, length_bytes: 0 }));
    out_of_range(execute(
        &mut engine,
        Request::Read { object: id, offset_bytes: 0, length_bytes: OBJECT_SIZE_BYTES + 4096 },
    ));
    out_of_range(execute(
        &mut engine,
        Request::Read { object: id, offset_bytes: u32::MAX - 4095, length_bytes: u32::MAX - 4095 },
    ));

    // Mixed with valid requests in one batch: each gets its own answer, in order.
    let other = object(2);
    let results = run_batch(
        &mut engine,
        vec![
            Request::Write { object: other, offset_bytes: 4096, data: pattern_buffer(2, other, 1, 1) },
            Request::Write { object: other, offset_bytes: 4097, data: page() },
            Request::Read { object: id, offset_bytes: 0, length_bytes: 4096 },
            Request::Read { object: id, offset_bytes: OBJECT_SIZE_BYTES, length_bytes: 4096 },
            Request::Delete { object: object(3) },
            Request::Flush,
        ],
    );
    expected.write(other, 1, &pattern_buffer(2, other, 1, 1));
    assert!(matches!(results[0], Ok(Reply::Written { .. })), "{:?}", results[0]);
    assert!(matches!(results[1], Err(EngineError::InvalidArgument { .. })), "{:?}", results[1]);
    match &results[2] {
        Ok(Reply::Read { data, .. }) => assert_eq!(data.to_vec(), page_pattern(1, id, 0)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(results[3], Err(EngineError::OutOfRange { .. })), "{:?}", results[3]);
    // Deleting an object that never existed is not an error.
    assert!(matches!(results[4], Ok(Reply::Deleted { .. })), "{:?}", results[4]);
    assert!(matches!(results[5], Ok(Reply::Flushed)), "{:?}", results[5]);

    assert!(engine.poisoned().is_none());
    expected.check(&mut engine);
    let mut engine = common::open(stop(engine));
    expected.check(&mut engine);
}

#[test]
fn a_full_engine_refuses_new_objects_and_recovers_space() {
    let (mut engine, _) = new_engine(4 << 20);
    let block_count = engine.geometry().block_count;
    let mut expected = Expected::default();
    let mut stored = 0u64;
    // Fill with whole-object writes to new objects until the engine says NoSpace.
    loop {
        let id = object(stored);
        let data = pattern_buffer(stored + 1, id, 0, PAGES_PER_OBJECT);
        match execute(&mut engine, Request::Write { object: id, offset_bytes: 0, data: data.clone() }) {
            Ok(Reply::Written { .. }) => {
                expected.write(id, 0, &data);
                stored += 1;
            }
            Err(EngineError::NoSpace { object: refused }) => {
                assert_eq!(refused, id);
                break;
            }
            other => panic!("{other:?}"),
        }
        assert!(stored <= u64::from(block_count), "more objects than blocks");
    }
    assert_eq!(stored, u64::from(block_count), "every block holds an object");
    let space = engine.space();
    assert_eq!((space.used_bytes, space.free_bytes), (space.total_bytes, 0), "{space:?}");

    // New objects, whole or small, are refused; the engine is not poisoned.
    let new = object(10_000);
    assert!(matches!(
        execute(&mut engine, Request::Write { object: new, offset_bytes: 0, data: pattern_buffer(7, new, 0, 1) }),
        Err(EngineError::NoSpace { .. })
    ));
    // Overwrites of existing objects, whole (through the journal) and small, still work.
    for round in 0..3u64 {
        let id = object(round);
        write_pages(&mut engine, &mut expected, id, 100 + round, 0, PAGES_PER_OBJECT);
        write_pages(&mut engine, &mut expected, object(round + 10), 200 + round, 1, 2);
    }
    engine.write_back_journal();
    assert!(engine.poisoned().is_none());
    expected.check(&mut engine);

    // Deletes give blocks back once written back, and exactly that many new objects fit.
    for stripe in 20..25 {
        assert!(matches!(execute(&mut engine, Request::Delete { object: object(stripe) }), Ok(Reply::Deleted { .. })));
        expected.delete(object(stripe));
    }
    engine.write_back_journal();
    assert_eq!(engine.space().free_bytes, 5 * u64::from(OBJECT_SIZE_BYTES), "{:?}", engine.space());
    for index in 0..5u64 {
        let id = object(20_000 + index);
        if index % 2 == 0 {
            write_pages(&mut engine, &mut expected, id, 300 + index, 0, PAGES_PER_OBJECT);
        } else {
            write_pages(&mut engine, &mut expected, id, 300 + index, 2, 1);
        }
    }
    let id = object(30_000);
    assert!(matches!(
        execute(&mut engine, Request::Write { object: id, offset_bytes: 0, data: pattern_buffer(9, id, 0, 1) }),
        Err(EngineError::NoSpace { .. })
    ));

    expected.check(&mut engine);
    let mut engine = common::open(stop(engine));
    expected.check(&mut engine);
    let space = engine.space();
    assert_eq!((space.used_bytes, space.free_bytes), (space.total_bytes, 0), "{space:?}");
}

#[test]
fn a_failed_data_block_write_fails_only_that_write() {
    let (mut engine, control) = new_engine(8 << 20);
    let mut expected = Expected::default();
    let id = object(1);
    write_pages(&mut engine, &mut expected, id, 1, 0, PAGES_PER_OBJECT);
    engine.write_back_journal();

    // The whole-object write's data goes to a fresh block first; that write fails.
    control.apply(|disk| disk.fail_next_writes(1));
    match execute(
        &mut engine,
        Request::Write { object: id, offset_bytes: 0, data: pattern_buffer(2, id, 0, PAGES_PER_OBJECT) },
    ) {
        Err(EngineError::Disk(DiskError::Io { errno: 5, .. })) => {}
        other => panic!("{other:?}"),
    }
    control.apply(|disk| disk.set_no_space(true));
    match execute(
        &mut engine,
        Request::Write { object: id, offset_bytes: 0, data: pattern_buffer(3, id, 0, PAGES_PER_OBJECT) },
    ) {
        Err(EngineError::NoSpace { object: refused }) => assert_eq!(refused, id),
        other => panic!("{other:?}"),
    }
    control.apply(|disk| disk.set_no_space(false));
    assert!(engine.poisoned().is_none());
    expected.check(&mut engine);
    // The engine goes on, and the blocks of the failed writes were given back.
    write_pages(&mut engine, &mut expected, id, 4, 0, PAGES_PER_OBJECT);
    write_pages(&mut engine, &mut expected, object(2), 5, 1, 1);
    engine.write_back_journal();
    assert_eq!(engine.space().used_bytes, 2 * u64::from(OBJECT_SIZE_BYTES));
    expected.check(&mut engine);
    let mut engine = common::open(stop(engine));
    expected.check(&mut engine);
}

#[test]
fn a_failed_read_fails_only_that_read() {
    let (mut engine, control) = new_engine(8 << 20);
    let mut expected = Expected::default();
    write_pages(&mut engine, &mut expected, object(1), 1, 0, PAGES_PER_OBJECT);
    engine.write_back_journal();
    control.apply(|disk| disk.fail_next_reads(1));
    let result =
        execute(&mut engine, Request::Read { object: object(1), offset_bytes: 0, length_bytes: OBJECT_SIZE_BYTES });
    assert!(matches!(result, Err(EngineError::Disk(_))), "{result:?}");
    assert!(engine.poisoned().is_none());
    expected.check(&mut engine);
}

/// Acknowledged writes, some written back and some only journaled, then a fault that poisons.
fn poison_with(inject: impl FnOnce(&mut SimDisk) + 'static, through_writeback: bool) {
    let (mut engine, control) = new_engine(8 << 20);
    let mut expected = Expected::default();
    for stripe in 0..4u64 {
        write_pages(&mut engine, &mut expected, object(stripe), stripe + 1, 0, PAGES_PER_OBJECT);
        write_pages(&mut engine, &mut expected, object(stripe + 10), stripe + 20, 1, 2);
    }
    engine.write_back_journal();
    for stripe in 0..4u64 {
        write_pages(&mut engine, &mut expected, object(stripe), stripe + 40, 2, 1);
    }
    if through_writeback {
        // The write-back job's first write (a copy into a data block) fails.
        engine.write_back_journal();
        write_pages(&mut engine, &mut expected, object(0), 50, 3, 1);
        control.apply(inject);
        engine.write_back_journal();
    } else {
        // The journal write of this batch fails: every write in it fails with Poisoned.
        control.apply(inject);
        let requests = (0..3u64)
            .map(|stripe| Request::Write {
                object: object(stripe),
                offset_bytes: 0,
                data: pattern_buffer(60 + stripe, object(stripe), 0, 1),
            })
            .collect();
        for result in run_batch(&mut engine, requests) {
            assert!(matches!(result, Err(EngineError::Poisoned { .. })), "{result:?}");
        }
    }
    assert!(engine.poisoned().is_some());
    // Writes of every kind fail; reads and flush requests still work.
    let results = run_batch(
        &mut engine,
        vec![
            Request::Write { object: object(5), offset_bytes: 0, data: pattern_buffer(70, object(5), 0, 1) },
            Request::Write {
                object: object(1),
                offset_bytes: 0,
                data: pattern_buffer(71, object(1), 0, PAGES_PER_OBJECT),
            },
            Request::Delete { object: object(2) },
            Request::Flush,
        ],
    );
    for result in &results[..3] {
        assert!(matches!(result, Err(EngineError::Poisoned { .. })), "{result:?}");
    }
    assert!(matches!(results[3], Ok(Reply::Flushed)), "{:?}", results[3]);
    expected.check(&mut engine);

    // A restart recovers everything acknowledged, and the engine takes writes again.
    let mut engine = common::open(stop(engine));
    if through_writeback {
        expected.check(&mut engine);
    } else {
        // A failed write+flush may have written its record without making it durable; it was
        // never acknowledged, so either outcome is right. Compare the pages it did not touch.
        let objects: Vec<(ObjectId, Vec<u8>)> = expected.0.iter().map(|(id, bytes)| (*id, bytes.clone())).collect();
        for (id, bytes) in &objects {
            let data = read(&mut engine, *id, 0, OBJECT_SIZE_BYTES).1;
            let failed = id.stripe < 3;
            let from = if failed { PAGE_BYTES } else { 0 };
            assert!(data[from..] == bytes[from..], "{id} differs");
            if failed {
                let stripe = id.stripe;
                assert!(
                    data[..PAGE_BYTES] == bytes[..PAGE_BYTES]
                        || data[..PAGE_BYTES] == page_pattern(60 + stripe, *id, 0),
                    "{id} page 0"
                );
                expected.write(*id, 0, &data[..PAGE_BYTES]);
            }
        }
    }
    write_pages(&mut engine, &mut expected, object(5), 80, 0, 1);
    engine.write_back_journal();
    expected.check(&mut engine);
    let mut engine = common::open(stop(engine));
    expected.check(&mut engine);
}

#[test]
fn a_failed_journal_write_poisons_until_restart() {
    poison_with(|disk| disk.fail_next_writes(1), false);
}

#[test]
fn a_failed_journal_flush_poisons_until_restart() {
    poison_with(|disk| disk.fail_next_flushes(1), false);
}

#[test]
fn a_failed_writeback_write_poisons_until_restart() {
    poison_with(|disk| disk.fail_next_writes(1), true);
}

#[test]
fn a_failed_writeback_flush_poisons_until_restart() {
    poison_with(|disk| disk.fail_next_flushes(1), true);
}

/// Nothing asks for write-back here: short of blocks, the engine writes back deletes and moves
/// the journal tail past them by itself, so the blocks come back on an engine that sees only the
/// deletes and a few reads (a removed volume on a full OSD).
#[test]
fn a_full_engine_gives_deleted_objects_blocks_back_without_being_asked() {
    let (mut engine, _) = new_engine(4 << 20);
    let block_count = u64::from(engine.geometry().block_count);
    for stripe in 0..block_count {
        let id = object(stripe);
        let data = pattern_buffer(stripe + 1, id, 0, PAGES_PER_OBJECT);
        assert!(execute(&mut engine, Request::Write { object: id, offset_bytes: 0, data }).is_ok());
    }
    assert_eq!(engine.space().free_bytes, 0);
    // Few enough that their records alone would not start a write-back job for a long time.
    for stripe in 0..5 {
        assert!(matches!(execute(&mut engine, Request::Delete { object: object(stripe) }), Ok(Reply::Deleted { .. })));
    }
    let freed = 5 * u64::from(OBJECT_SIZE_BYTES);
    let mut reads = 0;
    while engine.space().free_bytes < freed {
        reads += 1;
        assert!(reads < 10_000, "the deleted objects' blocks did not come back: {:?}", engine.space());
        let kept = object(block_count - 1);
        let page = Request::Read { object: kept, offset_bytes: 0, length_bytes: PAGE_BYTES as u32 };
        assert!(execute(&mut engine, page).is_ok());
    }
    assert_eq!(engine.space().free_bytes, freed, "{:?}", engine.space());
    let id = object(50_000);
    write_pages(&mut engine, &mut Expected::default(), id, 9, 0, PAGES_PER_OBJECT);
}
