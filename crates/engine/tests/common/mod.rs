//! Helpers shared by the engine's integration tests: engines on a `SimDisk`, a loop that drives
//! requests to completion, page contents that name the write they came from, and a disk wrapper
//! whose power loss may also land part of the writes that were still in flight.
//!
//! Each test file includes this module with `mod common;`, so not every file uses every helper.
#![allow(dead_code)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use engine::{AlignedBuffer, Completion, Engine, EngineError, EngineOptions, FormatOptions, ObjectId, Reply, Request};
use platform::{Disk, DiskCompletion, DiskOp, DiskRequest};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sim::{SimDisk, SimDiskOptions};

pub const PAGE_BYTES: usize = 4096;
const PATTERN_MAGIC: u32 = u32::from_le_bytes(*b"TPAG");

/// Reads a count from the environment, for longer soaks than CI runs.
pub fn env_count(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(value) => value.parse().unwrap_or_else(|_| panic!("{name}={value} is not a number")),
        Err(_) => default,
    }
}

pub fn format_disk<D: Disk>(disk: D, object_size_bytes: u64, journal_size_bytes: u64) -> D {
    let options = FormatOptions { object_size_bytes, journal_size_bytes: Some(journal_size_bytes), nonce: 0x5eed_ba5a };
    Engine::format(disk, &options).expect("format")
}

pub fn sim_disk(options: SimDiskOptions) -> SimDisk {
    SimDisk::new(options)
}

/// A small metadata cache, so cache misses and evictions happen in tests too; small journal
/// records, so a batch of writes goes out as several records in flight at once; and room for
/// only a few records' data in RAM, so the write-back job copies some pages from RAM and reads the
/// others back from the journal.
pub fn engine_options() -> EngineOptions {
    EngineOptions {
        meta_cache_bytes: 16 * PAGE_BYTES,
        record_min_bytes_in_flight: 2 * PAGE_BYTES as u32,
        record_data_cache_bytes: 16 * PAGE_BYTES,
        ..EngineOptions::default()
    }
}

pub fn open<D: Disk>(disk: D) -> Engine<D> {
    match Engine::open(disk, &engine_options()) {
        Ok(engine) => engine,
        Err(error) => panic!("open failed: {error}"),
    }
}

/// Stops an engine the way a killed process stops: requests already handed to the drive still
/// finish, nothing else happens. Returns the disk, ready for `Engine::open`.
pub fn stop<D: Disk>(engine: Engine<D>) -> D {
    let mut disk = engine.into_disk();
    let mut discarded = Vec::new();
    while disk.in_flight_count() > 0 {
        disk.reap(&mut discarded);
        discarded.clear();
        disk.wait();
    }
    disk
}

/// Submits `requests` (tagged by their index) and polls until all complete; results come back in
/// submission order. Panics if the engine stops making progress.
pub fn run_batch<D: Disk>(engine: &mut Engine<D>, requests: Vec<Request>) -> Vec<Result<Reply, EngineError>> {
    let count = requests.len();
    for (index, request) in requests.into_iter().enumerate() {
        engine.submit(index as u64, request);
    }
    let mut results: Vec<Option<Result<Reply, EngineError>>> = (0..count).map(|_| None).collect();
    let mut done = 0;
    let mut out: Vec<Completion> = Vec::new();
    let mut idle_rounds = 0;
    while done < count {
        engine.poll(&mut out);
        if out.is_empty() {
            if engine.disk().in_flight_count() == 0 {
                idle_rounds += 1;
                assert!(idle_rounds < 3, "engine is stuck: {} of {count} requests never completed", count - done);
            }
            engine.wait();
            continue;
        }
        idle_rounds = 0;
        for completion in out.drain(..) {
            let index = usize::try_from(completion.user_data).expect("index");
            assert!(results[index].is_none(), "request {index} completed twice");
            results[index] = Some(completion.result);
            done += 1;
        }
    }
    results.into_iter().map(|result| result.expect("completed")).collect()
}

pub fn execute<D: Disk>(engine: &mut Engine<D>, request: Request) -> Result<Reply, EngineError> {
    run_batch(engine, vec![request]).pop().expect("one result")
}

pub fn read<D: Disk>(engine: &mut Engine<D>, object: ObjectId, offset_bytes: u32, length_bytes: u32) -> (u64, Vec<u8>) {
    match execute(engine, Request::Read { object, offset_bytes, length_bytes }) {
        Ok(Reply::Read { version, data, .. }) => (version, data.to_vec()),
        other => panic!("read of {object} at offset_bytes={offset_bytes} failed: {other:?}"),
    }
}

