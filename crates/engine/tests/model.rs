//! Property tests: random sequences of concurrent engine operations, checked against a model.
//!
//! The model is a `BTreeMap` from object to its bytes and version. Each step is a batch of
//! requests submitted together and polled until all complete (several in flight at once, on a
//! disk that completes them in random order), a run of write-back to completion, or a reopen
//! (the engine stops as a killed process would, with write-back possibly mid-job, and replays).
//! Checked: every reply, every read byte and the pages each read (and each `Pages` request) reports present, versions
//! growing per object, `list_objects` and the space accounting. Two geometries: 16 KiB objects with a journal that wraps and fills, and
//! the default 128 KiB objects. `BASALT_MODEL_CASES` sets the number of cases per geometry.

mod common;

use std::collections::BTreeMap;

use common::{env_count, format_disk, open, pattern_buffer, run_batch, stop, PAGE_BYTES};
use engine::{Engine, ObjectId, Reply, Request};
use proptest::prelude::*;
use sim::{SimDisk, SimDiskOptions};

/// 2 inodes x 6 stripes.
const OBJECT_COUNT: usize = 12;
const BATCH_SIZE_MAX: usize = 8;

fn object_id(index: usize) -> ObjectId {
    ObjectId { inode: 1 + (index / 6) as u64, stripe: (index % 6) as u64 }
}

#[derive(Debug, Clone)]
enum Op {
    /// Pages `offset..offset + length` (taken modulo the object's page count).
    Write {
        object: usize,
        offset: u32,
        length: u32,
    },
    Whole {
        object: usize,
    },
    /// A replace of the whole object holding the pages in `present` only (taken modulo the
    /// object's pages), at a version above every one so far.
    Replace {
        object: usize,
        present: u64,
    },
    Delete {
        object: usize,
    },
    Read {
        object: usize,
        offset: u32,
        length: u32,
    },
    Flush,
}

#[derive(Debug, Clone)]
enum Step {
    Batch(Vec<Op>),
    WriteBackJournal,
    Reopen,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let object = 0..OBJECT_COUNT;
    prop_oneof![
        6 => (object.clone(), any::<u32>(), any::<u32>()).prop_map(|(object, offset, length)| Op::Write { object, offset, length }),
        2 => object.clone().prop_map(|object| Op::Whole { object }),
        2 => (object.clone(), any::<u64>()).prop_map(|(object, present)| Op::Replace { object, present }),
        1 => object.clone().prop_map(|object| Op::Delete { object }),
        3 => (object, any::<u32>(), any::<u32>()).prop_map(|(object, offset, length)| Op::Read { object, offset, length }),
        1 => Just(Op::Flush),
    ]
}

fn step_strategy() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => prop::collection::vec(op_strategy(), 1..=BATCH_SIZE_MAX).prop_map(Step::Batch),
        1 => Just(Step::WriteBackJournal),
        1 => Just(Step::Reopen),
    ]
}

/// What the model knows of one object.
#[derive(Debug, Clone)]
struct ObjectState {
    data: Vec<u8>,
    /// The pages that hold data (bit `i`: page `i`).
    present: u64,
    /// Version of the last write or delete; 0 if never touched.
    version: u64,
    exists: bool,
}

struct Harness {
    engine: Option<Engine<SimDisk>>,
    object_size_bytes: u32,
    pages_per_object: u32,
    model: BTreeMap<ObjectId, ObjectState>,
    next_tag: u64,
    /// The highest version any reply gave so far: a replace goes well above it.
    version_max: u64,
}

impl Harness {
    fn new(seed: u64, object_size_bytes: u32, journal_size_bytes: u64, device_size_bytes: u64) -> Harness {
        let disk = SimDisk::new(SimDiskOptions {
            size_bytes: device_size_bytes,
            sector_size_bytes: 4096,
            seed,
            reorder_completions: true,
            ..SimDiskOptions::default()
        });
        let disk = format_disk(disk, u64::from(object_size_bytes), journal_size_bytes);
        let model = (0..OBJECT_COUNT)
            .map(|index| {
                let state =
                    ObjectState { data: vec![0; object_size_bytes as usize], present: 0, version: 0, exists: false };
                (object_id(index), state)
            })
            .collect();
        Harness {
            engine: Some(open(disk)),
            object_size_bytes,
            pages_per_object: object_size_bytes / PAGE_BYTES as u32,
            model,
            next_tag: 1,
            version_max: 0,
        }
    }

