//! `WriteTracker`: which writes of a volume are still in flight, so a flush can wait for the
//! ones issued before it.
//!
//! Writes are counted per era. A flush closes the current era (it starts a new one) and waits
//! until every write of its era and of earlier eras has finished. The table holds one counter
//! per era still draining, so its size is bounded by the flushes in flight, not by the writes,
//! and a write that finishes out of order costs nothing extra.

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::sync::Notify;

pub(crate) struct WriteTracker {
    eras: Mutex<Eras>,
    /// Wakes flushes when the oldest era drains.
    drained: Notify,
}

struct Eras {
    /// The number of `counts[0]`.
    first: u64,
    /// Writes in flight per era, oldest first; the last is the current era. Never empty.
    counts: VecDeque<u64>,
}

/// One write in flight; dropping it (when the write finishes, fails or is abandoned) counts
/// the write as finished.
pub(crate) struct WriteTicket<'a> {
    tracker: &'a WriteTracker,
    era: u64,
}

impl WriteTracker {
    pub(crate) fn new() -> WriteTracker {
        WriteTracker { eras: Mutex::new(Eras { first: 0, counts: VecDeque::from([0]) }), drained: Notify::new() }
    }

    pub(crate) fn begin(&self) -> WriteTicket<'_> {
        let mut eras = self.eras.lock().expect("write tracker lock poisoned");
        let current = eras.counts.back_mut().expect("there is always a current era");
        *current += 1;
        let era = eras.first + eras.counts.len() as u64 - 1;
        WriteTicket { tracker: self, era }
    }

    /// Waits until every write begun before this call has finished.
    pub(crate) async fn wait_for_earlier_writes(&self) {
        let barrier = {
            let mut eras = self.eras.lock().expect("write tracker lock poisoned");
            if eras.counts.iter().all(|&count| count == 0) {
                return;
            }
            let barrier = eras.first + eras.counts.len() as u64 - 1;
            eras.counts.push_back(0);
            barrier
        };
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.eras.lock().expect("write tracker lock poisoned").first > barrier {
                return;
            }
            notified.await;
        }
    }

    fn finish(&self, era: u64) {
        let mut eras = self.eras.lock().expect("write tracker lock poisoned");
        let index = usize::try_from(era - eras.first).expect("eras in flight fit in memory");
        assert!(eras.counts[index] > 0);
        eras.counts[index] -= 1;
        let mut advanced = false;
        while eras.counts.len() > 1 && eras.counts[0] == 0 {
            eras.counts.pop_front();
            eras.first += 1;
            advanced = true;
        }
        drop(eras);
        if advanced {
            self.drained.notify_waiters();
        }
    }
}

impl Drop for WriteTicket<'_> {
    fn drop(&mut self) {
        self.tracker.finish(self.era);
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
        drop(first);
        assert!(is_ready(flush.as_mut()), "a write begun after the flush does not hold it");
        assert!(!is_ready(second_flush.as_mut()), "the second flush waits for the later write");
        drop(later);
        assert!(is_ready(second_flush.as_mut()));
        let eras = tracker.eras.lock().unwrap();
        assert_eq!(eras.counts, [0]);
        assert_eq!(eras.first, 2);
    }
}
