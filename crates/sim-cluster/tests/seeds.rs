//! Simulated runs of the whole cluster with faults drawn from each seed, each seed twice: every
//! check of `sim-cluster` must pass, and both runs must leave the same trace.
//!
//! `BASALT_SIM_SEEDS=N` runs N seeds (default 500) from `BASALT_SIM_FIRST` (default 1);
//! `BASALT_SIM_SEED=S` runs seed S alone, and `BASALT_SIM_TRACE=1` prints its trace
//! (`BASALT_SIM_TRACE=live`: each line as it is recorded, for a run that does not end);
//! `BASALT_SIM_LOG=info` (or `debug`, `warn`...) adds the daemons' log to the trace.
//! `BASALT_SIM_SCENARIO=NAME` plays a scripted scenario instead of drawn faults
//! (`sim_cluster::Scenario::ALL`), and `BASALT_SIM_PLANT=NAME` plants a known bug
//! (`osd::planted::PlantedBug::ALL`), to replay what `scenarios.rs` or `mutations.rs` found.
//! `BASALT_SIM_NBD=1` sends the clients through the NBD gateway (`gateway.rs` runs those seeds).
//! Each seed draws its geometry (3 to 6 OSDs, 2 or 3 copies, `min_size` below them) and its
//! workload (object and journal sizes, pipelined clients, whole-object ops), with two streams of
//! faults at once and, with OSDs to spare, one OSD that may join late, with snapshots taken and
//! clones removed to the trash, on a control plane of two mons and a store of three members with
//! their own faults, unless `BASALT_SIM_GEOMETRY` says otherwise: `control` (no trash, how the
//! seeds of `CONTROL_REGRESSIONS` were found), `snapshots` (one mon, a store of one member, how the
//! seeds of `SNAPSHOT_REGRESSIONS` were found), `joining` (no snapshots either), `overlapping` (no late join, how the seeds of
//! `OVERLAPPING_REGRESSIONS` were found), `wide` (one stream of faults,
//! how the seeds of `WIDE_REGRESSIONS` were found), `drawn` (the geometry only: those of
//! `DRAWN_REGRESSIONS`) or `fixed` (3 OSDs, 3 copies, `min_size` 2, one op at a time).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use osd::planted::PlantedBug;
use sim_cluster::regressions;
use sim_cluster::{live_replay_command, run, run_once, run_twice, Scenario, SimOptions};

/// How long one seed may take in wall time before the run is taken for a livelock: a task that
/// never waits keeps the paused clock from moving, and the run would never end.
const SEED_WALL_LIMIT: Duration = Duration::from_secs(120);

/// Ends the process with the seed's replay command if a seed runs past [`SEED_WALL_LIMIT`].
struct Watchdog {
    epoch: Instant,
    /// The seed running (0: none) and when it started, in ms since `epoch`.
    current: Arc<(AtomicU64, AtomicU64)>,
}

impl Watchdog {
    fn start(options: &SimOptions) -> Watchdog {
        let watchdog = Watchdog { epoch: Instant::now(), current: Arc::new((AtomicU64::new(0), AtomicU64::new(0))) };
        let options = options.clone();
        let (epoch, current) = (watchdog.epoch, watchdog.current.clone());
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_secs(5));
            let seed = current.0.load(Ordering::Relaxed);
            let started = Duration::from_millis(current.1.load(Ordering::Relaxed));
            let running = epoch.elapsed().saturating_sub(started);
            if seed != 0 && running > SEED_WALL_LIMIT {
                eprintln!(
                    "seed {seed} has run for {running:?} of wall time: a task that never waits keeps the simulated clock from moving (a livelock)\nreplay: {}",
                    live_replay_command(seed, &options)
                );
                std::process::exit(101);
            }
        });
        watchdog
    }

    /// `seed` starts now.
    fn watch(&self, seed: u64) {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.current.1.store(now, Ordering::Relaxed);
        self.current.0.store(seed, Ordering::Relaxed);
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|value| value.parse().unwrap_or_else(|_| panic!("{name}={value} is not a number")))
}

