//! The simulated time of day: a fixed epoch plus the simulated time since the run began, so that
//! decisions taken on wall-clock time (`down_out_interval`, the scrub schedule) are the same in
//! every run of a seed.

use std::cell::Cell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// The time of day a run starts at: 2026-01-01 00:00:00 UTC.
const EPOCH_UNIX_S: u64 = 1_767_225_600;

thread_local! {
    static STARTED: Cell<Option<Instant>> = const { Cell::new(None) };
}

fn now() -> SystemTime {
    let since = STARTED.with(Cell::get).map_or(Duration::ZERO, |started| started.elapsed());
    UNIX_EPOCH + Duration::from_secs(EPOCH_UNIX_S) + since
}

/// Makes the simulated clock this thread's time of day; call inside the run's runtime.
pub(crate) fn install() {
    STARTED.with(|started| started.set(Some(Instant::now())));
    stdx::wall_clock::install(now);
}

pub(crate) fn uninstall() {
    STARTED.with(|started| started.set(None));
    stdx::wall_clock::uninstall();
}
