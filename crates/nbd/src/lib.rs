//! The NBD gateway protocol server (`docs/design/nbd.md`, ADR 0010): serves [`Exports`] to
//! unmodified NBD clients (the kernel's `nbd-client`, qemu, libnbd's tools, fio) over TCP and
//! unix sockets.
//!
//! - [`Server`]: accept loops ([`Server::serve_tcp`], [`Server::serve_unix`]) and the protocol:
//!   fixed newstyle handshake, structured replies, `base:allocation` block status, pipelined
//!   requests answered in completion order.
//! - [`Exports`] and [`Export`]: what is served; every call the server makes is 4 KiB-aligned
//!   and in range. [`ClusterExports`] serves the volumes of a cluster through the client
//!   library (feature `cluster`, on by default).
//! - [`handshake`] and [`request`]: the protocol as pure functions over bytes, which the server
//!   and the fuzz targets share. Hostile bytes never panic them.
//!
//! Clients may send any 512-byte-aligned request; the server serves the partial 4 KiB pages by
//! read-modify-write, serialized per page range across all connections of one [`Server`].

#[cfg(feature = "cluster")]
mod cluster;
mod export;
pub mod handshake;
pub mod limits;
mod ops;
pub mod proto;
mod ranges;
pub mod request;
mod server;

#[cfg(any(test, feature = "fuzz"))]
pub mod fuzz;

#[cfg(test)]
mod tests;

#[cfg(feature = "cluster")]
pub use cluster::{ClusterExports, VolumeExport};
pub use export::{Export, ExportError, Exports, Extent};
pub use server::Server;
