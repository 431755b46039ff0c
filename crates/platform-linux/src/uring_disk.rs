//! `UringDisk`: the [`Disk`] trait on io_uring, for a regular file or a block device opened with
//! `O_DIRECT`.
//!
//! Every request lives in a slot of a `stdx::SlotTable` until it completes, which keeps its
//! buffer alive while the kernel may use it. A request runs as one or more rounds: a round is the
//! SQEs submitted together (a read, a write, an fsync, or a write linked to an fsync for
//! `WriteFlush`), and a short transfer starts another round for the remainder. The `user_data` of
//! an SQE is the slot's id (renewed when a round ends, so a late CQE of a finished round names
//! nothing and is ignored) shifted left by one, with which SQE of the round it is in the low bit.
//!
//! `submit` only queues the request and copies SQEs into the shared submission ring; the kernel
//! sees them at the next `reap` or `wait`. At most `queue_depth` SQEs are in the submission ring
//! or the kernel at once, and the rest wait in `pending`. Because the completion ring has twice as
//! many entries as the submission ring, that bound also keeps the completion ring from
//! overflowing.
//!
//! [`UringDisk::completion_notifier`] registers an eventfd that the kernel signals whenever the
//! ring posts a completion, so an event loop can wait for disk completions and sockets together
//! (tokio's `AsyncFd` on the same thread) instead of blocking in `wait`.

use std::collections::VecDeque;
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, IoUring, Probe};
use platform::{Disk, DiskCompletion, DiskError, DiskOp, DiskRequest};
use stdx::SlotTable;

use crate::open::{self, OpenDiskError};

/// Options for [`UringDisk::open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UringOptions {
    /// Entries in the submission ring, and the most SQEs kept in the kernel at once (a
    /// `WriteFlush` takes two). The kernel rounds it up to a power of two.
    pub queue_depth: u32,
    /// How long `wait` polls the completion ring in user space, without system calls, before it
    /// blocks in the kernel. Zero blocks at once.
    pub spin_before_wait_us: u32,
}

impl Default for UringOptions {
    fn default() -> UringOptions {
        UringOptions { queue_depth: 256, spin_before_wait_us: 0 }
    }
}

const QUEUE_DEPTH_MIN: u32 = 2;
const QUEUE_DEPTH_MAX: u32 = 32768;

/// The largest transfer in one SQE. Linux caps one read or write just under 2 GiB; a whole number
/// of sectors below that keeps a continued transfer aligned.
const ROUND_SIZE_BYTES_MAX: u64 = 1 << 30;

const _: () = assert!(ROUND_SIZE_BYTES_MAX % open::FILE_SECTOR_SIZE_BYTES as u64 == 0);
const _: () = assert!(ROUND_SIZE_BYTES_MAX <= i32::MAX as u64);

/// The `user_data` of a round's first SQE: a read, a write or a lone fsync.
const PART_FIRST: u64 = 0;
/// The `user_data` of the fsync linked behind a write.
const PART_LINKED_FLUSH: u64 = 1;
/// Requests in flight at most (far above any queue depth): their slot ids leave the top bit of
/// `user_data` free for the part.
const SLOTS_MAX: usize = 1 << 31;

/// The SQEs of one round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    /// A read or a write of `size_bytes` at the request's offset plus its `done_bytes`.
    Transfer { size_bytes: u32 },
    /// A lone fsync.
    Flush,
    /// A write of `size_bytes` linked to an fsync.
    TransferThenFlush { size_bytes: u32 },
}

impl Round {
    /// The first round of a request, or the next one after `done_bytes` have been transferred.
    fn plan(op: DiskOp, remaining_bytes: u64) -> Round {
        let size_bytes = remaining_bytes.min(ROUND_SIZE_BYTES_MAX);
        let size_bytes = u32::try_from(size_bytes).expect("round size fits in u32");
        match op {
            DiskOp::Read | DiskOp::Write | DiskOp::WriteFua => Round::Transfer { size_bytes },
            DiskOp::Flush => Round::Flush,
            // The flush goes with the last part of the write.
            DiskOp::WriteFlush if remaining_bytes > ROUND_SIZE_BYTES_MAX => Round::Transfer { size_bytes },
            DiskOp::WriteFlush => Round::TransferThenFlush { size_bytes },
        }
    }

    fn sqe_count(self) -> u32 {
        match self {
            Round::Transfer { .. } | Round::Flush => 1,
            Round::TransferThenFlush { .. } => 2,
        }
    }
}

/// A request the kernel has not finished yet.
#[derive(Debug)]
struct InFlight {
    request: DiskRequest,
    done_bytes: u64,
    round: Round,
    /// The CQE result of the round's first SQE, once it has arrived.
    first_result: Option<i32>,
    /// The CQE result of the linked fsync, once it has arrived.
    flush_result: Option<i32>,
}

/// What happens to a request when a round ends.
enum Step {
    /// Another round, already planned in the request, is needed.
    Continue,
    Finish(Result<(), DiskError>),
}

