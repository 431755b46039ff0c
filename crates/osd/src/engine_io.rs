//! `EngineIo`: the engine on the OSD's thread, awaited by tasks, driven by disk completions.
//!
//! Tasks submit requests and await their replies (`EngineIo::submit` returns an [`EngineOp`]
//! future). One driver task ([`EngineIo::drive`]) owns the rhythm: it waits until the disk is
//! ready ([`DiskReady`]: the ring's completion eventfd, `platform_linux::UringReady`, or a
//! simulated disk's next deadline, ADR 0020) or a task has queued a request, then calls `Engine::poll`,
//! which hands queued submissions to the kernel and moves finished work out, and wakes the
//! waiting tasks. Everything runs on one thread: no locks, no hand-offs, and a disk completion
//! costs a thread wake-up only if the thread was parked.
//!
//! With a spin budget (`--spin-us`), the driver keeps polling (the engine's completion queue,
//! and the sockets through a zero-timeout epoll by yielding to the runtime) until that long has
//! passed since the last activity (a request, a reply, a disk completion) before it lets the
//! thread park: an idle OSD sleeps, a busy one catches its next event without a wake-up.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use engine::{Completion, Engine, EngineError, ObjectId, Reply, Request};
use futures_util::future::poll_fn;
use platform::{Disk, DiskReady};
use stdx::SlotTable;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::limits::ENGINE_OPS_IN_FLIGHT_MAX;
use crate::objects_by_pg::ObjectsByPg;

/// The engine the OSD runs, on whichever disk it was opened.
pub type OsdEngine = Engine<Box<dyn Disk>>;

/// The engine and the table of requests in flight in it.
pub(crate) struct EngineIo {
    engine: RefCell<OsdEngine>,
    /// The engine's objects by PG, for listings that cost one PG's objects.
    objects: RefCell<ObjectsByPg>,
    slots: RefCell<SlotTable<Slot>>,
    ready: Box<dyn DiskReady>,
    /// Set by `submit`: the driver polls the engine so the request reaches the kernel.
    kick: Notify,
    /// Signalled after every poll that moved something (shutdown waits on it).
    progressed: Notify,
    /// Signalled once, when the drive is first found to have failed a write: the engine is
    /// poisoned, or a whole-object write's fresh block failed (which leaves the engine sound,
    /// but a drive that fails writes stops its OSD either way, ADR 0021).
    failed: Notify,
    failure: RefCell<Option<String>>,
    spin: Duration,
    spinning: Cell<bool>,
    last_activity: Cell<Instant>,
}

/// An engine request in flight; its id in the table is the request's user data.
struct Slot {
    state: SlotState,
    /// The object a write changes: its completion ends the write in `objects`.
    write_of: Option<ObjectId>,
}

enum SlotState {
    Waiting(Option<Waker>),
    Done(Result<Reply, EngineError>),
    /// The awaiting future was dropped; the completion only frees the slot.
    Abandoned,
}

impl EngineIo {
    /// Takes over an open engine and its disk's readiness.
    pub(crate) fn new(engine: OsdEngine, ready: Box<dyn DiskReady>, spin: Duration) -> EngineIo {
        EngineIo {
            objects: RefCell::new(ObjectsByPg::of(&engine)),
            engine: RefCell::new(engine),
            slots: RefCell::new(SlotTable::new(ENGINE_OPS_IN_FLIGHT_MAX)),
            ready,
            kick: Notify::new(),
            progressed: Notify::new(),
            failed: Notify::new(),
            failure: RefCell::new(None),
            spin,
            spinning: Cell::new(false),
            last_activity: Cell::new(Instant::now()),
        }
    }

