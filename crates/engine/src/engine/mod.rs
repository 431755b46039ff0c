//! The engine state machine: request admission, group commit, reads, write-back and replay.
//!
//! State, from the drive's point of view:
//! - *written back*: the metadata area plus data blocks, mirrored in RAM by `index` (object ->
//!   block, version) and `block_refs` (who holds each block);
//! - *committed*: journal records that are durable but not yet written back, mirrored by `dirty`
//!   (per object, its journal entries in version order);
//! - *in flight*: sealed records being written, several at once (`records_in_flight`), whose
//!   effect on versions and block reservations later records must see (`sealed_objects`).
//!
//! A write is acknowledged when its journal record and every earlier record are durable
//! (records commit in seq order, see `replay_journal` for why). The write-back job applies the
//! oldest records to the written-back state (data copy, flush, metadata write, flush) and only
//! then moves the journal tail in the superblock, so replay after a crash always starts from a
//! written-back state plus every record that may not be in it. Applying a record whose effect is
//! already written back is recognised by versions (versions only grow, across deletes too) and
//! skipped.
//!
//! *Flush* keeps one meaning here, as everywhere in Basalt: make durable (`DiskOp::Flush`, a
//! client's `Request::Flush`). Moving journaled data to its place is *write-back*.
//!
//! Each part is an `impl` block of `Engine` in a module of its own; this file holds the types
//! they share. `open` formats, opens and replays; `api` is the public interface; `write` admits
//! writes and commits journal records; `read` serves reads; `writeback` is the background job;
//! `space` accounts data blocks and journal space; `event_loop` dispatches disk completions.

mod api;
mod event_loop;
mod open;
mod read;
mod space;
mod write;
mod writeback;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use platform::{AlignedBuffer, Disk, DiskCompletion, DiskError};
use stdx::HashMap;

use crate::changes::ChangeLog;
use crate::index::{Index, IndexEntry};
use crate::layout::{page_crc, Geometry, JournalEntry, MetaEntry, Superblock, PAGE_SIZE_BYTES};
use crate::meta_cache::MetaCache;
use crate::{Completion, EngineError, ObjectId, Request};

const PAGE: u64 = PAGE_SIZE_BYTES as u64;
const PAGE_USIZE: usize = PAGE_SIZE_BYTES as usize;

#[derive(Debug, Clone)]
pub struct FormatOptions {
    pub object_size_bytes: u64,
    /// Defaults to 1/16 of the device, between 16 MiB and 256 MiB.
    pub journal_size_bytes: Option<u64>,
    /// Random per format; journal records carry it (see `Superblock::nonce`).
    pub nonce: u64,
}

#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// RAM for cached metadata pages (checksums); object data is never cached.
    pub meta_cache_bytes: usize,
    /// Journal records (group commits) written at once; writes are acknowledged in record
    /// order. One writes each record only after the previous one is durable.
    pub records_in_flight_max: usize,
    /// While records are in flight, writes that arrived since go in a further record (written
    /// in parallel) once they hold this many bytes (data pages plus entries); until then they
    /// wait for the records in flight to commit and go out together.
    pub record_min_bytes_in_flight: u32,
    /// RAM for journal records the write-back job has not copied yet (their data pages): a
    /// record kept here is copied into place from RAM instead of being read back from the
    /// journal. Reads never use it.
    pub record_data_cache_bytes: usize,
    /// Recent writes whose changed pages are remembered (about 40 bytes each), so a replica
    /// that missed them receives only those pages (`changes.rs`); 0 remembers none.
    pub change_log_writes: usize,
}

impl Default for EngineOptions {
    fn default() -> EngineOptions {
        EngineOptions {
            meta_cache_bytes: 64 << 20,
            records_in_flight_max: 2,
            record_min_bytes_in_flight: 32 << 10,
            record_data_cache_bytes: 32 << 20,
            change_log_writes: 1 << 18,
        }
    }
}

