//! Pacing the copies recovery, backfill and scrub make against this OSD's client I/O
//! (`docs/design/backfill.md`, "Pacing").
//!
//! Every background copy asks for a [`Permit`] with its priority and size. Permits go out in
//! priority order (FIFO among equals, so every PG waiting gets its turn and every drive
//! works), at most `recovery_in_flight_max` at once, and at a byte rate a controller sets every
//! [`TICK`]:
//! - no client op in the last tick: the rate is `recovery_bytes_per_s_max` (idle clients get
//!   full-speed recovery);
//! - the tick's tail latency (its 99th percentile, the slowest op with few ops) above
//!   `recovery_latency_ratio_percent` of the client's usual tail (the fifth best tick of the
//!   last [`BASELINE_WINDOW`]): the rate halves;
//! - otherwise, if the rate held a copy back during the tick, it grows by
//!   `recovery_bytes_per_s_min`;
//! - otherwise (copies used less than the rate allowed, or none ran) it falls to twice what
//!   copies used, at most halving per tick: a rate that nothing used is not known to be safe for
//!   the clients, and copies starting under client load start low and climb (as TCP does not
//!   grow a window its sender does not fill, RFC 7661);
//! - never below `recovery_bytes_per_s_min`: recovery slows, it never stops.
//!
//! The tail, not the mean, is the signal: a copy delays the few client ops that meet it on the
//! drive, which barely moves the mean. Client ops are the reads and writes this OSD serves as a
//! primary, timed from admission to reply. The settings come from the cluster map, so
//! `basalt config set` changes them live.

use std::cell::RefCell;
use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use cluster::SettingsRecord;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How often the controller sets the rate.
pub(crate) const TICK: Duration = Duration::from_millis(100);
/// The shortest wait for tokens: tokio's timers fire on whole milliseconds.
const MIN_WAIT: Duration = Duration::from_millis(1);
/// The span whose good ticks are the client's usual tail latency.
const BASELINE_WINDOW: Duration = Duration::from_secs(30);
/// Which of the window's ticks, best first, is the usual tail: not the very best, which noise
/// makes too low to meet.
const BASELINE_RANK: usize = 4;
/// Client op latencies a tick keeps for its percentile.
const TICK_SAMPLES_MAX: usize = 4096;

/// What a copy is for, most urgent first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Priority {
    /// Objects of a PG whose complete members are down to `min_size`: one more loss and it
    /// stops serving.
    AtMinSize,
    /// Objects with fewer complete copies than the pool's size.
    Degraded,
    /// Objects every target member does not hold yet, with enough copies on old members.
    Misplaced,
    /// Scrub's reads.
    Scrub,
    /// A volume's head filled from the layers below it (`basalt volume flatten`).
    Flatten,
}

#[derive(Debug)]
struct State {
    rate_bytes_per_s: f64,
    /// Bytes that may go out now; negative after a large copy (a debt paid by waiting).
    tokens: f64,
    refilled_at: Instant,
    in_flight: usize,
    waiting: BTreeSet<(Priority, u64)>,
    next_ticket: u64,
    /// This tick's client op latencies (the first [`TICK_SAMPLES_MAX`]).
    tick_latencies: Vec<Duration>,
    /// The tail latency of recent ticks that had client ops.
    recent: VecDeque<(Instant, Duration)>,
    settings: SettingsRecord,
    /// Bytes granted since the OSD started.
    granted_bytes: u64,
    /// Bytes granted since the last tick.
    tick_granted_bytes: u64,
    /// A copy waited for tokens since the last tick: the rate, not the work, was the limit.
    tick_limited: bool,
}

pub(crate) struct Pacer {
    state: RefCell<State>,
    changed: Notify,
}

/// One admitted copy; the slot is free again when it drops.
pub(crate) struct Permit<'a> {
    pacer: &'a Pacer,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.pacer.state.borrow_mut().in_flight -= 1;
        self.pacer.changed.notify_waiters();
    }
}

/// A place in the queue, given up if the waiting copy is dropped.
struct Waiting<'a> {
    pacer: &'a Pacer,
    key: (Priority, u64),
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.pacer.state.borrow_mut().waiting.remove(&self.key);
        self.pacer.changed.notify_waiters();
    }
}

impl Pacer {
    pub(crate) fn new(settings: SettingsRecord) -> Pacer {
        let rate = max_rate(&settings);
        Pacer {
            state: RefCell::new(State {
                rate_bytes_per_s: rate,
                tokens: 0.0,
                refilled_at: Instant::now(),
                in_flight: 0,
                waiting: BTreeSet::new(),
                next_ticket: 0,
                tick_latencies: Vec::with_capacity(TICK_SAMPLES_MAX),
                recent: VecDeque::new(),
                settings,
                granted_bytes: 0,
                tick_granted_bytes: 0,
                tick_limited: false,
            }),
            changed: Notify::new(),
        }
    }

