//! Crash tests: power loss at random points of a concurrent workload, then recovery is checked.
//!
//! Each seed formats a small engine (16 or 64 KiB objects) on a `SimDisk` (512 or 4096-byte
//! sectors, torn writes, reordered completions) wrapped in a `CrashDisk` (each write in flight
//! may land whole, in part or not at all; completions may arrive late and out of order), with
//! one to eight journal records in flight at once, and runs several crash cycles: a random
//! workload of small writes, whole-object writes, deletes, reads and flush requests with several
//! requests in flight (in bursts, or trickling in while records are in flight), frozen at a
//! random completion or soon after several records are in flight, crashed, reopened and
//! checked. Then the workload continues on the recovered engine, so replay after replay is
//! covered. Checked after every recovery, page by page:
//!
//! - every acknowledged write (or delete) reads back, unless a write issued after it replaced it;
//! - every page holds exactly one candidate: the newest acknowledged or observed version of that
//!   page, any version issued after it, or (when nothing was acknowledged) the content before
//!   the cycle; never bytes no write produced;
//! - versions never go back: objects read at or above their acknowledged versions, and new
//!   writes get versions above everything seen before the crash;
//! - `list_objects` agrees with what reads return, and writing the journal back changes nothing.
//!
//! Reads during the workload are checked too: they return a candidate, and a version a read
//! returned was durable, so it must survive the crash.
//!
//! The random tests count how many crashes caught several records in flight, and after records
//! completed out of order, and fail if too few did. A second test crashes a small workload at
//! every flush index, and a third shapes one crash by hand: a record missing, the record after
//! it whole, then its seq reused. A failing seed is printed; replay it with
//! `BASALT_CRASH_SEED=<seed>`. `BASALT_CRASH_SEEDS` sets the number of random seeds (default
//! 2000) and `BASALT_CRASH_FLUSH_SEEDS` the number of every-flush-index seeds.

mod common;

use std::collections::HashMap;

use common::{
    classify_page, env_count, format_disk, page_pattern, pattern_buffer, CrashDisk, DiskControl, PageContent,
    PAGE_BYTES,
};
use engine::{Completion, Engine, EngineOptions, ObjectId, Reply, Request};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sim::{SimDisk, SimDiskOptions};

const OBJECT_COUNT: u64 = 8;
const IN_FLIGHT_MAX: usize = 8;
const CYCLE_COUNT: usize = 3;

fn object_id(index: u64) -> ObjectId {
    ObjectId { inode: 0xc0ffee, stripe: index }
}

/// Prints the seed if the test panics while it is alive.
struct SeedGuard(u64);

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "crash test failed at seed {0}; replay with BASALT_CRASH_SEED={0} cargo test -p engine --test crash",
                self.0
            );
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpState {
    InFlight,
    Acked { version: u64 },
}

#[derive(Debug, Clone)]
struct OpRecord {
    /// Zero for a delete.
    tag: u64,
    first_page: u32,
    page_count: u32,
    state: OpState,
}

impl OpRecord {
    fn covers(&self, page: u32) -> bool {
        page >= self.first_page && page < self.first_page + self.page_count
    }

    fn content(&self) -> PageContent {
        if self.tag == 0 {
            PageContent::Zero
        } else {
            PageContent::Tag(self.tag)
        }
    }
}

/// What the checker knows of one object within a crash cycle.
#[derive(Debug, Clone)]
struct ObjectHistory {
    /// Per page, the content at the start of the cycle (recovered and durable).
    baseline: Vec<PageContent>,
    /// Version at the start of the cycle.
    baseline_version: u64,
    /// Writes and deletes of this cycle, in submission order (which is their apply order).
    ops: Vec<OpRecord>,
    /// Per page, the newest op a read returned: it was durable, so it must survive.
    observed: Vec<Option<usize>>,
}

impl ObjectHistory {
    fn new(pages_per_object: u32) -> ObjectHistory {
        ObjectHistory {
            baseline: vec![PageContent::Zero; pages_per_object as usize],
            baseline_version: 0,
            ops: Vec::new(),
            observed: vec![None; pages_per_object as usize],
        }
    }

