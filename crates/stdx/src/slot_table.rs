//! A table of values in reusable slots, named by ids that carry the slot's generation.
//!
//! An id is `generation << 32 | index`. A slot's generation grows every time its value leaves
//! (and on [`SlotTable::renew`]), so an id that outlived its value names nothing: a completion
//! that arrives late, or a reply to a call that gave up, is recognised instead of landing on the
//! slot's next value. Generations use 31 bits, so an id's top bit is always clear and a caller
//! may shift one tag bit in below it (io_uring's user data does).
//!
//! Slots are reused, most recently freed first, so a table that reached its working size
//! allocates nothing.

const INDEX_BITS: u32 = 32;
const GENERATION_MASK: u32 = (1 << 31) - 1;

/// Values in slots, at most `capacity` at once.
#[derive(Debug)]
pub struct SlotTable<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
    capacity: usize,
}

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

fn id(index: u32, generation: u32) -> u64 {
    (u64::from(generation) << INDEX_BITS) | u64::from(index)
}

fn split(id: u64) -> (usize, u32) {
    // Cannot truncate: the low half is the index, the high half the generation.
    ((id & u64::from(u32::MAX)) as usize, (id >> INDEX_BITS) as u32)
}

impl<T> SlotTable<T> {
    /// An empty table that holds at most `capacity` values (at most 2^32).
    pub fn new(capacity: usize) -> SlotTable<T> {
        assert!(capacity as u64 <= 1 << INDEX_BITS, "a slot table holds at most 2^32 values");
        SlotTable { slots: Vec::new(), free: Vec::new(), len: 0, capacity }
    }

    /// How many values the table holds.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots created so far: the most values the table has held at once.
    pub fn allocated(&self) -> usize {
        self.slots.len()
    }

    pub fn is_full(&self) -> bool {
        self.len == self.capacity
    }

    /// Puts `value` in a free slot and returns its id, or gives it back when the table is full.
    pub fn insert(&mut self, value: T) -> Result<u64, T> {
        if self.is_full() {
            return Err(value);
        }
        self.len += 1;
        if let Some(index) = self.free.pop() {
            let slot = &mut self.slots[index as usize];
            assert!(slot.value.is_none(), "slot {index} is on the free list but holds a value");
            slot.value = Some(value);
            return Ok(id(index, slot.generation));
        }
        // Cannot truncate: below the capacity, at most 2^32.
        let index = self.slots.len() as u32;
        self.slots.push(Slot { generation: 0, value: Some(value) });
        Ok(id(index, 0))
    }

    /// The value `id` names, if it is still in the table.
    pub fn get(&self, id: u64) -> Option<&T> {
        let (index, generation) = split(id);
        self.slots.get(index).filter(|slot| slot.generation == generation)?.value.as_ref()
    }

    /// The value `id` names, if it is still in the table.
    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let (index, generation) = split(id);
        self.slots.get_mut(index).filter(|slot| slot.generation == generation)?.value.as_mut()
    }

    /// Takes the value `id` names out of the table; `id` names nothing from then on.
    pub fn remove(&mut self, id: u64) -> Option<T> {
        let (index, generation) = split(id);
        let slot = self.slots.get_mut(index).filter(|slot| slot.generation == generation)?;
        let value = slot.value.take()?;
        slot.generation = (slot.generation + 1) & GENERATION_MASK;
        // Cannot truncate: an index of this table.
        self.free.push(index as u32);
        self.len -= 1;
        Some(value)
    }

    /// Gives the value `id` names a new id and returns it; `id` names nothing from then on.
    pub fn renew(&mut self, id: u64) -> Option<u64> {
        let (index, generation) = split(id);
        let slot = self.slots.get_mut(index).filter(|slot| slot.generation == generation && slot.value.is_some())?;
        slot.generation = (slot.generation + 1) & GENERATION_MASK;
        // Cannot truncate: an index of this table.
        Some(self::id(index as u32, slot.generation))
    }

    /// Every value in the table.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().filter_map(|slot| slot.value.as_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_found_by_its_id_until_removed() {
        let mut table = SlotTable::new(4);
        let a = table.insert("a").unwrap();
        let b = table.insert("b").unwrap();
        assert_ne!(a, b);
        assert_eq!(table.get(a), Some(&"a"));
        *table.get_mut(b).unwrap() = "B";
        assert_eq!(table.remove(b), Some("B"));
        assert_eq!(table.get(b), None);
        assert_eq!(table.remove(b), None);
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn a_stale_id_never_reaches_the_slots_next_value() {
        let mut table = SlotTable::new(1);
        let first = table.insert(1).unwrap();
        table.remove(first).unwrap();
        let second = table.insert(2).unwrap();
        assert_eq!(split(first).0, split(second).0, "the slot is reused");
        assert_eq!(table.get(first), None);
        assert_eq!(table.remove(first), None);
        assert_eq!(table.get(second), Some(&2));
    }

    #[test]
    fn renewing_retires_the_old_id() {
        let mut table = SlotTable::new(2);
        let old = table.insert('x').unwrap();
        let new = table.renew(old).unwrap();
        assert_eq!(table.get(old), None);
        assert_eq!(table.renew(old), None);
        assert_eq!(table.get(new), Some(&'x'));
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn a_full_table_gives_the_value_back() {
        let mut table = SlotTable::new(2);
        let a = table.insert(1).unwrap();
        table.insert(2).unwrap();
        assert!(table.is_full());
        assert_eq!(table.insert(3), Err(3));
        table.remove(a).unwrap();
        assert!(table.insert(3).is_ok());
    }

    #[test]
    fn ids_from_garbage_name_nothing() {
        let mut table = SlotTable::new(2);
        let a = table.insert(1).unwrap();
        assert_eq!(table.get(a + 1), None);
        assert_eq!(table.get(a | 1 << 40), None);
        assert_eq!(table.get_mut(u64::MAX), None);
    }

    #[test]
    fn generations_wrap_within_31_bits() {
        let mut table = SlotTable::new(1);
        let mut id = table.insert(()).unwrap();
        for _ in 0..5 {
            id = table.renew(id).unwrap();
        }
        table.slots[0].generation = GENERATION_MASK;
        let last = self::id(0, GENERATION_MASK);
        let wrapped = table.renew(last).unwrap();
        assert_eq!(wrapped >> 63, 0);
        assert_eq!(split(wrapped).1, 0);
        let _ = id;
    }

    #[test]
    fn values_mut_visits_every_value() {
        let mut table = SlotTable::new(3);
        let a = table.insert(1).unwrap();
        table.insert(2).unwrap();
        table.insert(3).unwrap();
        table.remove(a);
        let mut values: Vec<_> = table.values_mut().map(|value| *value).collect();
        values.sort();
        assert_eq!(values, [2, 3]);
    }
}
