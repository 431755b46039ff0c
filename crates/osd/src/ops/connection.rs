//! What a connection knows about its own requests: the writes in flight, so a Flush can wait
//! for those read before it (`stdx::WriteOrder`, with the connection's wake-ups).

use std::cell::RefCell;

use stdx::{FlushMark, WriteOrder};
use tokio::sync::Notify;
use wire::{Frame, Opcode};

#[derive(Default)]
pub(crate) struct ConnectionState {
    order: RefCell<WriteOrder>,
    /// Wakes Flushes when the oldest writes have replied.
    drained: Notify,
}

/// What a request reserved on its connection when it arrived (before it runs).
pub(crate) enum Ticket<'a> {
    None,
    /// Held until the write has replied; dropping it lets later Flushes go.
    Write {
        _ticket: WriteTicket<'a>,
    },
    /// Waits for the writes read before it.
    Flush {
        mark: FlushMark,
    },
}

pub(crate) struct WriteTicket<'a> {
    state: &'a ConnectionState,
    era: u64,
}

impl Drop for WriteTicket<'_> {
    fn drop(&mut self) {
        if self.state.order.borrow_mut().end(self.era) {
            self.state.drained.notify_waiters();
        }
    }
}

impl ConnectionState {
    /// Reserves the request's place in the connection's order; called as each request is read,
    /// before any of it runs.
    pub(crate) fn ticket(&self, frame: &Frame) -> Ticket<'_> {
        match frame.opcode() {
            Opcode::Write | Opcode::WriteZeroes | Opcode::Trim => {
                let era = self.order.borrow_mut().begin();
                Ticket::Write { _ticket: WriteTicket { state: self, era } }
            }
            Opcode::Flush => Ticket::Flush { mark: self.order.borrow_mut().flush_mark() },
            _ => Ticket::None,
        }
    }

    /// Completes once every write read before the Flush that took `mark` has replied.
    pub(crate) async fn writes_before(&self, mark: FlushMark) {
        loop {
            let drained = self.drained.notified();
            if self.order.borrow().is_flushed(mark) {
                return;
            }
            drained.await;
        }
    }
}
