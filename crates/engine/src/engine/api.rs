//! The engine's public methods: what callers may inspect (geometry, objects, space, counters),
//! the request interface (`submit`, `poll`, `push`, `wait`, `execute`) and the controls of
//! write-back. Requests are checked here and handed to the write and read paths.

use std::collections::BTreeMap;

use platform::Disk;

use super::{invalid, DirtyKind, Engine, EngineStats};
use crate::layout::{all_pages, Geometry, Superblock, PAGE_SIZE_BYTES};
use crate::{Completion, EngineError, ObjectId, Reply, Request, SpaceStats};

impl<D: Disk> Engine<D> {
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

    /// Every object with its version: written-back ones from the index, overlaid by journaled ones.
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

    /// The pages of `object` its writes changed from version `since` (`None`: from before it
    /// existed) to version `current` (bit `i`: page `i`), if the engine remembers every one of
    /// those writes: what a replica holding `since` lacks of `current`. `Some(0)` when the two
    /// are the same.
    pub fn pages_changed_since(&self, object: ObjectId, since: Option<u64>, current: u64) -> Option<u64> {
        self.changes.changed_since(object, since.unwrap_or(crate::changes::ABSENT), current)
    }

    /// Whether `object` exists now (written and not deleted since), as reads see it. Cheap:
    /// RAM only.
    pub fn object_exists(&self, object: ObjectId) -> bool {
        match self.dirty.get(&object).and_then(|dirty| dirty.entries.last()) {
            Some(entry) => !matches!(entry.kind, DirtyKind::Delete),
            None => self.index.get(object).is_some(),
        }
    }

    pub(super) fn known_version(&self, object: ObjectId) -> Option<u64> {
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

    /// The share of blocks not available to new objects, in percent (rounded down): what the
    /// OSD's full ratio is compared with, in constant time.
    pub fn used_percent(&self) -> u32 {
        let block_count = u64::from(self.geometry.block_count.max(1));
        let available = u64::from(self.free_blocks.saturating_sub(self.reserved_blocks));
        u32::try_from((block_count - available.min(block_count)) * 100 / block_count).expect("at most 100")
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

    /// True when nothing is in flight or queued, write-back included.
    pub fn is_idle(&self) -> bool {
        self.ios.is_empty()
            && self.pending.is_empty()
            && self.completions.is_empty()
            && self.writeback_job.is_none()
            && self.reads.is_empty()
            && !self.writeback_has_work()
    }

    /// True when no journal record awaits write-back.
    pub fn is_written_back(&self) -> bool {
        self.records.is_empty()
    }

    pub fn submit(&mut self, user_data: u64, request: Request) {
        match request {
            Request::Read { object, offset_bytes, length_bytes } => {
                if let Err(error) = self.check_range(offset_bytes, length_bytes) {
                    return self.complete(user_data, Err(error));
                }
                self.start_read(user_data, object, offset_bytes, length_bytes, true);
            }
            Request::Pages { object } => {
                let length_bytes = self.geometry.object_size_bytes;
                self.start_read(user_data, object, 0, length_bytes, false);
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
            Request::ReplaceVersioned { object, data, present, version } => {
                let object_size = self.geometry.object_size_bytes;
                if data.len() != object_size as usize {
                    let reason =
                        format!("a replace of {object} sends {} bytes, not the object's {object_size}", data.len());
                    return self.complete(user_data, Err(invalid(reason)));
                }
                if present & !all_pages(self.geometry.pages_per_object()) != 0 {
                    let reason = format!("a replace of {object} names pages beyond the object: {present:#x}");
                    return self.complete(user_data, Err(invalid(reason)));
                }
                self.admit_write(
                    user_data,
                    Request::ReplaceVersioned { object, data, present, version },
                    Some(version),
                );
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

    /// Asks the write-back job to empty the journal now instead of waiting until a good share of it
    /// is used (call when idle, before a clean shutdown, or to make `open` fast).
    pub fn request_writeback(&mut self) {
        self.writeback_requested = true;
    }

    /// Drives the engine until write-back has emptied the journal (tests, clean shutdown).
    pub fn write_back_journal(&mut self) {
        self.request_writeback();
        let mut out = Vec::new();
        while !self.is_idle() && self.poisoned.is_none() {
            self.poll(&mut out);
            if self.is_idle() {
                break;
            }
            self.wait();
        }
        self.writeback_requested = false;
        assert!(out.is_empty(), "write_back_journal() used while requests are in flight");
    }

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
}
