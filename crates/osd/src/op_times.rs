//! `OpTimes`: how many ops of each kind this OSD served and how long they took in all, and the
//! same for the two halves of a replicated write (the local commit, the replicas' round trip).
//!
//! Logged when the OSD stops (`osd stopped ... op_times=`): the means tell where a client's
//! write goes between the wire, the primary, its engine and its replicas
//! (`docs/benchmarks/cluster.md`, "Where a QD1 write's time goes"). A clock read and two adds
//! per op, on the OSD's one thread; nothing reaches the metadata store.

use std::cell::Cell;
use std::fmt;
use std::time::Duration;

/// What is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timed {
    /// A client's read, from its frame's arrival to its reply.
    Read,
    /// A client's write, from its frame's arrival to its reply.
    Write,
    /// A primary's write to this OSD as its member, from arrival to reply.
    SecWrite,
    /// A replicated write's commit in this OSD's own engine, from submission to completion.
    LocalCommit,
    /// A replicated write's sends to its members until the last one's reply.
    Replicas,
}

const KINDS: [(Timed, &str); 5] = [
    (Timed::Read, "read"),
    (Timed::Write, "write"),
    (Timed::SecWrite, "sec_write"),
    (Timed::LocalCommit, "write.local_commit"),
    (Timed::Replicas, "write.replicas"),
];

#[derive(Debug, Default)]
pub(crate) struct OpTimes {
    counts: [Cell<u64>; KINDS.len()],
    total_ns: [Cell<u64>; KINDS.len()],
}

impl OpTimes {
    pub(crate) fn record(&self, timed: Timed, took: Duration) {
        let index = KINDS.iter().position(|(kind, _)| *kind == timed).expect("every kind is listed");
        let took_ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.counts[index].set(self.counts[index].get() + 1);
        self.total_ns[index].set(self.total_ns[index].get().saturating_add(took_ns));
    }
}

/// `read=N/MEAN_us write=...`, for the kinds that happened.
impl fmt::Display for OpTimes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (index, (_, name)) in KINDS.iter().enumerate() {
            let count = self.counts[index].get();
            if count == 0 {
                continue;
            }
            let mean_us = self.total_ns[index].get() as f64 / count as f64 / 1000.0;
            write!(f, "{}{name}={count}/{mean_us:.1}us", if first { "" } else { " " })?;
            first = false;
        }
        if first {
            write!(f, "none")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{OpTimes, Timed};

    #[test]
    fn means_per_kind_and_only_kinds_that_happened() {
        let times = OpTimes::default();
        assert_eq!(times.to_string(), "none");
        times.record(Timed::Write, Duration::from_micros(300));
        times.record(Timed::Write, Duration::from_micros(100));
        times.record(Timed::Replicas, Duration::from_micros(150));
        assert_eq!(times.to_string(), "write=2/200.0us write.replicas=1/150.0us");
    }
}
