//! The checks of `sim-cluster` catch real bugs: each bug planted in the OSDs
//! (`osd::planted`) must make some seed fail within a stated number of seeds, with faults on.

use osd::planted::PlantedBug;
use sim_cluster::{run, SimOptions};

/// Runs seeds from 1 with `bug` planted until one fails; returns how many it took.
fn seeds_to_catch(bug: PlantedBug, limit: u64, options: &SimOptions) -> Option<(u64, Vec<String>)> {
    let options = SimOptions { planted: Some(bug), ..options.clone() };
    (1..=limit).find_map(|seed| {
        let outcome = run(seed, &options);
        (!outcome.passed()).then_some((seed, outcome.violations))
    })
}

/// Fails unless `bug` makes a seed of the fixed geometry fail within `limit` seeds; prints which.
fn caught_within(bug: PlantedBug, limit: u64) {
    caught_within_options(bug, limit, &SimOptions::default());
}

/// [`caught_within`] with `options`.
fn caught_within_options(bug: PlantedBug, limit: u64, options: &SimOptions) {
    let (seeds, violations) = seeds_to_catch(bug, limit, options)
        .unwrap_or_else(|| panic!("no violation in {limit} seeds with {bug:?} planted"));
    eprintln!(
        "{bug:?} caught at seed {seeds}: {}\nreplay: {}",
        violations[0],
        sim_cluster::replay_command(seeds, &SimOptions { planted: Some(bug), ..options.clone() })
    );
}

/// What the default stage draws (`tests/seeds.rs`): the geometry, the workload, two streams
/// of faults and an OSD that may join late.
fn joining() -> SimOptions {
    SimOptions {
        drawn_geometry: true,
        drawn_workload: true,
        overlapping_faults: true,
        osd_joins: true,
        ..SimOptions::default()
    }
}

#[test]
fn a_primary_that_acknowledges_before_its_replicas_is_caught() {
    caught_within(PlantedBug::AckBeforeReplicas, 200);
}

#[test]
fn a_catch_up_that_skips_stale_copies_is_caught() {
    caught_within(PlantedBug::CatchUpSkipsStaleCopies, 50);
}

/// Sparse objects come from trims and zeroings of single blocks, which the drawn workload
/// has more of: the fixed geometry caught it at seed 88 with volumes placed by inode, and not
/// within 150 once placed by family.
#[test]
fn a_copy_that_drops_the_page_mask_is_caught() {
    caught_within_options(PlantedBug::CopyDropsThePageMask, 50, &joining());
}