pub fn write<D: Disk>(engine: &mut Engine<D>, object: ObjectId, offset_bytes: u32, data: AlignedBuffer) -> u64 {
    match execute(engine, Request::Write { object, offset_bytes, data }) {
        Ok(Reply::Written { version }) => version,
        other => panic!("write of {object} at offset_bytes={offset_bytes} failed: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Page patterns.

/// The contents of `page` of `object` as written by the write tagged `tag` (never zero): a
/// header naming all three, then bytes derived from them, so any page read back either is zeros
/// or names exactly one write, and a page that is neither was invented.
pub fn page_pattern(tag: u64, object: ObjectId, page: u32) -> Vec<u8> {
    assert_ne!(tag, 0);
    let mut bytes = vec![0u8; PAGE_BYTES];
    bytes[0..4].copy_from_slice(&PATTERN_MAGIC.to_le_bytes());
    bytes[4..8].copy_from_slice(&page.to_le_bytes());
    bytes[8..16].copy_from_slice(&tag.to_le_bytes());
    bytes[16..24].copy_from_slice(&object.inode.to_le_bytes());
    bytes[24..32].copy_from_slice(&object.stripe.to_le_bytes());
    let mut state =
        tag ^ object.inode.rotate_left(17) ^ object.stripe.rotate_left(31) ^ u64::from(page).rotate_left(47);
    for chunk in bytes[32..].chunks_exact_mut(8) {
        // xorshift64*, seeded per page.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        chunk.copy_from_slice(&state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    bytes
}

/// A buffer of `page_count` pattern pages starting at `first_page`.
pub fn pattern_buffer(tag: u64, object: ObjectId, first_page: u32, page_count: u32) -> AlignedBuffer {
    let mut buffer = AlignedBuffer::zeroed(page_count as usize * PAGE_BYTES);
    for index in 0..page_count {
        let at = index as usize * PAGE_BYTES;
        buffer[at..at + PAGE_BYTES].copy_from_slice(&page_pattern(tag, object, first_page + index));
    }
    buffer
}

/// What a page read back holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PageContent {
    Zero,
    /// The page as the write with this tag wrote it.
    Tag(u64),
}

/// Names the write a page came from, or `Err` with a description if it is not exactly a page
/// some write of this object and page could have produced.
pub fn classify_page(bytes: &[u8], object: ObjectId, page: u32) -> Result<PageContent, String> {
    assert_eq!(bytes.len(), PAGE_BYTES);
    if bytes.iter().all(|&byte| byte == 0) {
        return Ok(PageContent::Zero);
    }
    let tag = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    if tag == 0 || bytes[0..4] != PATTERN_MAGIC.to_le_bytes() {
        return Err(format!("object {object} page {page} holds bytes no write produced"));
    }
    if bytes != page_pattern(tag, object, page).as_slice() {
        return Err(format!("object {object} page {page} is a damaged or misplaced copy of write tag {tag}"));
    }
    Ok(PageContent::Tag(tag))
}

// ---------------------------------------------------------------------------------------------
// A disk whose power loss may land part of the writes in flight.

/// Wraps a `SimDisk`. `SimDisk::crash` drops every request still in flight; a real drive may
/// have written some or all sectors of them (journal records submitted together and torn by
/// the power loss). With `tear_in_flight`, `crash` lands a random part (possibly all, possibly
/// none) of each write in flight too.
pub struct CrashDisk {
    pub inner: SimDisk,
    /// Changes requested while an engine owns the disk, applied at its next call.
    control: DiskControl,
    tear_in_flight: bool,
    rng: SmallRng,
    /// Writes submitted and not yet reaped, by request id.
    in_flight_writes: BTreeMap<u64, (u64, Vec<u8>)>,
    reaped: Vec<DiskCompletion>,
    /// With `delay_completions`: requests the device finished whose completions are not
    /// delivered yet (an interrupt that has not arrived).
    held: Vec<DiskCompletion>,
    delay_completions: bool,
}

impl CrashDisk {
    pub fn new(inner: SimDisk, tear_in_flight: bool, seed: u64) -> CrashDisk {
        CrashDisk {
            inner,
            control: DiskControl::default(),
            tear_in_flight,
            rng: SmallRng::seed_from_u64(seed ^ 0x7ea2_1f11),
            in_flight_writes: BTreeMap::new(),
            reaped: Vec::new(),
            held: Vec::new(),
            delay_completions: false,
        }
    }

    /// Delivers each finished request's completion only at a later `reap` (each call delivers
    /// every held completion with probability 1/2, so they also arrive out of order). A caller
    /// then submits more while earlier requests it thinks in flight are already done.
    pub fn delay_completions(&mut self, enabled: bool) {
        self.delay_completions = enabled;
    }

    pub fn is_frozen(&self) -> bool {
        self.inner.is_frozen()
    }

    /// The simulated disk underneath, once no engine owns this one.
    pub fn into_inner(self) -> SimDisk {
        self.inner
    }

    /// A handle that changes this disk (freezes, injected errors) while an engine owns it.
    pub fn control(&self) -> DiskControl {
        self.control.clone()
    }

    fn apply_control(&mut self) {
        let actions = std::mem::take(&mut *self.control.0.borrow_mut());
        for action in actions {
            action(&mut self.inner);
        }
    }

    /// Power loss: `SimDisk::crash`, then (with `tear_in_flight`) part of each write that was
    /// still in flight reaches the media, sector by sector.
    pub fn crash(&mut self) {
        // A freeze armed but not applied yet must not hit the next engine's open.
        self.control.0.borrow_mut().clear();
        // Held completions belong to requests the device executed: not in flight.
        self.held.clear();
        // Completions already made belong to requests the device executed: not in flight.
        self.inner.freeze_after_completions(0);
        let mut done = Vec::new();
        self.inner.reap(&mut done);
        for completion in &done {
            self.in_flight_writes.remove(&completion.id);
        }
        self.inner.crash();
        let in_flight = std::mem::take(&mut self.in_flight_writes);
        if !self.tear_in_flight {
            return;
        }
        let sector_bytes = self.inner.options().sector_size_bytes as usize;
        for (_, (offset_bytes, data)) in in_flight {
            let sector_count = data.len() / sector_bytes;
            let landed: Vec<bool> = match self.rng.gen_range(0..5) {
                0 => {
                    // In order, cut short.
                    let kept = self.rng.gen_range(0..sector_count);
                    (0..sector_count).map(|index| index < kept).collect()
                }
                1 => (0..sector_count).map(|_| self.rng.gen_bool(0.5)).collect(),
                // Whole: the write reached the media, its completion did not reach the engine.
                2 => vec![true; sector_count],
                _ => continue,
            };
            for (index, sector) in data.chunks_exact(sector_bytes).enumerate() {
                if landed[index] {
                    self.write_durable(offset_bytes + (index * sector_bytes) as u64, sector);
                }
            }
        }
    }

    /// Writes `bytes` straight to the media, durable at once (a test shaping what a crash left).
    pub fn write_durable(&mut self, offset_bytes: u64, bytes: &[u8]) {
        for (op, buffer) in [(DiskOp::Write, AlignedBuffer::from_slice(bytes)), (DiskOp::Flush, AlignedBuffer::empty())]
        {
            assert_eq!(self.inner.in_flight_count(), 0);
            self.inner.submit(DiskRequest { id: u64::MAX, op, offset_bytes, buffer });
            let mut done = Vec::new();
            while done.is_empty() {
                self.inner.reap(&mut done);
                self.inner.wait();
            }
            done.pop().expect("one completion").result.expect("landing a torn write");
        }
    }
}

impl Disk for CrashDisk {
    fn sector_size_bytes(&self) -> u32 {
        self.inner.sector_size_bytes()
    }

    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    fn submit(&mut self, request: DiskRequest) {
        self.apply_control();
        if matches!(request.op, DiskOp::Write | DiskOp::WriteFlush | DiskOp::WriteFua) && self.tear_in_flight {
            let previous = self.in_flight_writes.insert(request.id, (request.offset_bytes, request.buffer.to_vec()));
            assert!(previous.is_none(), "request id {} reused while in flight", request.id);
        }
        self.inner.submit(request);
    }

    fn reap(&mut self, completions: &mut Vec<DiskCompletion>) {
        self.apply_control();
        self.inner.reap(&mut self.reaped);
        for completion in self.reaped.drain(..) {
            self.in_flight_writes.remove(&completion.id);
            if self.delay_completions {
                self.held.push(completion);
            } else {
                completions.push(completion);
            }
        }
        // A frozen device delivers nothing more, late completions included.
        let mut index = if self.inner.is_frozen() { self.held.len() } else { 0 };
        while index < self.held.len() {
            if self.rng.gen_bool(0.5) {
                completions.push(self.held.remove(index));
            } else {
                index += 1;
            }
        }
    }

    fn wait(&mut self) {
        self.apply_control();
        if self.held.is_empty() {
            self.inner.wait();
        }
    }

    fn in_flight_count(&self) -> usize {
        self.inner.in_flight_count() + self.held.len()
    }
}

type DiskAction = Box<dyn FnOnce(&mut SimDisk)>;

/// Changes a `CrashDisk` from outside the engine that owns it (a freeze, injected errors);
/// the disk applies them, in order, at its next call.
#[derive(Clone, Default)]
pub struct DiskControl(Rc<RefCell<Vec<DiskAction>>>);

impl DiskControl {
    pub fn apply(&self, action: impl FnOnce(&mut SimDisk) + 'static) {
        self.0.borrow_mut().push(Box::new(action));
    }
}
