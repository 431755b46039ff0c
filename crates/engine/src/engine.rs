//! The engine state machine: request admission, group commit, reads, the flusher and replay.
//!
//! State, from the drive's point of view:
//! - *flushed*: the metadata area plus data blocks, mirrored in RAM by `index` (object -> block,
//!   version) and `block_refs` (who holds each block);
//! - *committed*: journal records that are durable but not yet flushed, mirrored by `dirty`
//!   (per object, its journal entries in version order);
//! - *in flight*: sealed records being written, several at once (`records_in_flight`), whose
//!   effect on versions and block reservations later records must see (`sealed_objects`).
//!
//! A write is acknowledged when its journal record and every earlier record are durable
//! (records commit in seq order, see `replay_journal` for why). The flusher applies the oldest
//! records to the flushed state (data copy, flush, metadata write) and only then moves the
//! journal tail in the superblock, so replay after a crash always starts from a flushed state
//! plus every record that may not be in it. Applying a record whose effect is already flushed
//! is recognised by versions (versions only grow, across deletes too) and skipped.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use platform::{AlignedBuffer, Disk, DiskCompletion, DiskError, DiskOp, DiskRequest};

use crate::index::{Index, IndexEntry};
use crate::layout::{
    page_crc, Geometry, JournalEntry, JournalEntryKind, MetaEntry, RecordError, RecordHeader, Superblock,
    SuperblockError, FORMAT_VERSION, PAGE_SIZE_BYTES, SUPERBLOCK_SIZE_BYTES,
};
use crate::meta_cache::{Lookup, MetaCache, Waiter};
use crate::{Completion, EngineError, FormatError, ObjectId, OpenError, Reply, Request, SpaceStats};

const PAGE: u64 = PAGE_SIZE_BYTES as u64;
const PAGE_USIZE: usize = PAGE_SIZE_BYTES as usize;
/// Largest journal record one group commit writes.
const RECORD_SIZE_MAX_BYTES: u64 = 4 << 20;
/// Bounds of one flusher job.
const FLUSH_JOB_RECORDS_MAX: usize = 4096;
/// Flusher copy requests in flight at once: the fewest while at most a quarter of the journal
/// is used (every background write in flight slows the forced-unit-access journal writes that
/// clients wait for), rising linearly to the most at three quarters (so the flusher keeps up
/// with a deep queue of writers before they wait for journal space). See `flush_io_depth`.
const FLUSH_IO_DEPTH_MIN: usize = 4;
const FLUSH_IO_DEPTH_MAX: usize = 128;
/// Journal pages the flusher copies are read in ranges: pages at most this far apart share a
/// read (record headers and pages of superseded writes lie between them).
const FLUSH_READ_GAP_MAX_BYTES: u64 = 128 * 1024;
const FLUSH_READ_SIZE_MAX_BYTES: u64 = 1 << 20;
/// Journal reads of the flusher in flight at once: each feeds hundreds of copy writes, so a
/// few keep the writes busy while bounding the buffers held.
const FLUSH_READS_IN_FLIGHT_MAX: usize = 2;
/// Adjacent metadata pages the flusher writes with one request.
const META_WRITE_PAGES_MAX: usize = 64;

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
    /// RAM for journal records the flusher has not copied yet (their data pages): a record
    /// kept here is copied into place from RAM instead of being read back from the journal.
    /// Reads never use it.
    pub record_data_cache_bytes: usize,
}

