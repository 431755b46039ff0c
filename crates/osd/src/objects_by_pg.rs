//! The objects this OSD holds, by pool and PG, so that listing one PG (peering, a member's
//! `SecList` pages, recovery, scrub, strays) costs the objects of that PG, not a walk of every
//! object of the drive on the OSD's one thread.
//!
//! The engine knows objects, not PGs, and where an object goes depends on its pool's PG count,
//! which only the map tells. So the index holds each pool's objects unplaced until a listing
//! names the pool's PG count, and by PG from then on (a pool's PG count never changes).
//!
//! It may name more objects than the engine holds, never fewer: every object the engine held at
//! open is entered then, every write enters its object when it is submitted, and an entry
//! leaves only when a listing finds the engine no longer holds the object and no write of it is
//! in flight. A write the engine has queued but not yet journaled does not show in the engine
//! (`Engine::object_exists` is false for a new object until then, which on a slow drive lasts
//! long), so an entry forgotten then would hide the object from every later listing, and
//! peering would take a member's list that lacks an acknowledged write for the truth.
//! Listings answer from the engine (`Engine::object_exists`, `object_version`), so they are
//! exactly what a walk of every object would answer.

use std::collections::BTreeSet;

use cluster::{object_pg, VolumeRecord};
use engine::ObjectId;
use stdx::HashMap;

use crate::engine_io::OsdEngine;

#[derive(Default)]
pub(crate) struct ObjectsByPg {
    pools: HashMap<u32, Pool>,
    /// Objects with writes submitted and not completed, and how many.
    writing: HashMap<ObjectId, u32>,
}

enum Pool {
    /// No listing has named the pool's PG count yet.
    Unplaced(BTreeSet<ObjectId>),
    Placed {
        pg_count: u32,
        pgs: Vec<BTreeSet<ObjectId>>,
    },
}

impl Pool {
    fn placed(&mut self, pg_count: u32) -> &mut Vec<BTreeSet<ObjectId>> {
        assert!(pg_count > 0, "a pool has at least one PG");
        if let Pool::Unplaced(objects) = self {
            let mut pgs = vec![BTreeSet::new(); pg_count as usize];
            for object in std::mem::take(objects) {
                pgs[object_pg(object.inode, object.stripe, pg_count) as usize].insert(object);
            }
            *self = Pool::Placed { pg_count, pgs };
        }
        match self {
            Pool::Placed { pg_count: placed, pgs } => {
                assert_eq!(*placed, pg_count, "a pool's PG count changed");
                pgs
            }
            Pool::Unplaced(_) => unreachable!("placed above"),
        }
    }
}

impl ObjectsByPg {
    /// The index of every object `engine` holds (one walk, when the OSD opens its drive).
    pub(crate) fn of(engine: &OsdEngine) -> ObjectsByPg {
        let mut index = ObjectsByPg::default();
        for (object, _) in engine.list_objects() {
            index.enter(object);
        }
        index
    }

    /// Enters `object`, which a write submitted now creates or changes: its entry stays at
    /// least until [`ObjectsByPg::write_finished`].
    pub(crate) fn write_started(&mut self, object: ObjectId) {
        *self.writing.entry(object).or_default() += 1;
        self.enter(object);
    }

    /// A write of `object` completed (or failed): the engine shows its outcome from now on.
    pub(crate) fn write_finished(&mut self, object: ObjectId) {
        let count = self.writing.get_mut(&object).expect("a write finished that was never started");
        *count -= 1;
        if *count == 0 {
            self.writing.remove(&object);
        }
    }

    fn enter(&mut self, object: ObjectId) {
        let pool = self.pools.entry(VolumeRecord::pool_of(object.inode)).or_insert(Pool::Unplaced(BTreeSet::new()));
        match pool {
            Pool::Unplaced(objects) => {
                objects.insert(object);
            }
            Pool::Placed { pg_count, pgs } => {
                pgs[object_pg(object.inode, object.stripe, *pg_count) as usize].insert(object);
            }
        }
    }

    /// The objects the engine holds of PG `pg` of `pool` (of `pg_count` PGs) from `start` on, in
    /// order, with their versions, at most `count_max`. Forgets the entries of objects the
    /// engine no longer holds that it passes.
    pub(crate) fn list(
        &mut self,
        engine: &OsdEngine,
        pool: u32,
        pg: u32,
        pg_count: u32,
        start: ObjectId,
        count_max: usize,
    ) -> Vec<(ObjectId, u64)> {
        let Some(entry) = self.pools.get_mut(&pool) else { return Vec::new() };
        let Some(objects) = entry.placed(pg_count).get_mut(pg as usize) else { return Vec::new() };
        let writing = &self.writing;
        let mut listed = Vec::new();
        let mut gone = Vec::new();
        for &object in objects.range(start..) {
            if listed.len() == count_max {
                break;
            }
            match engine.object_exists(object).then(|| engine.object_version(object)).flatten() {
                Some(version) => listed.push((object, version)),
                None if writing.contains_key(&object) => {}
                None => gone.push(object),
            }
        }
        for object in gone {
            objects.remove(&object);
        }
        listed
    }

