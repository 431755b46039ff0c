//! Heads the mon said are sealed before this OSD's map says so (ADR 0026, wire op Sealed).
//!
//! Once every live OSD has confirmed the Barrier of a snapshot, writes to the new head may be
//! acknowledged (they run before; their acknowledgements wait). The mon tells the OSDs so while
//! it commits the seal, so that writers wait for neither that commit nor the map that carries it. A head is sealing only once (a snapshot or rollback
//! always makes a new inode), so a head named here stays sealed for good.

use std::cell::RefCell;
use std::collections::BTreeSet;

use cluster::ClusterMap;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

/// More heads sealed ahead of the map than any OSD keeps: the oldest are forgotten first, and
/// the map shows them sealed long before.
const HEADS_MAX: usize = 1024;

#[derive(Default)]
pub(crate) struct SealedHeads {
    heads: RefCell<BTreeSet<u64>>,
    changed: Notify,
}

impl SealedHeads {
    /// Records that head `inode` takes writes, dropping the heads `map` no longer shows
    /// sealing, and wakes the writes waiting for a seal.
    pub(crate) fn seal(&self, inode: u64, map: &ClusterMap) {
        let mut heads = self.heads.borrow_mut();
        heads.retain(|&head| map.layer(head).is_none_or(|layer| layer.sealing));
        heads.insert(inode);
        while heads.len() > HEADS_MAX {
            heads.pop_first();
        }
        drop(heads);
        self.changed.notify_waiters();
    }

    pub(crate) fn contains(&self, inode: u64) -> bool {
        self.heads.borrow().contains(&inode)
    }

    /// Completes at the next [`SealedHeads::seal`]; take it before looking, so that a seal in
    /// between is not missed.
    pub(crate) fn changed(&self) -> Notified<'_> {
        self.changed.notified()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_seal_wakes_a_waiter_that_looked_before_it() {
        let heads = SealedHeads::default();
        let changed = heads.changed();
        assert!(!heads.contains(7));
        heads.seal(7, &ClusterMap::default());
        assert!(heads.contains(7));
        assert!(futures_util::FutureExt::now_or_never(changed).is_some());
    }

    #[test]
    fn the_oldest_heads_go_past_the_bound() {
        let heads = SealedHeads::default();
        for inode in 0..HEADS_MAX as u64 + 10 {
            heads.seal(inode, &ClusterMap::default());
        }
        assert!(!heads.contains(9) && heads.contains(10) && heads.contains(HEADS_MAX as u64 + 9));
    }
}
