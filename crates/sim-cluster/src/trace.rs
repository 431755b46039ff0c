//! A run's trace: one line per event (client ops, commits of the metadata store), stamped with
//! the simulated time, and a hash of all of them. Two runs of a seed must hash alike; the lines
//! are what a failing seed prints.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Whether every line is also printed as it is recorded: a run that never ends shows where it
/// went round.
static LIVE: AtomicBool = AtomicBool::new(false);

/// Prints every line of every run from now on as it is recorded (to stderr).
pub fn print_live(live: bool) {
    LIVE.store(live, Ordering::Relaxed);
}

/// The events of a run.
#[derive(Debug, Default)]
pub struct Trace {
    lines: Vec<String>,
    hash: u64,
}

/// FNV-1a, 64 bits: stable across builds and platforms, unlike the standard library's hasher.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

pub(crate) fn fnv1a(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |hash, &byte| (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME))
}

impl Trace {
    pub(crate) fn new() -> Trace {
        Trace { lines: Vec::new(), hash: FNV_OFFSET }
    }

    /// Adds `text` at simulated time `at` to the lines only: the daemons' log, which the
    /// hash leaves out so that a run hashes alike whether it is logged or not.
    pub(crate) fn note(&mut self, at: Duration, text: &str) {
        self.push(format!("{:>10.3} ms  | {text}", at.as_secs_f64() * 1e3));
    }

    /// Records `event` at simulated time `at`.
    pub(crate) fn record(&mut self, at: Duration, event: impl std::fmt::Display) {
        let mut line = String::new();
        let _ = write!(line, "{:>10.3} ms  {event}", at.as_secs_f64() * 1e3);
        self.hash = fnv1a(self.hash, line.as_bytes());
        self.hash = fnv1a(self.hash, b"\n");
        self.push(line);
    }

    fn push(&mut self, line: String) {
        if LIVE.load(Ordering::Relaxed) {
            eprintln!("{line}");
        }
        self.lines.push(line);
    }

    pub fn hash(&self) -> u64 {
        self.hash
    }

    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// The last `count` lines.
    pub fn tail(&self, count: usize) -> &[String] {
        &self.lines[self.lines.len().saturating_sub(count)..]
    }
}
