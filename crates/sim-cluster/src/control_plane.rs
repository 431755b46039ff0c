//! The control plane's faults of `crates/basalt/tests/control_plane.rs`, scripted on a
//! simulated cluster of two mons and a store of three members (`store_members.rs`), while the
//! clients run and a writer of the scenario's own times every write: the store's leader
//! killed, then a follower; the leader cut off; the members cut off from one another for 20 s
//! (no leader anywhere: the OSDs serve on); the leading mon killed, then paused, then cut off
//! (the other must lead within `faults::TAKEOVER_MAX`); the leading mon and the store's leader
//! killed together and the busiest primary 2 s later. No write may wait [`WRITE_MAX`] in any of
//! these. Last, two members killed for 12 s: the OSDs cannot tell a lost quorum from a cut, so
//! writes wait; they must go on within [`RESUME_MAX`] of the members' return.

use std::cell::Cell;
use std::future::Future;
use std::time::Duration;

use net::sim::SimNet;
use tokio::time::Instant;

use crate::faults::takeover;
use crate::scenarios::{busiest_primary, wait_for, Stage};
use crate::store_members::{StoreMembers, MEMBERS};
use crate::workload::{self, Op};

/// The longest a write may wait through any one of the faults (the bound of the real-process
/// test).
const WRITE_MAX: Duration = Duration::from_secs(5);
/// How soon writes go on once a lost quorum is back: an election, then each OSD's renewal.
const RESUME_MAX: Duration = Duration::from_secs(5);
/// The members cut off from one another this long (the real-process test's length).
const SPLIT_LENGTH: Duration = Duration::from_secs(20);
/// Two members killed this long.
const QUORUM_LOST_LENGTH: Duration = Duration::from_secs(12);
/// How long each member or mon fault lasts: past a watch's keep-alive limit (6 s).
const FAULT_LENGTH: Duration = Duration::from_secs(8);
/// Between steps: an election done, leases renewed.
const BETWEEN_STEPS: Duration = Duration::from_secs(2);

pub(crate) async fn play(stage: &Stage<'_>) -> Result<(), String> {
    let members = stage.nodes.store_faults.members().ok_or("the store has one member")?.clone();
    tokio::time::sleep(BETWEEN_STEPS).await;

    let killed = |members: &StoreMembers, member: usize| members.kill(member);
    let cut_off = |members: &StoreMembers, member: usize| members.silence(member);
    member_lost(stage, &members, "the leader, killed", |leader| leader, killed).await?;
    member_lost(stage, &members, "a follower, killed", |leader| (leader + 1) % MEMBERS, killed).await?;
    member_lost(stage, &members, "the leader, cut off", |leader| leader, cut_off).await?;

    while_writing(stage, "the store's members cut off from one another", Some(WRITE_MAX), async {
        members.set_split(true);
        tokio::time::sleep(SPLIT_LENGTH).await;
        members.set_split(false);
        tokio::time::sleep(BETWEEN_STEPS).await;
        Ok(())
    })
    .await?;

    for fault in ["killed", "paused", "cut off"] {
        let what = format!("the leading mon {fault}");
        while_writing(stage, &what, Some(WRITE_MAX), async {
            let mon = leading_mon(stage).await?;
            let node = stage.nodes.mon_node(mon);
            match fault {
                "killed" => stage.nodes.kill_mon(mon).await,
                "paused" => stage.nodes.pause_mon(mon, true),
                _ => {
                    for other in stage.nodes.names().iter().filter(|other| *other != node) {
                        stage.nodes.network.partition(node, other);
                    }
                    stage.run.record(format_args!("{node} cut off from every node"));
                }
            }
            let after = takeover(stage.nodes, mon).await?;
            stage.run.record(format_args!("the other mon leads {after:?} after {node} was {fault}"));
            tokio::time::sleep(FAULT_LENGTH.saturating_sub(after)).await;
            stage.nodes.restart_mon(mon);
            stage.nodes.pause_mon(mon, false);
            stage.nodes.network.heal_all();
            tokio::time::sleep(BETWEEN_STEPS).await;
            Ok(())
        })
        .await?;
    }

    let what = "the leading mon and the store's leader killed, the busiest primary 2 s later";
    while_writing(stage, what, Some(WRITE_MAX), async {
        let mon = leading_mon(stage).await?;
        let leader = store_leader(&members)?;
        stage.nodes.kill_mon(mon).await;
        members.kill(leader);
        stage.run.record(format_args!("store member {leader} killed"));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (victim, _) = busiest_primary(stage).await?;
        stage.nodes.kill(victim).await;
        takeover(stage.nodes, mon).await?;
        wait_for(stage, "the killed OSD down", |map| map.live.len() + 1 == stage.nodes.count()).await?;
        tokio::time::sleep(BETWEEN_STEPS).await;
        members.revive(leader);
        stage.nodes.restart_mon(mon);
        stage.nodes.restart(victim);
        wait_for(stage, "every OSD up", |map| map.live.len() == stage.nodes.count()).await?;
        tokio::time::sleep(BETWEEN_STEPS).await;
        Ok(())
    })
    .await?;

    // The writes wait while the quorum is lost; the last one must end soon after it is back.
    let returned = Cell::new(None);
    let ended = while_writing(stage, "two store members killed", None, async {
        let spared = store_leader(&members)?;
        for member in (0..MEMBERS).filter(|&member| member != spared) {
            members.kill(member);
        }
        stage.run.record(format_args!("every store member but {spared} killed"));
        tokio::time::sleep(QUORUM_LOST_LENGTH).await;
        members.heal();
        stage.run.record("every store member back");
        returned.set(Some(Instant::now()));
        Ok(())
    })
    .await?;
    let returned = returned.get().expect("the members returned");
    let resumed = ended.saturating_duration_since(returned);
    stage.run.record(format_args!("writes went on {resumed:?} after the quorum was back"));
    if resumed > RESUME_MAX {
        return Err(format!("writes went on only {resumed:?} after the store's quorum was back"));
    }
    Ok(())
}