    /// The oldest op of `ops[..limit]` whose content a page may still hold: the newest one that
    /// was acknowledged or observed. `None` means the baseline may still show.
    fn floor(&self, page: u32, limit: usize) -> Option<usize> {
        let acked =
            self.ops[..limit].iter().rposition(|op| op.covers(page) && matches!(op.state, OpState::Acked { .. }));
        let observed = self.observed[page as usize].filter(|&index| index < limit);
        acked.max(observed)
    }

    /// Checks a page against its candidates, `ops[floor..limit]` (and the baseline without a
    /// floor); returns the oldest op it may have come from.
    fn check_page(
        &self,
        object: ObjectId,
        page: u32,
        bytes: &[u8],
        floor: Option<usize>,
        limit: usize,
    ) -> Result<Option<usize>, String> {
        let content = classify_page(bytes, object, page)?;
        if floor.is_none() && self.baseline[page as usize] == content {
            return Ok(None);
        }
        let start = floor.unwrap_or(0);
        // The oldest matching candidate: when several ops wrote the same content (zeros, say),
        // all a read proves is that the page is at least that new.
        let found = (start..limit).find(|&index| self.ops[index].covers(page) && self.ops[index].content() == content);
        match found {
            Some(index) => Ok(Some(index)),
            None => Err(format!(
                "object {object} page {page} holds {content:?}; the candidates were {:?} (floor {floor:?}, baseline {:?}, ops {:?})",
                (start..limit)
                    .filter(|&index| self.ops[index].covers(page))
                    .map(|index| (index, self.ops[index].content(), self.ops[index].state))
                    .collect::<Vec<_>>(),
                self.baseline[page as usize],
                self.ops[..limit].iter().map(|op| (op.tag, op.first_page, op.page_count, op.state)).collect::<Vec<_>>(),
            )),
        }
    }

    /// Checks the version an object reads at after recovery. A deleted object reads at the
    /// delete's version until the delete is written back, then at version 0.
    fn check_version(&self, object: ObjectId, version: u64, exists: bool) {
        let last_acked = self.ops.iter().rposition(|op| matches!(op.state, OpState::Acked { .. }));
        let (floor, zero_ok) = match last_acked {
            Some(index) => {
                let OpState::Acked { version } = self.ops[index].state else { unreachable!() };
                (version, self.ops[index..].iter().any(|op| op.tag == 0))
            }
            None => {
                let baseline_zero = self.baseline.iter().all(|content| *content == PageContent::Zero);
                (self.baseline_version, baseline_zero || self.ops.iter().any(|op| op.tag == 0))
            }
        };
        if version == 0 && !exists && zero_ok {
            return;
        }
        assert!(
            version >= floor,
            "{object}: version {version} below the acknowledged version {floor}; ops {:?}",
            self.ops
        );
    }
}

enum InFlight {
    Write {
        object: u64,
        op: usize,
    },
    /// A read resolves its pages when submitted: the floors and the limit are taken then.
    Read {
        object: u64,
        first_page: u32,
        floors: Vec<Option<usize>>,
        limit: usize,
    },
    Flush,
}

struct Crasher {
    rng: SmallRng,
    engine: Option<Engine<CrashDisk>>,
    control: DiskControl,
    object_size_bytes: u32,
    pages_per_object: u32,
    objects: Vec<ObjectHistory>,
    in_flight: HashMap<u64, InFlight>,
    next_user_data: u64,
    next_tag: u64,
    /// Every version acknowledged or read back before the current cycle is below this.
    version_floor: u64,
    options: EngineOptions,
    /// Freeze the disk soon after this many journal records are in flight at once.
    freeze_at_records_in_flight: Option<usize>,
    /// Submit at most one request between polls.
    trickle: bool,
    coverage: Coverage,
}