/// A regular file or a block device driven through one io_uring.
///
/// Owned by one thread, like the ring: the OSD's event loop calls `submit`, `reap` and `wait`.
pub struct UringDisk {
    ring: IoUring,
    file: File,
    path: PathBuf,
    size_bytes: u64,
    sector_size_bytes: u32,
    spin_before_wait: Duration,
    /// Whether the write of a `WriteFlush` pair is submitted with `IOSQE_CQE_SKIP_SUCCESS`.
    skip_write_success_cqe: bool,
    /// The requests in flight. A slot's id is renewed when a round ends, so a late CQE of a
    /// finished round names nothing.
    slots: SlotTable<InFlight>,
    /// Slots whose next round is planned but not yet in the submission ring.
    pending: VecDeque<u64>,
    /// SQEs in the submission ring or in the kernel whose round has not ended.
    kernel_sqe_count: u32,
    kernel_sqe_count_max: u32,
    /// Finished requests not yet handed to `reap`.
    ready: Vec<DiskCompletion>,
    /// CQEs copied out of the completion ring, as `(user_data, result)`; kept to reuse its memory.
    cqe_scratch: Vec<(u64, i32)>,
    /// How many `wait` calls a completion ended during the spin, and how many blocked.
    wait_spin_hit_count: u64,
    wait_block_count: u64,
    /// CQEs that arrived after their round had ended.
    stale_cqe_count: u64,
    /// Whether an eventfd is registered with the ring (at most one can be).
    eventfd_registered: bool,
}

/// An eventfd the ring signals each time it posts a completion (`IORING_REGISTER_EVENTFD`).
///
/// It becomes readable when a completion may be waiting. The owner calls [`clear`](Self::clear)
/// before reaping, so a completion posted after the reap signals it again and none is missed.
/// Non-blocking and close-on-exec; the ring holds its own reference, so dropping this only stops
/// the notifications from being seen.
#[derive(Debug)]
pub struct CompletionNotifier {
    fd: OwnedFd,
}

impl CompletionNotifier {
    /// Resets the eventfd's counter, so it stays unreadable until the next completion.
    pub fn clear(&self) {
        let mut counter = [0u8; 8];
        loop {
            // SAFETY: reads at most 8 bytes into a live local array from an open descriptor.
            let rc = unsafe { libc::read(self.fd.as_raw_fd(), counter.as_mut_ptr().cast(), counter.len()) };
            if rc >= 0 {
                // An eventfd read returns the whole counter and resets it.
                return;
            }
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                // Already zero.
                Some(libc::EAGAIN) => return,
                _ => panic!("reading the completion eventfd failed: {}", io::Error::last_os_error()),
            }
        }
    }
}

impl AsRawFd for CompletionNotifier {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for CompletionNotifier {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl UringDisk {
    /// Opens a regular file or a block device with `O_RDWR | O_DIRECT | O_CLOEXEC` and sets up
    /// its ring.
    ///
    /// A block device reports its size and logical sector size. A regular file reports 4 KiB
    /// sectors and its length rounded down to whole sectors.
    pub fn open(path: &Path, options: UringOptions) -> Result<UringDisk, OpenDiskError> {
        if !(QUEUE_DEPTH_MIN..=QUEUE_DEPTH_MAX).contains(&options.queue_depth) {
            return Err(OpenDiskError::InvalidQueueDepth { queue_depth: options.queue_depth });
        }
        let opened = open::open_direct(path)?;
        let ring = IoUring::builder()
            .build(options.queue_depth)
            .map_err(|source| OpenDiskError::RingSetup { path: path.to_owned(), source })?;

        let mut probe = Probe::new();
        ring.submitter()
            .register_probe(&mut probe)
            .map_err(|source| OpenDiskError::RingSetup { path: path.to_owned(), source })?;
        for (code, name) in [
            (opcode::Read::CODE, "IORING_OP_READ"),
            (opcode::Write::CODE, "IORING_OP_WRITE"),
            (opcode::Fsync::CODE, "IORING_OP_FSYNC"),
        ] {
            if !probe.is_supported(code) {
                return Err(OpenDiskError::RingOpcodeUnsupported { path: path.to_owned(), opcode: name });
            }
        }

        let kernel_sqe_count_max = ring.params().sq_entries();
        assert!(kernel_sqe_count_max >= options.queue_depth);
        // At most one CQE per SQE is outstanding, so the completion ring never overflows.
        assert!(ring.params().cq_entries() >= kernel_sqe_count_max);
        let skip_write_success_cqe = ring.params().is_feature_skip_cqe_on_success();
        let cq_entries = usize::try_from(ring.params().cq_entries()).expect("fits in usize");
        Ok(UringDisk {
            ring,
            file: opened.file,
            path: path.to_owned(),
            size_bytes: opened.size_bytes,
            sector_size_bytes: opened.sector_size_bytes,
            spin_before_wait: Duration::from_micros(u64::from(options.spin_before_wait_us)),
            skip_write_success_cqe,
            slots: SlotTable::new(SLOTS_MAX),
            pending: VecDeque::new(),
            kernel_sqe_count: 0,
            kernel_sqe_count_max,
            ready: Vec::new(),
            cqe_scratch: Vec::with_capacity(cq_entries),
            wait_spin_hit_count: 0,
            wait_block_count: 0,
            stale_cqe_count: 0,
            eventfd_registered: false,
        })
    }

