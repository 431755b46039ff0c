//! The failure-handling scenarios of the real-process tests (`crates/basalt/tests/failover.rs`
//! and `fast_down.rs`), scripted on the simulated cluster: the same faults in the same order
//! while the clients run, every op checked against the history, then the final reads, every PG
//! clean and the replicas compared, as after random faults; and each scenario's own check.
//! Every seed varies the clients' ops, the latencies and what a crash keeps.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use client::{Client, Volume};
use cluster::ClusterMap;
use meta::MetaStore;
use net::sim::SimNet;
use tokio::time::Instant;

use crate::cluster::{Nodes, Run};
use crate::snapshot_races;
use crate::workload::{self, Op};
use crate::SimOptions;

/// A scripted failure, named after the real-process test it mirrors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// `a_primary_killed_under_load_costs_no_io_error_and_catches_up_when_back`: the OSD
    /// leading the most PGs killed, started again 3 s later.
    KillPrimary,
    /// `a_stopped_primary_is_replaced_after_its_lease_and_rejoins_when_resumed`: paused (as
    /// SIGSTOP) for 6 s, twice its lease, then resumed.
    PausePrimary,
    /// `every_osd_restarted_in_turn_under_load_costs_no_io_error`: each OSD stopped gracefully
    /// and started again in turn, every PG active before the next.
    RollingRestarts,
    /// `an_osd_cut_off_under_load_is_replaced_and_catches_up_after_the_heal`: cut off from
    /// every node and the store until it is down, 3 s more, then healed.
    CutOff,
    /// `an_osd_that_missed_writes_never_serves_alone`: 2 copies, `min_size` 1; A killed, every
    /// block written with B alone, B killed, A started: A must not serve what it missed; B
    /// started: everything written is there.
    PastSets,
    /// `a_pg_below_min_size_acknowledges_nothing_until_a_member_returns`: two of three killed:
    /// no write acknowledged until one is back.
    BelowMinSize,
    /// `a_killed_osd_loses_its_lease_as_soon_as_a_client_finds_it_gone`: with a 60 s lease, a
    /// killed OSD is down once a client reports it and the mon finds it refusing connections.
    FastDown,
    /// `a_link_cut_between_two_osds_stalls_no_write_past_5_s_and_heals_clean`: the link between
    /// two OSDs cut both ways for 20 s while both keep their leases: one of them is marked down
    /// on the other's report, no write waits 5 s, and the mark clears after the heal.
    LinkCut,
    /// The same with packets dropped one way only: the replies of one OSD to the other.
    OneWayLinkCut,
    /// Past what the pool survives, with no real-process test to mirror: every copy of one
    /// object rots; reads wait while a member is away, then fail, and the scrub reports it
    /// (`every_copy_rots.rs`).
    EveryCopyRots,
    /// Every drive fails its next read: a client's read of an object fails on the primary and
    /// the repair finds no copy readable, none known bad; it waits, and the read returns the
    /// data once the drives read again (`drives_fail_reads.rs`).
    DrivesFailReads,
    /// `an_osd_marked_out_drains_under_load_and_can_then_be_killed_and_removed`, then
    /// `a_fourth_osd_joins_under_load...`: one of four OSDs drained, killed and removed without
    /// force, and a fifth joins (`drain.rs`).
    DrainRemoveJoin,
    /// A snapshot taken while the OSD leading the most PGs is killed; no real-process test
    /// mirrors it (`snapshot_races.rs`).
    SnapshotKillPrimary,
    /// A snapshot taken while that OSD is cut off from every node.
    SnapshotCutOff,
    /// A snapshot taken while the mon that runs it is killed: its leader after it seals it.
    SnapshotMonKilled,
    /// `etcd_members_and_mons_lost_cost_no_io_error_and_no_unanswered_call`: two mons and a
    /// store of three members, each lost in turn (`control_plane.rs`).
    ControlPlane,
}