/// How often the crashes hit what the test is for, summed over seeds.
#[derive(Debug, Default, Clone, Copy)]
struct Coverage {
    crashes: u64,
    /// Crashes with two or more journal records in flight.
    crashes_with_records_in_flight: u64,
    /// Of those, crashes in a cycle where a record completed before an earlier one.
    crashes_after_out_of_order_completions: u64,
}

impl std::ops::AddAssign for Coverage {
    fn add_assign(&mut self, other: Coverage) {
        self.crashes += other.crashes;
        self.crashes_with_records_in_flight += other.crashes_with_records_in_flight;
        self.crashes_after_out_of_order_completions += other.crashes_after_out_of_order_completions;
    }
}

impl Crasher {
    fn new(seed: u64) -> Crasher {
        let mut rng = SmallRng::seed_from_u64(seed);
        let sector_size_bytes = if seed.is_multiple_of(2) { 512 } else { 4096 };
        // 16 KiB objects with the smallest journal (320 KiB, it wraps often) or a larger one, or
        // 64 KiB objects (larger metadata entries, more pages per write).
        let (object_size_bytes, journal_size_bytes) = match rng.gen_range(0..3) {
            0 => (16 << 10, 320 << 10),
            1 => (16 << 10, 1 << 20),
            _ => (64 << 10, 1280 << 10),
        };
        let disk = SimDisk::new(SimDiskOptions {
            size_bytes: 6 << 20,
            sector_size_bytes,
            seed,
            reorder_completions: true,
            torn_writes: true,
            ..SimDiskOptions::default()
        });
        let tear_in_flight = rng.gen_ratio(3, 4);
        let disk = CrashDisk::new(disk, tear_in_flight, seed);
        let mut disk = format_disk(disk, u64::from(object_size_bytes), journal_size_bytes);
        // Completions that arrive late let requests pile up behind writes already done, so
        // journal records are sealed while earlier ones are still in flight.
        disk.delay_completions(rng.gen_ratio(3, 4));
        // Records written one at a time (as format version 1 did), or several in flight: one
        // entry each while others are in flight (the most records and the most orders of
        // completion), or a few pages each.
        let options = EngineOptions {
            records_in_flight_max: [1, 2, 4, 8][rng.gen_range(0..4)],
            record_min_bytes_in_flight: [1, 4096, 8192][rng.gen_range(0..3)],
            // The write-back job copies from RAM, reads everything back, or a mix.
            record_data_cache_bytes: [0, 16 << 10, 64 << 10, 32 << 20][rng.gen_range(0..4)],
            ..common::engine_options()
        };
        let pages_per_object = object_size_bytes / PAGE_BYTES as u32;
        let control = disk.control();
        Crasher {
            control,
            rng,
            engine: Some(Engine::open(disk, &options).expect("open")),
            object_size_bytes,
            pages_per_object,
            objects: (0..OBJECT_COUNT).map(|_| ObjectHistory::new(pages_per_object)).collect(),
            in_flight: HashMap::new(),
            next_user_data: 1,
            next_tag: 1,
            version_floor: 1,
            options,
            freeze_at_records_in_flight: None,
            trickle: false,
            coverage: Coverage::default(),
        }
    }

    fn engine(&mut self) -> &mut Engine<CrashDisk> {
        self.engine.as_mut().expect("engine")
    }

