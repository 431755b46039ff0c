//! Write-back: the background job that applies the oldest committed journal records to the
//! data and metadata areas (load, copy, barrier, metadata write, barrier) and only then moves
//! the journal tail in the superblock. It starts lazily, so each job's flushes and metadata
//! writes are shared by many writes.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use platform::{AlignedBuffer, Disk, DiskError, DiskOp};

use super::{
    CopyPage, CopyRead, DirtyEntry, DirtyKind, Engine, Io, NewState, ObjectWriteback, StateBase, WritebackJob,
    WritebackPhase, PAGE, PAGE_USIZE,
};
use crate::index::IndexEntry;
use crate::layout::{MetaEntry, SUPERBLOCK_SIZE_BYTES};
use crate::meta_cache::{Lookup, Waiter};
use crate::ObjectId;

/// The least backlog a write-back job waits for when the record cache is small (a job's
/// flushes and metadata writes are shared by its writes), unless an eighth of the journal is
/// less.
const WRITEBACK_LAZY_MIN_BYTES: u64 = 4 << 20;
/// Bounds of one write-back job.
const WRITEBACK_JOB_RECORDS_MAX: usize = 4096;
/// Write-back copy requests in flight at once: the fewest while at most a quarter of the journal
/// is used (every background write in flight slows the forced-unit-access journal writes that
/// clients wait for), rising linearly to the most at three quarters (so write-back keeps up
/// with a deep queue of writers before they wait for journal space). See `writeback_io_depth`.
const WRITEBACK_IO_DEPTH_MIN: usize = 4;
const WRITEBACK_IO_DEPTH_MAX: usize = 128;
/// Journal pages the write-back job copies are read in ranges: pages at most this far apart share a
/// read (record headers and pages of superseded writes lie between them).
const WRITEBACK_READ_GAP_MAX_BYTES: u64 = 128 * 1024;
const WRITEBACK_READ_SIZE_MAX_BYTES: u64 = 1 << 20;
/// Journal reads of the write-back job in flight at once: each feeds hundreds of copy writes, so a
/// few keep the writes busy while bounding the buffers held.
const WRITEBACK_READS_IN_FLIGHT_MAX: usize = 2;
/// Adjacent metadata pages the write-back job writes with one request.
const META_WRITE_PAGES_MAX: usize = 64;

impl WritebackJob {
    /// Moves the job from phase `from` on to `to`, once the requests of `from` have completed.
    fn enter_phase(&mut self, from: WritebackPhase, to: WritebackPhase) {
        assert_eq!(self.phase, from, "write-back phase {to:?} entered from {:?}", self.phase);
        assert_eq!(self.ios_pending, 0, "write-back phase {to:?} entered with requests in flight");
        assert_eq!(self.loads_pending, 0, "write-back phase {to:?} entered with metadata loads in flight");
        self.phase = to;
    }
}

impl<D: Disk> Engine<D> {
    pub(super) fn writeback_has_work(&self) -> bool {
        let backlog = self.committed_seq > self.written_back_seq;
        let tail_seq = self.superblock.journal_tail_seq;
        let trimmable = self.next_tail().1 != tail_seq || self.older_copy_tail_seq != tail_seq;
        backlog || trimmable
    }

    /// The tail the superblock could name now: the oldest record that is not written back or still
    /// read by a read in flight, or the head when there is none.
    fn next_tail(&self) -> (u64, u64) {
        let oldest_pinned = self.journal_pins.keys().next().copied().unwrap_or(u64::MAX);
        let first_kept_seq = (self.written_back_seq + 1).min(oldest_pinned);
        // `records` holds consecutive seqs, so the record is found by index (this runs on
        // every poll; a scan showed in profiles with a long journal).
        let index = self.records.front().map_or(0, |front| first_kept_seq.saturating_sub(front.seq) as usize);
        match self.records.get(index) {
            Some(record) => {
                assert!(record.seq >= first_kept_seq);
                (record.offset_bytes, record.seq)
            }
            None => (self.journal_head_bytes_after_records(), self.next_record_seq),
        }
    }

