//! Faults drawn from the seed while the clients run, one at a time, each undone before the next
//! (the pool keeps serving through any one), and with `overlapping_faults` a second stream of
//! faults on top ([`overlap`]: kills, pauses, slow disks, resets and late watch events, which
//! may hit a second OSD while the first is down, or the same one twice):
//! - an OSD killed as a power loss would (its tasks and connections gone at once, its disk's
//!   unflushed writes lost or torn) and restarted on the same disk a while later;
//! - an OSD paused as SIGSTOP pauses it (often past its lease), then resumed;
//! - an OSD cut off from every other node, both ways; or one way only (what it sends, or what
//!   it is sent, is held until the heal), from every node or from one other OSD;
//! - the connections between an OSD and another node reset (both ends see an error);
//! - the mon killed and restarted (its leadership lapses with its lease);
//! - an OSD cut off from the metadata store alone: its lease runs out while its peers still
//!   reach it;
//! - an OSD's disk slowed down many times over;
//! - an OSD's disk failing a write or a flush (the OSD stops: ADR 0021; restarted later), or
//!   failing reads (a client's read is repaired from a member; the engine's own reads of its
//!   metadata stop the OSD as a failed write does);
//! - bits flipped at rest in the data blocks of one replica (the same OSD all run long, so that
//!   two copies of an object are never both damaged; never with a `min_size` of 1, where a
//!   write may have one copy);
//! - the metadata store stalling (every call waits; leases keep running out);
//! - watch events reaching one node late;
//! - a node's clock set off and drifting;
//! - with `control_plane` (two mons, a store of three members), also: the leading mon paused or
//!   cut off from every node (and killed, as the one mon is otherwise), the other must lead
//!   within [`TAKEOVER_MAX`]; a store member killed, or silent (stopped, or cut off by dropped
//!   packets), the leader half the time; the members cut off from one another (no leader
//!   anywhere, every member answering); two members killed (the quorum lost).

use std::rc::Rc;
use std::time::Duration;

use engine::layout::{MetaEntry, Superblock};
use engine::PAGE_SIZE_BYTES;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sim::SimDisk;
use tokio::time::Instant;

use crate::clock::{self, Skew};
use crate::cluster::{Nodes, MON_NODE};
use crate::store_members::MEMBERS;

/// The kinds of fault, and how often each is drawn (per mille).
const KINDS: [(Kind, u32); 14] = [
    (Kind::Kill, 230),
    (Kind::Pause, 110),
    (Kind::Isolate, 90),
    (Kind::CutOneWay, 90),
    (Kind::Reset, 50),
    (Kind::KillMon, 50),
    (Kind::CutFromStore, 80),
    (Kind::SlowDisk, 80),
    (Kind::FailWrites, 70),
    (Kind::FailReads, 50),
    (Kind::FlipBits, 50),
    (Kind::StoreStall, 40),
    (Kind::WatchLag, 40),
    (Kind::ClockSkew, 20),
];

/// The control plane's own faults, drawn with `control_plane` besides those above.
const CONTROL_PLANE_KINDS: [(Kind, u32); 6] = [
    (Kind::PauseMon, 40),
    (Kind::IsolateMon, 40),
    (Kind::KillMember, 50),
    (Kind::SilenceMember, 50),
    (Kind::SplitStore, 30),
    (Kind::LoseQuorum, 30),
];

/// How soon after the leading mon is killed, paused or cut off the other leads (its lease is
/// 3 s; the real-process bound of `crates/basalt/tests/control_plane.rs` is the same).
pub(crate) const TAKEOVER_MAX: Duration = Duration::from_secs(6);

#[derive(Debug, Clone, Copy)]
enum Kind {
    Kill,
    Pause,
    Isolate,
    CutOneWay,
    Reset,
    KillMon,
    CutFromStore,
    SlowDisk,
    FailWrites,
    FailReads,
    FlipBits,
    StoreStall,
    WatchLag,
    ClockSkew,
    PauseMon,
    IsolateMon,
    KillMember,
    SilenceMember,
    SplitStore,
    LoseQuorum,
}

fn draw(rng: &mut SmallRng, kinds: &[(Kind, u32)]) -> Kind {
    let total: u32 = kinds.iter().map(|(_, weight)| weight).sum();
    let mut pick = rng.gen_range(0..total);
    for &(kind, weight) in kinds {
        if pick < weight {
            return kind;
        }
        pick -= weight;
    }
    unreachable!("the weights sum to {total}")
}

