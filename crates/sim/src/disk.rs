//! A simulated block device that keeps what a power loss may lose apart from what it keeps.
//!
//! [`SimDisk`] holds two sparse images. `written` is what reads see: every completed write.
//! `durable` is what survives a power loss: every write covered by a completed flush. Between
//! them sits the pending log, the completed writes that no completed flush covers yet, in
//! completion order, so `written` always equals `durable` with the pending log applied on top.
//! A crash decides, write by write and from the seed, which pending writes reach `durable`, and
//! with `torn_writes` which of their sectors. Everything, the completion order included, follows
//! from the seed and the sequence of calls, so a failing crash test replays exactly
//! (redb's `CrashBackend`, FoundationDB's `AsyncFileNonDurable`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Range;

use platform::{Disk, DiskCompletion, DiskError, DiskOp, DiskRequest};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Images are stored in chunks of this size; a chunk that was never written reads as zeros.
const CHUNK_SIZE_BYTES: u64 = 64 * 1024;
const CHUNK_SIZE_BYTES_USIZE: usize = 64 * 1024;
const _: () = assert!(CHUNK_SIZE_BYTES_USIZE as u64 == CHUNK_SIZE_BYTES);
// Sectors never straddle chunks, so a sector is always one copy within one chunk.
const _: () = assert!(CHUNK_SIZE_BYTES % 4096 == 0);

/// `O_DIRECT` requires the buffer address to be aligned to the logical block size; 512 bytes is
/// what Linux checks for devices with 512-byte sectors.
const BUFFER_ADDRESS_ALIGNMENT_BYTES: usize = 512;

/// `EINVAL`, which the kernel returns for a misaligned or out-of-range direct I/O request.
const ERRNO_INVALID: i32 = 22;
/// `EIO`, the errno of an injected media error.
const ERRNO_IO: i32 = 5;

/// In one crash out of this many, every pending write survives; in another, none does.
const CRASH_POLICY_DENOMINATOR: u32 = 8;
/// With `misdirected_writes`, one surviving write out of this many lands at a random offset.
const MISDIRECTED_DENOMINATOR: u32 = 8;

/// Probabilities of injected failures, drawn per request from the disk's seed. All zero by
/// default. They can be changed between phases of a test with [`SimDisk::set_faults`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SimDiskFaults {
    /// A read fails with `DiskError::Io { errno: 5 }` and leaves its buffer untouched.
    pub read_error_probability: f64,
    /// A write fails with `DiskError::Io { errno: 5 }` and changes nothing. A `WriteFlush` that
    /// fails this way neither writes nor flushes.
    pub write_error_probability: f64,
    /// A flush fails with `DiskError::Io { errno: 5 }` and makes nothing durable. A `WriteFlush`
    /// that fails this way has still written: later reads see its data, but it is not durable.
    pub flush_error_probability: f64,
}

impl SimDiskFaults {
    fn assert_valid(&self) {
        for probability in [self.read_error_probability, self.write_error_probability, self.flush_error_probability] {
            assert!(probability >= 0.0, "probability={probability}");
            assert!(probability <= 1.0, "probability={probability}");
        }
    }
}

/// How a [`SimDisk`] is built. `Default` gives a 1 GiB disk (stored sparsely) with 4 KiB sectors,
/// seed 0, FIFO completions, atomic writes and no faults; override fields as needed.
#[derive(Debug, Clone, PartialEq)]
pub struct SimDiskOptions {
    /// Logical size; a multiple of `sector_size_bytes`. Only written chunks take memory.
    pub size_bytes: u64,
    /// 512 or 4096: the unit of alignment and of atomicity at power loss.
    pub sector_size_bytes: u32,
    /// Decides completion order, injected faults and crash outcomes.
    pub seed: u64,
    /// Completes requests in random batches and a random order rather than all of them in
    /// submission order at every `reap`.
    pub reorder_completions: bool,
    /// At a crash, a pending multi-sector write may survive in part: a prefix or a random subset
    /// of its sectors. Without it, each pending write survives whole or not at all.
    pub torn_writes: bool,
    /// At a crash, a surviving pending write may land at a random sector-aligned offset instead
    /// of its own, leaving its own sectors as they were and overwriting others.
    pub misdirected_writes: bool,
    pub faults: SimDiskFaults,
}

impl Default for SimDiskOptions {
    fn default() -> SimDiskOptions {
        SimDiskOptions {
            size_bytes: 1 << 30,
            sector_size_bytes: 4096,
            seed: 0,
            reorder_completions: false,
            torn_writes: false,
            misdirected_writes: false,
            faults: SimDiskFaults::default(),
        }
    }
}

/// A deterministic in-memory [`Disk`] with power loss, torn writes, bit rot and injected errors.
///
/// Semantics, which the engine's crash tests rely on:
///
/// - `submit` only queues. Requests complete inside `reap` (FIFO, all of them; or with
///   `reorder_completions` a random subset in random order) or `wait` (at least one), and a
///   completed request is handed out by the next `reap`.
/// - A write is applied when it completes, not when it is submitted; a read sees the data of
///   every write completed before it completes.
/// - A flush covers the writes that completed before it was submitted. When it completes, those
///   writes are durable; writes completed after its submission are not covered. A `WriteFlush`
///   completes its write, then makes it and every earlier completed write durable.
/// - Requests are validated like `O_DIRECT`: the offset and length must be multiples of the
///   sector size, the buffer address aligned to 512 bytes and the range within the disk.
///   Otherwise the request completes with `DiskError::Io { errno: 22 }` (`EINVAL`) and changes
///   nothing. A flush ignores its offset and must carry an empty buffer.
/// - [`SimDisk::crash`] drops every request in flight and decides the fate of every completed
///   write that is not yet durable, see there.
///
/// A frozen disk (see [`SimDisk::freeze_after_completions`]) completes nothing more: `reap`
/// returns only requests that had completed before, and `wait` returns at once even with requests
/// in flight. A harness must check [`SimDisk::is_frozen`] and then call `crash`, because a caller
/// that waits for its requests would spin.
pub struct SimDisk {
    options: SimDiskOptions,
    faults: SimDiskFaults,
    rng: SmallRng,
    /// What reads see.
    written: Image,
    /// What survives a crash.
    durable: Image,
    /// Completed writes that are in `written` but not yet in `durable`, in completion order.
    pending: VecDeque<PendingWrite>,
    /// Submitted and not yet completed.
    submitted: VecDeque<InFlight>,
    /// Completed and not yet reaped.
    completed: VecDeque<DiskCompletion>,
    /// Completions left before the disk freezes; `Some(0)` means frozen.
    completions_until_freeze: Option<u64>,
    /// Successful flushes left before the disk freezes.
    flushes_until_freeze: Option<u64>,
    no_space: bool,
    fail_next_reads_count: u32,
    fail_next_writes_count: u32,
    fail_next_flushes_count: u32,
    /// Every completion, failed ones included.
    completion_count: u64,
    /// Successful writes, also the sequence number of the next one.
    completed_write_count: u64,
    /// Successful flushes, `WriteFlush` and `WriteFua` included.
    completed_flush_count: u64,
    crash_count: u64,
}