    fn submit_random(&mut self) {
        let object = self.rng.gen_range(0..OBJECT_COUNT);
        let id = object_id(object);
        let user_data = self.next_user_data;
        self.next_user_data += 1;
        let choice = self.rng.gen_range(0..20);
        let (request, in_flight) = match choice {
            0..=12 => {
                let (first_page, page_count) = if choice <= 9 {
                    let first_page = self.rng.gen_range(0..self.pages_per_object);
                    (first_page, self.rng.gen_range(1..=self.pages_per_object - first_page))
                } else {
                    (0, self.pages_per_object)
                };
                let tag = self.next_tag;
                self.next_tag += 1;
                let history = &mut self.objects[object as usize];
                history.ops.push(OpRecord { tag, first_page, page_count, state: OpState::InFlight });
                let data = pattern_buffer(tag, id, first_page, page_count);
                let request = Request::Write { object: id, offset_bytes: first_page * PAGE_BYTES as u32, data };
                (request, InFlight::Write { object, op: history.ops.len() - 1 })
            }
            13..=14 => {
                let history = &mut self.objects[object as usize];
                history.ops.push(OpRecord {
                    tag: 0,
                    first_page: 0,
                    page_count: self.pages_per_object,
                    state: OpState::InFlight,
                });
                (Request::Delete { object: id }, InFlight::Write { object, op: history.ops.len() - 1 })
            }
            15..=18 => {
                let first_page = self.rng.gen_range(0..self.pages_per_object);
                let page_count = self.rng.gen_range(1..=self.pages_per_object - first_page);
                let request = Request::Read {
                    object: id,
                    offset_bytes: first_page * PAGE_BYTES as u32,
                    length_bytes: page_count * PAGE_BYTES as u32,
                };
                let history = &self.objects[object as usize];
                let limit = history.ops.len();
                let floors = (first_page..first_page + page_count).map(|page| history.floor(page, limit)).collect();
                (request, InFlight::Read { object, first_page, floors, limit })
            }
            _ => (Request::Flush, InFlight::Flush),
        };
        self.in_flight.insert(user_data, in_flight);
        self.engine().submit(user_data, request);
    }

    fn on_completion(&mut self, completion: Completion) {
        let in_flight = self.in_flight.remove(&completion.user_data).expect("known request");
        match in_flight {
            InFlight::Write { object, op } => {
                let version = match completion.result {
                    Ok(Reply::Written { version } | Reply::Deleted { version }) => version,
                    other => panic!("write or delete of {} failed: {other:?}", object_id(object)),
                };
                assert!(
                    version >= self.version_floor,
                    "version {version} does not exceed versions seen before the crash ({})",
                    self.version_floor
                );
                let history = &mut self.objects[object as usize];
                // Versions grow with submission order, within an object.
                for earlier in &history.ops[..op] {
                    if let OpState::Acked { version: earlier_version } = earlier.state {
                        assert!(
                            earlier_version < version,
                            "version {version} after {earlier_version} on {}",
                            object_id(object)
                        );
                    }
                }
                history.ops[op].state = OpState::Acked { version };
            }
            InFlight::Read { object, first_page, floors, limit } => {
                let data = match completion.result {
                    Ok(Reply::Read { data, .. }) => data,
                    other => panic!("read of {} failed: {other:?}", object_id(object)),
                };
                let history = &mut self.objects[object as usize];
                for (index, floor) in floors.into_iter().enumerate() {
                    let page = first_page + index as u32;
                    let bytes = &data[index * PAGE_BYTES..(index + 1) * PAGE_BYTES];
                    let source = history
                        .check_page(object_id(object), page, bytes, floor, limit)
                        .unwrap_or_else(|error| panic!("read during the workload: {error}"));
                    if let Some(source) = source {
                        let observed = &mut history.observed[page as usize];
                        *observed = (*observed).max(Some(source));
                    }
                }
            }
            InFlight::Flush => assert!(matches!(completion.result, Ok(Reply::Flushed)), "{:?}", completion.result),
        }
    }