impl Scenario {
    pub const ALL: [Scenario; 16] = [
        Scenario::KillPrimary,
        Scenario::PausePrimary,
        Scenario::RollingRestarts,
        Scenario::CutOff,
        Scenario::PastSets,
        Scenario::BelowMinSize,
        Scenario::FastDown,
        Scenario::LinkCut,
        Scenario::OneWayLinkCut,
        Scenario::EveryCopyRots,
        Scenario::DrivesFailReads,
        Scenario::DrainRemoveJoin,
        Scenario::SnapshotKillPrimary,
        Scenario::SnapshotCutOff,
        Scenario::SnapshotMonKilled,
        Scenario::ControlPlane,
    ];

    /// The name a replay names it by.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::KillPrimary => "kill-primary",
            Scenario::PausePrimary => "pause-primary",
            Scenario::RollingRestarts => "rolling-restarts",
            Scenario::CutOff => "cut-off",
            Scenario::PastSets => "past-sets",
            Scenario::BelowMinSize => "below-min-size",
            Scenario::FastDown => "fast-down",
            Scenario::LinkCut => "link-cut",
            Scenario::OneWayLinkCut => "one-way-link-cut",
            Scenario::EveryCopyRots => "every-copy-rots",
            Scenario::DrivesFailReads => "drives-fail-reads",
            Scenario::DrainRemoveJoin => "drain-remove-join",
            Scenario::SnapshotKillPrimary => "snapshot-kill-primary",
            Scenario::SnapshotCutOff => "snapshot-cut-off",
            Scenario::SnapshotMonKilled => "snapshot-mon-killed",
            Scenario::ControlPlane => "control-plane",
        }
    }

    pub fn from_name(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|scenario| scenario.name() == name)
    }

    /// The cluster and load the scenario runs on: enough ops that the clients outlast it.
    pub fn options(self) -> SimOptions {
        let base = SimOptions { faults: false, scenario: Some(self), ops_per_client: 1_000, ..SimOptions::default() };
        match self {
            Scenario::PastSets => SimOptions { osds: 2, replicas: 2, min_size: 1, ..base },
            Scenario::FastDown => SimOptions { osd_lease: Duration::from_secs(60), ..base },
            // The scenario writes and reads alone: no client may touch the rotted object.
            Scenario::EveryCopyRots | Scenario::DrivesFailReads => SimOptions { clients: 0, ..base },
            // The fifth OSD is the spare the scenario starts; the clients outlast its backfill.
            Scenario::DrainRemoveJoin => SimOptions { osds: 5, late_join: true, ops_per_client: 2_000, ..base },
            Scenario::ControlPlane => SimOptions { control_plane: true, ..base },
            _ => base,
        }
    }
}

/// How long a scenario waits for the cluster to reach a state before that is a violation.
const STATE_DEADLINE: Duration = Duration::from_secs(60);
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// What a scenario acts on.
pub(crate) struct Stage<'a> {
    pub(crate) nodes: &'a Rc<Nodes>,
    pub(crate) store: &'a Arc<dyn MetaStore>,
    pub(crate) volumes: &'a [Rc<Volume>],
    pub(crate) run: &'a Rc<Run>,
    /// The client the workload's volumes were opened by (for snapshots).
    pub(crate) client: &'a Rc<Client>,
    /// The run's seed, for what a scenario draws.
    pub(crate) seed: u64,
}

