//! [`TimedDisk`]: a [`SimDisk`] whose requests take simulated time (ADR 0020).
//!
//! `SimDisk` completes a request whenever it is reaped; a cluster simulation needs requests to
//! complete at deadlines on tokio's clock, so that a slow disk, a flush racing a crash, or one
//! node's disk lagging another's show up in the order they would on real drives. Each request
//! gets a latency drawn from the seed for its kind (times a slowdown a test can set) and is
//! applied to the `SimDisk` when it is due: a write becomes visible, and a completed flush
//! durable, at its deadline. Deadlines are independent, so requests complete out of order.
//!
//! One leniency against real drives: a flush covers every write applied before its deadline,
//! where a drive promises only those completed before it was submitted. The engine's own crash
//! tests hold it to the strict rule on a `SimDisk` directly.
//!
//! The node's loop waits for [`TimedDiskControl::due`] and then reaps. [`Disk::wait`] cannot
//! move the clock, so it applies the next request at once: it serves the blocking opening of an
//! engine, before the loop runs.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use platform::{Disk, DiskCompletion, DiskOp, DiskReady, DiskRequest};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::SimDisk;

/// Latencies, drawn uniformly from each range per request.
#[derive(Debug, Clone)]
pub struct TimedDiskOptions {
    pub seed: u64,
    pub read: Range<Duration>,
    pub write: Range<Duration>,
    /// For `Flush`, `WriteFlush` and `WriteFua`.
    pub flush: Range<Duration>,
}

/// The disk an engine owns.
pub struct TimedDisk {
    shared: Rc<RefCell<Timed>>,
}

/// The harness's handle on the same disk: when the next request is due, slowdowns, crashes,
/// and the `SimDisk` underneath for its faults.
#[derive(Clone)]
pub struct TimedDiskControl {
    shared: Rc<RefCell<Timed>>,
}

struct Timed {
    disk: SimDisk,
    options: TimedDiskOptions,
    rng: SmallRng,
    /// Latencies are multiplied by this (a slow disk).
    slowdown: u32,
    /// Submitted requests by deadline; the sequence number keeps submission order among equals.
    queue: BTreeMap<(Instant, u64), DiskRequest>,
    submitted_count: u64,
    /// Signalled on every submit: the loop waiting for the next deadline may have a sooner one.
    submitted: Rc<Notify>,
}

impl TimedDisk {
    pub fn new(disk: SimDisk, options: TimedDiskOptions) -> (TimedDisk, TimedDiskControl) {
        for range in [&options.read, &options.write, &options.flush] {
            assert!(range.start <= range.end, "latency range {range:?}");
        }
        let shared = Rc::new(RefCell::new(Timed {
            rng: SmallRng::seed_from_u64(options.seed),
            disk,
            options,
            slowdown: 1,
            queue: BTreeMap::new(),
            submitted_count: 0,
            submitted: Rc::new(Notify::new()),
        }));
        (TimedDisk { shared: shared.clone() }, TimedDiskControl { shared })
    }
}

impl Timed {
    fn latency(&mut self, op: DiskOp) -> Duration {
        let range = match op {
            DiskOp::Read => self.options.read.clone(),
            DiskOp::Write => self.options.write.clone(),
            DiskOp::Flush | DiskOp::WriteFlush | DiskOp::WriteFua => self.options.flush.clone(),
        };
        let latency = if range.is_empty() { range.start } else { self.rng.gen_range(range) };
        latency * self.slowdown
    }

    /// Applies the requests due by `now` (all of them with `None`), in deadline order.
    fn apply_due(&mut self, now: Option<Instant>) {
        while let Some(entry) = self.queue.first_entry() {
            if now.is_some_and(|now| entry.key().0 > now) {
                break;
            }
            let request = entry.remove();
            self.disk.submit(request);
        }
    }
}

impl Disk for TimedDisk {
    fn sector_size_bytes(&self) -> u32 {
        self.shared.borrow().disk.sector_size_bytes()
    }

