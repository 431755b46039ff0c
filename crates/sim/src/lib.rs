//! Deterministic simulations of Basalt's platform, for tests that replay exactly from a seed.
//!
//! Each simulated device implements a `platform` trait and adds what a real one cannot offer:
//! a seeded schedule, injected faults, and a power loss on demand. [`SimDisk`] loses, tears and
//! rots data the way real drives do, so the engine's crash tests can check recovery against it.
//! [`TimedDisk`] gives its requests deadlines on tokio's clock, for whole-cluster simulation
//! (ADR 0020).

mod disk;
mod timed_disk;

pub use disk::{SimDisk, SimDiskFaults, SimDiskOptions};
pub use timed_disk::{TimedDisk, TimedDiskControl, TimedDiskOptions, TimedDiskReady};