/// Plays `scenario`; its violations go to the run.
pub(crate) async fn play(scenario: Scenario, stage: Stage<'_>) {
    stage.run.record(format_args!("scenario {scenario:?}"));
    let played = match scenario {
        Scenario::KillPrimary => kill_primary(&stage).await,
        Scenario::PausePrimary => pause_primary(&stage).await,
        Scenario::RollingRestarts => rolling_restarts(&stage).await,
        Scenario::CutOff => cut_off(&stage).await,
        Scenario::PastSets => past_sets(&stage).await,
        Scenario::BelowMinSize => below_min_size(&stage).await,
        Scenario::FastDown => fast_down(&stage).await,
        Scenario::LinkCut => link_cut(&stage, true).await,
        Scenario::OneWayLinkCut => link_cut(&stage, false).await,
        Scenario::EveryCopyRots => crate::every_copy_rots::play(&stage).await,
        Scenario::DrivesFailReads => crate::drives_fail_reads::play(&stage).await,
        Scenario::DrainRemoveJoin => crate::drain::play(&stage).await,
        Scenario::SnapshotKillPrimary => snapshot_races::play(&stage, snapshot_races::Fault::KillPrimary).await,
        Scenario::SnapshotCutOff => snapshot_races::play(&stage, snapshot_races::Fault::CutOff).await,
        Scenario::SnapshotMonKilled => snapshot_races::play(&stage, snapshot_races::Fault::MonKilled).await,
        Scenario::ControlPlane => crate::control_plane::play(&stage).await,
    };
    match played {
        Ok(()) => stage.run.record(format_args!("scenario {scenario:?} played")),
        Err(violation) => stage.run.violation(format!("scenario {scenario:?}: {violation}")),
    }
}

