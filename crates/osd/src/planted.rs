//! Bugs a simulation plants on its thread, to show that its checks catch them (ADR 0020,
//! `docs/testing.md`). Only a build with the `planted` feature (the simulator's) can plant one:
//! there a check is one thread-local read, and elsewhere it is `false`, known at compile time.

#[cfg(feature = "planted")]
use std::cell::Cell;

/// A known bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlantedBug {
    /// The primary acknowledges a write once its own copy is durable, without waiting for the
    /// secondaries (their requests are started and abandoned).
    AckBeforeReplicas,
    /// A primary catching a member up copies only the objects the member lacks, not those it
    /// holds at an older version: the member keeps stale copies, which only a read after a
    /// failover, or a comparison of the replicas, sees.
    CatchUpSkipsStaleCopies,
    /// A whole copy to a member (recovery, backfill, peering) sends every page as holding data:
    /// the member holds zeros written where the object holds no page, which a layer would read
    /// instead of falling through to its parent.
    CopyDropsThePageMask,
}

impl PlantedBug {
    /// Every bug, with the name a replay names it by.
    pub const ALL: [(PlantedBug, &'static str); 3] = [
        (PlantedBug::AckBeforeReplicas, "ack-before-replicas"),
        (PlantedBug::CatchUpSkipsStaleCopies, "catch-up-skips-stale-copies"),
        (PlantedBug::CopyDropsThePageMask, "copy-drops-the-page-mask"),
    ];

    pub fn name(self) -> &'static str {
        PlantedBug::ALL.iter().find(|(bug, _)| *bug == self).map(|(_, name)| *name).expect("every bug is named")
    }

    pub fn from_name(name: &str) -> Option<PlantedBug> {
        PlantedBug::ALL.iter().find(|(_, known)| *known == name).map(|(bug, _)| *bug)
    }
}

#[cfg(feature = "planted")]
thread_local! {
    static PLANTED: Cell<Option<PlantedBug>> = const { Cell::new(None) };
}

/// Plants `bug` in every OSD on this thread (`None`: none).
#[cfg(feature = "planted")]
pub fn plant(bug: Option<PlantedBug>) {
    PLANTED.with(|planted| planted.set(bug));
}

#[cfg(feature = "planted")]
pub(crate) fn is_planted(bug: PlantedBug) -> bool {
    PLANTED.with(Cell::get) == Some(bug)
}

#[cfg(not(feature = "planted"))]
pub(crate) fn is_planted(_bug: PlantedBug) -> bool {
    false
}
