//! The simulated time of day: a fixed epoch plus the simulated time since the run began, so that
//! decisions taken on wall-clock time (`down_out_interval`, the scrub schedule) are the same in
//! every run of a seed. Each node's clock may be off and drift (`skew`): the time of day a node
//! reads is its own, as on real machines; spans (tokio's `Instant`) stay the run's.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use net::sim::SimNet;
use tokio::time::Instant;

/// The time of day a run starts at: 2026-01-01 00:00:00 UTC.
const EPOCH_UNIX_S: u64 = 1_767_225_600;

/// How one node's clock differs from the run's: an offset, and a rate off by `drift_ppm`
/// parts per million since `since`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Skew {
    pub(crate) offset_ms: i64,
    pub(crate) drift_ppm: i64,
    pub(crate) since: Instant,
}

thread_local! {
    static STARTED: Cell<Option<Instant>> = const { Cell::new(None) };
    static SKEWS: RefCell<BTreeMap<String, Skew>> = const { RefCell::new(BTreeMap::new()) };
}

fn now() -> SystemTime {
    let since = STARTED.with(Cell::get).map_or(Duration::ZERO, |started| started.elapsed());
    let base = UNIX_EPOCH + Duration::from_secs(EPOCH_UNIX_S) + since;
    let Some(node) = SimNet::current_node() else { return base };
    let Some(skew) = SKEWS.with(|skews| skews.borrow().get(&*node).copied()) else { return base };
    let drifted_ms = i64::try_from(skew.since.elapsed().as_millis()).unwrap_or(i64::MAX) * skew.drift_ppm / 1_000_000;
    let off_ms = skew.offset_ms + drifted_ms;
    if off_ms >= 0 {
        base + Duration::from_millis(off_ms.unsigned_abs())
    } else {
        base - Duration::from_millis(off_ms.unsigned_abs())
    }
}

/// Sets how `node`'s clock is off from now on (replacing what was set before).
pub(crate) fn set_skew(node: &str, skew: Skew) {
    SKEWS.with(|skews| skews.borrow_mut().insert(node.to_string(), skew));
}

/// Makes the simulated clock this thread's time of day; call inside the run's runtime.
pub(crate) fn install() {
    STARTED.with(|started| started.set(Some(Instant::now())));
    stdx::wall_clock::install(now);
}

pub(crate) fn uninstall() {
    STARTED.with(|started| started.set(None));
    SKEWS.with(|skews| skews.borrow_mut().clear());
    stdx::wall_clock::uninstall();
}