    fn engine(&mut self) -> &mut Engine<SimDisk> {
        self.engine.as_mut().expect("engine")
    }

    /// Maps arbitrary numbers onto a valid page range of an object.
    fn range(&self, offset: u32, length: u32) -> (u32, u32) {
        let offset = offset % self.pages_per_object;
        // Short ranges are the common case; whole-object ranges through the journal happen too.
        let length_max = self.pages_per_object - offset;
        let length = if length.is_multiple_of(4) { length_max } else { 1 + (length / 4) % length_max.min(4) };
        (offset, length)
    }

    fn step(&mut self, step: &Step) {
        match step {
            Step::Batch(ops) => self.batch(ops),
            Step::WriteBackJournal => {
                self.engine().write_back_journal();
                assert!(self.engine().is_written_back());
                assert_eq!(self.engine().space().journal_used_bytes, 0);
            }
            Step::Reopen => {
                let disk = stop(self.engine.take().expect("engine"));
                self.engine = Some(open(disk));
                self.check_all_objects();
            }
        }
        self.check_listing_and_space();
    }

    fn batch(&mut self, ops: &[Op]) {
        // Per object, the states a read may see: the state before the batch, then the state
        // after each write of the batch submitted before the read, in order. Writes of one
        // object in one batch apply in submission order; a read sees one of these states whole.
        let before = self.model.clone();
        let mut requests = Vec::new();
        // For each op: its object and, for writes, the state it leads to (version filled in later).
        let mut effects: Vec<Option<(ObjectId, ObjectState)>> = Vec::new();
        let mut reads_see: Vec<Option<Vec<usize>>> = Vec::new();
        let mut working = self.model.clone();
        let mut history: BTreeMap<ObjectId, Vec<usize>> = BTreeMap::new();
        // One replace a batch: the engine gives unversioned writes its highest version so far
        // plus one, so a second replace of a higher version sealed first could put a write
        // queued before the first replace above it.
        let mut replaced = false;
        for (index, op) in ops.iter().enumerate() {
            let op = match *op {
                Op::Replace { object, .. } if replaced => Op::Whole { object },
                ref other => other.clone(),
            };
            let (request, effect, sees) = match op {
                Op::Write { object, offset, length } => {
                    let object = object_id(object);
                    let (offset, length) = self.range(offset, length);
                    let tag = self.next_tag;
                    self.next_tag += 1;
                    let data = pattern_buffer(tag, object, offset, length);
                    let state = working.get_mut(&object).expect("object");
                    let at = offset as usize * PAGE_BYTES;
                    state.data[at..at + data.len()].copy_from_slice(&data);
                    state.present |= pages(offset, length);
                    state.exists = true;
                    let request = Request::Write { object, offset_bytes: offset * PAGE_BYTES as u32, data };
                    (request, Some((object, state.clone())), None)
                }
                Op::Whole { object } => {
                    let object = object_id(object);
                    let tag = self.next_tag;
                    self.next_tag += 1;
                    let data = pattern_buffer(tag, object, 0, self.pages_per_object);
                    let state = working.get_mut(&object).expect("object");
                    state.data.copy_from_slice(&data);
                    state.present = pages(0, self.pages_per_object);
                    state.exists = true;
                    (Request::Write { object, offset_bytes: 0, data }, Some((object, state.clone())), None)
                }
                Op::Replace { object, present } => {
                    replaced = true;
                    let object = object_id(object);
                    let tag = self.next_tag;
                    self.next_tag += 1;
                    let present = present & pages(0, self.pages_per_object);
                    // The pages left out carry bytes too: they must read as zeros all the same.
                    let data = pattern_buffer(tag, object, 0, self.pages_per_object);
                    let state = working.get_mut(&object).expect("object");
                    state.data.copy_from_slice(&data);
                    for page in (0..self.pages_per_object).filter(|page| present & (1 << page) == 0) {
                        state.data[page as usize * PAGE_BYTES..(page as usize + 1) * PAGE_BYTES].fill(0);
                    }
                    state.present = present;
                    state.exists = true;
                    // Above every version so far and every one this batch's other writes get.
                    self.version_max += 1_000;
                    let request = Request::ReplaceVersioned { object, data, present, version: self.version_max };
                    (request, Some((object, state.clone())), None)
                }
                Op::Delete { object } => {
                    let object = object_id(object);
                    let state = working.get_mut(&object).expect("object");
                    state.data.fill(0);
                    state.present = 0;
                    state.exists = false;
                    (Request::Delete { object }, Some((object, state.clone())), None)
                }
                Op::Read { object, offset, length } => {
                    let object = object_id(object);
                    let (offset, length) = self.range(offset, length);
                    let request = Request::Read {
                        object,
                        offset_bytes: offset * PAGE_BYTES as u32,
                        length_bytes: length * PAGE_BYTES as u32,
                    };
                    let sees = history.get(&object).cloned().unwrap_or_default();
                    (request, None, Some(sees))
                }
                Op::Flush => (Request::Flush, None, None),
            };
            if let Some((object, _)) = &effect {
                history.entry(*object).or_default().push(index);
            }
            requests.push(request);
            effects.push(effect);
            reads_see.push(sees);
        }
        let results = run_batch(self.engine(), requests);

        // Writes: every one succeeds, versions grow per object in submission order.
        let mut version_after: BTreeMap<usize, u64> = BTreeMap::new();
        for (index, result) in results.iter().enumerate() {
            let Some((object, state)) = &effects[index] else { continue };
            let version = match (result, &ops[index]) {
                (Ok(Reply::Deleted { version }), Op::Delete { .. }) => *version,
                (Ok(Reply::Written { version }), Op::Write { .. } | Op::Whole { .. } | Op::Replace { .. }) => *version,
                (other, op) => panic!("{op:?} on {object}: unexpected result {other:?}"),
            };
            let model = self.model.get_mut(object).expect("object");
            assert!(version > model.version, "{object}: version {version} after version {}", model.version);
            *model = ObjectState { version, ..state.clone() };
            version_after.insert(index, version);
            self.version_max = self.version_max.max(version);
        }

        // Reads: each equals one whole state the object went through, with that state's version.
        for (index, op) in ops.iter().enumerate() {
            if let Op::Flush = op {
                assert!(matches!(results[index], Ok(Reply::Flushed)), "flush: {:?}", results[index]);
            }
        }
        for (index, op) in ops.iter().enumerate() {
            let Op::Read { object, offset, length } = *op else { continue };
            let object = object_id(object);
            let (offset, length) = self.range(offset, length);
            let (version, data, present) = match &results[index] {
                Ok(Reply::Read { version, data, present }) => (*version, data.to_vec(), *present),
                other => panic!("read of {object}: unexpected result {other:?}"),
            };
            let at = offset as usize * PAGE_BYTES;
            let range = at..at + length as usize * PAGE_BYTES;
            let read_pages = pages(offset, length);
            let seen =
                |state: &ObjectState| (state.data[range.clone()].to_vec(), state.present & read_pages, state.exists);
            let mut candidates = vec![(before[&object].version, seen(&before[&object]))];
            for &write_index in reads_see[index].as_ref().expect("read") {
                if write_index > index {
                    break;
                }
                let (_, state) = effects[write_index].as_ref().expect("write");
                candidates.push((version_after[&write_index], seen(state)));
            }
            let matched = candidates.iter().any(|(candidate_version, (bytes, candidate_present, exists))| {
                // A deleted object reads as version 0 once the delete is written back.
                let version_ok = version == *candidate_version || (!exists && version == 0);
                version_ok && *bytes == data && *candidate_present == present
            });
            assert!(
                matched,
                "read of {object} pages {offset}+{length} returned version {version} with pages {present:#x} present, \
                 matching none of {:?}",
                candidates
                    .iter()
                    .map(|(version, (bytes, present, _))| (version, first_difference(bytes, &data), present))
                    .collect::<Vec<_>>()
            );
        }
    }

