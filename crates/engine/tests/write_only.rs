//! A write-only load reads nothing back from the drive: journaled pages wait for write-back in
//! the record cache, and write-back starts and speeds up soon enough that the records committed
//! while it runs still fit there.

mod common;

use common::{format_disk, pattern_buffer, read, run_batch, PAGE_BYTES};
use engine::{Engine, EngineOptions, ObjectId, Reply, Request};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sim::{SimDisk, SimDiskOptions};

const OBJECT_SIZE_BYTES: u32 = 64 << 10;
const PAGES_PER_OBJECT: u32 = OBJECT_SIZE_BYTES / PAGE_BYTES as u32;
const OBJECTS: u64 = 4096;
/// Writes submitted together, as a client at queue depth 32 sends them.
const QUEUE_DEPTH: usize = 32;
/// Four times the record cache, so write-back runs many jobs while the writes go on.
const WRITES: usize = 8192;

#[test]
fn random_4k_writes_at_depth_32_read_nothing_back_from_the_journal() {
    let disk = SimDisk::new(SimDiskOptions { size_bytes: 512 << 20, ..SimDiskOptions::default() });
    let disk = format_disk(disk, u64::from(OBJECT_SIZE_BYTES), 64 << 20);
    let options = EngineOptions { record_data_cache_bytes: 8 << 20, ..EngineOptions::default() };
    let mut engine = Engine::open(disk, &options).expect("open");
    let mut rng = SmallRng::seed_from_u64(7);
    let mut last = std::collections::BTreeMap::new();
    for (batch, tags) in (1..=WRITES as u64).collect::<Vec<_>>().chunks(QUEUE_DEPTH).enumerate() {
        let mut requests = Vec::new();
        for &tag in tags {
            let object = ObjectId { inode: 1, stripe: rng.gen_range(0..OBJECTS) };
            let page = rng.gen_range(0..PAGES_PER_OBJECT);
            // One write per page in a batch, so the last tag of each page is known.
            if requests.iter().any(|(o, p, _)| (*o, *p) == (object, page)) {
                continue;
            }
            requests.push((object, page, tag));
        }
        let submitted = requests
            .iter()
            .map(|&(object, page, tag)| Request::Write {
                object,
                offset_bytes: page * PAGE_BYTES as u32,
                data: pattern_buffer(tag, object, page, 1),
            })
            .collect();
        for (result, &(object, page, tag)) in run_batch(&mut engine, submitted).into_iter().zip(&requests) {
            assert!(matches!(result, Ok(Reply::Written { .. })), "batch {batch}: {result:?}");
            last.insert((object, page), tag);
        }
    }
    let stats = engine.stats();
    assert_eq!(
        stats.writeback_journal_read_bytes, 0,
        "write-back read {} bytes of the journal back ({} pages copied in {} jobs)",
        stats.writeback_journal_read_bytes, stats.writeback_pages_copied, stats.writeback_jobs
    );
    assert!(stats.writeback_jobs >= 4, "write-back ran {} jobs", stats.writeback_jobs);

    // And what was written reads back.
    engine.write_back_journal();
    for (&(object, page), &tag) in last.iter().step_by(97) {
        let (_, data) = read(&mut engine, object, page * PAGE_BYTES as u32, PAGE_BYTES as u32);
        assert_eq!(data, pattern_buffer(tag, object, page, 1).to_vec(), "{object} page {page}");
    }
}
