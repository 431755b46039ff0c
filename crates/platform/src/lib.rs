//! The boundary between Basalt's deterministic core and the machine.
//!
//! The storage engine never touches a file descriptor: it talks to a [`Disk`], which is
//! implemented by io_uring for real runs (`platform-linux`) and by a simulated disk for tests
//! (`sim`), so every engine behaviour, including crashes, replays exactly from a seed.

mod buffer;

pub use buffer::{AlignedBuffer, BUFFER_ALIGNMENT_BYTES};

/// What a disk request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskOp {
    /// Reads `buffer.len()` bytes at `offset_bytes` into the buffer.
    Read,
    /// Writes the buffer at `offset_bytes`. Not durable until a later flush completes.
    Write,
    /// Writes the buffer, then flushes: on completion this write and every write that completed
    /// before it are durable. One submission, so the device sees the pair without a round trip
    /// through the caller.
    WriteFlush,
    /// Makes every write that completed before the flush was submitted durable. The buffer is
    /// empty.
    Flush,
    /// Writes the buffer; on completion this write, and only this one, is durable (forced unit
    /// access). Where the device or the kernel completes it inline this avoids the thread
    /// hand-off an fsync costs in io_uring, which is most of a small durable write's latency.
    WriteFua,
}

/// One queued request. The buffer travels with it and comes back in the completion, on success
/// and on failure, so the caller never loses ownership of memory the kernel may be using.
#[derive(Debug)]
pub struct DiskRequest {
    /// Chosen by the caller, returned in the completion.
    pub id: u64,
    pub op: DiskOp,
    pub offset_bytes: u64,
    pub buffer: AlignedBuffer,
}

#[derive(Debug)]
pub struct DiskCompletion {
    pub id: u64,
    pub op: DiskOp,
    pub offset_bytes: u64,
    pub buffer: AlignedBuffer,
    pub result: Result<(), DiskError>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiskError {
    #[error("i/o error errno={errno} at offset_bytes={offset_bytes}")]
    Io { errno: i32, offset_bytes: u64 },
    #[error("short transfer at offset_bytes={offset_bytes}: {done_bytes} of {expected_bytes} bytes")]
    Short { offset_bytes: u64, done_bytes: u64, expected_bytes: u64 },
    #[error("no space left on device at offset_bytes={offset_bytes}")]
    NoSpace { offset_bytes: u64 },
    #[error("request canceled")]
    Canceled,
}

/// A block device opened for direct I/O. Offsets and lengths are multiples of
/// `sector_size_bytes()`; buffers are aligned to [`BUFFER_ALIGNMENT_BYTES`].
///
/// Requests may complete in any order. A write that has completed is visible to later reads but
/// survives a power loss only after a flush that was submitted after its completion completes.
pub trait Disk {
    /// The unit of atomicity assumed for power loss, and of alignment.
    fn sector_size_bytes(&self) -> u32;
    fn size_bytes(&self) -> u64;
    /// Queues a request. Never blocks and never completes inside `submit`.
    fn submit(&mut self, request: DiskRequest);
    /// Hands queued requests to the device and moves finished ones into `completions`. Never
    /// blocks.
    fn reap(&mut self, completions: &mut Vec<DiskCompletion>);
    /// Hands queued requests to the device now, without reaping. Never blocks. Requests reach
    /// the device at the next `reap` or `wait` anyway; a caller that issues requests one at a
    /// time as others finish calls this after each, so the device is not left idle while the
    /// caller works through a batch of completions.
    fn push(&mut self) {}
    /// Blocks until at least one request has finished, or returns at once if none is in flight.
    fn wait(&mut self);
    /// Number of requests submitted and not yet reaped.
    fn in_flight_count(&self) -> usize;
}

/// Tells an event loop when a [`Disk`] may have completions to reap: the io_uring ring's
/// eventfd on Linux, the next deadline of a simulated disk. Spurious readiness is allowed; a
/// missed one is not (after `Ready`, anything that completes later makes it ready again).
pub trait DiskReady {
    /// `Ready` when a reap may find completions; otherwise registers `cx`'s waker.
    fn poll_ready(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()>;
}

impl<D: Disk + ?Sized> Disk for Box<D> {
    fn sector_size_bytes(&self) -> u32 {
        (**self).sector_size_bytes()
    }
    fn size_bytes(&self) -> u64 {
        (**self).size_bytes()
    }
    fn submit(&mut self, request: DiskRequest) {
        (**self).submit(request)
    }
    fn reap(&mut self, completions: &mut Vec<DiskCompletion>) {
        (**self).reap(completions)
    }
    fn push(&mut self) {
        (**self).push()
    }
    fn wait(&mut self) {
        (**self).wait()
    }
    fn in_flight_count(&self) -> usize {
        (**self).in_flight_count()
    }
}