    /// Reads every object whole and compares with the model.
    fn check_all_objects(&mut self) {
        let object_size = self.object_size_bytes;
        let expected: Vec<(ObjectId, ObjectState)> =
            self.model.iter().map(|(object, state)| (*object, state.clone())).collect();
        for (object, state) in expected {
            let request = engine::Request::Read { object, offset_bytes: 0, length_bytes: object_size };
            let (version, data, present) = match common::execute(self.engine(), request) {
                Ok(Reply::Read { version, data, present }) => (version, data.to_vec(), present),
                other => panic!("read of {object}: {other:?}"),
            };
            if let Some(at) = first_difference(&state.data, &data) {
                panic!(
                    "{object}: byte {at} differs from the model (version {version}, model version {})",
                    state.version
                );
            }
            assert_eq!(present, state.present, "{object}: the pages present");
            // The same, asked without reading data.
            match common::execute(self.engine(), engine::Request::Pages { object }) {
                Ok(Reply::Pages { version: pages_version, present }) => {
                    assert_eq!(present, state.present, "{object}: the pages a Pages request reports");
                    if state.exists {
                        assert_eq!(pages_version, state.version, "{object}: the version a Pages request reports");
                    }
                }
                other => panic!("pages of {object}: {other:?}"),
            }
            if state.exists {
                assert_eq!(version, state.version, "{object}: version");
            } else {
                assert!(version == state.version || version == 0, "{object}: version {version} of a deleted object");
            }
        }
    }