/// A request between `submit` and its completion.
struct InFlight {
    request: DiskRequest,
    /// For a flush: the writes with a sequence number below this had completed when it was
    /// submitted, and are the ones it covers.
    write_sequence_covered: u64,
}

/// A completed write that no completed flush covers yet.
struct PendingWrite {
    sequence: u64,
    offset_bytes: u64,
    data: Box<[u8]>,
}

/// How a crash treats the pending writes as a whole.
#[derive(Debug, Clone, Copy)]
enum CrashPolicy {
    KeepAll,
    DropAll,
    /// Each pending write has its own fate.
    Independent,
}

/// What a crash does to one pending write.
#[derive(Debug, Clone, Copy)]
enum WriteFate {
    Kept,
    Dropped,
    Torn,
    Misdirected,
}

impl SimDisk {
    pub fn new(options: SimDiskOptions) -> SimDisk {
        assert!(
            options.sector_size_bytes == 512 || options.sector_size_bytes == 4096,
            "sector_size_bytes={}",
            options.sector_size_bytes
        );
        assert_eq!(options.size_bytes % u64::from(options.sector_size_bytes), 0);
        options.faults.assert_valid();
        SimDisk {
            faults: options.faults,
            rng: SmallRng::seed_from_u64(options.seed),
            written: Image::default(),
            durable: Image::default(),
            pending: VecDeque::new(),
            submitted: VecDeque::new(),
            completed: VecDeque::new(),
            completions_until_freeze: None,
            flushes_until_freeze: None,
            no_space: false,
            fail_next_reads_count: 0,
            fail_next_writes_count: 0,
            fail_next_flushes_count: 0,
            completion_count: 0,
            completed_write_count: 0,
            completed_flush_count: 0,
            crash_count: 0,
            options,
        }
    }

    /// A disk of the same options holding what this one's reads see now, as if every completed
    /// write had been made durable and the power then cut: for a checker to open the image
    /// with the engine, independently of the process still running on this disk.
    pub fn copy_of_written(&self) -> SimDisk {
        let mut copy = SimDisk::new(SimDiskOptions { faults: SimDiskFaults::default(), ..self.options.clone() });
        copy.written = self.written.clone();
        copy.durable = self.written.clone();
        copy
    }

    pub fn options(&self) -> &SimDiskOptions {
        &self.options
    }

    pub fn faults(&self) -> SimDiskFaults {
        self.faults
    }

    /// Replaces the fault probabilities, for example to turn faults off for a liveness phase.
    pub fn set_faults(&mut self, faults: SimDiskFaults) {
        faults.assert_valid();
        self.faults = faults;
    }

    /// The next `count` reads to complete fail with `DiskError::Io { errno: 5 }`.
    pub fn fail_next_reads(&mut self, count: u32) {
        self.fail_next_reads_count = count;
    }

    /// The next `count` writes (`Write` and `WriteFlush`) to complete fail with
    /// `DiskError::Io { errno: 5 }` and change nothing.
    pub fn fail_next_writes(&mut self, count: u32) {
        self.fail_next_writes_count = count;
    }

    /// The next `count` flushes (`Flush`, the flush half of `WriteFlush`, and `WriteFua`) to complete fail
    /// with `DiskError::Io { errno: 5 }` and make nothing durable.
    pub fn fail_next_flushes(&mut self, count: u32) {
        self.fail_next_flushes_count = count;
    }

    /// While set, every write fails with `DiskError::NoSpace` and changes nothing.
    pub fn set_no_space(&mut self, no_space: bool) {
        self.no_space = no_space;
    }

    /// Completes `count` more requests, then freezes: nothing else completes until
    /// [`SimDisk::crash`] or [`SimDisk::unfreeze`]. A `count` of zero freezes at once.
    pub fn freeze_after_completions(&mut self, count: u64) {
        self.completions_until_freeze = Some(count);
    }

    /// Freezes right after the `count`-th successful flush (`Flush`, `WriteFlush` or `WriteFua`) from now
    /// completes. A `count` of zero freezes at once. Crashing then, for every `count` up to the
    /// number of flushes a workload issues, crashes it "at every flush index".
    pub fn freeze_after_flushes(&mut self, count: u64) {
        if count == 0 {
            self.flushes_until_freeze = None;
            self.completions_until_freeze = Some(0);
        } else {
            self.flushes_until_freeze = Some(count);
        }
    }

    /// Lets requests complete again and cancels any pending freeze.
    pub fn unfreeze(&mut self) {
        self.completions_until_freeze = None;
        self.flushes_until_freeze = None;
    }

    pub fn is_frozen(&self) -> bool {
        self.completions_until_freeze == Some(0)
    }

    /// Models power loss. Every request in flight, completed or not, is dropped with its buffer
    /// and is never reaped. Each completed write that is not durable then meets a fate drawn from
    /// the seed, applied in completion order so a later surviving write wins over an earlier one:
    ///
    /// | crash policy (per crash) | probability | fate of each pending write                     |
    /// |--------------------------|-------------|-----------------------------------------------|
    /// | keep all                 | 1/8         | kept                                          |
    /// | drop all                 | 1/8         | dropped                                       |
    /// | independent              | 3/4         | kept or dropped, 1/2 each                     |
    /// | independent, torn_writes | 3/4         | kept, dropped or torn, 1/3 each (multi-sector) |
    ///
    /// A torn write keeps a random proper prefix of its sectors, or (half the time) a random
    /// subset. Sectors are atomic: every sector ends up wholly as one version of its content.
    /// With `misdirected_writes`, a kept write is instead written, one time in eight, at a random
    /// sector-aligned offset. Afterwards the disk reads its durable image, nothing is in flight,
    /// any freeze is lifted, and faults and counters stay as they were.
    pub fn crash(&mut self) {
        self.submitted.clear();
        self.completed.clear();
        self.unfreeze();
        let policy = match self.rng.gen_range(0..CRASH_POLICY_DENOMINATOR) {
            0 => CrashPolicy::KeepAll,
            1 => CrashPolicy::DropAll,
            _ => CrashPolicy::Independent,
        };
        let pending = std::mem::take(&mut self.pending);
        for write in pending {
            let fate = self.draw_fate(policy, &write);
            self.apply_fate(&write, fate);
        }
        self.written = self.durable.clone();
        self.crash_count += 1;
    }

    /// Inverts one bit at rest, in what reads see and in what survives a crash alike.
    pub fn flip_bit(&mut self, offset_bytes: u64, bit_index: u8) {
        assert!(offset_bytes < self.options.size_bytes, "offset_bytes={offset_bytes}");
        assert!(bit_index < 8, "bit_index={bit_index}");
        let mask = 1u8 << bit_index;
        self.written.xor_byte(offset_bytes, mask);
        self.durable.xor_byte(offset_bytes, mask);
        // Keeps `written` equal to `durable` plus the pending log, whatever a crash keeps.
        for write in &mut self.pending {
            if let Some(index) = offset_bytes.checked_sub(write.offset_bytes) {
                if index < write.data.len() as u64 {
                    write.data[usize_from(index)] ^= mask;
                }
            }
        }
    }