    /// Read access to the engine between polls (versions, listings, space).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&OsdEngine) -> R) -> R {
        f(&self.engine.borrow())
    }

    /// The objects of PG `pg` (its pool of `pg_count` PGs) from `start` on, in order, with their
    /// versions, at most `count_max`: what a walk of every object would find, at the cost of
    /// that PG's objects (`objects_by_pg.rs`).
    pub(crate) fn list_pg(
        &self,
        pg: wire::PgId,
        pg_count: u32,
        start: ObjectId,
        count_max: usize,
    ) -> Vec<(ObjectId, u64)> {
        let engine = self.engine.borrow();
        self.objects.borrow_mut().list(&engine, pg.pool, pg.pg, pg_count, start, count_max)
    }

    /// The pools with objects here.
    pub(crate) fn pools_with_objects(&self) -> Vec<u32> {
        self.objects.borrow().pools()
    }

    /// The PGs of `pool` (of `pg_count` PGs) with objects here.
    pub(crate) fn pgs_with_objects(&self, pool: u32, pg_count: u32) -> Vec<u32> {
        self.objects.borrow_mut().pgs_with_objects(pool, pg_count)
    }

    /// Queues `request` in the engine; the returned future resolves with its reply.
    ///
    /// The request reaches the kernel at the driver's next poll, after the current task yields,
    /// so a task that submits and then sends to replicas puts the network first.
    pub(crate) fn submit(self: &Rc<Self>, request: Request) -> EngineOp {
        let user_data = self
            .slots
            .borrow_mut()
            .insert(Slot { state: SlotState::Waiting(None), write_of: None })
            .unwrap_or_else(|_| panic!("more than {ENGINE_OPS_IN_FLIGHT_MAX} engine requests in flight"));
        if let Request::Write { object, .. }
        | Request::WriteVersioned { object, .. }
        | Request::ReplaceVersioned { object, .. } = &request
        {
            self.objects.borrow_mut().write_started(*object);
            self.slots.borrow_mut().get_mut(user_data).expect("inserted above").write_of = Some(*object);
        }
        self.engine.borrow_mut().submit(user_data, request);
        self.kick.notify_one();
        EngineOp { io: self.clone(), user_data, finished: false }
    }

    /// Asks the engine's write-back job to empty the journal and drives the engine until it is
    /// idle or `timeout` passes. Returns whether the journal is empty.
    /// The engine's counters since it opened.
    pub(crate) fn stats(&self) -> engine::EngineStats {
        self.engine.borrow().stats()
    }

    pub(crate) async fn write_back_journal(&self, timeout: Duration) -> bool {
        self.engine.borrow_mut().request_writeback();
        self.kick.notify_one();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let progressed = self.progressed.notified();
            {
                let engine = self.engine.borrow();
                if engine.poisoned().is_some() {
                    return false;
                }
                if engine.is_idle() {
                    return engine.is_written_back();
                }
            }
            // Poll now and then even without a signal: write-back may start without a completion.
            let wait = tokio::time::timeout_at(
                deadline.min(tokio::time::Instant::now() + Duration::from_millis(10)),
                progressed,
            );
            if wait.await.is_err() && tokio::time::Instant::now() >= deadline {
                return self.engine.borrow().is_written_back();
            }
            self.kick.notify_one();
        }
    }

    /// Asks for write-back once the engine has seen no completion for `idle_for` and the
    /// journal holds records: an idle OSD empties its journal, so deleted objects' blocks come
    /// back and a restart replays nothing.
    pub(crate) fn write_back_when_idle(&self, idle_for: Duration) {
        if self.last_activity.get().elapsed() < idle_for {
            return;
        }
        let mut engine = self.engine.borrow_mut();
        if engine.is_written_back() || engine.poisoned().is_some() {
            return;
        }
        engine.request_writeback();
        drop(engine);
        self.last_activity.set(Instant::now());
        self.kick.notify_one();
    }

    /// The driver task: polls the engine whenever the disk or a task has something for it.
    /// Runs until the runtime drops it.
    pub(crate) async fn drive(self: Rc<Self>) {
        let mut completions = Vec::new();
        loop {
            tokio::select! {
                biased;
                () = poll_fn(|cx| self.ready.poll_ready(cx)) => {}
                () = self.kick.notified() => {}
            }
            self.poll_once(&mut completions);
            if !self.spin.is_zero() {
                self.spin(&mut completions).await;
            }
        }
    }

    /// Keeps polling without parking until the last activity is a spin budget ago.
    async fn spin(&self, completions: &mut Vec<Completion>) {
        self.spinning.set(true);
        while self.last_activity.get().elapsed() < self.spin {
            // Lets the other tasks run and the runtime poll the sockets without blocking.
            tokio::task::yield_now().await;
            self.poll_once(completions);
        }
        self.spinning.set(false);
    }

    /// Resolves with the reason once the engine is poisoned: its drive failed a write, and
    /// nothing more can be made durable on it.
    pub(crate) async fn failed(&self) -> String {
        self.failed.notified().await;
        self.failure.borrow().clone().expect("signalled once the drive failed")
    }

    /// Records the drive's first failed write and tells `failed`.
    fn drive_failed(&self, reason: String) {
        let mut failure = self.failure.borrow_mut();
        if failure.is_none() {
            *failure = Some(reason);
            self.failed.notify_one();
        }
    }

    /// Records activity (a request arrived or replied): with a spin budget, the thread keeps
    /// polling for that long before it sleeps, to catch the next event without a wake-up.
    pub(crate) fn note_activity(&self) {
        if self.spin.is_zero() {
            return;
        }
        self.last_activity.set(Instant::now());
        if !self.spinning.get() {
            self.kick.notify_one();
        }
    }

    /// Polls the engine once and wakes the tasks whose requests finished. Returns how many did.
    fn poll_once(&self, completions: &mut Vec<Completion>) -> usize {
        self.engine.borrow_mut().poll(completions);
        let poisoned = self.engine.borrow().poisoned().map(str::to_string);
        if let Some(reason) = poisoned {
            self.drive_failed(reason);
        }
        let finished = completions.len();
        if finished == 0 {
            return 0;
        }
        self.last_activity.set(Instant::now());
        let mut wakers = Vec::new();
        {
            let mut slots = self.slots.borrow_mut();
            for mut completion in completions.drain(..) {
                let id = completion.user_data;
                let slot = slots.get_mut(id).expect("a completion for a slot of another request");
                if let Some(object) = slot.write_of.take() {
                    self.objects.borrow_mut().write_finished(object);
                    if let Err(EngineError::Disk(error)) = &completion.result {
                        // The OSD stops on it; the request answers as on a poisoned engine, so
                        // that it is retried on the members left rather than failed.
                        let reason = format!("a write of {object} failed: {error}");
                        self.drive_failed(reason.clone());
                        completion.result = Err(EngineError::Poisoned { reason });
                    }
                }
                match std::mem::replace(&mut slot.state, SlotState::Done(completion.result)) {
                    SlotState::Waiting(waker) => wakers.extend(waker),
                    SlotState::Abandoned => {
                        slots.remove(id);
                    }
                    SlotState::Done(_) => unreachable!("a second completion for one request"),
                }
            }
        }
        for waker in wakers {
            waker.wake();
        }
        self.progressed.notify_waiters();
        finished
    }
}

