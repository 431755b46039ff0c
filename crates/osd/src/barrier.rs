//! Client writes in flight, by the revision of the cluster map that admitted them: what a
//! snapshot's seal waits on (ADR 0026). Once this OSD has applied the map that froze a layer,
//! it admits no new write to it; the writes it admitted before have finished once none
//! admitted under an older map is in flight.

use std::cell::RefCell;
use std::collections::BTreeMap;

use tokio::sync::Notify;

#[derive(Default)]
pub(crate) struct WritesByRevision {
    in_flight: RefCell<BTreeMap<i64, usize>>,
    finished: Notify,
}

/// One admitted client write, counted until it is dropped.
pub(crate) struct AdmittedWrite<'a> {
    writes: &'a WritesByRevision,
    revision: i64,
}

impl WritesByRevision {
    /// Counts a write admitted under the map of `revision`.
    pub(crate) fn admitted(&self, revision: i64) -> AdmittedWrite<'_> {
        *self.in_flight.borrow_mut().entry(revision).or_default() += 1;
        AdmittedWrite { writes: self, revision }
    }

    /// Whether a write admitted under a map older than `revision` is in flight.
    pub(crate) fn any_older_than(&self, revision: i64) -> bool {
        self.in_flight.borrow().range(..revision).next().is_some()
    }

    /// Waits until no write admitted under a map older than `revision` is in flight.
    pub(crate) async fn drained_before(&self, revision: i64) {
        loop {
            let finished = self.finished.notified();
            if !self.any_older_than(revision) {
                return;
            }
            finished.await;
        }
    }
}

impl Drop for AdmittedWrite<'_> {
    fn drop(&mut self) {
        let mut in_flight = self.writes.in_flight.borrow_mut();
        let count = in_flight.get_mut(&self.revision).expect("an admitted write is counted");
        *count -= 1;
        if *count == 0 {
            in_flight.remove(&self.revision);
            drop(in_flight);
            self.writes.finished.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_barrier_waits_only_for_writes_admitted_under_older_maps() {
        let writes = WritesByRevision::default();
        let old = writes.admitted(5);
        let new = writes.admitted(9);
        assert!(writes.any_older_than(6) && !writes.any_older_than(5));
        let waiting = writes.drained_before(7);
        let mut waiting = std::pin::pin!(waiting);
        assert!(futures_util::FutureExt::now_or_never(waiting.as_mut()).is_none());
        drop(old);
        assert!(futures_util::FutureExt::now_or_never(waiting.as_mut()).is_some());
        assert!(writes.any_older_than(10));
        drop(new);
        assert!(!writes.any_older_than(i64::MAX));
    }
}
