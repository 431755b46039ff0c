//! A snapshot taken while a fault strikes in the middle of it (ADR 0026): the OSD leading the
//! most PGs killed, that OSD cut off from every node, or the mon killed with the snapshot's
//! seal in its hands (its API runs the freeze and the seal; the leader after it seals what it
//! left). The fault lands a drawn few milliseconds into the call, so across seeds it falls
//! before the freeze, between the freeze and the seal, and inside the seal's barrier.
//!
//! The snapshot must come out sealed (taken again if the fault stopped it before its freeze),
//! read whole and held to the cut; a writer of the scenario's own times every write while it
//! is being taken, and the longest must stay under the bound for the fault (the fault's own
//! cost included: a kill stalls the killed primary's PGs for its lease either way).

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use meta::MetaStore;
use net::sim::SimNet;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::cluster::MON_NODE;
use crate::history::BLOCK_BYTES;
use crate::scenarios::{busiest_primary, osd_of, wait_for, Stage};
use crate::workload::{self, volume_name, Op};

/// What strikes while the snapshot is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    KillPrimary,
    CutOff,
    MonKilled,
}

/// The volume snapshotted (the workload's first).
const VOLUME: usize = 0;

/// How long the snapshot may take and any write overlapping it may wait, the fault's own cost
/// included: an OSD's lease (3 s) and a peering for a killed or cut-off primary (2.9 s and
/// 5.4 s in the runs so far), the rest of the mon's leader lease (5 s) and one barrier round
/// for a mon killed in the seal and started again a second later (4.4 s).
const BOUND: Duration = Duration::from_secs(8);

pub(crate) async fn play(stage: &Stage<'_>, fault: Fault) -> Result<(), String> {
    let mut rng = SmallRng::seed_from_u64(stage.seed ^ 0x5a0c_e5ea);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (victim, _) = busiest_primary(stage).await?;
    let osd = osd_of(stage, victim).await?;
    let name = format!("{}@raced", volume_name(VOLUME));
    let start = stage.run.history.borrow_mut().tick();
    let began = Instant::now();
    // The call runs on the mon's node, as its API runs it: killing the mon ends it.
    let creating = tokio::task::spawn_local(SimNet::on_node(MON_NODE, create(stage.store.clone(), name.clone())));
    let taken = Rc::new(Cell::new(false));
    let writer = time_writes(stage, taken.clone());
    let race = async {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..25))).await;
        strike(stage, fault, victim, &creating).await;
        // Ended by the seal, its failure, or the mon's death.
        let _ = creating.await;
        let sealed = wait_sealed(stage, &name).await;
        let outcome = match sealed {
            // Stopped before its freeze: taken again, as an operator would after an error.
            Ok(false) => {
                stage.run.record(format_args!("snapshot {name} not taken before the fault; taking it again"));
                let again = create(stage.store.clone(), name.clone());
                SimNet::on_node("admin", again).await;
                wait_sealed(stage, &name).await.and_then(|made| made.then_some(()).ok_or("not taken again".into()))
            }
            Ok(true) => Ok(()),
            Err(error) => Err(error),
        };
        taken.set(true);
        outcome.map(|()| began.elapsed())
    };
    let (longest, took) = tokio::join!(writer, race);
    let took = took?;
    let end = stage.run.history.borrow_mut().tick();
    let index = stage.run.history.borrow_mut().snapshot_taken(VOLUME, start, end);
    stage.run.record(format_args!(
        "snapshot {name} taken across {fault:?} in {took:?}; the longest write meanwhile took {longest:?}"
    ));
    heal(stage, fault, victim, osd).await?;
    crate::snapshots::pin_all(stage.client, &name, index, stage.run).await;
    if took > BOUND {
        return Err(format!("the snapshot took {took:?} across {fault:?} (bound {BOUND:?})"));
    }
    if longest > BOUND {
        return Err(format!(
            "a write waited {longest:?} while the snapshot was taken across {fault:?} (bound {BOUND:?})"
        ));
    }
    Ok(())
}

/// The snapshot as `basalt snapshot create` takes it: the freeze, then one seal; a seal that
/// fails is left to the leader.
async fn create(store: Arc<dyn MetaStore>, name: String) {
    let frozen = match mon::snapshots::freeze(store.as_ref(), &name, 0).await {
        Ok(frozen) => frozen,
        Err(error) => return tracing::info!(%error, snapshot = %name, "not frozen"),
    };
    let (volume, head) = (&frozen.volume.name, frozen.volume.id);
    if let Err(error) = mon::seal::seal(store.as_ref(), volume, head, frozen.revision).await {
        tracing::info!(%error, snapshot = %name, "not sealed; the leader seals it");
    }
}

async fn strike(stage: &Stage<'_>, fault: Fault, victim: usize, creating: &tokio::task::JoinHandle<()>) {
    match fault {
        Fault::KillPrimary => stage.nodes.kill(victim).await,
        Fault::CutOff => {
            let name = stage.nodes.name(victim);
            for other in stage.nodes.names().iter().filter(|other| **other != name) {
                stage.nodes.network.partition(&name, other);
            }
            stage.run.record(format_args!("{name} cut off from every node"));
        }
        Fault::MonKilled => {
            stage.nodes.kill_mon(0).await;
            creating.abort();
            tokio::time::sleep(Duration::from_secs(1)).await;
            stage.nodes.restart_mon(0);
        }
    }
}

/// Undoes the fault and waits until the cluster has its OSD back.
async fn heal(stage: &Stage<'_>, fault: Fault, victim: usize, osd: u32) -> Result<(), String> {
    match fault {
        Fault::KillPrimary => stage.nodes.restart(victim),
        Fault::CutOff => {
            stage.nodes.network.heal_all();
            stage.run.record("partitions healed");
        }
        Fault::MonKilled => return Ok(()),
    }
    wait_for(stage, "the OSD back", |map| map.live.contains_key(&osd)).await
}

/// Waits until the volume's head is sealed; whether the snapshot exists then.
async fn wait_sealed(stage: &Stage<'_>, name: &str) -> Result<bool, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let volume_key = cluster::keys::volume(&volume_name(VOLUME));
    let snapshot_key = cluster::keys::snapshot(name);
    loop {
        let store = stage.store.as_ref();
        let volume = store.get(&volume_key).await.map_err(|error| error.to_string())?;
        let record = volume.ok_or("the volume is gone")?;
        let record = cluster::records::decode::<cluster::VolumeRecord>("volume", &record.value)
            .map_err(|error| error.to_string())?;
        if !record.sealing {
            let snapshot = store.get(&snapshot_key).await.map_err(|error| error.to_string())?;
            return Ok(snapshot.is_some());
        }
        if Instant::now() > deadline {
            return Err(format!("{} still sealing a minute after its snapshot", record.name));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes the volume's blocks in turn until the snapshot is taken; the longest write.
async fn time_writes(stage: &Stage<'_>, taken: Rc<Cell<bool>>) -> Duration {
    let blocks = stage.volumes[VOLUME].size_bytes() / BLOCK_BYTES as u64;
    let (mut longest, mut block) = (Duration::ZERO, 0);
    while !taken.get() {
        let started = Instant::now();
        let write = workload::write(stage.volumes, (VOLUME, block % blocks), Op::Write, stage.run, "scenario");
        SimNet::on_node("client", write).await;
        longest = longest.max(started.elapsed());
        block += 1;
    }
    longest
}
