//! Whole-cluster simulation (ADR 0020): the real OSD, mon and client code on one thread, on a
//! seeded current-thread tokio runtime whose clock is paused (time moves only when every task
//! waits, straight to the next timer), over Basalt's own seams: each OSD's engine on a
//! `sim::TimedDisk`, every connection on a `net::sim::SimNet`, the metadata store in memory
//! (`EmbeddedMetaStore::in_memory`), and the time of day from the simulated clock
//! (`stdx::wall_clock`). Nothing else is simulated: the daemons are the ones `basalt` runs.
//!
//! [`run`] builds a cluster from a seed, drives a workload of clients writing, reading, trimming
//! and zeroing 4 KiB blocks with contents unique to each write, and checks every reply against
//! the history of what was written ([`history`]). Each run records a trace (client ops, every
//! commit of the metadata store, simulated times) and its hash: the same seed must give the same
//! hash, which the tests check by running each seed twice.
//!
//! - `cluster.rs`: building the nodes and the pool.
//! - `workload.rs`: the clients.
//! - `gateway.rs`, `nbd_client.rs`: the NBD gateway as a node, and the clients' NBD connections
//!   to it (`SimOptions::nbd`).
//! - `faults.rs`: the faults drawn while the clients run (kills, pauses, cuts, disk faults,
//!   store stalls, watch lag, clock skew), one at a time.
//! - `node_store.rs`: the metadata store as each node reaches it, through the network's cuts;
//!   `store_members.rs`: a store of three members, their faults and elections.
//! - `scenarios.rs`: the real-process failure tests' scripts, on the simulated cluster;
//!   `every_copy_rots.rs`: one past what the pool survives; `drain.rs`: an OSD drained,
//!   removed and replaced.
//! - `membership.rs`, `scrubs.rs`: an operator's membership changes and scrubs while the
//!   clients run.
//! - `settle.rs`: every PG clean on its target set within a bound once the faults stop.
//! - `replicas.rs`: then every copy of every object identical, before and after a scrub;
//!   `images.rs`: and identical in the disk images, opened with the engine, not asked of the OSDs,
//!   which hold what each OSD lists (`listings.rs`).
//! - `control_plane.rs`: the control plane's faults in turn, on two mons and three store
//!   members.
//! - `pause.rs`: a node paused as SIGSTOP pauses a process.
//! - `history.rs`: what each block may read as, and the violations.
//! - `commits.rs`: the invariants of the metadata store's commits (epochs, PG histories).
//! - `trace.rs`: the trace and its hash.
//! - `down_reports.rs`: clients' and OSDs' reports of an OSD gone, to the mon's handler.
//! - `clock.rs`: the simulated time of day.
//! - `log.rs`: the daemons' log in the trace.

#[cfg(not(tokio_unstable))]
compile_error!("the simulation seeds tokio's RNG, which needs `--cfg tokio_unstable` (set in .cargo/config.toml)");

mod clock;
mod cluster;
mod commits;
mod control_plane;
mod down_reports;
mod drain;
mod drives_fail_reads;
mod every_copy_rots;
mod faults;
mod gateway;
mod history;
mod images;
mod listings;
pub mod log;
mod membership;
mod nbd_client;
mod node_store;
mod pause;
pub mod regressions;
mod replicas;
mod scenarios;
mod scrubs;
mod settle;
mod snapshot_races;
mod snapshots;
mod store_members;
mod trace;
mod workload;

use std::time::Duration;

pub use scenarios::Scenario;
pub use trace::{print_live, Trace};

