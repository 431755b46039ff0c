//! Opening a disk for direct i/o: the file descriptor, the size and the sector size of a regular
//! file or a block device, and the errors that say what went wrong with which path.
//!
//! This is the only place that decides how a path becomes a disk, so `UringDisk` and the
//! `create_file` helper report failures the same way.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use platform::BUFFER_ALIGNMENT_BYTES;

/// The sector size reported for a regular file: the engine works in 4 KiB units, and 4 KiB
/// satisfies the direct i/o alignment of every common filesystem.
pub(crate) const FILE_SECTOR_SIZE_BYTES: u32 = 4096;

const _: () = assert!(FILE_SECTOR_SIZE_BYTES as usize <= BUFFER_ALIGNMENT_BYTES);

/// `_IOR(0x12, 114, size_t)` from `<linux/fs.h>`; the `libc` crate does not export it.
#[cfg(not(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
)))]
const BLKGETSIZE64: libc::Ioctl = 0x8008_1272;
/// `_IOR(0x12, 114, size_t)` on the architectures whose read direction bit sits at bit 30.
#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
))]
const BLKGETSIZE64: libc::Ioctl = 0x4008_1272;

#[derive(Debug, thiserror::Error)]
pub enum OpenDiskError {
    #[error("disk {} not found", .path.display())]
    NotFound { path: PathBuf },
    #[error("permission denied opening disk {} for reading and writing", .path.display())]
    PermissionDenied { path: PathBuf },
    #[error("disk {} is on a read-only filesystem or device", .path.display())]
    ReadOnly { path: PathBuf },
    #[error("disk {} is not a regular file or a block device", .path.display())]
    NotFileOrBlockDevice { path: PathBuf },
    #[error("disk {} is not a regular file", .path.display())]
    NotRegularFile { path: PathBuf },
    #[error("disk {} does not support direct i/o (O_DIRECT)", .path.display())]
    DirectIoUnsupported { path: PathBuf },
    #[error(
        "disk {} has logical sector_size_bytes={sector_size_bytes}, which is not a power of two \
         between 512 and {BUFFER_ALIGNMENT_BYTES}",
        .path.display()
    )]
    SectorSizeUnsupported { path: PathBuf, sector_size_bytes: u64 },
    #[error("no space left to allocate size_bytes={size_bytes} for disk {}", .path.display())]
    NoSpace { path: PathBuf, size_bytes: u64 },
    #[error("queue_depth={queue_depth} is outside 2..=32768")]
    InvalidQueueDepth { queue_depth: u32 },
    #[error(
        "cannot set up an io_uring for disk {} (disabled by the kernel.io_uring_disabled sysctl, \
         blocked by seccomp, or out of locked memory)",
        .path.display()
    )]
    RingSetup {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the kernel's io_uring lacks opcode={opcode} needed for disk {}", .path.display())]
    RingOpcodeUnsupported { path: PathBuf, opcode: &'static str },
    #[error("{operation} failed for disk {}", .path.display())]
    Io {
        path: PathBuf,
        operation: &'static str,
        #[source]
        source: io::Error,
    },
}

/// A disk opened for direct i/o, before a ring is attached to it.
#[derive(Debug)]
pub(crate) struct OpenedDisk {
    pub(crate) file: File,
    pub(crate) size_bytes: u64,
    pub(crate) sector_size_bytes: u32,
}

/// Opens `path` with `O_RDWR | O_DIRECT | O_CLOEXEC` and reads its size and sector size.
///
/// A regular file reports 4 KiB sectors and its length rounded down to whole sectors, since the
/// tail past the last whole sector cannot be reached with aligned i/o.
pub(crate) fn open_direct(path: &Path) -> Result<OpenedDisk, OpenDiskError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| open_error(path, source))?;
    let metadata =
        file.metadata().map_err(|source| OpenDiskError::Io { path: path.to_owned(), operation: "fstat", source })?;
    let file_type = metadata.file_type();
    if file_type.is_file() {
        let sector_size_bytes = u64::from(FILE_SECTOR_SIZE_BYTES);
        let size_bytes = metadata.len() / sector_size_bytes * sector_size_bytes;
        return Ok(OpenedDisk { file, size_bytes, sector_size_bytes: FILE_SECTOR_SIZE_BYTES });
    }
    if !file_type.is_block_device() {
        return Err(OpenDiskError::NotFileOrBlockDevice { path: path.to_owned() });
    }

    let mut size_bytes: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points at a live local, and
    // the descriptor is open for the duration of the call.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size_bytes as *mut u64) };
    if rc != 0 {
        return Err(OpenDiskError::Io {
            path: path.to_owned(),
            operation: "ioctl BLKGETSIZE64",
            source: io::Error::last_os_error(),
        });
    }
    let mut sector_size: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int through the pointer, which points at a live local, and
    // the descriptor is open for the duration of the call.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::BLKSSZGET, &mut sector_size as *mut libc::c_int) };
    if rc != 0 {
        return Err(OpenDiskError::Io {
            path: path.to_owned(),
            operation: "ioctl BLKSSZGET",
            source: io::Error::last_os_error(),
        });
    }
    let sector_size_bytes = match u32::try_from(sector_size) {
        Ok(bytes) if bytes.is_power_of_two() && (512..=4096).contains(&bytes) => bytes,
        _ => {
            return Err(OpenDiskError::SectorSizeUnsupported {
                path: path.to_owned(),
                // A negative size is reported as zero: it names the problem just as well.
                sector_size_bytes: u64::try_from(sector_size).unwrap_or(0),
            });
        }
    };
    assert!(sector_size_bytes as usize <= BUFFER_ALIGNMENT_BYTES);
    Ok(OpenedDisk { file, size_bytes, sector_size_bytes })
}