    /// How many copies may be in flight at once (`recovery_in_flight_max`).
    pub(crate) fn in_flight_max(&self) -> usize {
        self.state.borrow().settings.recovery_in_flight_max.max(1) as usize
    }

    /// Waits for the turn of a copy of `bytes` at `priority`.
    pub(crate) async fn admit(&self, priority: Priority, bytes: u64) -> Permit<'_> {
        let key = {
            let mut state = self.state.borrow_mut();
            state.next_ticket += 1;
            let key = (priority, state.next_ticket);
            state.waiting.insert(key);
            key
        };
        let _waiting = Waiting { pacer: self, key };
        loop {
            let changed = self.changed.notified();
            let wait = {
                let mut state = self.state.borrow_mut();
                state.refill(Instant::now());
                let first = state.waiting.first() == Some(&key);
                let slots = state.in_flight < state.settings.recovery_in_flight_max.max(1) as usize;
                if first && slots && state.tokens >= 0.0 {
                    state.tokens -= bytes as f64;
                    state.in_flight += 1;
                    state.granted_bytes += bytes;
                    state.tick_granted_bytes += bytes;
                    None
                } else if first && slots {
                    state.tick_limited = true;
                    // At least a tick of tokio's timer: a shorter sleep ends at once, and a
                    // deficit of a few bytes would spin until the clock moves (which a paused
                    // clock, as in simulation, never does while a task is ready).
                    Some(Duration::from_secs_f64(-state.tokens / state.rate_bytes_per_s).max(MIN_WAIT))
                } else {
                    Some(Duration::MAX)
                }
            };
            match wait {
                None => {
                    // The next waiter may go too.
                    self.changed.notify_waiters();
                    return Permit { pacer: self };
                }
                Some(Duration::MAX) => changed.await,
                Some(wait) => {
                    tokio::select! {
                        biased;
                        _ = changed => {}
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }

    /// A client op this OSD served as a primary took `latency`.
    pub(crate) fn client_op(&self, latency: Duration) {
        let mut state = self.state.borrow_mut();
        if state.tick_latencies.len() < TICK_SAMPLES_MAX {
            state.tick_latencies.push(latency);
        }
    }

    /// Sets the rate from the last tick's client latency; `settings` are the map's now.
    pub(crate) fn tick(&self, settings: &SettingsRecord) {
        let mut state = self.state.borrow_mut();
        let now = Instant::now();
        state.refill(now);
        state.settings = settings.clone();
        let (max, min) = (max_rate(settings), min_rate(settings));
        let rate = if state.tick_latencies.is_empty() {
            max
        } else {
            let tail = tail(&mut state.tick_latencies);
            state.recent.push_back((now, tail));
            while state.recent.front().is_some_and(|(at, _)| now.duration_since(*at) > BASELINE_WINDOW) {
                state.recent.pop_front();
            }
            let mut ticks: Vec<Duration> = state.recent.iter().map(|(_, tail)| *tail).collect();
            ticks.sort_unstable();
            let usual = ticks[BASELINE_RANK.min(ticks.len() - 1)];
            let limit = usual.mul_f64(f64::from(settings.recovery_latency_ratio_percent.max(100)) / 100.0);
            if tail > limit {
                state.rate_bytes_per_s / 2.0
            } else if state.tick_limited {
                state.rate_bytes_per_s + min
            } else {
                let used = state.tick_granted_bytes as f64 / TICK.as_secs_f64();
                (2.0 * used).max(state.rate_bytes_per_s / 2.0).min(state.rate_bytes_per_s)
            }
        };
        state.rate_bytes_per_s = rate.clamp(min, max);
        state.tick_latencies.clear();
        state.tick_granted_bytes = 0;
        state.tick_limited = false;
        drop(state);
        self.changed.notify_waiters();
    }

    /// The rate now, in bytes per second, and the bytes granted since the OSD started.
    pub(crate) fn figures(&self) -> (u64, u64) {
        let state = self.state.borrow();
        (state.rate_bytes_per_s as u64, state.granted_bytes)
    }
}

impl State {
    fn refill(&mut self, now: Instant) {
        let elapsed = now.duration_since(self.refilled_at).as_secs_f64();
        self.refilled_at = now;
        // At most 20 ms worth saved up: copies go out spread, not in bursts that queue up
        // before clients' ops on the drive.
        let burst = self.rate_bytes_per_s / 50.0;
        self.tokens = (self.tokens + elapsed * self.rate_bytes_per_s).min(burst);
    }
}

/// The 99th percentile of `latencies` (the slowest when there are fewer than 100).
fn tail(latencies: &mut [Duration]) -> Duration {
    latencies.sort_unstable();
    let rank = (latencies.len() * 99).div_ceil(100).saturating_sub(1);
    latencies[rank]
}

fn max_rate(settings: &SettingsRecord) -> f64 {
    (settings.recovery_bytes_per_s_max.max(1) as f64).max(min_rate(settings))
}

fn min_rate(settings: &SettingsRecord) -> f64 {
    settings.recovery_bytes_per_s_min.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> SettingsRecord {
        SettingsRecord {
            recovery_bytes_per_s_max: 100 << 20,
            recovery_bytes_per_s_min: 4 << 20,
            recovery_latency_ratio_percent: 150,
            recovery_in_flight_max: 2,
            ..SettingsRecord::default()
        }
    }

    #[test]
    fn the_rate_backs_off_when_client_latency_rises_and_recovers_when_it_falls() {
        let pacer = Pacer::new(settings());
        let settings = settings();
        assert_eq!(pacer.figures().0, 100 << 20, "idle clients: full speed");
        let tick = |tail_us: u64| {
            // 200 ops, the three slowest at `tail_us`: the tick's 99th percentile.
            for op in 0..200 {
                pacer.client_op(Duration::from_micros(if op < 197 { 150 } else { tail_us }));
            }
            pacer.tick(&settings);
        };
        let limited = || pacer.state.borrow_mut().tick_limited = true;
        // A steady client latency while copies are held back: the rate stays at the maximum.
        for _ in 0..10 {
            limited();
            tick(200);
        }
        assert_eq!(pacer.figures().0, 100 << 20);
        // The tail triples while the mean barely moves: the rate halves, tick after tick, to
        // the minimum and no further.
        let mut last = pacer.figures().0;
        for _ in 0..4 {
            tick(600);
            let rate = pacer.figures().0;
            assert_eq!(rate, last / 2);
            last = rate;
        }
        for _ in 0..10 {
            tick(600);
        }
        assert_eq!(pacer.figures().0, 4 << 20, "never below the minimum");
        // The tail back to normal: the rate climbs by the minimum per tick while it holds
        // copies back; clients gone: full speed at once.
        limited();
        tick(200);
        assert_eq!(pacer.figures().0, 8 << 20);
        pacer.tick(&settings);
        assert_eq!(pacer.figures().0, 100 << 20);
        // Clients busy and no copy: the rate falls by half a tick until the minimum, so that
        // copies starting then start low.
        for expected in [50 << 20, 25 << 20, 12_800 << 10, 6_400 << 10, 4 << 20] {
            tick(200);
            assert_eq!(pacer.figures().0, expected);
        }
        // Copies using less than the rate: it falls to twice what they used.
        for _ in 0..10 {
            limited();
            tick(200);
        }
        assert_eq!(pacer.figures().0, 44 << 20);
        pacer.state.borrow_mut().tick_granted_bytes = 1 << 20;
        tick(200);
        assert_eq!(pacer.figures().0, 22 << 20, "at most halving");
        pacer.state.borrow_mut().tick_granted_bytes = 1 << 20;
        tick(200);
        assert_eq!(pacer.figures().0, 20 << 20, "twice the 10 MiB/s used");
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn permits_go_by_priority_and_rate_and_at_most_in_flight_max_at_once() {
        let pacer = std::rc::Rc::new(Pacer::new(settings()));
        let order = std::rc::Rc::new(RefCell::new(Vec::new()));
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                // Two copies hold both slots.
                let first = pacer.admit(Priority::Misplaced, 1 << 20).await;
                let second = pacer.admit(Priority::Misplaced, 1 << 20).await;
                let mut tasks = Vec::new();
                for (priority, name) in
                    [(Priority::Scrub, "scrub"), (Priority::Misplaced, "misplaced"), (Priority::AtMinSize, "urgent")]
                {
                    let (pacer, order) = (pacer.clone(), order.clone());
                    tasks.push(tokio::task::spawn_local(async move {
                        let _permit = pacer.admit(priority, 1 << 20).await;
                        order.borrow_mut().push(name);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }));
                }
                tokio::task::yield_now().await;
                assert!(order.borrow().is_empty(), "a third copy went while two were in flight");
                drop((first, second));
                for task in tasks {
                    task.await.unwrap();
                }
            })
            .await;
        assert_eq!(*order.borrow(), ["urgent", "misplaced", "scrub"]);
        let (_, granted) = pacer.figures();
        assert_eq!(granted, 5 << 20);
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn copies_go_at_the_rate() {
        let settings = SettingsRecord { recovery_bytes_per_s_max: 10 << 20, ..settings() };
        let pacer = Pacer::new(settings);
        let started = Instant::now();
        for _ in 0..20 {
            drop(pacer.admit(Priority::Degraded, 1 << 20).await);
        }
        // 20 MiB at 10 MiB/s, the first one at once.
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_millis(1850) && elapsed <= Duration::from_millis(2000), "{elapsed:?}");
    }
}