/// The shape of a simulated run.
#[derive(Debug, Clone)]
pub struct SimOptions {
    pub osds: usize,
    /// Clients run at once, each one op at a time.
    pub clients: usize,
    pub volumes: usize,
    /// Ops each client makes.
    pub ops_per_client: usize,
    /// Blocks of each volume the clients touch (few, so that writes meet).
    pub blocks_per_volume: u64,
    /// Pools, of the same copies and `min_size`, 8 PGs in the first, 4 in the second; volume
    /// `v` is in pool `v % pools`.
    pub pools: usize,
    /// The pool's copies and how many must hold a write before it is acknowledged.
    pub replicas: u8,
    pub min_size: u8,
    /// The OSDs' lease.
    pub osd_lease: Duration,
    /// Whether faults drawn from the seed hit the cluster while the clients run (`faults.rs`).
    pub faults: bool,
    /// A scripted failure instead (`scenarios.rs`).
    pub scenario: Option<Scenario>,
    /// A known bug planted in the OSDs, for the mutation checks.
    pub planted: Option<osd::planted::PlantedBug>,
    /// Whether the clients reach their volumes through the NBD gateway (`gateway.rs`) instead
    /// of the client library (the final reads and the checks use the library either way).
    pub nbd: bool,
    /// Whether each seed draws the number of OSDs, the pool's copies, its `min_size` and the
    /// down-out interval instead of taking `osds`, `replicas`, `min_size` and
    /// `down_out_interval` as given.
    pub drawn_geometry: bool,
    /// The cluster's `down_out_interval` (`None`: its default, 10 minutes, which no run
    /// reaches): an OSD down this long is marked out, its PGs move to other OSDs (backfill)
    /// and come back when it returns (stray removal).
    pub down_out_interval: Option<Duration>,
    /// Whether OSDs are marked out and in, and reweighted, and scrubs requested, while the
    /// clients run (`membership.rs`, `scrubs.rs`); on with a drawn geometry.
    pub membership_changes: bool,
    /// Whether each seed also draws the object and journal sizes and the workload's shape
    /// (`pipeline_max`, `whole_object_ops`) instead of taking them as given. Seeds found before
    /// these were drawn replay with it off (`regressions.rs`).
    pub drawn_workload: bool,
    /// The OSDs' object size and journal size (at least 16 objects and 16 pages).
    pub object_bytes: u32,
    pub journal_bytes: u64,
    /// The most ops a client has in flight at once: a batch of 1 to this many, on any blocks
    /// (the same object's included), all sent before any is awaited, then a flush.
    pub pipeline_max: usize,
    /// Whether the clients also write, zero and trim whole objects (a whole-object write
    /// replaces every member's copy; a whole-object trim or zeroing deletes the object).
    pub whole_object_ops: bool,
    /// Whether a second stream of faults runs over the first (`faults::overlap`). Seeds found
    /// before it ran replay with it off (`regressions.rs`).
    pub overlapping_faults: bool,
    /// Whether each seed with OSDs to spare may start one of them only once the clients run
    /// (`late_join`), as an operator adds a drive to a serving cluster. Seeds found before it
    /// replay with it off.
    pub osd_joins: bool,
    /// The last OSD starts a while after the clients (drawn when `osd_joins`): placement moves
    /// PGs onto it, which backfill while the clients write.
    pub late_join: bool,
    /// Whether snapshots, clones and rollbacks are taken while the clients run
    /// (`snapshots.rs`). Seeds found before they existed replay with it off.
    pub snapshots: bool,
    /// Whether the control plane is two mons and a store of three members, whose faults are
    /// drawn too (`faults.rs`, `store_members.rs`). Seeds found before it replay with it off.
    pub control_plane: bool,
    /// Whether clones are removed to the trash, then restored or purged, or left to expire
    /// (`snapshots.rs`). Seeds found before it replay with it off.
    pub trash: bool,
}

impl SimOptions {
    /// These options with the geometry `seed` draws when `drawn_geometry` is set: 3 to 6
    /// OSDs (each on a host of its own), 2 or 3 copies, and a `min_size` below the copies, so
    /// that the pool keeps serving through any one fault. With more OSDs than copies, PGs have
    /// different members and OSDs outside each PG, and a down-out interval of 2 to 10 s. One
    /// pool or two (the same PG numbers in each, other objects).
    pub fn for_seed(&self, seed: u64) -> SimOptions {
        if !self.drawn_geometry {
            return self.clone();
        }
        use rand::rngs::SmallRng;
        use rand::{Rng, SeedableRng};
        let mut rng = SmallRng::seed_from_u64(cluster::derive(seed, 3));
        let osds = rng.gen_range(3..=6);
        let replicas = rng.gen_range(2..=3u8);
        let min_size = rng.gen_range(1..replicas);
        // With OSDs to spare, an OSD down a few seconds is often marked out.
        let down_out_interval = (osds > usize::from(replicas)).then(|| Duration::from_secs(rng.gen_range(2..=10)));
        // Drawn apart, so the draws above stay what they were.
        let pools = SmallRng::seed_from_u64(cluster::derive(seed, 6)).gen_range(1..=2);
        let drawn =
            SimOptions { osds, replicas, min_size, pools, down_out_interval, membership_changes: true, ..self.clone() };
        if !self.drawn_workload {
            return drawn;
        }
        // 2, 4 or 8 blocks an object (the volumes' 48 blocks are a whole number of objects);
        // a journal of 16 objects and 16 pages (the engine's least) to 64 objects, where the
        // smallest makes write-back run all the time.
        let mut rng = SmallRng::seed_from_u64(cluster::derive(seed, 7));
        let object_bytes = [8 << 10, 16 << 10, 32 << 10][rng.gen_range(0..3)];
        let journal_bytes = u64::from(object_bytes) * [16, 32, 64][rng.gen_range(0..3)] + (16 << 12);
        let pipeline_max = [1, 2, 4][rng.gen_range(0..3)];
        // Drawn apart too: with OSDs to spare, one of them may join late.
        let late_join = self.osd_joins
            && osds > usize::from(replicas)
            && SmallRng::seed_from_u64(cluster::derive(seed, 9)).gen_bool(0.5);
        SimOptions { object_bytes, journal_bytes, pipeline_max, whole_object_ops: true, late_join, ..drawn }
    }
}