/// The member `pick` chooses by the leader, lost (`lose`) for [`FAULT_LENGTH`], then back.
async fn member_lost(
    stage: &Stage<'_>,
    members: &StoreMembers,
    what: &str,
    pick: fn(usize) -> usize,
    lose: fn(&StoreMembers, usize),
) -> Result<(), String> {
    let member = pick(store_leader(members)?);
    while_writing(stage, &format!("store member {member}, {what}"), Some(WRITE_MAX), async {
        lose(members, member);
        tokio::time::sleep(FAULT_LENGTH).await;
        members.revive(member);
        tokio::time::sleep(BETWEEN_STEPS).await;
        Ok(())
    })
    .await
    .map(|_| ())
}

/// The store member that leads.
fn store_leader(members: &StoreMembers) -> Result<usize, String> {
    members.leader().ok_or_else(|| "the store has no leader between the steps".to_string())
}

/// The mon that leads, as the store says.
async fn leading_mon(stage: &Stage<'_>) -> Result<usize, String> {
    stage.nodes.leading_mon().await.ok_or_else(|| "no mon leads between the steps".to_string())
}

/// Runs `fault` while a writer writes one block after another and times each write; the
/// longest must stay under `bound`. Returns when the last write ended.
async fn while_writing(
    stage: &Stage<'_>,
    what: &str,
    bound: Option<Duration>,
    fault: impl Future<Output = Result<(), String>>,
) -> Result<Instant, String> {
    stage.run.record(format_args!("control plane: {what}"));
    let done = Cell::new(false);
    let (longest, writes) = (Cell::new(Duration::ZERO), Cell::new(0u64));
    let blocks = stage.volumes[0].size_bytes() / crate::history::BLOCK_BYTES as u64;
    let writer = async {
        while !done.get() {
            let started = Instant::now();
            let address = (0, writes.get() % blocks);
            SimNet::on_node("client", workload::write(stage.volumes, address, Op::Write, stage.run, "scenario")).await;
            longest.set(longest.get().max(started.elapsed()));
            writes.set(writes.get() + 1);
        }
        Instant::now()
    };
    let fault = async {
        let result = fault.await;
        done.set(true);
        result
    };
    let (ended, result) = tokio::join!(writer, fault);
    result?;
    let longest = longest.get();
    stage.run.record(format_args!("control plane: {what}: {} writes, the longest {longest:?}", writes.get()));
    match bound {
        Some(bound) if longest >= bound => Err(format!("a write waited {longest:?} with {what}")),
        _ => Ok(ended),
    }
}