    fn check_listing_and_space(&mut self) {
        let expected: Vec<(ObjectId, u64)> = self
            .model
            .iter()
            .filter(|(_, state)| state.exists)
            .map(|(object, state)| (*object, state.version))
            .collect();
        let engine = self.engine();
        assert_eq!(engine.list_objects(), expected);
        let space = engine.space();
        assert!(space.used_bytes + space.free_bytes <= space.total_bytes, "{space:?}");
        assert!(space.journal_used_bytes <= space.journal_total_bytes, "{space:?}");
        assert_eq!(space.object_count, expected.len() as u64);
        // Every object holds at most one block once written back; more are in transit until
        // write-back runs: one per whole-object write still in the journal (each takes at least a
        // journal page) or still writing its data (at most a batch's worth).
        let object_size = u64::from(self.object_size_bytes);
        let in_transit_max = space.journal_used_bytes / 4096 + 1 + BATCH_SIZE_MAX as u64;
        assert!(space.used_bytes <= (OBJECT_COUNT as u64 + in_transit_max) * object_size, "{space:?}");
    }

    /// Deletes everything, writes the journal back, and checks that all space comes back.
    fn finish(&mut self) {
        let requests: Vec<Request> =
            (0..OBJECT_COUNT).map(|index| Request::Delete { object: object_id(index) }).collect();
        let results = run_batch(self.engine(), requests);
        for (state, result) in self.model.values_mut().zip(results) {
            let Ok(Reply::Deleted { version }) = result else { panic!("delete: {result:?}") };
            assert!(version > state.version, "delete version {version} after version {}", state.version);
            *state = ObjectState { data: vec![0; state.data.len()], present: 0, version, exists: false };
        }
        self.engine().write_back_journal();
        let space = self.engine().space();
        assert_eq!(space.used_bytes, 0, "{space:?}");
        assert_eq!(space.free_bytes, space.total_bytes, "{space:?}");
        assert_eq!(space.object_count, 0, "{space:?}");
        assert_eq!(space.journal_used_bytes, 0, "{space:?}");
        // And after a reopen too: nothing was left behind on disk.
        let disk = stop(self.engine.take().expect("engine"));
        self.engine = Some(open(disk));
        let space = self.engine().space();
        assert_eq!(space.used_bytes, 0, "{space:?}");
        assert!(self.engine().list_objects().is_empty());
        // Versions keep growing after everything was deleted and trimmed.
        let object = object_id(0);
        let last = self.model.values().map(|state| state.version).max().unwrap_or(0);
        let result = common::execute(
            self.engine(),
            Request::Write { object, offset_bytes: 0, data: pattern_buffer(u64::MAX, object, 0, 1) },
        );
        match result {
            Ok(Reply::Written { version }) => assert!(version > last, "version {version} after {last}"),
            other => panic!("{other:?}"),
        }
    }
}