    /// The pools with objects here.
    pub(crate) fn pools(&self) -> Vec<u32> {
        let mut pools: Vec<u32> = self.pools.keys().copied().collect();
        pools.sort_unstable();
        pools
    }

    /// The PGs of `pool` (of `pg_count` PGs) with entries here.
    pub(crate) fn pgs_with_objects(&mut self, pool: u32, pg_count: u32) -> Vec<u32> {
        let Some(entry) = self.pools.get_mut(&pool) else { return Vec::new() };
        let pgs = entry.placed(pg_count);
        (0..pg_count).filter(|&pg| !pgs[pg as usize].is_empty()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::{AlignedBuffer, Engine, EngineOptions, FormatOptions, Request};
    use sim::{SimDisk, SimDiskOptions};

    fn engine() -> OsdEngine {
        let disk = SimDisk::new(SimDiskOptions { size_bytes: 64 << 20, ..SimDiskOptions::default() });
        let format = FormatOptions { object_size_bytes: 16 * 1024, journal_size_bytes: Some(4 << 20), nonce: 1 };
        let disk = Engine::format(disk, &format).expect("format");
        let disk: Box<dyn platform::Disk> = Box::new(disk);
        Engine::open(disk, &EngineOptions::default()).expect("open")
    }

    fn write(engine: &mut OsdEngine, index: &mut ObjectsByPg, object: ObjectId) {
        index.write_started(object);
        engine.submit(0, Request::Write { object, offset_bytes: 0, data: AlignedBuffer::from_slice(&[7; 4096]) });
        let mut completions = Vec::new();
        while completions.is_empty() {
            engine.poll(&mut completions);
        }
        completions[0].result.as_ref().expect("the write");
        index.write_finished(object);
    }

    /// What a walk of every object answers for one PG: the index must answer the same.
    fn walked(engine: &OsdEngine, pool: u32, pg: u32, pg_count: u32) -> Vec<(ObjectId, u64)> {
        let in_pg = |object: &ObjectId| {
            VolumeRecord::pool_of(object.inode) == pool && object_pg(object.inode, object.stripe, pg_count) == pg
        };
        engine.list_objects().into_iter().filter(|(object, _)| in_pg(object)).collect()
    }

    #[test]
    fn a_pg_lists_what_a_walk_of_every_object_finds_and_no_other_pool() {
        let mut engine = engine();
        let mut index = ObjectsByPg::default();
        let (pool_a, pool_b) = (1u32, 2u32);
        // Same volume numbers and stripes in two pools: the same PG numbers, other objects.
        for pool in [pool_a, pool_b] {
            for volume in 1..7 {
                for stripe in 0..40 {
                    write(&mut engine, &mut index, ObjectId { inode: VolumeRecord::inode(pool, volume), stripe });
                }
            }
        }
        let reopened = ObjectsByPg::of(&engine);
        let mut listed_pgs = 0;
        for (pool, pg_count) in [(pool_a, 8), (pool_b, 4)] {
            for pg in 0..pg_count {
                let expected = walked(&engine, pool, pg, pg_count);
                listed_pgs += usize::from(!expected.is_empty());
                let start = ObjectId { inode: 0, stripe: 0 };
                assert_eq!(index.list(&engine, pool, pg, pg_count, start, usize::MAX), expected);
                let mut reopened = ObjectsByPg::of(&engine);
                assert_eq!(reopened.list(&engine, pool, pg, pg_count, start, usize::MAX), expected);
                // Pages: from a start, at most a count.
                if expected.len() >= 3 {
                    assert_eq!(index.list(&engine, pool, pg, pg_count, expected[1].0, 2), expected[1..3]);
                }
            }
        }
        assert!(listed_pgs >= 8, "only {listed_pgs} PGs hold objects: the test shows little");
        assert_eq!(reopened.pools(), vec![pool_a, pool_b]);
    }

    #[test]
    fn a_deleted_object_leaves_the_listing() {
        let mut engine = engine();
        let mut index = ObjectsByPg::default();
        let object = ObjectId { inode: VolumeRecord::inode(1, 1), stripe: 0 };
        write(&mut engine, &mut index, object);
        let pg = object_pg(object.inode, object.stripe, 4);
        let start = ObjectId { inode: 0, stripe: 0 };
        assert_eq!(index.list(&engine, 1, pg, 4, start, 10).len(), 1);
        engine.submit(1, Request::Delete { object });
        let mut completions = Vec::new();
        while completions.is_empty() {
            engine.poll(&mut completions);
        }
        assert!(index.list(&engine, 1, pg, 4, start, 10).is_empty());
        assert!(index.pgs_with_objects(1, 4).is_empty(), "the entry of a deleted object is forgotten once listed");
    }

    /// A listing while the first write of an object is queued in the engine (not journaled yet,
    /// so the engine does not show the object) must not forget the object: once the write
    /// completes, the next listing finds it.
    #[test]
    fn a_listing_during_an_objects_first_write_keeps_it() {
        let mut engine = engine();
        let mut index = ObjectsByPg::default();
        let object = ObjectId { inode: VolumeRecord::inode(1, 1), stripe: 3 };
        let pg = object_pg(object.inode, object.stripe, 4);
        let start = ObjectId { inode: 0, stripe: 0 };
        index.write_started(object);
        engine.submit(0, Request::Write { object, offset_bytes: 0, data: AlignedBuffer::from_slice(&[7; 4096]) });
        assert!(!engine.object_exists(object), "the engine shows a write only once it is journaled");
        assert!(index.list(&engine, 1, pg, 4, start, 10).is_empty());
        let mut completions = Vec::new();
        while completions.is_empty() {
            engine.poll(&mut completions);
        }
        completions[0].result.as_ref().expect("the write");
        index.write_finished(object);
        assert_eq!(index.list(&engine, 1, pg, 4, start, 10).len(), 1, "the object is listed once written");
    }

    /// The scale measurement (`cargo test --release -p osd -- --ignored --nocapture
    /// listing_one_pg`): an engine holding a million objects, one PG of 256 listed from the
    /// index and by a walk of every object, and the index built at open. The OSD's thread does
    /// nothing else meanwhile, so each time is what a client op arriving then waits at most.
    #[test]
    #[ignore = "a measurement: a million objects, about 10 GiB of memory"]
    fn listing_one_pg_at_a_million_objects() {
        const OBJECTS: u64 = 1 << 20;
        const PG_COUNT: u32 = 256;
        let disk = SimDisk::new(SimDiskOptions { size_bytes: 6 << 30, ..SimDiskOptions::default() });
        let format = FormatOptions { object_size_bytes: 4096, journal_size_bytes: Some(64 << 20), nonce: 1 };
        let disk = Engine::format(disk, &format).expect("format");
        let disk: Box<dyn platform::Disk> = Box::new(disk);
        let mut engine = Engine::open(disk, &EngineOptions::default()).expect("open");
        let started = std::time::Instant::now();
        let data = AlignedBuffer::from_slice(&[7; 4096]);
        let mut completions = Vec::new();
        let mut in_flight = 0u64;
        for index in 0..OBJECTS {
            let object = ObjectId { inode: VolumeRecord::inode(1, 1 + index / 4096), stripe: index % 4096 };
            engine.submit(index, Request::Write { object, offset_bytes: 0, data: data.clone() });
            in_flight += 1;
            while in_flight >= 512 || (index + 1 == OBJECTS && in_flight > 0) {
                engine.poll(&mut completions);
                for completion in completions.drain(..) {
                    completion.result.expect("a write");
                    in_flight -= 1;
                }
            }
        }
        eprintln!("{OBJECTS} objects written in {:?}", started.elapsed());

        let started = std::time::Instant::now();
        let mut index = ObjectsByPg::of(&engine);
        let built = started.elapsed();
        let start = ObjectId { inode: 0, stripe: 0 };
        let mut from_index = Vec::new();
        let mut listed = Vec::new();
        for pg in [0, 17, 255] {
            let started = std::time::Instant::now();
            let objects = index.list(&engine, 1, pg, PG_COUNT, start, usize::MAX);
            from_index.push(started.elapsed());
            let started = std::time::Instant::now();
            let walked = walked(&engine, 1, pg, PG_COUNT);
            let walk = started.elapsed();
            assert_eq!(objects, walked);
            listed.push((objects.len(), walk));
        }
        // A member's page of a SecList: the first 1,000 from a start.
        let started = std::time::Instant::now();
        let page =
            index.list(&engine, 1, 17, PG_COUNT, ObjectId { inode: VolumeRecord::inode(1, 100), stripe: 0 }, 1000);
        let paged = started.elapsed();
        eprintln!("the index built at open in {built:?}");
        for ((objects, walk), indexed) in listed.iter().zip(&from_index) {
            eprintln!(
                "one PG of {PG_COUNT}, {objects} objects: {indexed:?} from the index, {walk:?} walking every object"
            );
        }
        eprintln!("a page of {} entries from the index: {paged:?}", page.len());
    }
}
