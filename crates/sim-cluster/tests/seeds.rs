//! Simulated runs of the whole cluster with faults drawn from each seed, each seed twice: every
//! check of `sim-cluster` must pass, and both runs must leave the same trace.
//!
//! `BASALT_SIM_SEEDS=N` runs N seeds (default 500) from `BASALT_SIM_FIRST` (default 1);
//! `BASALT_SIM_SEED=S` runs seed S alone, and `BASALT_SIM_TRACE=1` prints its trace;
//! `BASALT_SIM_LOG=info` (or `debug`, `warn`...) adds the daemons' log to the trace.
//! `BASALT_SIM_SCENARIO=NAME` plays a scripted scenario instead of drawn faults
//! (`sim_cluster::Scenario::ALL`), and `BASALT_SIM_PLANT=NAME` plants a known bug
//! (`osd::planted::PlantedBug::ALL`), to replay what `scenarios.rs` or `mutations.rs` found.

use std::time::Instant;

use osd::planted::PlantedBug;
use sim_cluster::{run, run_twice, Scenario, SimOptions};

/// Seeds that once failed, kept with what they found.
const REGRESSIONS: [(u64, &str); 3] = [
    (268, "an OSD restarted after its drive failed reaped the requests of the process before it"),
    (315, "a primary whose copy rotted answered a client Corrupt while a member was down"),
    (376, "a primary's drive failed three reads in a row and the client saw the error"),
];

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
    let options = scenario.map_or_else(SimOptions::default, Scenario::options);
    SimOptions { planted, ..options }
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
    if std::env::var_os("BASALT_SIM_TRACE").is_some() {
        for line in run(seeds[0], &options).trace.lines() {
            println!("{line}");
        }
    }
    let started = Instant::now();
    let mut simulated = std::time::Duration::ZERO;
    for (done, &seed) in seeds.iter().enumerate() {
        match run_twice(seed, &options) {
            Ok(outcome) => simulated += outcome.simulated,
            Err(failure) => panic!("{failure}"),
        }
        if (done + 1) % 1000 == 0 {
            eprintln!("{} seeds passed, to seed {seed}, in {:.0} s", done + 1, started.elapsed().as_secs_f64());
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "{} seeds, each twice, in {seconds:.1} s: {:.1} seeds/s, {:.1} s simulated per seed",
        seeds.len(),
        seeds.len() as f64 / seconds,
        simulated.as_secs_f64() / seeds.len() as f64
    );
}

#[test]
fn seeds_that_once_failed_pass() {
    for (seed, found) in REGRESSIONS {
        if let Err(failure) = run_twice(seed, &SimOptions::default()) {
            panic!("regression seed {seed} ({found}):\n{failure}");
        }
    }
}
