//! Bugs a simulation plants on its thread, to show that its checks catch them (ADR 0020,
//! `docs/testing.md`). None is ever planted outside a simulation: a check here is one
//! thread-local read.

use std::cell::Cell;

/// A known bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlantedBug {
    /// The primary acknowledges a write once its own copy is durable, without waiting for the
    /// secondaries (their requests are started and abandoned).
    AckBeforeReplicas,
}

thread_local! {
    static PLANTED: Cell<Option<PlantedBug>> = const { Cell::new(None) };
}

/// Plants `bug` in every OSD on this thread (`None`: none).
pub fn plant(bug: Option<PlantedBug>) {
    PLANTED.with(|planted| planted.set(bug));
}

pub(crate) fn is_planted(bug: PlantedBug) -> bool {
    PLANTED.with(Cell::get) == Some(bug)
}
