//! The on-disk format: geometry, the superblock, metadata entries and journal records.
//!
//! Everything here is pure encoding and decoding of little-endian bytes. Decoders treat their
//! input as hostile (it comes from a disk that may rot) and return errors, never panic.
//! The byte diagrams live in `docs/design/engine-format.md`; keep the two in step.

use crate::ObjectId;

/// The format version this build writes. Version 3 journals may hold whole-object writes of
/// some pages only (entry kind 4, the pages present in the entry); version 2 journals may hold
/// several records that were in flight together (each header says which earlier records were
/// durable when it was sealed); version 1 wrote them one at a time. This build reads every one
/// and upgrades an older superblock when it opens it, so an older build refuses the engine
/// instead of misreading a crash-time journal.
pub const FORMAT_VERSION: u32 = 3;
/// The oldest format version this build opens.
pub const FORMAT_VERSION_MIN: u32 = 1;
pub const SUPERBLOCK_MAGIC: u64 = u64::from_le_bytes(*b"BSLTENG1");
pub const RECORD_MAGIC: u64 = u64::from_le_bytes(*b"BSLTJREC");

pub use types::PAGE_SIZE_BYTES;
/// Two superblock copies, written alternately, so a torn superblock write loses nothing.
pub const SUPERBLOCK_COPIES: u64 = 2;
pub const SUPERBLOCK_SIZE_BYTES: u64 = PAGE_SIZE_BYTES as u64;
/// Areas start on 1 MiB boundaries so large I/O stays aligned on any device.
const AREA_ALIGNMENT_BYTES: u64 = 1 << 20;

pub const OBJECT_SIZE_MIN_BYTES: u32 = PAGE_SIZE_BYTES;
/// A metadata entry keeps one bit per page in a `u64` and must fit in one 512-byte sector.
pub const OBJECT_SIZE_MAX_BYTES: u32 = 64 * PAGE_SIZE_BYTES;
pub use types::OBJECT_SIZE_DEFAULT_BYTES;

/// Bytes of a metadata entry before its page checksums.
const META_ENTRY_HEADER_BYTES: usize = 40;
/// Bytes of a journal entry before its page checksums.
const JOURNAL_ENTRY_HEADER_BYTES: usize = 48;
/// Bytes of a journal record header before its entries.
const RECORD_HEADER_BYTES: usize = 48;

const _: () = assert!(OBJECT_SIZE_MAX_BYTES / PAGE_SIZE_BYTES <= 64);
const _: () = assert!(META_ENTRY_HEADER_BYTES + 4 * 64 <= 512);

/// Where each area lives. Derived from the device size and the options at format time and
/// stored in the superblock, so a later change of defaults never moves an existing engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub device_size_bytes: u64,
    pub object_size_bytes: u32,
    pub journal_offset_bytes: u64,
    pub journal_size_bytes: u64,
    pub meta_offset_bytes: u64,
    pub meta_entry_size_bytes: u32,
    pub data_offset_bytes: u64,
    pub block_count: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    #[error("object size {object_size_bytes} bytes must be a power of two between {OBJECT_SIZE_MIN_BYTES} and {OBJECT_SIZE_MAX_BYTES}")]
    ObjectSize { object_size_bytes: u64 },
    #[error("journal size {journal_size_bytes} bytes must be a multiple of 4096 and hold at least 16 objects ({minimum_bytes} bytes)")]
    JournalSize { journal_size_bytes: u64, minimum_bytes: u64 },
    #[error("device of {device_size_bytes} bytes is too small: it needs at least {minimum_bytes} bytes for the superblock, journal, metadata and 16 objects")]
    TooSmall { device_size_bytes: u64, minimum_bytes: u64 },
}

pub fn pages_per_object(object_size_bytes: u32) -> u32 {
    object_size_bytes / PAGE_SIZE_BYTES
}

/// The smallest power of two (at least 64) holding an entry header and one checksum per page.
pub fn meta_entry_size_bytes(object_size_bytes: u32) -> u32 {
    let needed = META_ENTRY_HEADER_BYTES as u32 + 4 * pages_per_object(object_size_bytes);
    needed.next_power_of_two().max(64)
}

fn align_up(value: u64, alignment: u64) -> u64 {
    value.div_ceil(alignment) * alignment
}