    /// Inverts `count` distinct bits chosen by `seed` within `range_bytes`, as
    /// [`SimDisk::flip_bit`] does. Uses its own generator, so it does not disturb the disk's.
    pub fn flip_random_bits_in(&mut self, range_bytes: Range<u64>, count: usize, seed: u64) {
        assert!(range_bytes.start < range_bytes.end, "range_bytes={range_bytes:?}");
        assert!(range_bytes.end <= self.options.size_bytes, "range_bytes={range_bytes:?}");
        let bit_count = (range_bytes.end - range_bytes.start).saturating_mul(8);
        assert!(count as u64 <= bit_count, "count={count} bit_count={bit_count}");
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut flipped = BTreeSet::new();
        while flipped.len() < count {
            let offset_bytes = rng.gen_range(range_bytes.clone());
            let bit_index: u8 = rng.gen_range(0..8);
            if flipped.insert((offset_bytes, bit_index)) {
                self.flip_bit(offset_bytes, bit_index);
            }
        }
    }

    /// What reads see now: every completed write.
    pub fn read_written(&self, offset_bytes: u64, size_bytes: usize) -> Vec<u8> {
        self.assert_in_range(offset_bytes, size_bytes);
        let mut bytes = vec![0; size_bytes];
        self.written.read(offset_bytes, &mut bytes);
        bytes
    }

    /// What a crash would keep for certain: every write covered by a completed flush.
    pub fn read_durable(&self, offset_bytes: u64, size_bytes: usize) -> Vec<u8> {
        self.assert_in_range(offset_bytes, size_bytes);
        let mut bytes = vec![0; size_bytes];
        self.durable.read(offset_bytes, &mut bytes);
        bytes
    }

    /// Completed writes that no completed flush covers yet: what a crash now may lose.
    pub fn writes_since_last_flush(&self) -> usize {
        self.pending.len()
    }

    /// Every completion so far, failed ones included; this is what
    /// [`SimDisk::freeze_after_completions`] counts.
    pub fn completion_count(&self) -> u64 {
        self.completion_count
    }

    /// Successful `Write` and `WriteFlush` completions so far, across crashes.
    pub fn completed_write_count(&self) -> u64 {
        self.completed_write_count
    }

    /// Successful `Flush` and `WriteFlush` completions so far, across crashes.
    pub fn completed_flush_count(&self) -> u64 {
        self.completed_flush_count
    }

    pub fn crash_count(&self) -> u64 {
        self.crash_count
    }

    fn assert_in_range(&self, offset_bytes: u64, size_bytes: usize) {
        let end_bytes = offset_bytes.checked_add(size_bytes as u64);
        assert!(
            end_bytes.is_some_and(|end_bytes| end_bytes <= self.options.size_bytes),
            "offset_bytes={offset_bytes} size_bytes={size_bytes}"
        );
    }

    /// Completes the submitted request at `index` and queues its completion for `reap`.
    fn complete_at(&mut self, index: usize) {
        assert!(!self.is_frozen());
        let in_flight = if self.options.reorder_completions {
            self.submitted.swap_remove_back(index)
        } else {
            self.submitted.remove(index)
        };
        let in_flight = in_flight.expect("index of a submitted request");
        // Before executing: a flush may freeze the disk, and the freeze must hold afterwards.
        if let Some(remaining) = &mut self.completions_until_freeze {
            *remaining -= 1;
        }
        self.completion_count += 1;
        let completion = self.execute(in_flight);
        self.completed.push_back(completion);
    }

    /// Completes requests for `reap`: all of them in FIFO order, or a random batch in random
    /// order.
    fn progress(&mut self) {
        if self.options.reorder_completions {
            if self.submitted.is_empty() {
                return;
            }
            let count = self.rng.gen_range(0..=self.submitted.len());
            for _ in 0..count {
                if self.is_frozen() {
                    break;
                }
                let index = self.rng.gen_range(0..self.submitted.len());
                self.complete_at(index);
            }
        } else {
            while !self.submitted.is_empty() && !self.is_frozen() {
                self.complete_at(0);
            }
        }
    }

    fn execute(&mut self, in_flight: InFlight) -> DiskCompletion {
        let InFlight { request, write_sequence_covered } = in_flight;
        let DiskRequest { id, op, offset_bytes, mut buffer } = request;
        let result = match op {
            DiskOp::Read => self.execute_read(offset_bytes, &mut buffer),
            DiskOp::Write => self.execute_write(offset_bytes, &buffer),
            DiskOp::WriteFua => {
                self.execute_write(offset_bytes, &buffer).and_then(|()| self.make_last_write_durable(offset_bytes))
            }
            DiskOp::WriteFlush => self
                .execute_write(offset_bytes, &buffer)
                .and_then(|()| self.execute_flush(offset_bytes, self.completed_write_count)),
            DiskOp::Flush => {
                if buffer.is_empty() {
                    self.execute_flush(offset_bytes, write_sequence_covered)
                } else {
                    Err(DiskError::Io { errno: ERRNO_INVALID, offset_bytes })
                }
            }
        };
        DiskCompletion { id, op, offset_bytes, buffer, result }
    }

    fn execute_read(&mut self, offset_bytes: u64, buffer: &mut [u8]) -> Result<(), DiskError> {
        self.validate(offset_bytes, buffer)?;
        let fault = draw_fault(&mut self.rng, &mut self.fail_next_reads_count, self.faults.read_error_probability);
        if fault {
            return Err(DiskError::Io { errno: ERRNO_IO, offset_bytes });
        }
        self.written.read(offset_bytes, buffer);
        Ok(())
    }

    fn execute_write(&mut self, offset_bytes: u64, buffer: &[u8]) -> Result<(), DiskError> {
        self.validate(offset_bytes, buffer)?;
        if self.no_space {
            return Err(DiskError::NoSpace { offset_bytes });
        }
        let fault = draw_fault(&mut self.rng, &mut self.fail_next_writes_count, self.faults.write_error_probability);
        if fault {
            return Err(DiskError::Io { errno: ERRNO_IO, offset_bytes });
        }
        let sequence = self.completed_write_count;
        self.completed_write_count += 1;
        if !buffer.is_empty() {
            self.written.write(offset_bytes, buffer);
            self.pending.push_back(PendingWrite { sequence, offset_bytes, data: buffer.into() });
        }
        Ok(())
    }