impl Default for EngineOptions {
    fn default() -> EngineOptions {
        EngineOptions {
            meta_cache_bytes: 64 << 20,
            records_in_flight_max: 2,
            record_min_bytes_in_flight: 32 << 10,
            record_data_cache_bytes: 32 << 20,
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
    /// Flusher jobs finished, journaled pages they copied into data blocks, and the writes
    /// that took (adjacent pages share a write).
    pub flusher_jobs: u64,
    pub flusher_pages_copied: u64,
    pub flusher_copy_writes: u64,
    /// Journal bytes the flusher read back (pages of records no longer held in RAM).
    pub flusher_journal_read_bytes: u64,
    /// Metadata pages the flusher wrote, and the writes that took (adjacent pages share one).
    pub flusher_meta_pages_written: u64,
    pub flusher_meta_writes: u64,
    /// Flushes the flusher issued, its superblock writes included.
    pub flusher_barriers: u64,
}

/// What each in-flight disk request is for.
#[derive(Debug)]
enum Io {
    BigData { write: u64 },
    JournalRecord { seq: u64 },
    ReadRun { read: u64, run: usize },
    MetaLoad { page: u32 },
    FlushCopyRead { run: usize },
    FlushCopyWrite,
    FlushBarrier,
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
    /// Data already written to `block`.
    Big {
        block: u32,
        page_crcs: Vec<u32>,
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
}

struct QueuedWrite {
    write_seq: u64,
    user_data: u64,
    object: ObjectId,
    version: Option<u64>,
    request: Request,
}

/// One entry of an object's committed, unflushed history.
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
    Big {
        block: u32,
        page_crcs: Vec<u32>,
    },
    Delete,
}

#[derive(Default)]
struct DirtyObject {
    entries: Vec<DirtyEntry>,
    /// A free block is promised to this object for when its small writes are flushed.
    reserved: bool,
}

struct RecordInfo {
    seq: u64,
    offset_bytes: u64,
    size_bytes: u64,
    objects: Vec<ObjectId>,
    /// The record as written (header and data), kept until it is flushed while
    /// `record_data_cache_bytes` allows, so the flusher copies from RAM instead of reading the
    /// journal back.
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
    runs: Vec<ReadRun>,
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

/// The flushed-state change one object gets from a flusher job.
struct ObjectFlush {
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
    /// A whole-object write with these checksums.
    Whole(Vec<u32>),
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

#[derive(PartialEq, Eq, Debug, Clone, Copy)]
enum FlushPhase {
    Load,
    Copy,
    Barrier,
    Meta,
    MetaBarrier,
    Superblock,
}

struct FlushJob {
    phase: FlushPhase,
    last_seq: u64,
    objects: Vec<ObjectFlush>,
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
    /// Journal reads in flight (each up to `FLUSH_READ_SIZE_MAX_BYTES`).
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
    /// delete's version even after the delete is flushed, or replay would apply the delete
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
    flushed_seq: u64,
    journal_pins: BTreeMap<u64, u32>,
    /// Block holds the flusher gave up, released when the journal tail passes the job's last
    /// record seq (see `release_block_after_trim`).
    blocks_awaiting_trim: VecDeque<(u64, u32)>,
    /// The journal tail recorded in the superblock copy that was not written last. Replay may
    /// start there if the newer copy rots, so journal space and blocks are released only once
    /// both copies have moved past them.
    older_copy_tail_seq: u64,
    /// Bytes of journal records not yet flushed.
    unflushed_bytes: u64,
    /// Flush everything now rather than waiting for the journal to fill (`request_flush`).
    flush_requested: bool,
    /// The last attempt to seal a record found no journal space.
    journal_full: bool,

    next_read_id: u64,
    reads: HashMap<u64, ReadOp>,
    meta_cache: MetaCache,
    flush_job: Option<FlushJob>,
    records_in_flight_max: usize,
    record_min_bytes_in_flight: u64,
    /// Bytes of `RecordInfo::data` held, and the most allowed.
    record_data_cached_bytes: u64,
    record_data_cache_bytes: u64,
    stats: EngineStats,
}

fn invalid(reason: impl Into<String>) -> EngineError {
    EngineError::InvalidArgument { reason: reason.into() }
}

fn page_crcs(data: &[u8]) -> Vec<u32> {
    data.chunks_exact(PAGE_USIZE).map(page_crc).collect()
}

impl<D: Disk> Engine<D> {
    // -----------------------------------------------------------------------------------------
    // Format and open.

    /// Writes a new, empty engine onto `disk`, destroying what it held.
    pub fn format(mut disk: D, options: &FormatOptions) -> Result<D, FormatError> {
        let geometry = Geometry::compute(disk.size_bytes(), options.object_size_bytes, options.journal_size_bytes)?;
        // Free metadata entries are zeros.
        let chunk_bytes = 1u64 << 20;
        let zeros = AlignedBuffer::zeroed(chunk_bytes as usize);
        let mut offset = geometry.meta_offset_bytes;
        while offset < geometry.data_offset_bytes {
            let len = chunk_bytes.min(geometry.data_offset_bytes - offset);
            let buffer = if len == chunk_bytes { zeros.clone() } else { AlignedBuffer::zeroed(len as usize) };
            sync_io(&mut disk, DiskOp::Write, offset, buffer)?;
            offset += len;
        }
        // The first journal page is zeroed so no record of an earlier format is mistaken for
        // the first one (the nonce protects the rest).
        sync_io(&mut disk, DiskOp::Write, geometry.journal_offset_bytes, AlignedBuffer::zeroed(PAGE_USIZE))?;
        let superblock = Superblock {
            format_version: FORMAT_VERSION,
            geometry,
            generation: 1,
            nonce: options.nonce,
            osd_id: 0,
            journal_tail_offset_bytes: geometry.journal_offset_bytes,
            journal_tail_seq: 1,
            version_floor: 0,
        };
        // Both copies start equal; later writes alternate, so one valid copy always survives.
        let encoded = AlignedBuffer::from_slice(&superblock.encode());
        sync_io(&mut disk, DiskOp::Write, SUPERBLOCK_SIZE_BYTES, encoded.clone())?;
        sync_io(&mut disk, DiskOp::WriteFlush, 0, encoded)?;
        Ok(disk)
    }

    /// Records `osd_id` as the owner of the engine on `disk` (closed), in both superblock
    /// copies, the newer first: a crash in between leaves the newer copy, which `open` uses,
    /// already naming the owner, or (if that write tore) the old state with no owner.
    pub fn set_osd_id(disk: &mut D, osd_id: u64) -> Result<Superblock, OpenError> {
        Self::probe(disk)?;
        let mut copies = Vec::new();
        for slot in 0..2 {
            if let Ok(copy) = read_superblock(disk, slot * SUPERBLOCK_SIZE_BYTES)? {
                copies.push((slot, copy));
            }
        }
        copies.sort_by_key(|(_, copy)| std::cmp::Reverse(copy.generation));
        for (slot, copy) in &mut copies {
            copy.osd_id = osd_id;
            // Harmless before the journal is replayed: this build reads version 1 records.
            copy.format_version = FORMAT_VERSION;
            let encoded = AlignedBuffer::from_slice(&copy.encode());
            sync_io(disk, DiskOp::WriteFlush, *slot * SUPERBLOCK_SIZE_BYTES, encoded)?;
        }
        Self::probe(disk)
    }

    /// Reads only the superblock: what `open` would find, without replaying anything.
    pub fn probe(disk: &mut D) -> Result<Superblock, OpenError> {
        let first = read_superblock(disk, 0)?;
        let second = read_superblock(disk, SUPERBLOCK_SIZE_BYTES)?;
        // A copy of another format version has a valid checksum: software of that version
        // wrote it, so the older copy of this version may be stale. Refuse rather than use it.
        for copy in [&first, &second] {
            if let Err(error @ SuperblockError::Version { .. }) = copy {
                return Err(OpenError::Superblock(error.clone()));
            }
        }
        match (first, second) {
            (Ok(a), Ok(b)) => Ok(if a.generation >= b.generation { a } else { b }),
            (Ok(a), Err(_)) => Ok(a),
            (Err(_), Ok(b)) => Ok(b),
            (Err(SuperblockError::NotBasalt), Err(SuperblockError::NotBasalt)) => {
                Err(SuperblockError::NotBasalt.into())
            }
            (Err(first), Err(second)) => Err(OpenError::SuperblocksDamaged { first, second }),
        }
    }

    /// Opens an engine: rebuilds the index from the metadata area and replays the journal.
    pub fn open(mut disk: D, options: &EngineOptions) -> Result<Engine<D>, OpenError> {
        let superblock = Self::probe(&mut disk)?;
        let geometry = superblock.geometry;
        if disk.size_bytes() < geometry.device_size_bytes {
            return Err(OpenError::DeviceShrunk {
                expected_bytes: geometry.device_size_bytes,
                actual_bytes: disk.size_bytes(),
            });
        }
        let block_count = geometry.block_count as usize;
        let mut engine = Engine {
            disk,
            superblock: superblock.clone(),
            geometry,
            poisoned: None,
            index: Index::default(),
            dirty: HashMap::new(),
            block_refs: vec![0; block_count],
            free_blocks: geometry.block_count,
            reserved_blocks: 0,
            allocation_cursor: 0,
            last_version: 0,
            journaled_deletes: HashMap::new(),
            next_io_id: 1,
            ios: HashMap::new(),
            reaped: Vec::new(),
            completions: Vec::new(),
            next_write_seq: 1,
            writes_in_flight: BTreeSet::new(),
            flush_waiters: VecDeque::new(),
            big_writes: HashMap::new(),
            object_queues: HashMap::new(),
            pending: VecDeque::new(),
            pending_bytes: 0,
            journal_head_bytes: superblock.journal_tail_offset_bytes,
            next_record_seq: superblock.journal_tail_seq,
            records: VecDeque::new(),
            records_in_flight: VecDeque::new(),
            committed_seq: superblock.journal_tail_seq - 1,
            sealed_objects: HashMap::new(),
            journal_failure: None,
            flushed_seq: superblock.journal_tail_seq - 1,
            journal_pins: BTreeMap::new(),
            blocks_awaiting_trim: VecDeque::new(),
            older_copy_tail_seq: superblock.journal_tail_seq,
            unflushed_bytes: 0,
            flush_requested: false,
            journal_full: false,
            next_read_id: 1,
            reads: HashMap::new(),
            meta_cache: MetaCache::new(options.meta_cache_bytes / PAGE_USIZE),
            flush_job: None,
            records_in_flight_max: options.records_in_flight_max.max(1),
            record_min_bytes_in_flight: u64::from(options.record_min_bytes_in_flight),
            record_data_cached_bytes: 0,
            record_data_cache_bytes: options.record_data_cache_bytes as u64,
            stats: EngineStats::default(),
        };
        // Versions of deletes that were flushed and trimmed survive only in the superblock.
        engine.last_version = superblock.version_floor;
        engine.load_metadata()?;
        engine.replay_journal()?;
        // Bring the other superblock copy to the same tail, so both copies name records that
        // are still in the journal (the older copy may name a tail whose space is about to be
        // reused). When it already names it, opening writes nothing.
        let other_copy = (engine.superblock.generation + 1) % 2;
        let other = read_superblock(&mut engine.disk, other_copy * SUPERBLOCK_SIZE_BYTES)?;
        let other_agrees = other.as_ref().is_ok_and(|other| {
            other.journal_tail_seq == engine.superblock.journal_tail_seq
                && other.journal_tail_offset_bytes == engine.superblock.journal_tail_offset_bytes
                && other.format_version == FORMAT_VERSION
        });
        if other_agrees && engine.superblock.format_version == FORMAT_VERSION {
            return Ok(engine);
        }
        // A version 1 engine gets both copies rewritten at this build's version before it
        // writes a record that version 1 could misread (see `FORMAT_VERSION`).
        let copies_to_write = if engine.superblock.format_version == FORMAT_VERSION { 1 } else { 2 };
        for _ in 0..copies_to_write {
            let mut superblock = engine.superblock.clone();
            superblock.format_version = FORMAT_VERSION;
            superblock.generation += 1;
            superblock.version_floor = superblock.version_floor.max(engine.last_version);
            let copy = superblock.generation % 2;
            sync_io(
                &mut engine.disk,
                DiskOp::WriteFlush,
                copy * SUPERBLOCK_SIZE_BYTES,
                AlignedBuffer::from_slice(&superblock.encode()),
            )?;
            engine.superblock = superblock;
        }
        Ok(engine)
    }

    /// Scans the metadata area into the index. Two entries for one object (a crash between
    /// writing the new block's entry and clearing the old one) keep the newer; the stale one is
    /// cleared on disk before the engine serves.
    fn load_metadata(&mut self) -> Result<(), OpenError> {
        let g = self.geometry;
        let entry_size = g.meta_entry_size_bytes as usize;
        let chunk_bytes = 4u64 << 20;
        let mut stale_blocks = Vec::new();
        let mut offset = g.meta_offset_bytes;
        let meta_end = g.meta_offset_bytes + u64::from(g.block_count) * u64::from(g.meta_entry_size_bytes);
        while offset < meta_end {
            let len = chunk_bytes.min(g.data_offset_bytes - offset);
            let buffer = sync_io(&mut self.disk, DiskOp::Read, offset, AlignedBuffer::zeroed(len as usize))?;
            let first_block = ((offset - g.meta_offset_bytes) / entry_size as u64) as u32;
            for (index, slot) in buffer.chunks_exact(entry_size).enumerate() {
                let block = first_block + index as u32;
                if block >= g.block_count {
                    break;
                }
                let entry = MetaEntry::decode(slot, g.pages_per_object()).map_err(|_| OpenError::MetaCorrupt {
                    block,
                    offset_bytes: offset + (index * entry_size) as u64,
                })?;
                let Some(entry) = entry else { continue };
                self.last_version = self.last_version.max(entry.version);
                let new = IndexEntry { block, version: entry.version };
                match self.index.get(entry.object) {
                    Some(existing) if existing.version >= entry.version => stale_blocks.push(block),
                    existing => {
                        if let Some(existing) = existing {
                            stale_blocks.push(existing.block);
                            self.release_block(existing.block);
                        }
                        self.index.insert(entry.object, new);
                        self.hold_block(block);
                    }
                }
            }
            offset += len;
        }
        for block in stale_blocks {
            let (page, at) = g.meta_location(block);
            let mut bytes = sync_io(
                &mut self.disk,
                DiskOp::Read,
                g.meta_page_offset_bytes(page),
                AlignedBuffer::zeroed(PAGE_USIZE),
            )?;
            MetaEntry::encode(None, &mut bytes[at..at + entry_size]);
            sync_io(&mut self.disk, DiskOp::Write, g.meta_page_offset_bytes(page), bytes)?;
        }
        sync_io(&mut self.disk, DiskOp::Flush, 0, AlignedBuffer::empty())?;
        Ok(())
    }

    /// Replays journal records from the superblock's tail.
    ///
    /// Records are written several at a time, and each is sealed with `durable_seq`: every
    /// record up to that seq was durable, and its writes acknowledged, when it was sealed.
    /// Writes are acknowledged in record order, so a crash leaves a durable, acknowledged prefix
    /// followed by the records that were in flight, each of them missing, torn or whole.
    /// Replay follows the chain from the tail (each record starts right after the previous one,
    /// or at the ring's start when it did not fit) to the first seq, `end`, it cannot read
    /// whole, then reads every record header in the journal and decides:
    ///
    /// | what is found                                          | meaning                          | action              |
    /// |--------------------------------------------------------|----------------------------------|---------------------|
    /// | a valid header (in the chain or after it) whose        | record `end` was durable and     | fail open:          |
    /// | `durable_seq >= end`                                   | acknowledged, then damaged       | `JournalCorrupt`    |
    /// | no such header                                         | `end` was in flight at the crash,| drop `end` and every|
    /// |                                                        | so no later record was           | later record        |
    /// |                                                        | acknowledged                     | (torn tail)         |
    /// | a chain record above every `durable_seq` seen names a  | in flight at the crash: its      | drop it and every   |
    /// | data block whose pages fail the entry's checksums      | header landed, the block did not | later record        |
    ///
    /// The dropped records and every header with seq `end` or above are then erased (first
    /// page zeroed, then flushed) before the engine writes anything. New records reuse those
    /// seqs and journal space; a stale record left behind could later be taken for a new
    /// record's successor, or for proof that a reused seq was durable.
    ///
    /// Rot cannot be told from a crash in the records no later header proves durable (the last
    /// `records_in_flight_max` records at most): damage there drops them like a torn tail.
    fn replay_journal(&mut self) -> Result<(), OpenError> {
        let g = self.geometry;
        let tail_seq = self.superblock.journal_tail_seq;
        let mut position = self.superblock.journal_tail_offset_bytes;
        let mut seq = tail_seq;
        let mut chain: Vec<(u64, RecordHeader)> = Vec::new();
        let broken = loop {
            let mut candidates = vec![position];
            if position != g.journal_offset_bytes {
                candidates.push(g.journal_offset_bytes);
            }
            let mut found = None;
            let mut broken = None;
            for candidate in candidates {
                if candidate + PAGE > g.journal_end_bytes() {
                    continue;
                }
                match self.read_record(candidate, seq)? {
                    RecordRead::Valid(header) => {
                        found = Some((candidate, header));
                        break;
                    }
                    RecordRead::Absent => {}
                    RecordRead::Broken(reason) => broken = broken.or(Some((candidate, reason))),
                }
            }
            let Some((offset, header)) = found else { break broken };
            let size = u64::from(header.header_size_bytes) + u64::from(header.data_size_bytes);
            chain.push((offset, header));
            position = offset + size;
            seq += 1;
            if position >= g.journal_end_bytes() {
                position = g.journal_offset_bytes;
            }
        };
        let end_seq = seq;
        let headers = self.scan_journal_headers(end_seq)?;
        let proven_seq = chain
            .iter()
            .map(|(_, header)| header.durable_seq)
            .chain(headers.iter().filter_map(|seen| seen.durable_seq))
            .fold(tail_seq - 1, u64::max);
        if proven_seq >= end_seq {
            // A record sealed after `end` was durable says so: `end` was acknowledged, and it
            // (or, when nothing is found where it must start, its first bytes) rotted. Stopping
            // here would silently drop it and every acknowledged record after it.
            let (offset_bytes, reason) =
                broken.unwrap_or_else(|| (position, "no record header where the record must start".into()));
            return Err(OpenError::JournalCorrupt { seq: end_seq, offset_bytes, reason });
        }
        let mut kept = chain.len();
        while let Some(cut) = self.first_record_not_landed(&chain[..kept], proven_seq)? {
            kept = cut;
        }
        let mut erase: Vec<u64> = chain[kept..]
            .iter()
            .map(|(offset, _)| *offset)
            .chain(headers.iter().map(|seen| seen.offset_bytes))
            .collect();
        erase.sort_unstable();
        erase.dedup();
        for &offset in &erase {
            sync_io(&mut self.disk, DiskOp::Write, offset, AlignedBuffer::zeroed(PAGE_USIZE))?;
        }
        if !erase.is_empty() {
            sync_io(&mut self.disk, DiskOp::Flush, 0, AlignedBuffer::empty())?;
        }
        chain.truncate(kept);
        let (head, next_seq) = match chain.last() {
            Some((offset, header)) => {
                let end = offset + u64::from(header.header_size_bytes) + u64::from(header.data_size_bytes);
                (if end >= g.journal_end_bytes() { g.journal_offset_bytes } else { end }, header.seq + 1)
            }
            None => (self.superblock.journal_tail_offset_bytes, tail_seq),
        };
        for (offset, header) in &chain {
            self.apply_replayed_record(*offset, header);
        }
        self.journal_head_bytes = head;
        self.next_record_seq = next_seq;
        self.committed_seq = next_seq - 1;
        Ok(())
    }

    /// The first record of `chain` that may have been in flight at the crash (above
    /// `proven_seq`) and names a data block that does not hold what its whole-object write
    /// says: the record's header landed, the data did not, so it was never acknowledged.
    ///
    /// A record's write is submitted only after its data blocks are written, and it is durable
    /// only once they are, so a record no later header proves durable is checked. Pages that a
    /// later small write of the object (in the record or after it) covers are not checked: the
    /// flusher may have copied that write into the block in place. A block that a later
    /// whole-object write or delete supersedes is never read again, so it is not checked
    /// either; if that later record is dropped, the caller asks again without it.
    fn first_record_not_landed(
        &mut self,
        chain: &[(u64, RecordHeader)],
        proven_seq: u64,
    ) -> Result<Option<usize>, OpenError> {
        let g = self.geometry;
        let pages = g.pages_per_object() as usize;
        for (index, (_, header)) in chain.iter().enumerate() {
            if header.seq <= proven_seq {
                continue;
            }
            for (at, entry) in header.entries.iter().enumerate() {
                let JournalEntryKind::Big { block } = entry.kind else { continue };
                if self.index.get(entry.object).is_some_and(|clean| clean.version >= entry.version) {
                    continue; // Already flushed.
                }
                let mut checked = vec![true; pages];
                let mut superseded = false;
                let later_entries = header.entries[at + 1..]
                    .iter()
                    .chain(chain[index + 1..].iter().flat_map(|(_, later)| &later.entries));
                for later in later_entries.filter(|later| later.object == entry.object) {
                    match later.kind {
                        JournalEntryKind::Small { offset_pages, .. } => {
                            let first = offset_pages as usize;
                            checked[first..first + later.page_crcs.len()].fill(false);
                        }
                        JournalEntryKind::Big { .. } | JournalEntryKind::Delete => {
                            superseded = true;
                            break;
                        }
                    }
                }
                if superseded {
                    continue;
                }
                let bytes = sync_io(
                    &mut self.disk,
                    DiskOp::Read,
                    g.block_offset_bytes(block),
                    AlignedBuffer::zeroed(pages * PAGE_USIZE),
                )?;
                let landed = bytes
                    .chunks_exact(PAGE_USIZE)
                    .zip(&entry.page_crcs)
                    .zip(&checked)
                    .all(|((page, crc), checked)| !checked || page_crc(page) == *crc);
                if !landed {
                    return Ok(Some(index));
                }
            }
        }
        Ok(None)
    }

    fn read_record(&mut self, offset: u64, seq: u64) -> Result<RecordRead, OpenError> {
        let g = self.geometry;
        let nonce = self.superblock.nonce;
        let first = sync_io(&mut self.disk, DiskOp::Read, offset, AlignedBuffer::zeroed(PAGE_USIZE))?;
        let (found_seq, header_size, data_size) = match RecordHeader::peek(&first, nonce) {
            Ok(fixed) => fixed,
            Err(_) => return Ok(RecordRead::Absent),
        };
        if found_seq != seq {
            // A stale record of an earlier lap, or bytes of one. A later seq here would mean
            // lost records, which the scan below reports.
            return Ok(if found_seq > seq {
                RecordRead::Broken(format!("found seq {found_seq}"))
            } else {
                RecordRead::Absent
            });
        }
        let total = u64::from(header_size) + u64::from(data_size);
        if header_size == 0
            || u64::from(header_size) % PAGE != 0
            || u64::from(data_size) % PAGE != 0
            || offset + total > g.journal_end_bytes()
        {
            return Ok(RecordRead::Broken("record size out of range".into()));
        }
        let whole = if total as usize == PAGE_USIZE {
            first
        } else {
            sync_io(&mut self.disk, DiskOp::Read, offset, AlignedBuffer::zeroed(total as usize))?
        };
        let header = match RecordHeader::decode(&whole, nonce, g.pages_per_object()) {
            Ok(header) => header,
            Err(RecordError::Absent) => return Ok(RecordRead::Absent),
            Err(error) => return Ok(RecordRead::Broken(error.to_string())),
        };
        let data = &whole[header_size as usize..];
        for entry in &header.entries {
            match entry.kind {
                JournalEntryKind::Small { data_offset_pages, .. } => {
                    for (index, crc) in entry.page_crcs.iter().enumerate() {
                        let at = (data_offset_pages as usize + index) * PAGE_USIZE;
                        if page_crc(&data[at..at + PAGE_USIZE]) != *crc {
                            return Ok(RecordRead::Broken(format!(
                                "data page of object {} fails its checksum",
                                entry.object
                            )));
                        }
                    }
                }
                JournalEntryKind::Big { block } => {
                    if block >= g.block_count {
                        return Ok(RecordRead::Broken(format!("block {block} out of range")));
                    }
                    // The block's data is not checked here: only the last record's may be
                    // missing (see `whole_object_data_landed`), and an earlier record's block
                    // may since have taken later small writes in place. Rot is caught when
                    // the pages are read, as for any data block.
                }
                JournalEntryKind::Delete => {}
            }
        }
        Ok(RecordRead::Valid(header))
    }

    /// Every record header in the journal with seq `from_seq` or above (magic and nonce
    /// match), with the `durable_seq` of those above `from_seq` whose header is whole.
    fn scan_journal_headers(&mut self, from_seq: u64) -> Result<Vec<HeaderSeen>, OpenError> {
        let g = self.geometry;
        let nonce = self.superblock.nonce;
        let chunk_bytes = 4u64 << 20;
        let mut seen = Vec::new();
        let mut offset = g.journal_offset_bytes;
        while offset < g.journal_end_bytes() {
            let len = chunk_bytes.min(g.journal_end_bytes() - offset);
            let bytes = sync_io(&mut self.disk, DiskOp::Read, offset, AlignedBuffer::zeroed(len as usize))?;
            for (index, page) in bytes.chunks_exact(PAGE_USIZE).enumerate() {
                let Ok((seq, _, _)) = RecordHeader::peek(page, nonce) else { continue };
                if seq < from_seq {
                    continue;
                }
                seen.push(HeaderSeen { offset_bytes: offset + (index * PAGE_USIZE) as u64, seq, durable_seq: None });
            }
            offset += len;
        }
        for header in &mut seen {
            if header.seq == from_seq {
                continue;
            }
            let first = sync_io(&mut self.disk, DiskOp::Read, header.offset_bytes, AlignedBuffer::zeroed(PAGE_USIZE))?;
            let Ok((_, header_size, _)) = RecordHeader::peek(&first, nonce) else { continue };
            let header_size = u64::from(header_size);
            if header_size == 0 || header_size % PAGE != 0 || header.offset_bytes + header_size > g.journal_end_bytes()
            {
                continue;
            }
            let whole = if header_size == PAGE {
                first
            } else {
                sync_io(&mut self.disk, DiskOp::Read, header.offset_bytes, AlignedBuffer::zeroed(header_size as usize))?
            };
            if let Ok(decoded) = RecordHeader::decode(&whole, nonce, g.pages_per_object()) {
                header.durable_seq = Some(decoded.durable_seq);
            }
        }
        Ok(seen)
    }

    fn apply_replayed_record(&mut self, offset_bytes: u64, header: &RecordHeader) {
        let data_offset_bytes = offset_bytes + u64::from(header.header_size_bytes);
        let mut objects = Vec::new();
        for entry in &header.entries {
            self.last_version = self.last_version.max(entry.version);
            if self.index.get(entry.object).is_some_and(|clean| clean.version >= entry.version) {
                continue; // Already flushed.
            }
            let reserves_block = matches!(entry.kind, JournalEntryKind::Small { .. })
                && !self.object_has_block(entry.object)
                && !self.dirty.get(&entry.object).is_some_and(|dirty| dirty.reserved);
            if reserves_block {
                self.reserved_blocks += 1;
            }
            if let JournalEntryKind::Big { block } = entry.kind {
                self.hold_block(block);
            }
            self.commit_entry(header.seq, data_offset_bytes, entry, reserves_block);
            objects.push(entry.object);
        }
        objects.sort_unstable();
        objects.dedup();
        let size_bytes = u64::from(header.header_size_bytes) + u64::from(header.data_size_bytes);
        self.unflushed_bytes += size_bytes;
        self.records.push_back(RecordInfo { seq: header.seq, offset_bytes, size_bytes, objects, data: None });
    }

    // -----------------------------------------------------------------------------------------
    // Public API.

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub fn superblock(&self) -> &Superblock {
        &self.superblock
    }

    pub fn object_size_bytes(&self) -> u32 {
        self.geometry.object_size_bytes
    }

    pub fn disk(&self) -> &D {
        &self.disk
    }

    /// Stops the engine and returns its disk (in-flight work is abandoned, as in a crash).
    pub fn into_disk(self) -> D {
        self.disk
    }

    /// Every object with its version: flushed ones from the index, overlaid by journaled ones.
    pub fn list_objects(&self) -> Vec<(ObjectId, u64)> {
        let mut objects: BTreeMap<ObjectId, Option<u64>> =
            self.index.iter().map(|(object, entry)| (object, Some(entry.version))).collect();
        for (object, dirty) in &self.dirty {
            let Some(last) = dirty.entries.last() else { continue };
            let exists = !matches!(last.kind, DirtyKind::Delete);
            objects.insert(*object, exists.then_some(last.version));
        }
        objects.into_iter().filter_map(|(object, version)| Some((object, version?))).collect()
    }

    /// How many objects exist, as `list_objects` would count them, without listing: the index
    /// corrected by the objects the journal wrote or deleted since (RAM only, no allocation, so
    /// a status request does not stall the OSD's thread on a large engine).
    fn object_count(&self) -> u64 {
        let mut count = self.index.len() as i64;
        for (object, dirty) in &self.dirty {
            let Some(last) = dirty.entries.last() else { continue };
            let exists = !matches!(last.kind, DirtyKind::Delete);
            count += i64::from(exists) - i64::from(self.index.get(*object).is_some());
        }
        count as u64
    }

    /// The newest version of `object` the engine knows: its last write, or a delete that replay
    /// could still read. A caller minting versions (a PG primary) must go above it.
    pub fn object_version(&self, object: ObjectId) -> Option<u64> {
        self.known_version(object)
    }

    /// Whether `object` exists now (written and not deleted since), as reads see it. Cheap:
    /// RAM only.
    pub fn object_exists(&self, object: ObjectId) -> bool {
        match self.dirty.get(&object).and_then(|dirty| dirty.entries.last()) {
            Some(entry) => !matches!(entry.kind, DirtyKind::Delete),
            None => self.index.get(object).is_some(),
        }
    }

    fn known_version(&self, object: ObjectId) -> Option<u64> {
        let dirty = self.dirty.get(&object).and_then(|dirty| dirty.entries.last()).map(|entry| entry.version);
        let clean = self.index.get(object).map(|entry| entry.version);
        let deleted = self.journaled_deletes.get(&object).map(|&(version, _)| version);
        [dirty, clean, deleted].into_iter().flatten().max()
    }

    pub fn space(&self) -> SpaceStats {
        let object_size = u64::from(self.geometry.object_size_bytes);
        let block_count = u64::from(self.geometry.block_count);
        let available = u64::from(self.free_blocks.saturating_sub(self.reserved_blocks));
        SpaceStats {
            total_bytes: block_count * object_size,
            // Blocks promised to journaled writes count as used: they are spoken for.
            used_bytes: (block_count - available) * object_size,
            free_bytes: available * object_size,
            journal_total_bytes: self.geometry.journal_size_bytes,
            journal_used_bytes: self.journal_used_bytes(),
            object_count: self.object_count(),
        }
    }

    /// Heap bytes of the per-object index (the RAM budget's subject).
    pub fn index_memory_bytes(&self) -> usize {
        self.index.memory_bytes() + self.block_refs.capacity() * size_of::<u16>()
    }

    /// Counters of the engine's work since it was opened.
    pub fn stats(&self) -> EngineStats {
        self.stats
    }

    /// Journal records written and not yet committed.
    pub fn records_in_flight(&self) -> usize {
        self.records_in_flight.len()
    }

    pub fn poisoned(&self) -> Option<&str> {
        self.poisoned.as_deref()
    }

    /// True when nothing is in flight or queued, the flusher included.
    pub fn is_idle(&self) -> bool {
        self.ios.is_empty()
            && self.pending.is_empty()
            && self.completions.is_empty()
            && self.flush_job.is_none()
            && self.reads.is_empty()
            && !self.flusher_has_work()
    }

    /// True when no journal record awaits the flusher.
    pub fn is_flushed(&self) -> bool {
        self.records.is_empty()
    }

    pub fn submit(&mut self, user_data: u64, request: Request) {
        match request {
            Request::Read { object, offset_bytes, length_bytes } => {
                if let Err(error) = self.check_range(offset_bytes, length_bytes) {
                    return self.complete(user_data, Err(error));
                }
                self.start_read(user_data, object, offset_bytes, length_bytes);
            }
            Request::Flush => {
                let upto = self.next_write_seq;
                self.flush_waiters.push_back((upto, user_data));
                self.complete_flush_waiters();
            }
            Request::Write { offset_bytes, ref data, .. } => {
                let length = u32::try_from(data.len()).unwrap_or(u32::MAX);
                if let Err(error) = self.check_range(offset_bytes, length) {
                    return self.complete(user_data, Err(error));
                }
                self.admit_write(user_data, request, None);
            }
            Request::Delete { .. } => self.admit_write(user_data, request, None),
            Request::WriteVersioned { object, offset_bytes, data, version } => {
                let length = u32::try_from(data.len()).unwrap_or(u32::MAX);
                if let Err(error) = self.check_range(offset_bytes, length) {
                    return self.complete(user_data, Err(error));
                }
                self.admit_write(user_data, Request::Write { object, offset_bytes, data }, Some(version));
            }
            Request::DeleteVersioned { object, version } => {
                self.admit_write(user_data, Request::Delete { object }, Some(version))
            }
        }
    }

    /// Moves finished work into `out`. Never blocks.
    pub fn poll(&mut self, out: &mut Vec<Completion>) {
        loop {
            self.disk.reap(&mut self.reaped);
            if self.reaped.is_empty() {
                break;
            }
            let reaped = std::mem::take(&mut self.reaped);
            for completion in reaped {
                self.on_disk_completion(completion);
            }
            self.advance();
        }
        self.advance();
        self.disk.reap(&mut self.reaped);
        let reaped = std::mem::take(&mut self.reaped);
        for completion in reaped {
            self.on_disk_completion(completion);
        }
        out.append(&mut self.completions);
    }

    /// Hands the disk requests queued so far to the device, without reaping. Reads go to the
    /// disk as they are submitted; writes wait in the open journal record until `poll` seals
    /// it. A caller that issues requests one at a time as earlier ones complete calls this
    /// after each, so the device keeps working while the caller goes through a batch of
    /// completions; one that submits in batches leaves it to `poll`.
    pub fn push(&mut self) {
        self.disk.push();
    }

    /// Blocks until the disk has something to report, unless completions are already waiting.
    pub fn wait(&mut self) {
        if self.completions.is_empty() {
            self.disk.wait();
        }
    }

    /// Submits one request and drives the engine until it completes. For tools and tests;
    /// servers use `submit`/`poll` to keep many requests in flight.
    pub fn execute(&mut self, request: Request) -> Result<Reply, EngineError> {
        const TAG: u64 = u64::MAX;
        self.submit(TAG, request);
        let mut out = Vec::new();
        loop {
            self.poll(&mut out);
            if let Some(at) = out.iter().position(|completion| completion.user_data == TAG) {
                let completion = out.swap_remove(at);
                assert!(out.is_empty(), "execute() used while other requests are in flight");
                return completion.result;
            }
            self.wait();
        }
    }

    /// Asks the flusher to empty the journal now instead of waiting until a good share of it
    /// is used (call when idle, before a clean shutdown, or to make `open` fast).
    pub fn request_flush(&mut self) {
        self.flush_requested = true;
    }

    /// Drives the engine until the flusher has emptied the journal (tests, clean shutdown).
    pub fn flush_journal(&mut self) {
        self.request_flush();
        let mut out = Vec::new();
        while !self.is_idle() && self.poisoned.is_none() {
            self.poll(&mut out);
            if self.is_idle() {
                break;
            }
            self.wait();
        }
        self.flush_requested = false;
        assert!(out.is_empty(), "flush_journal() used while requests are in flight");
    }

    // -----------------------------------------------------------------------------------------
    // Helpers.

    fn check_range(&self, offset_bytes: u32, length_bytes: u32) -> Result<(), EngineError> {
        let object_size = self.geometry.object_size_bytes;
        if !offset_bytes.is_multiple_of(PAGE_SIZE_BYTES) || !length_bytes.is_multiple_of(PAGE_SIZE_BYTES) {
            return Err(invalid(format!(
                "offset_bytes={offset_bytes} length_bytes={length_bytes} are not multiples of {PAGE_SIZE_BYTES}"
            )));
        }
        if length_bytes == 0 {
            return Err(invalid("length_bytes=0"));
        }
        if u64::from(offset_bytes) + u64::from(length_bytes) > u64::from(object_size) {
            return Err(EngineError::OutOfRange {
                offset_bytes: u64::from(offset_bytes),
                length_bytes: u64::from(length_bytes),
                object_size_bytes: object_size,
            });
        }
        Ok(())
    }

    fn complete(&mut self, user_data: u64, result: Result<Reply, EngineError>) {
        self.completions.push(Completion { user_data, result });
    }

    fn submit_io(&mut self, io: Io, op: DiskOp, offset_bytes: u64, buffer: AlignedBuffer) {
        if matches!(io, Io::FlushBarrier | Io::Superblock) {
            self.stats.flusher_barriers += 1;
        }
        let id = self.next_io_id;
        self.next_io_id += 1;
        self.ios.insert(id, io);
        self.disk.submit(DiskRequest { id, op, offset_bytes, buffer });
    }

    fn poison(&mut self, reason: String) {
        if self.poisoned.is_none() {
            self.poisoned = Some(reason);
        }
        let reason = self.poisoned.clone().expect("set above");
        let pending: Vec<PendingEntry> = self.pending.drain(..).collect();
        self.pending_bytes = 0;
        for entry in pending {
            self.writes_in_flight.remove(&entry.write_seq);
            if let PendingKind::Big { block, .. } = entry.kind {
                self.release_block(block);
            }
            self.complete(entry.user_data, Err(EngineError::Poisoned { reason: reason.clone() }));
        }
        let queues: Vec<QueuedWrite> = self.object_queues.values_mut().flat_map(|queue| queue.drain(..)).collect();
        for queued in queues {
            self.writes_in_flight.remove(&queued.write_seq);
            self.complete(queued.user_data, Err(EngineError::Poisoned { reason: reason.clone() }));
        }
        self.complete_flush_waiters();
    }

    fn hold_block(&mut self, block: u32) {
        let refs = &mut self.block_refs[block as usize];
        if *refs == 0 {
            self.free_blocks -= 1;
        }
        *refs = refs.checked_add(1).expect("block reference count overflow");
    }

    /// Releases a hold the flusher gave up in the job that flushed records up to `last_seq`,
    /// once the superblock's tail has moved past them.
    ///
    /// Until then replay after a crash starts at or before those records and applies them
    /// again (their effect is recognised as flushed only while the object's metadata entry is
    /// newer, not after a delete). If the block were reused meanwhile, a replayed whole-object
    /// write would name a block that now holds another object's data, and flushing it again
    /// would clear that object's metadata entry.
    fn release_block_after_trim(&mut self, last_seq: u64, block: u32) {
        assert!(self.blocks_awaiting_trim.back().is_none_or(|&(seq, _)| seq <= last_seq));
        self.blocks_awaiting_trim.push_back((last_seq, block));
    }

    fn release_block(&mut self, block: u32) {
        let refs = &mut self.block_refs[block as usize];
        assert!(*refs > 0, "block {block} released while free");
        *refs -= 1;
        if *refs == 0 {
            self.free_blocks += 1;
        }
    }

    /// Takes a free block, or `None` when every free block is promised.
    fn allocate_block(&mut self, use_reservation: bool) -> Option<u32> {
        if use_reservation {
            assert!(self.reserved_blocks > 0);
            self.reserved_blocks -= 1;
        } else if self.free_blocks <= self.reserved_blocks {
            return None;
        }
        assert!(self.free_blocks > 0);
        let count = self.geometry.block_count;
        let mut block = self.allocation_cursor;
        loop {
            if self.block_refs[block as usize] == 0 {
                break;
            }
            block += 1;
            if block == count {
                block = 0;
            }
            assert_ne!(block, self.allocation_cursor, "free block count is wrong");
        }
        self.allocation_cursor = if block + 1 == count { 0 } else { block + 1 };
        self.hold_block(block);
        Some(block)
    }

    /// Whether the object will own a block once everything committed for it is flushed.
    ///
    /// Small writes after the last delete (or on an object that has no block) hold the
    /// object's reservation, or, once a flusher job has planned them, the block the job
    /// allocated from it; either way the object will own a block, and a further small write
    /// must not reserve another one (nothing would ever consume it).
    fn object_has_block(&self, object: ObjectId) -> bool {
        if let Some(dirty) = self.dirty.get(&object) {
            let mut small_after = false;
            for entry in dirty.entries.iter().rev() {
                match entry.kind {
                    DirtyKind::Big { .. } => return true,
                    DirtyKind::Delete => return small_after,
                    DirtyKind::Small { .. } => small_after = true,
                }
            }
            if small_after {
                return true;
            }
        }
        self.index.get(object).is_some()
    }

    fn journal_used_bytes(&self) -> u64 {
        let g = self.geometry;
        let Some(first) = self.records.front() else { return 0 };
        let tail = first.offset_bytes;
        let head = self.journal_head_bytes;
        if head > tail {
            head - tail
        } else {
            g.journal_size_bytes - (tail - head)
        }
    }

    /// Where a record of `size` bytes can go now, if anywhere.
    fn journal_place(&self, size: u64) -> Option<u64> {
        let g = self.geometry;
        let head = self.journal_head_bytes;
        let Some(first) = self.records.front() else {
            if head + size <= g.journal_end_bytes() {
                return Some(head);
            }
            return (g.journal_offset_bytes + size <= g.journal_end_bytes()).then_some(g.journal_offset_bytes);
        };
        let tail = first.offset_bytes;
        if head > tail {
            if head + size <= g.journal_end_bytes() {
                return Some(head);
            }
            (g.journal_offset_bytes + size <= tail).then_some(g.journal_offset_bytes)
        } else {
            (head + size <= tail).then_some(head)
        }
    }

    fn complete_flush_waiters(&mut self) {
        let oldest = self.writes_in_flight.first().copied().unwrap_or(u64::MAX);
        while let Some(&(upto, user_data)) = self.flush_waiters.front() {
            if upto > oldest {
                break;
            }
            self.flush_waiters.pop_front();
            self.complete(user_data, Ok(Reply::Flushed));
        }
    }

    fn finish_write(&mut self, write_seq: u64, user_data: u64, result: Result<Reply, EngineError>) {
        let removed = self.writes_in_flight.remove(&write_seq);
        assert!(removed);
        self.complete(user_data, result);
        self.complete_flush_waiters();
    }

    // -----------------------------------------------------------------------------------------
    // Writes.

    fn admit_write(&mut self, user_data: u64, request: Request, version: Option<u64>) {
        let object = match &request {
            Request::Write { object, .. } | Request::Delete { object } => *object,
            _ => unreachable!(),
        };
        if let Some(reason) = &self.poisoned {
            let reason = reason.clone();
            return self.complete(user_data, Err(EngineError::Poisoned { reason }));
        }
        let write_seq = self.next_write_seq;
        self.next_write_seq += 1;
        self.writes_in_flight.insert(write_seq);
        let queued = QueuedWrite { write_seq, user_data, object, version, request };
        if let Some(queue) = self.object_queues.get_mut(&object) {
            queue.push_back(queued);
        } else {
            self.start_write(queued);
        }
    }

    /// Starts a write whose object has nothing queued ahead of it.
    fn start_write(&mut self, queued: QueuedWrite) {
        let QueuedWrite { write_seq, user_data, object, version, request } = queued;
        let kind = match request {
            Request::Delete { .. } => PendingKind::Delete,
            Request::Write { offset_bytes, data, .. } => {
                let page_crcs = page_crcs(&data);
                let whole = offset_bytes == 0 && data.len() == self.geometry.object_size_bytes as usize;
                // A whole-object write goes to a fresh block when one is free; otherwise through
                // the journal, which needs no new block when the object already has one.
                if whole {
                    if let Some(block) = self.allocate_block(false) {
                        self.object_queues.insert(object, VecDeque::new());
                        self.big_writes
                            .insert(write_seq, BigWrite { write_seq, user_data, object, version, block, page_crcs });
                        let offset = self.geometry.block_offset_bytes(block);
                        self.submit_io(Io::BigData { write: write_seq }, DiskOp::Write, offset, data);
                        return;
                    }
                }
                PendingKind::Small { offset_pages: offset_bytes / PAGE_SIZE_BYTES, data, page_crcs }
            }
            _ => unreachable!(),
        };
        self.push_pending(PendingEntry { write_seq, user_data, object, version, kind });
    }

    fn on_big_data(&mut self, write_seq: u64, result: Result<(), DiskError>) {
        let big = self.big_writes.remove(&write_seq).expect("big write in flight");
        match result {
            Ok(()) => self.push_pending(PendingEntry {
                write_seq,
                user_data: big.user_data,
                object: big.object,
                version: big.version,
                kind: PendingKind::Big { block: big.block, page_crcs: big.page_crcs },
            }),
            Err(error) => {
                // Nothing references the block; the engine stays consistent.
                self.release_block(big.block);
                let error = match error {
                    DiskError::NoSpace { .. } => EngineError::NoSpace { object: big.object },
                    other => EngineError::Disk(other),
                };
                self.finish_write(big.write_seq, big.user_data, Err(error));
            }
        }
        self.release_object_queue(big.object);
    }

    /// Starts writes queued behind a finished whole-object write, up to the next one.
    fn release_object_queue(&mut self, object: ObjectId) {
        let mut queue = self.object_queues.remove(&object).expect("object queue");
        while let Some(queued) = queue.pop_front() {
            if self.poisoned.is_some() {
                let reason = self.poisoned.clone().unwrap_or_default();
                self.finish_write(queued.write_seq, queued.user_data, Err(EngineError::Poisoned { reason }));
                continue;
            }
            self.start_write(queued);
            if let Some(new_queue) = self.object_queues.get_mut(&object) {
                // Another whole-object write entered its data phase; the rest waits for it.
                new_queue.extend(queue.drain(..));
                return;
            }
        }
    }

    /// Seals pending entries into journal records (group commit), several in flight at once.
    ///
    /// With no record in flight, everything pending goes at once in one record (a lone write
    /// waits for nothing, and a burst shares one write and one flush). While records are in
    /// flight, writes that arrived since wait for them to commit, unless they already fill
    /// `record_min_bytes_in_flight`: then they go in a record of their own, written in
    /// parallel. A burst is never split over several records: on the drives measured, one
    /// large forced-unit-access write completes as fast as several small ones, and each record
    /// costs a flush (ADR 0009).
    fn seal_records(&mut self) {
        while self.poisoned.is_none() && !self.pending.is_empty() {
            let in_flight = self.records_in_flight.len();
            if in_flight >= self.records_in_flight_max {
                return;
            }
            if in_flight > 0 && self.pending_bytes < self.record_min_bytes_in_flight {
                return;
            }
            if !self.seal_record() {
                return;
            }
        }
    }

    fn push_pending(&mut self, entry: PendingEntry) {
        self.pending_bytes += entry.record_bytes(self.geometry.pages_per_object());
        self.pending.push_back(entry);
    }

    fn pop_pending(&mut self) -> Option<PendingEntry> {
        let entry = self.pending.pop_front()?;
        self.pending_bytes -= entry.record_bytes(self.geometry.pages_per_object());
        Some(entry)
    }

    /// The version `object` must go above and whether it will own a block, counting records
    /// in flight.
    fn sealed_version(&self, object: ObjectId) -> Option<u64> {
        match self.sealed_objects.get(&object) {
            Some(sealed) => Some(sealed.version),
            None => self.known_version(object),
        }
    }

    fn sealed_has_block(&self, object: ObjectId) -> bool {
        match self.sealed_objects.get(&object) {
            Some(sealed) => sealed.has_block,
            None => self.object_has_block(object),
        }
    }

    /// Seals the pending entries (as many as the record size limit and the journal space
    /// allow) into one record and submits its write. Returns whether a record was written.
    fn seal_record(&mut self) -> bool {
        let pages_per_object = self.geometry.pages_per_object();
        let seq = self.next_record_seq;
        let mut entries: Vec<SealedEntry> = Vec::new();
        let mut data_pages: u32 = 0;
        let mut journal_entries: Vec<JournalEntry> = Vec::new();
        // Header bytes of `journal_entries`, kept as they grow rather than summed again.
        let mut entry_bytes = 0;
        let mut datas: Vec<AlignedBuffer> = Vec::new();
        let limit = RECORD_SIZE_MAX_BYTES.min(self.geometry.journal_size_bytes / 4);
        while let Some(front) = self.pending.front() {
            let (entry_pages, crc_count) = match &front.kind {
                PendingKind::Small { page_crcs, .. } => (page_crcs.len() as u32, page_crcs.len()),
                PendingKind::Big { .. } => (0, pages_per_object as usize),
                PendingKind::Delete => (0, 0),
            };
            let with_entry_bytes = entry_bytes + JournalEntry::encoded_size_bytes_for(crc_count);
            let size = u64::from(RecordHeader::size_bytes_for_entry_bytes(with_entry_bytes))
                + u64::from(data_pages + entry_pages) * PAGE;
            if size > limit || self.journal_place(size).is_none() {
                break;
            }
            let pending = self.pop_pending().expect("front exists");
            let object = pending.object;
            let version = match pending.version {
                None => self.last_version + 1,
                Some(version) => {
                    if let Some(current) = self.sealed_version(object).filter(|&current| current >= version) {
                        if let PendingKind::Big { block, .. } = pending.kind {
                            self.release_block(block);
                        }
                        let error = EngineError::StaleVersion { object, version, current };
                        self.finish_write(pending.write_seq, pending.user_data, Err(error));
                        continue;
                    }
                    version
                }
            };
            // Small writes after a delete (or on an object without a block) reserve the block
            // the flusher will give the object; a delete sealed earlier (in this record or one
            // in flight) releases the old reservation only when it commits, which happens first.
            let has_block = self.sealed_has_block(object);
            let (kind, crcs, reserves_block, has_block) = match pending.kind {
                PendingKind::Small { offset_pages, data, page_crcs } => {
                    let mut reserves_block = false;
                    if !has_block {
                        if self.free_blocks <= self.reserved_blocks {
                            self.finish_write(
                                pending.write_seq,
                                pending.user_data,
                                Err(EngineError::NoSpace { object }),
                            );
                            continue;
                        }
                        self.reserved_blocks += 1;
                        reserves_block = true;
                    }
                    let kind = JournalEntryKind::Small { offset_pages, data_offset_pages: data_pages };
                    data_pages += entry_pages;
                    datas.push(data);
                    (kind, page_crcs, reserves_block, true)
                }
                PendingKind::Big { block, page_crcs } => (JournalEntryKind::Big { block }, page_crcs, false, true),
                PendingKind::Delete => (JournalEntryKind::Delete, Vec::new(), false, false),
            };
            self.sealed_objects.insert(object, SealedObject { version, has_block, record_seq: seq });
            self.last_version = self.last_version.max(version);
            let entry = JournalEntry { object, version, kind, page_crcs: crcs };
            entry_bytes += JournalEntry::encoded_size_bytes_for(entry.page_crcs.len());
            journal_entries.push(entry.clone());
            entries.push(SealedEntry {
                write_seq: pending.write_seq,
                user_data: pending.user_data,
                entry,
                reserves_block,
            });
        }
        // Backpressure: with no room for even one entry, writers wait for the flusher to trim.
        self.journal_full = entries.is_empty() && !self.pending.is_empty();
        if self.journal_full {
            self.stats.journal_full_waits += 1;
        }
        if entries.is_empty() {
            return false;
        }
        let header_size = RecordHeader::size_bytes_for(&journal_entries);
        let size = u64::from(header_size) + u64::from(data_pages) * PAGE;
        let offset = self.journal_place(size).expect("space was checked");
        assert!(self.committed_seq < seq);
        let header = RecordHeader {
            seq,
            nonce: self.superblock.nonce,
            durable_seq: self.committed_seq,
            header_size_bytes: header_size,
            data_size_bytes: data_pages * PAGE_SIZE_BYTES,
            entries: journal_entries,
        };
        let mut buffer = AlignedBuffer::zeroed(size as usize);
        header.encode(&mut buffer);
        let mut at = header_size as usize;
        for data in &datas {
            buffer[at..at + data.len()].copy_from_slice(data);
            at += data.len();
        }
        let mut objects: Vec<ObjectId> = entries.iter().map(|sealed| sealed.entry.object).collect();
        objects.sort_unstable();
        objects.dedup();
        debug_assert!(self.records.back().is_none_or(|last| last.seq + 1 == seq), "records hold consecutive seqs");
        self.records.push_back(RecordInfo { seq, offset_bytes: offset, size_bytes: size, objects, data: None });
        self.journal_head_bytes = offset + size;
        self.next_record_seq = seq + 1;
        // A record of small writes and deletes needs only itself durable. One naming whole-object
        // writes also needs their data blocks durable, which only a flush covers.
        let has_whole_object_write =
            entries.iter().any(|sealed| matches!(sealed.entry.kind, JournalEntryKind::Big { .. }));
        self.stats.records_written += 1;
        self.stats.record_entries_written += entries.len() as u64;
        self.stats.record_bytes_written += size;
        self.records_in_flight.push_back(RecordInFlight {
            seq,
            header_size_bytes: header_size,
            offset_bytes: offset,
            size_bytes: size,
            entries,
            outcome: None,
            buffer: None,
        });
        self.stats.records_in_flight_peak = self.stats.records_in_flight_peak.max(self.records_in_flight.len() as u64);
        let op = if has_whole_object_write { DiskOp::WriteFlush } else { DiskOp::WriteFua };
        self.submit_io(Io::JournalRecord { seq }, op, offset, buffer);
        true
    }

    fn on_record_written(&mut self, seq: u64, buffer: AlignedBuffer, result: Result<(), DiskError>) {
        let first_seq = self.records_in_flight.front().expect("record in flight").seq;
        let record = &mut self.records_in_flight[(seq - first_seq) as usize];
        assert_eq!(record.seq, seq);
        assert!(record.outcome.is_none());
        record.outcome = Some(result);
        record.buffer = Some(buffer);
        if seq != first_seq {
            self.stats.records_completed_out_of_order += 1;
        }
        self.commit_records();
    }

    /// Commits finished records in seq order: a record's writes are acknowledged only when it
    /// and every earlier record are durable, because replay stops at the first record missing.
    fn commit_records(&mut self) {
        while self.records_in_flight.front().is_some_and(|record| record.outcome.is_some()) {
            let mut record = self.records_in_flight.pop_front().expect("checked");
            for sealed in &record.entries {
                let object = sealed.entry.object;
                if self.sealed_objects.get(&object).is_some_and(|sealed| sealed.record_seq == record.seq) {
                    self.sealed_objects.remove(&object);
                }
            }
            match record.outcome.take().expect("checked") {
                Ok(()) if self.journal_failure.is_none() => self.commit_record(record),
                outcome => {
                    // What reached the disk is unknown, and replay stops at the first record
                    // missing: stop taking writes until a restart replays.
                    let reason = match outcome {
                        Err(error) => format!("journal write at offset_bytes={} failed: {error}", record.offset_bytes),
                        Ok(()) => self.journal_failure.clone().expect("an earlier record failed"),
                    };
                    self.journal_failure.get_or_insert_with(|| reason.clone());
                    for sealed in record.entries {
                        if sealed.reserves_block {
                            self.reserved_blocks -= 1;
                        }
                        if let JournalEntryKind::Big { block } = sealed.entry.kind {
                            self.release_block(block);
                        }
                        self.finish_write(
                            sealed.write_seq,
                            sealed.user_data,
                            Err(EngineError::Poisoned { reason: reason.clone() }),
                        );
                    }
                    self.poison(reason);
                }
            }
        }
    }

    fn commit_record(&mut self, mut record: RecordInFlight) {
        assert_eq!(record.seq, self.committed_seq + 1);
        self.committed_seq = record.seq;
        if let Some(buffer) = record.buffer.take() {
            if self.record_data_cached_bytes + record.size_bytes <= self.record_data_cache_bytes {
                let first_seq = self.records.front().expect("the record is listed").seq;
                let info = &mut self.records[(record.seq - first_seq) as usize];
                assert_eq!(info.seq, record.seq);
                assert_eq!(buffer.len() as u64, info.size_bytes);
                self.record_data_cached_bytes += info.size_bytes;
                info.data = Some(buffer);
            }
        }
        let data_offset = record.offset_bytes + u64::from(record.header_size_bytes);
        for sealed in record.entries {
            self.commit_entry(record.seq, data_offset, &sealed.entry, sealed.reserves_block);
            let reply = match sealed.entry.kind {
                JournalEntryKind::Delete => Reply::Deleted { version: sealed.entry.version },
                _ => Reply::Written { version: sealed.entry.version },
            };
            self.finish_write(sealed.write_seq, sealed.user_data, Ok(reply));
        }
        self.unflushed_bytes += record.size_bytes;
    }

    /// Adds a durable journal entry to its object's committed history.
    fn commit_entry(&mut self, record_seq: u64, data_offset_bytes: u64, entry: &JournalEntry, reserves_block: bool) {
        let kind = match entry.kind {
            JournalEntryKind::Small { offset_pages, data_offset_pages } => DirtyKind::Small {
                offset_pages,
                journal_offset_bytes: data_offset_bytes + u64::from(data_offset_pages) * PAGE,
                page_crcs: entry.page_crcs.clone(),
            },
            JournalEntryKind::Big { block } => DirtyKind::Big { block, page_crcs: entry.page_crcs.clone() },
            JournalEntryKind::Delete => DirtyKind::Delete,
        };
        let releases_reservation = !matches!(kind, DirtyKind::Small { .. });
        let dirty = self.dirty.entry(entry.object).or_default();
        if let Some(last) = dirty.entries.last() {
            assert!(last.version < entry.version);
        }
        if matches!(kind, DirtyKind::Delete) {
            self.journaled_deletes.insert(entry.object, (entry.version, record_seq));
        }
        let dirty = self.dirty.entry(entry.object).or_default();
        dirty.entries.push(DirtyEntry { record_seq, version: entry.version, kind });
        if reserves_block {
            assert!(!dirty.reserved);
            dirty.reserved = true;
        }
        if releases_reservation && dirty.reserved {
            dirty.reserved = false;
            self.reserved_blocks -= 1;
        }
    }

    // -----------------------------------------------------------------------------------------
    // Reads.

    fn start_read(&mut self, user_data: u64, object: ObjectId, offset_bytes: u32, length_bytes: u32) {
        let first_page = offset_bytes / PAGE_SIZE_BYTES;
        let page_count = (length_bytes / PAGE_SIZE_BYTES) as usize;
        // Resolve each page to where its newest committed data lives.
        let clean = self.index.get(object);
        let mut version = clean.map_or(0, |clean| clean.version);
        let mut base: Option<(u32, Option<&[u32]>)> = clean.map(|clean| (clean.block, None));
        let mut sources = vec![PageSource::Zero; page_count];
        let mut from_base = vec![true; page_count];
        if let Some(dirty) = self.dirty.get(&object) {
            for entry in &dirty.entries {
                version = entry.version;
                match &entry.kind {
                    DirtyKind::Big { block, page_crcs } => {
                        base = Some((*block, Some(page_crcs)));
                        from_base.fill(true);
                    }
                    DirtyKind::Delete => {
                        base = None;
                        from_base.fill(true);
                    }
                    DirtyKind::Small { offset_pages, journal_offset_bytes, page_crcs } => {
                        for (index, crc) in page_crcs.iter().enumerate() {
                            let page = offset_pages + index as u32;
                            if page < first_page || page >= first_page + page_count as u32 {
                                continue;
                            }
                            let at = (page - first_page) as usize;
                            from_base[at] = false;
                            sources[at] = PageSource::Journal {
                                offset_bytes: journal_offset_bytes + index as u64 * PAGE,
                                crc: *crc,
                            };
                        }
                    }
                }
            }
        }
        let mut meta_needed = None;
        for (at, source) in sources.iter_mut().enumerate() {
            if !from_base[at] {
                continue;
            }
            *source = match base {
                None => PageSource::Zero,
                Some((block, crcs)) => {
                    let page = first_page + at as u32;
                    let crc = crcs.map(|crcs| crcs[page as usize]);
                    if crc.is_none() {
                        meta_needed = Some(self.geometry.meta_location(block).0).map(|page| (block, page));
                    }
                    PageSource::Block { block, page, crc }
                }
            };
        }
        // Journal pages must not be overwritten while this read is in flight: the object's oldest
        // record (no newer than any record the read uses) holds the journal tail.
        let pinned_record = sources
            .iter()
            .any(|source| matches!(source, PageSource::Journal { .. }))
            .then(|| self.dirty[&object].entries[0].record_seq);
        // Group pages into disk runs.
        let g = self.geometry;
        let mut runs: Vec<ReadRun> = Vec::new();
        let mut pinned_blocks = Vec::new();
        for (at, source) in sources.iter().enumerate() {
            let disk_offset = match *source {
                PageSource::Zero => continue,
                PageSource::Journal { offset_bytes, .. } => offset_bytes,
                PageSource::Block { block, page, .. } => {
                    if pinned_blocks.last() != Some(&block) && !pinned_blocks.contains(&block) {
                        pinned_blocks.push(block);
                    }
                    g.block_offset_bytes(block) + u64::from(page) * PAGE
                }
            };
            if let Some(run) = runs.last_mut() {
                if run.first_page + run.page_count == at
                    && run.disk_offset_bytes + run.page_count as u64 * PAGE == disk_offset
                {
                    run.page_count += 1;
                    continue;
                }
            }
            runs.push(ReadRun { disk_offset_bytes: disk_offset, first_page: at, page_count: 1 });
        }
        for &block in &pinned_blocks {
            self.hold_block(block);
        }
        if let Some(seq) = pinned_record {
            *self.journal_pins.entry(seq).or_default() += 1;
        }
        let read_id = self.next_read_id;
        self.next_read_id += 1;
        let mut read = ReadOp {
            user_data,
            object,
            offset_bytes,
            version,
            sources,
            runs,
            data: AlignedBuffer::zeroed(length_bytes as usize),
            ios_pending: 0,
            meta_needed,
            meta: None,
            pinned_blocks,
            pinned_record,
            error: None,
        };
        if let Some((block, page)) = meta_needed {
            match self.meta_cache.lookup(page, Waiter::Read(read_id)) {
                Lookup::Hit(bytes) => read.meta = Some(decode_meta_slot(&g, bytes, block, object)),
                Lookup::Pending => read.ios_pending += 1,
                Lookup::StartLoad => {
                    read.ios_pending += 1;
                    self.submit_io(
                        Io::MetaLoad { page },
                        DiskOp::Read,
                        g.meta_page_offset_bytes(page),
                        AlignedBuffer::zeroed(PAGE_USIZE),
                    );
                }
            }
        }
        // One run covering the whole request reads straight into the result buffer; otherwise
        // each run gets its own buffer, copied in on completion.
        let single = read.runs.len() == 1 && read.runs[0].page_count == page_count;
        let run_requests: Vec<(usize, u64, usize)> =
            read.runs.iter().enumerate().map(|(index, run)| (index, run.disk_offset_bytes, run.page_count)).collect();
        read.ios_pending += run_requests.len();
        let mut whole = single.then(|| std::mem::replace(&mut read.data, AlignedBuffer::empty()));
        self.reads.insert(read_id, read);
        for (run, offset, pages) in run_requests {
            let buffer = whole.take().unwrap_or_else(|| AlignedBuffer::zeroed(pages * PAGE_USIZE));
            self.submit_io(Io::ReadRun { read: read_id, run }, DiskOp::Read, offset, buffer);
        }
        self.try_finish_read(read_id);
    }

    fn on_read_run(&mut self, read_id: u64, run: usize, buffer: AlignedBuffer, result: Result<(), DiskError>) {
        let read = self.reads.get_mut(&read_id).expect("read in flight");
        read.ios_pending -= 1;
        match result {
            Err(error) => {
                read.error.get_or_insert(EngineError::Disk(error));
            }
            Ok(()) => {
                let run = &read.runs[run];
                if read.data.is_empty() {
                    read.data = buffer;
                } else {
                    let at = run.first_page * PAGE_USIZE;
                    read.data[at..at + buffer.len()].copy_from_slice(&buffer);
                }
            }
        }
        self.try_finish_read(read_id);
    }

    fn try_finish_read(&mut self, read_id: u64) {
        let read = &self.reads[&read_id];
        if read.ios_pending > 0 {
            return;
        }
        let mut read = self.reads.remove(&read_id).expect("read");
        for block in std::mem::take(&mut read.pinned_blocks) {
            self.release_block(block);
        }
        if let Some(seq) = read.pinned_record {
            let pins = self.journal_pins.get_mut(&seq).expect("journal pin");
            *pins -= 1;
            if *pins == 0 {
                self.journal_pins.remove(&seq);
            }
        }
        let result = self.verify_read(&mut read);
        self.complete(read.user_data, result);
    }

    /// Checks every page against its checksum; unwritten pages become zeros.
    fn verify_read(&self, read: &mut ReadOp) -> Result<Reply, EngineError> {
        if let Some(error) = read.error.take() {
            return Err(error);
        }
        let meta = match read.meta.take() {
            Some(Ok(meta)) => meta,
            Some(Err(error)) => return Err(error),
            None => None,
        };
        if let (Some((block, _)), None) = (read.meta_needed, &meta) {
            // The index names a block whose entry is free: the index and disk disagree.
            return Err(EngineError::MetaCorrupt { object: read.object, block });
        }
        for (at, source) in read.sources.iter().enumerate() {
            let page = &mut read.data[at * PAGE_USIZE..(at + 1) * PAGE_USIZE];
            let expected = match *source {
                PageSource::Zero => {
                    page.fill(0);
                    continue;
                }
                PageSource::Journal { crc, .. } => crc,
                PageSource::Block { crc: Some(crc), .. } => crc,
                PageSource::Block { page: index, crc: None, .. } => {
                    let meta = meta.as_ref().expect("metadata present");
                    if meta.page_bitmap & (1 << index) == 0 {
                        page.fill(0);
                        continue;
                    }
                    meta.page_crcs[index as usize]
                }
            };
            if page_crc(page) != expected {
                return Err(EngineError::Corrupt {
                    object: read.object,
                    offset_bytes: u64::from(read.offset_bytes) + at as u64 * PAGE,
                });
            }
        }
        Ok(Reply::Read { version: read.version, data: std::mem::replace(&mut read.data, AlignedBuffer::empty()) })
    }

    fn on_meta_load(&mut self, page: u32, buffer: AlignedBuffer, result: Result<(), DiskError>) {
        let waiters = match result {
            Ok(()) => self.meta_cache.loaded(page, buffer.as_slice().into()),
            Err(_) => self.meta_cache.load_failed(page),
        };
        let g = self.geometry;
        for waiter in waiters {
            match waiter {
                Waiter::Read(read_id) => {
                    let read = self.reads.get_mut(&read_id).expect("read waiting for metadata");
                    read.ios_pending -= 1;
                    let (block, _) = read.meta_needed.expect("read needs metadata");
                    read.meta = Some(match &result {
                        Ok(()) => decode_meta_slot(&g, &buffer, block, read.object),
                        Err(error) => Err(EngineError::Disk(error.clone())),
                    });
                    self.try_finish_read(read_id);
                }
                Waiter::Flusher => {
                    if let Err(error) = &result {
                        self.poison(format!("metadata read of page {page} failed: {error}"));
                    }
                    let job = self.flush_job.as_mut().expect("flusher waits");
                    job.loads_pending -= 1;
                }
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // The flusher.

    fn flusher_has_work(&self) -> bool {
        let unflushed = self.committed_seq > self.flushed_seq;
        let tail_seq = self.superblock.journal_tail_seq;
        let trimmable = self.next_tail().1 != tail_seq || self.older_copy_tail_seq != tail_seq;
        unflushed || trimmable
    }

    /// The tail the superblock could name now: the oldest record that is unflushed or still
    /// read by a read in flight, or the head when there is none.
    fn next_tail(&self) -> (u64, u64) {
        let oldest_pinned = self.journal_pins.keys().next().copied().unwrap_or(u64::MAX);
        let first_kept_seq = (self.flushed_seq + 1).min(oldest_pinned);
        // `records` holds consecutive seqs, so the record is found by index (this runs on
        // every poll; a scan showed in profiles with a long journal).
        let index = self.records.front().map_or(0, |front| first_kept_seq.saturating_sub(front.seq) as usize);
        match self.records.get(index) {
            Some(record) => {
                debug_assert!(record.seq >= first_kept_seq);
                (record.offset_bytes, record.seq)
            }
            None => (self.journal_head_bytes_after_records(), self.next_record_seq),
        }
    }

    /// Whether a flusher job should start now. Flushing lazily, once an eighth of the journal
    /// holds unflushed records, makes jobs large: their flushes and metadata writes are shared
    /// by thousands of writes instead of a few, and a page overwritten meanwhile is copied once.
    fn flusher_should_start(&self) -> bool {
        if self.flush_job.is_some() || self.poisoned.is_some() || !self.flusher_has_work() {
            return false;
        }
        let journal_size = self.geometry.journal_size_bytes;
        self.flush_requested
            || self.journal_full
            || self.unflushed_bytes >= journal_size / 8
            || self.journal_used_bytes() >= journal_size / 2
    }

    fn maybe_start_flush_job(&mut self) {
        if self.flush_requested && !self.flusher_has_work() {
            self.flush_requested = false;
        }
        if !self.flusher_should_start() {
            return;
        }
        let job_bytes_max = self.geometry.journal_size_bytes / 4;
        let mut job_bytes = 0;
        let records: Vec<(u64, Vec<ObjectId>)> = self
            .records
            .iter()
            .filter(|record| record.seq > self.flushed_seq && record.seq <= self.committed_seq)
            .take(FLUSH_JOB_RECORDS_MAX)
            .take_while(|record| {
                let take = job_bytes == 0 || job_bytes + record.size_bytes <= job_bytes_max;
                job_bytes += record.size_bytes;
                take
            })
            .map(|record| (record.seq, record.objects.clone()))
            .collect();
        let last_seq = records.last().map_or(self.flushed_seq, |(seq, _)| *seq);
        let mut objects: Vec<ObjectId> = records.into_iter().flat_map(|(_, objects)| objects).collect();
        objects.sort_unstable();
        objects.dedup();
        let mut job = FlushJob {
            phase: FlushPhase::Load,
            last_seq,
            objects: Vec::new(),
            freed: Vec::new(),
            meta_pages: BTreeSet::new(),
            loads_pending: 0,
            copy_pages: Vec::new(),
            copy_page_count: 0,
            copy_reads: Vec::new(),
            next_copy_read: 0,
            copy_reads_pending: 0,
            copy_writes: VecDeque::new(),
            ios_pending: 0,
            new_tail: None,
            reads_before: self.next_read_id,
        };
        for object in objects {
            if let Some(flush) = self.plan_object_flush(object, last_seq, &mut job.freed) {
                job.objects.push(flush);
            }
        }
        // Metadata pages to rewrite: every block whose entry changes.
        let g = self.geometry;
        for flush in &job.objects {
            if let Some(old) = flush.old {
                job.meta_pages.insert(g.meta_location(old.block).0);
            }
            if let Some(new) = &flush.new {
                job.meta_pages.insert(g.meta_location(new.block).0);
            }
        }
        for &page in &job.meta_pages {
            match self.meta_cache.lookup(page, Waiter::Flusher) {
                Lookup::Hit(_) => self.meta_cache.pin(page),
                Lookup::Pending => job.loads_pending += 1,
                Lookup::StartLoad => {
                    job.loads_pending += 1;
                    self.submit_io(
                        Io::MetaLoad { page },
                        DiskOp::Read,
                        g.meta_page_offset_bytes(page),
                        AlignedBuffer::zeroed(PAGE_USIZE),
                    );
                }
            }
        }
        self.flush_job = Some(job);
    }

    /// Computes what flushing the object's entries of records `<= last_seq` does to it.
    fn plan_object_flush(&mut self, object: ObjectId, last_seq: u64, freed: &mut Vec<u32>) -> Option<ObjectFlush> {
        let dirty = self.dirty.get(&object)?;
        let consumed = dirty.entries.iter().take_while(|entry| entry.record_seq <= last_seq).count();
        if consumed == 0 {
            return None;
        }
        // Small writes followed by a whole-object write or a delete anywhere in the history are
        // superseded: copying them would be wasted (or, for a delete, wrong).
        let last_reset = dirty.entries.iter().rposition(|entry| !matches!(entry.kind, DirtyKind::Small { .. }));
        let old = self.index.get(object);
        let mut state: Option<NewState> = old.map(|old| NewState {
            block: old.block,
            version: old.version,
            base: StateBase::Existing,
            updates: BTreeMap::new(),
        });
        let mut needs_block = false;
        let mut changed = false;
        for (position, entry) in dirty.entries[..consumed].iter().enumerate() {
            match &entry.kind {
                DirtyKind::Big { block, page_crcs } => {
                    if let Some(state) = &state {
                        if Some(state.block) != old.map(|old| old.block) {
                            freed.push(state.block); // A block given by an earlier entry of this job.
                        }
                    }
                    state = Some(NewState {
                        block: *block,
                        version: entry.version,
                        base: StateBase::Whole(page_crcs.clone()),
                        updates: BTreeMap::new(),
                    });
                    changed = true;
                }
                DirtyKind::Delete => {
                    if let Some(state) = &state {
                        if Some(state.block) != old.map(|old| old.block) {
                            freed.push(state.block);
                        }
                    }
                    state = None;
                    changed = true;
                }
                DirtyKind::Small { offset_pages, journal_offset_bytes, page_crcs } => {
                    if last_reset.is_some_and(|reset| reset > position) {
                        continue;
                    }
                    let state = state.get_or_insert_with(|| {
                        needs_block = true;
                        NewState {
                            block: u32::MAX,
                            version: entry.version,
                            base: StateBase::Fresh,
                            updates: BTreeMap::new(),
                        }
                    });
                    state.version = entry.version;
                    for (index, crc) in page_crcs.iter().enumerate() {
                        state
                            .updates
                            .insert(offset_pages + index as u32, (journal_offset_bytes + index as u64 * PAGE, *crc));
                    }
                    changed = true;
                }
            }
        }
        if needs_block {
            let state = state.as_mut().expect("small write state");
            if matches!(state.base, StateBase::Fresh) && state.block == u32::MAX {
                let dirty = self.dirty.get_mut(&object).expect("dirty");
                assert!(dirty.reserved, "object {object} needs a block without a reservation");
                dirty.reserved = false;
                state.block = self.allocate_block(true).expect("reserved block");
            }
        }
        if !changed {
            // Only superseded small writes: the flushed state stays, the entries go.
            return Some(ObjectFlush { object, old: None, new: None, consumed });
        }
        Some(ObjectFlush { object, old, new: state, consumed })
    }

    fn advance_flush_job(&mut self) {
        loop {
            let Some(job) = self.flush_job.as_mut() else { return };
            if self.poisoned.is_some() {
                // Keep the loaded pages pinned no longer than the job; the engine stops writing.
                if job.loads_pending == 0 && job.ios_pending == 0 {
                    // The job is abandoned; its pins go with it.
                    let job = self.flush_job.take().expect("job");
                    for page in job.meta_pages {
                        if self.meta_cache.get(page).is_some() {
                            self.meta_cache.unpin(page);
                        }
                    }
                }
                return;
            }
            if job.phase == FlushPhase::Copy && self.copy_remaining() {
                self.pump_copy();
                return;
            }
            let job = self.flush_job.as_mut().expect("job");
            if job.loads_pending > 0 || job.ios_pending > 0 {
                return;
            }
            match job.phase {
                FlushPhase::Load => {
                    if self.copy_waits_for_reads() {
                        return;
                    }
                    self.flush_start_copy();
                }
                FlushPhase::Copy => {
                    let job = self.flush_job.as_mut().expect("job");
                    job.phase = FlushPhase::Barrier;
                    // The copies (from RAM or read from the journal) must be durable before
                    // any metadata entry names them.
                    if job.copy_page_count == 0 {
                        continue;
                    }
                    job.ios_pending += 1;
                    self.submit_io(Io::FlushBarrier, DiskOp::Flush, 0, AlignedBuffer::empty());
                }
                FlushPhase::Barrier => self.flush_write_meta(),
                FlushPhase::Meta => {
                    // Metadata must be durable before the superblock stops pointing at the
                    // records it replaces (the superblock write could land first otherwise).
                    let job = self.flush_job.as_mut().expect("job");
                    job.phase = FlushPhase::MetaBarrier;
                    if job.meta_pages.is_empty() {
                        continue;
                    }
                    job.ios_pending += 1;
                    self.submit_io(Io::FlushBarrier, DiskOp::Flush, 0, AlignedBuffer::empty());
                }
                FlushPhase::MetaBarrier => self.flush_apply(),
                FlushPhase::Superblock => {
                    let job = self.flush_job.take().expect("job");
                    if let Some((offset, seq)) = job.new_tail {
                        // The copy just written names `seq`; the other one still names the
                        // previous tail, which bounds what may be released.
                        let released_seq = self.superblock.journal_tail_seq;
                        self.older_copy_tail_seq = released_seq;
                        self.superblock.journal_tail_offset_bytes = offset;
                        self.superblock.journal_tail_seq = seq;
                        while self.records.front().is_some_and(|record| record.seq < released_seq) {
                            self.records.pop_front();
                        }
                        self.journaled_deletes.retain(|_, &mut (_, record_seq)| record_seq >= released_seq);
                        while let Some(&(last_seq, block)) = self.blocks_awaiting_trim.front() {
                            if last_seq >= released_seq {
                                break;
                            }
                            self.blocks_awaiting_trim.pop_front();
                            self.release_block(block);
                        }
                    }
                    return;
                }
            }
        }
    }

    /// Whether a read that resolved its pages before the job was planned still reads a block
    /// the job copies journaled pages into.
    ///
    /// Copies go into an object's block in place. A read that started before the copied small
    /// writes committed reads those pages from the block and checks them against the old
    /// checksums; overwriting them under it would fail the read with `Corrupt` (or, with
    /// another timing, hand it half old, half new pages). Reads that started after planning
    /// take those pages from the journal, so only the older ones are waited for.
    fn copy_waits_for_reads(&self) -> bool {
        let job = self.flush_job.as_ref().expect("job");
        let mut targets =
            job.objects.iter().filter_map(|flush| flush.new.as_ref()).filter(|new| !new.updates.is_empty());
        targets.any(|new| {
            self.reads
                .iter()
                .any(|(&read_id, read)| read_id < job.reads_before && read.pinned_blocks.contains(&new.block))
        })
    }

    /// Plans the copy of journaled pages into data blocks: the pages in journal order, read in
    /// merged ranges (`FLUSH_READ_GAP_MAX_BYTES`), written in runs of adjacent pages.
    fn flush_start_copy(&mut self) {
        let mut job = self.flush_job.take().expect("job");
        job.phase = FlushPhase::Copy;
        let g = self.geometry;
        let mut pages: Vec<CopyPage> = Vec::new();
        for flush in &job.objects {
            let Some(new) = &flush.new else { continue };
            let block_offset = g.block_offset_bytes(new.block);
            for (&page, &(journal_offset, _)) in &new.updates {
                pages.push(CopyPage {
                    journal_offset_bytes: journal_offset,
                    target_offset_bytes: block_offset + u64::from(page) * PAGE,
                });
            }
        }
        pages.sort_unstable_by_key(|page| page.journal_offset_bytes);
        job.copy_page_count = pages.len();
        // Pages of records still in RAM become writes now; the rest are read from the journal.
        let mut cached: Vec<(u64, &AlignedBuffer)> = self
            .records
            .iter()
            .filter(|record| record.seq > self.flushed_seq && record.seq <= job.last_seq)
            .filter_map(|record| Some((record.offset_bytes, record.data.as_ref()?)))
            .collect();
        cached.sort_unstable_by_key(|(offset, _)| *offset);
        let in_ram = |page: &CopyPage| {
            let at = cached.partition_point(|(offset, _)| *offset <= page.journal_offset_bytes).checked_sub(1)?;
            let (offset, data) = cached[at];
            let within = (page.journal_offset_bytes - offset) as usize;
            (within + PAGE_USIZE <= data.len()).then(|| &data[within..within + PAGE_USIZE])
        };
        let mut from_disk: Vec<CopyPage> = Vec::with_capacity(pages.len());
        let mut run: Vec<&[u8]> = Vec::new();
        let mut run_start: Option<CopyPage> = None;
        for page in &pages {
            let Some(bytes) = in_ram(page) else {
                from_disk.push(*page);
                continue;
            };
            if let Some(start) = run_start {
                let count = run.len() as u64;
                let adjacent = start.journal_offset_bytes + count * PAGE == page.journal_offset_bytes
                    && start.target_offset_bytes + count * PAGE == page.target_offset_bytes;
                if !adjacent || run.len() * PAGE_USIZE >= FLUSH_READ_SIZE_MAX_BYTES as usize {
                    job.copy_writes.push_back((start.target_offset_bytes, concat_pages(&run)));
                    run.clear();
                    run_start = None;
                }
            }
            run_start.get_or_insert(*page);
            run.push(bytes);
        }
        if let Some(start) = run_start {
            job.copy_writes.push_back((start.target_offset_bytes, concat_pages(&run)));
        }
        let pages = from_disk;
        let mut reads: Vec<CopyRead> = Vec::new();
        for (index, page) in pages.iter().enumerate() {
            if let Some(read) = reads.last_mut() {
                let end = read.journal_offset_bytes + read.length_bytes;
                let merged_end = page.journal_offset_bytes + PAGE;
                if page.journal_offset_bytes >= end
                    && page.journal_offset_bytes - end <= FLUSH_READ_GAP_MAX_BYTES
                    && merged_end - read.journal_offset_bytes <= FLUSH_READ_SIZE_MAX_BYTES
                {
                    read.length_bytes = merged_end - read.journal_offset_bytes;
                    read.pages.end = index + 1;
                    continue;
                }
            }
            reads.push(CopyRead {
                journal_offset_bytes: page.journal_offset_bytes,
                length_bytes: PAGE,
                pages: index..index + 1,
            });
        }
        job.copy_pages = pages;
        job.copy_reads = reads;
        self.flush_job = Some(job);
        self.pump_copy();
    }

    /// Copy requests the flusher keeps in flight: few while the journal has room, so client
    /// journal writes do not queue behind background copies, more as it fills, so the flusher
    /// keeps up before writers have to wait for space.
    fn flush_io_depth(&self) -> usize {
        let journal_size = self.geometry.journal_size_bytes;
        let used = self.journal_used_bytes().saturating_sub(journal_size / 4);
        let span = journal_size / 2;
        let extra = (FLUSH_IO_DEPTH_MAX - FLUSH_IO_DEPTH_MIN) as u64 * used.min(span) / span;
        FLUSH_IO_DEPTH_MIN + extra as usize
    }

    /// Keeps up to `flush_io_depth` copy requests in flight, writes before further reads.
    fn pump_copy(&mut self) {
        loop {
            let depth = self.flush_io_depth();
            let job = self.flush_job.as_mut().expect("job");
            if job.phase != FlushPhase::Copy || job.ios_pending >= depth || self.poisoned.is_some() {
                return;
            }
            if let Some((target, buffer)) = job.copy_writes.pop_front() {
                job.ios_pending += 1;
                self.stats.flusher_copy_writes += 1;
                self.stats.flusher_pages_copied += buffer.len() as u64 / PAGE;
                self.submit_io(Io::FlushCopyWrite, DiskOp::Write, target, buffer);
                continue;
            }
            if job.next_copy_read < job.copy_reads.len() && job.copy_reads_pending < FLUSH_READS_IN_FLIGHT_MAX {
                let index = job.next_copy_read;
                job.next_copy_read += 1;
                job.ios_pending += 1;
                job.copy_reads_pending += 1;
                let read = &job.copy_reads[index];
                let (offset, length) = (read.journal_offset_bytes, read.length_bytes as usize);
                self.stats.flusher_journal_read_bytes += read.length_bytes;
                self.submit_io(Io::FlushCopyRead { run: index }, DiskOp::Read, offset, AlignedBuffer::zeroed(length));
                continue;
            }
            return;
        }
    }

    fn copy_remaining(&self) -> bool {
        let job = self.flush_job.as_ref().expect("job");
        job.next_copy_read < job.copy_reads.len() || !job.copy_writes.is_empty()
    }

    fn on_flush_copy_read(&mut self, run: usize, buffer: AlignedBuffer, result: Result<(), DiskError>) {
        let job = self.flush_job.as_mut().expect("job");
        job.ios_pending -= 1;
        job.copy_reads_pending -= 1;
        if let Err(error) = result {
            return self.poison(format!("flusher read of the journal failed: {error}"));
        }
        let read = job.copy_reads[run].clone();
        let pages = &job.copy_pages[read.pages];
        // Runs of pages adjacent both in the journal and in the target block become one write.
        let mut runs: Vec<(usize, usize, u64)> = Vec::new();
        let mut first = 0;
        while first < pages.len() {
            let mut count = 1;
            while first + count < pages.len() {
                let (previous, next) = (&pages[first + count - 1], &pages[first + count]);
                if next.journal_offset_bytes != previous.journal_offset_bytes + PAGE
                    || next.target_offset_bytes != previous.target_offset_bytes + PAGE
                {
                    break;
                }
                count += 1;
            }
            let at = (pages[first].journal_offset_bytes - read.journal_offset_bytes) as usize;
            runs.push((at, count * PAGE_USIZE, pages[first].target_offset_bytes));
            first += count;
        }
        if let [(0, length, target)] = runs[..] {
            if length == buffer.len() {
                // The whole read is one write: hand the buffer on instead of copying it.
                job.copy_writes.push_back((target, buffer));
                return self.pump_copy();
            }
        }
        for (at, length, target) in runs {
            job.copy_writes.push_back((target, AlignedBuffer::from_slice(&buffer[at..at + length])));
        }
        self.pump_copy();
    }

    /// Writes the new metadata entries of every object the job flushes.
    fn flush_write_meta(&mut self) {
        let mut job = self.flush_job.take().expect("job");
        job.phase = FlushPhase::Meta;
        let g = self.geometry;
        let entry_size = g.meta_entry_size_bytes as usize;
        let mut failure = None;
        // Clear old blocks first, then write new entries: an object moving within one page
        // ends with the new entry.
        for flush in &job.objects {
            if let Some(old) = flush.old {
                if flush.new.as_ref().is_none_or(|new| new.block != old.block) {
                    let (page, at) = g.meta_location(old.block);
                    MetaEntry::encode(None, &mut self.meta_cache.get_mut(page)[at..at + entry_size]);
                }
            }
        }
        for &block in &job.freed {
            let (page, at) = g.meta_location(block);
            if job.meta_pages.contains(&page) {
                MetaEntry::encode(None, &mut self.meta_cache.get_mut(page)[at..at + entry_size]);
            }
        }
        for flush in &job.objects {
            let Some(new) = &flush.new else { continue };
            let (page, at) = g.meta_location(new.block);
            let slot = &mut self.meta_cache.get_mut(page)[at..at + entry_size];
            let (mut bitmap, mut crcs) = match &new.base {
                StateBase::Fresh => (0u64, vec![0u32; g.pages_per_object() as usize]),
                StateBase::Whole(crcs) => (full_bitmap(g.pages_per_object()), crcs.clone()),
                StateBase::Existing => match MetaEntry::decode(slot, g.pages_per_object()) {
                    Ok(Some(entry)) if entry.object == flush.object => (entry.page_bitmap, entry.page_crcs),
                    _ => {
                        failure = Some(format!(
                            "metadata entry of block {} for object {} is missing or corrupt",
                            new.block, flush.object
                        ));
                        continue;
                    }
                },
            };
            for (&page_index, &(_, crc)) in &new.updates {
                bitmap |= 1 << page_index;
                crcs[page_index as usize] = crc;
            }
            let entry = MetaEntry { object: flush.object, version: new.version, page_bitmap: bitmap, page_crcs: crcs };
            MetaEntry::encode(Some(&entry), slot);
        }
        // Adjacent pages go out as one write: a job touches most metadata pages of a busy
        // region, and a few large writes cost the drive far less than one per page.
        let pages: Vec<u32> = job.meta_pages.iter().copied().collect();
        for run in pages.chunk_by(|a, b| b - a == 1) {
            for run in run.chunks(META_WRITE_PAGES_MAX) {
                let mut bytes = AlignedBuffer::zeroed(run.len() * PAGE_USIZE);
                for (index, &page) in run.iter().enumerate() {
                    let at = index * PAGE_USIZE;
                    bytes[at..at + PAGE_USIZE].copy_from_slice(self.meta_cache.get(page).expect("pinned page"));
                }
                job.ios_pending += 1;
                self.stats.flusher_meta_writes += 1;
                self.stats.flusher_meta_pages_written += run.len() as u64;
                self.submit_io(Io::MetaWrite, DiskOp::Write, g.meta_page_offset_bytes(run[0]), bytes);
            }
        }
        self.flush_job = Some(job);
        if let Some(reason) = failure {
            self.poison(reason);
        }
    }

    /// The job's writes are done: switch the in-memory flushed state, then move the tail.
    fn flush_apply(&mut self) {
        let mut job = self.flush_job.take().expect("job");
        self.stats.flusher_jobs += 1;
        for flush in std::mem::take(&mut job.objects) {
            let dirty = self.dirty.get_mut(&flush.object).expect("dirty object");
            let consumed: Vec<DirtyEntry> = dirty.entries.drain(..flush.consumed).collect();
            if dirty.entries.is_empty() {
                assert!(!dirty.reserved, "object {} keeps a reservation with no entries", flush.object);
                self.dirty.remove(&flush.object);
            }
            for entry in consumed {
                if let DirtyKind::Big { block, .. } = entry.kind {
                    // The dirty entry's hold; the index takes its own.
                    self.release_block_after_trim(job.last_seq, block);
                }
            }
            match (flush.old, &flush.new) {
                (_, Some(new)) => {
                    self.hold_block(new.block);
                    self.index.insert(flush.object, IndexEntry { block: new.block, version: new.version });
                    if matches!(new.base, StateBase::Fresh) {
                        // The allocation's hold, now the index's.
                        self.release_block_after_trim(job.last_seq, new.block);
                    }
                }
                (Some(_), None) => {
                    self.index.remove(flush.object);
                }
                (None, None) => {}
            }
            if let Some(old) = flush.old {
                self.release_block_after_trim(job.last_seq, old.block);
            }
        }
        for page in std::mem::take(&mut job.meta_pages) {
            self.meta_cache.unpin(page);
        }
        let mut flushed_bytes = 0;
        for record in &mut self.records {
            if record.seq <= self.flushed_seq || record.seq > job.last_seq {
                continue;
            }
            flushed_bytes += record.size_bytes;
            if record.data.take().is_some() {
                self.record_data_cached_bytes -= record.size_bytes;
            }
        }
        self.unflushed_bytes -= flushed_bytes;
        self.flushed_seq = job.last_seq;
        let tail = self.next_tail();
        if tail.1 == self.superblock.journal_tail_seq && self.older_copy_tail_seq == tail.1 {
            return; // Nothing to trim, and both superblock copies agree.
        }
        job.phase = FlushPhase::Superblock;
        job.new_tail = Some(tail);
        let mut superblock = self.superblock.clone();
        superblock.generation += 1;
        superblock.journal_tail_offset_bytes = tail.0;
        superblock.journal_tail_seq = tail.1;
        // Every version in the records this write trims is at most `last_version`.
        superblock.version_floor = self.last_version;
        let copy = superblock.generation % 2;
        self.superblock.generation = superblock.generation;
        self.superblock.version_floor = superblock.version_floor;
        job.ios_pending += 1;
        // Write + flush: the copied data and metadata become durable before the tail moves.
        self.submit_io(
            Io::Superblock,
            DiskOp::WriteFlush,
            copy * SUPERBLOCK_SIZE_BYTES,
            AlignedBuffer::from_slice(&superblock.encode()),
        );
        self.flush_job = Some(job);
    }

    fn journal_head_bytes_after_records(&self) -> u64 {
        let g = self.geometry;
        if self.journal_head_bytes >= g.journal_end_bytes() {
            g.journal_offset_bytes
        } else {
            self.journal_head_bytes
        }
    }

    // -----------------------------------------------------------------------------------------
    // The event loop.

    fn on_disk_completion(&mut self, completion: DiskCompletion) {
        let io = self.ios.remove(&completion.id).expect("completion of a known request");
        let DiskCompletion { buffer, result, offset_bytes, .. } = completion;
        match io {
            Io::BigData { write } => self.on_big_data(write, result),
            Io::JournalRecord { seq } => self.on_record_written(seq, buffer, result),
            Io::ReadRun { read, run } => self.on_read_run(read, run, buffer, result),
            Io::MetaLoad { page } => self.on_meta_load(page, buffer, result),
            Io::FlushCopyRead { run } => self.on_flush_copy_read(run, buffer, result),
            Io::FlushCopyWrite | Io::FlushBarrier | Io::MetaWrite | Io::Superblock => {
                let job = self.flush_job.as_mut().expect("flusher job");
                job.ios_pending -= 1;
                if let Err(error) = result {
                    self.poison(format!("flusher write at offset_bytes={offset_bytes} failed: {error}"));
                }
            }
        }
    }

    fn advance(&mut self) {
        self.advance_flush_job();
        self.maybe_start_flush_job();
        self.advance_flush_job();
        self.seal_records();
        self.complete_flush_waiters();
    }
}

/// A record header found anywhere in the journal (see `scan_journal_headers`).
struct HeaderSeen {
    offset_bytes: u64,
    seq: u64,
    /// `durable_seq` of a whole header above the seq asked about.
    durable_seq: Option<u64>,
}

enum RecordRead {
    Valid(RecordHeader),
    Absent,
    Broken(String),
}

fn concat_pages(pages: &[&[u8]]) -> AlignedBuffer {
    let mut buffer = AlignedBuffer::zeroed(pages.len() * PAGE_USIZE);
    for (index, page) in pages.iter().enumerate() {
        buffer[index * PAGE_USIZE..(index + 1) * PAGE_USIZE].copy_from_slice(page);
    }
    buffer
}

fn full_bitmap(pages: u32) -> u64 {
    if pages == 64 {
        u64::MAX
    } else {
        (1u64 << pages) - 1
    }
}

fn decode_meta_slot(
    g: &Geometry,
    page_bytes: &[u8],
    block: u32,
    object: ObjectId,
) -> Result<Option<MetaEntry>, EngineError> {
    let (_, at) = g.meta_location(block);
    let slot = &page_bytes[at..at + g.meta_entry_size_bytes as usize];
    match MetaEntry::decode(slot, g.pages_per_object()) {
        Ok(Some(entry)) if entry.object == object => Ok(Some(entry)),
        _ => Err(EngineError::MetaCorrupt { object, block }),
    }
}

fn read_superblock<D: Disk>(disk: &mut D, offset: u64) -> Result<Result<Superblock, SuperblockError>, OpenError> {
    if disk.size_bytes() < offset + SUPERBLOCK_SIZE_BYTES {
        return Ok(Err(SuperblockError::NotBasalt));
    }
    let bytes = sync_io(disk, DiskOp::Read, offset, AlignedBuffer::zeroed(SUPERBLOCK_SIZE_BYTES as usize))?;
    Ok(Superblock::decode(&bytes))
}

/// One request, waited for. Only while nothing else is in flight (format and open).
fn sync_io<D: Disk>(
    disk: &mut D,
    op: DiskOp,
    offset_bytes: u64,
    buffer: AlignedBuffer,
) -> Result<AlignedBuffer, DiskError> {
    assert_eq!(disk.in_flight_count(), 0);
    disk.submit(DiskRequest { id: 0, op, offset_bytes, buffer });
    let mut completions = Vec::new();
    loop {
        disk.reap(&mut completions);
        if let Some(completion) = completions.pop() {
            assert!(completions.is_empty());
            return completion.result.map(|()| completion.buffer);
        }
        disk.wait();
    }
}