impl Geometry {
    pub fn compute(
        device_size_bytes: u64,
        object_size_bytes: u64,
        journal_size_bytes: Option<u64>,
    ) -> Result<Geometry, GeometryError> {
        if !object_size_bytes.is_power_of_two()
            || object_size_bytes < u64::from(OBJECT_SIZE_MIN_BYTES)
            || object_size_bytes > u64::from(OBJECT_SIZE_MAX_BYTES)
        {
            return Err(GeometryError::ObjectSize { object_size_bytes });
        }
        let object_size = object_size_bytes as u32;
        let journal_minimum_bytes = 16 * object_size_bytes + 16 * u64::from(PAGE_SIZE_BYTES);
        // Default: 1/16 of the device, between 16 MiB and 256 MiB.
        let journal_size_bytes = journal_size_bytes
            .unwrap_or_else(|| align_up((device_size_bytes / 16).clamp(16 << 20, 256 << 20), AREA_ALIGNMENT_BYTES));
        if !journal_size_bytes.is_multiple_of(u64::from(PAGE_SIZE_BYTES)) || journal_size_bytes < journal_minimum_bytes
        {
            return Err(GeometryError::JournalSize { journal_size_bytes, minimum_bytes: journal_minimum_bytes });
        }
        let entry_size = meta_entry_size_bytes(object_size);
        let journal_offset_bytes = AREA_ALIGNMENT_BYTES;
        let meta_offset_bytes = journal_offset_bytes + journal_size_bytes;
        let fixed_bytes = meta_offset_bytes + AREA_ALIGNMENT_BYTES;
        let minimum_bytes = fixed_bytes + 16 * (object_size_bytes + u64::from(entry_size)) + AREA_ALIGNMENT_BYTES;
        if device_size_bytes < minimum_bytes {
            return Err(GeometryError::TooSmall { device_size_bytes, minimum_bytes });
        }
        // Start from an estimate and shrink until metadata plus data fit.
        let mut block_count = ((device_size_bytes - fixed_bytes) / (object_size_bytes + u64::from(entry_size)))
            .min(u64::from(u32::MAX - 1));
        loop {
            let meta_size = align_up(block_count * u64::from(entry_size), AREA_ALIGNMENT_BYTES);
            let data_offset_bytes = meta_offset_bytes + meta_size;
            if data_offset_bytes + block_count * object_size_bytes <= device_size_bytes {
                return Ok(Geometry {
                    device_size_bytes,
                    object_size_bytes: object_size,
                    journal_offset_bytes,
                    journal_size_bytes,
                    meta_offset_bytes,
                    meta_entry_size_bytes: entry_size,
                    data_offset_bytes,
                    block_count: block_count as u32,
                });
            }
            block_count -= 1;
        }
    }

    pub fn pages_per_object(&self) -> u32 {
        pages_per_object(self.object_size_bytes)
    }

    pub fn journal_end_bytes(&self) -> u64 {
        self.journal_offset_bytes + self.journal_size_bytes
    }

    pub fn meta_size_bytes(&self) -> u64 {
        self.data_offset_bytes - self.meta_offset_bytes
    }

    pub fn block_offset_bytes(&self, block: u32) -> u64 {
        assert!(block < self.block_count);
        self.data_offset_bytes + u64::from(block) * u64::from(self.object_size_bytes)
    }

    pub fn entries_per_meta_page(&self) -> u32 {
        PAGE_SIZE_BYTES / self.meta_entry_size_bytes
    }

    /// The metadata page holding `block`'s entry, and the entry's byte offset inside it.
    pub fn meta_location(&self, block: u32) -> (u32, usize) {
        assert!(block < self.block_count);
        let per_page = self.entries_per_meta_page();
        (block / per_page, ((block % per_page) * self.meta_entry_size_bytes) as usize)
    }

    pub fn meta_page_offset_bytes(&self, meta_page: u32) -> u64 {
        self.meta_offset_bytes + u64::from(meta_page) * u64::from(PAGE_SIZE_BYTES)
    }

    pub fn meta_page_count(&self) -> u32 {
        self.block_count.div_ceil(self.entries_per_meta_page())
    }
}

