//! The life of the PGs this OSD serves, apart from the requests that read and write their data
//! (`ops/`): what the OSD knows of each PG it leads (`state.rs`) and their history records in
//! the store (`history.rs`); bringing a PG up after its acting set changed (`peering.rs`);
//! copying objects to members that lack them (`recovery.rs`); comparing and repairing copies
//! (`scrub.rs`); freeing copies of PGs this OSD no longer belongs to (`stray.rs`); and the one
//! retry policy they share (`retry.rs`).
//!
//! Each is a set of methods of [`crate::ops::Osd`], run as tasks on the OSD's thread.

pub(crate) mod history;
pub(crate) mod peering;
pub(crate) mod recovery;
pub(crate) mod retry;
pub(crate) mod scrub;
pub(crate) mod state;
mod stray;
