//! The network front of the embedded store: [`serve`] exposes a store to other processes and
//! [`RemoteMetaStore`] is the `MetaStore` they use.
//!
//! This is how `basalt mon --embedded PATH` shares one store with the OSD processes of a
//! cluster without etcd. It replicates nothing: the store lives on one machine and is
//! unavailable while that process is down. The framing is in [`protocol`].

mod client;
pub mod protocol;
mod server;

pub use client::{RemoteMetaStore, RemoteOptions};
pub use server::{serve, CONNECTIONS_MAX, REQUESTS_IN_FLIGHT_MAX, WATCHES_PER_CONNECTION_MAX};
