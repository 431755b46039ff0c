//! `HashMap` and `HashSet` whose iteration order is random per map in production, as std's is
//! (keys a peer chooses cannot be aimed at one bucket), and the same in every run on a thread a
//! simulation marked with [`fix_on_this_thread`], so that a seed replays exactly (ADR 0020).

use std::cell::Cell;
use std::collections::hash_map::{DefaultHasher, RandomState};
use std::hash::BuildHasher;

pub type HashMap<K, V> = std::collections::HashMap<K, V, MapHasher>;
pub type HashSet<T> = std::collections::HashSet<T, MapHasher>;

thread_local! {
    static FIXED: Cell<bool> = const { Cell::new(false) };
}

/// std's hasher with random keys, or with fixed ones on a marked thread. Chosen when the map is
/// made.
#[derive(Clone, Debug)]
pub struct MapHasher(Option<RandomState>);

impl Default for MapHasher {
    fn default() -> MapHasher {
        if FIXED.with(Cell::get) {
            MapHasher(None)
        } else {
            MapHasher(Some(RandomState::new()))
        }
    }
}

impl BuildHasher for MapHasher {
    type Hasher = DefaultHasher;

    fn build_hasher(&self) -> DefaultHasher {
        match &self.0 {
            Some(random) => random.build_hasher(),
            None => DefaultHasher::new(),
        }
    }
}

/// Maps made on this thread from now on iterate in the same order in every run (`false`:
/// random again).
pub fn fix_on_this_thread(fixed: bool) {
    FIXED.with(|flag| flag.set(fixed));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order() -> Vec<u32> {
        let map: HashMap<u32, ()> = (0..64).map(|key| (key, ())).collect();
        map.keys().copied().collect()
    }

    #[test]
    fn maps_on_a_marked_thread_iterate_alike_and_others_do_not() {
        fix_on_this_thread(true);
        assert_eq!(order(), order());
        fix_on_this_thread(false);
        // 64 keys in the same order twice by chance: about 1 in 64! for each pair of maps.
        assert!((0..4).any(|_| order() != order()), "random keys per map");
    }
}
