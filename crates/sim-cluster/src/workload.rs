//! The clients: each a node of the network making ops on random blocks of random volumes
//! (writes, reads, trims, zeroing; with `whole_object_ops`, also of whole objects), one at a
//! time or, with `pipeline_max`, in batches all in flight at once followed by a flush; every
//! reply checked against the history. At the end, every block touched is read once more
//! (nothing acknowledged may be lost).

use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use client::{Client, ClientOptions, Volume};
use meta::MetaStore;
use net::sim::SimNet;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::cluster::{derive, Nodes, Run};
use crate::gateway;
use crate::history::{contents, Address, BLOCK_BYTES};
use crate::nbd_client::NbdClient;
use crate::scenarios::{self, Stage};
use crate::SimOptions;
use crate::{faults, images, listings, membership, replicas, scrubs, settle, snapshots};

pub(crate) fn volume_name(index: usize) -> String {
    format!("vol{index}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Write,
    Read,
    Trim,
    Zero,
    /// The whole object holding the block: written (each block with its own write's
    /// contents), trimmed or zeroed (which deletes the object).
    WriteObject,
    TrimObject,
    ZeroObject,
}

impl Op {
    /// Whether the op covers the whole object holding its block.
    fn whole_object(self) -> bool {
        matches!(self, Op::WriteObject | Op::TrimObject | Op::ZeroObject)
    }

    /// Whether it writes contents (the others write zeros).
    fn writes_data(self) -> bool {
        matches!(self, Op::Write | Op::WriteObject)
    }
}

/// How long the clients may take, faults included, before the run counts as stuck: a kill
/// costs an op at most a lease (3 s) and a peering.
const CLIENTS_DEADLINE: Duration = Duration::from_secs(600);
/// How long the final reads may take (a lease and a peering if a primary is down).
const FINAL_DEADLINE: Duration = Duration::from_secs(120);

/// Runs the clients to the end (with faults, if asked), then the final reads.
pub(crate) async fn run(seed: u64, options: &SimOptions, store: &Arc<dyn MetaStore>, nodes: &Rc<Nodes>, run: &Rc<Run>) {
    let client =
        match SimNet::on_node("client", Client::with_store_and_options(store.clone(), client_options(nodes))).await {
            Ok(client) => Rc::new(client),
            Err(error) => return run.violation(format!("the client could not start: {error}")),
        };
    let mut volumes = Vec::new();
    for index in 0..options.volumes {
        match SimNet::on_node("client", client.open_volume(&volume_name(index))).await {
            Ok(volume) => volumes.push(Rc::new(volume)),
            Err(error) => return run.violation(format!("volume {index} could not be opened: {error}")),
        }
    }
    let gateway = options.nbd.then(|| gateway::start(&nodes.network, store.clone(), client_options(nodes), run));
    let faults = options.faults.then(|| {
        let inject = faults::inject(derive(seed, 2), nodes.clone(), options.min_size);
        let overlap = faults::overlap(derive(seed, 8), nodes.clone(), options.min_size);
        let overlapping = options.overlapping_faults;
        tokio::task::spawn_local(async move {
            if overlapping {
                tokio::join!(inject, overlap);
            } else {
                inject.await;
            }
        })
    });
    let membership_pending = Rc::new(std::cell::Cell::new(None));
    let membership = (options.faults && options.membership_changes).then(|| {
        let change = membership::change(derive(seed, 4), nodes.clone(), store.clone(), membership_pending.clone());
        tokio::task::spawn_local(change)
    });
    // The OSD that joins late starts 0.5 to 5 s into the clients' run (if a fault has not
    // restarted it first; `faults::heal` starts it at the latest).
    // A scenario starts it itself.
    let joining = (options.late_join && options.scenario.is_none()).then(|| {
        let (nodes, index) = (nodes.clone(), options.osds - 1);
        let delay = Duration::from_millis(SmallRng::seed_from_u64(derive(seed, 10)).gen_range(500..5_000));
        tokio::task::spawn_local(async move {
            tokio::time::sleep(delay).await;
            nodes.join(index);
        })
    });
    let scrubs = (options.faults && options.membership_changes)
        .then(|| tokio::task::spawn_local(scrubs::request(derive(seed, 5), store.clone(), run.clone())));
    let taken = Rc::new(std::cell::RefCell::new(snapshots::Taken::default()));
    let snapshotting = options.snapshots.then(|| {
        let task = snapshots::run(
            derive(seed, 11),
            store.clone(),
            client.clone(),
            options.clone(),
            run.clone(),
            taken.clone(),
        );
        tokio::task::spawn_local(task)
    });
    let mut clients = Vec::new();
    for index in 0..options.clients {
        let node = format!("client{index}");
        let task = one_client(derive(seed, 1000 + index as u64), index, options.clone(), volumes.clone(), run.clone());
        clients.push(tokio::task::spawn_local(SimNet::on_node(&node, task)));
    }
    let scenario = options.scenario.map(|scenario| {
        let stage = Stage { nodes, store, volumes: &volumes, run, client: &client, seed };
        scenarios::play(scenario, stage)
    });
    let finished = tokio::time::timeout(CLIENTS_DEADLINE, async {
        // The scenario plays while the clients run (it is its own task's work, on this one).
        let clients = async {
            for client in clients {
                if let Err(error) = client.await {
                    run.violation(format!("a client task failed: {error}"));
                }
            }
        };
        match scenario {
            Some(scenario) => {
                tokio::join!(clients, scenario);
            }
            None => clients.await,
        }
    })
    .await;
    if let Some(faults) = &faults {
        faults.abort();
    }
    if let Some(faults) = faults {
        let _ = faults.await;
    }
    if let Some(scrubs) = scrubs {
        scrubs.abort();
        let _ = scrubs.await;
    }
    if let Some(snapshotting) = snapshotting {
        snapshotting.abort();
        let _ = snapshotting.await;
    }
    if let Some(joining) = joining {
        joining.abort();
        let _ = joining.await;
        nodes.join(options.osds - 1);
    }
    if let Some(membership) = membership {
        membership.abort();
        let _ = membership.await;
        membership::undo(nodes, store.as_ref(), &membership_pending).await;
    }
    if finished.is_err() {
        if let Some(gateway) = gateway {
            gateway.abort();
        }
        return run.violation(format!("the clients did not finish within {CLIENTS_DEADLINE:?} (liveness)"));
    }
    // Nothing is in flight now: every block must read as its last acknowledged write (or one
    // that failed after it), first with the OSD the faults left down or paused still so (the
    // pool serves with one copy gone), then with every OSD back. Cuts heal first: a cut between
    // two OSDs that both keep their leases stalls the PGs that need that link until it heals
    // (no OSD reports a peer it cannot reach yet; docs/testing.md).
    nodes.network.heal_all();
    match two_copies_impaired(nodes, options.min_size) {
        // An object whose copy on the down OSD is its only good one (the rotted copy fails its
        // checksums, the third may be one still catching up) has no readable copy up: its PG
        // waits for the OSD, as it must. The flipped bits may have been repaired meanwhile; the
        // healed reads below are bounded either way.
        Some(why) => {
            run.record(format_args!("the final reads may wait for the heal: {why}"));
            final_reads(&volumes, run, "final", false).await;
        }
        None => final_reads(&volumes, run, "final", true).await,
    }
    if options.faults || options.scenario.is_some() {
        faults::heal(nodes);
        final_reads(&volumes, run, "healed", true).await;
    }
    if options.snapshots {
        let taken = taken.borrow().list();
        if tokio::time::timeout(FINAL_DEADLINE, snapshots::final_check(&client, &taken, run)).await.is_err() {
            run.violation(format!("the snapshots' final reads did not finish within {FINAL_DEADLINE:?} (liveness)"));
        }
    }
    if settle::wait_until_clean(store, nodes.members(), options.osd_lease, run).await {
        let rotted = nodes.rotted.borrow().clone();
        replicas::check(store, options, rotted.as_deref(), run).await;
        let views = SimNet::on_node("checker", settle::pg_views(store)).await;
        match (cluster_watch::load(store.as_ref()).await, views) {
            (Ok(map), Ok((views, _))) => {
                let listed = SimNet::on_node("checker", listings::gather(&map, &views)).await;
                match listed.and_then(|listed| images::compare(nodes, &map, &views, &listed, options)) {
                    Ok((objects, skipped)) => run.record(format_args!(
                        "disk images: replicas of {objects} objects identical, listings as held ({skipped} in PGs \
                         not settled when asked)"
                    )),
                    Err(violation) => run.violation(violation),
                }
            }
            (Err(error), _) => run.violation(format!("loading the map for the disk images: {error}")),
            (_, Err(error)) => run.violation(format!("the PGs' states for the disk images: {error}")),
        }
    }
    if let Some(gateway) = gateway {
        gateway.abort();
    }
}

/// Reads every block touched, each checked against the history. Reads still waiting at
/// [`FINAL_DEADLINE`] are given up: a liveness violation when `bounded`.
async fn final_reads(volumes: &[Rc<Volume>], run: &Run, who: &str, bounded: bool) {
    let addresses = run.history.borrow().addresses();
    let reads = async {
        for address in addresses {
            SimNet::on_node("client", read(volumes, address, run, who)).await;
        }
    };
    if tokio::time::timeout(FINAL_DEADLINE, reads).await.is_err() {
        if bounded {
            run.violation(format!("the {who} reads did not finish within {FINAL_DEADLINE:?} (liveness)"));
        } else {
            run.record(format_args!("the {who} reads gave up waiting after {FINAL_DEADLINE:?}"));
        }
    }
}

/// Why some object may have no readable copy up while the faults hold: bits flipped in one
/// OSD's copies and another OSD down or paused (with three copies, the third may be one still
/// catching up), with `min_size` 1 any OSD down or paused, two OSDs down or paused, the mon
/// (or the store's leader) and an OSD, or the store's quorum, lost or split (no OSD can renew
/// its lease: one whose lease lapsed before cannot ride through, and nothing fails its PGs over).
fn two_copies_impaired(nodes: &Nodes, min_size: u8) -> Option<String> {
    if let Some(members) = nodes.store_faults.members() {
        if members.leader().is_none() && !members.all_up() {
            return Some("the store has lost its quorum".to_string());
        }
        if members.leader().is_none() && members.is_split() {
            return Some("the store's members are cut off from one another".to_string());
        }
    }
    // An OSD whose drive the faults left failing is down too, if it has not finished stopping.
    let down = |index: usize| {
        !nodes.is_retired(index)
            && (!nodes.is_running(index)
                || nodes.with_osd(index, |osd| osd.pause.is_paused() || osd.failing_disk.get()))
    };
    // Two faults at once may leave two OSDs down: a PG may have no member of a recorded set up.
    let downs: Vec<String> = (0..nodes.count()).filter(|&index| down(index)).map(|index| nodes.name(index)).collect();
    if downs.len() >= 2 {
        return Some(format!("{} are down or paused", downs.join(" and ")));
    }
    // With the mon down too, nothing fails the OSD's PGs over to the others.
    if let (false, Some(down)) = (nodes.mon_running(), downs.first()) {
        return Some(format!("the mon and {down} are down or paused"));
    }
    // With min_size 1 a write may have been acknowledged with the one copy on the OSD left down:
    // its PG waits for that OSD, as it must.
    if min_size < 2 {
        if let Some(index) = (0..nodes.count()).find(|&index| down(index)) {
            return Some(format!("min_size 1 and {} is down or paused", nodes.name(index)));
        }
    }
    let rotted = nodes.rotted.borrow().clone()?;
    let impaired = (0..nodes.count()).find(|&index| nodes.name(index) != rotted && down(index))?;
    Some(format!("bits flipped in {rotted}'s copies and {} is down or paused", nodes.name(impaired)))
}

fn client_options(nodes: &Nodes) -> ClientOptions {
    // Waits for as long as it takes (no faults make ops fail), retrying quickly; reports an
    // OSD it finds gone to the mon.
    ClientOptions {
        io_timeout: None,
        down_reporter: Some(Arc::new(nodes.reporter.clone())),
        ..ClientOptions::default()
    }
}

async fn one_client(seed: u64, index: usize, options: SimOptions, volumes: Vec<Rc<Volume>>, run: Rc<Run>) {
    let who = format!("client{index}");
    // Through the gateway: a connection to each volume's export.
    let mut connections = Vec::new();
    if options.nbd {
        for volume in 0..volumes.len() {
            match NbdClient::connect(gateway::GATEWAY_ADDRESS, &volume_name(volume)).await {
                Ok(connection) => connections.push(connection),
                Err(error) => return run.violation(format!("{who} could not open vol{volume} over nbd: {error}")),
            }
        }
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut done = 0;
    while done < options.ops_per_client {
        // Through the gateway, one op at a time (its client awaits each reply).
        let batch = if options.pipeline_max > 1 && !options.nbd {
            rng.gen_range(1..=options.pipeline_max).min(options.ops_per_client - done)
        } else {
            1
        };
        let ops: Vec<(Address, Op)> = (0..batch).map(|_| draw_op(&mut rng, &options, volumes.len())).collect();
        done += batch;
        if options.nbd {
            let (address, op) = ops[0];
            match op {
                Op::Read => read_nbd(&mut connections, address, &run, &who).await,
                _ => write_nbd(&mut connections, address, op, &run, &who).await,
            }
        } else if batch == 1 {
            perform(&volumes, ops[0], &run, &who).await;
        } else {
            // Every op of the batch is sent before any is awaited; the flush after them must
            // succeed once they have all been acknowledged.
            futures_util::future::join_all(ops.iter().map(|&op| perform(&volumes, op, &run, &who))).await;
            let volume = &volumes[ops[0].0 .0];
            if let Err(error) = volume.flush().await {
                run.violation(format!("{who}'s flush of vol{} failed: {error}", ops[0].0 .0));
            }
        }
        let pause = rng.gen_range(0..2_000);
        tokio::time::sleep(Duration::from_micros(pause)).await;
    }
    // What an NBD client does before it disconnects.
    for (volume, connection) in connections.iter_mut().enumerate() {
        if let Err(error) = connection.flush().await {
            run.violation(format!("{who}'s flush of vol{volume} over nbd failed: {error}"));
        }
    }
}

/// A block and an op on it, drawn as the options allow. The draws without whole-object ops
/// are what they always were, so that seeds found before keep their workload.
fn draw_op(rng: &mut SmallRng, options: &SimOptions, volumes: usize) -> (Address, Op) {
    let address = (rng.gen_range(0..volumes), rng.gen_range(0..options.blocks_per_volume));
    let op = if options.whole_object_ops {
        match rng.gen_range(0..100) {
            0..=39 => Op::Write,
            40..=84 => Op::Read,
            85..=89 => Op::Trim,
            90..=94 => Op::Zero,
            95..=97 => Op::WriteObject,
            98 => Op::TrimObject,
            _ => Op::ZeroObject,
        }
    } else {
        match rng.gen_range(0..100) {
            0..=44 => Op::Write,
            45..=89 => Op::Read,
            90..=94 => Op::Trim,
            _ => Op::Zero,
        }
    };
    (address, op)
}

/// One op through the client library.
async fn perform(volumes: &[Rc<Volume>], (address, op): (Address, Op), run: &Run, who: &str) {
    match op {
        Op::Read => read(volumes, address, run, who).await,
        _ => write(volumes, address, op, run, who).await,
    }
}

/// The blocks `op` at `address` writes: the block, or every block of its object.
fn blocks_of(volume: &Volume, address: Address, op: Op) -> Vec<Address> {
    if !op.whole_object() {
        return vec![address];
    }
    let per_object = u64::from(volume.object_size_bytes()) / BLOCK_BYTES as u64;
    let first = address.1 / per_object * per_object;
    (first..first + per_object).map(|block| (address.0, block)).collect()
}

pub(crate) async fn write(volumes: &[Rc<Volume>], address: Address, op: Op, run: &Run, who: &str) {
    let volume = &volumes[address.0];
    let blocks = blocks_of(volume, address, op);
    let offset = blocks[0].1 * BLOCK_BYTES as u64;
    let length = (blocks.len() * BLOCK_BYTES) as u64;
    checked_write(&blocks, op, run, who, |data| async move {
        let result = match (op, data) {
            (Op::Write | Op::WriteObject, Some(data)) => volume.write(offset, data).await,
            (Op::Trim | Op::TrimObject, _) => volume.trim(offset, length).await,
            (Op::Zero | Op::ZeroObject, _) => volume.write_zeroes(offset, length).await,
            other => unreachable!("not a write: {other:?}"),
        };
        result.map_err(|error| error.to_string())
    })
    .await;
}

pub(crate) async fn read(volumes: &[Rc<Volume>], address: Address, run: &Run, who: &str) {
    let offset = address.1 * BLOCK_BYTES as u64;
    let volume = &volumes[address.0];
    checked_read(address, run, who, || async move {
        volume.read(offset, BLOCK_BYTES as u32).await.map_err(|error| error.to_string())
    })
    .await;
}

/// [`write`] through the gateway, on the client's connection to the block's volume.
async fn write_nbd(connections: &mut [NbdClient], address: Address, op: Op, run: &Run, who: &str) {
    let connection = &mut connections[address.0];
    let offset = address.1 * BLOCK_BYTES as u64;
    checked_write(&[address], op, run, who, |data| async move {
        match (op, data) {
            (Op::Write, Some(data)) => connection.write(offset, &data).await,
            (Op::Trim, _) => connection.trim(offset, BLOCK_BYTES as u32).await,
            (Op::Zero, _) => connection.write_zeroes(offset, BLOCK_BYTES as u32).await,
            other => unreachable!("not a write: {other:?}"),
        }
    })
    .await;
}

/// [`read`] through the gateway.
async fn read_nbd(connections: &mut [NbdClient], address: Address, run: &Run, who: &str) {
    let connection = &mut connections[address.0];
    let offset = address.1 * BLOCK_BYTES as u64;
    checked_read(address, run, who, || async move { connection.read(offset, BLOCK_BYTES as u32).await }).await;
}

/// Makes a write of consecutive `blocks` (`perform` gets the unique contents of a write with
/// data, each block's its own) and records it in the history, one write per block: started,
/// then acknowledged or failed.
async fn checked_write<F>(blocks: &[Address], op: Op, run: &Run, who: &str, perform: impl FnOnce(Option<Bytes>) -> F)
where
    F: Future<Output = Result<(), String>>,
{
    let ids: Vec<u64> =
        blocks.iter().map(|&address| run.history.borrow_mut().write_started(address, !op.writes_data())).collect();
    let (first, id) = (blocks[0], ids[0]);
    match blocks.len() {
        1 => run.record(format_args!("{who} {op:?} vol{} block {} as write {id}", first.0, first.1)),
        count => run.record(format_args!(
            "{who} {op:?} vol{} blocks {} to {} as writes {id} to {}",
            first.0,
            first.1,
            first.1 + count as u64 - 1,
            ids[count - 1]
        )),
    }
    let data = op.writes_data().then(|| {
        let mut data = Vec::with_capacity(blocks.len() * BLOCK_BYTES);
        for (&address, &id) in blocks.iter().zip(&ids) {
            data.extend_from_slice(&contents(address, id));
        }
        Bytes::from(data)
    });
    match perform(data).await {
        Ok(()) => {
            for (&address, &id) in blocks.iter().zip(&ids) {
                run.history.borrow_mut().write_acknowledged(address, id);
            }
            run.record(format_args!("{who} write {id} acknowledged"));
        }
        // With no faults, nothing may fail.
        Err(error) => {
            for _ in &ids {
                run.history.borrow_mut().write_failed();
            }
            run.violation(format!("{who} write {id} failed: {error}"));
        }
    }
}

/// Makes a read and checks what it returns against the history.
async fn checked_read<F>(address: Address, run: &Run, who: &str, perform: impl FnOnce() -> F)
where
    F: Future<Output = Result<Bytes, String>>,
{
    let start = run.history.borrow_mut().tick();
    match perform().await {
        Ok(data) => {
            let checked = run.history.borrow_mut().check_read(address, start, &data);
            match checked {
                Ok(id) => run.record(format_args!("{who} read vol{} block {} as write {id}", address.0, address.1)),
                Err(violation) => run.violation(format!("{who}: {violation}")),
            }
        }
        Err(error) => run.violation(format!("{who} read of vol{} block {} failed: {error}", address.0, address.1)),
    }
}
