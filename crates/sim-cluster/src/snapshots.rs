//! Snapshots, clones and rollbacks while the clients write and the faults hit (ADR 0026), as
//! an operator takes them through the API: the mon's freeze and seal on a node of their own.
//! Each snapshot is held to the cut (`History::check_snapshot_read`, `check_snapshot_cut`) and
//! never changes once read; a clone reads its snapshot wherever it has not written (its own
//! exact model: this task is its only writer); a rollback is, to the history, a write of every
//! block with the snapshot's contents, in flight for as long as the call. With
//! `SimOptions::trash`, a clone is then often flattened (ADR 0035), written and read while the
//! leader walks it and after its parent is cut, each block as its model; and often removed to
//! the trash: its name must be free at once; restored (under its name or another) it must read as its model; purged, or left past
//! its retention for the leader to purge, it must be gone, and a restore racing the expiry must
//! bring it back whole or not at all.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use client::{Client, Volume};
use meta::MetaStore;
use net::sim::SimNet;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::cluster::Run;
use crate::history::{contents, BLOCK_BYTES, ZEROS};
use crate::workload::volume_name;

/// Snapshots taken of the workload's volumes.
#[derive(Default)]
pub(crate) struct Taken {
    /// `VOLUME@SNAP` and its index in the history, in order.
    snapshots: Vec<(String, usize)>,
}

impl Taken {
    pub(crate) fn list(&self) -> Vec<(String, usize)> {
        self.snapshots.clone()
    }
}

/// Takes snapshots, clones and rollbacks every 1 to 4 s, until dropped.
pub(crate) async fn run(
    seed: u64,
    store: Arc<dyn MetaStore>,
    client: Rc<Client>,
    options: crate::SimOptions,
    run: Rc<Run>,
    taken: Rc<std::cell::RefCell<Taken>>,
) {
    let (volumes, blocks_per_volume, trash) = (options.volumes, options.blocks_per_volume, options.trash);
    let mut rng = SmallRng::seed_from_u64(seed);
    let (mut clones, mut attempts) = (0, 0);
    loop {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(1_000..4_000))).await;
        let volume = rng.gen_range(0..volumes);
        let choice = rng.gen_range(0..10);
        let known = taken.borrow().snapshots.clone();
        let existing: Vec<&(String, usize)> =
            known.iter().filter(|(_, index)| run.history.borrow().snapshot_volume(*index) == volume).collect();
        match choice {
            0..=5 => {
                attempts += 1;
                if let Some((name, index)) = take(&store, volume, attempts, &run).await {
                    taken.borrow_mut().snapshots.push((name.clone(), index));
                    read_some(&client, &name, index, blocks_per_volume, &mut rng, &run).await;
                    // With the trash, a clone of it at once, most often (runs are short).
                    if trash && rng.gen_bool(0.7) {
                        clones += 1;
                        let made = clone_and_check(&store, &client, &name, index, clones, &mut rng, &run).await;
                        if let Some((clone_name, source, mut model)) = made {
                            if rng.gen_bool(0.4) {
                                let flatten = Flatten { name: &clone_name, source, number: clones };
                                flatten_round(&store, &client, &flatten, &mut model, &mut rng, &run).await;
                            }
                            trash_round(&store, &client, &clone_name, source, &model, &mut rng, &run).await;
                        }
                    }
                }
            }
            6 | 7 => {
                if let Some((name, index)) = existing.get(rng.gen_range(0..existing.len().max(1))).copied() {
                    read_some(&client, name, *index, blocks_per_volume, &mut rng, &run).await;
                }
            }
            8 => {
                if let Some((name, index)) = existing.first().copied() {
                    clones += 1;
                    let made = clone_and_check(&store, &client, name, *index, clones, &mut rng, &run).await;
                    if let (true, Some((clone_name, source, model))) = (trash, made) {
                        trash_round(&store, &client, &clone_name, source, &model, &mut rng, &run).await;
                    }
                }
            }
            _ => {
                if let Some((name, index)) = existing.last().copied() {
                    rollback(&store, &client, name, *index, &run).await;
                }
            }
        }
    }
}

/// Takes a snapshot of `volume` as `basalt snapshot create` does: the freeze, then the seal.
/// Returns its name and index in the history, or `None` if the mon refused it (the store cut
/// off, a seal still running).
async fn take(store: &Arc<dyn MetaStore>, volume: usize, number: usize, run: &Run) -> Option<(String, usize)> {
    let name = format!("{}@s{number}", volume_name(volume));
    let start = run.history.borrow_mut().tick();
    let frozen = SimNet::on_node("admin", mon::snapshots::freeze(store.as_ref(), &name, 0)).await;
    let frozen = match frozen {
        Ok(frozen) => frozen,
        Err(error) => {
            run.record(format_args!("snapshot {name} not taken: {error}"));
            return None;
        }
    };
    seal_until_sealed(store, &frozen).await;
    let end = run.history.borrow_mut().tick();
    let index = run.history.borrow_mut().snapshot_taken(volume, start, end);
    run.record(format_args!("snapshot {name} taken from tick {start} to {end}"));
    Some((name, index))
}

