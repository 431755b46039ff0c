//! `EngineIo`: the engine on the OSD's thread, awaited by tasks, driven by disk completions.
//!
//! Tasks submit requests and await their replies (`EngineIo::submit` returns an [`EngineOp`]
//! future). One driver task ([`EngineIo::drive`]) owns the rhythm: it waits until the ring's
//! completion eventfd is readable or a task has queued a request, then calls `Engine::poll`,
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
use std::time::{Duration, Instant};

use engine::{Completion, Engine, EngineError, Reply, Request};
use platform_linux::{CompletionNotifier, UringDisk};
use stdx::SlotTable;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::Notify;

use crate::limits::ENGINE_OPS_IN_FLIGHT_MAX;

/// The engine and the table of requests in flight in it.
pub(crate) struct EngineIo {
    engine: RefCell<Engine<UringDisk>>,
    slots: RefCell<SlotTable<SlotState>>,
    notifier: AsyncFd<CompletionNotifier>,
    /// Set by `submit`: the driver polls the engine so the request reaches the kernel.
    kick: Notify,
    /// Signalled after every poll that moved something (shutdown waits on it).
    progressed: Notify,
    spin: Duration,
    spinning: Cell<bool>,
    last_activity: Cell<Instant>,
}

/// An engine request in flight; its id in the table is the request's user data.
enum SlotState {
    Waiting(Option<Waker>),
    Done(Result<Reply, EngineError>),
    /// The awaiting future was dropped; the completion only frees the slot.
    Abandoned,
}

impl EngineIo {
    /// Takes over an open engine and the completion notifier of its disk (registered before
    /// the engine was opened). Must be called inside the runtime that will drive it.
    pub(crate) fn new(
        engine: Engine<UringDisk>,
        notifier: CompletionNotifier,
        spin: Duration,
    ) -> std::io::Result<EngineIo> {
        // SAFETY: the notifier owns its descriptor for as long as it lives, which is inside the
        // `AsyncFd`, and `as_raw_fd` always returns that same descriptor.
        let notifier = unsafe { AsyncFd::register_with_interest(notifier, Interest::READABLE) }
            .map_err(|error| error.into_parts().1)?;
        Ok(EngineIo {
            engine: RefCell::new(engine),
            slots: RefCell::new(SlotTable::new(ENGINE_OPS_IN_FLIGHT_MAX)),
            notifier,
            kick: Notify::new(),
            progressed: Notify::new(),
            spin,
            spinning: Cell::new(false),
            last_activity: Cell::new(Instant::now()),
        })
    }

    /// Read access to the engine between polls (versions, listings, space).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&Engine<UringDisk>) -> R) -> R {
        f(&self.engine.borrow())
    }

    /// Queues `request` in the engine; the returned future resolves with its reply.
    ///
    /// The request reaches the kernel at the driver's next poll, after the current task yields,
    /// so a task that submits and then sends to replicas puts the network first.
    pub(crate) fn submit(self: &Rc<Self>, request: Request) -> EngineOp {
        let user_data = self
            .slots
            .borrow_mut()
            .insert(SlotState::Waiting(None))
            .unwrap_or_else(|_| panic!("more than {ENGINE_OPS_IN_FLIGHT_MAX} engine requests in flight"));
        self.engine.borrow_mut().submit(user_data, request);
        self.kick.notify_one();
        EngineOp { io: self.clone(), user_data, finished: false }
    }

    /// Asks the engine's write-back job to empty the journal and drives the engine until it is
    /// idle or `timeout` passes. Returns whether the journal is empty.
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

    /// The driver task: polls the engine whenever the disk or a task has something for it.
    /// Runs until the runtime drops it.
    pub(crate) async fn drive(self: Rc<Self>) {
        let mut completions = Vec::new();
        loop {
            tokio::select! {
                biased;
                ready = self.notifier.readable() => match ready {
                    Ok(mut guard) => {
                        // Cleared before the poll: a completion posted after it signals again.
                        guard.get_inner().clear();
                        guard.clear_ready();
                    }
                    Err(error) => panic!("waiting on the disk completion eventfd failed: {error}"),
                },
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
        let finished = completions.len();
        if finished == 0 {
            return 0;
        }
        self.last_activity.set(Instant::now());
        let mut wakers = Vec::new();
        {
            let mut slots = self.slots.borrow_mut();
            for completion in completions.drain(..) {
                let id = completion.user_data;
                let state = slots.get_mut(id).expect("a completion for a slot of another request");
                match std::mem::replace(state, SlotState::Done(completion.result)) {
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
        match slots.get_mut(self.user_data).expect("an engine op polls only its own slot") {
            SlotState::Waiting(waker) => {
                match waker {
                    Some(existing) if existing.will_wake(cx.waker()) => {}
                    _ => *waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            SlotState::Done(_) => {
                let Some(SlotState::Done(result)) = slots.remove(self.user_data) else {
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
        let state = slots.get_mut(self.user_data).expect("an engine op owns its slot until it finishes");
        if matches!(state, SlotState::Done(_)) {
            slots.remove(self.user_data);
        } else {
            *state = SlotState::Abandoned;
        }
    }
}