    /// Creates an eventfd and registers it with the ring: from now on the kernel signals it for
    /// every completion it posts. A ring takes one eventfd; a second call fails with `EBUSY`.
    ///
    /// Submissions still reach the kernel only in `reap` and `wait`: an event loop that waits on
    /// the notifier calls `reap` after queueing requests, and again whenever the notifier fires.
    pub fn completion_notifier(&mut self) -> io::Result<CompletionNotifier> {
        if self.eventfd_registered {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        // SAFETY: eventfd only reads its integer arguments.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor eventfd just opened, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        self.ring.submitter().register_eventfd(fd.as_raw_fd())?;
        self.eventfd_registered = true;
        Ok(CompletionNotifier { fd })
    }

    /// Creates the regular file `path` if it is missing and allocates its first `size_bytes`
    /// with `fallocate` (mode 0), which extends the file but never shrinks it. The blocks read as
    /// zeros; whether to also write zeros is the caller's choice.
    pub fn create_file(path: &Path, size_bytes: u64) -> Result<(), OpenDiskError> {
        open::create_file(path, size_bytes)
    }

    /// Copies the SQEs of pending rounds into the submission ring while the SQE budget allows.
    /// Touches only the shared ring memory, never the kernel.
    fn fill_sq(&mut self) {
        let fd = types::Fd(self.file.as_raw_fd());
        while let Some(&slot) = self.pending.front() {
            let in_flight = self.slots.get_mut(slot).expect("a pending slot is live");
            let sqe_count = in_flight.round.sqe_count();
            if self.kernel_sqe_count + sqe_count > self.kernel_sqe_count_max {
                break;
            }
            let (first, linked) = round_entries(fd, slot, in_flight, self.skip_write_success_cqe);
            let mut sq = self.ring.submission();
            // Every SQE in the ring is counted in `kernel_sqe_count`, and the budget is the ring's
            // capacity, so there is room.
            assert!(sq.capacity() - sq.len() >= sqe_count as usize);
            // SAFETY: the SQEs point into the request's buffer, whose heap allocation stays in
            // the slab and does not move until the round's CQEs have arrived (`Drop` waits for
            // them too), and at the file descriptor, which lives as long as the ring.
            let pushed = unsafe {
                match &linked {
                    Some(linked) => sq.push_multiple(&[first, linked.clone()]),
                    None => sq.push(&first),
                }
            };
            pushed.expect("the submission ring has room");
            drop(sq);
            self.pending.pop_front();
            self.kernel_sqe_count += sqe_count;
        }
    }

    /// Hands the submission ring to the kernel without waiting, refilling it from `pending` while
    /// the kernel makes progress.
    fn flush_submissions(&mut self) {
        loop {
            self.fill_sq();
            let sq_len = self.ring.submission().len();
            let cq_overflow = self.ring.submission().cq_overflow();
            if sq_len == 0 && !cq_overflow {
                return;
            }
            let mut cqe_count = 0;
            match self.ring.submitter().submit() {
                Ok(_) => {}
                Err(error) => match error.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    // The completion ring is overflowing or the kernel is short of memory: make
                    // room by moving completions out.
                    Some(libc::EBUSY | libc::EAGAIN) => cqe_count += self.drain_cq(),
                    _ => panic!("io_uring_enter failed for disk {}: {error}", self.path.display()),
                },
            }
            if cq_overflow {
                cqe_count += self.drain_cq();
            }
            let sq_len_after = self.ring.submission().len();
            if sq_len_after == sq_len && cqe_count == 0 {
                return; // No progress; the next `reap` or `wait` tries again.
            }
        }
    }

    /// Moves every CQE out of the completion ring and applies it. Returns how many there were.
    fn drain_cq(&mut self) -> usize {
        let mut scratch = std::mem::take(&mut self.cqe_scratch);
        scratch.clear();
        scratch.extend(self.ring.completion().map(|cqe| (cqe.user_data(), cqe.result())));
        for &(user_data, result) in &scratch {
            self.on_cqe(user_data, result);
        }
        let cqe_count = scratch.len();
        self.cqe_scratch = scratch;
        cqe_count
    }

    fn on_cqe(&mut self, user_data: u64, result: i32) {
        let part = user_data & 1;
        let slot = user_data >> 1;
        let Some(in_flight) = self.slots.get_mut(slot) else {
            // A CQE of a round that already ended. With CQE skipping the kernel posts no CQE for
            // an fsync canceled behind a failed write; should one come anyway, it lands here.
            self.stale_cqe_count += 1;
            return;
        };
        if part == PART_FIRST {
            assert!(in_flight.first_result.is_none());
            in_flight.first_result = Some(result);
        } else {
            assert_eq!(part, PART_LINKED_FLUSH);
            assert!(matches!(in_flight.round, Round::TransferThenFlush { .. }));
            assert!(in_flight.flush_result.is_none());
            in_flight.flush_result = Some(result);
        }
        if !round_ended(in_flight, self.skip_write_success_cqe) {
            return;
        }
        // Its SQEs leave the budget, and any later CQE of this round is stale: the request goes
        // on under a new id, or leaves the table.
        let sqe_count = in_flight.round.sqe_count();
        assert!(self.kernel_sqe_count >= sqe_count);
        self.kernel_sqe_count -= sqe_count;

        match round_step(in_flight, self.sector_size_bytes) {
            Step::Continue => {
                let slot = self.slots.renew(slot).expect("the slot is live");
                self.pending.push_back(slot);
            }
            Step::Finish(result) => {
                let in_flight = self.slots.remove(slot).expect("the slot is live");
                let request = in_flight.request;
                self.ready.push(DiskCompletion {
                    id: request.id,
                    op: request.op,
                    offset_bytes: request.offset_bytes,
                    buffer: request.buffer,
                    result,
                });
            }
        }
    }

