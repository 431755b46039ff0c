//! The data path of an OSD as the commands see it: what it holds, making it ready to format,
//! formatting it and opening the engine on it.
//!
//! Formatting destroys data, so `inspect` looks for anything worth keeping before `osd init` or
//! `engine bench` writes: a Basalt engine, a filesystem, swap, LVM, LUKS or a partition table
//! (magic bytes checked here, no libblkid), or any non-zero byte in the first MiB.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::ops::Range;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use anyhow::{bail, Context};
use engine::layout::{Geometry, Superblock, SuperblockError, SUPERBLOCK_MAGIC, SUPERBLOCK_SIZE_BYTES};
use engine::{AlignedBuffer, Engine, EngineOptions, FormatOptions, OpenError};
use platform::{Disk, DiskCompletion, DiskOp, DiskRequest};
use platform_linux::{UringDisk, UringOptions, UringReady};

use crate::size::format_bytes;

/// How much of the start of a device must be zeros for it to count as empty.
const EMPTY_CHECK_BYTES: u64 = 1 << 20;

/// What a data path holds.
#[derive(Debug)]
pub enum Contents {
    /// Nothing at the path yet.
    Missing,
    /// The first MiB (or the whole file, if shorter) is zeros.
    Empty,
    /// A Basalt engine this build can open.
    Basalt(Superblock),
    /// A Basalt superblock this build cannot use: another format version, or damage.
    BasaltUnreadable(OpenError),
    /// A filesystem, volume or partition table signature.
    Signature(&'static str),
    NonZero {
        offset_bytes: u64,
    },
}

impl Contents {
    /// Why formatting `path` needs `--force`, or `None` if it holds nothing worth keeping.
    /// `basalt_ok` lets a command reformat an existing Basalt engine without `--force`.
    pub fn refusal(&self, path: &Path, basalt_ok: bool) -> Option<String> {
        let path = path.display();
        let what = match self {
            Contents::Missing | Contents::Empty => return None,
            Contents::Basalt(_) | Contents::BasaltUnreadable(_) if basalt_ok => return None,
            Contents::Basalt(superblock) => format!(
                "{path} holds a Basalt engine (format version {}, object size {}, osd id {})",
                engine::layout::FORMAT_VERSION,
                format_bytes(u64::from(superblock.geometry.object_size_bytes)),
                superblock.osd_id
            ),
            Contents::BasaltUnreadable(OpenError::Superblock(SuperblockError::Version { found })) => {
                format!("{path} holds a Basalt engine (format version {found}, which this build cannot read)")
            }
            Contents::BasaltUnreadable(error) => format!("{path} holds a damaged Basalt engine ({error})"),
            Contents::Signature(name) => format!("{path} holds {name}"),
            Contents::NonZero { offset_bytes } => {
                format!("{path} is not empty (a non-zero byte at offset_bytes={offset_bytes})")
            }
        };
        Some(format!("{what}; use --force to destroy it"))
    }
}

/// Looks at what `path` holds without changing it.
pub fn inspect(path: &Path) -> anyhow::Result<Contents> {
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Contents::Missing),
        Err(error) => return Err(error).with_context(|| format!("cannot stat {}", path.display())),
    };
    if !(metadata.is_file() || metadata.file_type().is_block_device()) {
        bail!("{} is not a regular file or a block device", path.display());
    }
    let mut head = Vec::new();
    File::open(path)
        .and_then(|file| file.take(EMPTY_CHECK_BYTES).read_to_end(&mut head))
        .with_context(|| format!("cannot read the first MiB of {}", path.display()))?;

    let basalt_magic = SUPERBLOCK_MAGIC.to_le_bytes();
    let superblock_copy_at = SUPERBLOCK_SIZE_BYTES as usize;
    if bytes_at(&head, 0, &basalt_magic) || bytes_at(&head, superblock_copy_at, &basalt_magic) {
        let mut disk = open_disk(path, UringOptions { queue_depth: 4, spin_before_wait_us: 0 })?;
        return Ok(match Engine::probe(&mut disk) {
            Ok(superblock) => Contents::Basalt(superblock),
            Err(error) => Contents::BasaltUnreadable(error),
        });
    }
    if let Some(name) = signature(&head) {
        return Ok(Contents::Signature(name));
    }
    match head.iter().position(|&byte| byte != 0) {
        Some(offset) => Ok(Contents::NonZero { offset_bytes: offset as u64 }),
        None => Ok(Contents::Empty),
    }
}