/// The mask of pages `first..first + count`.
fn pages(first: u32, count: u32) -> u64 {
    (first..first + count).fold(0, |mask, page| mask | 1 << page)
}

fn first_difference(expected: &[u8], actual: &[u8]) -> Option<usize> {
    if expected.len() != actual.len() {
        return Some(0);
    }
    expected.iter().zip(actual).position(|(a, b)| a != b)
}

fn run(seed: u64, steps: &[Step], object_size_bytes: u32, journal_size_bytes: u64, device_size_bytes: u64) {
    let mut harness = Harness::new(seed, object_size_bytes, journal_size_bytes, device_size_bytes);
    for step in steps {
        harness.step(step);
    }
    harness.finish();
}

fn config() -> ProptestConfig {
    let cases = u32::try_from(env_count("BASALT_MODEL_CASES", 256)).expect("case count");
    ProptestConfig { cases, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

    /// 16 KiB objects and a 320 KiB journal (the minimum): records wrap and the journal fills.
    /// On the small device the allocator wraps and blocks are reused; on the large one the
    /// objects' metadata entries spread over more pages than the metadata cache holds.
    #[test]
    fn small_objects_small_journal(
        seed in any::<u64>(),
        large_device in any::<bool>(),
        steps in prop::collection::vec(step_strategy(), 1..60),
    ) {
        let device_size_bytes = if large_device { 24 << 20 } else { 8 << 20 };
        run(seed, &steps, 16 * 1024, 320 * 1024, device_size_bytes);
    }

    /// The default 128 KiB objects with a 3 MiB journal (about the minimum).
    #[test]
    fn default_objects(seed in any::<u64>(), steps in prop::collection::vec(step_strategy(), 1..40)) {
        run(seed, &steps, 128 * 1024, 3 << 20, 16 << 20);
    }
}

// ---------------------------------------------------------------------------------------------
// Regressions the property tests found, as direct tests.

fn small_engine(seed: u64, reorder_completions: bool) -> Engine<SimDisk> {
    let disk =
        SimDisk::new(SimDiskOptions { size_bytes: 8 << 20, seed, reorder_completions, ..SimDiskOptions::default() });
    open(format_disk(disk, 16 * 1024, 320 * 1024))
}

fn written(result: &Result<Reply, engine::EngineError>) -> u64 {
    match result {
        Ok(Reply::Written { version } | Reply::Deleted { version }) => *version,
        other => panic!("{other:?}"),
    }
}

/// A small write, a delete and a small write of a new object in one group commit: the delete
/// releases the first write's block reservation, so the second write needs its own.
#[test]
fn small_write_after_a_delete_in_the_same_record_reserves_a_block() {
    let mut engine = small_engine(0, false);
    let id = object_id(0);
    let results = run_batch(
        &mut engine,
        vec![
            Request::Write { object: id, offset_bytes: 0, data: pattern_buffer(1, id, 0, 1) },
            Request::Delete { object: id },
            Request::Write { object: id, offset_bytes: 4096, data: pattern_buffer(2, id, 1, 1) },
        ],
    );
    results.iter().for_each(|result| _ = written(result));
    engine.write_back_journal();
    let (_, data) = common::read(&mut engine, id, 0, 8192);
    assert_eq!(&data[..4096], &[0; 4096]);
    assert_eq!(&data[4096..], &pattern_buffer(2, id, 1, 1)[..]);
    assert_eq!(engine.space().used_bytes, 16 * 1024);
}

/// A second small write of a new object sealed while write-back already turned the first
/// one's reservation into a block must not reserve another block.
#[test]
fn small_write_while_write_back_allocates_the_object_reserves_nothing() {
    let mut engine = small_engine(0, false);
    let id = object_id(0);
    for page in 0..3u32 {
        common::write(&mut engine, id, page * 4096, pattern_buffer(u64::from(page) + 1, id, page, 1));
    }
    engine.write_back_journal();
    assert_eq!(engine.space().used_bytes, 16 * 1024);
    assert_eq!(engine.space().free_bytes, engine.space().total_bytes - 16 * 1024);
    let (_, data) = common::read(&mut engine, id, 0, 3 * 4096);
    assert_eq!(
        data,
        pattern_buffer(1, id, 0, 1)
            .iter()
            .chain(pattern_buffer(2, id, 1, 1).iter())
            .chain(pattern_buffer(3, id, 2, 1).iter())
            .copied()
            .collect::<Vec<u8>>()
    );
}

/// A read resolved before a small write committed reads the object's block while write-back
/// copies that write into the same block in place, on a disk that completes out of order.
#[test]
fn read_in_flight_while_write_back_copies_into_its_block() {
    for seed in 0..200 {
        let mut engine = small_engine(seed, true);
        let id = object_id(0);
        common::write(&mut engine, id, 0, pattern_buffer(1, id, 0, 4));
        engine.write_back_journal();
        let old = pattern_buffer(1, id, 0, 4).to_vec();
        let mut expected = old.clone();
        expected[..4096].copy_from_slice(&pattern_buffer(2, id, 0, 1));
        let requests = vec![
            Request::Read { object: id, offset_bytes: 0, length_bytes: 16 * 1024 },
            Request::Write { object: id, offset_bytes: 0, data: pattern_buffer(2, id, 0, 1) },
            Request::Read { object: id, offset_bytes: 0, length_bytes: 16 * 1024 },
        ];
        let results = run_batch(&mut engine, requests);
        for result in [&results[0], &results[2]] {
            match result {
                Ok(Reply::Read { data, .. }) => {
                    assert!(data.to_vec() == old || data.to_vec() == expected, "seed {seed}")
                }
                other => panic!("seed {seed}: {other:?}"),
            }
        }
        engine.write_back_journal();
        assert_eq!(common::read(&mut engine, id, 0, 16 * 1024).1, expected, "seed {seed}");
    }
}

/// A whole-object write followed by a small write of the same object, reopened while the
/// write-back job may have copied the small write into the whole-object write's block in place.
#[test]
fn reopen_after_a_small_write_was_copied_into_a_whole_object_block() {
    for seed in 0..50 {
        let mut engine = small_engine(seed, true);
        let (a, b) = (object_id(0), object_id(1));
        let results = run_batch(
            &mut engine,
            vec![
                Request::Write { object: a, offset_bytes: 0, data: pattern_buffer(1, a, 0, 4) },
                Request::Write { object: a, offset_bytes: 4096, data: pattern_buffer(2, a, 1, 1) },
            ],
        );
        results.iter().for_each(|result| _ = written(result));
        let mut expected = pattern_buffer(1, a, 0, 4).to_vec();
        expected[4096..8192].copy_from_slice(&pattern_buffer(2, a, 1, 1));
        // Later records, polled a little at a time, so the reopen catches write-back anywhere.
        for round in 0..seed % 8 {
            common::write(&mut engine, b, 0, pattern_buffer(10 + round, b, 0, 1));
        }
        let mut engine = open(stop(engine));
        assert_eq!(common::read(&mut engine, a, 0, 16 * 1024).1, expected, "seed {seed}");
    }
}

/// Versions keep growing after every object was deleted and the journal trimmed.
#[test]
fn versions_keep_growing_after_deletes_are_trimmed() {
    let mut engine = small_engine(0, false);
    let id = object_id(0);
    common::write(&mut engine, id, 0, pattern_buffer(1, id, 0, 1));
    let deleted = written(&common::execute(&mut engine, Request::Delete { object: id }));
    engine.write_back_journal();
    let mut engine = open(stop(engine));
    let version = common::write(&mut engine, id, 0, pattern_buffer(2, id, 0, 1));
    assert!(version > deleted, "version {version} after the delete's {deleted}");
}
