//! What a connection knows about its own requests: the writes in flight, so a Flush can wait
//! for those that came before it.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;

use tokio::sync::Notify;
use wire::{Frame, Opcode};

#[derive(Default)]
pub(crate) struct ConnectionState {
    next_write: Cell<u64>,
    writes: RefCell<BTreeSet<u64>>,
    write_done: Notify,
}

/// What a request reserved on its connection when it arrived (before it runs).
pub(crate) enum Ticket<'a> {
    None,
    /// Held until the write has replied; dropping it lets later Flushes go.
    Write {
        _ticket: WriteTicket<'a>,
    },
    /// Waits for the writes numbered below `upto`.
    Flush {
        upto: u64,
    },
}

pub(crate) struct WriteTicket<'a> {
    state: &'a ConnectionState,
    seq: u64,
}

impl Drop for WriteTicket<'_> {
    fn drop(&mut self) {
        self.state.writes.borrow_mut().remove(&self.seq);
        self.state.write_done.notify_waiters();
    }
}

impl ConnectionState {
    /// Reserves the request's place in the connection's order; called as each request is read,
    /// before any of it runs.
    pub(crate) fn ticket(&self, frame: &Frame) -> Ticket<'_> {
        match frame.opcode() {
            Opcode::Write | Opcode::WriteZeroes | Opcode::Trim => {
                let seq = self.next_write.get();
                self.next_write.set(seq + 1);
                self.writes.borrow_mut().insert(seq);
                Ticket::Write { _ticket: WriteTicket { state: self, seq } }
            }
            Opcode::Flush => Ticket::Flush { upto: self.next_write.get() },
            _ => Ticket::None,
        }
    }

    /// Completes once every write numbered below `upto` has replied.
    pub(crate) async fn writes_before(&self, upto: u64) {
        loop {
            let done = self.write_done.notified();
            if self.writes.borrow().first().is_none_or(|&oldest| oldest >= upto) {
                return;
            }
            done.await;
        }
    }
}