fn bytes_at(head: &[u8], offset: usize, magic: &[u8]) -> bool {
    head.get(offset..offset + magic.len()) == Some(magic)
}

/// The signatures of what people keep on drives, by their magic bytes.
fn signature(head: &[u8]) -> Option<&'static str> {
    if bytes_at(head, 1080, &0xEF53u16.to_le_bytes()) {
        return Some("an ext2/3/4 filesystem");
    }
    if bytes_at(head, 0, b"XFSB") {
        return Some("an XFS filesystem");
    }
    if bytes_at(head, 65600, b"_BHRfS_M") {
        return Some("a btrfs filesystem");
    }
    if bytes_at(head, 4086, b"SWAPSPACE2") || bytes_at(head, 4086, b"SWAP-SPACE") {
        return Some("a swap area");
    }
    // LVM puts its label in one of the first four 512-byte sectors.
    if (0..4).any(|sector| bytes_at(head, sector * 512, b"LABELONE")) {
        return Some("an LVM physical volume");
    }
    if bytes_at(head, 0, b"LUKS\xba\xbe") {
        return Some("a LUKS encrypted volume");
    }
    if bytes_at(head, 512, b"EFI PART") {
        return Some("a GPT partition table");
    }
    let partition_entries = head.get(446..510).unwrap_or(&[]);
    if bytes_at(head, 510, &[0x55, 0xAA]) && partition_entries.iter().any(|&byte| byte != 0) {
        return Some("an MBR partition table");
    }
    None
}

/// A path made ready for `format`: it exists, and `format_size_bytes` of it are to be used.
#[derive(Debug)]
pub struct Prepared {
    pub format_size_bytes: u64,
    pub created: bool,
    pub is_block_device: bool,
}

/// Creates or grows the file at `path`, or checks the block device, so that `size_bytes`
/// (default: all of it) can be formatted. `sparse` sizes a new or grown file with `ftruncate`,
/// so only written pages take space (`format` writes the journal); otherwise every block is
/// allocated and written with zeros.
/// The caller has already decided, with `inspect`, that the contents may be destroyed.
pub fn prepare(path: &Path, size_bytes: Option<u64>, sparse: bool) -> anyhow::Result<Prepared> {
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => Some(metadata),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => return Err(error).with_context(|| format!("cannot stat {}", path.display())),
    };
    let Some(metadata) = metadata else {
        let Some(size_bytes) = size_bytes else {
            bail!("{} does not exist; give --size to create it", path.display());
        };
        size_file(path, size_bytes, sparse)?;
        return Ok(Prepared { format_size_bytes: size_bytes, created: true, is_block_device: false });
    };
    if metadata.file_type().is_block_device() {
        let device_size_bytes = open_disk(path, UringOptions { queue_depth: 4, spin_before_wait_us: 0 })?.size_bytes();
        let format_size_bytes = match size_bytes {
            Some(size_bytes) if size_bytes > device_size_bytes => bail!(
                "--size {size_bytes} is larger than the block device {} ({device_size_bytes} bytes)",
                path.display()
            ),
            Some(size_bytes) => size_bytes,
            None => device_size_bytes,
        };
        return Ok(Prepared { format_size_bytes, created: false, is_block_device: true });
    }
    if !metadata.is_file() {
        bail!("{} is not a regular file or a block device", path.display());
    }
    let file_size_bytes = metadata.len();
    match size_bytes {
        Some(size_bytes) if size_bytes < file_size_bytes => bail!(
            "{} is {file_size_bytes} bytes, more than --size {size_bytes}; basalt never shrinks a file (remove it first)",
            path.display()
        ),
        Some(size_bytes) if size_bytes > file_size_bytes => {
            size_file(path, size_bytes, sparse)?;
            Ok(Prepared { format_size_bytes: size_bytes, created: false, is_block_device: false })
        }
        _ => Ok(Prepared { format_size_bytes: file_size_bytes, created: false, is_block_device: false }),
    }
}

