//! How fast recovery goes and when it will be done, from the backlogs the primaries report at
//! each status (`docs/design/backfill.md`).
//!
//! Each primary paces its own copies (`osd::pacer`), so the cluster's backlog drains as a sum of
//! per-primary streams that end one by one: the total rate falls as primaries finish, and a
//! single rate over the total says too little time. Each primary's rate is taken over the last
//! [`WINDOW`] of its own backlog (never before the backlog was last at its largest, and so not
//! over the burst a copy starts with once the window has passed it), and the time left is the
//! longest of the primaries' own.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

/// How far back a primary's rate looks.
pub(crate) const WINDOW: Duration = Duration::from_secs(30);
/// The shortest span a rate is taken over.
const SPAN_MIN: Duration = Duration::from_secs(1);

/// What the estimator concludes at one status.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Estimate {
    /// The sum of the primaries' rates; `None` before any made progress over `SPAN_MIN`.
    pub bytes_per_s: Option<f64>,
    pub seconds_left: Option<f64>,
}

/// The primaries' recent backlogs.
#[derive(Debug, Default)]
pub(crate) struct RecoveryRate {
    backlogs: BTreeMap<u32, VecDeque<(Instant, u64)>>,
}

impl RecoveryRate {
    /// Takes each primary's bytes left at `now` (primaries with nothing left may be absent).
    pub(crate) fn observe(&mut self, now: Instant, left: &BTreeMap<u32, u64>) -> Estimate {
        self.backlogs.retain(|primary, _| left.get(primary).is_some_and(|&bytes| bytes > 0));
        let mut rates = BTreeMap::new();
        for (&primary, &bytes) in left.iter().filter(|(_, &bytes)| bytes > 0) {
            let samples = self.backlogs.entry(primary).or_default();
            // A backlog that grew starts over: the time before it says nothing of what is left.
            if samples.iter().any(|&(_, earlier)| earlier < bytes) {
                samples.clear();
            }
            samples.push_back((now, bytes));
            while samples.len() > 1 && now.duration_since(samples[1].0) >= WINDOW {
                samples.pop_front();
            }
            let (since, then) = samples[0];
            let span = now.duration_since(since);
            if span >= SPAN_MIN && then > bytes {
                rates.insert(primary, (then - bytes) as f64 / span.as_secs_f64());
            }
        }
        if rates.is_empty() {
            return Estimate { bytes_per_s: None, seconds_left: None };
        }
        let total: f64 = rates.values().sum();
        // A primary that has not moved yet is taken to go at the others' mean.
        let mean = total / rates.len() as f64;
        let seconds_left = left
            .iter()
            .filter(|(_, &bytes)| bytes > 0)
            .map(|(primary, &bytes)| bytes as f64 / rates.get(primary).copied().unwrap_or(mean))
            .fold(0.0, f64::max);
        Estimate { bytes_per_s: Some(total), seconds_left: Some(seconds_left) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn at(start: Instant, seconds: u64) -> Instant {
        start + Duration::from_secs(seconds)
    }

    #[test]
    fn the_time_left_is_the_slowest_primarys_not_the_total_over_the_total_rate() {
        let start = Instant::now();
        let mut rate = RecoveryRate::default();
        // osd 1 copies 100 MiB at 10 MiB/s, osd 2 100 MiB at 1 MiB/s.
        let left = |seconds: u64| BTreeMap::from([(1, (100 - 10 * seconds.min(10)) * MIB), (2, (100 - seconds) * MIB)]);
        assert_eq!(rate.observe(start, &left(0)).seconds_left, None, "no progress seen yet");
        let estimate = rate.observe(at(start, 5), &left(5));
        assert!((estimate.bytes_per_s.unwrap() - 11.0 * MIB as f64).abs() < 1.0);
        // 95 MiB left at osd 2's 1 MiB/s; the total over the total rate would say 13 s.
        assert!((estimate.seconds_left.unwrap() - 95.0).abs() < 0.01, "{estimate:?}");
        // osd 1 is done: only osd 2's stream is left.
        let estimate = rate.observe(at(start, 20), &left(20));
        assert!((estimate.bytes_per_s.unwrap() - MIB as f64).abs() < 1.0, "{estimate:?}");
        assert!((estimate.seconds_left.unwrap() - 80.0).abs() < 0.01);
    }

    #[test]
    fn a_starting_burst_leaves_the_rate_once_the_window_has_passed_it() {
        let start = Instant::now();
        let mut rate = RecoveryRate::default();
        // 50 MiB in the first second, then 1 MiB/s.
        let left = |seconds: u64| if seconds == 0 { 500 * MIB } else { (450 - (seconds - 1)) * MIB };
        let mut estimate = rate.observe(start, &BTreeMap::from([(3, left(0))]));
        for second in 1..=61 {
            estimate = rate.observe(at(start, second), &BTreeMap::from([(3, left(second))]));
            if second == 10 {
                assert!(estimate.bytes_per_s.unwrap() > 5.0 * MIB as f64, "the burst is still in the window");
            }
        }
        assert!((estimate.bytes_per_s.unwrap() - MIB as f64).abs() < 1.0, "{estimate:?}");
        assert!((estimate.seconds_left.unwrap() - 390.0).abs() < 0.01);
    }

    #[test]
    fn a_backlog_that_grows_starts_over_and_a_new_primary_takes_the_mean() {
        let start = Instant::now();
        let mut rate = RecoveryRate::default();
        rate.observe(start, &BTreeMap::from([(1, 10 * MIB)]));
        assert!(rate.observe(at(start, 2), &BTreeMap::from([(1, 8 * MIB)])).bytes_per_s.is_some());
        // More to copy (another change): no rate until it moves again.
        let estimate = rate.observe(at(start, 3), &BTreeMap::from([(1, 20 * MIB)]));
        assert_eq!(estimate, Estimate { bytes_per_s: None, seconds_left: None });
        // osd 2 appears with 40 MiB and no progress: it goes at osd 1's rate, 2 MiB/s.
        let estimate = rate.observe(at(start, 5), &BTreeMap::from([(1, 16 * MIB), (2, 40 * MIB)]));
        assert!((estimate.seconds_left.unwrap() - 20.0).abs() < 0.01, "{estimate:?}");
        // Everything copied.
        let estimate = rate.observe(at(start, 6), &BTreeMap::new());
        assert_eq!(estimate.seconds_left, None);
    }
}
