//! The read path: each page resolved to the newest committed copy of it (a journal record, a
//! data block or zeros), read in runs and checked against its checksum before the read
//! completes; also the metadata page loads that reads and the write-back job wait for.

use platform::{AlignedBuffer, Disk, DiskError, DiskOp};

use super::{DirtyKind, Engine, Io, PageSource, ReadOp, ReadRun, PAGE, PAGE_USIZE};
use crate::layout::{page_crc, Geometry, MetaEntry, PAGE_SIZE_BYTES};
use crate::meta_cache::{Lookup, Waiter};
use crate::{EngineError, ObjectId, Reply};

/// A whole-object write in the journal: its page checksums and the pages it holds.
type JournaledWhole<'a> = (&'a [u32], u64);

impl<D: Disk> Engine<D> {
    /// Starts a read of the range; without `wants_data`, only of which pages the object holds
    /// (the sources are resolved as for a read, then nothing but metadata is loaded).
    pub(super) fn start_read(
        &mut self,
        user_data: u64,
        object: ObjectId,
        offset_bytes: u32,
        length_bytes: u32,
        wants_data: bool,
    ) {
        let first_page = offset_bytes / PAGE_SIZE_BYTES;
        let page_count = (length_bytes / PAGE_SIZE_BYTES) as usize;
        // Resolve each page to where its newest committed data lives.
        let clean = self.index.get(object);
        let mut version = clean.map_or(0, |clean| clean.version);
        // The block the pages not written since come from, with their checksums and the pages
        // it holds when a whole-object write in the journal gave it (else its metadata says).
        let mut base: Option<(u32, Option<JournaledWhole>)> = clean.map(|clean| (clean.block, None));
        let mut sources = vec![PageSource::Zero; page_count];
        let mut from_base = vec![true; page_count];
        if let Some(dirty) = self.dirty.get(&object) {
            for entry in &dirty.entries {
                version = entry.version;
                match &entry.kind {
                    DirtyKind::Big { block, page_crcs, present } => {
                        base = Some((*block, Some((page_crcs, *present))));
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
                Some((_, Some((_, present)))) if present & (1 << (first_page + at as u32)) == 0 => PageSource::Zero,
                Some((block, crcs)) => {
                    let page = first_page + at as u32;
                    let crc = crcs.map(|(crcs, _)| crcs[page as usize]);
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
            .any(|source| wants_data && matches!(source, PageSource::Journal { .. }))
            .then(|| self.dirty[&object].entries[0].record_seq);
        // Group pages into disk runs.
        let g = self.geometry;
        let mut runs: Vec<ReadRun> = Vec::new();
        let mut pinned_blocks = Vec::new();
        // A block stays pinned while its metadata is loaded, even when no data is read, so
        // that its slot still describes this object when it arrives.
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
            if !wants_data {
                continue;
            }
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
            wants_data,
            data: if wants_data { AlignedBuffer::zeroed(length_bytes as usize) } else { AlignedBuffer::empty() },
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
        // One run covering the whole request reads straight into the result buffer; otherwise
        // each run gets its own buffer, copied in on completion.
        let single = wants_data && read.runs.len() == 1 && read.runs[0].page_count == page_count;
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

    pub(super) fn on_read_run(
        &mut self,
        read_id: u64,
        run: usize,
        buffer: AlignedBuffer,
        result: Result<(), DiskError>,
    ) {
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

    /// Checks every page against its checksum; unwritten pages become zeros and are left out
    /// of the pages present.
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
        let first_page = read.offset_bytes / PAGE_SIZE_BYTES;
        let mut present = 0u64;
        if !read.wants_data {
            for (at, source) in read.sources.iter().enumerate() {
                let held = match *source {
                    PageSource::Zero => false,
                    PageSource::Journal { .. } | PageSource::Block { crc: Some(_), .. } => true,
                    PageSource::Block { page, crc: None, .. } => {
                        meta.as_ref().expect("metadata present").page_bitmap & (1 << page) != 0
                    }
                };
                present |= u64::from(held) << (first_page + at as u32);
            }
            return Ok(Reply::Pages { version: read.version, present });
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
            present |= 1 << (first_page + at as u32);
        }
        let data = std::mem::replace(&mut read.data, AlignedBuffer::empty());
        Ok(Reply::Read { version: read.version, data, present })
    }

    pub(super) fn on_meta_load(&mut self, page: u32, buffer: AlignedBuffer, result: Result<(), DiskError>) {
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
                Waiter::Writeback => {
                    if let Err(error) = &result {
                        self.poison(format!("metadata read of page {page} failed: {error}"));
                    }
                    let job = self.writeback_job.as_mut().expect("write-back job waits");
                    job.loads_pending -= 1;
                }
            }
        }
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