    /// Whether a write-back job should start now. Writing back lazily, once an eighth of the
    /// journal holds records not written back, makes jobs large: their flushes and metadata
    /// writes are shared by thousands of writes instead of a few, and a page overwritten
    /// meanwhile is copied once. But no later than half the record cache (or
    /// [`WRITEBACK_LAZY_MIN_BYTES`]): a job copies from RAM only the records the cache holds, and
    /// those committed while it runs need the other half; past the cache, write-back reads the
    /// journal back and a write-only load makes the drive read. Short of blocks, it goes eagerly instead: the blocks of deleted and overwritten
    /// objects come back only once write-back and the journal tail pass them.
    fn writeback_should_start(&self) -> bool {
        if self.writeback_job.is_some() || self.poisoned.is_some() || !self.writeback_has_work() {
            return false;
        }
        let journal_size = self.geometry.journal_size_bytes;
        let lazy_bytes = match self.record_data_cache_bytes {
            0 => journal_size / 8,
            cache => (journal_size / 8).min((cache / 2).max(WRITEBACK_LAZY_MIN_BYTES)),
        };
        self.writeback_requested
            || self.journal_full
            || self.writeback_backlog_bytes >= lazy_bytes
            || self.journal_used_bytes() >= journal_size / 2
            || self.blocks_short()
    }

    /// Whether fewer than a tenth of the blocks are available to new objects.
    pub(super) fn blocks_short(&self) -> bool {
        let available = self.free_blocks.saturating_sub(self.reserved_blocks);
        available < (self.geometry.block_count / 10).max(1)
    }

    pub(super) fn maybe_start_writeback_job(&mut self) {
        if self.writeback_requested && !self.writeback_has_work() {
            self.writeback_requested = false;
        }
        if !self.writeback_should_start() {
            return;
        }
        let job_bytes_max = self.geometry.journal_size_bytes / 4;
        let mut job_bytes = 0;
        let records: Vec<(u64, Vec<ObjectId>)> = self
            .records
            .iter()
            .filter(|record| record.seq > self.written_back_seq && record.seq <= self.committed_seq)
            .take(WRITEBACK_JOB_RECORDS_MAX)
            .take_while(|record| {
                let take = job_bytes == 0 || job_bytes + record.size_bytes <= job_bytes_max;
                job_bytes += record.size_bytes;
                take
            })
            .map(|record| (record.seq, record.objects.clone()))
            .collect();
        let last_seq = records.last().map_or(self.written_back_seq, |(seq, _)| *seq);
        let mut objects: Vec<ObjectId> = records.into_iter().flat_map(|(_, objects)| objects).collect();
        objects.sort_unstable();
        objects.dedup();
        let mut job = WritebackJob {
            phase: WritebackPhase::Load,
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
            if let Some(writeback) = self.plan_object_writeback(object, last_seq, &mut job.freed) {
                job.objects.push(writeback);
            }
        }
        // Metadata pages to rewrite: every block whose entry changes.
        let g = self.geometry;
        for writeback in &job.objects {
            if let Some(old) = writeback.old {
                job.meta_pages.insert(g.meta_location(old.block).0);
            }
            if let Some(new) = &writeback.new {
                job.meta_pages.insert(g.meta_location(new.block).0);
            }
        }
        for &page in &job.meta_pages {
            match self.meta_cache.lookup(page, Waiter::Writeback) {
                Lookup::Hit(_) => self.meta_cache.pin(page),
                Lookup::Pending => job.loads_pending += 1,
                Lookup::StartLoad => {
                    job.loads_pending += 1;
                    self.stats.meta_pages_loaded += 1;
                    self.submit_io(
                        Io::MetaLoad { page },
                        DiskOp::Read,
                        g.meta_page_offset_bytes(page),
                        AlignedBuffer::zeroed(PAGE_USIZE),
                    );
                }
            }
        }
        self.writeback_job = Some(job);
    }

