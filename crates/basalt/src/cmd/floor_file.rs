//! `FloorFile`: the file a floor measurement (`basalt engine sync-floor`, `read-floor`) writes or
//! reads with `O_DIRECT`, written whole before it is measured and removed when dropped.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;

pub struct FloorFile {
    pub path: PathBuf,
    pub file: File,
}

/// How the measured file is opened, with `O_DIRECT` either way.
#[derive(Debug, Clone, Copy)]
pub enum Access {
    Read,
    Write,
}

impl FloorFile {
    /// Creates the file, writes all of it with `fill` and syncs it, so that no write measured
    /// later allocates blocks or converts unwritten extents (either would add a filesystem
    /// journal commit) and every read reaches the disk (a hole reads as zeros without one).
    pub fn create(path: &Path, size_bytes: u64, fill: u8, access: Access) -> anyhow::Result<FloorFile> {
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let chunk = vec![fill; 1 << 20];
        let mut left = size_bytes;
        while left > 0 {
            let take = left.min(chunk.len() as u64) as usize;
            file.write_all(&chunk[..take]).with_context(|| format!("cannot write {}", path.display()))?;
            left -= take as u64;
        }
        file.sync_all().with_context(|| format!("cannot sync {}", path.display()))?;
        drop(file);
        let mut options = OpenOptions::new();
        match access {
            Access::Read => options.read(true),
            Access::Write => options.write(true),
        };
        let file = options
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .with_context(|| format!("cannot open {} with O_DIRECT", path.display()))?;
        Ok(FloorFile { path: path.to_path_buf(), file })
    }
}

impl Drop for FloorFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
