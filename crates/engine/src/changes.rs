//! Which pages of each object the engine's recent writes changed, version by version: what lets
//! a replica that missed some writes receive only the pages they changed instead of the whole
//! object (`docs/adr/0023-catch-up-by-changed-pages.md`).
//!
//! Each object keeps a chain of its recent writes in the order the engine applied them: the
//! version the chain starts from, then each write's version and page mask. A holder of any
//! version on the chain needs exactly the pages the writes after it changed. Versions name
//! contents (a PG's primary never mints one version twice), so a member holding a version on
//! the chain holds those contents; one holding any other version is not on it, and gets the
//! whole object. A chain that starts where the object did not exist starts from [`ABSENT`]: a
//! replica without a copy needs only the pages written since (the others read as zeros). The
//! log is RAM only and bounded by a number of writes: the oldest are forgotten first, and an
//! engine that restarted knows only what replay of its journal tells it.

use std::collections::VecDeque;

use stdx::HashMap;

use crate::ObjectId;

/// The base of a chain that starts with the object's creation: no version is 0.
pub const ABSENT: u64 = 0;

/// One object's recent writes, oldest first.
struct Chain {
    /// The version the first write was applied on top of.
    base: u64,
    /// Each write's version and the pages it changed (bit `i`: page `i`).
    writes: VecDeque<(u64, u64)>,
}

pub(crate) struct ChangeLog {
    chains: HashMap<ObjectId, Chain>,
    /// Every write recorded, oldest first, to forget the oldest; entries of a chain that was
    /// since dropped are skipped when they come up.
    order: VecDeque<(ObjectId, u64)>,
    capacity_writes: usize,
}

impl ChangeLog {
    pub(crate) fn new(capacity_writes: usize) -> ChangeLog {
        ChangeLog { chains: HashMap::default(), order: VecDeque::new(), capacity_writes }
    }

    /// A write of `object` at `version`, changing the pages in `mask`, applied on top of
    /// version `previous` ([`ABSENT`]: the object did not exist).
    pub(crate) fn record_write(&mut self, object: ObjectId, previous: u64, version: u64, mask: u64) {
        assert_ne!(version, ABSENT, "{object}: a write at version 0");
        if self.capacity_writes == 0 {
            return;
        }
        if previous >= version {
            // Replay of a journal entry the written-back state already went past.
            self.chains.remove(&object);
            return;
        }
        let continues = |chain: &Chain| chain.writes.back().map_or(chain.base, |&(last, _)| last) == previous;
        match self.chains.get_mut(&object) {
            Some(chain) if continues(chain) => chain.writes.push_back((version, mask)),
            _ => {
                self.chains.insert(object, Chain { base: previous, writes: VecDeque::from([(version, mask)]) });
            }
        }
        self.order.push_back((object, version));
        while self.order.len() > self.capacity_writes {
            let (object, version) = self.order.pop_front().expect("over capacity");
            self.forget_oldest(object, version);
        }
    }

    /// The object was deleted: its next write starts a chain from [`ABSENT`].
    pub(crate) fn forget(&mut self, object: ObjectId) {
        self.chains.remove(&object);
    }

    /// The pages that changed from version `since` to version `current`, if the log holds
    /// every write in between: `Some(0)` when they are the same version.
    pub(crate) fn changed_since(&self, object: ObjectId, since: u64, current: u64) -> Option<u64> {
        if since == current {
            return Some(0);
        }
        let chain = self.chains.get(&object)?;
        if chain.writes.back().map(|&(last, _)| last) != Some(current) {
            return None;
        }
        let mut mask = 0;
        for index in (0..chain.writes.len()).rev() {
            mask |= chain.writes[index].1;
            let applied_on = if index == 0 { chain.base } else { chain.writes[index - 1].0 };
            if applied_on == since {
                return Some(mask);
            }
        }
        None
    }

    fn forget_oldest(&mut self, object: ObjectId, version: u64) {
        let Some(chain) = self.chains.get_mut(&object) else { return };
        if chain.writes.front().map(|&(oldest, _)| oldest) != Some(version) {
            return;
        }
        chain.writes.pop_front();
        if chain.writes.is_empty() {
            self.chains.remove(&object);
        } else {
            chain.base = version;
        }
    }
}

