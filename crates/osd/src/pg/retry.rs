//! The one retry policy of the PGs' background work (peering an inactive PG, recovery's
//! listings and copies, the clean record, scrub, stray removal): after each failure in a row
//! the pause doubles from [`FIRST`] up to [`MAX`]; one success starts over. After
//! [`STUCK_AFTER`] failures in a row the work is stuck: logged at warn (once, and at the first
//! failure; the others at debug), and a stuck PG says so in `basalt pg ls` and
//! `basalt status`, with why (`wire::PgTrouble`).

use std::cell::Cell;
use std::time::Duration;

use tokio::time::Instant;
use wire::PgTrouble;

/// The pause after a first failure.
pub(crate) const FIRST: Duration = Duration::from_millis(200);
/// The longest pause.
pub(crate) const MAX: Duration = Duration::from_secs(10);
/// Failures in a row that make the work stuck: about 6 s of trying.
pub(crate) const STUCK_AFTER: u32 = wire::PgReport::STUCK_AFTER_FAILURES;

/// The pause before the next attempt after `failures` failures in a row.
pub(crate) fn pause_after(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    (FIRST * (1 << doublings)).min(MAX)
}

/// How one failure in a row should be logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loudness {
    /// The first failure, or the one that makes the work stuck: warn.
    Warn,
    /// Any other: debug.
    Debug,
}

impl Loudness {
    pub(crate) fn of(failures: u32) -> Loudness {
        if failures == STUCK_AFTER {
            stdx::coverage::mark("retry: work failed often enough in a row to be stuck");
        }
        if failures == 1 || failures == STUCK_AFTER {
            Loudness::Warn
        } else {
            Loudness::Debug
        }
    }
}

/// Failures in a row of one piece of work, why the last one failed, and when to try again.
pub(crate) struct Attempts {
    failures: Cell<u32>,
    trouble: Cell<PgTrouble>,
    next: Cell<Instant>,
}

impl Default for Attempts {
    fn default() -> Attempts {
        Attempts { failures: Cell::new(0), trouble: Cell::new(PgTrouble::None), next: Cell::new(Instant::now()) }
    }
}

impl Attempts {
    /// Records a failure: the pause before the next attempt, and how loudly to log it.
    pub(crate) fn failed(&self, trouble: PgTrouble) -> (Duration, Loudness) {
        assert_ne!(trouble, PgTrouble::None, "a failure names its trouble");
        let failures = self.failures.get().saturating_add(1);
        self.failures.set(failures);
        self.trouble.set(trouble);
        let pause = pause_after(failures);
        self.next.set(Instant::now() + pause);
        (pause, Loudness::of(failures))
    }

    /// Records a success: the next failure is a first one again.
    pub(crate) fn succeeded(&self) {
        self.failures.set(0);
        self.trouble.set(PgTrouble::None);
    }

    /// Whether the pause after the last failure is over.
    pub(crate) fn due(&self) -> bool {
        Instant::now() >= self.next.get()
    }

    pub(crate) fn failures(&self) -> u32 {
        self.failures.get()
    }

    pub(crate) fn trouble(&self) -> PgTrouble {
        self.trouble.get()
    }

    pub(crate) fn is_stuck(&self) -> bool {
        self.failures.get() >= STUCK_AFTER
    }
}

/// Failures in a row of work done for many PGs in turn (scrub, stray removal), by PG: when
/// each may be tried again.
#[derive(Default)]
pub(crate) struct PerPg {
    failed: std::cell::RefCell<stdx::HashMap<wire::PgId, (u32, Instant)>>,
}

impl PerPg {
    /// Whether `pg`'s pause after its last failure is over.
    pub(crate) fn due(&self, pg: wire::PgId) -> bool {
        self.failed.borrow().get(&pg).is_none_or(|&(_, next)| Instant::now() >= next)
    }

    /// Records a failure of `pg`'s work: failures in a row, the pause, and how loudly to log.
    pub(crate) fn failed(&self, pg: wire::PgId) -> (u32, Duration, Loudness) {
        let mut failed = self.failed.borrow_mut();
        let entry = failed.entry(pg).or_insert((0, Instant::now()));
        entry.0 = entry.0.saturating_add(1);
        let pause = pause_after(entry.0);
        entry.1 = Instant::now() + pause;
        (entry.0, pause, Loudness::of(entry.0))
    }

    pub(crate) fn succeeded(&self, pg: wire::PgId) {
        self.failed.borrow_mut().remove(&pg);
    }
}

/// Logs a failure of a PG's work at the level [`Attempts::failed`] chose.
macro_rules! log_failure {
    ($loudness:expr, $($field:tt)+) => {
        match $loudness {
            $crate::pg::retry::Loudness::Warn => tracing::warn!($($field)+),
            $crate::pg::retry::Loudness::Debug => tracing::debug!($($field)+),
        }
    };
}
pub(crate) use log_failure;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_to_a_cap_and_start_over_after_a_success() {
        let pauses: Vec<Duration> = (1..=9).map(pause_after).collect();
        let ms = |ms| Duration::from_millis(ms);
        assert_eq!(pauses, [ms(200), ms(400), ms(800), ms(1600), ms(3200), ms(6400), MAX, MAX, MAX]);
        assert_eq!(pause_after(u32::MAX), MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn stuck_after_five_failures_in_a_row_loud_at_the_first_and_the_fifth() {
        let attempts = Attempts::default();
        let mut loud = Vec::new();
        for failure in 1..=7 {
            let (pause, loudness) = attempts.failed(PgTrouble::Copy);
            assert!(!attempts.due());
            tokio::time::sleep(pause).await;
            assert!(attempts.due());
            if loudness == Loudness::Warn {
                loud.push(failure);
            }
            assert_eq!(attempts.is_stuck(), failure >= STUCK_AFTER);
        }
        assert_eq!(loud, [1, STUCK_AFTER]);
        assert_eq!((attempts.failures(), attempts.trouble()), (7, PgTrouble::Copy));
        attempts.succeeded();
        assert!(!attempts.is_stuck());
        assert_eq!((attempts.failures(), attempts.trouble()), (0, PgTrouble::None));
    }
}
