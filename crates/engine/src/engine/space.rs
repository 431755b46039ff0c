//! Accounting of what writes consume: data blocks (holders, reservations, allocation, holds
//! released only once the journal tail has passed) and journal space (where the next record
//! fits). Every path that takes or gives back a block goes through here, so the free count
//! stays exact.

use platform::Disk;

use super::{DirtyKind, Engine};
use crate::ObjectId;

impl<D: Disk> Engine<D> {
    pub(super) fn hold_block(&mut self, block: u32) {
        let refs = &mut self.block_refs[block as usize];
        if *refs == 0 {
            self.free_blocks -= 1;
        }
        *refs = refs.checked_add(1).expect("block reference count overflow");
    }

    /// Releases a hold the write-back job gave up in the job that wrote back records up to
    /// `last_seq`, once the superblock's tail has moved past them.
    ///
    /// Until then replay after a crash starts at or before those records and applies them
    /// again (their effect is recognised as written back only while the object's metadata entry is
    /// newer, not after a delete). If the block were reused meanwhile, a replayed whole-object
    /// write would name a block that now holds another object's data, and writing it back again
    /// would clear that object's metadata entry.
    pub(super) fn release_block_after_trim(&mut self, last_seq: u64, block: u32) {
        assert!(self.blocks_awaiting_trim.back().is_none_or(|&(seq, _)| seq <= last_seq));
        self.blocks_awaiting_trim.push_back((last_seq, block));
    }

    pub(super) fn release_block(&mut self, block: u32) {
        let refs = &mut self.block_refs[block as usize];
        assert!(*refs > 0, "block {block} released while free");
        *refs -= 1;
        if *refs == 0 {
            self.free_blocks += 1;
        }
    }

    /// Takes a free block, or `None` when every free block is promised.
    pub(super) fn allocate_block(&mut self, use_reservation: bool) -> Option<u32> {
        if use_reservation {
            assert!(self.reserved_blocks > 0);
            self.reserved_blocks -= 1;
        } else if self.free_blocks <= self.reserved_blocks {
            return None;
        }
        assert!(self.free_blocks > 0);
        let count = self.geometry.block_count;
        let mut block = self.allocation_cursor;
        loop {
            if self.block_refs[block as usize] == 0 {
                break;
            }
            block += 1;
            if block == count {
                block = 0;
            }
            assert_ne!(block, self.allocation_cursor, "free block count is wrong");
        }
        self.allocation_cursor = if block + 1 == count { 0 } else { block + 1 };
        self.hold_block(block);
        Some(block)
    }

    /// Whether the object will own a block once everything committed for it is written back.
    ///
    /// Small writes after the last delete (or on an object that has no block) hold the
    /// object's reservation, or, once a write-back job has planned them, the block the job
    /// allocated from it; either way the object will own a block, and a further small write
    /// must not reserve another one (nothing would ever consume it).
    pub(super) fn object_has_block(&self, object: ObjectId) -> bool {
        if let Some(dirty) = self.dirty.get(&object) {
            let mut small_after = false;
            for entry in dirty.entries.iter().rev() {
                match entry.kind {
                    DirtyKind::Big { .. } => return true,
                    DirtyKind::Delete => return small_after,
                    DirtyKind::Small { .. } => small_after = true,
                }
            }
            if small_after {
                return true;
            }
        }
        self.index.get(object).is_some()
    }

    pub(super) fn journal_used_bytes(&self) -> u64 {
        let g = self.geometry;
        let Some(first) = self.records.front() else { return 0 };
        let tail = first.offset_bytes;
        let head = self.journal_head_bytes;
        if head > tail {
            head - tail
        } else {
            g.journal_size_bytes - (tail - head)
        }
    }

    /// Where a record of `size` bytes can go now, if anywhere.
    pub(super) fn journal_place(&self, size: u64) -> Option<u64> {
        let g = self.geometry;
        let head = self.journal_head_bytes;
        let Some(first) = self.records.front() else {
            if head + size <= g.journal_end_bytes() {
                return Some(head);
            }
            return (g.journal_offset_bytes + size <= g.journal_end_bytes()).then_some(g.journal_offset_bytes);
        };
        let tail = first.offset_bytes;
        if head > tail {
            if head + size <= g.journal_end_bytes() {
                return Some(head);
            }
            (g.journal_offset_bytes + size <= tail).then_some(g.journal_offset_bytes)
        } else {
            (head + size <= tail).then_some(head)
        }
    }
}