/// The mask of `count` pages from page `first`.
pub(crate) fn page_mask(first: u32, count: u32) -> u64 {
    assert!(first + count <= 64, "pages {first}..+{count} past an object's 64");
    if count == 64 {
        return u64::MAX;
    }
    ((1u64 << count) - 1) << first
}

#[cfg(test)]
mod tests {
    use super::*;

    const OBJECT: ObjectId = ObjectId { inode: 1, stripe: 2 };

    #[test]
    fn a_holder_of_a_version_on_the_chain_needs_the_pages_written_after_it() {
        let mut log = ChangeLog::new(16);
        log.record_write(OBJECT, 10, 11, 0b0001);
        log.record_write(OBJECT, 11, 12, 0b0100);
        log.record_write(OBJECT, 12, 13, 0b1000);
        assert_eq!(log.changed_since(OBJECT, 10, 13), Some(0b1101));
        assert_eq!(log.changed_since(OBJECT, 11, 13), Some(0b1100));
        assert_eq!(log.changed_since(OBJECT, 12, 13), Some(0b1000));
        assert_eq!(log.changed_since(OBJECT, 13, 13), Some(0));
        // A version never on the chain (a write that reached only that member) gets nothing.
        assert_eq!(log.changed_since(OBJECT, 9, 13), None);
        assert_eq!(log.changed_since(OBJECT, 12, 14), None);
    }

    #[test]
    fn a_gap_in_the_chain_starts_it_again() {
        let mut log = ChangeLog::new(16);
        log.record_write(OBJECT, 10, 11, 0b01);
        // A write applied on a version the chain does not end with (one that was not recorded).
        log.record_write(OBJECT, 20, 21, 0b10);
        assert_eq!(log.changed_since(OBJECT, 10, 21), None);
        assert_eq!(log.changed_since(OBJECT, 20, 21), Some(0b10));
    }

    #[test]
    fn a_new_object_starts_a_chain_from_absent_and_a_delete_ends_it() {
        let mut log = ChangeLog::new(16);
        log.record_write(OBJECT, ABSENT, 11, 0b01);
        log.record_write(OBJECT, 11, 12, 0b1000);
        // A replica without a copy needs only the pages written: the rest read as zeros.
        assert_eq!(log.changed_since(OBJECT, ABSENT, 12), Some(0b1001));
        log.forget(OBJECT);
        assert_eq!(log.changed_since(OBJECT, 11, 12), None);
        // Created again after the delete: holders of the old versions are not on its chain.
        log.record_write(OBJECT, ABSENT, 30, 0b10);
        assert_eq!(log.changed_since(OBJECT, 12, 30), None);
        assert_eq!(log.changed_since(OBJECT, ABSENT, 30), Some(0b10));
    }

    #[test]
    fn the_oldest_writes_are_forgotten_first() {
        let mut log = ChangeLog::new(3);
        let other = ObjectId { inode: 1, stripe: 3 };
        log.record_write(OBJECT, 1, 2, 0b001);
        log.record_write(other, 1, 2, 0b001);
        log.record_write(OBJECT, 2, 3, 0b010);
        log.record_write(OBJECT, 3, 4, 0b100);
        // OBJECT's first write went: a holder of version 1 is no longer covered, one of 2 is.
        assert_eq!(log.changed_since(OBJECT, 1, 4), None);
        assert_eq!(log.changed_since(OBJECT, 2, 4), Some(0b110));
        assert_eq!(log.changed_since(other, 1, 2), Some(0b001));
        log.record_write(OBJECT, 4, 5, 0b1000);
        assert_eq!(log.changed_since(other, 1, 2), None);
        assert!(log.chains.len() == 1 && log.order.len() == 3);
    }

    #[test]
    fn page_masks_cover_whole_objects() {
        assert_eq!(page_mask(0, 64), u64::MAX);
        assert_eq!(page_mask(3, 2), 0b11000);
        assert_eq!(page_mask(0, 32), 0xFFFF_FFFF);
    }
}