    fn size_bytes(&self) -> u64 {
        self.shared.borrow().disk.size_bytes()
    }

    fn submit(&mut self, request: DiskRequest) {
        let mut timed = self.shared.borrow_mut();
        let due = Instant::now() + timed.latency(request.op);
        timed.submitted_count += 1;
        let sequence = timed.submitted_count;
        timed.queue.insert((due, sequence), request);
        timed.submitted.notify_one();
    }

    fn reap(&mut self, completions: &mut Vec<DiskCompletion>) {
        let mut timed = self.shared.borrow_mut();
        timed.apply_due(Some(Instant::now()));
        timed.disk.reap(completions);
    }

    fn wait(&mut self) {
        let mut timed = self.shared.borrow_mut();
        if let Some(entry) = timed.queue.first_entry() {
            let request = entry.remove();
            timed.disk.submit(request);
        }
        timed.disk.wait();
    }

    fn in_flight_count(&self) -> usize {
        let timed = self.shared.borrow();
        timed.queue.len() + timed.disk.in_flight_count()
    }
}

impl TimedDiskControl {
    /// The deadline of the next request, if any is in flight.
    pub fn next_due(&self) -> Option<Instant> {
        self.shared.borrow().queue.keys().next().map(|(due, _)| *due)
    }

    /// Resolves when a request is due: at the next deadline, or after the next submit's.
    pub async fn due(&self) {
        loop {
            let submitted = self.shared.borrow().submitted.clone();
            let notified = submitted.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.next_due() {
                Some(due) => {
                    tokio::select! {
                        biased;
                        () = tokio::time::sleep_until(due) => return,
                        () = &mut notified => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Multiplies the latency of requests submitted from now on (1: normal speed).
    pub fn set_slowdown(&self, factor: u32) {
        assert!(factor >= 1, "slowdown {factor}");
        self.shared.borrow_mut().slowdown = factor;
    }

    /// A power loss: requests in flight are lost, and the `SimDisk` decides what of the rest
    /// survives (`SimDisk::crash`).
    pub fn crash(&self) {
        let mut timed = self.shared.borrow_mut();
        timed.queue.clear();
        timed.disk.crash();
    }

    /// The disk underneath, for its faults (bit flips, errors, no space) and inspection.
    pub fn with_disk<R>(&self, f: impl FnOnce(&mut SimDisk) -> R) -> R {
        f(&mut self.shared.borrow_mut().disk)
    }

    /// Applies every request in flight now, whatever its deadline (a harness draining a node).
    pub fn apply_all(&self) {
        self.shared.borrow_mut().apply_due(None);
    }

    /// What the drive sees when the process using it exits (without a power loss): the
    /// requests it was given are carried out, and their completions are reaped by no one.
    pub fn process_exited(&self) {
        let mut timed = self.shared.borrow_mut();
        timed.apply_due(None);
        let mut orphans = Vec::new();
        while timed.disk.in_flight_count() > 0 && !timed.disk.is_frozen() {
            timed.disk.wait();
            timed.disk.reap(&mut orphans);
        }
    }

    /// Another handle on the same drive, for the process started after a crash (the engine
    /// that held the first one is gone).
    pub fn reopen(&self) -> TimedDisk {
        TimedDisk { shared: self.shared.clone() }
    }

    /// The readiness an engine loop waits on ([`DiskReady`]).
    pub fn ready(&self) -> TimedDiskReady {
        TimedDiskReady { control: self.clone(), waiting: RefCell::new(None) }
    }
}

/// [`TimedDiskControl::due`] as a [`DiskReady`].
pub struct TimedDiskReady {
    control: TimedDiskControl,
    waiting: RefCell<Option<Pin<Box<dyn Future<Output = ()>>>>>,
}

impl DiskReady for TimedDiskReady {
    fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut waiting = self.waiting.borrow_mut();
        let due = waiting.get_or_insert_with(|| {
            let control = self.control.clone();
            Box::pin(async move { control.due().await })
        });
        let poll = due.as_mut().poll(cx);
        if poll.is_ready() {
            *waiting = None;
        }
        poll
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimDiskOptions;
    use platform::AlignedBuffer;

    fn disk(seed: u64) -> (TimedDisk, TimedDiskControl) {
        let options = TimedDiskOptions {
            seed,
            read: Duration::from_micros(100)..Duration::from_micros(200),
            write: Duration::from_millis(1)..Duration::from_millis(3),
            flush: Duration::from_millis(5)..Duration::from_millis(10),
        };
        TimedDisk::new(SimDisk::new(SimDiskOptions { size_bytes: 1 << 20, ..SimDiskOptions::default() }), options)
    }

    fn request(id: u64, op: DiskOp, offset_bytes: u64, byte: u8) -> DiskRequest {
        let length = if op == DiskOp::Flush { 0 } else { 4096 };
        DiskRequest { id, op, offset_bytes, buffer: AlignedBuffer::from_slice(&vec![byte; length]) }
    }

    #[tokio::test(start_paused = true)]
    async fn requests_complete_at_their_deadlines() {
        let (mut disk, control) = disk(1);
        let started = Instant::now();
        disk.submit(request(1, DiskOp::Write, 0, 0xab));
        disk.submit(request(2, DiskOp::Flush, 0, 0));
        let mut completions = Vec::new();
        disk.reap(&mut completions);
        assert!(completions.is_empty(), "nothing is due yet");
        assert_eq!(control.with_disk(|disk| disk.read_written(0, 1)), [0], "not applied before its deadline");
        control.due().await;
        disk.reap(&mut completions);
        assert_eq!(completions.iter().map(|completion| completion.id).collect::<Vec<_>>(), [1]);
        assert!(started.elapsed() >= Duration::from_millis(1) && started.elapsed() < Duration::from_millis(4));
        assert_eq!(control.with_disk(|disk| disk.read_written(0, 1)), [0xab]);
        control.due().await;
        disk.reap(&mut completions);
        assert_eq!(completions.len(), 2);
        assert!(started.elapsed() >= Duration::from_millis(5));
        assert_eq!(control.with_disk(|disk| disk.read_durable(0, 1)), [0xab], "durable once the flush completed");
        assert_eq!(disk.in_flight_count(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_crash_loses_what_was_in_flight() {
        let (mut disk, control) = disk(2);
        disk.submit(request(1, DiskOp::WriteFlush, 4096, 0x11));
        tokio::time::sleep(Duration::from_millis(1)).await;
        control.crash();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut completions = Vec::new();
        disk.reap(&mut completions);
        assert!(completions.is_empty());
        assert_eq!(control.with_disk(|disk| disk.read_durable(4096, 1)), [0]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_disk_takes_longer_and_the_same_seed_takes_the_same_time() {
        async fn time_to_complete(seed: u64, slowdown: u32) -> Duration {
            let (mut disk, control) = disk(seed);
            control.set_slowdown(slowdown);
            let started = Instant::now();
            for id in 0..16 {
                disk.submit(request(id, DiskOp::Write, id * 4096, id as u8));
            }
            let mut completions = Vec::new();
            while completions.len() < 16 {
                control.due().await;
                disk.reap(&mut completions);
            }
            started.elapsed()
        }
        let normal = time_to_complete(3, 1).await;
        assert_eq!(normal, time_to_complete(3, 1).await);
        assert!(time_to_complete(3, 10).await >= normal * 5);
    }

    #[test]
    fn wait_applies_the_next_request_without_time_passing() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        let _guard = runtime.enter();
        let (mut disk, _control) = disk(4);
        disk.submit(request(7, DiskOp::Read, 0, 0));
        disk.wait();
        let mut completions = Vec::new();
        disk.reap(&mut completions);
        assert_eq!(completions.iter().map(|completion| completion.id).collect::<Vec<_>>(), [7]);
    }
}