fn size_file(path: &Path, size_bytes: u64, sparse: bool) -> anyhow::Result<()> {
    if !sparse {
        // Every block allocated and written, as a real drive has them: a block that was only
        // fallocated is "unwritten" to the filesystem, and the first write to it changes
        // metadata, which makes the flush after it commit the filesystem's journal.
        let old_size_bytes = std::fs::metadata(path).map(|metadata| metadata.len()).unwrap_or(0);
        UringDisk::create_file(path, size_bytes)?;
        return write_zeros(path, old_size_bytes / 4096 * 4096..size_bytes / 4096 * 4096);
    }
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.set_len(size_bytes)
        .with_context(|| format!("cannot set the length of {} to {size_bytes} bytes", path.display()))?;
    file.sync_all().with_context(|| format!("cannot fsync {}", path.display()))
}

pub fn open_disk(path: &Path, options: UringOptions) -> anyhow::Result<UringDisk> {
    // `OpenDiskError` messages already name the path.
    Ok(UringDisk::open(path, options)?)
}

/// An OSD's drive (`osd::OpenDrive`): `config.data_path` on an io_uring of
/// `config.queue_depth` entries, its completions waited for on the OSD's runtime.
pub fn open_osd_drive(config: &osd::OsdConfig) -> Result<osd::Drive, osd::OsdError> {
    let path = &config.data_path;
    let mut opened = UringDisk::open(path, UringOptions { queue_depth: config.queue_depth, spin_before_wait_us: 0 })
        .map_err(|error| osd::OsdError::OpenDisk { path: path.clone(), source: Box::new(error) })?;
    let ready = opened.completion_notifier().and_then(UringReady::new).map_err(osd::OsdError::Runtime)?;
    Ok(osd::Drive { disk: Box::new(opened), ready: Box::new(ready) })
}

/// Fails, before anything is created or written, if an engine cannot be laid out on
/// `size_bytes` with these options.
pub fn check_geometry(size_bytes: u64, object_size_bytes: u64, journal_size_bytes: Option<u64>) -> anyhow::Result<()> {
    Geometry::compute(size_bytes, object_size_bytes, journal_size_bytes)?;
    Ok(())
}

/// Formats the first `size_bytes` of `path` and returns the superblock the engine will open.
pub fn format(
    path: &Path,
    size_bytes: u64,
    object_size_bytes: u64,
    journal_size_bytes: Option<u64>,
) -> anyhow::Result<Superblock> {
    if std::fs::metadata(path).is_ok_and(|metadata| metadata.is_file()) {
        // The journal is written on every client write, so its blocks must not be holes or
        // unwritten extents of the file: see `size_file`. The data area of a sparse file fills
        // in as write-back and whole-object writes reach it.
        let geometry = Geometry::compute(size_bytes, object_size_bytes, journal_size_bytes)?;
        let journal_start_bytes = geometry.journal_offset_bytes;
        write_zeros(path, journal_start_bytes..journal_start_bytes + geometry.journal_size_bytes)?;
    }
    let disk = open_disk(path, UringOptions::default())?;
    let disk = SizedDisk { inner: disk, size_bytes };
    let options = FormatOptions { object_size_bytes, journal_size_bytes, nonce: random_nonce()? };
    let mut disk = Engine::format(disk, &options).with_context(|| format!("cannot format {}", path.display()))?;
    Engine::probe(&mut disk)
        .with_context(|| format!("cannot read back the superblock just written to {}", path.display()))
}