fn options_from_env() -> SimOptions {
    if let Ok(level) = std::env::var("BASALT_SIM_LOG") {
        let level: tracing::Level = level.parse().unwrap_or_else(|_| panic!("BASALT_SIM_LOG={level}: not a log level"));
        sim_cluster::log::install(level);
    }
    let scenario = std::env::var("BASALT_SIM_SCENARIO").ok().map(|name| {
        Scenario::from_name(&name).unwrap_or_else(|| {
            let known: Vec<&str> = Scenario::ALL.iter().map(|scenario| scenario.name()).collect();
            panic!("BASALT_SIM_SCENARIO={name}: the scenarios are {}", known.join(", "))
        })
    });
    let planted = std::env::var("BASALT_SIM_PLANT").ok().map(|name| {
        PlantedBug::from_name(&name).unwrap_or_else(|| {
            let known: Vec<&str> = PlantedBug::ALL.iter().map(|(_, name)| *name).collect();
            panic!("BASALT_SIM_PLANT={name}: the planted bugs are {}", known.join(", "))
        })
    });
    let nbd = match std::env::var("BASALT_SIM_NBD").as_deref() {
        Err(_) | Ok("0") => false,
        Ok("1") => true,
        Ok(other) => panic!("BASALT_SIM_NBD={other}: 1 (clients through the NBD gateway) or 0"),
    };
    let drawn = scenario.is_none();
    let stage = match std::env::var("BASALT_SIM_GEOMETRY").as_deref() {
        Err(_) | Ok("trash") => 7,
        Ok("control") => 6,
        Ok("snapshots") => 5,
        Ok("joining") => 4,
        Ok("overlapping") => 3,
        Ok("wide") => 2,
        Ok("drawn") => 1,
        Ok("fixed") => 0,
        Ok(other) => panic!(
            "BASALT_SIM_GEOMETRY={other}: trash (all of control, with clones removed to the trash and restored, purged or \
             left to expire), control (all of snapshots, with two mons and a store of three members, and \
             their faults), snapshots (all of joining, with snapshots, clones and rollbacks), joining \
             (geometry and workload from each seed, two streams of faults, an OSD that may join late), overlapping (no late join), wide (one stream of faults), drawn (the geometry \
             only) or fixed"
        ),
    };
    let options = scenario.map_or_else(SimOptions::default, Scenario::options);
    SimOptions {
        planted,
        nbd,
        drawn_geometry: drawn && stage >= 1,
        drawn_workload: drawn && stage >= 2,
        overlapping_faults: drawn && stage >= 3,
        osd_joins: drawn && stage >= 4,
        snapshots: drawn && stage >= 5,
        control_plane: options.control_plane || (drawn && stage >= 6),
        trash: drawn && stage >= 7,
        ..options
    }
}

#[test]
fn seeds_pass_and_replay_alike() {
    let options = options_from_env();
    let seeds: Vec<u64> = match env_u64("BASALT_SIM_SEED") {
        Some(seed) => vec![seed],
        None => {
            let first = env_u64("BASALT_SIM_FIRST").unwrap_or(1);
            (first..first + env_u64("BASALT_SIM_SEEDS").unwrap_or(500)).collect()
        }
    };
    if std::env::var("BASALT_SIM_TRACE").as_deref() == Ok("live") {
        // Every line as it happens, for a run that does not end.
        sim_cluster::print_live(true);
    } else if std::env::var_os("BASALT_SIM_TRACE").is_some() {
        for line in run(seeds[0], &options).trace.lines() {
            println!("{line}");
        }
    }
    let started = Instant::now();
    let mut simulated = Duration::ZERO;
    // A long campaign may run each seed once: it looks for broken checks, and the seeds of
    // `scripts/test.sh` keep showing that every run of a seed is alike.
    let once = std::env::var_os("BASALT_SIM_ONCE").is_some();
    let watchdog = Watchdog::start(&options);
    for (done, &seed) in seeds.iter().enumerate() {
        watchdog.watch(seed);
        match if once { run_once(seed, &options) } else { run_twice(seed, &options) } {
            Ok(outcome) => simulated += outcome.simulated,
            Err(failure) => panic!("{failure}"),
        }
        if (done + 1) % 1000 == 0 {
            eprintln!("{} seeds passed, to seed {seed}, in {:.0} s", done + 1, started.elapsed().as_secs_f64());
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "{} seeds, each {}, in {seconds:.1} s: {:.1} seeds/s, {:.1} s simulated per seed",
        seeds.len(),
        if once { "once" } else { "twice" },
        seeds.len() as f64 / seconds,
        simulated.as_secs_f64() / seeds.len() as f64
    );
}

#[test]
fn seeds_that_once_failed_pass() {
    let watchdog = Watchdog::start(&SimOptions::default());
    for (seed, found, options) in regressions::with_options() {
        watchdog.watch(seed);
        if let Err(failure) = run_twice(seed, &options) {
            panic!("regression seed {seed} ({found}):\n{failure}");
        }
    }
}
