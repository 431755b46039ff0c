//! Seeds with drawn faults whose clients reach their volumes through the NBD gateway
//! (`SimOptions::nbd`): the real `nbd::Server` over the client library on a node of its own,
//! every NBD reply checked against the history, each seed twice. `BASALT_SIM_NBD_SEEDS=N`
//! runs N seeds (default 100); a failure replays with `BASALT_SIM_NBD=1` and `tests/seeds.rs`.

use sim_cluster::{run_twice, SimOptions};

#[test]
fn seeds_through_the_nbd_gateway_pass_and_replay_alike() {
    let seeds = std::env::var("BASALT_SIM_NBD_SEEDS")
        .map_or(100, |value| value.parse().unwrap_or_else(|_| panic!("BASALT_SIM_NBD_SEEDS={value} is not a number")));
    let options = SimOptions { nbd: true, ..SimOptions::default() };
    let mut ops = 0;
    for seed in 1..=seeds {
        match run_twice(seed, &options) {
            Ok(outcome) => ops += outcome.ops,
            Err(failure) => panic!("through the gateway: {failure}"),
        }
    }
    // The runs did work (the count includes the final reads, which go through the library).
    assert!(ops >= seeds * 3 * 200, "{ops} ops in {seeds} seeds");
}