/// The reply of one engine request. Dropping it before the reply abandons the request (the
/// engine still completes it).
pub(crate) struct EngineOp {
    io: Rc<EngineIo>,
    user_data: u64,
    finished: bool,
}

impl Future for EngineOp {
    type Output = Result<Reply, EngineError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        assert!(!self.finished, "an engine op polled after it finished");
        let mut slots = self.io.slots.borrow_mut();
        match &mut slots.get_mut(self.user_data).expect("an engine op polls only its own slot").state {
            SlotState::Waiting(waker) => {
                match waker {
                    Some(existing) if existing.will_wake(cx.waker()) => {}
                    _ => *waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            SlotState::Done(_) => {
                let Some(Slot { state: SlotState::Done(result), .. }) = slots.remove(self.user_data) else {
                    unreachable!("matched Done above")
                };
                drop(slots);
                self.finished = true;
                Poll::Ready(result)
            }
            SlotState::Abandoned => unreachable!("an engine op polls only its own slot"),
        }
    }
}

impl Drop for EngineOp {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut slots = self.io.slots.borrow_mut();
        let state = &mut slots.get_mut(self.user_data).expect("an engine op owns its slot until it finishes").state;
        if matches!(state, SlotState::Done(_)) {
            slots.remove(self.user_data);
        } else {
            *state = SlotState::Abandoned;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::{AlignedBuffer, EngineOptions, FormatOptions, ObjectId};
    use sim::{SimDisk, SimDiskOptions, TimedDisk, TimedDiskOptions};

    /// The engine loop on a simulated disk whose requests take simulated time (ADR 0020): a
    /// durable write completes once the disk's deadlines have passed, and reads back.
    #[tokio::test(start_paused = true)]
    async fn the_engine_loop_runs_on_a_timed_disk() {
        let disk = SimDisk::new(SimDiskOptions { size_bytes: 64 << 20, ..SimDiskOptions::default() });
        let format = FormatOptions { object_size_bytes: 128 * 1024, journal_size_bytes: Some(4 << 20), nonce: 1 };
        let disk = Engine::format(disk, &format).expect("format");
        let latency = Duration::from_millis(2)..Duration::from_millis(4);
        let options =
            TimedDiskOptions { seed: 5, read: latency.clone(), write: latency.clone(), flush: latency.clone() };
        let (disk, control) = TimedDisk::new(disk, options);
        let disk: Box<dyn Disk> = Box::new(disk);
        let engine = Engine::open(disk, &EngineOptions::default()).expect("open");
        let io = Rc::new(EngineIo::new(engine, Box::new(control.ready()), Duration::ZERO));
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                tokio::task::spawn_local(io.clone().drive());
                let object = ObjectId { inode: 1, stripe: 0 };
                let data = AlignedBuffer::from_slice(&[0x5a; 4096]);
                let started = tokio::time::Instant::now();
                io.submit(Request::Write { object, offset_bytes: 0, data }).await.expect("the write");
                assert!(started.elapsed() >= Duration::from_millis(2), "durable before the disk's deadline");
                let reply = io.submit(Request::Read { object, offset_bytes: 0, length_bytes: 4096 }).await;
                let Ok(Reply::Read { data, .. }) = reply else { panic!("read: {reply:?}") };
                assert!(data.iter().all(|&byte| byte == 0x5a));
            })
            .await;
    }
}