    /// Runs a workload of `op_count` requests until it ends or the disk freezes.
    fn run_workload(&mut self, op_count: usize) {
        let mut submitted = 0;
        let mut out = Vec::new();
        loop {
            if self.engine().disk().is_frozen() {
                break;
            }
            // Bursts go out as one record; a trickle (one request per poll) meets records still
            // in flight and goes out in records of its own, several in flight at once.
            let burst_max = if self.trickle { 1 } else { IN_FLIGHT_MAX };
            let mut burst = 0;
            while submitted < op_count
                && self.in_flight.len() < IN_FLIGHT_MAX
                && burst < burst_max
                && self.rng.gen_ratio(2, 3)
            {
                self.submit_random();
                submitted += 1;
                burst += 1;
            }
            self.engine().poll(&mut out);
            for completion in out.drain(..) {
                self.on_completion(completion);
            }
            if let Some(count) = self.freeze_at_records_in_flight {
                if self.engine().records_in_flight() >= count {
                    // Power loss within the next few completions: records complete in any
                    // order, so some of them may be durable while earlier ones are not.
                    self.freeze_at_records_in_flight = None;
                    let completions = self.rng.gen_range(0..4);
                    self.control.apply(move |disk| disk.freeze_after_completions(completions));
                }
            }
            if submitted == op_count && self.in_flight.is_empty() {
                break;
            }
            if self.engine().disk().is_frozen() {
                break;
            }
            // A trickle often submits again without waiting, while its last record is in flight.
            let more_to_submit = submitted < op_count && self.in_flight.len() < IN_FLIGHT_MAX;
            if self.trickle && more_to_submit && self.rng.gen_ratio(3, 4) {
                continue;
            }
            if !self.in_flight.is_empty() || submitted < op_count {
                self.engine().wait();
            }
        }
    }

    /// Lets the write-back job run for a while with no requests (it may be stopped mid-job).
    fn run_writeback(&mut self, poll_count: usize) {
        let mut out = Vec::new();
        for _ in 0..poll_count {
            if self.engine().disk().is_frozen() || self.engine().is_idle() {
                break;
            }
            self.engine().poll(&mut out);
            assert!(out.is_empty());
            self.engine().wait();
        }
    }

    /// Power loss, reopen, and the checks described in the module doc.
    fn crash_and_check(&mut self) {
        let engine = self.engine.take().expect("engine");
        self.coverage.crashes += 1;
        let out_of_order = engine.stats().records_completed_out_of_order;
        if engine.records_in_flight() >= 2 {
            self.coverage.crashes_with_records_in_flight += 1;
            if out_of_order > 0 {
                self.coverage.crashes_after_out_of_order_completions += 1;
            }
        }
        let mut disk = engine.into_disk();
        disk.crash();
        self.in_flight.clear();
        let engine = match Engine::open(disk, &self.options) {
            Ok(engine) => engine,
            Err(error) => panic!("open after the crash failed: {error}"),
        };
        self.engine = Some(engine);
        let recovered = self.check_recovered();

        // Writing back replayed records must not change what reads return.
        if self.rng.gen_bool(0.5) {
            self.engine().write_back_journal();
            assert!(self.engine().poisoned().is_none());
            for object in 0..OBJECT_COUNT {
                let object_size_bytes = self.object_size_bytes;
                let (version, data) = common::read(self.engine(), object_id(object), 0, object_size_bytes);
                let (expected_version, expected) = &recovered[object as usize];
                assert!(
                    data == *expected,
                    "{}: writing back the replayed journal changed its bytes",
                    object_id(object)
                );
                let deleted = expected.iter().all(|&byte| byte == 0);
                assert!(
                    version == *expected_version || (deleted && version == 0),
                    "{}: version {version} after write-back, {expected_version} before",
                    object_id(object)
                );
            }
        }

        // The recovered state is durable: it is the next cycle's baseline.
        for (object, (version, data)) in recovered.into_iter().enumerate() {
            let id = object_id(object as u64);
            let history = &mut self.objects[object];
            history.baseline = data
                .chunks_exact(PAGE_BYTES)
                .enumerate()
                .map(|(page, bytes)| classify_page(bytes, id, page as u32).expect("checked"))
                .collect();
            history.baseline_version = version;
            for op in &history.ops {
                if let OpState::Acked { version } = op.state {
                    self.version_floor = self.version_floor.max(version + 1);
                }
            }
            self.version_floor = self.version_floor.max(version + 1);
            history.ops.clear();
            history.observed.fill(None);
        }
    }

