//! Small building blocks that several of Basalt's crates need, with no dependencies and no
//! runtime: deterministic, so the simulator and the engine can use them as the daemons do.
//!
//! - [`SlotTable`]: values in reusable slots, named by ids that carry the slot's generation, so
//!   an id that outlived its value (a late completion, a peer's stale reply) finds nothing.
//! - [`WriteOrder`]: writes in flight numbered in arrival order, so a flush can wait for exactly
//!   the writes that came before it.
//! - [`wall_clock`]: the time of day, which a simulation can replace on its thread.
//! - [`HashMap`], [`HashSet`]: std's, with an iteration order a simulation can fix.
//! - [`coverage`]: marks at rare branches, counted when the simulator runs them.

pub mod coverage;
pub mod hash_map;
mod slot_table;
pub mod wall_clock;
mod write_order;

pub use hash_map::{HashMap, HashSet};
pub use slot_table::SlotTable;
pub use write_order::{FlushMark, WriteOrder};