    /// Computes what writing back the object's entries of records `<= last_seq` does to it.
    fn plan_object_writeback(
        &mut self,
        object: ObjectId,
        last_seq: u64,
        freed: &mut Vec<u32>,
    ) -> Option<ObjectWriteback> {
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
                DirtyKind::Big { block, page_crcs, present } => {
                    if let Some(state) = &state {
                        if Some(state.block) != old.map(|old| old.block) {
                            freed.push(state.block); // A block given by an earlier entry of this job.
                        }
                    }
                    state = Some(NewState {
                        block: *block,
                        version: entry.version,
                        base: StateBase::Whole(page_crcs.clone(), *present),
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
            // Only superseded small writes: the written-back state stays, the entries go.
            return Some(ObjectWriteback { object, old: None, new: None, consumed });
        }
        Some(ObjectWriteback { object, old, new: state, consumed })
    }

    pub(super) fn advance_writeback_job(&mut self) {
        loop {
            let Some(job) = self.writeback_job.as_mut() else { return };
            if self.poisoned.is_some() {
                // Keep the loaded pages pinned no longer than the job; the engine stops writing.
                if job.loads_pending == 0 && job.ios_pending == 0 {
                    // The job is abandoned; its pins go with it.
                    let job = self.writeback_job.take().expect("job");
                    for page in job.meta_pages {
                        if self.meta_cache.get(page).is_some() {
                            self.meta_cache.unpin(page);
                        }
                    }
                }
                return;
            }
            if job.phase == WritebackPhase::Copy && self.copy_remaining() {
                self.pump_copy();
                return;
            }
            let job = self.writeback_job.as_mut().expect("job");
            if job.loads_pending > 0 || job.ios_pending > 0 {
                return;
            }
            match job.phase {
                WritebackPhase::Load => {
                    if self.copy_waits_for_reads() {
                        return;
                    }
                    self.writeback_start_copy();
                }
                WritebackPhase::Copy => {
                    let job = self.writeback_job.as_mut().expect("job");
                    // The barrier covers only the copies submitted before it: all of them.
                    assert!(job.copy_writes.is_empty());
                    assert_eq!(job.next_copy_read, job.copy_reads.len());
                    job.enter_phase(WritebackPhase::Copy, WritebackPhase::Barrier);
                    // The copies (from RAM or read from the journal) must be durable before
                    // any metadata entry names them.
                    if job.copy_page_count == 0 {
                        continue;
                    }
                    job.ios_pending += 1;
                    self.submit_io(Io::WritebackBarrier, DiskOp::Flush, 0, AlignedBuffer::empty());
                }
                WritebackPhase::Barrier => self.writeback_write_meta(),
                WritebackPhase::Meta => {
                    // Metadata must be durable before the superblock stops pointing at the
                    // records it replaces (the superblock write could land first otherwise).
                    let job = self.writeback_job.as_mut().expect("job");
                    job.enter_phase(WritebackPhase::Meta, WritebackPhase::MetaBarrier);
                    if job.meta_pages.is_empty() {
                        continue;
                    }
                    job.ios_pending += 1;
                    self.submit_io(Io::WritebackBarrier, DiskOp::Flush, 0, AlignedBuffer::empty());
                }
                WritebackPhase::MetaBarrier => self.writeback_apply(),
                WritebackPhase::Superblock => {
                    let job = self.writeback_job.take().expect("job");
                    // Journal space and blocks are released below: only once the superblock
                    // copy naming the new tail is durable.
                    assert_eq!(job.ios_pending, 0);
                    if let Some((offset, seq)) = job.new_tail {
                        // The copy just written names `seq`; the other one still names the
                        // previous tail, which bounds what may be released.
                        let released_seq = self.superblock.journal_tail_seq;
                        self.older_copy_tail_seq = released_seq;
                        self.superblock.journal_tail_offset_bytes = offset;
                        self.superblock.journal_tail_seq = seq;
                        while self.records.front().is_some_and(|record| record.seq < released_seq) {
                            let record = self.records.pop_front().expect("checked");
                            // Its journal space is about to be reused.
                            assert!(record.seq <= self.written_back_seq);
                            assert!(record.data.is_none());
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
        let job = self.writeback_job.as_ref().expect("job");
        let mut targets =
            job.objects.iter().filter_map(|writeback| writeback.new.as_ref()).filter(|new| !new.updates.is_empty());
        targets.any(|new| {
            self.reads
                .iter()
                .any(|(&read_id, read)| read_id < job.reads_before && read.pinned_blocks.contains(&new.block))
        })
    }

    /// Plans the copy of journaled pages into data blocks: the pages in journal order, read in
    /// merged ranges (`WRITEBACK_READ_GAP_MAX_BYTES`), written in runs of adjacent pages.
    fn writeback_start_copy(&mut self) {
        let mut job = self.writeback_job.take().expect("job");
        job.enter_phase(WritebackPhase::Load, WritebackPhase::Copy);
        let g = self.geometry;
        let mut pages: Vec<CopyPage> = Vec::new();
        for writeback in &job.objects {
            let Some(new) = &writeback.new else { continue };
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
            .filter(|record| record.seq > self.written_back_seq && record.seq <= job.last_seq)
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
                if !adjacent || run.len() * PAGE_USIZE >= WRITEBACK_READ_SIZE_MAX_BYTES as usize {
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
                    && page.journal_offset_bytes - end <= WRITEBACK_READ_GAP_MAX_BYTES
                    && merged_end - read.journal_offset_bytes <= WRITEBACK_READ_SIZE_MAX_BYTES
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
        self.writeback_job = Some(job);
        self.pump_copy();
    }

    /// Copy requests the write-back job keeps in flight: few while the journal and the record
    /// cache have room, so client journal writes do not queue behind background copies; more as
    /// either fills (the journal from a quarter to three quarters, the cache past the half a job
    /// starts at), so write-back keeps up before writers wait for space, and before records
    /// stop fitting in the cache and have to be read back from the journal.
    fn writeback_io_depth(&self) -> usize {
        // How far `used` is into `span` past `from`, in thousandths.
        let filled = |used: u64, from: u64, span: u64| used.saturating_sub(from).min(span) * 1000 / span.max(1);
        let journal_size = self.geometry.journal_size_bytes;
        let journal = filled(self.journal_used_bytes(), journal_size / 4, journal_size / 2);
        let cache_size = self.record_data_cache_bytes;
        let cache =
            if cache_size == 0 { 0 } else { filled(self.record_data_cached_bytes, cache_size / 2, cache_size / 2) };
        let extra = (WRITEBACK_IO_DEPTH_MAX - WRITEBACK_IO_DEPTH_MIN) as u64 * journal.max(cache) / 1000;
        WRITEBACK_IO_DEPTH_MIN + extra as usize
    }

    /// Keeps up to `writeback_io_depth` copy requests in flight, writes before further reads.
    fn pump_copy(&mut self) {
        loop {
            let depth = self.writeback_io_depth();
            let job = self.writeback_job.as_mut().expect("job");
            if job.phase != WritebackPhase::Copy || job.ios_pending >= depth || self.poisoned.is_some() {
                return;
            }
            if let Some((target, buffer)) = job.copy_writes.pop_front() {
                job.ios_pending += 1;
                self.stats.writeback_copy_writes += 1;
                self.stats.writeback_pages_copied += buffer.len() as u64 / PAGE;
                self.submit_io(Io::WritebackCopyWrite, DiskOp::Write, target, buffer);
                continue;
            }
            if job.next_copy_read < job.copy_reads.len() && job.copy_reads_pending < WRITEBACK_READS_IN_FLIGHT_MAX {
                let index = job.next_copy_read;
                job.next_copy_read += 1;
                job.ios_pending += 1;
                job.copy_reads_pending += 1;
                let read = &job.copy_reads[index];
                let (offset, length) = (read.journal_offset_bytes, read.length_bytes as usize);
                self.stats.writeback_journal_read_bytes += read.length_bytes;
                self.submit_io(
                    Io::WritebackCopyRead { run: index },
                    DiskOp::Read,
                    offset,
                    AlignedBuffer::zeroed(length),
                );
                continue;
            }
            return;
        }
    }

    fn copy_remaining(&self) -> bool {
        let job = self.writeback_job.as_ref().expect("job");
        job.next_copy_read < job.copy_reads.len() || !job.copy_writes.is_empty()
    }

    pub(super) fn on_writeback_copy_read(&mut self, run: usize, buffer: AlignedBuffer, result: Result<(), DiskError>) {
        let job = self.writeback_job.as_mut().expect("job");
        job.ios_pending -= 1;
        job.copy_reads_pending -= 1;
        if let Err(error) = result {
            return self.poison(format!("write-back read of the journal failed: {error}"));
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

    /// Writes the new metadata entries of every object the job writes back.
    fn writeback_write_meta(&mut self) {
        let mut job = self.writeback_job.take().expect("job");
        job.enter_phase(WritebackPhase::Barrier, WritebackPhase::Meta);
        let g = self.geometry;
        let entry_size = g.meta_entry_size_bytes as usize;
        let mut failure = None;
        // Clear old blocks first, then write new entries: an object moving within one page
        // ends with the new entry.
        for writeback in &job.objects {
            if let Some(old) = writeback.old {
                if writeback.new.as_ref().is_none_or(|new| new.block != old.block) {
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
        for writeback in &job.objects {
            let Some(new) = &writeback.new else { continue };
            let (page, at) = g.meta_location(new.block);
            let slot = &mut self.meta_cache.get_mut(page)[at..at + entry_size];
            let (mut bitmap, mut crcs) = match &new.base {
                StateBase::Fresh => (0u64, vec![0u32; g.pages_per_object() as usize]),
                StateBase::Whole(crcs, present) => (*present, crcs.clone()),
                StateBase::Existing => match MetaEntry::decode(slot, g.pages_per_object()) {
                    Ok(Some(entry)) if entry.object == writeback.object => (entry.page_bitmap, entry.page_crcs),
                    _ => {
                        failure = Some(format!(
                            "metadata entry of block {} for object {} is missing or corrupt",
                            new.block, writeback.object
                        ));
                        continue;
                    }
                },
            };
            for (&page_index, &(_, crc)) in &new.updates {
                bitmap |= 1 << page_index;
                crcs[page_index as usize] = crc;
            }
            let entry =
                MetaEntry { object: writeback.object, version: new.version, page_bitmap: bitmap, page_crcs: crcs };
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
                self.stats.writeback_meta_writes += 1;
                self.stats.writeback_meta_pages_written += run.len() as u64;
                self.submit_io(Io::MetaWrite, DiskOp::Write, g.meta_page_offset_bytes(run[0]), bytes);
            }
        }
        self.writeback_job = Some(job);
        if let Some(reason) = failure {
            self.poison(reason);
        }
    }

    /// The job's writes are done: switch the in-memory written-back state, then move the tail.
    fn writeback_apply(&mut self) {
        let mut job = self.writeback_job.take().expect("job");
        // The journal tail moves only after what it trims is durable: the copies and the
        // metadata, behind the barrier that has completed.
        assert_eq!(job.phase, WritebackPhase::MetaBarrier);
        assert_eq!(job.ios_pending, 0);
        assert_eq!(job.loads_pending, 0);
        self.stats.writeback_jobs += 1;
        for writeback in std::mem::take(&mut job.objects) {
            let dirty = self.dirty.get_mut(&writeback.object).expect("dirty object");
            let consumed: Vec<DirtyEntry> = dirty.entries.drain(..writeback.consumed).collect();
            if dirty.entries.is_empty() {
                assert!(!dirty.reserved, "object {} keeps a reservation with no entries", writeback.object);
                self.dirty.remove(&writeback.object);
            }
            for entry in consumed {
                if let DirtyKind::Big { block, .. } = entry.kind {
                    // The dirty entry's hold; the index takes its own.
                    self.release_block_after_trim(job.last_seq, block);
                }
            }
            match (writeback.old, &writeback.new) {
                (_, Some(new)) => {
                    self.hold_block(new.block);
                    self.index.insert(writeback.object, IndexEntry { block: new.block, version: new.version });
                    if matches!(new.base, StateBase::Fresh) {
                        // The allocation's hold, now the index's.
                        self.release_block_after_trim(job.last_seq, new.block);
                    }
                }
                (Some(_), None) => {
                    self.index.remove(writeback.object);
                }
                (None, None) => {}
            }
            if let Some(old) = writeback.old {
                self.release_block_after_trim(job.last_seq, old.block);
            }
        }
        for page in std::mem::take(&mut job.meta_pages) {
            self.meta_cache.unpin(page);
        }
        let mut written_back_bytes = 0;
        for record in &mut self.records {
            if record.seq <= self.written_back_seq || record.seq > job.last_seq {
                continue;
            }
            written_back_bytes += record.size_bytes;
            if record.data.take().is_some() {
                self.record_data_cached_bytes -= record.size_bytes;
            }
        }
        self.writeback_backlog_bytes -= written_back_bytes;
        self.written_back_seq = job.last_seq;
        let tail = self.next_tail();
        if tail.1 == self.superblock.journal_tail_seq && self.older_copy_tail_seq == tail.1 {
            return; // Nothing to trim, and both superblock copies agree.
        }
        // The new tail trims written-back records only, and never moves back.
        assert!(tail.1 <= self.written_back_seq + 1);
        assert!(tail.1 >= self.superblock.journal_tail_seq);
        // Versions only grow: the floor the superblock keeps for open does too.
        assert!(self.last_version >= self.superblock.version_floor);
        job.enter_phase(WritebackPhase::MetaBarrier, WritebackPhase::Superblock);
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
        self.writeback_job = Some(job);
    }

    fn journal_head_bytes_after_records(&self) -> u64 {
        let g = self.geometry;
        if self.journal_head_bytes >= g.journal_end_bytes() {
            g.journal_offset_bytes
        } else {
            self.journal_head_bytes
        }
    }
}

fn concat_pages(pages: &[&[u8]]) -> AlignedBuffer {
    let mut buffer = AlignedBuffer::zeroed(pages.len() * PAGE_USIZE);
    for (index, page) in pages.iter().enumerate() {
        buffer[index * PAGE_USIZE..(index + 1) * PAGE_USIZE].copy_from_slice(page);
    }
    buffer
}
