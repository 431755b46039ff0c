//! Caller-chosen versions (what a PG primary and its replicas use): stored as given, refused when
//! not newer than anything replay could still see, and kept across write-back, crashes and reopens.

mod common;

use std::collections::HashMap;

use common::{execute, format_disk, open, read, sim_disk, stop, PAGE_BYTES};
use engine::{AlignedBuffer, Engine, EngineError, ObjectId, Reply, Request};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sim::SimDiskOptions;

const OBJECT_BYTES: u32 = 64 * 1024;

fn new_disk() -> sim::SimDisk {
    let disk = sim_disk(SimDiskOptions { size_bytes: 32 << 20, ..Default::default() });
    format_disk(disk, u64::from(OBJECT_BYTES), 2 << 20)
}

fn filled(byte: u8, len: usize) -> AlignedBuffer {
    let mut buffer = AlignedBuffer::zeroed(len);
    buffer.fill(byte);
    buffer
}

#[test]
fn versions_are_stored_as_given_and_stale_ones_refused() {
    let mut engine = open(new_disk());
    let object = ObjectId { inode: 9, stripe: 1 };
    let write = |version, byte| Request::WriteVersioned { object, offset_bytes: 0, data: filled(byte, 4096), version };
    assert!(matches!(execute(&mut engine, write(1 << 40, 1)), Ok(Reply::Written { version }) if version == 1 << 40));
    assert_eq!(engine.object_version(object), Some(1 << 40));
    for stale in [1 << 40, 5] {
        let result = execute(&mut engine, write(stale, 2));
        assert_eq!(result.unwrap_err(), EngineError::StaleVersion { object, version: stale, current: 1 << 40 });
    }
    assert_eq!(read(&mut engine, object, 0, 4096), (1 << 40, vec![1; 4096]));
    // A stale whole-object write gives its fresh block back.
    let free = engine.space().free_bytes;
    let whole = Request::WriteVersioned { object, offset_bytes: 0, data: filled(3, OBJECT_BYTES as usize), version: 7 };
    assert!(matches!(execute(&mut engine, whole), Err(EngineError::StaleVersion { .. })));
    assert_eq!(engine.space().free_bytes, free);
    // A delete keeps its version known while replay could still read it.
    let delete = Request::DeleteVersioned { object, version: (1 << 40) + 5 };
    assert!(matches!(execute(&mut engine, delete), Ok(Reply::Deleted { version }) if version == (1 << 40) + 5));
    assert_eq!(engine.object_version(object), Some((1 << 40) + 5));
    assert!(matches!(execute(&mut engine, write((1 << 40) + 2, 4)), Err(EngineError::StaleVersion { .. })));
    // Engine-chosen versions go above caller-chosen ones.
    let other = ObjectId { inode: 9, stripe: 2 };
    let Ok(Reply::Written { version }) =
        execute(&mut engine, Request::Write { object: other, offset_bytes: 0, data: filled(5, 4096) })
    else {
        panic!("write failed")
    };
    assert!(version > (1 << 40) + 5);
    let engine = open(stop(engine));
    assert_eq!(engine.object_version(object), Some((1 << 40) + 5));
}