/// Writes zeros over `range` of `path` (page-aligned) with direct i/o, 1 MiB at a time and
/// several in flight, then flushes.
pub fn write_zeros(path: &Path, range: Range<u64>) -> anyhow::Result<()> {
    const CHUNK_BYTES: u64 = 1 << 20;
    const QUEUE_DEPTH: usize = 16;
    let mut disk = open_disk(path, UringOptions { queue_depth: 64, spin_before_wait_us: 0 })?;
    let mut offset_bytes = range.start;
    let mut next_id = 0u64;
    let mut in_flight_count = 0usize;
    let mut flushed = false;
    let mut buffers = Vec::new();
    let mut completions = Vec::new();
    loop {
        while in_flight_count < QUEUE_DEPTH && offset_bytes < range.end {
            let length_bytes = CHUNK_BYTES.min(range.end - offset_bytes);
            let buffer = match buffers.pop() {
                Some(buffer) if length_bytes == CHUNK_BYTES => buffer,
                _ => AlignedBuffer::zeroed(usize::try_from(length_bytes).expect("at most 1 MiB")),
            };
            disk.submit(DiskRequest { id: next_id, op: DiskOp::Write, offset_bytes, buffer });
            next_id += 1;
            offset_bytes += length_bytes;
            in_flight_count += 1;
        }
        if in_flight_count == 0 {
            if flushed {
                return Ok(());
            }
            disk.submit(DiskRequest {
                id: next_id,
                op: DiskOp::Flush,
                offset_bytes: 0,
                buffer: AlignedBuffer::empty(),
            });
            in_flight_count += 1;
            flushed = true;
            continue;
        }
        disk.reap(&mut completions);
        if completions.is_empty() {
            disk.wait();
            continue;
        }
        for completion in completions.drain(..) {
            in_flight_count -= 1;
            completion.result.with_context(|| format!("writing zeros to {} failed", path.display()))?;
            if completion.buffer.len() as u64 == CHUNK_BYTES {
                buffers.push(completion.buffer);
            }
        }
    }
}

/// Opens the engine at `path` (rebuilding its index and replaying its journal).
pub fn open_engine(path: &Path, options: UringOptions) -> anyhow::Result<Engine<UringDisk>> {
    let disk = open_disk(path, options)?;
    Engine::open(disk, &EngineOptions::default())
        .with_context(|| format!("cannot open the Basalt engine at {}", path.display()))
}

/// A random per-format nonce from the kernel's entropy pool. Never a constant: journal records
/// of an earlier format of the same drive are told apart by it.
pub fn random_nonce() -> anyhow::Result<u64> {
    let mut bytes = [0u8; 8];
    let mut filled = 0;
    while filled < bytes.len() {
        let rest = &mut bytes[filled..];
        // SAFETY: the pointer and length describe the live, writable tail of `bytes`.
        let rc = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if rc < 0 {
            let error = std::io::Error::last_os_error();
            if error.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            // Kernels without getrandom(2) still have the device.
            File::open("/dev/urandom")
                .and_then(|mut urandom| urandom.read_exact(&mut bytes))
                .context("cannot read random bytes from getrandom(2) or /dev/urandom")?;
            break;
        }
        filled += usize::try_from(rc).expect("getrandom returns a non-negative count");
    }
    // Zero is the one value a blank journal page could be confused with.
    Ok(u64::from_le_bytes(bytes).max(1))
}

/// Reads `length_bytes` at `offset_bytes` of `path` with buffered i/o (for checks in tests of
/// this module and for tools; the engine itself uses direct i/o).
#[cfg(test)]
fn read_at(path: &Path, offset_bytes: u64, length_bytes: usize) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;

    let mut bytes = vec![0; length_bytes];
    File::open(path)?.read_exact_at(&mut bytes, offset_bytes)?;
    Ok(bytes)
}