/// Creates the regular file `path` if it is missing and allocates its first `size_bytes` with
/// `fallocate` (mode 0), which extends the file but never shrinks it. Allocated blocks read as
/// zeros, but the caller decides whether to also write zeros (to avoid unwritten-extent
/// conversions on the data path).
pub(crate) fn create_file(path: &Path, size_bytes: u64) -> Result<(), OpenDiskError> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| open_error(path, source))?;
    let metadata =
        file.metadata().map_err(|source| OpenDiskError::Io { path: path.to_owned(), operation: "fstat", source })?;
    if !metadata.file_type().is_file() {
        return Err(OpenDiskError::NotRegularFile { path: path.to_owned() });
    }
    if size_bytes == 0 {
        // fallocate rejects an empty range, and there is nothing to allocate.
        return Ok(());
    }
    let Ok(size_bytes_off) = libc::off_t::try_from(size_bytes) else {
        return Err(OpenDiskError::Io {
            path: path.to_owned(),
            operation: "fallocate",
            source: io::Error::from_raw_os_error(libc::EFBIG),
        });
    };
    loop {
        // SAFETY: fallocate only reads its integer arguments, and the descriptor is open.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, size_bytes_off) };
        if rc == 0 {
            break;
        }
        let source = io::Error::last_os_error();
        match source.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ENOSPC) => return Err(OpenDiskError::NoSpace { path: path.to_owned(), size_bytes }),
            _ => return Err(OpenDiskError::Io { path: path.to_owned(), operation: "fallocate", source }),
        }
    }
    // The new length is metadata: make it durable before anyone relies on the file.
    file.sync_all().map_err(|source| OpenDiskError::Io { path: path.to_owned(), operation: "fsync", source })
}

fn open_error(path: &Path, source: io::Error) -> OpenDiskError {
    let path = path.to_owned();
    match source.raw_os_error() {
        Some(libc::ENOENT) => OpenDiskError::NotFound { path },
        Some(libc::EACCES | libc::EPERM) => OpenDiskError::PermissionDenied { path },
        Some(libc::EROFS) => OpenDiskError::ReadOnly { path },
        Some(libc::EISDIR) => OpenDiskError::NotFileOrBlockDevice { path },
        // open(2) reports EINVAL when the filesystem does not support O_DIRECT.
        Some(libc::EINVAL) => OpenDiskError::DirectIoUnsupported { path },
        _ => OpenDiskError::Io { path, operation: "open", source },
    }
}
