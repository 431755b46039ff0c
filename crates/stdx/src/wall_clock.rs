//! The time of day, as the daemons read it: the system's clock, unless a simulation installed
//! its own on this thread (ADR 0020), so that decisions taken on wall-clock time (an OSD down
//! for `down_out_interval`, a PG due for scrub) follow the simulated clock, per node.
//!
//! Durations and deadlines are not read here: those use tokio's monotonic clock.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

thread_local! {
    static CLOCK: Cell<Option<fn() -> SystemTime>> = const { Cell::new(None) };
}

/// The time of day on this thread's clock.
pub fn now() -> SystemTime {
    CLOCK.with(Cell::get).map_or_else(SystemTime::now, |clock| clock())
}

/// Seconds since the Unix epoch on this thread's clock (0 for a clock before it).
pub fn unix_seconds() -> u64 {
    now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs())
}

/// Milliseconds since the Unix epoch on this thread's clock (0 for a clock before it).
pub fn unix_ms() -> u64 {
    now().duration_since(UNIX_EPOCH).map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

/// Makes `clock` this thread's time of day, until [`uninstall`].
pub fn install(clock: fn() -> SystemTime) {
    CLOCK.with(|installed| installed.set(Some(clock)));
}

/// Puts the system's clock back on this thread.
pub fn uninstall() {
    CLOCK.with(|installed| installed.set(None));
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_installed_clock_is_read_on_its_thread_only() {
        fn fixed() -> SystemTime {
            UNIX_EPOCH + Duration::from_secs(1_000)
        }
        install(fixed);
        assert_eq!(unix_seconds(), 1_000);
        let elsewhere = std::thread::spawn(unix_seconds).join().expect("thread");
        assert!(elsewhere > 1_700_000_000, "another thread reads the system's clock");
        uninstall();
        assert!(unix_seconds() > 1_700_000_000);
    }
}