    /// Makes the write that just completed durable, alone (forced unit access). Older pending
    /// writes to the same sectors can no longer surface at a crash: the device holds the newer
    /// content for those sectors, so their copies in the log are overwritten with it.
    /// Like the flush half of a `WriteFlush`, this can fail (an injected flush fault): the data
    /// is then written but not durable.
    fn make_last_write_durable(&mut self, offset_bytes: u64) -> Result<(), DiskError> {
        let fault = draw_fault(&mut self.rng, &mut self.fail_next_flushes_count, self.faults.flush_error_probability);
        if fault {
            return Err(DiskError::Io { errno: ERRNO_IO, offset_bytes });
        }
        let just_completed = self.completed_write_count - 1;
        if self.pending.back().is_some_and(|last| last.sequence == just_completed) {
            self.make_pending_write_durable();
        }
        self.count_durability_point();
        Ok(())
    }

    fn make_pending_write_durable(&mut self) {
        let last = self.pending.pop_back().expect("checked");
        self.durable.write(last.offset_bytes, &last.data);
        let (start, end) = (last.offset_bytes, last.offset_bytes + last.data.len() as u64);
        for older in &mut self.pending {
            let (older_start, older_end) = (older.offset_bytes, older.offset_bytes + older.data.len() as u64);
            let (from, to) = (start.max(older_start), end.min(older_end));
            if from < to {
                let source = &last.data[(from - start) as usize..(to - start) as usize];
                older.data[(from - older_start) as usize..(to - older_start) as usize].copy_from_slice(source);
            }
        }
    }

    /// Makes durable every pending write with a sequence number below `write_sequence_covered`.
    fn execute_flush(&mut self, offset_bytes: u64, write_sequence_covered: u64) -> Result<(), DiskError> {
        let fault = draw_fault(&mut self.rng, &mut self.fail_next_flushes_count, self.faults.flush_error_probability);
        if fault {
            return Err(DiskError::Io { errno: ERRNO_IO, offset_bytes });
        }
        // The log is in sequence order, so the covered writes are a prefix of it.
        while let Some(write) = self.pending.front() {
            if write.sequence >= write_sequence_covered {
                break;
            }
            self.durable.write(write.offset_bytes, &write.data);
            self.pending.pop_front();
        }
        self.count_durability_point();
        Ok(())
    }

    /// A flush, or a forced-unit-access write, completed: counts it and arms a pending freeze.
    fn count_durability_point(&mut self) {
        self.completed_flush_count += 1;
        if let Some(remaining) = &mut self.flushes_until_freeze {
            *remaining -= 1;
            if *remaining == 0 {
                self.flushes_until_freeze = None;
                self.completions_until_freeze = Some(0);
            }
        }
    }

    fn validate(&self, offset_bytes: u64, buffer: &[u8]) -> Result<(), DiskError> {
        let sector_size_bytes = u64::from(self.options.sector_size_bytes);
        let size_bytes = buffer.len() as u64;
        let aligned = offset_bytes % sector_size_bytes == 0
            && size_bytes % sector_size_bytes == 0
            && (buffer.as_ptr() as usize) % BUFFER_ADDRESS_ALIGNMENT_BYTES == 0;
        let in_range =
            offset_bytes.checked_add(size_bytes).is_some_and(|end_bytes| end_bytes <= self.options.size_bytes);
        if aligned && in_range {
            Ok(())
        } else {
            Err(DiskError::Io { errno: ERRNO_INVALID, offset_bytes })
        }
    }

    fn draw_fate(&mut self, policy: CrashPolicy, write: &PendingWrite) -> WriteFate {
        let sector_count = write.data.len() / self.sector_size_bytes_usize();
        let fate = match policy {
            CrashPolicy::KeepAll => WriteFate::Kept,
            CrashPolicy::DropAll => WriteFate::Dropped,
            CrashPolicy::Independent => {
                let tearable = self.options.torn_writes && sector_count > 1;
                match self.rng.gen_range(0..if tearable { 3 } else { 2 }) {
                    0 => WriteFate::Dropped,
                    1 => WriteFate::Kept,
                    _ => WriteFate::Torn,
                }
            }
        };
        let misdirected = matches!(fate, WriteFate::Kept)
            && self.options.misdirected_writes
            && self.rng.gen_ratio(1, MISDIRECTED_DENOMINATOR);
        if misdirected {
            WriteFate::Misdirected
        } else {
            fate
        }
    }

    fn apply_fate(&mut self, write: &PendingWrite, fate: WriteFate) {
        let sector_size_bytes = self.sector_size_bytes_usize();
        let sector_count = write.data.len() / sector_size_bytes;
        match fate {
            WriteFate::Kept => self.durable.write(write.offset_bytes, &write.data),
            WriteFate::Dropped => {}
            WriteFate::Torn => {
                assert!(sector_count > 1);
                if self.rng.gen_bool(0.5) {
                    // The device wrote the sectors in order and lost power part way through.
                    let kept_count = self.rng.gen_range(1..sector_count);
                    let kept = &write.data[..kept_count * sector_size_bytes];
                    self.durable.write(write.offset_bytes, kept);
                } else {
                    let sectors = write.data.chunks_exact(sector_size_bytes);
                    for (sector_index, sector) in sectors.enumerate() {
                        if self.rng.gen_bool(0.5) {
                            let offset_bytes = write.offset_bytes + (sector_index * sector_size_bytes) as u64;
                            self.durable.write(offset_bytes, sector);
                        }
                    }
                }
            }
            WriteFate::Misdirected => {
                let sector_size_bytes = sector_size_bytes as u64;
                let disk_sector_count = self.options.size_bytes / sector_size_bytes;
                let target_sector_max = disk_sector_count - sector_count as u64;
                let target_sector = self.rng.gen_range(0..=target_sector_max);
                self.durable.write(target_sector * sector_size_bytes, &write.data);
            }
        }
    }

    fn sector_size_bytes_usize(&self) -> usize {
        usize_from(u64::from(self.options.sector_size_bytes))
    }

    /// Checks that `written` equals `durable` with the pending log applied. O(data written).
    #[cfg(test)]
    fn assert_images_consistent(&self) {
        let mut expected = self.durable.clone();
        let mut sequence_previous = None;
        for write in &self.pending {
            assert!(sequence_previous < Some(write.sequence));
            sequence_previous = Some(write.sequence);
            expected.write(write.offset_bytes, &write.data);
        }
        assert!(expected.same_content(&self.written));
    }
}

impl Disk for SimDisk {
    fn sector_size_bytes(&self) -> u32 {
        self.options.sector_size_bytes
    }

    fn size_bytes(&self) -> u64 {
        self.options.size_bytes
    }

    fn submit(&mut self, request: DiskRequest) {
        let write_sequence_covered = self.completed_write_count;
        self.submitted.push_back(InFlight { request, write_sequence_covered });
    }

    fn reap(&mut self, completions: &mut Vec<DiskCompletion>) {
        self.progress();
        completions.extend(self.completed.drain(..));
    }

    /// Completes one request unless one is already waiting to be reaped. Returns at once, having
    /// completed nothing, when nothing is in flight or the disk is frozen.
    fn wait(&mut self) {
        if !self.completed.is_empty() || self.submitted.is_empty() || self.is_frozen() {
            return;
        }
        let index = if self.options.reorder_completions { self.rng.gen_range(0..self.submitted.len()) } else { 0 };
        self.complete_at(index);
    }

