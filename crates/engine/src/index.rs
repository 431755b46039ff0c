//! The in-memory index of written-back objects: object -> (data block, version).
//!
//! It is the engine's only per-object RAM cost, budgeted at 32 bytes per object (256 MiB per
//! TiB of 128 KiB objects). A general hash map of `(u64, u64) -> (u32, u64)` costs 33 to 75
//! bytes per object, so objects are grouped by `(inode, stripe >> 32)` into open-addressing
//! tables of 16-byte slots that grow by 1.5x at 85% load: 18.8 to 28.3 bytes per object, plus a
//! fixed cost per group that volumes amortise over many objects.

use stdx::HashMap;

use crate::ObjectId;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub block: u32,
    pub version: u64,
}

#[derive(Clone, Copy)]
struct Slot {
    stripe_low: u32,
    /// `EMPTY_BLOCK` marks a free slot.
    block: u32,
    version: u64,
}

const EMPTY_BLOCK: u32 = u32::MAX;
const EMPTY_SLOT: Slot = Slot { stripe_low: 0, block: EMPTY_BLOCK, version: 0 };
const _: () = assert!(size_of::<Slot>() == 16);
const TABLE_CAPACITY_MIN: usize = 8;

/// Linear probing with backward-shift deletion; capacity need not be a power of two.
#[derive(Default)]
struct Table {
    slots: Vec<Slot>,
    len: usize,
}

impl Table {
    fn home(&self, stripe_low: u32) -> usize {
        // Fibonacci hashing, then a multiply-shift range reduction.
        let hash = (u64::from(stripe_low).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize;
        (hash * self.slots.len()) >> 32
    }

    fn find(&self, stripe_low: u32) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mut at = self.home(stripe_low);
        loop {
            let slot = &self.slots[at];
            if slot.block == EMPTY_BLOCK {
                return None;
            }
            if slot.stripe_low == stripe_low {
                return Some(at);
            }
            at += 1;
            if at == self.slots.len() {
                at = 0;
            }
        }
    }

    fn insert(&mut self, stripe_low: u32, entry: IndexEntry) -> Option<IndexEntry> {
        assert_ne!(entry.block, EMPTY_BLOCK);
        if let Some(at) = self.find(stripe_low) {
            let slot = &mut self.slots[at];
            let old = IndexEntry { block: slot.block, version: slot.version };
            slot.block = entry.block;
            slot.version = entry.version;
            return Some(old);
        }
        if (self.len + 1) * 100 > self.slots.len() * 85 {
            self.grow();
        }
        let mut at = self.home(stripe_low);
        while self.slots[at].block != EMPTY_BLOCK {
            at = if at + 1 == self.slots.len() { 0 } else { at + 1 };
        }
        self.slots[at] = Slot { stripe_low, block: entry.block, version: entry.version };
        self.len += 1;
        None
    }

    fn grow(&mut self) {
        let capacity = (self.slots.len() * 3 / 2).max(TABLE_CAPACITY_MIN);
        let old = std::mem::replace(&mut self.slots, vec![EMPTY_SLOT; capacity]);
        self.len = 0;
        for slot in old.into_iter().filter(|slot| slot.block != EMPTY_BLOCK) {
            self.insert(slot.stripe_low, IndexEntry { block: slot.block, version: slot.version });
        }
    }

    fn remove(&mut self, stripe_low: u32) -> Option<IndexEntry> {
        let mut hole = self.find(stripe_low)?;
        let removed = IndexEntry { block: self.slots[hole].block, version: self.slots[hole].version };
        let capacity = self.slots.len();
        let mut at = hole;
        loop {
            at = if at + 1 == capacity { 0 } else { at + 1 };
            let slot = self.slots[at];
            if slot.block == EMPTY_BLOCK {
                break;
            }
            let home = self.home(slot.stripe_low);
            // The slot may move back into the hole only if its home is not inside (hole, at].
            let home_between = if hole <= at { hole < home && home <= at } else { hole < home || home <= at };
            if !home_between {
                self.slots[hole] = slot;
                hole = at;
            }
        }
        self.slots[hole] = EMPTY_SLOT;
        self.len -= 1;
        Some(removed)
    }
}

#[derive(Default)]
pub struct Index {
    tables: HashMap<(u64, u32), Table>,
    len: usize,
}

fn split(object: ObjectId) -> ((u64, u32), u32) {
    ((object.inode, (object.stripe >> 32) as u32), object.stripe as u32)
}

impl Index {
    pub fn get(&self, object: ObjectId) -> Option<IndexEntry> {
        let (group, low) = split(object);
        let table = self.tables.get(&group)?;
        let slot = table.slots[table.find(low)?];
        Some(IndexEntry { block: slot.block, version: slot.version })
    }

    pub fn insert(&mut self, object: ObjectId, entry: IndexEntry) -> Option<IndexEntry> {
        let (group, low) = split(object);
        let old = self.tables.entry(group).or_default().insert(low, entry);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    pub fn remove(&mut self, object: ObjectId) -> Option<IndexEntry> {
        let (group, low) = split(object);
        let table = self.tables.get_mut(&group)?;
        let removed = table.remove(low)?;
        self.len -= 1;
        if table.len == 0 {
            self.tables.remove(&group);
        }
        Some(removed)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn iter(&self) -> impl Iterator<Item = (ObjectId, IndexEntry)> + '_ {
        self.tables.iter().flat_map(|(&(inode, high), table)| {
            table.slots.iter().filter(|slot| slot.block != EMPTY_BLOCK).map(move |slot| {
                let object = ObjectId { inode, stripe: (u64::from(high) << 32) | u64::from(slot.stripe_low) };
                (object, IndexEntry { block: slot.block, version: slot.version })
            })
        })
    }

    /// Heap bytes held: the slot tables plus the group map's buckets.
    pub fn memory_bytes(&self) -> usize {
        let slots: usize = self.tables.values().map(|table| table.slots.capacity() * size_of::<Slot>()).sum();
        let group_bucket = size_of::<((u64, u32), Table)>() + 1;
        slots + self.tables.capacity() * group_bucket
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn matches_a_map_under_random_operations() {
        let mut index = Index::default();
        let mut model = BTreeMap::new();
        let mut rng = 42u64;
        for step in 0..200_000u64 {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let object = ObjectId { inode: (rng >> 62) & 1, stripe: ((rng >> 40) % 3000) | ((rng >> 61) & 1) << 32 };
            if (rng >> 20).is_multiple_of(3) {
                assert_eq!(index.remove(object), model.remove(&object));
            } else {
                let entry = IndexEntry { block: (step % 1000) as u32, version: step };
                assert_eq!(index.insert(object, entry), model.insert(object, entry));
            }
            assert_eq!(index.len(), model.len());
        }
        let mut listed: Vec<_> = index.iter().collect();
        listed.sort_by_key(|(object, _)| *object);
        assert_eq!(listed, model.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn stays_within_the_ram_budget() {
        let mut index = Index::default();
        for stripe in 0..1_000_000u64 {
            index.insert(ObjectId { inode: 7, stripe }, IndexEntry { block: stripe as u32, version: stripe });
        }
        let per_object = index.memory_bytes() as f64 / index.len() as f64;
        assert!(per_object <= 32.0, "{per_object} bytes per object");
    }
}
