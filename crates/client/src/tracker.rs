//! `WriteTracker`: which writes of a volume are still in flight, so a flush can wait for the
//! ones issued before it. The order is `stdx::WriteOrder`'s; this adds the lock and the wake-ups.

use std::sync::Mutex;

use stdx::WriteOrder;
use tokio::sync::Notify;

pub(crate) struct WriteTracker {
    order: Mutex<WriteOrder>,
    /// Wakes flushes when the oldest era drains.
    drained: Notify,
}

/// One write in flight; dropping it (when the write finishes, fails or is abandoned) counts
/// the write as finished.
pub(crate) struct WriteTicket<'a> {
    tracker: &'a WriteTracker,
    era: u64,
}

impl WriteTracker {
    pub(crate) fn new() -> WriteTracker {
        WriteTracker { order: Mutex::new(WriteOrder::new()), drained: Notify::new() }
    }

    fn order(&self) -> std::sync::MutexGuard<'_, WriteOrder> {
        self.order.lock().expect("write tracker lock poisoned")
    }

    pub(crate) fn begin(&self) -> WriteTicket<'_> {
        WriteTicket { tracker: self, era: self.order().begin() }
    }

    /// Waits until every write begun before this call has finished.
    pub(crate) async fn wait_for_earlier_writes(&self) {
        let mark = self.order().flush_mark();
        loop {
            let notified = self.drained.notified();
            if self.order().is_flushed(mark) {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for WriteTicket<'_> {
    fn drop(&mut self) {
        let drained = self.tracker.order().end(self.era);
        if drained {
            self.tracker.drained.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;

    fn is_ready(future: std::pin::Pin<&mut impl Future<Output = ()>>) -> bool {
        matches!(future.poll(&mut Context::from_waker(Waker::noop())), Poll::Ready(()))
    }

    #[test]
    fn a_flush_waits_for_earlier_writes_only() {
        let tracker = WriteTracker::new();
        let mut idle = pin!(tracker.wait_for_earlier_writes());
        assert!(is_ready(idle.as_mut()), "nothing in flight");

        let first = tracker.begin();
        let second = tracker.begin();
        let mut flush = pin!(tracker.wait_for_earlier_writes());
        assert!(!is_ready(flush.as_mut()));
        let later = tracker.begin();
        drop(second);
        assert!(!is_ready(flush.as_mut()));
        let mut second_flush = pin!(tracker.wait_for_earlier_writes());
        assert!(!is_ready(second_flush.as_mut()));
        drop(first);
        assert!(is_ready(flush.as_mut()), "a write begun after the flush does not hold it");
        assert!(!is_ready(second_flush.as_mut()), "the second flush waits for the later write");
        drop(later);
        assert!(is_ready(second_flush.as_mut()));
        assert_eq!(tracker.order().in_flight(), 0);
    }
}