    fn in_flight_count(&self) -> usize {
        self.submitted.len() + self.completed.len()
    }
}

impl std::fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimDisk")
            .field("options", &self.options)
            .field("in_flight_count", &self.in_flight_count())
            .field("writes_since_last_flush", &self.pending.len())
            .field("frozen", &self.is_frozen())
            .field("crash_count", &self.crash_count)
            .finish_non_exhaustive()
    }
}

/// Whether the next request of a kind fails: first the explicit count, then the probability.
fn draw_fault(rng: &mut SmallRng, fail_next_count: &mut u32, probability: f64) -> bool {
    if *fail_next_count > 0 {
        *fail_next_count -= 1;
        return true;
    }
    probability > 0.0 && rng.gen_bool(probability)
}

fn usize_from(value: u64) -> usize {
    usize::try_from(value).expect("value fits in usize")
}

/// A sparse disk image: 64 KiB chunks, created on first non-zero write.
#[derive(Clone, Default)]
struct Image {
    chunks: BTreeMap<u64, Box<[u8]>>,
}

impl Image {
    fn read(&self, offset_bytes: u64, target: &mut [u8]) {
        for_each_segment(offset_bytes, target.len(), |chunk_index, within, segment| {
            let target = &mut target[segment];
            match self.chunks.get(&chunk_index) {
                Some(chunk) => target.copy_from_slice(&chunk[within..within + target.len()]),
                None => target.fill(0),
            }
        });
    }

    fn write(&mut self, offset_bytes: u64, source: &[u8]) {
        for_each_segment(offset_bytes, source.len(), |chunk_index, within, segment| {
            let source = &source[segment];
            let chunk = match self.chunks.get_mut(&chunk_index) {
                Some(chunk) => chunk,
                // Zeros over a missing chunk change nothing, so formatting costs no memory.
                None if source.iter().all(|&byte| byte == 0) => return,
                None => self.chunks.entry(chunk_index).or_insert_with(zeroed_chunk),
            };
            chunk[within..within + source.len()].copy_from_slice(source);
        });
    }

    fn xor_byte(&mut self, offset_bytes: u64, mask: u8) {
        let chunk_index = offset_bytes / CHUNK_SIZE_BYTES;
        let within = usize_from(offset_bytes % CHUNK_SIZE_BYTES);
        let chunk = self.chunks.entry(chunk_index).or_insert_with(zeroed_chunk);
        chunk[within] ^= mask;
    }

    /// Equality of content, where a missing chunk equals a chunk of zeros.
    #[cfg(test)]
    fn same_content(&self, other: &Image) -> bool {
        let zeros = zeroed_chunk();
        let indexes: BTreeSet<u64> = self.chunks.keys().chain(other.chunks.keys()).copied().collect();
        indexes.into_iter().all(|index| {
            let left = self.chunks.get(&index).unwrap_or(&zeros);
            let right = other.chunks.get(&index).unwrap_or(&zeros);
            left == right
        })
    }
}

fn zeroed_chunk() -> Box<[u8]> {
    vec![0; CHUNK_SIZE_BYTES_USIZE].into_boxed_slice()
}