/// A disk that shows only its first `size_bytes`: formatting part of a block device.
pub struct SizedDisk<D: Disk> {
    pub inner: D,
    pub size_bytes: u64,
}

impl<D: Disk> Disk for SizedDisk<D> {
    fn sector_size_bytes(&self) -> u32 {
        self.inner.sector_size_bytes()
    }
    fn size_bytes(&self) -> u64 {
        self.size_bytes.min(self.inner.size_bytes())
    }
    fn submit(&mut self, request: DiskRequest) {
        assert!(request.offset_bytes + request.buffer.len() as u64 <= self.size_bytes);
        self.inner.submit(request)
    }
    fn reap(&mut self, completions: &mut Vec<DiskCompletion>) {
        self.inner.reap(completions)
    }
    fn push(&mut self) {
        self.inner.push()
    }
    fn wait(&mut self) {
        self.inner.wait()
    }
    fn in_flight_count(&self) -> usize {
        self.inner.in_flight_count()
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::{inspect, prepare, read_at, signature, Contents};

    struct TempPath(PathBuf);

    impl TempPath {
        fn new(name: &str) -> TempPath {
            let path = std::env::temp_dir().join(format!("basalt-device-{}-{name}", std::process::id()));
            let _ = std::fs::remove_file(&path);
            TempPath(path)
        }
    }

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn check(magic_at: &[(usize, &[u8])], expect: Option<&str>) {
        let mut head = vec![0u8; 1 << 20];
        for (offset, magic) in magic_at {
            head[*offset..offset + magic.len()].copy_from_slice(magic);
        }
        assert_eq!(signature(&head), expect);
    }

    #[test]
    fn recognises_signatures() {
        check(&[(1080, &[0x53, 0xEF])], Some("an ext2/3/4 filesystem"));
        check(&[(0, b"XFSB")], Some("an XFS filesystem"));
        check(&[(65600, b"_BHRfS_M")], Some("a btrfs filesystem"));
        check(&[(4086, b"SWAPSPACE2")], Some("a swap area"));
        check(&[(512, b"LABELONE")], Some("an LVM physical volume"));
        check(&[(0, b"LUKS\xba\xbe")], Some("a LUKS encrypted volume"));
        check(&[(512, b"EFI PART")], Some("a GPT partition table"));
        check(&[(510, &[0x55, 0xAA]), (446, &[0x80, 1, 1])], Some("an MBR partition table"));
        // A boot signature without partition entries is not a partition table.
        check(&[(510, &[0x55, 0xAA])], None);
        check(&[], None);
    }

    #[test]
    fn sparse_file_is_created_empty_and_grown() {
        let path = TempPath::new("sparse");
        assert!(matches!(inspect(&path.0).unwrap(), Contents::Missing));
        let prepared = prepare(&path.0, Some(8 << 20), true).unwrap();
        assert!(prepared.created);
        assert_eq!(prepared.format_size_bytes, 8 << 20);
        assert!(matches!(inspect(&path.0).unwrap(), Contents::Empty));
        assert_eq!(prepare(&path.0, Some(16 << 20), true).unwrap().format_size_bytes, 16 << 20);
        assert!(prepare(&path.0, Some(4 << 20), true).is_err());
        assert_eq!(read_at(&path.0, (16 << 20) - 4096, 4096).unwrap(), vec![0; 4096]);
    }

    #[test]
    fn non_zero_bytes_refuse_format() {
        let path = TempPath::new("nonzero");
        std::fs::write(&path.0, [0, 0, 7]).unwrap();
        let contents = inspect(&path.0).unwrap();
        assert!(matches!(contents, Contents::NonZero { offset_bytes: 2 }));
        let refusal = contents.refusal(&path.0, true).unwrap();
        assert!(refusal.contains("is not empty"), "{refusal}");
        assert!(refusal.ends_with("use --force to destroy it"), "{refusal}");
    }
}