async fn kill_primary(stage: &Stage<'_>) -> Result<(), String> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (victim, led) = busiest_primary(stage).await?;
    let writes_before = stage.run.history_writes.get();
    stage.nodes.kill(victim).await;
    let osd = osd_of(stage, victim).await?;
    // Its PGs fail over: each gets another primary.
    wait_for(stage, "the killed OSD's PGs led by others", |map| {
        led.iter().all(|&(pool, pg)| map.pg(pool, pg).and_then(|state| state.primary()).is_some_and(|p| p != osd))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stage.nodes.restart(victim);
    wait_for(stage, "every OSD up", |map| map.live.len() == stage.nodes.count()).await?;
    crate::settle::wait_until_clean(stage.store, stage.nodes.count(), stage.nodes.lease, stage.run).await;
    // One interval record when a PG first writes without the OSD, one clean record once it
    // caught up: no record per I/O.
    let writes = stage.run.history_writes.get() - writes_before;
    let bound = 3 * crate::cluster::PG_COUNT;
    if writes > bound {
        return Err(format!("{writes} PG history writes for one OSD's loss and return (bound {bound})"));
    }
    stage.run.record(format_args!("{writes} PG history writes for one OSD's loss and return"));
    Ok(())
}

async fn pause_primary(stage: &Stage<'_>) -> Result<(), String> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (victim, _) = busiest_primary(stage).await?;
    let osd = osd_of(stage, victim).await?;
    stage.nodes.with_osd(victim, |node| node.pause.pause());
    stage.run.record(format_args!("{} paused", stage.nodes.name(victim)));
    wait_for(stage, "the paused OSD down", |map| !map.live.contains_key(&osd)).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stage.nodes.with_osd(victim, |node| node.pause.resume());
    stage.run.record(format_args!("{} resumed", stage.nodes.name(victim)));
    wait_for(stage, "the resumed OSD registered again", |map| map.live.contains_key(&osd)).await
}

async fn rolling_restarts(stage: &Stage<'_>) -> Result<(), String> {
    for index in 0..stage.nodes.count() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        stage.nodes.stop_gracefully(index).await?;
        stage.nodes.restart(index);
        wait_for(stage, "the OSD back", |map| map.live.len() == stage.nodes.count()).await?;
        let deadline = Instant::now() + STATE_DEADLINE;
        loop {
            let (views, _) = SimNet::on_node("checker", crate::settle::pg_views(stage.store)).await?;
            if views.iter().all(|view| view.state == "clean" || view.state == "recovering") {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("PGs not active {STATE_DEADLINE:?} after a restart"));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
    Ok(())
}

async fn cut_off(stage: &Stage<'_>) -> Result<(), String> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (victim, _) = busiest_primary(stage).await?;
    let osd = osd_of(stage, victim).await?;
    let name = stage.nodes.name(victim);
    for other in stage.nodes.names().iter().filter(|other| **other != name) {
        stage.nodes.network.partition(&name, other);
    }
    stage.run.record(format_args!("{name} cut off from every node"));
    wait_for(stage, "the cut-off OSD down", |map| !map.live.contains_key(&osd)).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stage.nodes.network.heal_all();
    stage.run.record("partitions healed");
    wait_for(stage, "the healed OSD registered again", |map| map.live.contains_key(&osd)).await
}

async fn past_sets(stage: &Stage<'_>) -> Result<(), String> {
    let (a, b) = (0, 1);
    tokio::time::sleep(Duration::from_secs(1)).await;
    stage.nodes.kill(a).await;
    wait_for(stage, "A down", |map| map.live.len() == 1).await?;
    // Every block of the first volume written again, with B alone.
    for block in 0..blocks(stage) {
        SimNet::on_node("client", workload::write(stage.volumes, (0, block), Op::Write, stage.run, "scenario")).await;
    }
    stage.nodes.kill(b).await;
    stage.nodes.restart(a);
    let osd_a = osd_of(stage, a).await?;
    wait_for(stage, "only A up", |map| map.live.keys().eq([&osd_a])).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // A lacks every block's last write: a read must wait (a stale answer is the history's
    // violation; an answer at all is this one's).
    let read = SimNet::on_node("client", workload::read(stage.volumes, (0, 0), stage.run, "scenario"));
    if tokio::time::timeout(Duration::from_secs(3), read).await.is_ok() {
        return Err("a block A missed the last write of was read with A alone".into());
    }
    stage.run.record("a read with A alone waited");
    stage.nodes.restart(b);
    wait_for(stage, "both up", |map| map.live.len() == 2).await
}

async fn below_min_size(stage: &Stage<'_>) -> Result<(), String> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    stage.nodes.kill(1).await;
    stage.nodes.kill(2).await;
    // Acknowledgements already on their way may still arrive.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let acknowledged = stage.run.history.borrow().acknowledged_writes();
    wait_for(stage, "two OSDs down", |map| map.live.len() == 1).await?;
    let write = SimNet::on_node("client", workload::write(stage.volumes, (0, 0), Op::Write, stage.run, "scenario"));
    if tokio::time::timeout(Duration::from_secs(3), write).await.is_ok() {
        return Err("a write was acknowledged with one OSD of three up (min_size 2)".into());
    }
    let now = stage.run.history.borrow().acknowledged_writes();
    if now != acknowledged {
        return Err(format!("{} writes were acknowledged below min_size", now - acknowledged));
    }
    stage.run.record("no write acknowledged below min_size");
    stage.nodes.restart(1);
    wait_for(stage, "a member back", |map| map.live.len() == 2).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stage.nodes.restart(2);
    Ok(())
}

async fn fast_down(stage: &Stage<'_>) -> Result<(), String> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (victim, _) = busiest_primary(stage).await?;
    let osd = osd_of(stage, victim).await?;
    stage.nodes.kill(victim).await;
    let killed = Instant::now();
    wait_for(stage, "the killed OSD down", |map| !map.live.contains_key(&osd)).await?;
    let elapsed = killed.elapsed();
    // Its lease is 60 s: down this soon only through a client's report.
    if elapsed > Duration::from_secs(10) {
        return Err(format!("the killed OSD was down only {elapsed:?} after it was killed (lease 60 s)"));
    }
    stage.run.record(format_args!("the killed OSD was down {elapsed:?} after it was killed"));
    stage.nodes.restart(victim);
    Ok(())
}

/// How long a write may wait across a cut between two OSDs that keep their leases (ADR 0015).
const LINK_CUT_WRITE_MAX: Duration = Duration::from_secs(5);
const LINK_CUT_LENGTH: Duration = Duration::from_secs(20);

async fn link_cut(stage: &Stage<'_>, both_ways: bool) -> Result<(), String> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (a, b) = (stage.nodes.name(0), stage.nodes.name(1));
    let ids = [osd_of(stage, 0).await?, osd_of(stage, 1).await?];
    if both_ways {
        stage.nodes.network.partition(&a, &b);
    } else {
        stage.nodes.network.cut(&b, &a);
    }
    stage.run.record(format_args!("the link between {a} and {b} cut (both ways: {both_ways})"));
    // One writer of its own, timing each write while the clients go on.
    let cut_at = Instant::now();
    let (mut longest, mut block) = (Duration::ZERO, 0);
    while cut_at.elapsed() < LINK_CUT_LENGTH {
        let started = Instant::now();
        let address = (0, block % blocks(stage));
        SimNet::on_node("client", workload::write(stage.volumes, address, Op::Write, stage.run, "scenario")).await;
        longest = longest.max(started.elapsed());
        block += 1;
    }
    let map = load(stage).await?;
    let marked: Vec<u32> = map.osds.keys().copied().filter(|&osd| map.is_marked_down(osd)).collect();
    stage.nodes.network.heal_all();
    stage.run.record(format_args!("partitions healed; {block} writes, the longest {longest:?}; marked {marked:?}"));
    if marked.len() != 1 || !ids.contains(&marked[0]) {
        return Err(format!("marked down {marked:?} across a cut between osds {ids:?}, not one of them"));
    }
    if longest >= LINK_CUT_WRITE_MAX {
        return Err(format!("a write waited {longest:?} across a cut between two OSDs"));
    }
    wait_for(stage, "the mark cleared", |map| map.osds.keys().all(|&osd| !map.is_marked_down(osd))).await
}

/// The blocks of each volume.
fn blocks(stage: &Stage<'_>) -> u64 {
    let size = stage.volumes[0].size_bytes();
    size / crate::history::BLOCK_BYTES as u64
}

/// The node index of the OSD leading the most PGs, and those PGs.
pub(crate) async fn busiest_primary(stage: &Stage<'_>) -> Result<(usize, Vec<(u32, u32)>), String> {
    let map = load(stage).await?;
    let mut led: std::collections::BTreeMap<u32, Vec<(u32, u32)>> = std::collections::BTreeMap::new();
    for pool in map.pools.values() {
        for pg in 0..pool.pg_count {
            if let Some(primary) = map.pg(pool.id, pg).and_then(|state| state.primary()) {
                led.entry(primary).or_default().push((pool.id, pg));
            }
        }
    }
    let (osd, pgs) =
        led.into_iter().max_by_key(|(osd, pgs)| (pgs.len(), std::cmp::Reverse(*osd))).ok_or("no PG has a primary")?;
    let index = index_of(stage, &map, osd)?;
    Ok((index, pgs))
}

/// The OSD id node `index` registered as.
pub(crate) async fn osd_of(stage: &Stage<'_>, index: usize) -> Result<u32, String> {
    let map = load(stage).await?;
    let name = stage.nodes.name(index);
    map.osds
        .keys()
        .copied()
        .find(|&osd| index_of(stage, &map, osd).is_ok_and(|found| found == index))
        .ok_or_else(|| format!("{name} registered no OSD"))
}

pub(crate) fn index_of(stage: &Stage<'_>, map: &ClusterMap, osd: u32) -> Result<usize, String> {
    let record = map.osds.get(&osd).ok_or_else(|| format!("no record of osd.{osd}"))?;
    let name = record.host.trim_start_matches(crate::cluster::HOST_PREFIX);
    (0..stage.nodes.count())
        .find(|&index| stage.nodes.name(index) == name)
        .ok_or_else(|| format!("osd.{osd} is on no node"))
}

pub(crate) async fn load(stage: &Stage<'_>) -> Result<ClusterMap, String> {
    cluster_watch::load(stage.store.as_ref()).await.map_err(|error| format!("loading the map: {error}"))
}

/// Waits until the map satisfies `done`; a violation after [`STATE_DEADLINE`].
pub(crate) async fn wait_for(stage: &Stage<'_>, what: &str, done: impl Fn(&ClusterMap) -> bool) -> Result<(), String> {
    let deadline = Instant::now() + STATE_DEADLINE;
    loop {
        if done(&load(stage).await?) {
            stage.run.record(format_args!("{what}"));
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("not {what} within {STATE_DEADLINE:?}"));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
