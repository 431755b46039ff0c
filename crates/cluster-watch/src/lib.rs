//! A running process's view of the cluster.
//!
//! - [`connect`]: reaching the metadata store from a URL (etcd or an embedded store served by a mon).
//! - [`map`]: loading the [`cluster::ClusterMap`] at one revision, and [`MapWatcher`], which keeps it
//!   current by list-then-watch.
//!
//! The records, keys and the map's own rules live in `cluster`, which has no runtime and never
//! touches the store; this crate is where the store and tokio come in.

pub mod connect;
pub mod map;

pub use connect::{connect, MetaUrl};
pub use map::{load, MapWatcher};