/// Counters of the engine's own work since it was opened, for measurement.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Journal records written, their entries and their bytes (headers and data).
    pub records_written: u64,
    pub record_entries_written: u64,
    pub record_bytes_written: u64,
    /// The most records that were in flight at once.
    pub records_in_flight_peak: u64,
    /// Records whose write completed while an earlier record's had not (they wait for it).
    pub records_completed_out_of_order: u64,
    /// Times writes waited because the journal had no room for another record.
    pub journal_full_waits: u64,
    /// Write-back jobs finished, journaled pages they copied into data blocks, and the writes
    /// that took (adjacent pages share a write).
    pub writeback_jobs: u64,
    pub writeback_pages_copied: u64,
    pub writeback_copy_writes: u64,
    /// Journal bytes the write-back job read back (pages of records no longer held in RAM).
    pub writeback_journal_read_bytes: u64,
    /// Metadata pages the write-back job wrote, and the writes that took (adjacent pages share
    /// one).
    pub writeback_meta_pages_written: u64,
    pub writeback_meta_writes: u64,
    /// Flushes the write-back job issued, its superblock writes included.
    pub writeback_barriers: u64,
    /// Metadata pages read from the drive into the cache (each once, until evicted).
    pub meta_pages_loaded: u64,
}

/// What each in-flight disk request is for.
#[derive(Debug)]
enum Io {
    BigData { write: u64 },
    JournalRecord { seq: u64 },
    ReadRun { read: u64, run: usize },
    MetaLoad { page: u32 },
    WritebackCopyRead { run: usize },
    WritebackCopyWrite,
    WritebackBarrier,
    MetaWrite,
    Superblock,
}

/// A write or delete waiting for, or in, its journal record.
struct PendingEntry {
    write_seq: u64,
    user_data: u64,
    object: ObjectId,
    /// The caller's version; `None`: the engine's next.
    version: Option<u64>,
    kind: PendingKind,
}

impl PendingEntry {
    /// Bytes the entry takes in a record: its data pages and its header entry.
    fn record_bytes(&self, pages_per_object: u32) -> u64 {
        let (pages, crcs) = match &self.kind {
            PendingKind::Small { page_crcs, .. } => (page_crcs.len(), page_crcs.len()),
            PendingKind::Big { .. } => (0, pages_per_object as usize),
            PendingKind::Delete => (0, 0),
        };
        (pages * PAGE_USIZE + JournalEntry::encoded_size_bytes_for(crcs)) as u64
    }
}

enum PendingKind {
    Small {
        offset_pages: u32,
        data: AlignedBuffer,
        page_crcs: Vec<u32>,
    },
    /// Data already written to `block`; the pages in `present` hold data.
    Big {
        block: u32,
        page_crcs: Vec<u32>,
        present: u64,
    },
    Delete,
}

/// A whole-object write while its data goes to a fresh block.
struct BigWrite {
    write_seq: u64,
    user_data: u64,
    object: ObjectId,
    version: Option<u64>,
    block: u32,
    page_crcs: Vec<u32>,
    present: u64,
}

struct QueuedWrite {
    write_seq: u64,
    user_data: u64,
    object: ObjectId,
    version: Option<u64>,
    request: Request,
}

/// One entry of an object's committed history, not yet written back.
#[derive(Debug, Clone)]
struct DirtyEntry {
    record_seq: u64,
    version: u64,
    kind: DirtyKind,
}

#[derive(Debug, Clone)]
enum DirtyKind {
    /// Data at `journal_offset_bytes` (absolute) holding pages `offset_pages..+page_crcs.len()`.
    Small {
        offset_pages: u32,
        journal_offset_bytes: u64,
        page_crcs: Vec<u32>,
    },
    /// The whole object in `block`, of which the pages in `present` hold data.
    Big {
        block: u32,
        page_crcs: Vec<u32>,
        present: u64,
    },
    Delete,
}

#[derive(Default)]
struct DirtyObject {
    entries: Vec<DirtyEntry>,
    /// A free block is promised to this object for when its small writes are written back.
    reserved: bool,
}

struct RecordInfo {
    seq: u64,
    offset_bytes: u64,
    size_bytes: u64,
    objects: Vec<ObjectId>,
    /// The record as written (header and data), kept until it is written back while
    /// `record_data_cache_bytes` allows, so the write-back job copies from RAM instead of
    /// reading the journal back.
    data: Option<AlignedBuffer>,
}

