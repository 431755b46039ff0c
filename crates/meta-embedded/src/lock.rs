//! The exclusive lock that keeps two processes (or two opens in one process) from using the
//! same store directory at once, which would interleave their log appends.
//!
//! It is an `flock` on a lock file that is never replaced, so it holds across log and snapshot
//! renames, and the kernel releases it when the process dies, so a `kill -9` never leaves a
//! stale lock behind.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Holds the lock until dropped.
#[derive(Debug)]
pub struct LockFile {
    _file: File,
}

pub enum LockError {
    InUse,
    Io(io::Error),
}

impl LockFile {
    pub fn acquire(path: &Path) -> Result<LockFile, LockError> {
        let file = OpenOptions::new().create(true).truncate(false).write(true).open(path).map_err(LockError::Io)?;
        // SAFETY: `flock` takes a file descriptor that `file` keeps open for the call.
        let result = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if result != 0 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Err(LockError::InUse);
            }
            return Err(LockError::Io(error));
        }
        Ok(LockFile { _file: file })
    }
}
