//! The real-process failure tests' scenarios (`sim_cluster::Scenario`), each on several seeds,
//! each seed twice: the scenario's own check and every check of the simulation must pass, and
//! both runs must leave the same trace. `BASALT_SIM_SCENARIO_SEEDS=N` runs N seeds of each
//! (default 5).

use sim_cluster::{run_twice, Scenario};

fn seeds() -> u64 {
    std::env::var("BASALT_SIM_SCENARIO_SEEDS").map_or(5, |value| {
        value.parse().unwrap_or_else(|_| panic!("BASALT_SIM_SCENARIO_SEEDS={value} is not a number"))
    })
}

fn play(scenario: Scenario) {
    for seed in 1..=seeds() {
        if let Err(failure) = run_twice(seed, &scenario.options()) {
            panic!("{scenario:?}: {failure}");
        }
    }
}

#[test]
fn a_primary_killed_under_load_fails_over_and_catches_up() {
    play(Scenario::KillPrimary);
}

#[test]
fn a_paused_primary_is_replaced_after_its_lease_and_rejoins() {
    play(Scenario::PausePrimary);
}

#[test]
fn every_osd_restarted_in_turn_loses_nothing() {
    play(Scenario::RollingRestarts);
}

#[test]
fn an_osd_cut_off_is_replaced_and_catches_up_after_the_heal() {
    play(Scenario::CutOff);
}

#[test]
fn an_osd_that_missed_writes_never_serves_alone() {
    play(Scenario::PastSets);
}

#[test]
fn a_pg_below_min_size_acknowledges_nothing() {
    play(Scenario::BelowMinSize);
}

#[test]
fn a_killed_osd_is_down_as_soon_as_a_client_finds_it_gone() {
    play(Scenario::FastDown);
}

#[test]
fn a_link_cut_between_two_osds_marks_one_down_and_stalls_no_write_past_5_s() {
    play(Scenario::LinkCut);
}

#[test]
fn a_one_way_cut_between_two_osds_marks_one_down_and_stalls_no_write_past_5_s() {
    play(Scenario::OneWayLinkCut);
}

#[test]
fn an_object_whose_every_copy_rotted_is_never_served_and_is_reported() {
    play(Scenario::EveryCopyRots);
}

#[test]
fn a_read_every_drive_fails_at_once_waits_and_returns_the_data() {
    play(Scenario::DrivesFailReads);
}

#[test]
fn an_osd_drained_under_load_is_removed_and_a_new_one_backfills() {
    play(Scenario::DrainRemoveJoin);
}

#[test]
fn a_snapshot_taken_while_its_primary_is_killed_holds_to_the_cut() {
    play(Scenario::SnapshotKillPrimary);
}

#[test]
fn a_snapshot_taken_while_an_osd_is_cut_off_holds_to_the_cut() {
    play(Scenario::SnapshotCutOff);
}

#[test]
fn a_snapshot_whose_mon_is_killed_is_sealed_by_the_next_leader() {
    play(Scenario::SnapshotMonKilled);
}

#[test]
fn store_members_and_mons_lost_in_turn_stall_no_write_past_5_s() {
    play(Scenario::ControlPlane);
}
