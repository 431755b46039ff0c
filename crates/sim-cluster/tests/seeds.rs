//! Simulated runs of the whole cluster, each seed twice: every check of `sim-cluster` must
//! pass, and both runs must leave the same trace.
//!
//! `BASALT_SIM_SEEDS=N` runs N seeds (default 500) from `BASALT_SIM_FIRST` (default 1);
//! `BASALT_SIM_SEED=S` runs seed S alone, and `BASALT_SIM_TRACE=1` prints its trace.
//! `BASALT_SIM_PLANT=NAME` plants a known bug (`osd::planted::PlantedBug::ALL` names them), to
//! replay what a mutation check found.

use std::time::Instant;

use osd::planted::PlantedBug;
use sim_cluster::{replay_command, run, SimOptions};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|value| value.parse().unwrap_or_else(|_| panic!("{name}={value} is not a number")))
}

#[test]
fn seeds_pass_and_replay_alike() {
    let seeds: Vec<u64> = match env_u64("BASALT_SIM_SEED") {
        Some(seed) => vec![seed],
        None => {
            let first = env_u64("BASALT_SIM_FIRST").unwrap_or(1);
            (first..first + env_u64("BASALT_SIM_SEEDS").unwrap_or(500)).collect()
        }
    };
    let print_trace = std::env::var_os("BASALT_SIM_TRACE").is_some();
    let planted = std::env::var("BASALT_SIM_PLANT").ok().map(|name| {
        PlantedBug::from_name(&name).unwrap_or_else(|| {
            let known: Vec<&str> = PlantedBug::ALL.iter().map(|(_, name)| *name).collect();
            panic!("BASALT_SIM_PLANT={name}: the planted bugs are {}", known.join(", "))
        })
    });
    let options = SimOptions { planted, ..SimOptions::default() };
    let started = Instant::now();
    let mut simulated = std::time::Duration::ZERO;
    for &seed in &seeds {
        let first = run(seed, &options);
        if print_trace {
            for line in first.trace.lines() {
                println!("{line}");
            }
        }
        if !first.passed() {
            for line in first.trace.tail(60) {
                eprintln!("{line}");
            }
            panic!("seed {seed} failed: {:#?}\nreplay: {}", first.violations, replay_command(seed));
        }
        let second = run(seed, &options);
        if first.trace.hash() != second.trace.hash() {
            let (a, b) = (first.trace.lines(), second.trace.lines());
            let at = a.iter().zip(b).position(|(a, b)| a != b).unwrap_or(a.len().min(b.len()));
            let context = |lines: &[String]| lines[at.saturating_sub(10)..(at + 5).min(lines.len())].join("\n");
            panic!(
                "seed {seed} ran differently twice ({} and {} events), from event {at}:\nfirst run:\n{}\nsecond run:\n{}\nreplay: {}",
                a.len(),
                b.len(),
                context(a),
                context(b),
                replay_command(seed)
            );
        }
        simulated += first.simulated;
    }
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "{} seeds, each twice, in {seconds:.1} s: {:.1} seeds/s, {:.1} s simulated per seed",
        seeds.len(),
        seeds.len() as f64 / seconds,
        simulated.as_secs_f64() / seeds.len() as f64
    );
}
