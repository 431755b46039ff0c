//! `WriteOrder`: which writes are still in flight, in the order they began, so that a flush
//! waits for exactly the writes that began before it.
//!
//! Writes are counted per era. A flush closes the current era (the next write starts a new one)
//! and is done once every write of its era and of earlier eras has ended. The table holds one
//! counter per era still draining, so its size is bounded by the flushes waiting, not by the
//! writes, and a write that ends out of order costs nothing extra.
//!
//! The type only counts; waking the flushes is the caller's (a `Notify` on a runtime, or a
//! simulated scheduler), on the `true` that [`WriteOrder::end`] returns.

use std::collections::VecDeque;

#[derive(Debug)]
pub struct WriteOrder {
    /// The number of the era `counts[0]` counts.
    first: u64,
    /// Writes in flight per era, oldest first; the last is the current era. Never empty.
    counts: VecDeque<u64>,
}

/// Where a flush stands in the order: done once every write before it has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushMark {
    /// The last era the flush waits for; `None` when no write was in flight.
    era: Option<u64>,
}

impl Default for WriteOrder {
    fn default() -> WriteOrder {
        WriteOrder::new()
    }
}

impl WriteOrder {
    pub fn new() -> WriteOrder {
        WriteOrder { first: 0, counts: VecDeque::from([0]) }
    }

    /// Counts a write that begins now; returns its era, which [`WriteOrder::end`] takes back.
    pub fn begin(&mut self) -> u64 {
        *self.counts.back_mut().expect("there is always a current era") += 1;
        self.current_era()
    }

    /// Counts the write of `era` as ended. Returns whether the oldest era drained, so flushes
    /// waiting may be done.
    pub fn end(&mut self, era: u64) -> bool {
        assert!(era >= self.first && era <= self.current_era(), "era {era} is not in flight");
        // Cannot truncate: at most one era per flush waiting.
        let count = &mut self.counts[(era - self.first) as usize];
        assert!(*count > 0, "era {era} has no write in flight");
        *count -= 1;
        let mut drained = false;
        while self.counts.len() > 1 && self.counts[0] == 0 {
            self.counts.pop_front();
            self.first += 1;
            drained = true;
        }
        drained
    }

    /// The mark of a flush that arrives now; writes that begin later do not hold it.
    pub fn flush_mark(&mut self) -> FlushMark {
        if self.counts.iter().all(|&count| count == 0) {
            return FlushMark { era: None };
        }
        let era = self.current_era();
        self.counts.push_back(0);
        FlushMark { era: Some(era) }
    }

    /// Whether every write begun before `mark` was taken has ended.
    pub fn is_flushed(&self, mark: FlushMark) -> bool {
        mark.era.is_none_or(|era| self.first > era)
    }

    /// Writes in flight.
    pub fn in_flight(&self) -> u64 {
        self.counts.iter().sum()
    }

    fn current_era(&self) -> u64 {
        self.first + self.counts.len() as u64 - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_waits_for_earlier_writes_only() {
        let mut order = WriteOrder::new();
        let idle = order.flush_mark();
        assert!(order.is_flushed(idle), "nothing in flight");

        let first = order.begin();
        let second = order.begin();
        let flush = order.flush_mark();
        assert!(!order.is_flushed(flush));
        let later = order.begin();
        assert!(!order.end(second));
        assert!(!order.is_flushed(flush));
        let second_flush = order.flush_mark();
        assert!(order.end(first));
        assert!(order.is_flushed(flush), "a write begun after the flush does not hold it");
        assert!(!order.is_flushed(second_flush), "the second flush waits for the later write");
        assert!(order.end(later));
        assert!(order.is_flushed(second_flush));
        assert_eq!(order.counts, [0]);
        assert_eq!(order.first, 2);
        assert_eq!(order.in_flight(), 0);
    }

    #[test]
    fn eras_stay_bounded_by_the_flushes() {
        let mut order = WriteOrder::new();
        let eras: Vec<u64> = (0..1000).map(|_| order.begin()).collect();
        assert_eq!(order.counts.len(), 1);
        let mark = order.flush_mark();
        for era in eras.into_iter().rev() {
            order.end(era);
        }
        assert!(order.is_flushed(mark));
        assert_eq!(order.counts.len(), 1);
    }

    #[test]
    #[should_panic(expected = "has no write in flight")]
    fn ending_a_write_twice_is_a_bug() {
        let mut order = WriteOrder::new();
        let era = order.begin();
        order.end(era);
        order.end(era);
    }
}
