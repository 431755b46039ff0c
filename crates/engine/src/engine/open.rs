//! Format, open and replay: everything that runs before the engine serves.
//!
//! These steps use blocking I/O (`blocking_io`) while nothing else is in flight. Format lays out an
//! empty engine; open rebuilds the index from the metadata area, replays the journal from the
//! superblock's tail (the decision table is on `replay_journal`) and brings both superblock
//! copies to the same tail before the engine writes its first record.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use platform::{AlignedBuffer, Disk, DiskError, DiskOp, DiskRequest};
use stdx::HashMap;

use super::{Engine, EngineOptions, EngineStats, FormatOptions, RecordInfo, PAGE, PAGE_USIZE};
use crate::index::{Index, IndexEntry};
use crate::layout::{
    page_crc, Geometry, JournalEntryKind, MetaEntry, RecordError, RecordHeader, Superblock, SuperblockError,
    FORMAT_VERSION, SUPERBLOCK_SIZE_BYTES,
};
use crate::meta_cache::MetaCache;
use crate::{FormatError, OpenError};

impl<D: Disk> Engine<D> {
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
            blocking_io(&mut disk, DiskOp::Write, offset, buffer)?;
            offset += len;
        }
        // The first journal page is zeroed so no record of an earlier format is mistaken for
        // the first one (the nonce protects the rest).
        blocking_io(&mut disk, DiskOp::Write, geometry.journal_offset_bytes, AlignedBuffer::zeroed(PAGE_USIZE))?;
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
        blocking_io(&mut disk, DiskOp::Write, SUPERBLOCK_SIZE_BYTES, encoded.clone())?;
        blocking_io(&mut disk, DiskOp::WriteFlush, 0, encoded)?;
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
            blocking_io(disk, DiskOp::WriteFlush, *slot * SUPERBLOCK_SIZE_BYTES, encoded)?;
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
            dirty: HashMap::default(),
            block_refs: vec![0; block_count],
            free_blocks: geometry.block_count,
            reserved_blocks: 0,
            allocation_cursor: 0,
            last_version: 0,
            journaled_deletes: HashMap::default(),
            next_io_id: 1,
            ios: HashMap::default(),
            reaped: Vec::new(),
            completions: Vec::new(),
            next_write_seq: 1,
            writes_in_flight: BTreeSet::new(),
            flush_waiters: VecDeque::new(),
            big_writes: HashMap::default(),
            object_queues: HashMap::default(),
            pending: VecDeque::new(),
            pending_bytes: 0,
            journal_head_bytes: superblock.journal_tail_offset_bytes,
            next_record_seq: superblock.journal_tail_seq,
            records: VecDeque::new(),
            records_in_flight: VecDeque::new(),
            committed_seq: superblock.journal_tail_seq - 1,
            sealed_objects: HashMap::default(),
            journal_failure: None,
            written_back_seq: superblock.journal_tail_seq - 1,
            journal_pins: BTreeMap::new(),
            blocks_awaiting_trim: VecDeque::new(),
            older_copy_tail_seq: superblock.journal_tail_seq,
            writeback_backlog_bytes: 0,
            writeback_requested: false,
            journal_full: false,
            next_read_id: 1,
            reads: HashMap::default(),
            meta_cache: MetaCache::new(options.meta_cache_bytes / PAGE_USIZE),
            writeback_job: None,
            records_in_flight_max: options.records_in_flight_max.max(1),
            record_min_bytes_in_flight: u64::from(options.record_min_bytes_in_flight),
            record_data_cached_bytes: 0,
            record_data_cache_bytes: options.record_data_cache_bytes as u64,
            changes: crate::changes::ChangeLog::new(options.change_log_writes),
            stats: EngineStats::default(),
        };
        // Versions of deletes that were written back and trimmed survive only in the superblock.
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
            blocking_io(
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
            let buffer = blocking_io(&mut self.disk, DiskOp::Read, offset, AlignedBuffer::zeroed(len as usize))?;
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
            let mut bytes = blocking_io(
                &mut self.disk,
                DiskOp::Read,
                g.meta_page_offset_bytes(page),
                AlignedBuffer::zeroed(PAGE_USIZE),
            )?;
            MetaEntry::encode(None, &mut bytes[at..at + entry_size]);
            blocking_io(&mut self.disk, DiskOp::Write, g.meta_page_offset_bytes(page), bytes)?;
        }
        blocking_io(&mut self.disk, DiskOp::Flush, 0, AlignedBuffer::empty())?;
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
            blocking_io(&mut self.disk, DiskOp::Write, offset, AlignedBuffer::zeroed(PAGE_USIZE))?;
        }
        if !erase.is_empty() {
            blocking_io(&mut self.disk, DiskOp::Flush, 0, AlignedBuffer::empty())?;
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
    /// write-back job may have copied that write into the block in place. A block that a later
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
                let JournalEntryKind::Big { block, .. } = entry.kind else { continue };
                if self.index.get(entry.object).is_some_and(|clean| clean.version >= entry.version) {
                    continue; // Already written back.
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
                let bytes = blocking_io(
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
        let first = blocking_io(&mut self.disk, DiskOp::Read, offset, AlignedBuffer::zeroed(PAGE_USIZE))?;
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
            blocking_io(&mut self.disk, DiskOp::Read, offset, AlignedBuffer::zeroed(total as usize))?
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
                JournalEntryKind::Big { block, .. } => {
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
            let bytes = blocking_io(&mut self.disk, DiskOp::Read, offset, AlignedBuffer::zeroed(len as usize))?;
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
            let first =
                blocking_io(&mut self.disk, DiskOp::Read, header.offset_bytes, AlignedBuffer::zeroed(PAGE_USIZE))?;
            let Ok((_, header_size, _)) = RecordHeader::peek(&first, nonce) else { continue };
            let header_size = u64::from(header_size);
            if header_size == 0 || header_size % PAGE != 0 || header.offset_bytes + header_size > g.journal_end_bytes()
            {
                continue;
            }
            let whole = if header_size == PAGE {
                first
            } else {
                blocking_io(
                    &mut self.disk,
                    DiskOp::Read,
                    header.offset_bytes,
                    AlignedBuffer::zeroed(header_size as usize),
                )?
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
                continue; // Already written back.
            }
            let reserves_block = matches!(entry.kind, JournalEntryKind::Small { .. })
                && !self.object_has_block(entry.object)
                && !self.dirty.get(&entry.object).is_some_and(|dirty| dirty.reserved);
            if reserves_block {
                self.reserved_blocks += 1;
            }
            if let JournalEntryKind::Big { block, .. } = entry.kind {
                self.hold_block(block);
            }
            self.commit_entry(header.seq, data_offset_bytes, entry, reserves_block);
            objects.push(entry.object);
        }
        objects.sort_unstable();
        objects.dedup();
        let size_bytes = u64::from(header.header_size_bytes) + u64::from(header.data_size_bytes);
        self.writeback_backlog_bytes += size_bytes;
        self.records.push_back(RecordInfo { seq: header.seq, offset_bytes, size_bytes, objects, data: None });
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

fn read_superblock<D: Disk>(disk: &mut D, offset: u64) -> Result<Result<Superblock, SuperblockError>, OpenError> {
    if disk.size_bytes() < offset + SUPERBLOCK_SIZE_BYTES {
        return Ok(Err(SuperblockError::NotBasalt));
    }
    let bytes = blocking_io(disk, DiskOp::Read, offset, AlignedBuffer::zeroed(SUPERBLOCK_SIZE_BYTES as usize))?;
    Ok(Superblock::decode(&bytes))
}

/// One request, waited for. Only while nothing else is in flight (format and open).
fn blocking_io<D: Disk>(
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
