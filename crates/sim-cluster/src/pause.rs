//! A node paused as SIGSTOP pauses a process: none of its tasks runs, its timers and sockets
//! keep filling (bytes sent to it wait in their pipes, its disk completes what it was given),
//! and when it resumes everything it missed is there at once, its lease perhaps long gone.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Pauses and resumes one node's future.
#[derive(Clone, Default)]
pub(crate) struct PauseSwitch {
    shared: Rc<PauseState>,
}

#[derive(Default)]
struct PauseState {
    paused: Cell<bool>,
    /// The node's waker, kept while it is paused, woken on resume.
    waker: RefCell<Option<Waker>>,
}

impl PauseSwitch {
    pub(crate) fn pause(&self) {
        self.shared.paused.set(true);
    }

    pub(crate) fn resume(&self) {
        self.shared.paused.set(false);
        if let Some(waker) = self.shared.waker.borrow_mut().take() {
            waker.wake();
        }
    }

    pub(crate) fn is_paused(&self) -> bool {
        self.shared.paused.get()
    }

    /// Runs `future` under this switch.
    pub(crate) fn wrap<F: Future>(&self, future: F) -> Pausable<F> {
        Pausable { switch: self.clone(), future: Box::pin(future) }
    }
}

pub(crate) struct Pausable<F> {
    switch: PauseSwitch,
    future: Pin<Box<F>>,
}

impl<F: Future> Future for Pausable<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        if self.switch.is_paused() {
            *self.switch.shared.waker.borrow_mut() = Some(cx.waker().clone());
            return Poll::Pending;
        }
        self.future.as_mut().poll(cx)
    }
}