    /// Reads every object back and checks it; returns each object's version and bytes.
    fn check_recovered(&mut self) -> Vec<(u64, Vec<u8>)> {
        let listed: HashMap<ObjectId, u64> = self.engine().list_objects().into_iter().collect();
        let mut recovered = Vec::new();
        for object in 0..OBJECT_COUNT {
            let id = object_id(object);
            let object_size_bytes = self.object_size_bytes;
            let (version, data) = common::read(self.engine(), id, 0, object_size_bytes);
            let history = &self.objects[object as usize];
            for page in 0..self.pages_per_object {
                let bytes = &data[page as usize * PAGE_BYTES..(page as usize + 1) * PAGE_BYTES];
                let limit = history.ops.len();
                if let Err(error) = history.check_page(id, page, bytes, history.floor(page, limit), limit) {
                    panic!("after the crash: {error}");
                }
            }
            let exists = data.iter().any(|&byte| byte != 0);
            history.check_version(id, version, exists);
            if exists {
                assert_eq!(listed.get(&id), Some(&version), "{id}: listed version");
            } else {
                assert!(!listed.contains_key(&id), "{id} reads as zeros but is listed");
            }
            recovered.push((version, data));
        }
        let space = self.engine().space();
        assert!(space.used_bytes + space.free_bytes <= space.total_bytes, "{space:?}");
        assert_eq!(space.object_count, listed.len() as u64);
        recovered
    }
}

/// Crash cycles at random completion indices.
fn run_random_seed(seed: u64) -> Coverage {
    let _guard = SeedGuard(seed);
    let mut crasher = Crasher::new(seed);
    for _ in 0..CYCLE_COUNT {
        let op_count = crasher.rng.gen_range(10..80);
        let freeze_after = crasher.rng.gen_range(0..op_count as u64 * 4);
        crasher.control.apply(move |disk| disk.freeze_after_completions(freeze_after));
        let records_in_flight_max = crasher.options.records_in_flight_max;
        crasher.trickle = crasher.rng.gen_ratio(3, 4);
        if records_in_flight_max >= 2 && crasher.rng.gen_bool(0.75) {
            crasher.freeze_at_records_in_flight = Some(crasher.rng.gen_range(2..=records_in_flight_max.min(3)));
        }
        crasher.run_workload(op_count);
        crasher.freeze_at_records_in_flight = None;
        let poll_count = crasher.rng.gen_range(0..50);
        crasher.run_writeback(poll_count);
        crasher.crash_and_check();
    }
    crasher.coverage
}

/// Runs the random seeds of one parity and checks that enough crashes caught several journal
/// records in flight (written in parallel, completing in any order, torn or landing in part).
fn run_random_seeds(parity: u64) {
    let mut coverage = Coverage::default();
    for seed in seeds(env_count("BASALT_CRASH_SEEDS", 2000) / 2, parity) {
        coverage += run_random_seed(seed);
    }
    eprintln!("{coverage:?}");
    if coverage.crashes >= 300 {
        assert!(
            coverage.crashes_with_records_in_flight * 10 >= coverage.crashes,
            "too few crashes with several records in flight: {coverage:?}"
        );
        assert!(
            coverage.crashes_after_out_of_order_completions * 40 >= coverage.crashes,
            "too few crashes after records completed out of order: {coverage:?}"
        );
    }
}

/// Runs a small workload (and then write-back) for `seed`, crashing after `flush_index`
/// successful flushes, or at the end if there are fewer. Returns the flushes it saw.
fn run_flush_index(seed: u64, flush_index: Option<u64>) -> u64 {
    let mut crasher = Crasher::new(seed);
    let flushes_before = crasher.engine().disk().inner.completed_flush_count();
    if let Some(flush_index) = flush_index {
        crasher.control.apply(move |disk| disk.freeze_after_flushes(flush_index));
    }
    crasher.run_workload(16);
    crasher.run_writeback(10_000);
    let flush_count = crasher.engine().disk().inner.completed_flush_count() - flushes_before;
    crasher.crash_and_check();
    // A second cycle on the recovered engine, crashed at its end.
    crasher.run_workload(8);
    crasher.crash_and_check();
    flush_count
}

