//! Linux implementations of Basalt's platform traits.
//!
//! [`UringDisk`] implements [`platform::Disk`] on one io_uring per disk, for a regular file or a
//! block device opened with `O_DIRECT`. Its [`CompletionNotifier`] (an eventfd the ring signals)
//! lets an event loop wait for disk completions and sockets on one thread; [`UringReady`] is
//! that wait on a tokio runtime ([`platform::DiskReady`]). This crate is an edge crate: it is
//! one of the few that may touch io_uring and libc, so the deterministic crates, and the OSD,
//! never do.

mod open;
mod uring_disk;
mod uring_ready;

pub use open::OpenDiskError;
pub use uring_disk::{CompletionNotifier, UringDisk, UringOptions};
pub use uring_ready::UringReady;