/// The faults [`overlap`] draws from: those undone on their own node alone, which cannot
/// end the other stream's fault early or damage data.
const OVERLAPPING: [(Kind, u32); 5] =
    [(Kind::Kill, 400), (Kind::Pause, 250), (Kind::SlowDisk, 150), (Kind::Reset, 100), (Kind::WatchLag, 100)];

/// Draws faults and applies them, one at a time, until dropped. With a `min_size` of 1 a write
/// may be acknowledged with one copy, so bits flipped in that copy are data lost, not a fault
/// the pool survives: none are flipped then.
pub(crate) async fn inject(seed: u64, nodes: Rc<Nodes>, min_size: u8) {
    let mut kinds = KINDS.to_vec();
    if nodes.mon_count() > 1 {
        kinds.extend(CONTROL_PLANE_KINDS);
    }
    apply(seed, &nodes, min_size, &kinds, 10..400).await
}

/// A second stream of faults, less often, over those of [`inject`].
pub(crate) async fn overlap(seed: u64, nodes: Rc<Nodes>, min_size: u8) {
    apply(seed, &nodes, min_size, &OVERLAPPING, 1_000..4_000).await
}

async fn apply(seed: u64, nodes: &Nodes, min_size: u8, kinds: &[(Kind, u32)], gap_ms: std::ops::Range<u64>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    // The one replica whose data may rot.
    let rotting = rng.gen_range(0..nodes.count());
    loop {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(gap_ms.clone()))).await;
        let index = rng.gen_range(0..nodes.count());
        // Mostly past the lease (3 s), so that the PGs fail over; sometimes within it.
        let lasting = Duration::from_millis(rng.gen_range(100..6_000));
        let kind = draw(&mut rng, kinds);
        match kind {
            Kind::Kill => {
                nodes.kill(index).await;
                tokio::time::sleep(lasting).await;
                nodes.restart(index);
            }
            Kind::Pause => {
                nodes.with_osd(index, |osd| osd.pause.pause());
                nodes.run().record(format_args!("fault: {} paused", nodes.name(index)));
                tokio::time::sleep(lasting).await;
                nodes.with_osd(index, |osd| osd.pause.resume());
                nodes.run().record(format_args!("fault: {} resumed", nodes.name(index)));
            }
            Kind::Isolate => {
                let name = nodes.name(index);
                for other in nodes.names().iter().filter(|other| **other != name) {
                    nodes.network.partition(&name, other);
                }
                nodes.run().record(format_args!("fault: {name} cut off from every node"));
                tokio::time::sleep(lasting).await;
                heal_network(nodes);
            }
            Kind::CutOneWay => {
                let name = nodes.name(index);
                let others: Vec<String> = if rng.gen_bool(0.5) {
                    nodes.names().iter().filter(|other| **other != name).cloned().collect()
                } else {
                    vec![nodes.name((index + rng.gen_range(1..nodes.count())) % nodes.count())]
                };
                let outgoing = rng.gen_bool(0.5);
                for other in &others {
                    if outgoing {
                        nodes.network.cut(&name, other);
                    } else {
                        nodes.network.cut(other, &name);
                    }
                }
                let way = if outgoing { "from" } else { "to" };
                nodes.run().record(format_args!("fault: one way cut {way} {name}, with {}", others.join(",")));
                tokio::time::sleep(lasting).await;
                heal_network(nodes);
            }
            Kind::Reset => {
                let name = nodes.name(index);
                // The store is reached by calls, not streams (`node_store.rs`): a cut models it.
                let peers: Vec<String> = nodes
                    .names()
                    .iter()
                    .filter(|other| **other != name && *other != crate::node_store::STORE_NODE)
                    .cloned()
                    .collect();
                let peer = &peers[rng.gen_range(0..peers.len())];
                nodes.network.reset(&name, peer);
                nodes.run().record(format_args!("fault: connections between {name} and {peer} reset"));
            }
            Kind::KillMon => {
                let mon = leading_mon(nodes).await;
                nodes.kill_mon(mon).await;
                await_takeover(nodes, mon, lasting).await;
                nodes.restart_mon(mon);
            }
            Kind::PauseMon => {
                let mon = leading_mon(nodes).await;
                nodes.pause_mon(mon, true);
                await_takeover(nodes, mon, lasting).await;
                nodes.pause_mon(mon, false);
            }
            Kind::IsolateMon => {
                let mon = leading_mon(nodes).await;
                let name = nodes.mon_node(mon);
                for other in nodes.names().iter().filter(|other| *other != name) {
                    nodes.network.partition(name, other);
                }
                nodes.run().record(format_args!("fault: {name} cut off from every node"));
                await_takeover(nodes, mon, lasting).await;
                heal_network(nodes);
            }
            Kind::KillMember | Kind::SilenceMember => {
                let members = nodes.store_faults.members().expect("a store of several members");
                let member = match members.leader() {
                    Some(leader) if rng.gen_bool(0.5) => leader,
                    _ => rng.gen_range(0..MEMBERS),
                };
                let silent = matches!(kind, Kind::SilenceMember);
                if silent {
                    members.silence(member);
                    let how = if rng.gen_bool(0.5) { "stopped" } else { "cut off" };
                    nodes.run().record(format_args!("fault: store member {member} {how}"));
                } else {
                    members.kill(member);
                    nodes.run().record(format_args!("fault: store member {member} killed"));
                }
                tokio::time::sleep(lasting).await;
                members.revive(member);
                nodes.run().record(format_args!("fault: store member {member} back"));
            }
            Kind::SplitStore => {
                let members = nodes.store_faults.members().expect("a store of several members");
                members.set_split(true);
                nodes.run().record("fault: the store's members cut off from one another");
                tokio::time::sleep(lasting).await;
                members.set_split(false);
                nodes.run().record("fault: the store's members together again");
            }
            Kind::LoseQuorum => {
                let members = nodes.store_faults.members().expect("a store of several members");
                let spared = rng.gen_range(0..MEMBERS);
                for member in (0..MEMBERS).filter(|&member| member != spared) {
                    members.kill(member);
                }
                nodes.run().record(format_args!("fault: every store member but {spared} killed"));
                tokio::time::sleep(lasting).await;
                members.heal();
                nodes.run().record("fault: every store member back");
            }
            Kind::CutFromStore => {
                let name = nodes.name(index);
                nodes.network.partition(&name, crate::node_store::STORE_NODE);
                nodes.run().record(format_args!("fault: {name} cut off from the store"));
                tokio::time::sleep(lasting).await;
                heal_network(nodes);
            }
            Kind::SlowDisk => {
                let factor = rng.gen_range(10..300);
                nodes.with_osd(index, |osd| osd.disk.set_slowdown(factor));
                nodes.run().record(format_args!("fault: {} disk {factor}x slower", nodes.name(index)));
                tokio::time::sleep(lasting).await;
                nodes.with_osd(index, |osd| osd.disk.set_slowdown(1));
            }
            Kind::FailWrites => {
                let (writes, flushes) = if rng.gen_bool(0.5) { (1, 0) } else { (0, 1) };
                nodes.with_osd(index, |osd| {
                    osd.disk_failing();
                    osd.disk.with_disk(|disk| {
                        disk.fail_next_writes(writes);
                        disk.fail_next_flushes(flushes);
                    });
                });
                nodes.run().record(format_args!("fault: {} disk fails its next write or flush", nodes.name(index)));
                tokio::time::sleep(lasting).await;
                clear_disk_errors(nodes, index);
                nodes.restart(index);
            }
            Kind::FailReads => {
                let count = rng.gen_range(1..4);
                nodes.with_osd(index, |osd| {
                    // A read the engine needs for itself (a metadata page) poisons it too.
                    osd.disk_failing();
                    osd.disk.with_disk(|disk| disk.fail_next_reads(count));
                });
                nodes.run().record(format_args!("fault: {} disk fails its next {count} reads", nodes.name(index)));
                tokio::time::sleep(lasting).await;
                clear_disk_errors(nodes, index);
                nodes.restart(index);
            }
            Kind::FlipBits if min_size < 2 => {}
            Kind::FlipBits => {
                let count = rng.gen_range(1..4);
                let flipped = nodes.with_osd(rotting, |osd| osd.disk.with_disk(|disk| rot(disk, count, &mut rng)));
                nodes.rotted.replace(Some(nodes.name(rotting)));
                nodes
                    .run()
                    .record(format_args!("fault: bits flipped in {}'s data pages {flipped:?}", nodes.name(rotting)));
            }
            Kind::StoreStall => {
                let until = Instant::now() + lasting / 2;
                nodes.store_faults.stall_until(until);
                nodes.run().record(format_args!("fault: the store stalls for {:?}", lasting / 2));
                tokio::time::sleep_until(until).await;
            }
            Kind::WatchLag => {
                let name = if rng.gen_bool(0.2) { MON_NODE.to_string() } else { nodes.name(index) };
                let lag = Duration::from_millis(rng.gen_range(50..3_000));
                nodes.store_faults.set_watch_lag(&name, lag);
                nodes.run().record(format_args!("fault: watch events reach {name} {lag:?} late"));
                tokio::time::sleep(lasting).await;
                nodes.store_faults.set_watch_lag(&name, Duration::ZERO);
            }
            Kind::ClockSkew => {
                let name = if rng.gen_bool(0.2) { MON_NODE.to_string() } else { nodes.name(index) };
                let skew = Skew {
                    offset_ms: rng.gen_range(-600_000..600_000),
                    drift_ppm: rng.gen_range(-100_000..100_000),
                    since: Instant::now(),
                };
                clock::set_skew(&name, skew);
                let (offset, drift) = (skew.offset_ms, skew.drift_ppm);
                nodes.run().record(format_args!("fault: {name}'s clock off by {offset} ms, drifting {drift} ppm"));
            }
        }
    }
}

