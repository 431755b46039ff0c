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
//! - `faults.rs`: the faults drawn while the clients run (kills, pauses, cuts, disk faults,
//!   store stalls, watch lag, clock skew), one at a time.
//! - `node_store.rs`: the metadata store as each node reaches it, through the network's cuts.
//! - `settle.rs`: every PG clean on its target set within a bound once the faults stop.
//! - `replicas.rs`: then every copy of every object identical, before and after a scrub.
//! - `pause.rs`: a node paused as SIGSTOP pauses a process.
//! - `history.rs`: what each block may read as, and the violations.
//! - `trace.rs`: the trace and its hash.
//! - `clock.rs`: the simulated time of day.

#[cfg(not(tokio_unstable))]
compile_error!("the simulation seeds tokio's RNG, which needs `--cfg tokio_unstable` (set in .cargo/config.toml)");

mod clock;
mod cluster;
mod faults;
mod history;
mod node_store;
mod pause;
mod replicas;
mod settle;
mod trace;
mod workload;

use std::time::Duration;

pub use trace::Trace;

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
    /// Whether OSDs are killed and restarted while the clients run (`faults.rs`).
    pub faults: bool,
    /// A known bug planted in the OSDs, for the mutation checks.
    pub planted: Option<osd::planted::PlantedBug>,
}

impl Default for SimOptions {
    fn default() -> SimOptions {
        SimOptions {
            osds: 3,
            clients: 3,
            volumes: 2,
            ops_per_client: 200,
            blocks_per_volume: 48,
            faults: true,
            planted: None,
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

/// The command that replays `seed` with its trace printed.
pub fn replay_command(seed: u64) -> String {
    format!("BASALT_SIM_SEED={seed} BASALT_SIM_TRACE=1 cargo test --release -p sim-cluster --test seeds")
}