/// Random versioned writes and deletes (re-creating deleted objects with versions below the
/// delete's whenever the engine allows it), with write-back at random stages, then a power
/// loss and a reopen: every acknowledged operation is there, nothing else.
#[test]
fn versioned_history_survives_write_back_and_crashes() {
    let seeds = common::env_count("BASALT_VERSION_SEEDS", 60);
    for seed in 0..seeds {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut engine = open(new_disk());
        // object -> (version, pages); absent = deleted or never written.
        let mut model: HashMap<ObjectId, (u64, Vec<u8>)> = HashMap::new();
        let mut next_version: u64 = 100;
        for cycle in 0..3 {
            for step in 0..150 {
                let object = ObjectId { inode: 1, stripe: rng.gen_range(0..6) };
                // Sometimes reuse a low version, as a restarted primary might after a trim.
                let version = if rng.gen_ratio(1, 5) {
                    rng.gen_range(1..next_version)
                } else {
                    next_version += rng.gen_range(1..4);
                    next_version
                };
                let known = engine.object_version(object);
                let stale = known.is_some_and(|known| known >= version);
                // The engine may forget a delete's version once replay can no longer see it (the
                // write-back job can get there during the call), but never a live object's.
                let live = model.get(&object).map(|state| state.0);
                let accepted = |stored: u64| stored == version && live.is_none_or(|live| live < version);
                let pages = (OBJECT_BYTES as usize) / PAGE_BYTES;
                let tag = (seed as u8) ^ (cycle * 50 + step) as u8 | 1;
                let result = if rng.gen_ratio(1, 5) {
                    execute(&mut engine, Request::DeleteVersioned { object, version })
                } else if rng.gen_ratio(1, 4) {
                    execute(
                        &mut engine,
                        Request::WriteVersioned {
                            object,
                            offset_bytes: 0,
                            data: filled(tag, OBJECT_BYTES as usize),
                            version,
                        },
                    )
                } else {
                    let page = rng.gen_range(0..pages) as u32;
                    execute(
                        &mut engine,
                        Request::WriteVersioned {
                            object,
                            offset_bytes: page * PAGE_BYTES as u32,
                            data: filled(tag, PAGE_BYTES),
                            version,
                        },
                    )
                };
                match result {
                    Err(EngineError::StaleVersion { current, .. }) => {
                        assert!(stale, "seed {seed}: version {version} of {object} refused, engine knew {known:?}");
                        assert!(current >= version && Some(current) <= known);
                    }
                    Ok(Reply::Deleted { version: stored }) => {
                        assert!(
                            accepted(stored),
                            "seed {seed}: stored {stored} version {version} of a live {object} at {live:?}"
                        );
                        model.remove(&object);
                    }
                    Ok(Reply::Written { version: stored }) => {
                        assert!(
                            accepted(stored),
                            "seed {seed}: stored {stored} version {version} of a live {object} at {live:?}"
                        );
                        let state = model.entry(object).or_insert_with(|| (0, vec![0; OBJECT_BYTES as usize]));
                        state.0 = version;
                        // Reconstruct from the request: re-read instead of tracking offsets.
                        state.1 = read(&mut engine, object, 0, OBJECT_BYTES).1;
                    }
                    other => panic!("seed {seed}: {other:?}"),
                }
                if rng.gen_ratio(1, 10) {
                    engine.request_writeback();
                }
                // Let write-back run a little.
                let mut out = Vec::new();
                for _ in 0..rng.gen_range(0..4) {
                    engine.poll(&mut out);
                }
                assert!(out.is_empty());
            }
            let mut disk = stop(engine);
            disk.crash();
            engine = open(disk);
            for stripe in 0..6 {
                let object = ObjectId { inode: 1, stripe };
                let (version, data) = read(&mut engine, object, 0, OBJECT_BYTES);
                match model.get(&object) {
                    Some((expected_version, expected)) => {
                        assert_eq!(version, *expected_version, "seed {seed} cycle {cycle} {object}");
                        assert!(data == *expected, "seed {seed} cycle {cycle} {object}: data differs");
                    }
                    None => assert!(
                        data.iter().all(|&b| b == 0),
                        "seed {seed} cycle {cycle} {object}: deleted object has data"
                    ),
                }
            }
        }
        let _: Engine<_> = engine;
    }
}

#[test]
fn osd_id_is_kept_through_opens_and_journal_trims() {
    let mut disk = new_disk();
    assert_eq!(Engine::probe(&mut disk).expect("probe").osd_id, 0);
    assert_eq!(Engine::set_osd_id(&mut disk, 42).expect("claim").osd_id, 42);
    let mut engine = open(disk);
    assert_eq!(engine.superblock().osd_id, 42);
    // Enough writes and write-back jobs that both superblock copies are rewritten.
    for round in 0..4u64 {
        for stripe in 0..20 {
            common::write(&mut engine, ObjectId { inode: round, stripe }, 0, filled(1, PAGE_BYTES));
        }
        engine.write_back_journal();
    }
    let mut disk = stop(engine);
    disk.crash();
    assert_eq!(Engine::probe(&mut disk).expect("probe").osd_id, 42);
    assert_eq!(open(disk).superblock().osd_id, 42);
}

/// A replica that missed some writes needs only the pages they changed: the engine remembers
/// which, for the versions it applied, across a reopen too (replay rebuilds it from the journal
/// records not yet written back), and never for a version it did not pass through.
#[test]
fn the_engine_knows_which_pages_changed_since_a_version() {
    let mut engine = open(new_disk());
    let object = ObjectId { inode: 4, stripe: 0 };
    let pages = OBJECT_BYTES / PAGE_BYTES as u32;
    let write = |offset_pages: u32, page_count: u32, version: u64| Request::WriteVersioned {
        object,
        offset_bytes: offset_pages * PAGE_BYTES as u32,
        data: filled(version as u8, (page_count * PAGE_BYTES as u32) as usize),
        version,
    };
    execute(&mut engine, write(0, pages, 10)).unwrap();
    execute(&mut engine, write(2, 1, 11)).unwrap();
    execute(&mut engine, write(5, 2, 12)).unwrap();
    let all = u64::MAX >> (64 - pages);
    assert_eq!(engine.pages_changed_since(object, Some(11), 12), Some(0b110_0000));
    assert_eq!(engine.pages_changed_since(object, Some(10), 12), Some(0b110_0100));
    assert_eq!(engine.pages_changed_since(object, Some(12), 12), Some(0));
    // Version 9 was never this engine's: no holder of it can be told what changed.
    assert_eq!(engine.pages_changed_since(object, Some(9), 12), None);
    let engine = open(stop(engine));
    assert_eq!(engine.pages_changed_since(object, Some(10), 12), Some(0b110_0100));
    let mut engine = engine;
    // A whole-object write changes every page; a delete forgets the object's history.
    execute(&mut engine, write(0, pages, 13)).unwrap();
    assert_eq!(engine.pages_changed_since(object, Some(12), 13), Some(all));
    execute(&mut engine, Request::DeleteVersioned { object, version: 14 }).unwrap();
    execute(&mut engine, write(1, 1, 15)).unwrap();
    assert_eq!(engine.pages_changed_since(object, Some(13), 15), None);
    // Written since it was deleted: a replica without a copy needs only that page.
    assert_eq!(engine.pages_changed_since(object, None, 15), Some(0b10));
}