    /// Polls the completion ring without system calls for up to `spin_before_wait`. Returns
    /// whether a CQE arrived.
    fn spin_for_cqe(&mut self) -> bool {
        let deadline = Instant::now() + self.spin_before_wait;
        loop {
            if !self.ring.completion().is_empty() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            for _ in 0..64 {
                std::hint::spin_loop();
            }
        }
    }
}

/// Builds the SQEs of the request's current round.
fn round_entries(
    fd: types::Fd,
    slot: u64,
    in_flight: &mut InFlight,
    skip_write_success_cqe: bool,
) -> (squeue::Entry, Option<squeue::Entry>) {
    assert!(slot >> 63 == 0, "slot ids leave the top bit free");
    let user_data = slot << 1;
    let done_bytes = usize::try_from(in_flight.done_bytes).expect("fits in usize");
    let offset_bytes = in_flight.request.offset_bytes + in_flight.done_bytes;
    let op = in_flight.request.op;
    let transfer = |size_bytes: u32, buffer: &mut platform::AlignedBuffer| {
        let end_bytes = done_bytes + size_bytes as usize;
        let target = buffer[done_bytes..end_bytes].as_mut_ptr();
        match op {
            DiskOp::Read => opcode::Read::new(fd, target, size_bytes).offset(offset_bytes).build(),
            DiskOp::Write | DiskOp::WriteFlush => {
                opcode::Write::new(fd, target.cast_const(), size_bytes).offset(offset_bytes).build()
            }
            // RWF_DSYNC: the kernel makes the write durable before completing it (FUA where the
            // device has it, else a cache flush), inline rather than through an io-wq worker.
            DiskOp::WriteFua => opcode::Write::new(fd, target.cast_const(), size_bytes)
                .offset(offset_bytes)
                .rw_flags(libc::RWF_DSYNC)
                .build(),
            DiskOp::Flush => unreachable!("a flush transfers nothing"),
        }
    };
    let fsync = || opcode::Fsync::new(fd).flags(types::FsyncFlags::DATASYNC).build();
    match in_flight.round {
        Round::Transfer { size_bytes } => {
            let entry = transfer(size_bytes, &mut in_flight.request.buffer);
            (entry.user_data(user_data | PART_FIRST), None)
        }
        Round::Flush => (fsync().user_data(user_data | PART_FIRST), None),
        Round::TransferThenFlush { size_bytes } => {
            let mut flags = squeue::Flags::IO_LINK;
            if skip_write_success_cqe {
                flags |= squeue::Flags::SKIP_SUCCESS;
            }
            let write = transfer(size_bytes, &mut in_flight.request.buffer);
            (
                write.flags(flags).user_data(user_data | PART_FIRST),
                Some(fsync().user_data(user_data | PART_LINKED_FLUSH)),
            )
        }
    }
}

/// Whether every CQE the current round will post has arrived.
fn round_ended(in_flight: &InFlight, skip_write_success_cqe: bool) -> bool {
    match in_flight.round {
        Round::Transfer { .. } | Round::Flush => in_flight.first_result.is_some(),
        Round::TransferThenFlush { size_bytes } => {
            match (in_flight.first_result, in_flight.flush_result) {
                (Some(_), Some(_)) => true,
                (None, None) => false,
                // With CQE skipping, a complete write posts nothing, so the fsync's CQE ends the
                // round, unless it says the link was broken by a failed write whose CQE follows.
                (None, Some(flush)) => skip_write_success_cqe && flush != -libc::ECANCELED,
                // With CQE skipping, a failed or short write posts its CQE and the kernel skips
                // the CQE of the fsync it cancels.
                (Some(write), None) => skip_write_success_cqe && i64::from(write) != i64::from(size_bytes),
            }
        }
    }
}

/// Decides what follows the round that just ended: another round or the completion.
fn round_step(in_flight: &mut InFlight, sector_size_bytes: u32) -> Step {
    let request_offset_bytes = in_flight.request.offset_bytes;
    let request_size_bytes = in_flight.request.buffer.len() as u64;
    let (size_bytes, linked_flush) = match in_flight.round {
        Round::Flush => {
            let result = in_flight.first_result.expect("the round ended");
            return Step::Finish(errno_result(result, request_offset_bytes));
        }
        Round::Transfer { size_bytes } => (size_bytes, false),
        Round::TransferThenFlush { size_bytes } => (size_bytes, true),
    };
    // With CQE skipping, a write that posted nothing transferred everything.
    let transferred = in_flight.first_result.map_or(i64::from(size_bytes), i64::from);
    let Ok(transferred_bytes) = u64::try_from(transferred) else {
        // The write's error, not the -ECANCELED of the fsync linked behind it.
        let errno = i32::try_from(-transferred).expect("errno fits in i32");
        let failed_offset_bytes = request_offset_bytes + in_flight.done_bytes;
        return Step::Finish(Err(disk_error(errno, failed_offset_bytes)));
    };
    assert!(transferred_bytes <= u64::from(size_bytes));
    in_flight.done_bytes += transferred_bytes;
    assert!(in_flight.done_bytes <= request_size_bytes);
    let remaining_bytes = request_size_bytes - in_flight.done_bytes;

    if transferred_bytes < u64::from(size_bytes) {
        // A short transfer continues after the part that was done while that stays aligned. A
        // read that reaches the end of a regular file ends here, when the next round reads 0.
        if transferred_bytes > 0 && in_flight.done_bytes % u64::from(sector_size_bytes) == 0 {
            start_round(in_flight, Round::plan(in_flight.request.op, remaining_bytes));
            return Step::Continue;
        }
        return Step::Finish(Err(DiskError::Short {
            offset_bytes: request_offset_bytes,
            done_bytes: in_flight.done_bytes,
            expected_bytes: request_size_bytes,
        }));
    }
    if linked_flush {
        assert_eq!(remaining_bytes, 0);
        let flush = in_flight.flush_result.expect("a complete write's fsync has posted its CQE");
        return Step::Finish(errno_result(flush, request_offset_bytes));
    }
    if remaining_bytes > 0 {
        start_round(in_flight, Round::plan(in_flight.request.op, remaining_bytes));
        return Step::Continue;
    }
    // The last round of a `WriteFlush` always carries the fsync.
    assert_ne!(in_flight.request.op, DiskOp::WriteFlush);
    Step::Finish(Ok(()))
}

fn start_round(in_flight: &mut InFlight, round: Round) {
    in_flight.round = round;
    in_flight.first_result = None;
    in_flight.flush_result = None;
}

fn errno_result(result: i32, offset_bytes: u64) -> Result<(), DiskError> {
    if result >= 0 {
        Ok(())
    } else {
        Err(disk_error(-result, offset_bytes))
    }
}

fn disk_error(errno: i32, offset_bytes: u64) -> DiskError {
    assert!(errno > 0);
    match errno {
        libc::ENOSPC => DiskError::NoSpace { offset_bytes },
        libc::ECANCELED => DiskError::Canceled,
        _ => DiskError::Io { errno, offset_bytes },
    }
}

fn is_retryable(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EINTR | libc::EBUSY | libc::EAGAIN))
}