/// Seals what `frozen` froze; a seal that fails (the store cut off) is finished by the leader,
/// so this waits until the volume no longer seals that head.
async fn seal_until_sealed(store: &Arc<dyn MetaStore>, frozen: &mon::snapshots::Frozen) {
    let (name, head) = (&frozen.volume.name, frozen.volume.id);
    SimNet::on_node("admin", async {
        loop {
            let error = match mon::seal::seal(store.as_ref(), name, head, frozen.revision).await {
                Ok(_) => return,
                Err(error) => error,
            };
            let record = store.get(&cluster::keys::volume(name)).await;
            let sealing = match record {
                Ok(Some(kv)) => cluster::records::decode::<cluster::VolumeRecord>("volume", &kv.value)
                    .is_ok_and(|record| record.sealing && record.id == head),
                Ok(None) => false,
                Err(_) => true,
            };
            if !sealing {
                return;
            }
            tracing::debug!(%error, volume = %name, "sealing again");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
}

/// Reads a few random blocks of a snapshot, each checked against the cut.
async fn read_some(client: &Client, name: &str, index: usize, blocks: u64, rng: &mut SmallRng, run: &Run) {
    let picks: Vec<u64> = (0..4).map(|_| rng.gen_range(0..blocks)).collect();
    read_blocks(client, name, index, &picks, run).await;
}

/// Reads `blocks` of snapshot `name`, each checked against the cut, then the cut across them.
pub(crate) async fn read_blocks(client: &Client, name: &str, index: usize, blocks: &[u64], run: &Run) {
    let snapshot = match SimNet::on_node("admin", client.open_snapshot(name)).await {
        Ok(snapshot) => snapshot,
        Err(error) => return run.violation(format!("snapshot {name} could not be opened: {error}")),
    };
    for &block in blocks {
        let read = SimNet::on_node("admin", snapshot.read(block * BLOCK_BYTES as u64, BLOCK_BYTES as u32)).await;
        match read {
            Ok(data) => match run.history.borrow_mut().check_snapshot_read(index, block, &data) {
                Ok(id) => run.record(format_args!("snapshot {name} block {block} read as write {id}")),
                Err(violation) => run.violation(violation),
            },
            Err(error) => run.violation(format!("a read of snapshot {name} block {block} failed: {error}")),
        }
    }
    if let Err(violation) = run.history.borrow().check_snapshot_cut(index) {
        run.violation(violation);
    }
}

/// What every block of a snapshot holds: each block its volume's writes touched read (the
/// others were never written before it, so zeros).
pub(crate) async fn pin_all(client: &Client, name: &str, index: usize, run: &Run) -> BTreeMap<u64, u64> {
    let volume = run.history.borrow().snapshot_volume(index);
    let blocks: Vec<u64> =
        run.history.borrow().addresses().into_iter().filter(|address| address.0 == volume).map(|a| a.1).collect();
    read_blocks(client, name, index, &blocks, run).await;
    run.history.borrow().snapshot_blocks(index)
}

/// Clones snapshot `name`, then writes and reads some blocks of the clone: each reads as this
/// task's last write to it, or as the snapshot. Returns the clone's name, the volume its blocks'
/// contents are named after, and its model, if it was made and read as it should.
async fn clone_and_check(
    store: &Arc<dyn MetaStore>,
    client: &Client,
    name: &str,
    index: usize,
    number: usize,
    rng: &mut SmallRng,
    run: &Run,
) -> Option<(String, usize, BTreeMap<u64, u64>)> {
    let held = pin_all(client, name, index, run).await;
    let source = run.history.borrow().snapshot_volume(index);
    let clone_name = format!("clone{number}");
    let request = mon::snapshots::CreateClone { snapshot: name.to_string(), name: clone_name.clone(), pool: None };
    if let Err(error) = SimNet::on_node("admin", mon::snapshots::clone_volume(store.as_ref(), &request)).await {
        run.record(format_args!("clone {clone_name} of {name} not made: {error}"));
        return None;
    }
    let clone = match SimNet::on_node("admin", client.open_volume(&clone_name)).await {
        Ok(clone) => clone,
        Err(error) => {
            run.violation(format!("clone {clone_name} could not be opened: {error}"));
            return None;
        }
    };
    run.record(format_args!("cloned {name} as {clone_name}"));
    // The clone's contents: the snapshot's, then this task's writes (ids from the snapshot's
    // volume's address space, so the bytes say which write they are).
    let mut model: BTreeMap<u64, u64> = held;
    let blocks = (clone.size_bytes() / BLOCK_BYTES as u64).max(1);
    for step in 0..8u64 {
        let block = rng.gen_range(0..blocks);
        if rng.gen_bool(0.5) {
            let id = u64::MAX - (number as u64) * 1_000 - step;
            let data = Bytes::from(contents((source, block), id));
            match SimNet::on_node("admin", clone.write(block * BLOCK_BYTES as u64, data)).await {
                Ok(()) => {
                    model.insert(block, id);
                }
                Err(error) => {
                    run.violation(format!("a write to clone {clone_name} failed: {error}"));
                    return None;
                }
            }
        } else {
            check_clone_block(&clone, &clone_name, source, block, &model, run).await;
        }
    }
    for block in model.keys().copied().collect::<Vec<_>>() {
        check_clone_block(&clone, &clone_name, source, block, &model, run).await;
    }
    Some((clone_name, source, model))
}

/// A clone to flatten: its name, the volume its blocks' contents are named after, its number.
struct Flatten<'a> {
    name: &'a str,
    source: usize,
    number: usize,
}

/// How long a flatten may take in the simulation before the round stops waiting for it: the
/// faults may hold the leader or a PG up for a while.
const FLATTEN_WAIT: Duration = Duration::from_secs(60);

/// Flattens a clone while this task writes and reads it: each block reads as its model while
/// the leader walks the PGs, and once its parent is cut.
async fn flatten_round(
    store: &Arc<dyn MetaStore>,
    client: &Client,
    flatten: &Flatten<'_>,
    model: &mut BTreeMap<u64, u64>,
    rng: &mut SmallRng,
    run: &Run,
) {
    let Flatten { name, source, number } = *flatten;
    match SimNet::on_node("admin", mon::flatten::start(store.as_ref(), name)).await {
        Ok(_) => run.record(format_args!("flatten of {name} started")),
        Err(error) => return run.record(format_args!("flatten of {name} not started: {error}")),
    }
    let clone = match SimNet::on_node("admin", client.open_volume(name)).await {
        Ok(clone) => clone,
        Err(error) => return run.violation(format!("clone {name} could not be opened to flatten: {error}")),
    };
    let blocks = (clone.size_bytes() / BLOCK_BYTES as u64).max(1);
    for step in 0..6u64 {
        let block = rng.gen_range(0..blocks);
        if rng.gen_bool(0.5) {
            let id = u64::MAX - (number as u64) * 1_000 - 100 - step;
            let data = Bytes::from(contents((source, block), id));
            match SimNet::on_node("admin", clone.write(block * BLOCK_BYTES as u64, data)).await {
                Ok(()) => {
                    model.insert(block, id);
                }
                Err(error) => return run.violation(format!("a write to clone {name} while flattened failed: {error}")),
            }
        } else {
            check_clone_block(&clone, name, source, block, model, run).await;
        }
    }
    let deadline = tokio::time::Instant::now() + FLATTEN_WAIT;
    let flattened = loop {
        let record = SimNet::on_node("admin", store.get(&cluster::keys::volume(name))).await;
        let done = match record {
            Ok(Some(kv)) => cluster::records::decode::<cluster::VolumeRecord>("volume", &kv.value)
                .is_ok_and(|record| record.parent.is_none() && !record.flattening),
            _ => false,
        };
        if done || tokio::time::Instant::now() >= deadline {
            break done;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    if flattened {
        run.record(format_args!("clone {name} flattened: it has no parent"));
    } else {
        run.record(format_args!("clone {name} not flattened within {FLATTEN_WAIT:?}"));
    }
    for block in model.keys().copied().collect::<Vec<_>>() {
        check_clone_block(&clone, name, source, block, model, run).await;
    }
}

/// Removes clone `name` to the trash, then restores it (under its name or another) at once or
/// after up to twice the retention, or purges it; checks what each outcome must leave.
async fn trash_round(
    store: &Arc<dyn MetaStore>,
    client: &Client,
    name: &str,
    source: usize,
    model: &BTreeMap<u64, u64>,
    rng: &mut SmallRng,
    run: &Run,
) {
    if !rng.gen_bool(0.6) {
        return;
    }
    let now = stdx::wall_clock::unix_ms();
    let entry = match SimNet::on_node("admin", mon::trash::move_to_trash(store.as_ref(), name, now)).await {
        Ok(entry) => entry,
        Err(error) => return run.record(format_args!("clone {name} not moved to the trash: {error}")),
    };
    let id = format!("{:016x}", entry.id());
    run.record(format_args!("clone {name} moved to the trash as {id}"));
    if named(store, name).await {
        return run.violation(format!("clone {name} is still a volume once in the trash"));
    }
    if rng.gen_bool(0.25) {
        match SimNet::on_node("admin", mon::trash::purge(store.as_ref(), &id)).await {
            Ok(_) => run.record(format_args!("trash entry {id} purged")),
            Err(error) => run.violation(format!("trash entry {id} not purged: {error}")),
        }
        return;
    }
    let wait = Duration::from_millis(rng.gen_range(0..2 * crate::cluster::TRASH_RETENTION_S * 1000));
    tokio::time::sleep(wait).await;
    let restored_name = if rng.gen_bool(0.5) { name.to_string() } else { format!("{name}r") };
    let restore = mon::trash::restore(store.as_ref(), &id, Some(&restored_name));
    match SimNet::on_node("admin", restore).await {
        Ok(_) => {
            run.record(format_args!("trash entry {id} restored as {restored_name} after {wait:?}"));
            let restored = match SimNet::on_node("admin", client.open_volume(&restored_name)).await {
                Ok(restored) => restored,
                Err(error) => return run.violation(format!("restored {restored_name} could not be opened: {error}")),
            };
            for &block in model.keys() {
                check_clone_block(&restored, &restored_name, source, block, model, run).await;
            }
        }
        // Past its retention the leader purges it: then nothing comes back.
        Err(mon::admin::AdminError::NotFound(_)) => {
            run.record(format_args!("trash entry {id} gone after {wait:?}: purged by the leader"));
            if named(store, &restored_name).await {
                run.violation(format!("{restored_name} is a volume after its trash entry was purged"));
            }
        }
        Err(error) => run.violation(format!("trash entry {id} not restored: {error}")),
    }
}

/// Whether the store names volume `name` now (a client's map may lag it).
async fn named(store: &Arc<dyn MetaStore>, name: &str) -> bool {
    cluster_watch::load(store.as_ref()).await.map_or(true, |map| map.volumes.contains_key(name))
}

async fn check_clone_block(
    clone: &Volume,
    clone_name: &str,
    source: usize,
    block: u64,
    model: &BTreeMap<u64, u64>,
    run: &Run,
) {
    let expected = model.get(&block).copied().unwrap_or(ZEROS);
    let wanted = if expected == ZEROS { vec![0; BLOCK_BYTES] } else { contents((source, block), expected) };
    match SimNet::on_node("admin", clone.read(block * BLOCK_BYTES as u64, BLOCK_BYTES as u32)).await {
        Ok(data) if data[..] == wanted[..] => {
            run.record(format_args!("clone {clone_name} block {block} read as write {expected}"))
        }
        Ok(_) => run.violation(format!(
            "clone {clone_name} block {block} does not read as write {expected} (its own last write or its snapshot's)"
        )),
        Err(error) => run.violation(format!("a read of clone {clone_name} block {block} failed: {error}")),
    }
}

/// Rolls the snapshot's volume back to it while the clients write: to the history, every
/// block is written with the snapshot's contents, in flight for as long as the call.
async fn rollback(store: &Arc<dyn MetaStore>, client: &Client, name: &str, index: usize, run: &Run) {
    let held = pin_all(client, name, index, run).await;
    let volume = run.history.borrow().snapshot_volume(index);
    let writes = run.history.borrow_mut().rollback_started(volume, &held);
    let volume_name = volume_name(volume);
    let frozen = SimNet::on_node("admin", mon::snapshots::rollback(store.as_ref(), &volume_name, name, 0)).await;
    match frozen {
        Ok(frozen) => {
            // Committed: reads see the snapshot from now on, and writes once it is sealed.
            seal_until_sealed(store, &frozen).await;
            for (address, id) in writes {
                run.history.borrow_mut().write_acknowledged(address, id);
            }
            run.record(format_args!("{volume_name} rolled back to {name}"));
        }
        // Refused before anything changed.
        Err(error) => {
            run.history.borrow_mut().cancel(&writes);
            run.record(format_args!("rollback of {volume_name} to {name} refused: {error}"));
        }
    }
}

/// After the clients: every snapshot read whole and held to the cut.
pub(crate) async fn final_check(client: &Client, taken: &[(String, usize)], run: &Run) {
    for (name, index) in taken {
        pin_all(client, name, *index, run).await;
    }
}
