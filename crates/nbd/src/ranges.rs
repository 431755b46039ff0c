//! Range locks over an export's bytes, shared by every connection to the export in one server:
//! what keeps two read-modify-writes of one 4 KiB page from losing an update.
//!
//! A read-modify-write (a write not aligned to the export block size) takes its pages
//! *exclusively*; every other write, write-zeroes and trim takes its pages *shared*. Shared
//! holders run together; an exclusive holder runs alone on its pages. A waiting exclusive request
//! keeps new shared requests on its pages out, so a stream of aligned writes cannot starve it.
//! Reads take no lock: a read racing a write may see either contents, as on any disk.
//!
//! Held locks never wait for anything but the export call they protect, so there is no cycle
//! and no deadlock. Contention is rare (unaligned writes are), so the table is a plain vector
//! under a mutex and a release wakes every waiter.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Shared,
    Exclusive,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Shared,
    Exclusive,
    /// An exclusive request that waits; it blocks new shared requests.
    Waiting,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    start_bytes: u64,
    end_bytes: u64,
    state: State,
}

#[derive(Debug, Default)]
struct Table {
    entries: Vec<Entry>,
    next_id: u64,
}

/// The range locks of one export.
#[derive(Debug, Default)]
pub(crate) struct RangeLocks {
    table: Mutex<Table>,
    released: Notify,
}

/// A held (or, while [`RangeLocks::lock`] waits, a waiting) range; dropping it releases it.
#[derive(Debug)]
pub(crate) struct RangeGuard {
    locks: Arc<RangeLocks>,
    id: u64,
}

impl RangeLocks {
    /// Locks `[start_bytes, end_bytes)` in `mode`, waiting for conflicting holders.
    pub(crate) async fn lock(self: &Arc<Self>, start_bytes: u64, end_bytes: u64, mode: Mode) -> RangeGuard {
        assert!(start_bytes < end_bytes);
        let mut waiting: Option<RangeGuard> = None;
        loop {
            let notified = {
                let mut table = self.table.lock().expect("range lock table poisoned");
                let waiting_id = waiting.as_ref().map(|guard| guard.id);
                let conflict = table.entries.iter().any(|entry| {
                    Some(entry.id) != waiting_id
                        && entry.start_bytes < end_bytes
                        && start_bytes < entry.end_bytes
                        && match mode {
                            Mode::Shared => entry.state != State::Shared,
                            Mode::Exclusive => entry.state != State::Waiting,
                        }
                });
                if !conflict {
                    let state = match mode {
                        Mode::Shared => State::Shared,
                        Mode::Exclusive => State::Exclusive,
                    };
                    if let Some(guard) = waiting.take() {
                        let entry = table.entries.iter_mut().find(|entry| entry.id == guard.id);
                        entry.expect("a waiting entry stays in the table until its guard drops").state = state;
                        return guard;
                    }
                    return self.insert(&mut table, start_bytes, end_bytes, state);
                }
                if mode == Mode::Exclusive && waiting.is_none() {
                    waiting = Some(self.insert(&mut table, start_bytes, end_bytes, State::Waiting));
                }
                // Registered before the table is unlocked, so a release in between still wakes us.
                let mut notified = Box::pin(self.released.notified());
                notified.as_mut().enable();
                notified
            };
            notified.await;
        }
    }

    fn insert(self: &Arc<Self>, table: &mut Table, start_bytes: u64, end_bytes: u64, state: State) -> RangeGuard {
        let id = table.next_id;
        table.next_id += 1;
        table.entries.push(Entry { id, start_bytes, end_bytes, state });
        RangeGuard { locks: self.clone(), id }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.table.lock().expect("range lock table poisoned").entries.len()
    }
}

impl Drop for RangeGuard {
    fn drop(&mut self) {
        {
            let mut table = self.locks.table.lock().expect("range lock table poisoned");
            let index = table.entries.iter().position(|entry| entry.id == self.id);
            table.entries.swap_remove(index.expect("a guard's entry stays in the table until it drops"));
        }
        self.locks.released.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use super::*;

    fn pending<F: std::future::Future>(future: F) -> bool {
        let waker = futures_util::task::noop_waker();
        let mut context = std::task::Context::from_waker(&waker);
        pin!(future).poll(&mut context).is_pending()
    }

    #[tokio::test]
    async fn shared_holders_run_together_and_exclusive_alone() {
        let locks = Arc::new(RangeLocks::default());
        let first = locks.lock(0, 8192, Mode::Shared).await;
        let _second = locks.lock(4096, 12288, Mode::Shared).await;
        assert!(pending(locks.lock(0, 4096, Mode::Exclusive)));
        // A cancelled wait leaves nothing behind.
        assert_eq!(locks.len(), 2);
        let _elsewhere = locks.lock(12288, 16384, Mode::Exclusive).await;
        drop(first);
        assert!(!pending(locks.lock(0, 4096, Mode::Exclusive)));
    }

    #[tokio::test]
    async fn a_waiting_exclusive_keeps_new_shared_out() {
        let locks = Arc::new(RangeLocks::default());
        let shared = locks.lock(0, 4096, Mode::Shared).await;
        let waiter = tokio::spawn({
            let locks = locks.clone();
            async move {
                let _guard = locks.lock(0, 4096, Mode::Exclusive).await;
            }
        });
        while locks.len() < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(pending(locks.lock(0, 4096, Mode::Shared)));
        drop(shared);
        waiter.await.unwrap();
        assert_eq!(locks.len(), 0);
        let _shared = locks.lock(0, 4096, Mode::Shared).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn exclusive_holders_run_alone() {
        let locks = Arc::new(RangeLocks::default());
        let exclusive = Arc::new(AtomicU32::new(0));
        let shared = Arc::new(AtomicU32::new(0));
        let mut tasks = Vec::new();
        for index in 0..64u64 {
            let (locks, exclusive, shared) = (locks.clone(), exclusive.clone(), shared.clone());
            tasks.push(tokio::spawn(async move {
                for round in 0..50u64 {
                    // Every range overlaps every other.
                    let start = (index + round) % 3 * 1024;
                    if (index + round) % 3 == 0 {
                        let _guard = locks.lock(start, start + 4096, Mode::Shared).await;
                        shared.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(exclusive.load(Ordering::SeqCst), 0);
                        tokio::task::yield_now().await;
                        shared.fetch_sub(1, Ordering::SeqCst);
                    } else {
                        let _guard = locks.lock(start, start + 4096, Mode::Exclusive).await;
                        assert_eq!(exclusive.fetch_add(1, Ordering::SeqCst), 0);
                        assert_eq!(shared.load(Ordering::SeqCst), 0);
                        tokio::task::yield_now().await;
                        exclusive.fetch_sub(1, Ordering::SeqCst);
                    }
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(locks.len(), 0);
    }
}