impl Disk for UringDisk {
    fn sector_size_bytes(&self) -> u32 {
        self.sector_size_bytes
    }

    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn submit(&mut self, request: DiskRequest) {
        let round = Round::plan(request.op, request.buffer.len() as u64);
        let in_flight = InFlight { request, done_bytes: 0, round, first_result: None, flush_result: None };
        let slot = self.slots.insert(in_flight).unwrap_or_else(|_| panic!("{SLOTS_MAX} disk requests in flight"));
        self.pending.push_back(slot);
        self.fill_sq();
    }

    fn reap(&mut self, completions: &mut Vec<DiskCompletion>) {
        self.flush_submissions();
        self.drain_cq();
        if !self.pending.is_empty() {
            // Continuations of short transfers, and requests that waited for budget.
            self.flush_submissions();
        }
        completions.append(&mut self.ready);
    }

    fn push(&mut self) {
        self.flush_submissions();
    }

    fn wait(&mut self) {
        if !self.ready.is_empty() || self.slots.is_empty() {
            return;
        }
        self.flush_submissions();
        self.drain_cq();
        if !self.ready.is_empty() {
            return;
        }
        if !self.spin_before_wait.is_zero() && self.spin_for_cqe() {
            self.drain_cq();
            if !self.ready.is_empty() {
                self.wait_spin_hit_count += 1;
                return;
            }
        }
        loop {
            self.flush_submissions();
            // A live request with no SQE in the kernel would never complete, and this would
            // block forever.
            assert!(self.kernel_sqe_count > 0);
            self.wait_block_count += 1;
            if let Err(error) = self.ring.submitter().submit_and_wait(1) {
                if !is_retryable(&error) {
                    panic!("io_uring_enter failed for disk {}: {error}", self.path.display());
                }
            }
            self.drain_cq();
            if !self.ready.is_empty() {
                return;
            }
        }
    }

    fn in_flight_count(&self) -> usize {
        self.slots.len() + self.ready.len()
    }
}

impl Drop for UringDisk {
    fn drop(&mut self) {
        // The kernel may still read from or write into the buffers of requests it holds, so
        // those finish before the buffers are freed. Pending rounds never reached the kernel.
        self.pending.clear();
        while self.kernel_sqe_count > 0 {
            if let Err(error) = self.ring.submitter().submit_and_wait(1) {
                if !is_retryable(&error) {
                    // The buffers cannot be shown to be idle: leak them rather than let the
                    // kernel write into freed memory.
                    std::mem::forget(std::mem::replace(&mut self.slots, SlotTable::new(0)));
                    return;
                }
            }
            self.drain_cq();
            self.pending.clear();
        }
    }
}