impl Default for SimOptions {
    fn default() -> SimOptions {
        SimOptions {
            osds: 3,
            clients: 3,
            volumes: 2,
            pools: 1,
            ops_per_client: 200,
            blocks_per_volume: 48,
            replicas: 3,
            min_size: 2,
            osd_lease: Duration::from_secs(3),
            faults: true,
            scenario: None,
            planted: None,
            nbd: false,
            drawn_geometry: false,
            down_out_interval: None,
            membership_changes: false,
            drawn_workload: false,
            object_bytes: 16 << 10,
            journal_bytes: 512 << 10,
            pipeline_max: 1,
            whole_object_ops: false,
            overlapping_faults: false,
            osd_joins: false,
            late_join: false,
            snapshots: false,
            control_plane: false,
            trash: false,
        }
    }
}

/// What a run found.
#[derive(Debug)]
pub struct Outcome {
    pub seed: u64,
    /// Reads and writes that broke the rules of `history.rs`, and anything else that must not
    /// happen (a client error with no fault to explain it).
    pub violations: Vec<String>,
    pub trace: Trace,
    /// Simulated time the run took.
    pub simulated: Duration,
    /// Client ops completed.
    pub ops: u64,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Runs one seed on this thread (which must not be inside a tokio runtime).
pub fn run(seed: u64, options: &SimOptions) -> Outcome {
    stdx::hash_map::fix_on_this_thread(true);
    osd::planted::plant(options.planted);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()))
        .build()
        .expect("a current-thread runtime");
    let local = tokio::task::LocalSet::new();
    let outcome = local.block_on(&runtime, cluster::simulate(seed, options.clone()));
    // Tasks the runtime still holds (watchers, the mon's) go with it, before the next run.
    drop(local);
    drop(runtime);
    clock::uninstall();
    net::sim::SimNet::uninstall();
    stdx::hash_map::fix_on_this_thread(false);
    osd::planted::plant(None);
    outcome
}

/// The command that replays `seed` of `options` (its scenario, its planted bug, the gateway) with its trace
/// and the daemons' log printed.
pub fn replay_command(seed: u64, options: &SimOptions) -> String {
    replay_with_trace(seed, options, "1")
}

/// [`replay_command`] printing each trace line as it is recorded, for a run that never ends.
pub fn live_replay_command(seed: u64, options: &SimOptions) -> String {
    replay_with_trace(seed, options, "live")
}

fn replay_with_trace(seed: u64, options: &SimOptions, trace: &str) -> String {
    let mut command = format!("BASALT_SIM_SEED={seed} BASALT_SIM_TRACE={trace} BASALT_SIM_LOG=info");
    if let Some(scenario) = options.scenario {
        command.push_str(&format!(" BASALT_SIM_SCENARIO={}", scenario.name()));
    }
    if let Some(bug) = options.planted {
        command.push_str(&format!(" BASALT_SIM_PLANT={}", bug.name()));
    }
    if options.nbd {
        command.push_str(" BASALT_SIM_NBD=1");
    }
    if options.trash {
        command.push_str(" BASALT_SIM_GEOMETRY=trash");
    } else if options.control_plane {
        command.push_str(" BASALT_SIM_GEOMETRY=control");
    } else if options.snapshots {
        command.push_str(" BASALT_SIM_GEOMETRY=snapshots");
    } else if options.osd_joins {
        command.push_str(" BASALT_SIM_GEOMETRY=joining");
    } else if options.overlapping_faults {
        command.push_str(" BASALT_SIM_GEOMETRY=overlapping");
    } else if options.drawn_workload {
        command.push_str(" BASALT_SIM_GEOMETRY=wide");
    } else if options.drawn_geometry {
        command.push_str(" BASALT_SIM_GEOMETRY=drawn");
    } else if options.scenario.is_none() {
        command.push_str(" BASALT_SIM_GEOMETRY=fixed");
    }
    command + " cargo test -p sim-cluster --test seeds"
}

/// Runs `seed` once: its violations and the tail of its trace if it broke a check.
pub fn run_once(seed: u64, options: &SimOptions) -> Result<Outcome, String> {
    let outcome = run(seed, options);
    if !outcome.passed() {
        return Err(format!(
            "seed {seed} failed: {:#?}\n{}\nreplay: {}",
            outcome.violations,
            outcome.trace.tail(60).join("\n"),
            replay_command(seed, options)
        ));
    }
    Ok(outcome)
}

/// Runs `seed` twice: both runs must pass and leave the same trace. The error names the
/// violations with the trace's last lines, or where the two runs parted, and the replay command.
pub fn run_twice(seed: u64, options: &SimOptions) -> Result<Outcome, String> {
    let first = run_once(seed, options)?;
    let second = run(seed, options);
    if first.trace.hash() != second.trace.hash() {
        let (a, b) = (first.trace.lines(), second.trace.lines());
        let at = a.iter().zip(b).position(|(a, b)| a != b).unwrap_or(a.len().min(b.len()));
        let context = |lines: &[String]| lines[at.saturating_sub(10)..(at + 5).min(lines.len())].join("\n");
        return Err(format!(
            "seed {seed} ran differently twice ({} and {} lines), from line {at}:\nfirst run:\n{}\nsecond run:\n{}\nreplay: {}",
            a.len(),
            b.len(),
            context(a),
            context(b),
            replay_command(seed, options)
        ));
    }
    Ok(first)
}