struct SealedEntry {
    write_seq: u64,
    user_data: u64,
    entry: JournalEntry,
    reserves_block: bool,
}

struct RecordInFlight {
    seq: u64,
    header_size_bytes: u32,
    offset_bytes: u64,
    size_bytes: u64,
    entries: Vec<SealedEntry>,
    /// The write's result, once it completed; the record commits when every earlier one has.
    outcome: Option<Result<(), DiskError>>,
    /// The buffer written, back from the disk.
    buffer: Option<AlignedBuffer>,
}

/// What the records in flight do to an object, for sealing further records before they
/// commit: the version to go above and whether the object will own a block.
struct SealedObject {
    version: u64,
    has_block: bool,
    /// The last record in flight with an entry for the object.
    record_seq: u64,
}

#[derive(Debug, Clone, Copy)]
enum PageSource {
    Zero,
    Journal {
        offset_bytes: u64,
        crc: u32,
    },
    /// Page of a data block; the checksum comes from the metadata entry unless given.
    Block {
        block: u32,
        page: u32,
        crc: Option<u32>,
    },
}

struct ReadRun {
    disk_offset_bytes: u64,
    first_page: usize,
    page_count: usize,
}

struct ReadOp {
    user_data: u64,
    object: ObjectId,
    offset_bytes: u32,
    version: u64,
    sources: Vec<PageSource>,
    /// Empty for a read of which pages the object holds (`Request::Pages`): no data is read.
    runs: Vec<ReadRun>,
    /// False for `Request::Pages`.
    wants_data: bool,
    /// The result; disk runs land here directly when there is only one run.
    data: AlignedBuffer,
    ios_pending: usize,
    /// Metadata of the clean block, once known.
    meta_needed: Option<(u32, u32)>,
    meta: Option<Result<Option<MetaEntry>, EngineError>>,
    pinned_blocks: Vec<u32>,
    pinned_record: Option<u64>,
    error: Option<EngineError>,
}

/// The change to the written-back state one object gets from a write-back job.
struct ObjectWriteback {
    object: ObjectId,
    old: Option<IndexEntry>,
    new: Option<NewState>,
    /// Dirty entries of the object that the job consumes (a prefix of its list).
    consumed: usize,
}

struct NewState {
    block: u32,
    version: u64,
    base: StateBase,
    /// Page -> (journal offset, crc) copied into the block by this job.
    updates: BTreeMap<u32, (u64, u32)>,
}

enum StateBase {
    /// Start from the block's current metadata entry.
    Existing,
    /// A freshly allocated block: nothing written.
    Fresh,
    /// A whole-object write with these checksums, of which the pages in the mask hold data.
    Whole(Vec<u32>, u64),
}

#[derive(Debug, Clone, Copy)]
struct CopyPage {
    journal_offset_bytes: u64,
    target_offset_bytes: u64,
}

/// One read of a journal range holding `copy_pages[pages]`.
#[derive(Debug, Clone)]
struct CopyRead {
    journal_offset_bytes: u64,
    length_bytes: u64,
    pages: std::ops::Range<usize>,
}

/// The steps of a write-back job, in this order. Each starts only once every request of the one
/// before has completed (`WritebackJob::enter_phase`): copies are durable before metadata names
/// them, and both before the superblock trims the records they came from.
#[derive(PartialEq, Eq, Debug, Clone, Copy)]
enum WritebackPhase {
    Load,
    Copy,
    Barrier,
    Meta,
    MetaBarrier,
    Superblock,
}

struct WritebackJob {
    phase: WritebackPhase,
    last_seq: u64,
    objects: Vec<ObjectWriteback>,
    freed: Vec<u32>,
    meta_pages: BTreeSet<u32>,
    loads_pending: usize,
    /// Pages to copy from the journal into data blocks, in journal order, those not held in
    /// RAM (see `RecordInfo::data`).
    copy_pages: Vec<CopyPage>,
    /// Every page the job copies into data blocks, from RAM or from the journal.
    copy_page_count: usize,
    copy_reads: Vec<CopyRead>,
    next_copy_read: usize,
    /// Journal reads in flight (each up to `WRITEBACK_READ_SIZE_MAX_BYTES`).
    copy_reads_pending: usize,
    copy_writes: VecDeque<(u64, AlignedBuffer)>,
    ios_pending: usize,
    new_tail: Option<(u64, u64)>,
    /// Reads with a lower id resolved their pages before the job was planned.
    reads_before: u64,
}