/// Calls `f(chunk_index, offset_in_chunk_bytes, range_in_buffer)` for each chunk that the byte
/// range `offset_bytes..offset_bytes + size_bytes` touches, in order.
fn for_each_segment(offset_bytes: u64, size_bytes: usize, mut f: impl FnMut(u64, usize, Range<usize>)) {
    let mut done_bytes = 0;
    while done_bytes < size_bytes {
        let position_bytes = offset_bytes + done_bytes as u64;
        let chunk_index = position_bytes / CHUNK_SIZE_BYTES;
        let within = usize_from(position_bytes % CHUNK_SIZE_BYTES);
        let step_bytes = (CHUNK_SIZE_BYTES_USIZE - within).min(size_bytes - done_bytes);
        f(chunk_index, within, done_bytes..done_bytes + step_bytes);
        done_bytes += step_bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use platform::AlignedBuffer;

    const SEED_COUNT: u64 = 256;

    fn options(seed: u64) -> SimDiskOptions {
        SimDiskOptions { seed, ..SimDiskOptions::default() }
    }

    fn submit(disk: &mut SimDisk, id: u64, op: DiskOp, offset_bytes: u64, bytes: &[u8]) {
        let buffer = AlignedBuffer::from_slice(bytes);
        disk.submit(DiskRequest { id, op, offset_bytes, buffer });
    }

    /// Reaps and waits until nothing is in flight, as an engine's event loop would.
    fn drive(disk: &mut SimDisk) -> Vec<DiskCompletion> {
        let mut completions = Vec::new();
        for _ in 0..100_000 {
            if disk.in_flight_count() == 0 {
                return completions;
            }
            let reaped_before = completions.len();
            disk.reap(&mut completions);
            if completions.len() == reaped_before {
                disk.wait();
            }
        }
        panic!("requests never completed: {disk:?}");
    }

    /// Runs one request to completion and returns it.
    fn run(disk: &mut SimDisk, op: DiskOp, offset_bytes: u64, bytes: &[u8]) -> DiskCompletion {
        assert_eq!(disk.in_flight_count(), 0);
        submit(disk, 0, op, offset_bytes, bytes);
        let mut completions = drive(disk);
        assert_eq!(completions.len(), 1);
        completions.pop().unwrap()
    }

    fn write(disk: &mut SimDisk, offset_bytes: u64, bytes: &[u8]) {
        run(disk, DiskOp::Write, offset_bytes, bytes).result.unwrap();
    }

    fn flush(disk: &mut SimDisk) {
        run(disk, DiskOp::Flush, 0, &[]).result.unwrap();
    }

    fn read(disk: &mut SimDisk, offset_bytes: u64, size_bytes: usize) -> Vec<u8> {
        let completion = run(disk, DiskOp::Read, offset_bytes, &vec![0xee; size_bytes]);
        completion.result.unwrap();
        completion.buffer.to_vec()
    }

    fn pattern(size_bytes: usize, salt: u8) -> Vec<u8> {
        (0..size_bytes).map(|index| (index as u8).wrapping_mul(31).wrapping_add(salt)).collect()
    }

    #[test]
    fn round_trip() {
        for sector_size_bytes in [512, 4096] {
            let mut disk =
                SimDisk::new(SimDiskOptions { size_bytes: 8 << 30, sector_size_bytes, ..SimDiskOptions::default() });
            // Crosses a chunk boundary and lands near the end of a sparse 8 GiB disk.
            let data = pattern(3 * CHUNK_SIZE_BYTES_USIZE, 1);
            let offset_bytes = CHUNK_SIZE_BYTES - 4096;
            write(&mut disk, offset_bytes, &data);
            assert_eq!(read(&mut disk, offset_bytes, data.len()), data);
            let end_offset_bytes = (8 << 30) - 8192;
            write(&mut disk, end_offset_bytes, &data[..8192]);
            assert_eq!(read(&mut disk, end_offset_bytes, 8192), &data[..8192]);
            assert_eq!(read(&mut disk, 1 << 30, 4096), vec![0; 4096]);
            assert_eq!(disk.read_written(offset_bytes, data.len()), data);
            assert_eq!(disk.read_durable(offset_bytes, data.len()), vec![0; data.len()]);
            assert_eq!(disk.written.chunks.len(), 5);
            assert_eq!(disk.completed_write_count(), 2);
            disk.assert_images_consistent();
        }
    }

    #[test]
    fn writes_apply_at_completion_not_submission() {
        let mut disk = SimDisk::new(options(0));
        submit(&mut disk, 1, DiskOp::Write, 0, &[7; 4096]);
        assert_eq!(disk.read_written(0, 4096), vec![0; 4096]);
        assert_eq!(disk.in_flight_count(), 1);
        disk.wait();
        assert_eq!(disk.read_written(0, 4096), vec![7; 4096]);
        assert_eq!(disk.in_flight_count(), 1);
        let completions = drive(&mut disk);
        assert_eq!(completions.len(), 1);
        assert_eq!(completions[0].id, 1);
        assert_eq!(completions[0].buffer.as_slice(), &[7; 4096]);
    }

    #[test]
    fn unflushed_write_lost_or_kept() {
        let mut kept_count = 0;
        let mut lost_count = 0;
        for seed in 0..SEED_COUNT {
            let mut disk = SimDisk::new(options(seed));
            write(&mut disk, 0, &[1; 4096]);
            flush(&mut disk);
            write(&mut disk, 0, &[2; 4096]);
            assert_eq!(disk.writes_since_last_flush(), 1);
            disk.crash();
            assert_eq!(disk.writes_since_last_flush(), 0);
            let after = read(&mut disk, 0, 4096);
            assert_eq!(disk.read_durable(0, 4096), after);
            if after == [2; 4096] {
                kept_count += 1;
            } else {
                assert_eq!(after, [1; 4096]);
                lost_count += 1;
            }
        }
        assert!(kept_count > 0);
        assert!(lost_count > 0);
    }

    #[test]
    fn flush_makes_earlier_writes_survive_every_crash() {
        for seed in 0..SEED_COUNT {
            let mut disk =
                SimDisk::new(SimDiskOptions { torn_writes: true, reorder_completions: true, ..options(seed) });
            write(&mut disk, 0, &pattern(16384, 3));
            run(&mut disk, DiskOp::WriteFlush, 65536, &pattern(8192, 4)).result.unwrap();
            write(&mut disk, 131072, &pattern(8192, 5));
            flush(&mut disk);
            assert_eq!(disk.writes_since_last_flush(), 0);
            write(&mut disk, 4096, &[9; 8192]);
            submit(&mut disk, 1, DiskOp::Write, 0, &[8; 4096]);
            submit(&mut disk, 2, DiskOp::Flush, 0, &[]);
            disk.crash();
            assert_eq!(disk.in_flight_count(), 0);
            let after = read(&mut disk, 0, 16384);
            assert_eq!(after[..4096], pattern(16384, 3)[..4096]);
            assert_eq!(after[12288..], pattern(16384, 3)[12288..]);
            assert_eq!(read(&mut disk, 65536, 8192), pattern(8192, 4));
            assert_eq!(read(&mut disk, 131072, 8192), pattern(8192, 5));
        }
    }

    #[test]
    fn flush_does_not_cover_writes_completed_after_its_submission() {
        let mut seen = BTreeSet::new();
        for seed in 0..SEED_COUNT {
            let mut disk = SimDisk::new(options(seed));
            write(&mut disk, 0, &[1; 4096]);
            // The second write completes after the flush is submitted, before it completes.
            submit(&mut disk, 1, DiskOp::Write, 0, &[2; 4096]);
            submit(&mut disk, 2, DiskOp::Write, 8192, &[2; 4096]);
            submit(&mut disk, 3, DiskOp::Flush, 0, &[]);
            disk.wait();
            submit(&mut disk, 4, DiskOp::Flush, 0, &[]);
            assert_eq!(disk.writes_since_last_flush(), 2);
            let completions = drive(&mut disk);
            let ids: Vec<u64> = completions.iter().map(|completion| completion.id).collect();
            assert_eq!(ids, [1, 2, 3, 4]);
            // Flush 4 was submitted after write 1 completed, so it covers write 1 only.
            assert_eq!(disk.writes_since_last_flush(), 1);
            assert_eq!(disk.read_durable(0, 4096), [2; 4096]);
            assert_eq!(disk.read_durable(8192, 4096), [0; 4096]);
            disk.crash();
            assert_eq!(disk.read_written(0, 4096), [2; 4096]);
            seen.insert(disk.read_written(8192, 4096)[0]);
        }
        assert_eq!(seen, BTreeSet::from([0, 2]));
    }

    #[test]
    fn write_flush_covers_itself_and_earlier_writes() {
        for seed in 0..SEED_COUNT {
            let mut disk = SimDisk::new(SimDiskOptions { torn_writes: true, ..options(seed) });
            write(&mut disk, 0, &[1; 8192]);
            run(&mut disk, DiskOp::WriteFlush, 8192, &[2; 8192]).result.unwrap();
            assert_eq!(disk.completed_flush_count(), 1);
            disk.crash();
            assert_eq!(disk.read_written(0, 8192), [1; 8192]);
            assert_eq!(disk.read_written(8192, 8192), [2; 8192]);
        }
    }

    #[test]
    fn write_fua_makes_only_itself_durable_and_outlives_older_pending_writes() {
        let mut lost_earlier = false;
        for seed in 0..SEED_COUNT {
            let mut disk = SimDisk::new(SimDiskOptions { torn_writes: true, ..options(seed) });
            write(&mut disk, 0, &[1; 8192]);
            write(&mut disk, 16384, &[3; 4096]);
            run(&mut disk, DiskOp::WriteFua, 4096, &[2; 8192]).result.unwrap();
            assert_eq!(disk.completed_flush_count(), 1);
            disk.crash();
            // The forced write survives whole; the older write it overlapped never resurfaces.
            assert_eq!(disk.read_written(4096, 8192), [2; 8192]);
            let first = disk.read_written(0, 4096);
            assert!(first == [1; 4096] || first == [0; 4096]);
            lost_earlier |= disk.read_written(16384, 4096) == [0; 4096];
        }
        assert!(lost_earlier, "a write before the forced one must be able to vanish");
    }

    /// Every sector after a crash holds one whole version: the old one or that of a pending write.
    fn crash_outcomes(torn_writes: bool, sector_size_bytes: u32) -> BTreeSet<Vec<u8>> {
        const SECTOR_COUNT: usize = 16;
        let size_bytes = SECTOR_COUNT * sector_size_bytes as usize;
        let old = pattern(size_bytes, 10);
        let new = pattern(size_bytes, 20);
        let mut outcomes = BTreeSet::new();
        for seed in 0..SEED_COUNT {
            let mut disk = SimDisk::new(SimDiskOptions { sector_size_bytes, torn_writes, ..options(seed) });
            write(&mut disk, 0, &old);
            flush(&mut disk);
            write(&mut disk, 0, &new);
            disk.crash();
            let after = read(&mut disk, 0, size_bytes);
            let mut outcome = Vec::new();
            let sector_size_bytes = sector_size_bytes as usize;
            for sector_index in 0..SECTOR_COUNT {
                let range = sector_index * sector_size_bytes..(sector_index + 1) * sector_size_bytes;
                if after[range.clone()] == old[range.clone()] {
                    outcome.push(0);
                } else {
                    assert_eq!(after[range.clone()], new[range], "seed={seed}");
                    outcome.push(1);
                }
            }
            outcomes.insert(outcome);
        }
        outcomes
    }

    #[test]
    fn torn_writes_tear_at_sector_granularity_only() {
        for sector_size_bytes in [512, 4096] {
            let atomic = crash_outcomes(false, sector_size_bytes);
            assert_eq!(atomic, BTreeSet::from([vec![0; 16], vec![1; 16]]));
            let torn = crash_outcomes(true, sector_size_bytes);
            assert!(torn.contains(&vec![0; 16]));
            assert!(torn.contains(&vec![1; 16]));
            // Both prefixes and scattered subsets appear.
            assert!(torn.len() > 10, "outcomes={}", torn.len());
            assert!(torn.iter().any(|outcome| outcome.windows(2).any(|pair| pair == [0, 1])));
        }
    }

    /// Against a model: after a crash, each sector holds its last flushed version or one written
    /// since. Writes overlap, and a later write may be lost while an earlier one survives.
    #[test]
    fn crash_keeps_a_version_of_each_sector() {
        const SECTOR_COUNT: u64 = 32;
        for seed in 0..SEED_COUNT {
            let mut disk = SimDisk::new(SimDiskOptions { sector_size_bytes: 512, torn_writes: true, ..options(seed) });
            let mut workload = SmallRng::seed_from_u64(seed ^ 0x5eed);
            // Per sector: the durable version, then the versions written since.
            let mut versions: Vec<Vec<u8>> = vec![vec![0]; SECTOR_COUNT as usize];
            for version in 1..=60u8 {
                if workload.gen_ratio(1, 8) {
                    flush(&mut disk);
                    for sector_versions in &mut versions {
                        let last = *sector_versions.last().unwrap();
                        *sector_versions = vec![last];
                    }
                } else {
                    let start = workload.gen_range(0..SECTOR_COUNT);
                    let count = workload.gen_range(1..=(SECTOR_COUNT - start).min(6));
                    write(&mut disk, start * 512, &vec![version; usize_from(count * 512)]);
                    for sector in start..start + count {
                        versions[usize_from(sector)].push(version);
                    }
                }
                disk.assert_images_consistent();
            }
            disk.crash();
            let after = disk.read_written(0, usize_from(SECTOR_COUNT * 512));
            for (sector, sector_versions) in versions.iter().enumerate() {
                let bytes = &after[sector * 512..(sector + 1) * 512];
                assert!(bytes.iter().all(|&byte| byte == bytes[0]));
                assert!(sector_versions.contains(&bytes[0]), "seed={seed} sector={sector}");
            }
        }
    }

    #[test]
    fn bit_flips_are_visible_in_both_images() {
        let mut disk = SimDisk::new(options(0));
        write(&mut disk, 0, &[0x0f; 8192]);
        flush(&mut disk);
        disk.flip_bit(4100, 7);
        let mut expected = vec![0x0f; 8192];
        expected[4100] = 0x8f;
        assert_eq!(read(&mut disk, 0, 8192), expected);
        assert_eq!(disk.read_durable(0, 8192), expected);
        // At rest in a chunk never written, and under a pending write, which a flush then keeps.
        disk.flip_bit(5 << 20, 0);
        assert_eq!(read(&mut disk, 5 << 20, 4096)[0], 1);
        write(&mut disk, 1 << 20, &[0; 4096]);
        disk.flip_bit((1 << 20) + 3, 1);
        disk.assert_images_consistent();
        flush(&mut disk);
        assert_eq!(disk.read_durable((1 << 20) + 3, 1), [2]);

        let before = disk.read_written(0, 8192);
        disk.flip_random_bits_in(0..8192, 10, 42);
        let after = disk.read_written(0, 8192);
        assert_eq!(disk.read_durable(0, 8192), after);
        let flipped: u32 = before.iter().zip(&after).map(|(old, new)| (old ^ new).count_ones()).sum();
        assert_eq!(flipped, 10);
        disk.assert_images_consistent();
    }

    #[test]
    fn invalid_requests_fail_and_the_disk_keeps_working() {
        let mut disk =
            SimDisk::new(SimDiskOptions { size_bytes: 1 << 20, sector_size_bytes: 512, ..SimDiskOptions::default() });
        let invalid = |offset_bytes: u64| -> Result<(), DiskError> { Err(DiskError::Io { errno: 22, offset_bytes }) };
        for (op, offset_bytes, size_bytes) in [
            (DiskOp::Write, 100, 512),
            (DiskOp::Write, 512, 100),
            (DiskOp::Read, 1 << 20, 512),
            (DiskOp::Read, (1 << 20) - 512, 1024),
            (DiskOp::WriteFlush, u64::MAX - 511, 512),
            (DiskOp::Flush, 0, 512),
        ] {
            let completion = run(&mut disk, op, offset_bytes, &vec![1; size_bytes]);
            assert_eq!(completion.result, invalid(offset_bytes), "{op:?} {offset_bytes}");
            assert_eq!(completion.buffer.len(), size_bytes);
        }
        assert_eq!(disk.completed_write_count(), 0);
        assert_eq!(disk.read_written(0, 1 << 20), vec![0; 1 << 20]);
        write(&mut disk, (1 << 20) - 512, &[3; 512]);
        assert_eq!(read(&mut disk, (1 << 20) - 512, 512), [3; 512]);
    }

    #[test]
    fn injected_faults() {
        let mut disk = SimDisk::new(options(0));
        disk.fail_next_writes(2);
        for _ in 0..2 {
            let completion = run(&mut disk, DiskOp::Write, 4096, &[1; 4096]);
            assert_eq!(completion.result, Err(DiskError::Io { errno: 5, offset_bytes: 4096 }));
        }
        write(&mut disk, 0, &[1; 4096]);
        assert_eq!(disk.read_written(4096, 4096), [0; 4096]);

        disk.set_no_space(true);
        let completion = run(&mut disk, DiskOp::WriteFlush, 8192, &[1; 4096]);
        assert_eq!(completion.result, Err(DiskError::NoSpace { offset_bytes: 8192 }));
        assert_eq!(read(&mut disk, 0, 4096), [1; 4096]);
        disk.set_no_space(false);

        disk.fail_next_flushes(1);
        assert!(run(&mut disk, DiskOp::Flush, 0, &[]).result.is_err());
        assert_eq!(disk.writes_since_last_flush(), 1);
        flush(&mut disk);
        assert_eq!(disk.writes_since_last_flush(), 0);

        disk.fail_next_reads(1);
        assert!(run(&mut disk, DiskOp::Read, 0, &[0; 4096]).result.is_err());
        disk.set_faults(SimDiskFaults { read_error_probability: 1.0, ..SimDiskFaults::default() });
        assert!(run(&mut disk, DiskOp::Read, 0, &[0; 4096]).result.is_err());
        disk.set_faults(SimDiskFaults { write_error_probability: 0.5, ..SimDiskFaults::default() });
        let failed_count = (0..200).filter(|_| run(&mut disk, DiskOp::Write, 0, &[2; 4096]).result.is_err()).count();
        assert!((50..150).contains(&failed_count), "failed_count={failed_count}");
    }

    #[test]
    fn crash_drops_requests_in_flight() {
        let mut disk = SimDisk::new(options(0));
        submit(&mut disk, 1, DiskOp::Write, 0, &[1; 4096]);
        submit(&mut disk, 2, DiskOp::Write, 4096, &[1; 4096]);
        disk.wait();
        disk.crash();
        assert_eq!(disk.in_flight_count(), 0);
        assert_eq!(drive(&mut disk).len(), 0);
        assert_eq!(disk.read_written(4096, 4096), [0; 4096]);
        assert_eq!(disk.crash_count(), 1);
        write(&mut disk, 4096, &[2; 4096]);
        assert_eq!(read(&mut disk, 4096, 4096), [2; 4096]);
    }

    #[test]
    fn freeze_stops_completions_until_crash() {
        let mut disk = SimDisk::new(options(0));
        disk.freeze_after_completions(2);
        for id in 0..5 {
            submit(&mut disk, id, DiskOp::Write, id * 4096, &[1; 4096]);
        }
        let mut completions = Vec::new();
        disk.reap(&mut completions);
        assert_eq!(completions.len(), 2);
        assert!(disk.is_frozen());
        disk.wait();
        disk.reap(&mut completions);
        assert_eq!(completions.len(), 2);
        assert_eq!(disk.in_flight_count(), 3);
        disk.crash();
        assert!(!disk.is_frozen());
        assert_eq!(disk.in_flight_count(), 0);

        // Crash at every flush index of a workload that writes and flushes three times. Each
        // flush is submitted after its write completed, as an engine would.
        for flush_index in 0..=3 {
            let mut disk = SimDisk::new(options(0));
            disk.freeze_after_flushes(flush_index);
            let mut completions = Vec::new();
            for id in 0..3 {
                for (op, offset_bytes, bytes) in [(DiskOp::Write, id * 4096, &[1; 4096][..]), (DiskOp::Flush, 0, &[])] {
                    submit(&mut disk, id, op, offset_bytes, bytes);
                    disk.wait();
                    disk.reap(&mut completions);
                }
            }
            assert_eq!(completions.len(), usize_from(flush_index * 2).min(6));
            assert_eq!(disk.completed_flush_count(), flush_index.min(3));
            assert!(disk.is_frozen());
            disk.crash();
            for id in 0..3 {
                let survived = disk.read_written(id * 4096, 4096) == [1; 4096];
                assert_eq!(survived, id < flush_index, "flush_index={flush_index} id={id}");
            }
        }

        // Flushes submitted together with the writes, before any completed, cover none of them.
        let mut disk = SimDisk::new(options(0));
        for id in 0..3 {
            submit(&mut disk, id * 2, DiskOp::Write, id * 4096, &[1; 4096]);
            submit(&mut disk, id * 2 + 1, DiskOp::Flush, 0, &[]);
        }
        assert_eq!(drive(&mut disk).len(), 6);
        assert_eq!(disk.writes_since_last_flush(), 3);
    }

    #[test]
    fn reordering_completes_everything() {
        let mut reordered_count = 0;
        for seed in 0..64 {
            let mut disk = SimDisk::new(SimDiskOptions { reorder_completions: true, ..options(seed) });
            for id in 0..100 {
                submit(&mut disk, id, DiskOp::Write, id * 4096, &[1; 4096]);
            }
            let completions = drive(&mut disk);
            let ids: Vec<u64> = completions.iter().map(|completion| completion.id).collect();
            let sorted: BTreeSet<u64> = ids.iter().copied().collect();
            assert_eq!(sorted, (0..100).collect());
            if !ids.is_sorted() {
                reordered_count += 1;
            }
            assert_eq!(disk.read_written(0, 100 * 4096), vec![1; 100 * 4096]);
        }
        assert!(reordered_count > 60);
    }

    /// The results of a workload's completions in reap order, and the image after its last crash.
    type WorkloadOutcome = (Vec<(u64, Result<(), DiskError>)>, Vec<u8>);

    /// A mixed workload with every fault enabled.
    fn workload_outcome(seed: u64) -> WorkloadOutcome {
        let mut disk = SimDisk::new(SimDiskOptions {
            size_bytes: 1 << 20,
            sector_size_bytes: 512,
            seed,
            reorder_completions: true,
            torn_writes: true,
            misdirected_writes: true,
            faults: SimDiskFaults {
                read_error_probability: 0.05,
                write_error_probability: 0.05,
                flush_error_probability: 0.05,
            },
        });
        let mut workload = SmallRng::seed_from_u64(seed);
        let mut completions = Vec::new();
        for id in 0..300 {
            let offset_bytes = workload.gen_range(0..64u64) * 512;
            let bytes = vec![workload.gen(); workload.gen_range(1..8usize) * 512];
            match workload.gen_range(0..10) {
                0 => submit(&mut disk, id, DiskOp::Flush, 0, &[]),
                1 => submit(&mut disk, id, DiskOp::WriteFlush, offset_bytes, &bytes),
                2..=4 => submit(&mut disk, id, DiskOp::Read, offset_bytes, &bytes),
                _ => submit(&mut disk, id, DiskOp::Write, offset_bytes, &bytes),
            }
            if workload.gen_ratio(1, 3) {
                disk.reap(&mut completions);
            }
            if workload.gen_ratio(1, 5) {
                disk.wait();
            }
            if workload.gen_ratio(1, 100) {
                disk.crash();
            }
            disk.assert_images_consistent();
        }
        disk.crash();
        let summary = completions.iter().map(|completion| (completion.id, completion.result.clone()));
        (summary.collect(), disk.read_written(0, 1 << 20))
    }

    #[test]
    fn same_seed_same_outcome() {
        for seed in 0..16 {
            assert_eq!(workload_outcome(seed), workload_outcome(seed));
        }
        assert_ne!(workload_outcome(1), workload_outcome(2));
    }
}
