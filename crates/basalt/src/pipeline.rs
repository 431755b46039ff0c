//! Keeping a fixed number of engine requests in flight from one thread.
//!
//! The engine is a state machine: requests go in with `submit`, completions come out of `poll`,
//! and `wait` blocks until the disk has news. `run` is that loop for tools that issue a known
//! list of requests (preconditioning, filling) and stop at the first error.

use anyhow::anyhow;
use engine::{Engine, Reply, Request};
use platform::Disk;

/// Submits `make(0..count)` with at most `queue_depth` in flight and hands each successful
/// reply to `done(index, reply)`. Returns the first error, after draining what is in flight.
pub fn run<D: Disk>(
    engine: &mut Engine<D>,
    count: u64,
    queue_depth: usize,
    mut make: impl FnMut(u64) -> Request,
    mut done: impl FnMut(u64, Reply) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    assert!(queue_depth > 0);
    let mut next_index = 0u64;
    let mut in_flight_count = 0usize;
    let mut completions = Vec::new();
    let mut failure: Option<anyhow::Error> = None;
    loop {
        while failure.is_none() && in_flight_count < queue_depth && next_index < count {
            engine.submit(next_index, make(next_index));
            next_index += 1;
            in_flight_count += 1;
        }
        if in_flight_count == 0 {
            break;
        }
        engine.poll(&mut completions);
        if completions.is_empty() {
            engine.wait();
            continue;
        }
        for completion in completions.drain(..) {
            in_flight_count -= 1;
            let result = completion
                .result
                .map_err(|error| anyhow!("request {} failed: {error}", completion.user_data))
                .and_then(|reply| done(completion.user_data, reply));
            if let Err(error) = result {
                failure.get_or_insert(error);
            }
        }
    }
    match failure {
        Some(error) => Err(error),
        None => Ok(()),
    }
}
