//! The Basalt client library: block I/O on volumes, spread over the OSDs of the cluster
//! (`docs/design/client.md`, ADR 0007).
//!
//! A [`Client`] follows the cluster map in the metadata store and keeps one pipelined
//! [`net::Connection`] per OSD, shared by every [`Volume`] it opens. A volume call is cut into
//! per-object pieces (`cluster::layout::split`), each piece goes to the primary of its PG as one
//! wire request carrying the PG's epoch, and the pieces of one call run concurrently. When a PG
//! moves (`NotPrimary`, `WrongEpoch`), is busy, or its primary cannot be reached, the piece waits
//! for a newer map and retries with backoff, through failovers, for as long as the PG takes to
//! serve again or until [`ClientOptions::io_timeout`].
//!
//! Writes are durable when they return `Ok` (the OSDs acknowledge only durable writes), so
//! [`Volume::flush`] only waits for the writes issued before it. Reads always go to the OSDs;
//! nothing is cached.
//!
//! ```no_run
//! # async fn example() -> Result<(), client::ClientError> {
//! let client = client::Client::connect("http://127.0.0.1:2379").await?;
//! let volume = client.open_volume("db1").await?;
//! volume.write(0, bytes::Bytes::from(vec![0xab; 4096])).await?;
//! assert_eq!(volume.read(0, 4096).await?, vec![0xab; 4096]);
//! # Ok(())
//! # }
//! ```

mod client;
mod error;
mod route;
mod tracker;
mod volume;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

pub use client::Client;
pub use error::{ClientError, Operation};
pub use volume::Volume;

/// The unit of every offset and length: the engine's page, and the block size the NBD gateway
/// advertises.
pub const BLOCK_SIZE_BYTES: u64 = types::PAGE_SIZE_BYTES as u64;

/// Pieces of one call in flight at once; a longer call (a large trim) proceeds as they finish.
pub const PIECES_IN_FLIGHT_MAX: usize = 64;
/// Objects one `Volume::allocation` call asks about (a block-status query may get a prefix).
pub const ALLOCATION_OBJECTS_MAX: usize = 1024;

pub use net::DownReporter;

/// Tuning of a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// How long a piece of a call may wait, in total, for its PG to get a primary that serves
    /// it (across map changes, busy replies and reconnects) before the call fails with
    /// [`ClientError::Unavailable`]; `None` waits for as long as it takes.
    pub io_timeout: Option<Duration>,
    /// How long one attempt waits for its reply before the connection is closed and the piece
    /// tried again (a connection that died without a sign).
    pub reply_timeout: Duration,
    /// The first pause between attempts; it doubles up to `retry_backoff_max`. A pause waiting
    /// for a newer map ends as soon as the map changes.
    pub retry_backoff_min: Duration,
    pub retry_backoff_max: Duration,
    /// How long opening a connection to an OSD may take.
    pub connect_timeout: Duration,
    /// How long a call may poll for its reply instead of sleeping, on connections whose round
    /// trips average within it (adaptive polling, `net::Connection::set_spin_limit`); zero
    /// never polls. Polls only on a `current_thread` runtime.
    pub spin_limit: Duration,
    /// Who hears of OSDs whose connections are refused; `None` tells no one.
    pub down_reporter: Option<Arc<dyn DownReporter>>,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            io_timeout: None,
            reply_timeout: Duration::from_secs(30),
            retry_backoff_min: Duration::from_millis(1),
            retry_backoff_max: Duration::from_millis(500),
            connect_timeout: Duration::from_secs(3),
            spin_limit: Duration::ZERO,
            down_reporter: None,
        }
    }
}