/// Flips one bit in each of `count` data pages that hold written data, as the disk's metadata
/// area lists them (written-back objects); returns the pages' offsets.
fn rot(disk: &mut SimDisk, count: usize, rng: &mut SmallRng) -> Vec<u64> {
    let page = PAGE_SIZE_BYTES as usize;
    let geometry = Superblock::decode(&disk.read_written(0, page)).expect("a formatted disk").geometry;
    let pages_per_object = geometry.pages_per_object();
    let mut written = Vec::new();
    for block in 0..geometry.block_count {
        let (meta_page, at) = geometry.meta_location(block);
        let slot_bytes = geometry.meta_entry_size_bytes as usize;
        let meta = disk.read_written(geometry.meta_page_offset_bytes(meta_page) + at as u64, slot_bytes);
        let Ok(Some(entry)) = MetaEntry::decode(&meta, pages_per_object) else { continue };
        for index in (0..pages_per_object).filter(|index| entry.page_bitmap & (1 << index) != 0) {
            written.push(geometry.block_offset_bytes(block) + u64::from(index) * PAGE_SIZE_BYTES as u64);
        }
    }
    let mut flipped = Vec::new();
    for _ in 0..count.min(written.len()) {
        let offset = written.swap_remove(rng.gen_range(0..written.len()));
        disk.flip_bit(offset + rng.gen_range(0..page as u64), rng.gen_range(0..8));
        flipped.push(offset);
    }
    flipped
}