/// Seeds to run: the one given by `BASALT_CRASH_SEED`, or `count` seeds of the parity.
fn seeds(count: u64, parity: u64) -> Vec<u64> {
    if let Ok(seed) = std::env::var("BASALT_CRASH_SEED") {
        let seed: u64 = seed.parse().expect("BASALT_CRASH_SEED is a number");
        return if seed % 2 == parity { vec![seed] } else { Vec::new() };
    }
    (0..count).map(|index| index * 2 + parity).collect()
}

#[test]
fn crash_at_random_points_512_byte_sectors() {
    run_random_seeds(0);
}

#[test]
fn crash_at_random_points_4096_byte_sectors() {
    run_random_seeds(1);
}

#[test]
fn crash_at_every_flush_index() {
    let count = env_count("BASALT_CRASH_FLUSH_SEEDS", 16);
    let mut all: Vec<u64> = seeds(count.div_ceil(2), 0);
    all.extend(seeds(count / 2, 1));
    for seed in all {
        // Offset so these seeds differ from the random ones.
        let seed = seed + 1_000_000;
        let _guard = SeedGuard(seed);
        let flush_count = run_flush_index(seed, None);
        // Lazy write-back leaves some workloads with few durability points; each still counts.
        assert!(flush_count >= 2, "the workload flushed only {flush_count} times");
        for flush_index in 0..=flush_count {
            run_flush_index(seed, Some(flush_index));
        }
    }
}

/// A record dropped at open because an earlier one was missing (both were in flight at the
/// crash) is erased: new records reuse its seq and its place in the journal, and a later open
/// must not replay the stale record as their successor.
#[test]
fn a_dropped_record_is_never_replayed_after_its_seq_is_reused() {
    let options = EngineOptions { records_in_flight_max: 8, record_min_bytes_in_flight: 1, ..common::engine_options() };
    let disk = SimDisk::new(SimDiskOptions { size_bytes: 6 << 20, ..SimDiskOptions::default() });
    let disk = format_disk(CrashDisk::new(disk, false, 0), 16 << 10, 1 << 20);
    let control = disk.control();
    let mut engine = Engine::open(disk, &options).expect("open");
    let (a, b, c) = (object_id(0), object_id(1), object_id(2));
    // The records of A and then B in flight together: B's header cannot say A was durable.
    control.apply(|disk| disk.freeze_after_completions(0));
    let mut out = Vec::new();
    for (tag, object) in [(1, a), (2, b)] {
        engine.submit(tag, Request::Write { object, offset_bytes: 0, data: pattern_buffer(tag, object, 0, 1) });
        engine.poll(&mut out);
    }
    assert_eq!(engine.records_in_flight(), 2);
    control.apply(|disk| disk.unfreeze());
    while out.len() < 2 {
        engine.poll(&mut out);
        engine.wait();
    }
    let geometry = *engine.geometry();
    let mut disk = common::stop(engine);
    // As if the power failed with B's record on the media and A's not.
    let journal = disk.inner.read_written(geometry.journal_offset_bytes, geometry.journal_size_bytes as usize);
    let a_data = journal.chunks_exact(PAGE_BYTES).position(|page| page == page_pattern(1, a, 0)).expect("A's data");
    let a_header_at = geometry.journal_offset_bytes + ((a_data - 1) * PAGE_BYTES) as u64;
    disk.write_durable(a_header_at, &[0; PAGE_BYTES]);
    // A's record is missing and nothing proves it durable, so B's goes too (a torn tail).
    let mut engine = Engine::open(disk, &options).expect("open");
    for object in [a, b] {
        assert_eq!(common::read(&mut engine, object, 0, 4096).1, vec![0; PAGE_BYTES], "{object}");
    }
    // A record the size of A's takes its seq and its place; B's record would come next.
    common::write(&mut engine, c, 0, pattern_buffer(3, c, 0, 1));
    let mut engine = Engine::open(common::stop(engine), &options).expect("open");
    assert_eq!(common::read(&mut engine, c, 0, 4096).1, page_pattern(3, c, 0));
    assert_eq!(common::read(&mut engine, b, 0, 4096).1, vec![0; PAGE_BYTES], "the dropped record came back");
}
