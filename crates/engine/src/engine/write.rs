//! The write path: admission, whole-object writes into fresh blocks, group commit of pending
//! entries into journal records (several in flight) and commit in seq order, which acknowledges
//! the writes and completes the flush barriers waiting behind them.

use std::collections::VecDeque;

use platform::{AlignedBuffer, Disk, DiskError, DiskOp};

use super::{
    page_crcs, BigWrite, DirtyEntry, DirtyKind, Engine, Io, PendingEntry, PendingKind, QueuedWrite, RecordInFlight,
    RecordInfo, SealedEntry, SealedObject, PAGE,
};
use crate::layout::{all_pages, JournalEntry, JournalEntryKind, RecordHeader, PAGE_SIZE_BYTES};
use crate::{changes, EngineError, ObjectId, Reply, Request};

/// Largest journal record one group commit writes.
const RECORD_SIZE_MAX_BYTES: u64 = 4 << 20;

impl<D: Disk> Engine<D> {
    pub(super) fn complete_flush_waiters(&mut self) {
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

    pub(super) fn admit_write(&mut self, user_data: u64, request: Request, version: Option<u64>) {
        let object = match &request {
            Request::Write { object, .. } | Request::ReplaceVersioned { object, .. } | Request::Delete { object } => {
                *object
            }
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
        let all = all_pages(self.geometry.pages_per_object());
        let (offset_bytes, data, present) = match request {
            Request::Delete { .. } => {
                return self.push_pending(PendingEntry {
                    write_seq,
                    user_data,
                    object,
                    version,
                    kind: PendingKind::Delete,
                })
            }
            Request::Write { offset_bytes, data, .. } => (offset_bytes, data, all),
            Request::ReplaceVersioned { data, present, .. } => (0, data, present),
            _ => unreachable!(),
        };
        let page_crcs = page_crcs(&data);
        let whole = offset_bytes == 0 && data.len() == self.geometry.object_size_bytes as usize;
        // A whole-object write goes to a fresh block when one is free; otherwise through the
        // journal, which needs no new block when the object already has one. A replace of some
        // pages only cannot go through the journal, which would leave the object's other pages.
        if whole {
            if let Some(block) = self.allocate_block(false) {
                self.object_queues.insert(object, VecDeque::new());
                let big = BigWrite { write_seq, user_data, object, version, block, page_crcs, present };
                self.big_writes.insert(write_seq, big);
                let offset = self.geometry.block_offset_bytes(block);
                self.submit_io(Io::BigData { write: write_seq }, DiskOp::Write, offset, data);
                return;
            }
        }
        if present != all {
            return self.finish_write(write_seq, user_data, Err(EngineError::NoSpace { object }));
        }
        let kind = PendingKind::Small { offset_pages: offset_bytes / PAGE_SIZE_BYTES, data, page_crcs };
        self.push_pending(PendingEntry { write_seq, user_data, object, version, kind });
    }

    pub(super) fn on_big_data(&mut self, write_seq: u64, result: Result<(), DiskError>) {
        let big = self.big_writes.remove(&write_seq).expect("big write in flight");
        match result {
            Ok(()) => self.push_pending(PendingEntry {
                write_seq,
                user_data: big.user_data,
                object: big.object,
                version: big.version,
                kind: PendingKind::Big { block: big.block, page_crcs: big.page_crcs, present: big.present },
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
    pub(super) fn seal_records(&mut self) {
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
            // the write-back job will give the object; a delete sealed earlier (in this record or
            // one in flight) releases the old reservation only when it commits, which happens
            // first.
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
                PendingKind::Big { block, page_crcs, present } => {
                    (JournalEntryKind::Big { block, present }, page_crcs, false, true)
                }
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
        // Backpressure: with no room for even one entry, writers wait for write-back to trim.
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
        // Replay looks for a record right after the previous one or at the ring's start, and
        // takes it only whole inside the ring (`read_record` checks what this asserts).
        assert!(offset == self.journal_head_bytes || offset == self.geometry.journal_offset_bytes);
        assert!(offset + size <= self.geometry.journal_end_bytes());
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
        assert!(self.records.back().is_none_or(|last| last.seq + 1 == seq), "records hold consecutive seqs");
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
        assert!(self.records_in_flight.len() <= self.records_in_flight_max);
        self.stats.records_in_flight_peak = self.stats.records_in_flight_peak.max(self.records_in_flight.len() as u64);
        let op = if has_whole_object_write { DiskOp::WriteFlush } else { DiskOp::WriteFua };
        self.submit_io(Io::JournalRecord { seq }, op, offset, buffer);
        true
    }

    pub(super) fn on_record_written(&mut self, seq: u64, buffer: AlignedBuffer, result: Result<(), DiskError>) {
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
                        if let JournalEntryKind::Big { block, .. } = sealed.entry.kind {
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
        self.writeback_backlog_bytes += record.size_bytes;
    }

    /// Adds a durable journal entry to its object's committed history.
    pub(super) fn commit_entry(
        &mut self,
        record_seq: u64,
        data_offset_bytes: u64,
        entry: &JournalEntry,
        reserves_block: bool,
    ) {
        let kind = match entry.kind {
            JournalEntryKind::Small { offset_pages, data_offset_pages } => DirtyKind::Small {
                offset_pages,
                journal_offset_bytes: data_offset_bytes + u64::from(data_offset_pages) * PAGE,
                page_crcs: entry.page_crcs.clone(),
            },
            JournalEntryKind::Big { block, present } => {
                DirtyKind::Big { block, page_crcs: entry.page_crcs.clone(), present }
            }
            JournalEntryKind::Delete => DirtyKind::Delete,
        };
        // A deleted object's version stays known while replay could read its delete, but it
        // holds nothing: its next write starts from absent.
        let previous = match self.dirty.get(&entry.object).and_then(|dirty| dirty.entries.last()) {
            Some(last) if matches!(last.kind, DirtyKind::Delete) => changes::ABSENT,
            Some(last) => last.version,
            None => self.index.get(entry.object).map_or(changes::ABSENT, |clean| clean.version),
        };
        match &kind {
            DirtyKind::Small { offset_pages, page_crcs, .. } => {
                let mask = changes::page_mask(*offset_pages, page_crcs.len() as u32);
                self.changes.record_write(entry.object, previous, entry.version, mask);
            }
            // A copy of some pages only onto an object that held others would leave those absent,
            // which "these pages changed" cannot say: the chain starts again after it.
            DirtyKind::Big { present, .. } if *present != all_pages(self.geometry.pages_per_object()) => {
                if previous == changes::ABSENT {
                    self.changes.record_write(entry.object, previous, entry.version, *present);
                } else {
                    self.changes.forget(entry.object);
                }
            }
            DirtyKind::Big { .. } => {
                let mask = changes::page_mask(0, self.geometry.pages_per_object());
                self.changes.record_write(entry.object, previous, entry.version, mask);
            }
            DirtyKind::Delete => self.changes.forget(entry.object),
        }
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
}
