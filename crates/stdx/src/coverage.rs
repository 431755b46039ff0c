//! Coverage marks: a name at a rare branch (a peering that discards copies, a copy refused for
//! a newer version), counted when the branch runs, so a test can show that the simulator
//! reaches it. Counted only with the `coverage-marks` feature, which the simulator enables;
//! otherwise [`mark`] is empty and the daemons pay nothing for it.
//!
//! A mark's name is a string literal at its one call site (`stdx::coverage::mark("...")`): the
//! coverage test finds every mark by reading the sources, so a new mark is required at once.

#[cfg(feature = "coverage-marks")]
static HITS: std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Counts one pass through the branch named `name`.
#[inline(always)]
pub fn mark(name: &'static str) {
    #[cfg(feature = "coverage-marks")]
    {
        *HITS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(name).or_default() += 1;
    }
    let _ = name;
}

/// Every mark hit in this process so far, with its count.
#[cfg(feature = "coverage-marks")]
pub fn hits() -> std::collections::BTreeMap<&'static str, u64> {
    HITS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}
