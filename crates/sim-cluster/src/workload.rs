//! The clients: each a node of the network making one op at a time on a random block of a
//! random volume (writes, reads, trims, zeroing), every reply checked against the history; at
//! the end, every block touched is read once more (nothing acknowledged may be lost).

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
use crate::history::{contents, Address, BLOCK_BYTES};
use crate::scenarios::{self, Stage};
use crate::SimOptions;
use crate::{faults, replicas, settle};

pub(crate) fn volume_name(index: usize) -> String {
    format!("vol{index}")
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    Write,
    Read,
    Trim,
    Zero,
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
    let faults = options.faults.then(|| tokio::task::spawn_local(faults::inject(derive(seed, 2), nodes.clone())));
    let mut clients = Vec::new();
    for index in 0..options.clients {
        let node = format!("client{index}");
        let task = one_client(derive(seed, 1000 + index as u64), index, options.clone(), volumes.clone(), run.clone());
        clients.push(tokio::task::spawn_local(SimNet::on_node(&node, task)));
    }
    let scenario = options.scenario.map(|scenario| {
        let stage = Stage { nodes, store, volumes: &volumes, run };
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
    if finished.is_err() {
        return run.violation(format!("the clients did not finish within {CLIENTS_DEADLINE:?} (liveness)"));
    }
    // Nothing is in flight now: every block must read as its last acknowledged write (or one
    // that failed after it), first with the OSD the faults left down or paused still so (the
    // pool serves with one copy gone), then with every OSD back. Cuts heal first: a cut between
    // two OSDs that both keep their leases stalls the PGs that need that link until it heals
    // (no OSD reports a peer it cannot reach yet; docs/testing.md).
    nodes.network.heal_all();
    match two_copies_impaired(nodes) {
        // An object whose one other copy rotted has no readable copy up: its PG waits for the
        // OSD to come back, as it must (no read may return older data than a write it lost).
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
    if settle::wait_until_clean(store, nodes.count(), options.osd_lease, run).await {
        let rotted = nodes.rotted.borrow().clone();
        replicas::check(store, options, rotted.as_deref(), run).await;
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
/// catching up).
fn two_copies_impaired(nodes: &Nodes) -> Option<String> {
    let rotted = nodes.rotted.borrow().clone()?;
    let impaired = (0..nodes.count()).find(|&index| {
        nodes.name(index) != rotted && (!nodes.is_running(index) || nodes.with_osd(index, |osd| osd.pause.is_paused()))
    })?;
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
    let mut rng = SmallRng::seed_from_u64(seed);
    for _ in 0..options.ops_per_client {
        let address = (rng.gen_range(0..volumes.len()), rng.gen_range(0..options.blocks_per_volume));
        let op = match rng.gen_range(0..100) {
            0..=44 => Op::Write,
            45..=89 => Op::Read,
            90..=94 => Op::Trim,
            _ => Op::Zero,
        };
        let who = format!("client{index}");
        match op {
            Op::Read => read(&volumes, address, &run, &who).await,
            Op::Write | Op::Trim | Op::Zero => write(&volumes, address, op, &run, &who).await,
        }
        let pause = rng.gen_range(0..2_000);
        tokio::time::sleep(Duration::from_micros(pause)).await;
    }
}

pub(crate) async fn write(volumes: &[Rc<Volume>], address: Address, op: Op, run: &Run, who: &str) {
    let id = run.history.borrow_mut().write_started(address, !matches!(op, Op::Write));
    run.record(format_args!("{who} {op:?} vol{} block {} as write {id}", address.0, address.1));
    let volume = &volumes[address.0];
    let offset = address.1 * BLOCK_BYTES as u64;
    let result = match op {
        Op::Write => volume.write(offset, Bytes::from(contents(address, id))).await,
        Op::Trim => volume.trim(offset, BLOCK_BYTES as u64).await,
        Op::Zero => volume.write_zeroes(offset, BLOCK_BYTES as u64).await,
        Op::Read => unreachable!("not a write"),
    };
    match result {
        Ok(()) => {
            run.history.borrow_mut().write_acknowledged(address, id);
            run.record(format_args!("{who} write {id} acknowledged"));
        }
        // With no faults, nothing may fail.
        Err(error) => {
            run.history.borrow_mut().write_failed();
            run.violation(format!("{who} write {id} failed: {error}"));
        }
    }
}

pub(crate) async fn read(volumes: &[Rc<Volume>], address: Address, run: &Run, who: &str) {
    let start = run.history.borrow_mut().tick();
    let offset = address.1 * BLOCK_BYTES as u64;
    match volumes[address.0].read(offset, BLOCK_BYTES as u32).await {
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