pub struct Engine<D: Disk> {
    disk: D,
    superblock: Superblock,
    geometry: Geometry,
    poisoned: Option<String>,

    index: Index,
    dirty: HashMap<ObjectId, DirtyObject>,
    /// Deletes whose records replay could still read (not yet behind both superblock copies'
    /// tails): object -> (version, record seq). A caller-versioned write must exceed such a
    /// delete's version even after the delete is written back, or replay would apply the delete
    /// over the newer write.
    journaled_deletes: HashMap<ObjectId, (u64, u64)>,
    /// Holders of each data block: the index, dirty whole-object writes, writes in their data
    /// phase and reads in flight. Zero means free.
    block_refs: Vec<u16>,
    free_blocks: u32,
    reserved_blocks: u32,
    allocation_cursor: u32,
    last_version: u64,

    next_io_id: u64,
    ios: HashMap<u64, Io>,
    reaped: Vec<DiskCompletion>,
    completions: Vec<Completion>,

    next_write_seq: u64,
    writes_in_flight: BTreeSet<u64>,
    flush_waiters: VecDeque<(u64, u64)>,

    big_writes: HashMap<u64, BigWrite>,
    /// Objects with a whole-object write in its data phase, and the writes queued behind it.
    object_queues: HashMap<ObjectId, VecDeque<QueuedWrite>>,
    pending: VecDeque<PendingEntry>,
    /// Bytes the pending entries would take in a record (data pages plus entries).
    pending_bytes: u64,

    /// Where the next record goes: right after the last one sealed.
    journal_head_bytes: u64,
    next_record_seq: u64,
    /// Every record from the journal tail on, sealed ones in flight included.
    records: VecDeque<RecordInfo>,
    /// Records written and not yet committed, in seq order.
    records_in_flight: VecDeque<RecordInFlight>,
    /// Every record up to this seq is durable and its writes acknowledged.
    committed_seq: u64,
    /// Objects with entries in records in flight.
    sealed_objects: HashMap<ObjectId, SealedObject>,
    /// Set when a record write failed: later records are failed too, since replay stops there.
    journal_failure: Option<String>,
    /// Every record up to this seq is written back.
    written_back_seq: u64,
    journal_pins: BTreeMap<u64, u32>,
    /// Block holds the write-back job gave up, released when the journal tail passes the job's last
    /// record seq (see `release_block_after_trim`).
    blocks_awaiting_trim: VecDeque<(u64, u32)>,
    /// The journal tail recorded in the superblock copy that was not written last. Replay may
    /// start there if the newer copy rots, so journal space and blocks are released only once
    /// both copies have moved past them.
    older_copy_tail_seq: u64,
    /// Bytes of journal records not yet written back.
    writeback_backlog_bytes: u64,
    /// Write everything back now rather than waiting for the journal to fill
    /// (`request_writeback`).
    writeback_requested: bool,
    /// The last attempt to seal a record found no journal space.
    journal_full: bool,

    next_read_id: u64,
    reads: HashMap<u64, ReadOp>,
    meta_cache: MetaCache,
    writeback_job: Option<WritebackJob>,
    records_in_flight_max: usize,
    record_min_bytes_in_flight: u64,
    /// Bytes of `RecordInfo::data` held, and the most allowed.
    record_data_cached_bytes: u64,
    record_data_cache_bytes: u64,
    /// The pages each recent write changed.
    changes: ChangeLog,
    stats: EngineStats,
}

fn invalid(reason: impl Into<String>) -> EngineError {
    EngineError::InvalidArgument { reason: reason.into() }
}

fn page_crcs(data: &[u8]) -> Vec<u32> {
    data.chunks_exact(PAGE_USIZE).map(page_crc).collect()
}
