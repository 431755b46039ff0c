//! Basic behaviour of the engine on a simulated disk: writes, reads, deletes, reopen.

use engine::{AlignedBuffer, Engine, EngineOptions, FormatOptions, ObjectId, Reply, Request};
use sim::{SimDisk, SimDiskOptions};

fn new_engine(size_bytes: u64) -> Engine<SimDisk> {
    let disk = SimDisk::new(SimDiskOptions { size_bytes, ..Default::default() });
    let disk = Engine::format(
        disk,
        &FormatOptions { object_size_bytes: 128 * 1024, journal_size_bytes: Some(4 << 20), nonce: 7 },
    )
    .unwrap();
    Engine::open(disk, &EngineOptions::default()).unwrap()
}

fn pattern(seed: u8, len: usize) -> AlignedBuffer {
    let mut buffer = AlignedBuffer::zeroed(len);
    for (index, byte) in buffer.iter_mut().enumerate() {
        *byte = seed.wrapping_add((index / 4096) as u8).wrapping_mul(31) ^ (index as u8);
    }
    buffer
}

fn read(engine: &mut Engine<SimDisk>, object: ObjectId, offset: u32, len: u32) -> (u64, Vec<u8>) {
    match engine.execute(Request::Read { object, offset_bytes: offset, length_bytes: len }).unwrap() {
        Reply::Read { version, data, .. } => (version, data.to_vec()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn write_read_delete_reopen() {
    let mut engine = new_engine(64 << 20);
    let a = ObjectId { inode: 1, stripe: 0 };
    let b = ObjectId { inode: 1, stripe: 1 };
    assert_eq!(read(&mut engine, a, 0, 8192), (0, vec![0; 8192]));
    let small = pattern(1, 8192);
    let Reply::Written { version: v1 } =
        engine.execute(Request::Write { object: a, offset_bytes: 4096, data: small.clone() }).unwrap()
    else {
        panic!()
    };
    let whole = pattern(2, 128 * 1024);
    let Reply::Written { version: v2 } =
        engine.execute(Request::Write { object: b, offset_bytes: 0, data: whole.clone() }).unwrap()
    else {
        panic!()
    };
    assert!(v2 > v1);
    let (version, data) = read(&mut engine, a, 0, 16384);
    assert_eq!(version, v1);
    assert_eq!(&data[..4096], &[0; 4096]);
    assert_eq!(&data[4096..12288], &small[..]);
    assert_eq!(&data[12288..], &[0; 4096]);
    assert_eq!(read(&mut engine, b, 0, 128 * 1024).1, whole.to_vec());
    // Overwrite part of the whole object through the journal.
    let patch = pattern(3, 4096);
    engine.execute(Request::Write { object: b, offset_bytes: 65536, data: patch.clone() }).unwrap();
    let mut expected_b = whole.to_vec();
    expected_b[65536..69632].copy_from_slice(&patch);
    assert_eq!(read(&mut engine, b, 0, 128 * 1024).1, expected_b);
    engine.write_back_journal();
    assert!(engine.is_written_back());
    assert_eq!(read(&mut engine, b, 0, 128 * 1024).1, expected_b);
    assert_eq!(&read(&mut engine, a, 0, 16384).1[4096..12288], &small[..]);
    let c = ObjectId { inode: 2, stripe: 9 };
    engine.execute(Request::Write { object: c, offset_bytes: 0, data: pattern(4, 4096) }).unwrap();
    engine.execute(Request::Delete { object: a }).unwrap();
    assert_eq!(read(&mut engine, a, 0, 16384).1, vec![0; 16384]);
    // Reopen without writing back: the journal replays.
    let disk = engine.into_disk();
    let mut engine = Engine::open(disk, &EngineOptions::default()).unwrap();
    assert_eq!(read(&mut engine, a, 0, 16384).1, vec![0; 16384]);
    assert_eq!(read(&mut engine, b, 0, 128 * 1024).1, expected_b);
    assert_eq!(read(&mut engine, c, 0, 4096).1, pattern(4, 4096).to_vec());
    let objects: Vec<ObjectId> = engine.list_objects().into_iter().map(|(object, _)| object).collect();
    assert_eq!(objects, vec![b, c]);
    engine.write_back_journal();
    let disk = engine.into_disk();
    let mut engine = Engine::open(disk, &EngineOptions::default()).unwrap();
    assert_eq!(read(&mut engine, b, 0, 128 * 1024).1, expected_b);
    assert_eq!(read(&mut engine, c, 0, 4096).1, pattern(4, 4096).to_vec());
    assert_eq!(read(&mut engine, a, 0, 4096).1, vec![0; 4096]);
}

#[test]
fn journal_wraps_many_times_under_backpressure() {
    let mut engine = new_engine(64 << 20);
    let mut expected = std::collections::HashMap::new();
    for round in 0..3000u32 {
        let object = ObjectId { inode: 5, stripe: u64::from(round % 37) };
        let offset = (round * 7 % 32) * 4096;
        let data = pattern(round as u8, 4096);
        engine.execute(Request::Write { object, offset_bytes: offset, data: data.clone() }).unwrap();
        expected.insert((object, offset), data.to_vec());
    }
    for ((object, offset), data) in &expected {
        assert_eq!(&read(&mut engine, *object, *offset, 4096).1, data);
    }
    let disk = engine.into_disk();
    let mut engine = Engine::open(disk, &EngineOptions::default()).unwrap();
    for ((object, offset), data) in &expected {
        assert_eq!(&read(&mut engine, *object, *offset, 4096).1, data);
    }
}