impl fmt::Debug for UringDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UringDisk")
            .field("path", &self.path)
            .field("size_bytes", &self.size_bytes)
            .field("sector_size_bytes", &self.sector_size_bytes)
            .field("in_flight_count", &self.in_flight_count())
            .field("kernel_sqe_count", &self.kernel_sqe_count)
            .field("skip_write_success_cqe", &self.skip_write_success_cqe)
            .field("wait_spin_hit_count", &self.wait_spin_hit_count)
            .field("wait_block_count", &self.wait_block_count)
            .field("stale_cqe_count", &self.stale_cqe_count)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use platform::AlignedBuffer;
    use std::sync::atomic::{AtomicU64, Ordering};

    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;

    /// A file under the temporary directory, removed when dropped.
    struct TempFile {
        path: PathBuf,
    }

    impl TempFile {
        fn new(name: &str, size_bytes: u64) -> TempFile {
            static COUNTER: AtomicU64 = AtomicU64::new(0);
            let index = COUNTER.fetch_add(1, Ordering::Relaxed);
            let file_name = format!("basalt-uring-disk-{}-{name}-{index}", std::process::id());
            let path = std::env::temp_dir().join(file_name);
            UringDisk::create_file(&path, size_bytes).expect("create the test file");
            TempFile { path }
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    fn options(queue_depth: u32, spin_before_wait_us: u32) -> UringOptions {
        UringOptions { queue_depth, spin_before_wait_us }
    }

    /// A byte pattern that differs per request and per position.
    fn pattern(seed: u64, size_bytes: usize) -> AlignedBuffer {
        let mut buffer = AlignedBuffer::zeroed(size_bytes);
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        for chunk in buffer.chunks_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
        }
        buffer
    }

    /// Submits every request, then reaps and waits until all have completed. Checks that each
    /// completion carries back its own id, op, offset and buffer allocation, and returns the
    /// completions ordered by id.
    fn run(disk: &mut UringDisk, requests: Vec<DiskRequest>) -> Vec<DiskCompletion> {
        let expected: Vec<(u64, DiskOp, u64, usize, *const u8)> =
            requests.iter().map(|r| (r.id, r.op, r.offset_bytes, r.buffer.len(), r.buffer.as_ptr())).collect();
        let count = requests.len();
        let in_flight_before = disk.in_flight_count();
        for request in requests {
            disk.submit(request);
        }
        assert_eq!(disk.in_flight_count(), in_flight_before + count);
        let mut completions = Vec::new();
        while completions.len() < count {
            disk.reap(&mut completions);
            if completions.len() < count {
                disk.wait();
            }
        }
        assert_eq!(completions.len(), count);
        assert_eq!(disk.in_flight_count(), in_flight_before);
        completions.sort_by_key(|c| c.id);
        let mut expected = expected;
        expected.sort_by_key(|e| e.0);
        for (completion, (id, op, offset_bytes, size_bytes, ptr)) in completions.iter().zip(expected) {
            assert_eq!(completion.id, id);
            assert_eq!(completion.op, op);
            assert_eq!(completion.offset_bytes, offset_bytes);
            assert_eq!(completion.buffer.len(), size_bytes);
            assert_eq!(completion.buffer.as_ptr(), ptr);
        }
        completions
    }

    fn request(id: u64, op: DiskOp, offset_bytes: u64, buffer: AlignedBuffer) -> DiskRequest {
        DiskRequest { id, op, offset_bytes, buffer }
    }

    /// Writes 64 requests of mixed sizes at once, reads them back at once, and compares.
    fn check_write_read_back(queue_depth: u32, spin_before_wait_us: u32) -> UringDisk {
        let sizes = [4 * KIB, 128 * KIB, MIB];
        let request_count = 64;
        // Each request gets its own 1 MiB region, at an offset inside it that depends on the id.
        let file = TempFile::new("write-read", (request_count * MIB) as u64);
        let mut disk =
            UringDisk::open(&file.path, options(queue_depth, spin_before_wait_us)).expect("open the test file");
        assert_eq!(disk.sector_size_bytes(), 4096);
        assert_eq!(disk.size_bytes(), (request_count * MIB) as u64);

        let layout: Vec<(u64, u64, usize)> = (0..request_count)
            .map(|index| {
                let size_bytes = sizes[index % sizes.len()];
                let slack_bytes = MIB - size_bytes;
                let offset_in_region = (index * 4 * KIB) % (slack_bytes + 4 * KIB);
                let offset_bytes = (index * MIB + offset_in_region) as u64;
                (index as u64 + 100, offset_bytes, size_bytes)
            })
            .collect();

        let writes = layout
            .iter()
            .map(|&(id, offset_bytes, size_bytes)| request(id, DiskOp::Write, offset_bytes, pattern(id, size_bytes)))
            .collect();
        for completion in run(&mut disk, writes) {
            assert_eq!(completion.result, Ok(()), "write id={}", completion.id);
            assert_eq!(completion.buffer.as_slice(), pattern(completion.id, completion.buffer.len()).as_slice());
        }

        let reads = layout
            .iter()
            .map(|&(id, offset_bytes, size_bytes)| {
                request(id, DiskOp::Read, offset_bytes, AlignedBuffer::zeroed(size_bytes))
            })
            .collect();
        for completion in run(&mut disk, reads) {
            assert_eq!(completion.result, Ok(()), "read id={}", completion.id);
            let expected = pattern(completion.id, completion.buffer.len());
            assert!(completion.buffer.as_slice() == expected.as_slice(), "read id={}", completion.id);
        }
        disk
    }

    #[test]
    fn write_read_back_many_in_flight() {
        check_write_read_back(256, 0);
    }

    #[test]
    fn write_read_back_small_queue_depth() {
        // 64 requests through 4 submission ring entries: most wait in `pending`.
        check_write_read_back(4, 0);
    }

    #[test]
    fn write_read_back_spinning() {
        // With a long spin every wait should end in user space, without blocking in the kernel.
        let disk = check_write_read_back(64, 2_000_000);
        assert!(disk.wait_spin_hit_count > 0, "{disk:?}");
        assert_eq!(disk.wait_block_count, 0, "{disk:?}");
    }

    #[test]
    fn write_flush_and_flush_complete() {
        check_write_flush_and_flush(true);
    }

    #[test]
    fn write_flush_and_flush_complete_without_cqe_skipping() {
        check_write_flush_and_flush(false);
    }

    fn check_write_flush_and_flush(skip_write_success_cqe: bool) {
        let file = TempFile::new("write-flush", 4 * MIB as u64);
        let mut disk = open_with_skip(&file.path, skip_write_success_cqe);
        let mut requests: Vec<DiskRequest> = (0..32u64)
            .map(|id| {
                let size_bytes = if id % 2 == 0 { 4 * KIB } else { 64 * KIB };
                request(id, DiskOp::WriteFlush, id * 128 * KIB as u64, pattern(id, size_bytes))
            })
            .collect();
        requests.push(request(32, DiskOp::Flush, 0, AlignedBuffer::empty()));
        requests.push(request(33, DiskOp::Flush, 0, AlignedBuffer::empty()));
        for completion in run(&mut disk, requests) {
            assert_eq!(completion.result, Ok(()), "id={}", completion.id);
        }

        let reads = (0..32u64)
            .map(|id| {
                let size_bytes = if id % 2 == 0 { 4 * KIB } else { 64 * KIB };
                request(id, DiskOp::Read, id * 128 * KIB as u64, AlignedBuffer::zeroed(size_bytes))
            })
            .collect();
        for completion in run(&mut disk, reads) {
            assert_eq!(completion.result, Ok(()));
            assert!(completion.buffer.as_slice() == pattern(completion.id, completion.buffer.len()).as_slice());
        }
    }

    #[test]
    fn forced_unit_access_writes_complete_and_read_back() {
        let file = TempFile::new("write-fua", 4 * MIB as u64);
        let mut disk = UringDisk::open(&file.path, UringOptions::default()).expect("open");
        let writes =
            (0..16u64).map(|id| request(id, DiskOp::WriteFua, id * 64 * KIB as u64, pattern(id, 8 * KIB))).collect();
        for completion in run(&mut disk, writes) {
            assert_eq!(completion.result, Ok(()), "id={}", completion.id);
        }
        let reads = (0..16u64)
            .map(|id| request(id, DiskOp::Read, id * 64 * KIB as u64, AlignedBuffer::zeroed(8 * KIB)))
            .collect();
        for completion in run(&mut disk, reads) {
            assert_eq!(completion.result, Ok(()));
            assert!(completion.buffer.as_slice() == pattern(completion.id, 8 * KIB).as_slice());
        }
        // A misaligned forced write fails like any write, and the disk keeps working.
        let completions = run(&mut disk, vec![request(20, DiskOp::WriteFua, 100, pattern(20, 4096))]);
        assert_eq!(completions[0].result, Err(DiskError::Io { errno: libc::EINVAL, offset_bytes: 100 }));
    }

    /// Opens `path` and, when `skip_write_success_cqe` is false, makes the disk handle both CQEs
    /// of a `WriteFlush` pair as on a kernel without `IOSQE_CQE_SKIP_SUCCESS`.
    fn open_with_skip(path: &Path, skip_write_success_cqe: bool) -> UringDisk {
        let mut disk = UringDisk::open(path, UringOptions::default()).expect("open");
        disk.skip_write_success_cqe &= skip_write_success_cqe;
        disk
    }

    fn check_misaligned_writes_fail(skip_write_success_cqe: bool) {
        let file = TempFile::new("misaligned", MIB as u64);
        let mut disk = open_with_skip(&file.path, skip_write_success_cqe);
        let einval = |offset_bytes| Err(DiskError::Io { errno: libc::EINVAL, offset_bytes });
        // A length that is not a multiple of any sector size, and an offset that is not aligned
        // either. Reads are left out: ext4 serves misaligned direct reads through the page cache.
        let completions = run(
            &mut disk,
            vec![
                request(1, DiskOp::Write, 4096, pattern(1, 1000)),
                request(2, DiskOp::WriteFlush, 12288, pattern(2, 1000)),
                request(3, DiskOp::Write, 100, pattern(3, 4096)),
                request(4, DiskOp::WriteFlush, 100, pattern(4, 4096)),
            ],
        );
        assert_eq!(completions[0].result, einval(4096));
        // The write's error, not the -ECANCELED of the fsync linked behind it.
        assert_eq!(completions[1].result, einval(12288));
        assert_eq!(completions[2].result, einval(100));
        assert_eq!(completions[3].result, einval(100));
        // Each failed pair posted exactly the CQEs its round expected.
        assert_eq!(disk.stale_cqe_count, 0, "{disk:?}");

        let completions = run(
            &mut disk,
            vec![
                request(5, DiskOp::WriteFlush, 4096, pattern(5, 4096)),
                request(6, DiskOp::Flush, 0, AlignedBuffer::empty()),
            ],
        );
        assert!(completions.iter().all(|c| c.result.is_ok()));
        let completions = run(&mut disk, vec![request(7, DiskOp::Read, 4096, AlignedBuffer::zeroed(4096))]);
        assert_eq!(completions[0].result, Ok(()));
        assert!(completions[0].buffer.as_slice() == pattern(5, 4096).as_slice());
        assert_eq!(disk.kernel_sqe_count, 0);
    }

    #[test]
    fn misaligned_writes_fail_and_the_disk_keeps_working() {
        check_misaligned_writes_fail(true);
    }

    #[test]
    fn misaligned_writes_fail_without_cqe_skipping() {
        check_misaligned_writes_fail(false);
    }

    #[test]
    fn read_past_end_of_file_is_short() {
        let file = TempFile::new("past-end", MIB as u64);
        let mut disk = UringDisk::open(&file.path, UringOptions::default()).expect("open");
        let end_bytes = MIB as u64;
        let completions = run(
            &mut disk,
            vec![
                request(1, DiskOp::Read, end_bytes, AlignedBuffer::zeroed(4096)),
                request(2, DiskOp::Read, end_bytes - 4096, AlignedBuffer::zeroed(16384)),
                request(3, DiskOp::Read, end_bytes - 4096, AlignedBuffer::zeroed(4096)),
            ],
        );
        assert_eq!(
            completions[0].result,
            Err(DiskError::Short { offset_bytes: end_bytes, done_bytes: 0, expected_bytes: 4096 })
        );
        assert_eq!(
            completions[1].result,
            Err(DiskError::Short { offset_bytes: end_bytes - 4096, done_bytes: 4096, expected_bytes: 16384 })
        );
        assert_eq!(completions[2].result, Ok(()));
    }

    /// Whether the notifier becomes readable within `timeout_ms`.
    fn readable(notifier: &CompletionNotifier, timeout_ms: i32) -> bool {
        let mut pollfd = libc::pollfd { fd: notifier.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd, pointing at a live local.
        let rc = unsafe { libc::poll(&mut pollfd, 1, timeout_ms) };
        assert!(rc >= 0, "poll failed: {}", io::Error::last_os_error());
        rc == 1
    }

    #[test]
    fn completion_notifier_fires_for_completions_until_cleared() {
        let file = TempFile::new("notifier", MIB as u64);
        let mut disk = UringDisk::open(&file.path, options(8, 0)).expect("open");
        let notifier = disk.completion_notifier().expect("register the eventfd");
        let second = disk.completion_notifier().unwrap_err();
        assert_eq!(second.raw_os_error(), Some(libc::EBUSY));
        assert!(!readable(&notifier, 0));

        for (id, op) in [(1, DiskOp::WriteFlush), (2, DiskOp::Read), (3, DiskOp::Flush)] {
            let buffer = if op == DiskOp::Flush { AlignedBuffer::empty() } else { pattern(id, 8 * KIB) };
            disk.submit(request(id, op, 0, buffer));
            let mut completions = Vec::new();
            // The request reaches the kernel in `reap`; each completion it posts signals the
            // eventfd, and clearing it before reaping loses none.
            disk.reap(&mut completions);
            while completions.is_empty() {
                assert!(readable(&notifier, 10_000), "no notification for request {id}");
                notifier.clear();
                disk.reap(&mut completions);
            }
            assert_eq!(completions.len(), 1);
            assert_eq!(completions[0].id, id);
            assert_eq!(completions[0].result, Ok(()));
            // A request the kernel completed inside the reap that submitted it signalled the
            // eventfd too, with nobody waiting; once cleared, nothing else may signal it.
            notifier.clear();
            assert!(!readable(&notifier, 20), "a notification with nothing in flight after request {id}");
        }
        // A request that completed before its notification was looked at still left it set.
        disk.submit(request(4, DiskOp::Read, 0, AlignedBuffer::zeroed(4 * KIB)));
        let mut completions = Vec::new();
        disk.reap(&mut completions);
        disk.wait();
        disk.reap(&mut completions);
        assert_eq!(completions.len(), 1);
        assert!(readable(&notifier, 0));
        notifier.clear();
        assert!(!readable(&notifier, 0));
    }

    #[test]
    fn push_hands_queued_requests_to_the_kernel() {
        let file = TempFile::new("push", MIB as u64);
        let mut disk = UringDisk::open(&file.path, options(8, 0)).expect("open");
        let notifier = disk.completion_notifier().expect("register the eventfd");
        // `submit` only queues: nothing reaches the kernel, so nothing completes.
        disk.submit(request(1, DiskOp::Read, 0, AlignedBuffer::zeroed(4 * KIB)));
        assert!(!readable(&notifier, 200), "a request completed before it was pushed");
        // `push` hands it over without reaping; the completion waits for `reap`.
        disk.push();
        assert!(readable(&notifier, 10_000), "the pushed request did not complete");
        assert_eq!(disk.in_flight_count(), 1);
        let mut completions = Vec::new();
        disk.reap(&mut completions);
        assert_eq!(completions.len(), 1);
        assert_eq!(completions[0].result, Ok(()));
        // With nothing queued it costs nothing and changes nothing.
        disk.push();
        assert_eq!(disk.in_flight_count(), 0);
    }

    #[test]
    fn wait_and_reap_with_nothing_in_flight_return() {
        let file = TempFile::new("idle", MIB as u64);
        let mut disk = UringDisk::open(&file.path, options(8, 1000)).expect("open");
        disk.wait();
        let mut completions = Vec::new();
        disk.reap(&mut completions);
        assert!(completions.is_empty());
        assert_eq!(disk.in_flight_count(), 0);

        // A finished but unreaped request counts as in flight, and `wait` returns at once.
        disk.submit(request(1, DiskOp::Flush, 0, AlignedBuffer::empty()));
        assert_eq!(disk.in_flight_count(), 1);
        disk.wait();
        assert_eq!(disk.in_flight_count(), 1);
        disk.wait();
        disk.reap(&mut completions);
        assert_eq!(completions.len(), 1);
        assert_eq!(disk.in_flight_count(), 0);
    }

    #[test]
    fn drop_waits_for_requests_in_flight() {
        let file = TempFile::new("drop", 8 * MIB as u64);
        let mut disk = UringDisk::open(&file.path, options(16, 0)).expect("open");
        for id in 0..64u64 {
            let op = if id % 3 == 0 { DiskOp::WriteFlush } else { DiskOp::Read };
            disk.submit(request(id, op, id * 128 * KIB as u64, pattern(id, 128 * KIB)));
        }
        let mut completions = Vec::new();
        disk.reap(&mut completions);
        drop(disk);
    }

    #[test]
    fn open_errors_name_the_problem() {
        let missing = std::env::temp_dir().join(format!("basalt-missing-{}", std::process::id()));
        let error = UringDisk::open(&missing, UringOptions::default()).unwrap_err();
        assert!(matches!(error, OpenDiskError::NotFound { .. }), "{error}");
        assert!(error.to_string().contains("basalt-missing"), "{error}");

        let directory = std::env::temp_dir();
        let error = UringDisk::open(&directory, UringOptions::default()).unwrap_err();
        assert!(matches!(error, OpenDiskError::NotFileOrBlockDevice { .. }), "{error}");

        let file = TempFile::new("options", MIB as u64);
        let error = UringDisk::open(&file.path, options(1, 0)).unwrap_err();
        assert!(matches!(error, OpenDiskError::InvalidQueueDepth { queue_depth: 1 }), "{error}");
    }

    #[test]
    fn create_file_extends_and_size_rounds_down() {
        let file = TempFile::new("create", 3 * MIB as u64);
        assert_eq!(std::fs::metadata(&file.path).unwrap().len(), 3 * MIB as u64);
        UringDisk::create_file(&file.path, 5 * MIB as u64).unwrap();
        assert_eq!(std::fs::metadata(&file.path).unwrap().len(), 5 * MIB as u64);
        // Never shrinks.
        UringDisk::create_file(&file.path, MIB as u64).unwrap();
        assert_eq!(std::fs::metadata(&file.path).unwrap().len(), 5 * MIB as u64);

        let odd = TempFile::new("odd", 4096 * 3 + 100);
        let disk = UringDisk::open(&odd.path, UringOptions::default()).unwrap();
        assert_eq!(disk.size_bytes(), 4096 * 3);
    }
}
