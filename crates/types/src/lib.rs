//! What every layer of Basalt means by an object and a page, defined once: the engine stores
//! objects, the wire protocol names them, the client and the mon size volumes in pages.

use std::fmt;

/// The unit of I/O alignment and checksums everywhere: engine writes, wire ranges, volume sizes,
/// the block size the NBD gateway reports.
pub const PAGE_SIZE_BYTES: u32 = 4096;

/// The object size of a new cluster, unless its creator chooses another.
pub const OBJECT_SIZE_DEFAULT_BYTES: u32 = 128 * 1024;

/// An object: piece `stripe` of the volume whose inode is `inode`, up to the cluster's object
/// size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId {
    pub inode: u64,
    pub stripe: u64,
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}:{}", self.inode, self.stripe)
    }
}

const _: () = assert!(OBJECT_SIZE_DEFAULT_BYTES % PAGE_SIZE_BYTES == 0);