fn put_u32(buffer: &mut [u8], at: usize, value: u32) {
    buffer[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

fn put_u64(buffer: &mut [u8], at: usize, value: u64) {
    buffer[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

fn get_u32(buffer: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buffer[at..at + 4].try_into().expect("4 bytes"))
}

fn get_u64(buffer: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buffer[at..at + 8].try_into().expect("8 bytes"))
}

/// A checksum over `bytes` with the four bytes at `crc_at` taken as zero.
fn crc_with_hole(bytes: &[u8], crc_at: usize) -> u32 {
    let crc = crc32c::crc32c(&bytes[..crc_at]);
    let crc = crc32c::crc32c_append(crc, &[0u8; 4]);
    crc32c::crc32c_append(crc, &bytes[crc_at + 4..])
}

pub fn page_crc(page: &[u8]) -> u32 {
    debug_assert_eq!(page.len(), PAGE_SIZE_BYTES as usize);
    crc32c::crc32c(page)
}

// ---------------------------------------------------------------------------------------------
// Superblock.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// The version this copy was written with (`encode` always writes `FORMAT_VERSION`).
    pub format_version: u32,
    pub geometry: Geometry,
    /// Incremented on every superblock write; the copy with the highest valid generation wins.
    pub generation: u64,
    /// Random at format time; journal records carry it so records of an earlier format of the
    /// same device are never replayed.
    pub nonce: u64,
    /// Set once by the OSD that owns this drive; zero until then.
    pub osd_id: u64,
    /// The oldest journal record replay must read.
    pub journal_tail_offset_bytes: u64,
    pub journal_tail_seq: u64,
    /// The highest version handed out when this copy was written. Versions must keep growing
    /// across deletes, but a delete that was written back and trimmed leaves its version nowhere
    /// else on disk, so open starts numbering above this. Zero in superblocks written before it
    /// existed (the bytes were reserved and zero).
    pub version_floor: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SuperblockError {
    #[error("no Basalt superblock (bad magic)")]
    NotBasalt,
    #[error("Basalt engine format version {found} is not supported (this build reads versions {FORMAT_VERSION_MIN} to {FORMAT_VERSION})")]
    Version { found: u32 },
    #[error("superblock checksum mismatch")]
    Checksum,
    #[error("superblock geometry is inconsistent: {reason}")]
    Geometry { reason: &'static str },
}

impl Superblock {
    const CRC_AT: usize = 12;

    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; SUPERBLOCK_SIZE_BYTES as usize];
        let g = &self.geometry;
        put_u64(&mut b, 0, SUPERBLOCK_MAGIC);
        // Only this build's version is ever written (opening a version 1 engine upgrades it).
        assert_eq!(self.format_version, FORMAT_VERSION);
        put_u32(&mut b, 8, self.format_version);
        // 12: crc.
        put_u64(&mut b, 16, self.generation);
        put_u64(&mut b, 24, self.nonce);
        put_u64(&mut b, 32, self.osd_id);
        put_u64(&mut b, 40, g.device_size_bytes);
        put_u32(&mut b, 48, g.object_size_bytes);
        put_u32(&mut b, 52, g.meta_entry_size_bytes);
        put_u64(&mut b, 56, g.journal_offset_bytes);
        put_u64(&mut b, 64, g.journal_size_bytes);
        put_u64(&mut b, 72, g.meta_offset_bytes);
        put_u64(&mut b, 80, g.data_offset_bytes);
        put_u32(&mut b, 88, g.block_count);
        put_u64(&mut b, 96, self.journal_tail_offset_bytes);
        put_u64(&mut b, 104, self.journal_tail_seq);
        put_u64(&mut b, 112, self.version_floor);
        let crc = crc_with_hole(&b, Self::CRC_AT);
        put_u32(&mut b, Self::CRC_AT, crc);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Superblock, SuperblockError> {
        assert_eq!(b.len(), SUPERBLOCK_SIZE_BYTES as usize);
        if get_u64(b, 0) != SUPERBLOCK_MAGIC {
            return Err(SuperblockError::NotBasalt);
        }
        if get_u32(b, Self::CRC_AT) != crc_with_hole(b, Self::CRC_AT) {
            return Err(SuperblockError::Checksum);
        }
        let version = get_u32(b, 8);
        if !(FORMAT_VERSION_MIN..=FORMAT_VERSION).contains(&version) {
            return Err(SuperblockError::Version { found: version });
        }
        let geometry = Geometry {
            device_size_bytes: get_u64(b, 40),
            object_size_bytes: get_u32(b, 48),
            meta_entry_size_bytes: get_u32(b, 52),
            journal_offset_bytes: get_u64(b, 56),
            journal_size_bytes: get_u64(b, 64),
            meta_offset_bytes: get_u64(b, 72),
            data_offset_bytes: get_u64(b, 80),
            block_count: get_u32(b, 88),
        };
        let superblock = Superblock {
            format_version: version,
            geometry,
            generation: get_u64(b, 16),
            nonce: get_u64(b, 24),
            osd_id: get_u64(b, 32),
            journal_tail_offset_bytes: get_u64(b, 96),
            journal_tail_seq: get_u64(b, 104),
            version_floor: get_u64(b, 112),
        };
        superblock.validate()?;
        Ok(superblock)
    }

    /// Checks that the stored geometry is one `Geometry::compute` could have produced, so later
    /// arithmetic on it cannot overflow or address outside the device.
    fn validate(&self) -> Result<(), SuperblockError> {
        let g = &self.geometry;
        let page = u64::from(PAGE_SIZE_BYTES);
        let fail = |reason| Err(SuperblockError::Geometry { reason });
        if !g.object_size_bytes.is_power_of_two()
            || g.object_size_bytes < OBJECT_SIZE_MIN_BYTES
            || g.object_size_bytes > OBJECT_SIZE_MAX_BYTES
        {
            return fail("object size");
        }
        if g.meta_entry_size_bytes != meta_entry_size_bytes(g.object_size_bytes) {
            return fail("metadata entry size");
        }
        if g.journal_offset_bytes < SUPERBLOCK_COPIES * SUPERBLOCK_SIZE_BYTES
            || !g.journal_offset_bytes.is_multiple_of(page)
            || !g.journal_size_bytes.is_multiple_of(page)
            || g.journal_size_bytes < 16 * u64::from(g.object_size_bytes)
        {
            return fail("journal area");
        }
        let meta_end =
            g.meta_offset_bytes.saturating_add(u64::from(g.block_count) * u64::from(g.meta_entry_size_bytes));
        if g.meta_offset_bytes != g.journal_offset_bytes.saturating_add(g.journal_size_bytes)
            || meta_end > g.data_offset_bytes
            || !g.data_offset_bytes.is_multiple_of(page)
        {
            return fail("metadata area");
        }
        let data_end = u64::from(g.block_count)
            .checked_mul(u64::from(g.object_size_bytes))
            .and_then(|bytes| bytes.checked_add(g.data_offset_bytes));
        if data_end.is_none_or(|end| end > g.device_size_bytes) || g.block_count == u32::MAX {
            return fail("data area");
        }
        let tail = self.journal_tail_offset_bytes;
        if tail < g.journal_offset_bytes || tail >= g.journal_end_bytes() || !tail.is_multiple_of(page) {
            return fail("journal tail");
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Metadata entries: one per data block, describing the object whose written-back data it holds.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaEntry {
    pub object: ObjectId,
    pub version: u64,
    /// Bit `i` set: page `i` of the block holds written data. Unset pages read as zeros.
    pub page_bitmap: u64,
    /// One crc32c per page; meaningful where the bitmap bit is set.
    pub page_crcs: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaEntryError {
    #[error("metadata entry checksum mismatch")]
    Checksum,
    #[error("metadata entry has unknown flags {flags:#x}")]
    Flags { flags: u32 },
}

const META_FLAG_USED: u32 = 1;
const META_CRC_AT: usize = 36;

impl MetaEntry {
    /// Encodes into `slot` (exactly one entry size). `None` encodes a free block as zeros.
    pub fn encode(entry: Option<&MetaEntry>, slot: &mut [u8]) {
        slot.fill(0);
        let Some(entry) = entry else { return };
        assert!(META_ENTRY_HEADER_BYTES + 4 * entry.page_crcs.len() <= slot.len());
        put_u64(slot, 0, entry.object.inode);
        put_u64(slot, 8, entry.object.stripe);
        put_u64(slot, 16, entry.version);
        put_u64(slot, 24, entry.page_bitmap);
        put_u32(slot, 32, META_FLAG_USED);
        for (index, crc) in entry.page_crcs.iter().enumerate() {
            put_u32(slot, META_ENTRY_HEADER_BYTES + 4 * index, *crc);
        }
        let crc = crc_with_hole(slot, META_CRC_AT);
        put_u32(slot, META_CRC_AT, crc);
    }

    /// Decodes one entry slot; `Ok(None)` is a free block.
    pub fn decode(slot: &[u8], pages_per_object: u32) -> Result<Option<MetaEntry>, MetaEntryError> {
        let flags = get_u32(slot, 32);
        if flags == 0 {
            // A free slot is all zeros; anything else means the slot rotted.
            return if slot.iter().all(|&b| b == 0) { Ok(None) } else { Err(MetaEntryError::Checksum) };
        }
        if get_u32(slot, META_CRC_AT) != crc_with_hole(slot, META_CRC_AT) {
            return Err(MetaEntryError::Checksum);
        }
        if flags != META_FLAG_USED {
            return Err(MetaEntryError::Flags { flags });
        }
        let page_crcs =
            (0..pages_per_object as usize).map(|index| get_u32(slot, META_ENTRY_HEADER_BYTES + 4 * index)).collect();
        Ok(Some(MetaEntry {
            object: ObjectId { inode: get_u64(slot, 0), stripe: get_u64(slot, 8) },
            version: get_u64(slot, 16),
            page_bitmap: get_u64(slot, 24),
            page_crcs,
        }))
    }
}

/// The mask of every page of an object of `pages` pages (bit `i`: page `i`).
pub fn all_pages(pages: u32) -> u64 {
    assert!(pages <= 64, "an object has at most 64 pages");
    if pages == 64 {
        u64::MAX
    } else {
        (1u64 << pages) - 1
    }
}

// ---------------------------------------------------------------------------------------------
// Journal records. A record is what one group commit writes: a header (whole pages) listing its
// entries, followed by the data pages of its small writes.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalEntryKind {
    /// Pages `offset_pages..offset_pages + page_crcs.len()` of the object, whose data follows in
    /// the record at `data_offset_pages` (counted from the start of the record's data).
    Small {
        offset_pages: u32,
        data_offset_pages: u32,
    },
    /// The whole object was written to data block `block` (redirect-on-write); the pages in
    /// `present` hold data, the others none (every page, but for a copy of a sparse object).
    Big {
        block: u32,
        present: u64,
    },
    Delete,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    pub object: ObjectId,
    pub version: u64,
    pub kind: JournalEntryKind,
    /// One per page written (empty for a delete).
    pub page_crcs: Vec<u32>,
}

impl JournalEntry {
    fn encoded_size_bytes(&self) -> usize {
        Self::encoded_size_bytes_for(self.page_crcs.len())
    }

    /// Header bytes an entry with `page_crc_count` checksums takes.
    pub fn encoded_size_bytes_for(page_crc_count: usize) -> usize {
        JOURNAL_ENTRY_HEADER_BYTES + 4 * page_crc_count
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHeader {
    pub seq: u64,
    pub nonce: u64,
    /// When this record was sealed, every record up to this seq was durable (and acknowledged);
    /// records between it and `seq` were still in flight. Stored at offset 40 as
    /// `seq - 1 - durable_seq`, the number of records in flight ahead of this one, so the zero
    /// of a version 1 header means what version 1 guaranteed: one record at a time.
    pub durable_seq: u64,
    pub header_size_bytes: u32,
    pub data_size_bytes: u32,
    pub entries: Vec<JournalEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Not a record of this engine: the end of the log, or stale bytes.
    #[error("no journal record here")]
    Absent,
    /// Looks like a record of this engine but fails its checksum: torn or rotted.
    #[error("journal record header checksum mismatch")]
    Checksum,
    #[error("journal record header is malformed: {reason}")]
    Malformed { reason: &'static str },
}

const ENTRY_KIND_SMALL: u8 = 1;
const ENTRY_KIND_BIG: u8 = 2;
const ENTRY_KIND_DELETE: u8 = 3;
/// A whole-object write of the pages in the mask at entry offset 40.
const ENTRY_KIND_BIG_SOME_PAGES: u8 = 4;
const ENTRY_PRESENT_AT: usize = 40;
const RECORD_CRC_AT: usize = 36;
/// Records in flight ahead of this one when it was sealed (zero in version 1).
const RECORD_IN_FLIGHT_AT: usize = 40;

impl RecordHeader {
    /// Size in bytes of the header holding `entries`, rounded up to whole pages.
    pub fn size_bytes_for(entries: &[JournalEntry]) -> u32 {
        Self::size_bytes_for_entry_bytes(entries.iter().map(JournalEntry::encoded_size_bytes).sum())
    }

    /// Size in bytes of a header whose entries take `entry_bytes`, rounded up to whole pages.
    pub fn size_bytes_for_entry_bytes(entry_bytes: usize) -> u32 {
        let bytes = RECORD_HEADER_BYTES + entry_bytes;
        (bytes.div_ceil(PAGE_SIZE_BYTES as usize) * PAGE_SIZE_BYTES as usize) as u32
    }

    /// Encodes the header into the first `header_size_bytes` of `buffer`.
    pub fn encode(&self, buffer: &mut [u8]) {
        let header_size = self.header_size_bytes as usize;
        assert_eq!(self.header_size_bytes, Self::size_bytes_for(&self.entries));
        let b = &mut buffer[..header_size];
        b.fill(0);
        put_u64(b, 0, RECORD_MAGIC);
        put_u64(b, 8, self.nonce);
        put_u64(b, 16, self.seq);
        put_u32(b, 24, self.header_size_bytes);
        put_u32(b, 28, self.data_size_bytes);
        put_u32(b, 32, self.entries.len() as u32);
        assert!(self.durable_seq < self.seq);
        put_u64(b, RECORD_IN_FLIGHT_AT, self.seq - 1 - self.durable_seq);
        let mut at = RECORD_HEADER_BYTES;
        for entry in &self.entries {
            let all = all_pages(entry.page_crcs.len() as u32);
            let (kind, a, c) = match entry.kind {
                JournalEntryKind::Small { offset_pages, data_offset_pages } => {
                    (ENTRY_KIND_SMALL, offset_pages, data_offset_pages)
                }
                JournalEntryKind::Big { block, present } if present == all => (ENTRY_KIND_BIG, block, 0),
                JournalEntryKind::Big { block, present } => {
                    assert_eq!(present & !all, 0, "pages present beyond the object");
                    put_u64(b, at + ENTRY_PRESENT_AT, present);
                    (ENTRY_KIND_BIG_SOME_PAGES, block, 0)
                }
                JournalEntryKind::Delete => (ENTRY_KIND_DELETE, 0, 0),
            };
            b[at] = kind;
            put_u32(b, at + 4, entry.page_crcs.len() as u32);
            put_u64(b, at + 8, entry.object.inode);
            put_u64(b, at + 16, entry.object.stripe);
            put_u64(b, at + 24, entry.version);
            put_u32(b, at + 32, a);
            put_u32(b, at + 36, c);
            at += JOURNAL_ENTRY_HEADER_BYTES;
            for crc in &entry.page_crcs {
                put_u32(b, at, *crc);
                at += 4;
            }
        }
        let crc = crc_with_hole(b, RECORD_CRC_AT);
        put_u32(b, RECORD_CRC_AT, crc);
    }

    /// Reads the fixed part of a header from its first page: `(seq, header_size_bytes)`, so the
    /// caller knows how much more to read. Checks magic and nonce only.
    pub fn peek(first_page: &[u8], nonce: u64) -> Result<(u64, u32, u32), RecordError> {
        if get_u64(first_page, 0) != RECORD_MAGIC || get_u64(first_page, 8) != nonce {
            return Err(RecordError::Absent);
        }
        Ok((get_u64(first_page, 16), get_u32(first_page, 24), get_u32(first_page, 28)))
    }

    /// Decodes a whole header. `b` holds at least `header_size_bytes`.
    pub fn decode(b: &[u8], nonce: u64, pages_per_object: u32) -> Result<RecordHeader, RecordError> {
        let (seq, header_size_bytes, data_size_bytes) = Self::peek(b, nonce)?;
        let header_size = header_size_bytes as usize;
        if header_size == 0 || !header_size.is_multiple_of(PAGE_SIZE_BYTES as usize) || header_size > b.len() {
            return Err(RecordError::Checksum);
        }
        let b = &b[..header_size];
        if get_u32(b, RECORD_CRC_AT) != crc_with_hole(b, RECORD_CRC_AT) {
            return Err(RecordError::Checksum);
        }
        let malformed = |reason| Err(RecordError::Malformed { reason });
        if data_size_bytes % PAGE_SIZE_BYTES != 0 {
            return malformed("data size is not whole pages");
        }
        let data_pages = data_size_bytes / PAGE_SIZE_BYTES;
        let in_flight_before = get_u64(b, RECORD_IN_FLIGHT_AT);
        if in_flight_before >= seq {
            return malformed("more records in flight than came before");
        }
        let durable_seq = seq - 1 - in_flight_before;
        let entry_count = get_u32(b, 32) as usize;
        let mut entries = Vec::with_capacity(entry_count.min(header_size / JOURNAL_ENTRY_HEADER_BYTES));
        let mut at = RECORD_HEADER_BYTES;
        for _ in 0..entry_count {
            if at + JOURNAL_ENTRY_HEADER_BYTES > header_size {
                return malformed("entries overrun the header");
            }
            let page_count = get_u32(b, at + 4);
            if page_count > pages_per_object {
                return malformed("entry larger than an object");
            }
            let (a, c) = (get_u32(b, at + 32), get_u32(b, at + 36));
            let kind = match b[at] {
                ENTRY_KIND_SMALL => {
                    if page_count == 0
                        || a.checked_add(page_count).is_none_or(|end| end > pages_per_object)
                        || c.checked_add(page_count).is_none_or(|end| end > data_pages)
                    {
                        return malformed("small write range");
                    }
                    JournalEntryKind::Small { offset_pages: a, data_offset_pages: c }
                }
                ENTRY_KIND_BIG => {
                    if page_count != pages_per_object {
                        return malformed("big write of a partial object");
                    }
                    JournalEntryKind::Big { block: a, present: all_pages(pages_per_object) }
                }
                ENTRY_KIND_BIG_SOME_PAGES => {
                    let present = get_u64(b, at + ENTRY_PRESENT_AT);
                    if page_count != pages_per_object || present & !all_pages(pages_per_object) != 0 {
                        return malformed("big write of a partial object");
                    }
                    JournalEntryKind::Big { block: a, present }
                }
                ENTRY_KIND_DELETE => {
                    if page_count != 0 {
                        return malformed("delete with pages");
                    }
                    JournalEntryKind::Delete
                }
                _ => return malformed("unknown entry kind"),
            };
            let object = ObjectId { inode: get_u64(b, at + 8), stripe: get_u64(b, at + 16) };
            let version = get_u64(b, at + 24);
            at += JOURNAL_ENTRY_HEADER_BYTES;
            if at + 4 * page_count as usize > header_size {
                return malformed("checksums overrun the header");
            }
            let page_crcs = (0..page_count as usize).map(|index| get_u32(b, at + 4 * index)).collect();
            at += 4 * page_count as usize;
            entries.push(JournalEntry { object, version, kind, page_crcs });
        }
        Ok(RecordHeader { seq, nonce, durable_seq, header_size_bytes, data_size_bytes, entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_fits_device() {
        for size in [64u64 << 20, 1 << 30, (1 << 30) + 12345 * 4096, 10 << 40] {
            for object_size in [4096u64, 65536, 131072, 262144] {
                let g = Geometry::compute(size, object_size, None).unwrap();
                assert!(g.data_offset_bytes + u64::from(g.block_count) * object_size <= size);
                assert!(
                    g.meta_offset_bytes + u64::from(g.block_count) * u64::from(g.meta_entry_size_bytes)
                        <= g.data_offset_bytes
                );
                assert!(g.block_count >= 16);
                let sb = Superblock {
                    format_version: FORMAT_VERSION,
                    geometry: g,
                    generation: 3,
                    nonce: 99,
                    osd_id: 0,
                    journal_tail_offset_bytes: g.journal_offset_bytes,
                    journal_tail_seq: 1,
                    version_floor: 0,
                };
                assert_eq!(Superblock::decode(&sb.encode()).unwrap(), sb);
            }
        }
        assert!(matches!(Geometry::compute(1 << 20, 131072, None), Err(GeometryError::TooSmall { .. })));
        assert!(matches!(Geometry::compute(1 << 30, 131073, None), Err(GeometryError::ObjectSize { .. })));
        assert!(matches!(Geometry::compute(1 << 30, 1 << 20, None), Err(GeometryError::ObjectSize { .. })));
    }

    #[test]
    fn superblock_detects_damage() {
        let g = Geometry::compute(1 << 30, 131072, None).unwrap();
        let sb = Superblock {
            format_version: FORMAT_VERSION,
            geometry: g,
            generation: 1,
            nonce: 7,
            osd_id: 5,
            journal_tail_offset_bytes: g.journal_offset_bytes,
            journal_tail_seq: 1,
            version_floor: 12,
        };
        let good = sb.encode();
        for bit in [0usize, 70, 8 * 100, 8 * 4000] {
            let mut bad = good.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(Superblock::decode(&bad).is_err(), "bit {bit}");
        }
        assert_eq!(Superblock::decode(&vec![0u8; 4096]), Err(SuperblockError::NotBasalt));
        assert_eq!(Superblock::decode(&good).unwrap(), sb);
        // A version 1 copy still decodes, and says so.
        let mut v1 = good.clone();
        put_u32(&mut v1, 8, 1);
        let crc = crc_with_hole(&v1, Superblock::CRC_AT);
        put_u32(&mut v1, Superblock::CRC_AT, crc);
        assert_eq!(Superblock::decode(&v1).unwrap().format_version, 1);
    }

    #[test]
    fn meta_entry_round_trip_and_damage() {
        let entry = MetaEntry {
            object: ObjectId { inode: 1 << 60, stripe: 42 },
            version: 77,
            page_bitmap: 0b1011,
            page_crcs: (0..32).collect(),
        };
        let mut slot = vec![0u8; 256];
        MetaEntry::encode(Some(&entry), &mut slot);
        assert_eq!(MetaEntry::decode(&slot, 32).unwrap(), Some(entry));
        slot[100] ^= 4;
        assert_eq!(MetaEntry::decode(&slot, 32), Err(MetaEntryError::Checksum));
        let mut free = vec![0u8; 256];
        assert_eq!(MetaEntry::decode(&free, 32).unwrap(), None);
        free[255] = 1;
        assert_eq!(MetaEntry::decode(&free, 32), Err(MetaEntryError::Checksum));
    }

    #[test]
    fn record_round_trip_and_hostile_bytes() {
        let entries = vec![
            JournalEntry {
                object: ObjectId { inode: 3, stripe: 4 },
                version: 10,
                kind: JournalEntryKind::Small { offset_pages: 2, data_offset_pages: 0 },
                page_crcs: vec![1, 2],
            },
            JournalEntry {
                object: ObjectId { inode: 3, stripe: 5 },
                version: 11,
                kind: JournalEntryKind::Big { block: 9, present: all_pages(32) },
                page_crcs: vec![5; 32],
            },
            JournalEntry {
                object: ObjectId { inode: 3, stripe: 7 },
                version: 12,
                kind: JournalEntryKind::Big { block: 10, present: 0b1001 },
                page_crcs: vec![6; 32],
            },
            JournalEntry {
                object: ObjectId { inode: 3, stripe: 6 },
                version: 12,
                kind: JournalEntryKind::Delete,
                page_crcs: vec![],
            },
        ];
        let header = RecordHeader {
            seq: 5,
            nonce: 1234,
            durable_seq: 2,
            header_size_bytes: RecordHeader::size_bytes_for(&entries),
            data_size_bytes: 2 * 4096,
            entries,
        };
        let mut buffer = vec![0u8; header.header_size_bytes as usize];
        header.encode(&mut buffer);
        assert_eq!(RecordHeader::decode(&buffer, 1234, 32).unwrap(), header);
        // Pages present beyond the object are malformed.
        let at = RECORD_HEADER_BYTES + 2 * JOURNAL_ENTRY_HEADER_BYTES + 4 * (2 + 32);
        assert_eq!(buffer[at], ENTRY_KIND_BIG_SOME_PAGES);
        let mut beyond = buffer.clone();
        put_u64(&mut beyond, at + ENTRY_PRESENT_AT, 1 << 40);
        let crc = crc_with_hole(&beyond, RECORD_CRC_AT);
        put_u32(&mut beyond, RECORD_CRC_AT, crc);
        assert!(matches!(RecordHeader::decode(&beyond, 1234, 32), Err(RecordError::Malformed { .. })));
        // Version 1 headers keep zero there: every earlier record was durable.
        let mut v1 = buffer.clone();
        put_u64(&mut v1, RECORD_IN_FLIGHT_AT, 0);
        let crc = crc_with_hole(&v1, RECORD_CRC_AT);
        put_u32(&mut v1, RECORD_CRC_AT, crc);
        assert_eq!(RecordHeader::decode(&v1, 1234, 32).unwrap().durable_seq, 4);
        let mut too_many = buffer.clone();
        put_u64(&mut too_many, RECORD_IN_FLIGHT_AT, 5);
        let crc = crc_with_hole(&too_many, RECORD_CRC_AT);
        put_u32(&mut too_many, RECORD_CRC_AT, crc);
        assert!(matches!(RecordHeader::decode(&too_many, 1234, 32), Err(RecordError::Malformed { .. })));
        assert_eq!(RecordHeader::decode(&buffer, 1235, 32), Err(RecordError::Absent));
        let mut bad = buffer.clone();
        bad[60] ^= 1;
        assert_eq!(RecordHeader::decode(&bad, 1234, 32), Err(RecordError::Checksum));
        // Random bytes with a valid magic, nonce and checksum must still decode safely.
        let mut rng = 0x1234_5678_u64;
        for _ in 0..2000 {
            let mut hostile = buffer.clone();
            for _ in 0..8 {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let at = 32 + (rng >> 33) as usize % (hostile.len() - 32);
                hostile[at] = (rng >> 20) as u8;
            }
            let crc = crc_with_hole(&hostile, RECORD_CRC_AT);
            put_u32(&mut hostile, RECORD_CRC_AT, crc);
            let _ = RecordHeader::decode(&hostile, 1234, 32);
        }
    }
}