/// The mon that leads, as the store says (the first if none does).
async fn leading_mon(nodes: &Nodes) -> usize {
    if nodes.mon_count() == 1 {
        return 0;
    }
    nodes.leading_mon().await.unwrap_or(0)
}

/// Waits out `lasting` of a fault on mon `mon`; with another mon, that one must lead within
/// [`TAKEOVER_MAX`] of the fault if it lasts that long.
async fn await_takeover(nodes: &Nodes, mon: usize, lasting: Duration) {
    let until = Instant::now() + lasting;
    if nodes.mon_count() > 1 {
        match tokio::time::timeout_at(until, takeover(nodes, mon)).await {
            Ok(Ok(after)) => nodes.run().record(format_args!("the other mon leads {after:?} after the fault")),
            Ok(Err(violation)) => nodes.run().violation(violation),
            Err(_) => {}
        }
    }
    tokio::time::sleep_until(until).await;
}

/// How long after now another mon than `mon` leads, within [`TAKEOVER_MAX`].
pub(crate) async fn takeover(nodes: &Nodes, mon: usize) -> Result<Duration, String> {
    let started = Instant::now();
    loop {
        if nodes.leading_mon().await.is_some_and(|leader| leader != mon) {
            return Ok(started.elapsed());
        }
        if started.elapsed() > TAKEOVER_MAX {
            let node = nodes.mon_node(mon);
            return Err(format!("no other mon led within {TAKEOVER_MAX:?} of a fault on {node}, the leader"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn heal_network(nodes: &Nodes) {
    nodes.network.heal_all();
    nodes.run().record("fault: partitions healed");
}

fn clear_disk_errors(nodes: &Nodes, index: usize) {
    nodes.with_osd(index, |osd| {
        osd.disk.with_disk(|disk| {
            disk.fail_next_reads(0);
            disk.fail_next_writes(0);
            disk.fail_next_flushes(0);
        });
        osd.disk_repaired();
    });
}

/// Ends every fault that may still hold (the injector was dropped in the middle of one) and
/// restarts every OSD that is down: the faults are over.
pub(crate) fn heal(nodes: &Nodes) {
    heal_network(nodes);
    nodes.store_faults.clear();
    for mon in 0..nodes.mon_count() {
        nodes.pause_mon(mon, false);
        nodes.restart_mon(mon);
    }
    for index in (0..nodes.count()).filter(|&index| !nodes.is_retired(index)) {
        nodes.with_osd(index, |osd| {
            osd.pause.resume();
            osd.disk.set_slowdown(1);
        });
        clear_disk_errors(nodes, index);
        if !nodes.is_running(index) {
            nodes.restart(index);
        }
    }
}
